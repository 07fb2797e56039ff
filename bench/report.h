// Shared pieces of benchmark reports: where things ran, and JSON/table output.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ostream>
#include <string>

#include "common.h"
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

}  // namespace ferry::bench
