// Busy tenant processes for "under CPU load" measurements: N child processes
// pinned to one CPU, each spinning until the load is stopped (the paper used
// stress-ng; a forked spinner needs nothing installed). They die with the
// parent (PR_SET_PDEATHSIG), so a crashed benchmark leaves nothing behind.
#pragma once

#include <sys/types.h>

#include <memory>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::bench {

class CpuLoad {
 public:
  // Starts `processes` spinners pinned to `cpu` (-1: not pinned).
  static Result<std::unique_ptr<CpuLoad>> start(int cpu, int processes);
  ~CpuLoad();  // kills and reaps them
  CpuLoad(const CpuLoad&) = delete;
  CpuLoad& operator=(const CpuLoad&) = delete;

  int processes() const { return static_cast<int>(pids_.size()); }
  int cpu() const { return cpu_; }

 private:
  CpuLoad() = default;
  std::vector<pid_t> pids_;
  int cpu_ = -1;
};

}  // namespace ferry::bench
