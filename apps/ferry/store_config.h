// The configuration of HyperLoop's transactional store deployed as
// processes (`ferry store replica|client`, docs/deployment.md "The
// transactional store as processes"): one TOML file that every member
// reads, each picking its own part (the client's, or replica i's).
//
//   [store]                          # every member must agree on these
//   name = "s0"                       # names the groups <name>.data / <name>.locks and
//                                     # the read service txnkv.<name>.read
//   replicas = 3                      # 1..7; must equal the number of [[replica]] tables
//   log_bytes = 65536                 # the log ring (a multiple of 64, >= 4096)
//   db_bytes = 0                      # the database (0 or absent: what the table needs)
//   slots = 1024                      # the table (TxnKvOptions)
//   key_max = 32                      # 1..1024
//   value_max = 256                   # 1..65536
//   locks = 64                        # lock stripes (the lock group holds locks + 1 words)
//   connect_timeout_ms = 30000        # members wait this long for their neighbours
//
//   [client]
//   nicd = "/run/ferry/nicd.sock"
//   listen = "10.0.0.1:7600"          # its CM listener (the tails connect here)
//
//   [[replica]]                       # in chain order: the first is the head
//   nicd = "/run/ferry/nicd.sock"
//   listen = "10.0.0.2:7600"          # its CM listener: both groups' up services and the read service
//   region = "/dev/shm/ferry-s0.pm"   # the data region's file (optional: anonymous memory)
//
//   [[spare]]                         # optional (only with [membership]): started beforehand,
//   id = "spare0"                     # idle until the client makes it a member in place of a failed
//   nicd = "/run/ferry/nicd.sock"      # replica; the same fields as [[replica]]
//   listen = "10.0.0.5:7600"
//   region = "/dev/shm/ferry-s0-spare0.pm"
//
//   [membership]                      # optional: chain failure detection and recovery across processes
//   etcd = "http://127.0.0.1:2379"    # the etcd v3 endpoint holding the chain's view and the beats
//   cluster = "ferry"                 # keys under /ferry/<cluster>/chains/<store name>/
//   heartbeat_ms = 100                # every member beats this often
//   missed_beats = 5                  # consecutive missing beats that declare a member failed
//
// Every [[replica]] and [[spare]] may carry an `id` (default "r<i>" and
// "spare<i>"; unique; [A-Za-z0-9._:@-]): its name in the chain's view.
// Without [membership] recovery is off: a failed replica fails the client.
//
// Derived (the same on every member): the data group's region is
// kTxnControlBytes + log_bytes + db_bytes rounded up to 4 KiB; the lock
// group's (DRAM, anonymous on each replica) 8 bytes per lock word rounded up
// to 4 KiB.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chain_config.h"
#include "ferry/common/status.h"
#include "ferry/hyperloop/group.h"
#include "ferry/hyperloop/store_member.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/hyperloop/txn_kv.h"
#include "ferry/rpc/server.h"

namespace ferry::apps {

// The [membership] table (docs/deployment.md, "Recovery across processes").
struct StoreMembershipConfig {
  std::string etcd;  // "http://HOST:PORT"
  std::string cluster = "ferry";
  uint32_t heartbeat_ms = 100;
  uint32_t missed_beats = 5;
};

struct StoreConfig {
  std::string name = "s0";
  hyperloop::TxnOptions txn;      // log_bytes, db_bytes (resume is never set: the client formats a fresh store)
  hyperloop::TxnKvOptions kv;
  uint32_t connect_timeout_ms = 30000;
  MemberConfig client;
  std::vector<MemberConfig> replicas;  // chain order (view 1), each with its id
  std::vector<MemberConfig> spares;    // with their ids
  bool recovery = false;               // [membership] is set
  StoreMembershipConfig membership;

  // The groups of view `version` of the chain: "<name>.data" for view 1
  // (and without recovery), "<name>.data.v<version>" after, so that a
  // member of an older chain can never connect to a newer one.
  std::string data_group(uint64_t version = 1) const;
  std::string lock_group(uint64_t version = 1) const;
  std::string read_service() const { return "txnkv." + name + ".read"; }
  // The CM service through which a joining spare READs a member's regions.
  std::string copy_service() const { return "store." + name + ".copy"; }
  // Keys in etcd: the view (ChainManager::view_key of cluster/name) and the
  // members' beats (<beats_prefix><id> = the view version the member serves).
  hyperloop::StoreChainKeys chain_keys() const;
  std::string view_key() const { return chain_keys().view_key; }
  std::string beats_prefix() const { return chain_keys().beats_prefix; }
  // The [[replica]] or [[spare]] with this id, or nullptr.
  const MemberConfig* member(std::string_view id) const;
  // Both groups' options: replicas, and the region sizes derived above.
  hyperloop::GroupOptions data_options() const;
  hyperloop::GroupOptions lock_options() const;
  // The read service's RPC server (RawRPC, one worker driven by the
  // replica's main thread) and what a client expects of it: a request holds
  // the longest key, a reply the largest entry (and scan pages of 16 KiB).
  rpc::ServerOptions read_server_options() const;
  rpc::ServerInfo read_server_info() const;
};

// Parses and checks a store configuration. kInvalidArgument with the file
// name, the line (TOML syntax errors) or the key and what is wrong;
// kNotFound for a file that cannot be read.
Result<StoreConfig> parse_store_config(std::string_view toml_text, std::string_view source_name);
Result<StoreConfig> load_store_config(const std::string& path);

}  // namespace ferry::apps
