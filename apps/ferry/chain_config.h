// The configuration of a HyperLoop chain deployed as processes (`ferry
// hyperloop replica|client`, docs/deployment.md): one TOML file that every
// member reads, each picking its own part (the client's, or replica i's).
//
//   [group]                       # every member must agree on these
//   system = "hyperloop"           # or "naive-event" / "naive-poll" (the baseline)
//   name = "g0"
//   replicas = 3
//   region_bytes = 1048576
//   ring_ops = 128
//   window = 16
//   flush_verb = false
//   connect_timeout_ms = 30000
//
//   [client]
//   nicd = "/run/ferry/nicd.sock"   # the host's NIC daemon
//   listen = "10.0.0.1:7400"         # its CM listener (the tail connects here)
//
//   [[replica]]                      # in chain order: the first is the head
//   nicd = "/run/ferry/nicd.sock"
//   listen = "10.0.0.2:7400"
//   region = "/dev/shm/ferry-g0-r0.pm"   # the file the region lives in (optional: anonymous memory)
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/hyperloop/group.h"

namespace ferry::apps {

struct MemberConfig {
  std::string id;      // the store's members only: its id in the chain's membership (store_config.h)
  std::string nicd;    // the NIC daemon's socket
  std::string listen;  // "a.b.c.d:port" of the member's CM listener
  std::string region;  // replicas: the region's backing file ("" = anonymous shared memory)
};

struct ChainConfig {
  std::string system = "hyperloop";  // hyperloop, naive-event or naive-poll
  std::string group = "g0";
  hyperloop::GroupOptions options;
  uint32_t connect_timeout_ms = 30000;
  MemberConfig client;
  std::vector<MemberConfig> replicas;  // chain order
};

// Parses and checks a chain configuration. kInvalidArgument with the file
// name, the line (for TOML syntax errors) or the key and what is wrong;
// kNotFound for a file that cannot be read.
Result<ChainConfig> parse_chain_config(std::string_view toml_text, std::string_view source_name);
Result<ChainConfig> load_chain_config(const std::string& path);

// One member's table ([client], or a [[replica]] with `replica`): nicd
// (default /run/ferry/nicd.sock), listen (required, checked), region
// (replicas only, optional), id (only `with_id`: optional, checked by the
// caller). Errors name `source` and `path`.
Result<MemberConfig> parse_member_config(const toml::table& t, std::string_view source, const std::string& path,
                                         bool replica, bool with_id = false);

// The [client] table and the [[replica]] array of `root`, replicas in chain
// order; their count is checked against `replicas` (`count_key` names the
// key that set it, for the message). Errors name `source` and the table.
Status parse_chain_members(const toml::table& root, std::string_view source, uint32_t replicas,
                           std::string_view count_key, MemberConfig* client, std::vector<MemberConfig>* members,
                           bool with_ids = false);

}  // namespace ferry::apps
