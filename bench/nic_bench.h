// `ferry bench nic`: perftest-style latency and bandwidth of the software
// RNIC for WRITE, READ, SEND and ATOMIC, with the physical references
// (cross-thread ping-pong, memcpy) measured in the same run.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::bench {

struct NicBenchOptions {
  std::vector<std::string> ops = {"write", "read", "send", "atomic"};
  std::vector<uint32_t> sizes = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
  std::vector<uint32_t> outstanding = {1, 16};  // 1 = latency test, >1 = rate/bandwidth test
  uint64_t iters = 0;              // measured operations per point; 0 = sized by seconds_per_point
  double seconds_per_point = 0.25;
  int client_cpu = 0;              // the measuring application thread
  int engine_cpu = 1;              // the NIC engine thread
  int engine_fifo = 0;             // SCHED_FIFO priority for the engine (0 = normal)
  uint32_t mtu = 4096;
  bool json = false;               // one JSON object per line instead of a table
  // Run the engine on the measuring thread (manual mode, one step per poll):
  // measures the NIC's processing cost per operation with no cross-core
  // traffic. A profile, not a latency: nothing here is concurrent.
  bool inline_engine = false;
};

// Runs the benchmark, writing results to `out` and progress to `log`.
// kInvalidArgument for an unknown op or a bad size.
Status run_nic_bench(const NicBenchOptions& options, std::ostream& out, std::ostream& log);

}  // namespace ferry::bench
