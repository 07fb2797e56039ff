// The LogKv cluster configuration (apps/ferry/logkv_config.h): every field of
// a valid file, the defaults, and a message naming the key for each mistake.
#include "logkv_config.h"

#include <gtest/gtest.h>

#include <string>

namespace ferry::apps {
namespace logkv_config_test {

constexpr const char* kGood = R"(
[cluster]
replication = "rpc"
replicas = 1
workers = 2
segment_bytes = 65536
backup_buffers = 32
storage = "direct"
max_request_bytes = 4096
clean_below = 0.25
clean_interval_ms = 500
tablets_per_table = 8
tables = ["a", "b"]
heartbeat_ms = 50
missed_beats = 3
connect_timeout_ms = 2000
worker_cpus = [0, 1]

[coordinator]
nicd = "/run/ferry/c.sock"
listen = "10.0.0.1:7500"

[[server]]
listen = "10.0.0.2:7500"
dir = "/var/lib/ferry/s0"

[[server]]
nicd = "/run/ferry/s1.sock"
listen = "10.0.0.3:7500"
dir = "/var/lib/ferry/s1"

[client]
nicd = "/run/ferry/client.sock"
)";

TEST(LogKvConfig, ParsesEveryField) {
  auto c = parse_logkv_config(kGood, "good.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const auto& d = c.value().deployment;
  EXPECT_EQ(d.server.replication, tailwind::Replication::kRpc);
  EXPECT_EQ(d.server.replicas, 1u);
  EXPECT_EQ(d.server.workers, 2u);
  EXPECT_EQ(d.server.segment_bytes, 65536u);
  EXPECT_EQ(d.server.backup_buffers, 32u);
  EXPECT_EQ(d.server.storage_mode, tailwind::StorageMode::kDirect);
  EXPECT_EQ(d.server.max_request_bytes, 4096u);
  EXPECT_DOUBLE_EQ(d.server.clean_below, 0.25);
  EXPECT_EQ(d.server.media, tailwind::BufferMedia::kDram);
  EXPECT_EQ(d.server.worker_cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(d.clean_interval_ms, 500u);
  EXPECT_EQ(d.tablets_per_table, 8u);
  EXPECT_EQ(d.tables, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(d.heartbeat_ms, 50u);
  EXPECT_EQ(d.missed_beats, 3u);
  EXPECT_EQ(d.connect_timeout_ms, 2000u);
  EXPECT_EQ(d.coordinator.nicd, "/run/ferry/c.sock");
  EXPECT_EQ(d.coordinator.listen, "10.0.0.1:7500");
  ASSERT_EQ(d.servers.size(), 2u);
  EXPECT_EQ(d.servers[0].nicd, "/run/ferry/nicd.sock");  // the default
  EXPECT_EQ(d.servers[1].nicd, "/run/ferry/s1.sock");
  EXPECT_EQ(d.servers[1].dir, "/var/lib/ferry/s1");
  EXPECT_EQ(c.value().client_nicd, "/run/ferry/client.sock");
}

TEST(LogKvConfig, Defaults) {
  auto c = parse_logkv_config(R"(
[cluster]
[coordinator]
listen = "127.0.0.1:1"
[[server]]
listen = "127.0.0.1:2"
dir = "/tmp/a"
[[server]]
listen = "127.0.0.1:3"
dir = "/tmp/b"
[[server]]
listen = "127.0.0.1:4"
dir = "/tmp/c"
)",
                              "defaults.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const auto& d = c.value().deployment;
  EXPECT_EQ(d.server.replication, tailwind::Replication::kTailwind);
  EXPECT_EQ(d.server.replicas, 2u);
  EXPECT_EQ(d.server.segment_bytes, 1u << 20);
  EXPECT_EQ(d.tables, (std::vector<std::string>{"usertable"}));
  EXPECT_EQ(c.value().client_nicd, "/run/ferry/nicd.sock");
}

// Each mistake, and the words its message must contain.
TEST(LogKvConfig, MistakesAreNamed) {
  const std::string servers = R"(
[coordinator]
listen = "127.0.0.1:1"
[[server]]
listen = "127.0.0.1:2"
dir = "/tmp/a"
[[server]]
listen = "127.0.0.1:3"
dir = "/tmp/b"
)";
  const struct {
    std::string text;
    const char* words;
  } cases[] = {
      {"[cluster]\nreplication = \"chain\"\n" + servers, "cluster.replication"},
      {"[cluster]\nreplicas = 2\n" + servers, "replicas must be in [1, servers - 1]"},
      {"[cluster]\nreplicas = 1\nworkers = 0\n" + servers, "cluster.workers = 0 is outside"},
      {"[cluster]\nreplicas = 1\nsegment_bytes = \"big\"\n" + servers, "cluster.segment_bytes must be an integer"},
      {"[cluster]\nreplicas = 1\nstorage = \"tape\"\n" + servers, "cluster.storage"},
      {"[cluster]\nreplicas = 1\nclean_below = 1.5\n" + servers, "cluster.clean_below"},
      {"[cluster]\nreplicas = 1\ntables = \"a\"\n" + servers, "cluster.tables must be an array"},
      {"[cluster]\nreplicas = 1\ntables = [\"a\", \"a\"]\n" + servers, "listed twice"},
      {"[cluster]\nreplicas = 1\nworker_cpus = [-1]\n" + servers, "cluster.worker_cpus"},
      {"[cluster]\nreplicas = 1\nfrobnicate = 1\n" + servers, "unknown key 'frobnicate' in [cluster]"},
      {"[cluster]\nreplicas = 1\n[coordinator]\nlisten = \"127.0.0.1:1\"\n", "no [[server]] tables"},
      {"[coordinator]\nlisten = \"127.0.0.1:1\"\n", "the [cluster] table is missing"},
      {"[cluster]\nreplicas = 1\n[[server]]\nlisten = \"127.0.0.1:2\"\ndir = \"/a\"\n", "[coordinator] table is missing"},
      {"[cluster]\nreplicas = 1\n[coordinator]\nlisten = \"nowhere\"\n" + servers.substr(servers.find("[[server]]")),
       "coordinator.listen 'nowhere' must be an IPv4 address"},
      {"[cluster]\nreplicas = 1\n[coordinator]\nlisten = \"127.0.0.1:1\"\n[[server]]\nlisten = \"127.0.0.1:2\"\n"
       "[[server]]\nlisten = \"127.0.0.1:3\"\ndir = \"/b\"\n",
       "server[0].dir is missing"},
      {"[cluster]\nreplicas = 1\n[coordinator]\nlisten = \"127.0.0.1:1\"\n[[server]]\nlisten = \"127.0.0.1:1\"\n"
       "dir = \"/a\"\n[[server]]\nlisten = \"127.0.0.1:3\"\ndir = \"/b\"\n",
       "used twice"},
      {"[cluster]\nreplicas = 1\n" + servers + "[client]\nlisten = \"127.0.0.1:9\"\n", "unknown key 'listen' in [client]"},
      {"[cluster\n", "bad.toml:1"},
  };
  for (const auto& c : cases) {
    auto r = parse_logkv_config(c.text, "bad.toml");
    ASSERT_FALSE(r.ok()) << "accepted:\n" << c.text;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find(c.words), std::string::npos)
        << "message: " << r.status().message() << "\nwanted: " << c.words;
  }
  EXPECT_EQ(load_logkv_config("/nonexistent/logkv.toml").status().code(), Code::kNotFound);
}

}  // namespace logkv_config_test
}  // namespace ferry::apps
