// Shared pieces of benchmark reports: where things ran, and JSON/table output.
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

#include "ferry/common/clock.h"
#include "ferry/common/histogram.h"

namespace ferry::bench {

// Where the NIC engine and the measuring client ran, and what load the CPU had.
struct Placement {
  int client_cpu = -1;
  int engine_cpu = -1;
  bool engine_pinned = false;
  int engine_fifo = 0;
  int engine_threads = 1;
  std::string load = "none";
};

nlohmann::json placement_json(const Placement& p);
std::string placement_text(const Placement& p);

// {"p50_ns":..,"p95_ns":..,"p99_ns":..,"p999_ns":..,"max_ns":..} merged into `j`.
void add_percentiles_ns(nlohmann::json& j, const Histogram& h);

// Picks a usable CPU: `wanted` if it exists on this machine, else -1.
int usable_cpu(int wanted);

// The clock benchmarks time single operations with: the TSC when it is
// invariant (a read costs ~10 ns against ~25 ns for clock_gettime), else
// CLOCK_MONOTONIC -- never a TSC that may drift between cores or stop when idle.
// Thread-safe; lives for the whole process.
const Clock& timing_clock();
// "tsc" or "clock_monotonic": which one timing_clock() is, for reports.
const char* timing_clock_name();

}  // namespace ferry::bench
