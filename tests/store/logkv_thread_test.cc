// LogKv, the RAMCloud-like store on Tailwind: the KV semantics through the
// RPC path, log cleaning that keeps every live object, and the recovery of
// a crashed server's tablets from its backups -- in both replication modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ferry/common/rng.h"
#include "ferry/store/logkv.h"
#include "test_seed.h"

namespace ferry::store::logkv {
namespace logkv_test {

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
std::string as_string(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

ClusterOptions small_cluster(tailwind::Replication mode) {
  ClusterOptions o;
  o.servers = 3;
  o.server.replicas = 2;
  o.server.workers = 1;
  o.server.replication = mode;
  o.server.segment_bytes = 64 << 10;
  o.server.backup_buffers = 16;
  o.server.clean_below = 0.6;
  return o;
}

// What the test believes is stored: key -> (version, value); absent = deleted.
using Model = std::map<std::string, std::pair<uint64_t, std::string>>;

void expect_matches(Client& client, uint64_t table, const Model& model, const std::vector<std::string>& deleted) {
  for (const auto& [key, vv] : model) {
    auto got = client.get(0, table, as_bytes(key));
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().to_string();
    EXPECT_EQ(got->version, vv.first) << key;
    EXPECT_EQ(as_string(got->value), vv.second) << key;
  }
  for (const auto& key : deleted) {
    if (model.count(key) != 0) continue;
    auto got = client.get(0, table, as_bytes(key));
    EXPECT_EQ(got.status().code(), Code::kNotFound) << key << " came back";
  }
}

// One random write of the tests' workloads: a DELETE of a key the model
// holds (one time in `delete_one_in`), else a PUT of a random-size value;
// the model follows what was acknowledged.
struct RandomWriter {
  Client& client;
  uint64_t table;
  Rng& rng;
  Model& model;
  std::vector<std::string>& deleted;
  uint64_t keys;
  uint64_t delete_one_in;
  uint64_t min_value_bytes;
  uint64_t value_spread;

  ::testing::AssertionResult write() {
    const std::string key = "key-" + std::to_string(rng.below(keys));
    if (rng.below(delete_one_in) == 0 && model.count(key) != 0) {
      const Status removed = client.remove(0, table, as_bytes(key));
      if (!removed.ok()) return ::testing::AssertionFailure() << "remove " << key << ": " << removed.to_string();
      model.erase(key);
      deleted.push_back(key);
      return ::testing::AssertionSuccess();
    }
    const std::string value(min_value_bytes + rng.below(value_spread), static_cast<char>('a' + rng.below(26)));
    auto v = client.put(0, table, as_bytes(key), as_bytes(value));
    if (!v.ok()) return ::testing::AssertionFailure() << "put " << key << ": " << v.status().to_string();
    model[key] = {*v, value};
    return ::testing::AssertionSuccess();
  }
};

class LogKvTest : public ::testing::TestWithParam<tailwind::Replication> {};

TEST_P(LogKvTest, PutGetRemoveAndConditionalPutThroughTheServers) {
  auto cluster = Cluster::create(small_cluster(GetParam())).value();
  auto table = cluster->create_table("users").value();
  auto other = cluster->create_table("items").value();
  EXPECT_EQ(cluster->create_table("users").status().code(), Code::kAlreadyExists);
  auto client = Client::create(*cluster).value();

  auto v1 = client->put(0, table, as_bytes("alice"), as_bytes("one"));
  ASSERT_TRUE(v1.ok()) << v1.status().to_string();
  auto v2 = client->put(0, table, as_bytes("alice"), as_bytes("two"));
  ASSERT_TRUE(v2.ok());
  EXPECT_GT(*v2, *v1);
  EXPECT_EQ(as_string(client->get(0, table, as_bytes("alice"))->value), "two");
  // Tables are separate key spaces.
  EXPECT_EQ(client->get(0, other, as_bytes("alice")).status().code(), Code::kNotFound);

  // Conditional PUT: only at the expected version; 0 means "must not exist".
  EXPECT_EQ(client->put(0, table, as_bytes("alice"), as_bytes("x"), *v1).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(client->put(0, table, as_bytes("alice"), as_bytes("x"), 0).status().code(), Code::kFailedPrecondition);
  auto v3 = client->put(0, table, as_bytes("alice"), as_bytes("three"), *v2);
  ASSERT_TRUE(v3.ok()) << v3.status().to_string();
  EXPECT_TRUE(client->put(0, table, as_bytes("bob"), as_bytes("new"), 0).ok());

  EXPECT_EQ(client->remove(0, table, as_bytes("alice"), *v2).code(), Code::kFailedPrecondition);
  EXPECT_TRUE(client->remove(0, table, as_bytes("alice"), *v3).ok());
  EXPECT_EQ(client->get(0, table, as_bytes("alice")).status().code(), Code::kNotFound);
  EXPECT_EQ(client->remove(0, table, as_bytes("alice")).code(), Code::kNotFound);
  // A key's versions keep growing across a delete.
  auto v4 = client->put(0, table, as_bytes("alice"), as_bytes("again"));
  ASSERT_TRUE(v4.ok());
  EXPECT_GT(*v4, *v3);

  // Empty values and large ones (several KB, within a request).
  EXPECT_TRUE(client->put(0, table, as_bytes("empty"), {}).ok());
  EXPECT_TRUE(client->get(0, table, as_bytes("empty"))->value.empty());
  const std::string big(6000, 'b');
  EXPECT_TRUE(client->put(0, table, as_bytes("big"), as_bytes(big)).ok());
  EXPECT_EQ(as_string(client->get(0, table, as_bytes("big"))->value), big);
  const std::string too_big(9000, 'x');
  EXPECT_FALSE(client->put(0, table, as_bytes("too-big"), as_bytes(too_big)).ok());

  // Keys spread over every server (one tablet each).
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(client->put(0, table, as_bytes("k" + std::to_string(i)), as_bytes("v")).ok());
  for (uint32_t s = 0; s < cluster->servers(); ++s) EXPECT_GT(cluster->server(s).counters().objects, 0u) << s;
}

TEST_P(LogKvTest, AServerRefusesTabletsItDoesNotOwn) {
  auto cluster = Cluster::create(small_cluster(GetParam())).value();
  auto table = cluster->create_table("t").value();
  auto map = cluster->table(table).value();
  ASSERT_EQ(map.owners.size(), 3u);
  // Find a key owned by server 0 and send it to server 1 directly.
  std::string key;
  for (int i = 0;; ++i) {
    key = "key" + std::to_string(i);
    if (map.owner_of(key_hash(table, as_bytes(key))) == 0) break;
  }
  auto nic = cluster->engine().add_nic({.name = "direct"}).value();
  auto rc = rpc::Client::create(cluster->engine(), *nic, cluster->server(1).rpc(), {}).value();
  std::vector<uint8_t> payload(24 + key.size());
  uint64_t t = table;
  std::memcpy(payload.data(), &t, 8);
  const uint16_t kb = static_cast<uint16_t>(key.size());
  std::memcpy(payload.data() + 18, &kb, 2);
  std::memcpy(payload.data() + 24, key.data(), key.size());
  auto reply = rc->session(0).call(kLogKvGet, 0, payload, false);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->app_status, kWrongServer);
  // A malformed request (its sizes disagree with its length) is refused, not executed.
  payload.push_back(0);
  reply = rc->session(0).call(kLogKvPut, 0, payload, false);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->app_status, kMalformed);
  EXPECT_EQ(cluster->server(1).counters().wrong_server, 1u);
}

TEST_P(LogKvTest, CleaningKeepsEveryLiveObjectAndFreesSegments) {
  const uint64_t seed = ferry::testing::test_seed(0x5eed);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED to replay)");
  auto opts = small_cluster(GetParam());
  opts.servers = 4;  // a crash leaves 3: still room for 2 replicas of each log
  auto cluster = Cluster::create(opts).value();
  auto table = cluster->create_table("t").value();
  auto client = Client::create(*cluster).value();
  Rng rng(seed);
  Model model;
  std::vector<std::string> deleted;
  // Many overwrites of few keys: most of each segment becomes garbage (and
  // every overwrite leaves a tombstone too). Enough keys that a closed
  // segment still holds live objects when it is cleaned.
  RandomWriter writer{*client, table, rng, model, deleted, 300, 10, 40, 400};
  for (int i = 0; i < 1500; ++i) ASSERT_TRUE(writer.write());
  std::map<uint32_t, size_t> segments_before;
  for (uint32_t s = 0; s < cluster->servers(); ++s) segments_before[s] = cluster->server(s).log().segment_ids().size();
  auto cleaned = cluster->clean();
  ASSERT_TRUE(cleaned.ok()) << cleaned.status().to_string();
  EXPECT_GT(cleaned->segments_cleaned, 0u);
  EXPECT_GT(cleaned->objects_relocated, 0u);
  size_t after = 0, before = 0;
  for (uint32_t s = 0; s < cluster->servers(); ++s) {
    after += cluster->server(s).log().segment_ids().size();
    before += segments_before[s];
  }
  EXPECT_LT(after, before) << "cleaning freed no memory";
  expect_matches(*client, table, model, deleted);
  // The freed segments are gone from the backups too: a crash now must
  // bring back exactly the live objects, not the cleaned-away versions.
  const Status crashed = cluster->crash_server(1);
  ASSERT_TRUE(crashed.ok()) << crashed.to_string();
  auto rec = cluster->recover_server(1);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  expect_matches(*client, table, model, deleted);
}

// The background cleaner (clean_interval_ms): nobody calls clean(), yet
// segments are compacted while a client keeps writing and deleting, every
// acknowledged object stays readable, and a crash afterwards recovers
// exactly the model (the relocated copies were replicated).
TEST_P(LogKvTest, TheBackgroundCleanerCompactsWhileClientsWrite) {
  const uint64_t seed = ferry::testing::test_seed(0xc1ea);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED to replay)");
  auto opts = small_cluster(GetParam());
  opts.servers = 4;
  opts.clean_interval_ms = 5;
  auto cluster = Cluster::create(opts).value();
  auto table = cluster->create_table("t").value();
  auto client = Client::create(*cluster).value();
  Rng rng(seed);
  Model model;
  std::vector<std::string> deleted;
  auto cleaned = [&] {
    uint64_t n = 0;
    for (uint32_t s = 0; s < cluster->servers(); ++s) n += cluster->server(s).counters().segments_cleaned;
    return n;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int writes = 0;
  RandomWriter writer{*client, table, rng, model, deleted, 120, 10, 40, 400};
  while ((cleaned() < 4 || writes < 1500) && std::chrono::steady_clock::now() < deadline) {
    ++writes;
    ASSERT_TRUE(writer.write());
  }
  EXPECT_GE(cleaned(), 4u) << "the background cleaner compacted nothing in " << writes << " writes";
  EXPECT_GT(cluster->cleaner_passes(), 0u);
  EXPECT_EQ(cluster->cleaner_failures(), 0u);
  expect_matches(*client, table, model, deleted);
  const Status crashed = cluster->crash_server(2);
  ASSERT_TRUE(crashed.ok()) << crashed.to_string();
  auto rec = cluster->recover_server(2);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  expect_matches(*client, table, model, deleted);
}

// RAMCloud's cleaner hazard: a tombstone may only be dropped once the
// segment holding the object it killed is gone, or recovery resurrects it.
TEST_P(LogKvTest, CleaningKeepsATombstoneWhileItsObjectsSegmentLives) {
  auto opts = small_cluster(GetParam());
  opts.servers = 4;
  auto cluster = Cluster::create(opts).value();
  auto table = cluster->create_table("t").value();
  auto client = Client::create(*cluster).value();
  const TableMap map = cluster->table(table).value();
  const uint32_t target = 1;
  auto keys_on_target = [&](const std::string& prefix, size_t n) {
    std::vector<std::string> out;
    for (int i = 0; out.size() < n; ++i) {
      std::string k = prefix + std::to_string(i);
      if (map.owner_of(key_hash(table, as_bytes(k))) == target) {
        out.push_back(k);
      }
    }
    return out;
  };
  const std::string value(500, 'v');
  // Segment A: the victim and enough stable objects to keep A from cleaning.
  const std::string victim = keys_on_target("victim-", 1)[0];
  ASSERT_TRUE(client->put(0, table, as_bytes(victim), as_bytes(value)).ok());
  for (const auto& k : keys_on_target("stable-", 100)) ASSERT_TRUE(client->put(0, table, as_bytes(k), as_bytes(value)).ok());
  ASSERT_TRUE(cluster->server(target).log().close_open_segment().ok());
  // Segment B: the victim's tombstone among garbage (one key overwritten).
  ASSERT_TRUE(client->remove(0, table, as_bytes(victim)).ok());
  const std::string churn = keys_on_target("churn-", 1)[0];
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(client->put(0, table, as_bytes(churn), as_bytes(value)).ok());
  auto cleaned = cluster->clean(target);
  ASSERT_TRUE(cleaned.ok()) << cleaned.status().to_string();
  ASSERT_GT(cleaned->segments_cleaned, 0u);
  EXPECT_GT(cleaned->tombstones_relocated, 0u) << "the tombstone was dropped while its object's segment lives";
  ASSERT_TRUE(cluster->crash_server(target).ok());
  ASSERT_TRUE(cluster->recover_server(target).ok());
  EXPECT_EQ(client->get(0, table, as_bytes(victim)).status().code(), Code::kNotFound) << "a deleted object came back";
  EXPECT_TRUE(client->get(0, table, as_bytes(churn)).ok());
}

TEST_P(LogKvTest, ACrashedServersTabletsAreRebuiltFromItsBackups) {
  const uint64_t seed = ferry::testing::test_seed(0xc4a5);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED to replay)");
  auto opts = small_cluster(GetParam());
  opts.servers = 4;
  auto cluster = Cluster::create(opts).value();
  auto table = cluster->create_table("t").value();
  auto client = Client::create(*cluster).value();
  Rng rng(seed);
  Model model;
  std::vector<std::string> deleted;
  RandomWriter writer{*client, table, rng, model, deleted, 300, 8, 1, 300};
  for (int i = 0; i < 800; ++i) ASSERT_TRUE(writer.write());
  const uint32_t victim = 2;
  const auto victim_objects = cluster->server(victim).counters().objects;
  ASSERT_GT(victim_objects, 0u);
  ASSERT_TRUE(cluster->crash_server(victim).ok());
  EXPECT_EQ(cluster->crash_server(victim).code(), Code::kFailedPrecondition);
  std::vector<RecoveryProgress> seen;
  auto rec = cluster->recover_server(victim, [&](const RecoveryProgress& p) { seen.push_back(p); });
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(rec->progress.objects_restored, victim_objects);
  // The phases are timed apart, and the backups ran Algorithm 1 over the
  // crashed log's open segment (one replica on each of r backups).
  EXPECT_GT(rec->replay_ns, 0u);
  EXPECT_GT(rec->restore_ns, 0u);
  EXPECT_LE(rec->read_ns + rec->replay_ns + rec->restore_ns, rec->elapsed_ns);
  uint64_t scanned = 0;
  for (uint32_t i = 0; i < cluster->servers(); ++i) {
    if (i != victim) scanned += cluster->server(i).backup().counters().open_buffers_scanned;
  }
  EXPECT_EQ(scanned, opts.server.replicas) << "Algorithm 1 did not scan each open replica once";
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().segments_done, seen.back().segments_total);
  for (size_t k = 1; k < seen.size(); ++k) EXPECT_GE(seen[k].segments_done, seen[k - 1].segments_done);
  const TableMap after = cluster->table(table).value();
  for (uint32_t owner : after.owners) EXPECT_NE(owner, victim);
  // Every acknowledged object is served again, deleted ones stay deleted.
  expect_matches(*client, table, model, deleted);
  EXPECT_GT(client->map_refreshes(), 0u);
  // Versions continue above the recovered ones: a conditional PUT at the
  // recovered version wins, and the next version is higher.
  const auto& [key, vv] = *model.begin();
  auto v = client->put(0, table, as_bytes(key), as_bytes("after"), vv.first);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_GT(*v, vv.first);
  model[key] = {*v, "after"};
  expect_matches(*client, table, model, deleted);
  // With 3 servers left, a log's 2 replicas need both of the others: a
  // second crash would leave too few backups, and says so.
  const Status second = cluster->crash_server(0);
  EXPECT_EQ(second.code(), Code::kUnavailable) << second.to_string();
}

// A client keeps retrying a call whose tablet's server crashed for
// retry_for_ms, however many attempts that takes, so it outlasts a recovery
// that a fixed number of attempts would not (a loaded machine recovers
// slowly); without it the call gives up after max_attempts and says so.
TEST_P(LogKvTest, ACallRetriesForRetryForMsUntilItsTabletIsRecovered) {
  auto opts = small_cluster(GetParam());
  opts.servers = 4;
  auto cluster = Cluster::create(opts).value();
  auto table = cluster->create_table("t").value();
  auto writer = Client::create(*cluster).value();
  std::vector<std::string> keys;
  for (int i = 0; i < 24; ++i) {
    keys.push_back("key" + std::to_string(i));
    ASSERT_TRUE(writer->put(0, table, as_bytes(keys.back()), as_bytes("v" + std::to_string(i))).ok());
  }
  const uint32_t victim = 1;
  ASSERT_TRUE(cluster->crash_server(victim).ok());

  ClientOptions impatient;
  impatient.max_attempts = 2;
  impatient.timeout_ns = 100'000'000;
  auto quick = Client::create(*cluster, impatient).value();
  std::set<std::string> on_victim;
  for (const auto& key : keys) {
    auto got = quick->get(0, table, as_bytes(key));
    if (got.ok()) continue;
    on_victim.insert(key);
    EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status().to_string();
    EXPECT_NE(got.status().message().find("gave up after 2 attempts"), std::string::npos) << got.status().to_string();
  }
  ASSERT_FALSE(on_victim.empty()) << "no key lives on the crashed server";

  ClientOptions patient = impatient;
  patient.retry_for_ms = 60'000;
  auto client = Client::create(*cluster, patient).value();
  std::thread recoverer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    auto rec = cluster->recover_server(victim);
    EXPECT_TRUE(rec.ok()) << rec.status().to_string();
  });
  for (size_t i = 0; i < keys.size(); ++i) {
    auto got = client->get(0, table, as_bytes(keys[i]));
    ASSERT_TRUE(got.ok()) << keys[i] << ": " << got.status().to_string();
    EXPECT_EQ(as_string(got->value), "v" + std::to_string(i));
    if (on_victim.count(keys[i]) == 0) continue;
    // Served only once its tablet had moved off the crashed server: the
    // call retried across the recovery, re-reading the map.
    const TableMap now = cluster->table(table).value();
    EXPECT_EQ(std::count(now.owners.begin(), now.owners.end(), victim), 0) << keys[i];
  }
  EXPECT_GT(client->map_refreshes(), 0u);
  recoverer.join();
}

INSTANTIATE_TEST_SUITE_P(Modes, LogKvTest,
                         ::testing::Values(tailwind::Replication::kTailwind, tailwind::Replication::kRpc),
                         [](const auto& info) { return std::string(tailwind::replication_name(info.param)); });

TEST(LogKvOptions, BadClustersAreRefusedWithAReason) {
  ClusterOptions o;
  o.servers = 1;
  EXPECT_EQ(Cluster::create(o).status().code(), Code::kInvalidArgument);
  o.servers = 3;
  o.server.replicas = 3;
  auto r = Cluster::create(o);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("replicas"), std::string::npos);
  o.server.replicas = 2;
  o.server.clean_below = 0;
  EXPECT_EQ(Cluster::create(o).status().code(), Code::kInvalidArgument);
}

}  // namespace logkv_test
}  // namespace ferry::store::logkv
