// `ferry bench group --transport udp`: HyperLoop (and the Naive-RDMA
// baseline) deployed as processes -- four NIC daemons (`ferry nicd`: a client
// host and three replica hosts) and three `ferry hyperloop replica`
// processes, all started by posix_spawn (never a fork of this process) --
// with this process as the client. Every point reports the latency
// distribution of synchronous gWRITEs, the CPU the replica processes used per
// operation (from /proc), and the same point of an in-process group measured
// in the same run as the reference. For HyperLoop a second point runs with
// every replica process stopped by SIGSTOP: the target is 0 failed
// operations in 10,000 (docs/deployment.md, docs/hyperloop.md).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::bench {

struct GroupUdpBenchOptions {
  std::vector<std::string> systems = {"hyperloop", "naive-event"};
  std::vector<uint32_t> sizes = {64, 1024};
  uint32_t replicas = 3;
  uint64_t iters = 10000;        // operations per point
  double max_seconds = 30.0;     // cap per point
  bool stop_replicas = true;     // HyperLoop: also run each point with the replica processes stopped
  uint32_t daemon_spin_us = 50;  // the daemons' engines poll this long after their last work
  // Placement: the client thread polls its CQ on client_cpu, the four daemons'
  // engines share daemon_engine_cpu (-1: not pinned), as `bench nic
  // --transport udp` places its two. Unpinned, a daemon woken on the
  // polling client's CPU waits for the client's time slice: ~4 ms tails.
  int client_cpu = 0;
  int daemon_engine_cpu = 1;
  bool json = false;
};

Status run_group_udp_bench(const GroupUdpBenchOptions& options, std::ostream& out, std::ostream& log);

}  // namespace ferry::bench
