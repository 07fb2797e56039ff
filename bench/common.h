// Small helpers every benchmark uses: the clock operations are timed with,
// where a thread may run, what else loaded the machine, option lists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/common/clock.h"

namespace ferry::bench {

// The clock benchmarks time single operations with: the TSC when it is
// invariant (a read costs ~10 ns against ~25 ns for clock_gettime), else
// CLOCK_MONOTONIC -- never a TSC that may drift between cores or stop when idle.
// Thread-safe; lives for the whole process.
const Clock& timing_clock();
// "tsc" or "clock_monotonic": which one timing_clock() is, for reports.
const char* timing_clock_name();
// timing_clock()'s time.
inline uint64_t now_ns() { return timing_clock().now_ns(); }

// Picks a usable CPU: `wanted` if it exists on this machine, else -1.
int usable_cpu(int wanted);

// The 1-minute load average (/proc/loadavg), or -1: whether something else
// ran on the machine during a point.
double load_average();
// The 1-, 5- and 15-minute load averages (each -1 if unreadable).
std::vector<double> load_averages();

// Whether `list` holds `item` (an option list: systems, experiments, ...).
bool has(const std::vector<std::string>& list, const std::string& item);

}  // namespace ferry::bench
