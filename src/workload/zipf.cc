#include "ferry/workload/zipf.h"

#include <algorithm>
#include <cmath>

#include "ferry/common/assert.h"
#include "ferry/workload/keys.h"

namespace ferry::workload {

double zeta(uint64_t n, double theta) {
  double sum = 0;
  for (uint64_t i = 1; i <= n; ++i) sum += 1 / std::pow(static_cast<double>(i), theta);
  return sum;
}

namespace {

uint64_t checked_items(uint64_t min, uint64_t max) {
  FERRY_ASSERT(min <= max, "empty item range [", min, ", ", max, "]");
  FERRY_ASSERT(max - min < UINT64_MAX, "item range [", min, ", ", max, "] has 2^64 items");
  return max - min + 1;
}

double check_theta(double theta) {
  FERRY_ASSERT(theta > 0 && theta < 1, "Gray's Zipfian needs 0 < theta < 1, got ", theta);
  return theta;
}

uint64_t last_of(uint64_t items) {
  FERRY_ASSERT(items >= 1, "a generator needs at least one item");
  return items - 1;
}

}  // namespace

ZipfianGenerator::ZipfianGenerator(uint64_t min, uint64_t max, double theta)
    : ZipfianGenerator(min, max, check_theta(theta),
                       zeta(checked_items(min, max), check_theta(theta))) {}

ZipfianGenerator::ZipfianGenerator(uint64_t min, uint64_t max, double theta, double zetan)
    : items_(checked_items(min, max)),
      base_(min),
      theta_(check_theta(theta)),
      zetan_(zetan),
      alpha_(1 / (1 - theta)),
      eta_(0),
      second_limit_(1 + std::pow(0.5, theta)) {
  FERRY_ASSERT(zetan > 0, "zetan must be positive, got ", zetan);
  // zeta(2, theta) == second_limit_. With 2 items zetan equals it and eta is
  // 0/0; next() never reaches eta then (every uz < zetan), so leave it 0.
  const double denominator = 1 - second_limit_ / zetan_;
  if (denominator != 0) {
    eta_ = (1 - std::pow(2.0 / static_cast<double>(items_), 1 - theta_)) / denominator;
  }
}

uint64_t ZipfianGenerator::next(Rng& rng) const {
  const double u = rng.uniform();
  const double uz = u * zetan_;
  if (uz < 1) return base_;
  if (uz < second_limit_) return base_ + 1;
  const double n = static_cast<double>(items_);
  const double offset = n * std::pow(eta_ * u - eta_ + 1, alpha_);
  // Java's (long) cast truncates; clamp first so a value rounded up to n (or
  // a NaN from a caller's inconsistent zetan) cannot leave the range.
  if (!(offset < n)) return base_ + items_ - 1;
  return base_ + static_cast<uint64_t>(offset);
}

ScrambledZipfianGenerator::ScrambledZipfianGenerator(uint64_t min, uint64_t max)
    : zipfian_(0, kItemCount, kTheta, kZetan), min_(min), items_(checked_items(min, max)) {}

ScrambledZipfianGenerator::ScrambledZipfianGenerator(uint64_t items)
    : ScrambledZipfianGenerator(0, last_of(items)) {}

uint64_t ScrambledZipfianGenerator::next(Rng& rng) const {
  return min_ + fnv1a64(zipfian_.next(rng)) % items_;
}

namespace {

// YCSB's zetastatic(st, n, theta, initialsum): initial plus the terms for
// items st+1..n, summed in increasing order.
double zeta_from(uint64_t st, uint64_t n, double theta, double initial) {
  double sum = initial;
  for (uint64_t i = st; i < n; ++i) sum += 1 / std::pow(static_cast<double>(i + 1), theta);
  return sum;
}

}  // namespace

SkewedLatestGenerator::SkewedLatestGenerator(uint64_t last, double theta)
    : items_(last),
      count_for_zeta_(last),
      theta_(check_theta(theta)),
      zetan_(zeta(last, theta)),
      zeta2theta_(zeta(2, theta)),
      alpha_(1 / (1 - theta)),
      eta_(0) {
  FERRY_ASSERT(last >= 1, "the latest distribution needs a record before the newest");
  const double denominator = 1 - zeta2theta_ / zetan_;
  if (denominator != 0) eta_ = (1 - std::pow(2.0 / static_cast<double>(items_), 1 - theta_)) / denominator;
}

uint64_t SkewedLatestGenerator::from_uniform(double u, uint64_t last) {
  FERRY_ASSERT(last >= count_for_zeta_, "the newest record went back from ", count_for_zeta_, " to ", last);
  if (last > count_for_zeta_) {
    zetan_ = zeta_from(count_for_zeta_, last, theta_, zetan_);
    count_for_zeta_ = last;
    // As YCSB: eta from the construction's item count, not `last`.
    eta_ = (1 - std::pow(2.0 / static_cast<double>(items_), 1 - theta_)) / (1 - zeta2theta_ / zetan_);
  }
  const double uz = u * zetan_;
  uint64_t z;
  if (uz < 1) {
    z = 0;
  } else if (uz < 1 + std::pow(0.5, theta_)) {
    z = 1;
  } else {
    const double n = static_cast<double>(last);
    const double offset = n * std::pow(eta_ * u - eta_ + 1, alpha_);
    z = offset < n ? static_cast<uint64_t>(offset) : last;  // Java's (long) truncates; never past record 0
  }
  return last - std::min(z, last);
}

uint64_t SkewedLatestGenerator::next(Rng& rng, uint64_t last) { return from_uniform(rng.uniform(), last); }

// Rejection-inversion (Hörmann and Derflinger 1996) for P(x) ~ h(x) = x^-alpha
// over x = 1..n. The area under h between x - 1/2 and x + 1/2 is at least h(x)
// because h is convex, so a uniform point y in [H(1.5) - h(1), H(n + 0.5)],
// mapped back through H^-1 and rounded to x, lands in a sub-interval of length
// exactly h(x) (namely [H(x + 0.5) - h(x), H(x + 0.5)]) with probability
// proportional to h(x): accept it there, otherwise draw again.

namespace {

// log1p(t) / t and expm1(t) / t, continuous at t = 0 (where alpha == 1 puts
// them): below 1e-8 the Taylor series to t^3 is exact in double precision.
double log1p_over(double t) {
  if (std::fabs(t) > 1e-8) return std::log1p(t) / t;
  return 1 - t * (0.5 - t * (1.0 / 3 - 0.25 * t));
}

double expm1_over(double t) {
  if (std::fabs(t) > 1e-8) return std::expm1(t) / t;
  return 1 + t * 0.5 * (1 + t / 3 * (1 + 0.25 * t));
}

}  // namespace

double ZipfSampler::h(double x) const { return std::exp(-alpha_ * std::log(x)); }

// H(x) = (x^(1 - alpha) - 1) / (1 - alpha), or log(x) when alpha == 1.
double ZipfSampler::big_h(double x) const {
  const double log_x = std::log(x);
  return expm1_over((1 - alpha_) * log_x) * log_x;
}

double ZipfSampler::big_h_inverse(double y) const {
  double t = y * (1 - alpha_);
  // Rounding can push t just below -1 at the upper end of the range.
  if (t < -1) t = -1;
  return std::exp(log1p_over(t) * y);
}

ZipfSampler::ZipfSampler(uint64_t items, double alpha)
    : items_(items), alpha_(alpha), h_integral_first_(0), h_integral_last_(0), squeeze_(0) {
  FERRY_ASSERT(items >= 1 && items <= (uint64_t{1} << 53), "Zipf item count ", items,
               " outside [1, 2^53]");
  FERRY_ASSERT(std::isfinite(alpha) && alpha >= 0, "Zipf alpha must be finite and >= 0, got ",
               alpha);
  if (alpha_ == 0) return;
  h_integral_first_ = big_h(1.5) - 1;  // h(1) == 1
  h_integral_last_ = big_h(static_cast<double>(items_) + 0.5);
  // The paper's constant s: any x within s below its rounded rank k is inside
  // k's acceptance interval (the bound is tightest at k = 2).
  squeeze_ = 2 - big_h_inverse(big_h(2.5) - h(2));
}

uint64_t ZipfSampler::next(Rng& rng) const {
  if (alpha_ == 0) return rng.below(items_);
  const double n = static_cast<double>(items_);
  for (;;) {
    const double y = h_integral_last_ + rng.uniform() * (h_integral_first_ - h_integral_last_);
    const double x = big_h_inverse(y);
    double k = std::floor(x + 0.5);
    // x can stray past [0.5, n + 0.5] by rounding only.
    if (k < 1) k = 1;
    if (k > n) k = n;
    if (k - x <= squeeze_ || y >= big_h(k + 0.5) - h(k)) {
      return static_cast<uint64_t>(k) - 1;
    }
  }
}

}  // namespace ferry::workload
