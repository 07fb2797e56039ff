// Request arrival processes for load generators.
//
// Open loop (PoissonArrivals): requests are issued on a schedule fixed in
// advance, whether or not earlier ones have completed, so a slow server cannot
// slow the offered load (no coordinated omission). The driver must add each
// gap to the previous *scheduled* time, not to the time it actually sent, and
// measure latency from the scheduled time.
//
// Closed loop (ClosedLoop): a fixed number of requests in flight; a client
// issues its next request when one of its own completes, so the offered load
// follows the server's speed.
#pragma once

#include <cstdint>

#include "ferry/common/rng.h"

namespace ferry::workload {

// Poisson arrivals: independent exponential gaps with mean 1e9 / rate ns.
// Gaps are whole nanoseconds; the fraction dropped by each rounding is
// carried into the next gap, so the sum of n gaps stays within 1 ns of the
// exact schedule and the rate is unbiased even when the mean gap is a few ns.
//
// Owns its Rng: the gap sequence depends only on (rate, seed). Not
// thread-safe; use one per sending thread (with distinct seeds).
class PoissonArrivals {
 public:
  // Slower rates could draw gaps past 2^64 ns; no benchmark runs that long.
  static constexpr double kMinRatePerSecond = 1e-6;

  // Precondition (asserted): kMinRatePerSecond <= rate_per_second, finite.
  PoissonArrivals(double rate_per_second, uint64_t seed);

  // Nanoseconds from the previous scheduled arrival to the next one (may be 0
  // at high rates).
  uint64_t next_gap_ns();

  double rate_per_second() const { return rate_per_second_; }
  double mean_gap_ns() const { return mean_gap_ns_; }

 private:
  Rng rng_;
  double rate_per_second_;
  double mean_gap_ns_;
  double carried_ns_ = 0;  // fraction of a nanosecond not yet returned, in [0, 1)
};

// A closed-loop load: `clients` clients, each keeping `outstanding_per_client`
// requests in flight.
struct ClosedLoop {
  uint32_t clients = 1;
  uint32_t outstanding_per_client = 1;

  uint64_t in_flight() const { return uint64_t{clients} * outstanding_per_client; }
};

}  // namespace ferry::workload
