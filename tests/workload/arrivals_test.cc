// Poisson arrivals: exponential gaps with the configured mean, unbiased at
// high rates, reproducible by seed. Seeds print; rerun with FERRY_SEED=<n>.
#include "ferry/workload/arrivals.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_seed.h"
#include "tolerance.h"

namespace ferry::workload {
namespace {

using ferry::testing::test_seed;
using workload_test::count_tolerance;
using workload_test::kSigmas;

constexpr uint64_t kDraws = 200'000;

std::vector<double> draw_gaps(PoissonArrivals& arrivals) {
  std::vector<double> gaps(kDraws);
  for (double& gap : gaps) gap = static_cast<double>(arrivals.next_gap_ns());
  return gaps;
}

// 1 M requests/s: mean gap 1000 ns, so whole-ns rounding is negligible.
// Exponential(mean m): the sample mean has standard deviation m/sqrt(N), the
// sample variance (true value m^2) has standard deviation m^2*sqrt(8/N)
// (fourth central moment 9m^4); both are allowed 5 sigma: 1.1% and 3.2%.
TEST(PoissonArrivals, GapsAreExponentialWithConfiguredMean) {
  const uint64_t seed = test_seed(0xa221);
  PoissonArrivals arrivals(1e6, seed);
  EXPECT_DOUBLE_EQ(arrivals.mean_gap_ns(), 1000.0);
  const std::vector<double> gaps = draw_gaps(arrivals);
  const double n = static_cast<double>(kDraws);
  double sum = 0;
  for (const double gap : gaps) sum += gap;
  const double mean = sum / n;
  double squares = 0;
  uint64_t above_mean = 0;
  for (const double gap : gaps) {
    squares += (gap - mean) * (gap - mean);
    above_mean += gap > 1000.0;
  }
  const double variance = squares / (n - 1);
  const double m = 1000.0;
  EXPECT_NEAR(mean, m, kSigmas * m / std::sqrt(n));
  EXPECT_NEAR(variance, m * m, kSigmas * m * m * std::sqrt(8 / n));
  // Shape, not just moments: P(gap > mean) = e^-1 for an exponential.
  const double p = std::exp(-1.0);
  EXPECT_NEAR(static_cast<double>(above_mean), p * n, count_tolerance(p, kDraws));
}

// 200 M requests/s: mean gap 5 ns. Truncating each gap would lose ~0.5 ns
// (10%); the carried fraction keeps the mean within 5 sigma (1.1%).
TEST(PoissonArrivals, HighRateStaysUnbiased) {
  const uint64_t seed = test_seed(0xa222);
  PoissonArrivals arrivals(2e8, seed);
  const std::vector<double> gaps = draw_gaps(arrivals);
  double sum = 0;
  for (const double gap : gaps) sum += gap;
  const double n = static_cast<double>(kDraws);
  EXPECT_NEAR(sum / n, 5.0, kSigmas * 5.0 / std::sqrt(n));
}

TEST(PoissonArrivals, SameSeedSameSchedule) {
  const uint64_t seed = test_seed(0xa223);
  PoissonArrivals a(5e5, seed);
  PoissonArrivals b(5e5, seed);
  PoissonArrivals c(5e5, seed + 1);
  int differ = 0;
  for (int i = 0; i < 10'000; ++i) {
    const uint64_t gap = a.next_gap_ns();
    ASSERT_EQ(gap, b.next_gap_ns());
    differ += gap != c.next_gap_ns();
  }
  EXPECT_GT(differ, 0);
}

TEST(ClosedLoop, InFlightIsClientsTimesOutstanding) {
  EXPECT_EQ((ClosedLoop{}).in_flight(), 1u);
  EXPECT_EQ((ClosedLoop{.clients = 16, .outstanding_per_client = 8}).in_flight(), 128u);
  EXPECT_EQ((ClosedLoop{.clients = 1u << 20, .outstanding_per_client = 1u << 20}).in_flight(),
            uint64_t{1} << 40);
}

}  // namespace
}  // namespace ferry::workload
