// The chain configuration (apps/ferry/chain_config.h): what a valid file
// gives, defaults, and a clear message for each kind of mistake.
#include "chain_config.h"

#include <gtest/gtest.h>

namespace ferry::apps {
namespace {

constexpr const char* kGood = R"(
[group]
system = "naive-poll"
name = "orders"
replicas = 2
region_bytes = 65536
ring_ops = 64
window = 8
flush_verb = true
connect_timeout_ms = 1500

[client]
nicd = "/run/ferry/a.sock"
listen = "10.0.0.1:7400"

[[replica]]
listen = "10.0.0.2:7400"
region = "/dev/shm/r0.pm"

[[replica]]
nicd = "/run/ferry/c.sock"
listen = "10.0.0.3:7400"
)";

TEST(ChainConfig, ParsesEveryField) {
  auto c = parse_chain_config(kGood, "good.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c.value().group, "orders");
  EXPECT_EQ(c.value().system, "naive-poll");
  EXPECT_EQ(c.value().options.replicas, 2u);
  EXPECT_EQ(c.value().options.region_bytes, 65536u);
  EXPECT_EQ(c.value().options.ring_ops, 64u);
  EXPECT_EQ(c.value().options.window, 8u);
  EXPECT_TRUE(c.value().options.flush_verb);
  EXPECT_EQ(c.value().connect_timeout_ms, 1500u);
  EXPECT_EQ(c.value().client.nicd, "/run/ferry/a.sock");
  EXPECT_EQ(c.value().client.listen, "10.0.0.1:7400");
  ASSERT_EQ(c.value().replicas.size(), 2u);
  EXPECT_EQ(c.value().replicas[0].nicd, "/run/ferry/nicd.sock");  // the default socket
  EXPECT_EQ(c.value().replicas[0].region, "/dev/shm/r0.pm");
  EXPECT_EQ(c.value().replicas[1].region, "");                    // anonymous memory
  EXPECT_EQ(c.value().replicas[1].nicd, "/run/ferry/c.sock");
}

TEST(ChainConfig, DefaultsAreTheLibrarys) {
  auto c = parse_chain_config(R"(
[group]
replicas = 1
[client]
listen = "127.0.0.1:1"
[[replica]]
listen = "127.0.0.1:2"
)",
                              "min.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const hyperloop::GroupOptions defaults;
  EXPECT_EQ(c.value().group, "g0");
  EXPECT_EQ(c.value().system, "hyperloop");
  EXPECT_EQ(c.value().options.region_bytes, defaults.region_bytes);
  EXPECT_EQ(c.value().options.ring_ops, defaults.ring_ops);
  EXPECT_EQ(c.value().options.window, defaults.window);
  EXPECT_FALSE(c.value().options.flush_verb);
}

// Each mistake, and a fragment its message must contain.
struct Bad {
  const char* toml;
  const char* says;
};

TEST(ChainConfig, MistakesAreNamed) {
  const Bad cases[] = {
      {"[group\nreplicas = 1", "bad.toml:1"},  // syntax: the line
      {"[client]\nlisten = \"127.0.0.1:1\"", "[group] table is missing"},
      {"[group]\nreplicas = 9", "outside 1..7"},
      {"[group]\nreplicas = 1\nsystem = \"fast\"", "group.system 'fast' must be hyperloop, naive-event or naive-poll"},
      {"[group]\nreplicas = \"3\"", "group.replicas must be an integer"},
      {"[group]\nreplicas = 1\nring_ops = 48\n[client]\nlisten = \"127.0.0.1:1\"\n[[replica]]\nlisten = \"127.0.0.1:2\"",
       "power of two"},
      {"[group]\nreplicas = 1\nwindow = 64\nring_ops = 64\n[client]\nlisten = \"127.0.0.1:1\"\n[[replica]]\nlisten = "
       "\"127.0.0.1:2\"",
       "window must be"},
      {"[group]\nreplicas = 1\nreplica = 2", "unknown key 'replica' in [group]"},
      {"[group]\nreplicas = 1\n[client]\nlisten = \"127.0.0.1:1\"", "no [[replica]] tables"},
      {"[group]\nreplicas = 2\n[client]\nlisten = \"127.0.0.1:1\"\n[[replica]]\nlisten = \"127.0.0.1:2\"",
       "but 1 [[replica]] tables"},
      {"[group]\nreplicas = 1\n[client]\nlisten = \"localhost\"\n[[replica]]\nlisten = \"127.0.0.1:2\"",
       "client.listen 'localhost'"},
      {"[group]\nreplicas = 1\n[client]\nnicd = \"/a\"\n[[replica]]\nlisten = \"127.0.0.1:2\"", "client.listen is missing"},
      {"[group]\nreplicas = 1\n[client]\nlisten = \"127.0.0.1:1\"\nregion = \"/x\"\n[[replica]]\nlisten = \"127.0.0.1:2\"",
       "unknown key 'region' in client"},
      {"[group]\nreplicas = 1\nflush_verb = 1\n[client]\nlisten = \"127.0.0.1:1\"\n[[replica]]\nlisten = \"127.0.0.1:2\"",
       "flush_verb must be true or false"},
      {"[group]\nreplicas = 1\nname = \"a b\"\n[client]\nlisten = \"127.0.0.1:1\"\n[[replica]]\nlisten = \"127.0.0.1:2\"",
       "group name"},
  };
  for (const Bad& b : cases) {
    auto c = parse_chain_config(b.toml, "bad.toml");
    ASSERT_FALSE(c.ok()) << b.toml;
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << b.toml;
    EXPECT_NE(c.status().message().find(b.says), std::string::npos)
        << "expected '" << b.says << "' in: " << c.status().message();
  }
}

TEST(ChainConfig, MissingFileIsNotFound) {
  auto c = load_chain_config("/nonexistent/chain.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kNotFound);
  EXPECT_NE(c.status().message().find("/nonexistent/chain.toml"), std::string::npos);
}

}  // namespace
}  // namespace ferry::apps
