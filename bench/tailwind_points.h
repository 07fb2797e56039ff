// `ferry bench tailwind` (tailwind_bench.h), its points: on one system's
// cluster (tailwind_setup.h), the clients, active and latency experiments
// driven by the closed and open loops (load_loop.h); and the recovery
// experiment on a cluster of its own.
#pragma once

#include <cstdint>
#include <string>

#include "ferry/common/status.h"
#include "tailwind_bench.h"
#include "tailwind_report.h"

namespace ferry::bench::tailwind_bench {

// The clients, active and latency experiments of `system` on one cluster
// with its files in `dir`. rpc_peak_mops: the RPC baseline's write-only
// peak, which latency loads are fractions of (set when this is the baseline,
// or when it is still unknown).
Status run_measured(const std::string& system, const TailwindBenchOptions& o, const std::string& dir, Emitter& em,
                    double* rpc_peak_mops);

// Fig. 13: one server holding `objects` objects crashes and is recovered.
Status run_recovery(const std::string& system, uint64_t objects, const TailwindBenchOptions& o, const std::string& dir,
                    Emitter& em);

}  // namespace ferry::bench::tailwind_bench
