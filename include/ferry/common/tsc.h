// Cycle-counter timestamps for benchmarks: rdtsc costs ~10 ns here against
// ~25 ns for clock_gettime, which matters when the thing measured takes a
// few hundred. Calibrated once against CLOCK_MONOTONIC. Requires an
// invariant TSC (constant_tsc + nonstop_tsc), which Tsc::invariant() checks.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace ferry {

class Tsc {
 public:
  static uint64_t now() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
  }
  // Nanoseconds per tick, measured on first use (~20 ms).
  static double ns_per_tick();
  // True if /proc/cpuinfo reports an invariant TSC (read on first use).
  static bool invariant();
};

}  // namespace ferry
