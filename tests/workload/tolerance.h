// Statistical tolerances shared by the workload tests (their seeds:
// tests/support/test_seed.h).
#pragma once

#include <cmath>
#include <cstdint>

namespace ferry::workload::workload_test {

// Frequency checks allow 5 standard deviations of a binomial count: a single
// check fails by chance with probability about 6e-7, so the ~200 checks of the
// suite fail together with probability about 1e-4 for an arbitrary FERRY_SEED
// (the default seeds pass deterministically), while a wrong probability of a
// few percent on a head rank still exceeds the bound at these sample sizes.
inline constexpr double kSigmas = 5;

// kSigmas standard deviations of the number of hits of an event of
// probability p in n independent draws.
inline double count_tolerance(double p, uint64_t n) {
  return kSigmas * std::sqrt(static_cast<double>(n) * p * (1 - p));
}

}  // namespace ferry::workload::workload_test
