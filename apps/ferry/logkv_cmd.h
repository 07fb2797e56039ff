// `ferry logkv coordinator|server|client`: a LogKv cluster as processes,
// each attached to its host's NIC daemon (docs/tailwind.md "Deployment").
// Members print one key=value line per event on stdout, errors on stderr.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "member_process.h"

namespace ferry::apps {

struct LogKvMemberOptions {
  MemberFlags member;  // the cluster's TOML file (logkv_config.h) and this member's overrides (nicd, listen, dir)
  uint32_t index = 0;  // server: which [[server]]
};

// Run until SIGINT/SIGTERM (exit 0) or until the NIC daemon dies (exit 1).
// Exit 1 also when the member cannot start (the reason on `err`), 2 for a
// bad configuration.
int run_logkv_coordinator(const LogKvMemberOptions& options, std::ostream& out, std::ostream& err);
int run_logkv_server(const LogKvMemberOptions& options, std::ostream& out, std::ostream& err);

struct LogKvClientOptions {
  MemberFlags member;  // the cluster's TOML file, and --nicd over [client] nicd
  std::string table = "usertable";
  std::string op;          // put, get, remove, create-table, load, check
  std::string key, value;  // put/get/remove; create-table: key is the name
  uint64_t keys = 10000;   // load/check: keys key<first>..key<first+keys-1>
  uint64_t first = 0;
  uint32_t value_bytes = 100;  // load/check
  uint64_t seed = 1;           // load/check: the values
  uint32_t wait_ms = 30000;    // wait this long for the table (the cluster starting)
  uint32_t retry_ms = 30000;   // retry a call this long while its server is down (a recovery)
  bool json = false;
};

// One operation against the cluster. load writes the keys (values derived
// from the seed) and reports the PUT latency distribution; check reads them
// all back and exits 1 unless every value is exact. Exit 1 when the cluster
// cannot be reached or an operation fails (get of an absent key: 1, saying
// so), 2 for a bad configuration.
int run_logkv_client(const LogKvClientOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ferry::apps
