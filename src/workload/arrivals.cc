#include "ferry/workload/arrivals.h"

#include <cmath>

#include "ferry/common/assert.h"

namespace ferry::workload {

PoissonArrivals::PoissonArrivals(double rate_per_second, uint64_t seed)
    : rng_(seed), rate_per_second_(rate_per_second), mean_gap_ns_(1e9 / rate_per_second) {
  FERRY_ASSERT(std::isfinite(rate_per_second) && rate_per_second >= kMinRatePerSecond,
               "arrival rate must be finite and at least ", kMinRatePerSecond, "/s, got ",
               rate_per_second);
}

uint64_t PoissonArrivals::next_gap_ns() {
  // Inversion: 1 - uniform() is in (0, 1], so the log is finite.
  const double gap_ns = -mean_gap_ns_ * std::log(1 - rng_.uniform());
  const double total_ns = carried_ns_ + gap_ns;
  const double whole_ns = std::floor(total_ns);
  carried_ns_ = total_ns - whole_ns;
  return static_cast<uint64_t>(whole_ns);
}

}  // namespace ferry::workload
