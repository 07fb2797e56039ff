// `ferry bench store` (store_bench.h), its points: one YCSB workload on one
// system's YcsbTarget (store_setup.h), a counted window of operations run one
// at a time by the closed or the open loop (load_loop.h), quiet and under
// load, each checked by the load guard (core_guard.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core_guard.h"
#include "engine_cost.h"
#include "ferry/common/histogram.h"
#include "ferry/common/status.h"
#include "report.h"
#include "store_bench.h"
#include "store_setup.h"

namespace ferry::bench::store_bench {

inline constexpr uint64_t kScanLengthMax = 100;  // YCSB-E: uniform 1..100

struct OpStats {
  Histogram hist;
};

struct PointResult {
  std::map<std::string, OpStats> ops;  // by op: read, update, insert, rmw, scan
  uint64_t total = 0;
  uint64_t writes = 0;
  uint64_t scanned = 0;  // records the scans returned
  double seconds = 0;
  uint64_t replica_cpu_ns = 0;
  // The client/NIC thread's idle time in the window: its engine passes that
  // found nothing, and (open loop) its waits for the next arrival; nullopt
  // when the system's client steps no NIC here (Redis).
  std::optional<uint64_t> client_idle_ns;
  // Chain traversals (group operations) in the window, locks included;
  // nullopt without a chain (Redis).
  std::optional<uint64_t> traversals;
  // Reads at the replica: its read service's worker thread (schedstat: on
  // its CPU, and runnable but waiting for it) in the window.
  std::optional<SchedStat> read_server;
  bool capped = false;
  CoreGuard guard;  // the client/NIC core's work item, quiet and during the point
};

struct PointContext;
struct UpdateTails;

// One point, closed loop (rate 0: the next op when the last completes) or
// open loop (Poisson arrivals at `rate` ops/s; each op's latency runs from
// its scheduled arrival, so an op that waits behind a slow one counts the
// wait). `inserted`: the records so far (D's and E's inserts add to it).
Status run_point(YcsbTarget& s, const std::string& name, char workload, const StoreBenchOptions& o, double rate,
                 uint64_t* inserted, PointResult* r);

// Runs `workloads` x loads on one system's target, reporting each point
// (store_report.h).
Status run_points(YcsbTarget& target, const PointContext& c, const std::vector<std::string>& workloads,
                  const StoreBenchOptions& o, const Placement& placement, std::ostream& out, UpdateTails* tails);

}  // namespace ferry::bench::store_bench
