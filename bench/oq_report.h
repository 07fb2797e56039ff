// `ferry bench oq` (oq_bench.h), its report: each point's figures as JSON
// and as a row of text, the ratios between systems at the same load, the
// paper's targets checked on this run's numbers, and the headline.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "oq_bench.h"
#include "oq_points.h"
#include "regime.h"

namespace ferry::bench::oq_bench {

// A run's figures, over its measured window.
double window_seconds(const Run& r);
double achieved_mops(const Run& r);

// What bounded a point, measured over its window (issue 29): the server
// workers' busy fraction (time handling completions, the added server cost
// included, over window x workers; TSC time, which is CPU time while the
// workers keep their CPU -- worker_wait says whether they did), the
// client/NIC core's (its thread steps every NIC: 1 - the passes in which
// nothing happened), and each thread's on-CPU and waiting time from
// /proc/self/task/*/schedstat. bound_by: "server" or "client-nic" when that
// side is >= kBoundBusy busy (the busier if both), else "other" for a closed
// loop (calls in flight x latency) and "offered-load" for an open loop
// (regime.h).
struct Regime {
  double server_busy = 0;
  double worker_cpu = 0;
  double worker_wait = 0;
  double client_busy = 0;
  double client_cpu = 0;
  double client_wait = 0;
  std::string bound_by;
  bool disturbed = false;  // a worker's or the client's wait above kDisturbedWait
  // The client core's work item took this many times its time at the run's
  // first point (the larger of before and after the point).
  double core_slowdown = 1;
  nlohmann::json json() const;
};
Regime regime_of(const Point& p);
// The paper's regime at a workload's peak: the server bound (>= kBoundBusy)
// with the client/NIC core at most half busy.
bool paper_regime(const Regime& r);

// Where things ran, for every point.
struct Where {
  int client_cpu = -1;
  int server_cpu = -1;
  uint32_t workers = 1;
  nlohmann::json json() const;
  std::string text() const;
};

// One JSON object per point; `reference`: the run's physical references.
nlohmann::json point_json(const Point& p, const Where& where, const nlohmann::json& reference);
void print_row(std::ostream& out, const Point& p);

// Each point's p50/p99/p99.9 over RawRPC's and DeferredExec's at the same
// load (threads: throughput over RawRPC's), into Point::ratios.
void fill_ratios(std::vector<Point>& points);
// The paper's claims checked on this run's numbers, into Point::targets;
// returns them all.
nlohmann::json check_targets(std::vector<Point>& points, const OqBenchOptions& o);
// The headline: Fig. 6's ends, the targets met or not, write-only PmKv at
// every load.
void print_headline(std::ostream& text, const OqBenchOptions& o, const std::vector<Point>& points,
                    const nlohmann::json& targets);

}  // namespace ferry::bench::oq_bench
