// The load guard (design brief, "Measuring honestly"): a fixed short work
// item timed many times on the client/NIC core, quiet before a point and
// then under the point's conditions. Its tails, not its best case, show
// whether the load on the replica CPU disturbed the core that runs every
// emulated NIC -- which would make a "loaded" point measure the wrong thing.
#pragma once

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "ferry/common/histogram.h"

namespace ferry::bench {

inline constexpr int kGuardSamples = 10'000;
// A point whose work-item p99 is above this multiple of the quiet p99 is
// reported as disturbed.
inline constexpr double kDisturbedP99Ratio = 1.5;

struct CoreGuard {
  Histogram base;    // quiet, right before the point (pair)
  Histogram during;  // under the point's load (for a quiet point: quiet again, after it)
  double p99_ratio() const {
    return static_cast<double>(during.percentile(0.99)) /
           static_cast<double>(std::max<uint64_t>(1, base.percentile(0.99)));
  }
  bool disturbed() const { return p99_ratio() > kDisturbedP99Ratio; }
  // Into a point's JSON: client_core (both measurements' p50/p99 and the
  // sample count), client_core_p99_ratio, client_core_disturbed.
  void add_to(nlohmann::json& point) const;
};

// About a microsecond of integer work and L1 loads and stores (the kind of
// work the engine does per packet), timed `samples` times on this thread.
Histogram time_work_item(int samples);

}  // namespace ferry::bench
