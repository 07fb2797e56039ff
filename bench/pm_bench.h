// `ferry bench pm`: remote writes to persistent memory after the ATC'21
// study (§3-4): one-sided and two-sided, 16 B to 4 KB, DRAM vs PM, each hint
// on and off, with the model's device counters; and the latency of a
// persistent remote write -- plain WRITE, H9 (WRITE + READ behind one
// doorbell), the strawman (WRITE, wait, READ, wait) -- as ratios from one run.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::bench {

struct PmBenchOptions {
  std::vector<std::string> experiments = {"one_sided", "two_sided", "atomic", "persist"};
  std::vector<uint32_t> sizes = {16, 64, 256, 1024, 4096};
  double seconds_per_point = 0.2;
  uint64_t iters = 0;          // per point; 0 = sized by seconds_per_point
  uint32_t outstanding = 16;   // throughput experiments (persist latency uses 1)
  size_t region_bytes = 64 << 20;
  std::string pm_dir;          // where the PM file goes; default $TMPDIR or /tmp
  // The persist experiment is also run with this modeled one-way wire delay
  // (reported separately, labeled as modeled); 0 skips that run.
  uint64_t modeled_wire_delay_ns = 1000;
  int client_cpu = 0;
  int engine_cpu = 1;
  bool json = false;
};

Status run_pm_bench(const PmBenchOptions& options, std::ostream& out, std::ostream& log);

}  // namespace ferry::bench
