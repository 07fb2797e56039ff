// Shared pieces of benchmark reports: where things ran, and JSON/table output.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
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

// Samples a percentile needs before it is reported: 10 / (1 - q) -- p50 20,
// p95 200, p99 1,000, p99.9 10,000 (design brief, "Measuring honestly").
uint64_t samples_needed(double q);
bool percentile_reportable(const Histogram& h, double q);
// h.percentile(q) * scale, or JSON null when there are too few samples.
nlohmann::json percentile_json(const Histogram& h, double q, double scale = 1.0);
// The same as text with `decimals` digits after the point, or "n/a".
std::string percentile_text(const Histogram& h, double q, double scale, int decimals);

// {"samples":..,"p50_ns":..,"p95_ns":..,"p99_ns":..,"p999_ns":..,"max_ns":..}
// merged into `j`; a percentile with too few samples behind it is null.
void add_percentiles_ns(nlohmann::json& j, const Histogram& h);

// "commit" (and "dirty" when the tree had uncommitted changes) and "machine",
// merged into `j`: where a recorded result came from.
void add_provenance(nlohmann::json& j);

// Stalls of a thread's loop that steps every NIC (a benchmark's client
// thread): a gap between two passes longer than kStallNs means the core was
// taken away (a timer tick, an interrupt, the hypervisor) and every NIC
// stood still meanwhile. pass() once per loop iteration; only gaps that end
// inside the measured window count.
struct LoopGaps {
  static constexpr uint64_t kStallNs = 20'000;
  uint64_t last = 0;
  uint64_t max_ns = 0;
  uint64_t stalls = 0;  // gaps over kStallNs
  uint64_t stalled_ns = 0;
  void pass(uint64_t now, bool in_window) {
    const uint64_t gap = last != 0 && now > last ? now - last : 0;
    last = now;
    if (!in_window) return;
    max_ns = gap > max_ns ? gap : max_ns;
    if (gap > kStallNs) {
      ++stalls;
      stalled_ns += gap;
    }
  }
};

// The 1-minute load average (/proc/loadavg), or -1: whether something else
// ran on the machine during a point.
double load_average();

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
