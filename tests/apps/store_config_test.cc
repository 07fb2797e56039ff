// The transactional store's configuration (apps/ferry/store_config.h): every
// field of a valid file, the defaults and derived sizes, and a message
// naming the key for each mistake.
#include "store_config.h"

#include <gtest/gtest.h>

#include <string>

#include "ferry/hyperloop/txn.h"
#include "ferry/hyperloop/txn_kv.h"

namespace ferry::apps {
namespace store_config_test {

constexpr const char* kGood = R"(
[store]
name = "orders"
replicas = 2
log_bytes = 131072
db_bytes = 2097152
slots = 2048
key_max = 48
value_max = 512
locks = 32
connect_timeout_ms = 5000

[client]
nicd = "/run/ferry/c.sock"
listen = "10.0.0.1:7600"

[[replica]]
listen = "10.0.0.2:7600"
region = "/dev/shm/orders-0.pm"

[[replica]]
nicd = "/run/ferry/r1.sock"
listen = "10.0.0.3:7600"
)";

TEST(StoreConfig, ParsesEveryField) {
  auto c = parse_store_config(kGood, "good.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const StoreConfig& s = c.value();
  EXPECT_EQ(s.name, "orders");
  EXPECT_EQ(s.txn.log_bytes, 131072u);
  EXPECT_EQ(s.txn.db_bytes, 2097152u);
  EXPECT_FALSE(s.txn.resume);
  EXPECT_EQ(s.kv.slots, 2048u);
  EXPECT_EQ(s.kv.key_max, 48u);
  EXPECT_EQ(s.kv.value_max, 512u);
  EXPECT_EQ(s.kv.locks, 32u);
  EXPECT_EQ(s.connect_timeout_ms, 5000u);
  EXPECT_EQ(s.client.nicd, "/run/ferry/c.sock");
  EXPECT_EQ(s.client.listen, "10.0.0.1:7600");
  ASSERT_EQ(s.replicas.size(), 2u);
  EXPECT_EQ(s.replicas[0].nicd, "/run/ferry/nicd.sock");  // the default
  EXPECT_EQ(s.replicas[0].region, "/dev/shm/orders-0.pm");
  EXPECT_EQ(s.replicas[1].nicd, "/run/ferry/r1.sock");
  EXPECT_EQ(s.replicas[1].region, "");  // anonymous memory
  EXPECT_EQ(s.data_group(), "orders.data");
  EXPECT_EQ(s.lock_group(), "orders.locks");
  EXPECT_EQ(s.read_service(), "txnkv.orders.read");
  // Derived: control block + log + database, rounded up to 4 KiB; the lock
  // words in one page.
  EXPECT_EQ(s.data_options().region_bytes, (64u + 131072u + 2097152u + 4095u) / 4096u * 4096u);
  EXPECT_EQ(s.data_options().replicas, 2u);
  EXPECT_EQ(s.lock_options().region_bytes, 4096u);
  EXPECT_EQ(s.lock_options().replicas, 2u);
  EXPECT_GE(s.lock_options().region_bytes, 8u * hyperloop::txn_kv_lock_words(s.kv));
  // The read service carries the longest key and the largest entry.
  EXPECT_GE(s.read_server_options().max_request_bytes, 32u + 8u + 48u);
  EXPECT_GE(s.read_server_options().max_response_bytes, 24u + 16u + 48u + 512u);
  EXPECT_EQ(s.read_server_info().max_response_bytes, s.read_server_options().max_response_bytes);
}

TEST(StoreConfig, DefaultsAndDerivedSizes) {
  auto c = parse_store_config(R"(
[store]
replicas = 1
locks = 1000
[client]
listen = "127.0.0.1:1"
[[replica]]
listen = "127.0.0.1:2"
)",
                              "defaults.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const StoreConfig& s = c.value();
  EXPECT_EQ(s.name, "s0");
  EXPECT_EQ(s.kv.slots, 1024u);
  EXPECT_EQ(s.kv.key_max, 32u);
  EXPECT_EQ(s.kv.value_max, 256u);
  EXPECT_EQ(s.txn.log_bytes, 64u << 10);
  EXPECT_EQ(s.txn.db_bytes, hyperloop::txn_kv_db_bytes(s.kv));  // what the table needs
  EXPECT_EQ(s.connect_timeout_ms, 30000u);
  EXPECT_EQ(s.client.nicd, "/run/ferry/nicd.sock");
  EXPECT_EQ(s.lock_options().region_bytes, 8192u);  // 1,001 words need a second page
  EXPECT_EQ(s.data_options().region_bytes % 4096u, 0u);
  // No [membership]: recovery off, no spares, the default ids.
  EXPECT_FALSE(s.recovery);
  EXPECT_TRUE(s.spares.empty());
  EXPECT_EQ(s.replicas[0].id, "r0");
}

TEST(StoreConfig, MembershipAndSpares) {
  auto c = parse_store_config(R"(
[store]
name = "orders"
replicas = 2
[membership]
etcd = "http://127.0.0.1:2379"
[client]
listen = "127.0.0.1:1"
[[replica]]
listen = "127.0.0.1:2"
[[replica]]
id = "west"
listen = "127.0.0.1:3"
[[spare]]
listen = "127.0.0.1:4"
region = "/dev/shm/spare.pm"
[[spare]]
id = "east.1"
nicd = "/run/ferry/s.sock"
listen = "127.0.0.1:5"
)",
                              "spares.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const StoreConfig& s = c.value();
  EXPECT_TRUE(s.recovery);
  EXPECT_EQ(s.membership.etcd, "http://127.0.0.1:2379");
  EXPECT_EQ(s.membership.cluster, "ferry");  // the defaults
  EXPECT_EQ(s.membership.heartbeat_ms, 100u);
  EXPECT_EQ(s.membership.missed_beats, 5u);
  EXPECT_EQ(s.replicas[0].id, "r0");
  EXPECT_EQ(s.replicas[1].id, "west");
  ASSERT_EQ(s.spares.size(), 2u);
  EXPECT_EQ(s.spares[0].id, "spare0");
  EXPECT_EQ(s.spares[0].region, "/dev/shm/spare.pm");
  EXPECT_EQ(s.spares[0].nicd, "/run/ferry/nicd.sock");
  EXPECT_EQ(s.spares[1].id, "east.1");
  EXPECT_EQ(s.spares[1].nicd, "/run/ferry/s.sock");
  EXPECT_EQ(s.member("east.1"), &s.spares[1]);
  EXPECT_EQ(s.member("west"), &s.replicas[1]);
  EXPECT_EQ(s.member("nobody"), nullptr);
  // View 1 keeps the group names of a store without recovery; later views
  // carry their version, so an old member never reaches a new chain.
  EXPECT_EQ(s.data_group(1), "orders.data");
  EXPECT_EQ(s.data_group(3), "orders.data.v3");
  EXPECT_EQ(s.lock_group(2), "orders.locks.v2");
  EXPECT_EQ(s.view_key(), "/ferry/ferry/chains/orders/view");
  EXPECT_EQ(s.beats_prefix(), "/ferry/ferry/chains/orders/beats/");
  EXPECT_EQ(s.copy_service(), "store.orders.copy");

  auto tuned = parse_store_config(R"(
[store]
replicas = 2
[membership]
etcd = "http://10.0.0.9:2379"
cluster = "prod"
heartbeat_ms = 20
missed_beats = 3
[client]
listen = "127.0.0.1:1"
[[replica]]
listen = "127.0.0.1:2"
[[replica]]
listen = "127.0.0.1:3"
)",
                                  "tuned.toml");
  ASSERT_TRUE(tuned.ok()) << tuned.status().to_string();
  EXPECT_EQ(tuned->membership.cluster, "prod");
  EXPECT_EQ(tuned->membership.heartbeat_ms, 20u);
  EXPECT_EQ(tuned->membership.missed_beats, 3u);
  EXPECT_EQ(tuned->view_key(), "/ferry/prod/chains/s0/view");
}

// Each mistake, and the words its message must contain.
TEST(StoreConfig, MistakesAreNamed) {
  const std::string members = R"(
[client]
listen = "127.0.0.1:1"
[[replica]]
listen = "127.0.0.1:2"
[[replica]]
listen = "127.0.0.1:3"
)";
  const struct {
    std::string text;
    const char* words;
  } cases[] = {
      {"[store]\nreplicas = 3\n" + members, "store.replicas = 3 but 2 [[replica]] tables"},
      {"[store]\n" + members, "store.replicas is missing"},
      {"[store]\nreplicas = 8\n" + members, "store.replicas = 8 is outside"},
      {"[store]\nreplicas = 2\nname = \"a b\"\n" + members, "store.name 'a b'"},
      {"[store]\nreplicas = 2\nlog_bytes = 4100\n" + members, "store.log_bytes = 4100 must be a multiple of 64"},
      {"[store]\nreplicas = 2\nlog_bytes = 1024\n" + members, "store.log_bytes = 1024 is outside"},
      {"[store]\nreplicas = 2\nlog_bytes = 4096\nvalue_max = 4096\n" + members, "store.log_bytes = 4096 is too small"},
      {"[store]\nreplicas = 2\ndb_bytes = 4096\n" + members, "store.db_bytes = 4096 is smaller than the table needs"},
      {"[store]\nreplicas = 2\nkey_max = 0\n" + members, "store.key_max = 0 is outside"},
      {"[store]\nreplicas = 2\nvalue_max = \"big\"\n" + members, "store.value_max must be an integer"},
      {"[store]\nreplicas = 2\nlocks = 0\n" + members, "store.locks = 0 is outside"},
      {"[store]\nreplicas = 2\nslots = 0\n" + members, "store.slots = 0 is outside"},
      {"[store]\nreplicas = 2\nring_ops = 8\n" + members, "unknown key 'ring_ops' in [store]"},
      {members, "the [store] table is missing"},
      {"[store]\nreplicas = 1\n[[replica]]\nlisten = \"127.0.0.1:2\"\n", "the [client] table is missing"},
      {"[store]\nreplicas = 1\n[client]\nlisten = \"127.0.0.1:1\"\n", "no [[replica]] tables"},
      {"[store]\nreplicas = 1\n[client]\nlisten = \"127.0.0.1:1\"\n[[replica]]\nlisten = \"nowhere\"\n",
       "replica[0].listen 'nowhere' must be an IPv4 address"},
      {"[store]\nreplicas = 1\n[client]\nlisten = \"127.0.0.1:1\"\nregion = \"/a\"\n[[replica]]\nlisten = \"127.0.0.1:2\"\n",
       "unknown key 'region' in client"},
      {"[store]\nreplicas = 2\n[client]\nlisten = \"127.0.0.1:1\"\n[[replica]]\nlisten = \"127.0.0.1:2\"\n"
       "[[replica]]\nlisten = \"127.0.0.1:2\"\n",
       "replica[1].listen '127.0.0.1:2' is replica[0]'s too"},
      {"[store\n", "bad.toml:1"},
      // [membership] and [[spare]]
      {"[store]\nreplicas = 2\n" + members + "[[spare]]\nlisten = \"127.0.0.1:9\"\n",
       "[[spare]] tables need a [membership] table"},
      {"[store]\nreplicas = 2\n[membership]\ncluster = \"x\"\n" + members, "membership.etcd is missing"},
      {"[store]\nreplicas = 1\n[client]\nlisten = \"127.0.0.1:1\"\n[[replica]]\nlisten = \"127.0.0.1:2\"\n"
       "[membership]\netcd = \"http://e:1\"\n",
       "membership needs store.replicas >= 2"},
      {"[store]\nreplicas = 2\n[membership]\netcd = \"127.0.0.1:2379\"\n" + members,
       "membership.etcd '127.0.0.1:2379' must be an etcd endpoint http://HOST:PORT"},
      {"[store]\nreplicas = 2\n[membership]\netcd = \"http://e:1\"\nheartbeat_ms = 0\n" + members,
       "membership.heartbeat_ms = 0 is outside"},
      {"[store]\nreplicas = 2\n[membership]\netcd = \"http://e:1\"\nmissed_beats = 5000\n" + members,
       "membership.missed_beats = 5000 is outside"},
      {"[store]\nreplicas = 2\n[membership]\netcd = \"http://e:1\"\nlease = 3\n" + members,
       "unknown key 'lease' in [membership]"},
      {"[store]\nreplicas = 2\n[membership]\netcd = \"http://e:1\"\ncluster = \"a/b\"\n" + members,
       "membership.cluster"},
      {"[store]\nreplicas = 2\n[membership]\netcd = \"http://e:1\"\n" + members +
           "[[spare]]\nlisten = \"127.0.0.1:3\"\n",
       "spare[0].listen '127.0.0.1:3' is replica[1]'s too"},
      {"[store]\nreplicas = 2\n[membership]\netcd = \"http://e:1\"\n" + members +
           "[[spare]]\nid = \"r1\"\nlisten = \"127.0.0.1:9\"\n",
       "spare[0].id 'r1' is replica[1]'s too"},
      {"[store]\nreplicas = 2\n[membership]\netcd = \"http://e:1\"\n" + members +
           "[[spare]]\nid = \"a b\"\nlisten = \"127.0.0.1:9\"\n",
       "spare[0].id"},
      {"[store]\nreplicas = 2\n[membership]\netcd = \"http://e:1\"\n" + members + "[spare]\nlisten = \"x\"\n",
       "spare must be an array of tables"},
  };
  for (const auto& c : cases) {
    auto r = parse_store_config(c.text, "bad.toml");
    ASSERT_FALSE(r.ok()) << "accepted:\n" << c.text;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find(c.words), std::string::npos)
        << "message: " << r.status().message() << "\nwanted: " << c.words;
    EXPECT_NE(r.status().message().find("bad.toml"), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(load_store_config("/nonexistent/store.toml").status().code(), Code::kNotFound);
}

}  // namespace store_config_test
}  // namespace ferry::apps
