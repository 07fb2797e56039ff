// `ferry hyperloop replica` and `ferry hyperloop client`: a HyperLoop chain
// as processes, each against its host's NIC daemon (docs/deployment.md).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "member_process.h"

namespace ferry::apps {

struct ReplicaCmdOptions {
  MemberFlags member;  // the chain's TOML file (chain_config.h) and this member's overrides (nicd, listen, region)
  uint32_t index = 0;  // which [[replica]] this process is
  std::string system;  // overrides group.system
  int cpu = -1;        // naive-*: pin the serving thread
};

// Serves as replica `index` (a hyperloop::ReplicaMember, replica_member.h)
// until SIGINT/SIGTERM (exit 0) or until its NIC daemon dies (exit 1). Exit
// 1 also when it cannot start (the reason on `err`: a missing daemon, a port
// in use, an unreachable or misconfigured neighbour), 2 for a bad
// configuration.
int run_hyperloop_replica(const ReplicaCmdOptions& options, std::ostream& out, std::ostream& err);

struct ClientCmdOptions {
  MemberFlags member;        // the chain's TOML file and the client's overrides (nicd, listen)
  std::string system;        // overrides group.system
  uint64_t ops = 10000;      // operations to run
  uint32_t size = 64;        // gWRITE bytes
  uint32_t outstanding = 8;  // operations in flight (at most the group's window)
  std::string mix = "both";  // write, cas or both (alternating)
  uint64_t seed = 1;         // the bytes written
  std::string dump;          // write the client's memory image here at the end ("" = no)
  bool json = false;
  uint32_t op_timeout_ms = 10000;  // an operation (or the window) stuck this long fails the run
  // After connecting, wait for SIGUSR1 before the first operation (so that a
  // test can stop the replica processes first).
  bool wait_for_sigusr1 = false;
};

// Connects to the chain, runs the operations and checks them: every gWRITE
// acknowledged, every gCAS (a counter at offset 0: compare k, swap k+1 on
// every replica) saw exactly k on every replica -- so each was applied once
// and in order. Exit 0 if all did, 1 otherwise or if the chain could not be
// reached, 2 for a bad configuration.
int run_hyperloop_client(const ClientCmdOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ferry::apps
