// `ferry store replica` and `ferry store client`: HyperLoop's replicated
// transactional store (hyperloop/txn_kv.h) as processes, each against its
// host's NIC daemon (docs/deployment.md "The transactional store as
// processes").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "member_process.h"

namespace ferry::apps {

struct StoreReplicaOptions {
  MemberFlags member;  // the store's TOML file (store_config.h) and this member's overrides (nicd, listen, region)
  uint32_t index = 0;  // which [[replica]] this process is (has_index)
  bool has_index = false;
  int spare = -1;  // or which [[spare]] (>= 0; needs [membership])
};

// Serves as replica `index` (or spare `spare`) of the store: a
// hyperloop::StoreMember (store_member.h: its states, views and beats) whose
// data path is two hyperloop::Replicas (the data group over its region, the
// lock group over DRAM) that need no CPU once connected, and the read
// service (GET and SCAN from its own image under its read locks, raw region
// reads for a recovering client) polled by this thread, which sleeps when no
// read comes. Until SIGINT/SIGTERM (exit 0) or until its NIC daemon dies
// (exit 1). Exit 1 also when it cannot start or a step of its data path
// fails (the reason on `err`), 2 for a bad configuration.
// With [membership] it also beats in etcd every heartbeat_ms and follows the
// chain's view: a new view with it inside rebuilds its Replicas at its new
// position (a spare first copies both regions from its upstream neighbour);
// a view without it (it was removed) ends it with exit 3, as does starting
// under an id the chain removed.
int run_store_replica(const StoreReplicaOptions& options, std::ostream& out, std::ostream& err);

struct StoreClientOptions {
  MemberFlags member;         // the store's TOML file and the client's overrides (nicd, listen)
  uint64_t puts = 1000;       // puts of key000000.. (one record each, applied on every replica)
  uint32_t value_bytes = 64;  // bytes per value (at most value_max)
  uint64_t seed = 1;          // the values
  bool verify = false;        // read every key back from every replica, and scan each
  // Wipe the replicas' regions and lay out a new store even if replica 0
  // already holds one (without it the client refuses: nothing is lost by
  // a second run by mistake).
  bool format = false;
  uint32_t scan_page = 64;         // entries per SCAN request of the verification
  uint32_t op_timeout_ms = 10000;  // a group operation stuck this long fails the run
  bool json = false;
  // Wait for SIGUSR1 after setup (before the first put) and again after the
  // puts (before the verification): a test stops the replicas in between.
  bool pause_for_sigusr1 = false;
  // After this many puts (0: never), print event=progress and wait for
  // SIGUSR1: a test kills a replica between two puts.
  uint64_t pause_after_puts = 0;
  // Print event=progress every this many puts (0: never).
  uint64_t progress_every = 0;
};

// Connects both groups, formats a fresh store (clearing every replica's
// data region; refused when replica 0's read service finds a store there
// already, unless `format`), runs the puts and (--verify) reads every key through every
// replica's read service and scans each replica's whole table, printing
// the latency distributions. With [membership] a put that fails (its
// operation timed out or the chain broke) starts chain recovery: the member
// that stopped beating is replaced by a live spare in the next view, both
// groups reconnect to the rebuilt chain, the log is reconciled through the
// members' read services (TxnClient::recover), and the put is retried.
// Exit 0 if every put succeeded and every read
// and scan answered exactly the values put; 1 otherwise or if the store
// could not be reached; 2 for a bad configuration or flags.
int run_store_client(const StoreClientOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ferry::apps
