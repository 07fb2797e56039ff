#include "ferry/workload/zipf.h"

#include <algorithm>
#include <cmath>

#include "ferry/common/assert.h"
#include "ferry/workload/keys.h"

namespace ferry::workload {

namespace {

// YCSB's zetastatic(st, n, theta, initialsum): initial plus the terms for
// items st+1..n, summed in increasing order.
double zeta_from(uint64_t st, uint64_t n, double theta, double initial) {
  double sum = initial;
  for (uint64_t i = st; i < n; ++i) sum += 1 / std::pow(static_cast<double>(i + 1), theta);
  return sum;
}

// Gray's eta for `items` items, given zeta(2, theta) and zeta(n, theta). With
// 2 items zetan equals zeta2 and eta is 0/0; the draw never reaches eta then
// (every u * zetan < zetan), so it is left 0.
double gray_eta(uint64_t items, double theta, double zeta2, double zetan) {
  const double denominator = 1 - zeta2 / zetan;
  if (denominator == 0) return 0;
  return (1 - std::pow(2.0 / static_cast<double>(items), 1 - theta)) / denominator;
}

// Gray et al.'s draw as YCSB's ZipfianGenerator.nextLong codes it: rank 0
// below zeta 1, rank 1 below 1 + 0.5^theta, else n * (eta u - eta + 1)^alpha
// truncated as Java's (long) does. A value that rounding (or a NaN from an
// inconsistent zetan) puts at n or beyond returns `past_end`.
uint64_t gray_rank(double u, double zetan, double second_limit, double eta, double alpha, uint64_t n,
                   uint64_t past_end) {
  const double uz = u * zetan;
  if (uz < 1) return 0;
  if (uz < second_limit) return 1;
  const double items = static_cast<double>(n);
  const double offset = items * std::pow(eta * u - eta + 1, alpha);
  if (!(offset < items)) return past_end;
  return static_cast<uint64_t>(offset);
}

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

double zeta(uint64_t n, double theta) { return zeta_from(0, n, theta, 0); }

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
  eta_ = gray_eta(items_, theta_, second_limit_, zetan_);  // second_limit_ is zeta(2, theta)
}

uint64_t ZipfianGenerator::next(Rng& rng) const {
  return base_ + gray_rank(rng.uniform(), zetan_, second_limit_, eta_, alpha_, items_, items_ - 1);
}

ScrambledZipfianGenerator::ScrambledZipfianGenerator(uint64_t min, uint64_t max)
    : zipfian_(0, kItemCount, kTheta, kZetan), min_(min), items_(checked_items(min, max)) {}

ScrambledZipfianGenerator::ScrambledZipfianGenerator(uint64_t items)
    : ScrambledZipfianGenerator(0, last_of(items)) {}

uint64_t ScrambledZipfianGenerator::next(Rng& rng) const {
  return min_ + fnv1a64(zipfian_.next(rng)) % items_;
}

SkewedLatestGenerator::SkewedLatestGenerator(uint64_t last, double theta)
    : items_(last),
      count_for_zeta_(last),
      theta_(check_theta(theta)),
      zetan_(zeta(last, theta)),
      zeta2theta_(zeta(2, theta)),
      alpha_(1 / (1 - theta)),
      second_limit_(1 + std::pow(0.5, theta)),
      eta_(0) {
  FERRY_ASSERT(last >= 1, "the latest distribution needs a record before the newest");
  eta_ = gray_eta(items_, theta_, zeta2theta_, zetan_);
}

uint64_t SkewedLatestGenerator::from_uniform(double u, uint64_t last) {
  FERRY_ASSERT(last >= count_for_zeta_, "the newest record went back from ", count_for_zeta_, " to ", last);
  if (last > count_for_zeta_) {
    zetan_ = zeta_from(count_for_zeta_, last, theta_, zetan_);
    count_for_zeta_ = last;
    // As YCSB: eta from the construction's item count, not `last`.
    eta_ = gray_eta(items_, theta_, zeta2theta_, zetan_);
  }
  const uint64_t z = gray_rank(u, zetan_, second_limit_, eta_, alpha_, last, last);
  return last - std::min(z, last);  // never past record 0
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
