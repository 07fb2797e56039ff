// Busy tenant processes for "under CPU load" measurements: stress-ng's CPU
// stressor (N worker processes) pinned to one CPU, started as a separate
// executable with posix_spawn and stopped when the CpuLoad is destroyed.
//
// Why a separate executable: a load made by forking the measuring process
// shares its pages copy-on-write, and every later first write of the
// measured threads becomes a page fault whose TLB shootdown waits for the
// loaded CPU -- the load then shows up in the measured tails through the
// kernel, not through the CPU the load was meant to take away. Nothing here
// forks the benchmark process (design brief, "Measuring honestly").
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "ferry/common/status.h"

namespace ferry::bench {

class CpuLoad {
 public:
  // Starts stress-ng with `processes` CPU workers pinned to `cpu` (-1: not
  // pinned) and waits until they run. stress-ng stops by itself after
  // `max_seconds` (so a crashed benchmark leaves nothing behind).
  // kNotFound if stress-ng is not installed (scripts/install-deps.sh
  // installs it), kInternal if it fails to start its workers.
  static Result<std::unique_ptr<CpuLoad>> start(int cpu, int processes, double max_seconds);
  ~CpuLoad();  // stops stress-ng and its workers and reaps them
  CpuLoad(const CpuLoad&) = delete;
  CpuLoad& operator=(const CpuLoad&) = delete;

  int processes() const { return processes_; }
  int cpu() const { return cpu_; }
  // What runs, for reports: "stress-ng --cpu 10 --cpu-method loop --taskset 0".
  const std::string& description() const { return description_; }

 private:
  CpuLoad() = default;
  pid_t pid_ = -1;  // stress-ng's parent process, leader of its own process group
  int processes_ = 0;
  int cpu_ = -1;
  std::string description_;
};

}  // namespace ferry::bench
