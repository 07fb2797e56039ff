// The configuration of a LogKv cluster deployed as processes (`ferry logkv
// coordinator|server|client`, docs/tailwind.md "Deployment"): one TOML file
// that every member reads, each picking its own part.
//
//   [cluster]                        # every member must agree on these
//   replication = "tailwind"          # or "rpc": RAMCloud's RPC replication (the baseline)
//   replicas = 2                      # backups per segment (< servers)
//   workers = 1                       # RPC workers per server (plus one for backup requests)
//   segment_bytes = 1048576           # = every backup buffer
//   backup_buffers = 16
//   storage = "fdatasync"             # or "direct" (O_DIRECT): how closed buffers reach the dir
//   max_request_bytes = 8192
//   clean_below = 0.5                 # a closed segment is cleaned below this live fraction
//   clean_interval_ms = 0             # each server's cleaner (0: off)
//   tablets_per_table = 0             # 0: one per server
//   tables = ["usertable"]            # created once every server has enlisted
//   heartbeat_ms = 200
//   missed_beats = 5                  # missed in a row: the server is declared crashed
//   connect_timeout_ms = 30000        # members wait this long for each other at start
//   worker_cpus = []                  # pin every server's workers (optional)
//
//   [coordinator]
//   nicd = "/run/ferry/nicd.sock"     # its host's NIC daemon
//   listen = "10.0.0.1:7500"          # its CM listener
//
//   [[server]]                        # server 0, 1, ...
//   nicd = "/run/ferry/nicd.sock"
//   listen = "10.0.0.2:7500"
//   dir = "/var/lib/ferry/logkv/s0"   # backup storage: closed segments are written here
//
//   [client]
//   nicd = "/run/ferry/nicd.sock"
#pragma once

#include <string>
#include <string_view>

#include "ferry/common/status.h"
#include "ferry/store/logkv_deploy.h"

namespace ferry::apps {

struct LogKvConfig {
  store::logkv::Deployment deployment;
  std::string client_nicd;
};

// Parses and checks a LogKv configuration. kInvalidArgument with the file
// name, the line (TOML syntax errors) or the key and what is wrong;
// kNotFound for a file that cannot be read.
Result<LogKvConfig> parse_logkv_config(std::string_view toml_text, std::string_view source_name);
Result<LogKvConfig> load_logkv_config(const std::string& path);

}  // namespace ferry::apps
