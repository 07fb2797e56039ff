// `ferry bench group`: HyperLoop §6.1 -- the group primitives against the
// Naive-RDMA baselines (event-driven and busy-polling) in the same run, with
// the replica side quiet and under CPU load:
//   latency     gWRITE and gMEMCPY avg/p95/p99/p99.9 vs size, group 3 (Fig. 8)
//   cas         gCAS latency (Table 2)
//   throughput  gWRITE throughput vs size, writing up to 1 GiB per point, with
//               replica CPU per operation (Fig. 9)
//   group_size  gWRITE p99 vs group size 3, 5, 7 (Fig. 10)
//
// Placement on a 2-CPU machine: the client thread is pinned to client_cpu
// and steps a manual NIC engine, so it stands for the unloaded client machine
// and for every host's NIC hardware at once; the replicas' application
// threads (Naive's workers, HyperLoop's idle setup threads) and the load are
// pinned to replica_cpu. The load is stress-ng, a separate executable (see
// cpu_load.h for why never a fork of this process). Every point reports its
// sample count, the wire bytes per operation per replica (NIC counters), and
// a load guard comparing the tails of a fixed work item on the client/NIC core.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/hyperloop/group.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/region.h"

namespace ferry::bench {

struct GroupBenchOptions {
  std::vector<std::string> experiments = {"latency", "cas", "throughput", "group_size"};
  std::vector<std::string> systems = {"hyperloop", "naive-event", "naive-poll"};
  std::vector<uint32_t> sizes = {64, 128, 256, 512, 1024, 2048, 4096, 8192};
  std::vector<uint32_t> group_sizes = {3, 5, 7};
  uint32_t group_size_bytes = 1024;      // message size of the group-size experiment
  std::vector<std::string> loads = {"quiet", "load"};
  uint64_t iters = 10000;                // latency operations per point (the paper's 10,000)
  double max_seconds = 3.0;              // cap on a quiet latency point and on any throughput point
  double max_seconds_loaded = 60.0;      // cap on a loaded latency point (Naive-event needs it for its samples)
  uint64_t throughput_bytes = 1ULL << 30;  // per throughput point (the paper's 1 GB)
  uint32_t window = 16;                  // operations outstanding in the throughput experiment
  uint32_t load_processes = 10;          // busy tenant processes on the replica CPU (stress-ng workers)
  int client_cpu = 1;
  int replica_cpu = 0;
  size_t region_bytes = 16 << 20;
  pm::Media media = pm::Media::kPm;
  std::string pm_dir;
  bool flush = false;                    // interleave gFLUSH with every gWRITE / gMEMCPY
  bool json = false;
};

Status run_group_bench(const GroupBenchOptions& options, std::ostream& out, std::ostream& log);

// A group client of `system` ("hyperloop", "naive-event" or "naive-poll") on
// `engine`, its replicas' application threads pinned to replica_cpu (-1:
// not pinned); kInvalidArgument for another name. Shared by the benchmarks
// that compare the three.
Result<std::unique_ptr<hyperloop::GroupClient>> make_group_client(const std::string& system, nic::Engine& engine,
                                                                  int replica_cpu);

}  // namespace ferry::bench
