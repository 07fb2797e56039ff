// `ferry bench store` (store_bench.h), its report: each point's ops as JSON
// or as rows of text, and YCSB-A's update tails under load, gathered for the
// summary's p99 ratios.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "report.h"
#include "store_bench.h"
#include "store_points.h"

namespace ferry::bench::store_bench {

// How one system's points are described and where they go.
struct PointContext {
  std::string experiment;  // "ycsb" or "rocksdb"
  std::string system;
  std::string reads_at;  // ycsb chain systems: "client" or "replica" (StoreBenchOptions::reads_at)
  std::string reads_from;
  std::string scans_from;  // where and how a scan reads
  std::string writes;      // what a write is, for the JSON
  std::string inserts;     // what an insert is, if not a write
  nlohmann::json peer;     // the Redis servers, or null
  double rate = 0;         // open loop at this many ops/s (Poisson), or 0: closed loop
};

// YCSB-A update percentiles under load, by system, for the summary. p50
// too: when a baseline's p99 has too few samples (a capped Naive-event
// point), its p50 over HyperLoop's p99 is a lower bound of the p99 ratio.
struct UpdateTails {
  std::map<std::string, double> p99_us;
  std::map<std::string, double> p50_us;
  std::vector<std::string> overloaded;  // open loop: systems that did not keep up with the arrivals
  uint64_t points = 0;
  uint64_t disturbed = 0;  // points whose client/NIC core the load reached (CoreGuard)
};

// Prints (or emits as JSON) every op of one point; a YCSB-A update's tails
// under load go into `tails` under the system's name.
void emit_point(const PointContext& c, const std::string& wl, const std::string& load_name, const PointResult& r,
                const StoreBenchOptions& o, const Placement& placement, const std::string& load_text, std::ostream& out,
                UpdateTails* tails);

// The p99 ratios of each baseline over HyperLoop into `summary` as
// `<prefix><base>_over_hyperloop`, or, without a p99 for the baseline,
// `<prefix><base>_over_hyperloop_at_least` from its p50.
void add_p99_ratios(const UpdateTails& t, const std::vector<std::string>& bases, const std::string& prefix,
                    nlohmann::json& summary);

}  // namespace ferry::bench::store_bench
