// `ferry bench oq` (oq_bench.h), its points: each builds its system afresh
// (oq_setup.h), drives it with the closed or the open loop (load_loop.h) and
// tears it down; the experiments are lists of such points, systems
// interleaved point by point.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/common/status.h"
#include "load_loop.h"
#include "oq_bench.h"
#include "oq_setup.h"

namespace ferry::bench::oq_bench {

struct Point {
  std::string experiment;  // threads, latency, pmkv, pmkv_value_size
  std::string system;
  std::string workload;
  std::string variant;  // mp-deleg, mp, deleg, plain
  Backend backend = Backend::kCache;
  bool multi_packet = true;
  bool delegation = true;
  uint32_t sessions = 1;
  uint32_t max_inflight = 1;
  KvMix mix;
  uint32_t queue_pairs = 0;
  uint32_t workers = 1;
  uint64_t server_ns_per_request = 0;      // busy work added per request (SutConfig)
  std::optional<double> offered_fraction;  // of `peak_mops`, open loop only
  double peak_mops = 0;                    // RawRPC's closed-loop peak on this workload
  Run run;
  double own_peak_mops = 0;  // this system's closed-loop peak on this workload
  double load_average = -1;  // the machine's, when the point started
  // The client core's speed: a fixed work item's p50 (core_guard.h) right
  // before and right after the point, and at the run's first point. The
  // VM's host can slow a core without the guest seeing it (no steal time
  // here, no run-queue wait): the same code then costs more per request.
  uint64_t work_item_first_ns = 0, work_item_before_ns = 0, work_item_after_ns = 0;
  nlohmann::json ratios;     // filled in once the point's peers ran
  nlohmann::json targets;    // paper targets checked at this point
};

// The point of (experiment, workload, system) at offered `fraction` (the
// closed-loop one for nullopt), or null.
const Point* find_point(const std::vector<Point>& points, const std::string& experiment, const std::string& workload,
                        const std::string& system, std::optional<double> fraction);

// Measures the experiments' points, printing a row for each to `text`.
class PointRunner {
 public:
  // `o`: validated, with the placement actually used.
  PointRunner(const OqBenchOptions& o, std::ostream& text) : o_(o), text_(text) {}

  Status run_threads();  // Fig. 6
  Status run_latency();  // Figs. 7-8
  Status run_pmkv();     // Figs. 9-11

  std::vector<Point>& points() { return points_; }

 private:
  bool selected(const std::string& system) const;
  Result<PmHost*> pm_host();
  // Builds the system, runs one point (closed loop when fraction is empty),
  // tears it down.
  Result<Point> measure(const std::string& experiment, const std::string& system, const std::string& workload,
                        const KvMix& mix, bool mp, bool deleg, uint32_t sessions, uint32_t inflight,
                        std::optional<double> fraction, double peak_mops);
  void keep(Point p);
  Status run_latency_like(const std::string& experiment, const std::string& workload, const KvMix& mix,
                          const std::vector<std::string>& systems, const std::vector<double>& loads);

  const OqBenchOptions& o_;
  std::ostream& text_;
  std::unique_ptr<PmHost> pm_;
  Backlog backlog_{1 << 20};
  std::vector<Point> points_;
  uint64_t seed_ = 0x0Bu;
  uint64_t work_item_first_ns_ = 0;  // the first point's "before"
};

}  // namespace ferry::bench::oq_bench
