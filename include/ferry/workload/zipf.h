// Skewed key choosers: YCSB's Zipfian generators and an exact Zipf sampler.
//
// ZipfianGenerator and ScrambledZipfianGenerator reproduce YCSB's
// site.ycsb.generator.ZipfianGenerator and ScrambledZipfianGenerator
// (core/src/main/java/site/ycsb/generator/ in brianfrankcooper/YCSB), which
// implement the method of J. Gray, P. Sundaresan, S. Englert, K. Baclawski,
// P. Weinberger, "Quickly Generating Billion-Record Synthetic Databases",
// SIGMOD 1994. Gray's method is exact for the two most popular items only:
// items 2.. come from a continuous approximation (for n = 1000, theta 0.99,
// item 2 is drawn about 17% more often than Zipf's law says, items past ~15 a
// few percent less). Use them to match YCSB; use ZipfSampler for an exact Zipf
// law or for an exponent outside (0, 1).
//
// Thread rules: generators are immutable after construction; next() takes the
// randomness as a parameter, so threads may share one generator as long as
// each passes its own Rng.
#pragma once

#include <cstdint>

#include "ferry/common/rng.h"

namespace ferry::workload {

// zeta(n, theta) = sum over i = 1..n of 1 / i^theta, summed in increasing i
// as YCSB's zetastatic does, so the result is bit-identical to YCSB's. Costs n
// pow() calls (about 20 ms for 10^6 items).
double zeta(uint64_t n, double theta);

class ZipfianGenerator {
 public:
  static constexpr double kDefaultTheta = 0.99;  // YCSB's ZIPFIAN_CONSTANT

  // Items min..max inclusive; min is the most popular, min + 1 the next, ...
  // Computes zetan = zeta(max - min + 1, theta): O(items) time, so large item
  // counts take seconds (use the zetan constructor with a precomputed value).
  // Preconditions (asserted): min <= max, max - min < UINT64_MAX,
  // 0 < theta < 1.
  ZipfianGenerator(uint64_t min, uint64_t max, double theta = kDefaultTheta);
  // As above with a precomputed zetan (> 0) for these items and theta, as
  // YCSB's ScrambledZipfianGenerator does. O(1).
  ZipfianGenerator(uint64_t min, uint64_t max, double theta, double zetan);

  // One draw in [min, max]; consumes exactly one rng.uniform(). Where YCSB's
  // floating point could round up to min + items, this returns max instead.
  uint64_t next(Rng& rng) const;

  uint64_t min() const { return base_; }
  uint64_t max() const { return base_ + items_ - 1; }
  uint64_t items() const { return items_; }
  double theta() const { return theta_; }
  double zetan() const { return zetan_; }
  double eta() const { return eta_; }

 private:
  uint64_t items_;
  uint64_t base_;
  double theta_;
  double zetan_;
  double alpha_;         // 1 / (1 - theta)
  double eta_;           // Gray's scale for items 2..n
  double second_limit_;  // 1 + 0.5^theta: uz below this (and >= 1) -> min + 1
};

// YCSB's "zipfian" request distribution: a ZipfianGenerator over YCSB's 10^10
// item space (items 0..kItemCount inclusive, as YCSB constructs it) with
// theta 0.99 and YCSB's precomputed zetan, each draw hashed with fnv1a64 and
// taken modulo the item count. Hot items are scattered over [min, max] and
// the head of the distribution is the hash of Zipf ranks 0, 1, 2, ...; the
// item min + fnv1a64(0) % items is the most popular.
// Only theta 0.99 is offered: another theta would need zeta over 10^10 items.
class ScrambledZipfianGenerator {
 public:
  static constexpr uint64_t kItemCount = 10'000'000'000ULL;  // YCSB's ITEM_COUNT
  static constexpr double kZetan = 26.46902820178302;        // YCSB's ZETAN
  static constexpr double kTheta = 0.99;

  // Items min..max inclusive. Precondition (asserted): min <= max,
  // max - min < UINT64_MAX. O(1).
  ScrambledZipfianGenerator(uint64_t min, uint64_t max);
  // Items 0..items-1 (items >= 1).
  explicit ScrambledZipfianGenerator(uint64_t items);

  // One draw in [min, max]; consumes exactly one rng.uniform().
  uint64_t next(Rng& rng) const;

  uint64_t min() const { return min_; }
  uint64_t max() const { return min_ + items_ - 1; }
  uint64_t items() const { return items_; }

 private:
  ZipfianGenerator zipfian_;
  uint64_t min_;
  uint64_t items_;
};

// YCSB's "latest" request distribution (site.ycsb.generator.SkewedLatestGenerator
// over CoreWorkload's insert counter): record last - z, where z is a Zipfian
// draw over `last` items (YCSB's ZipfianGenerator.nextLong(last)), so the
// newest record is the most popular, the one before it the next, and so on.
// As records are inserted, `last` grows, and zeta is extended term by term,
// as YCSB does. eta keeps the item count of the construction, which is a
// YCSB quirk reproduced on purpose so that a draw equals YCSB's for the same
// uniform.
// Not thread-safe: next() updates the zeta state.
class SkewedLatestGenerator {
 public:
  // last: the newest record's number at construction (YCSB: recordcount - 1),
  // at least 1. Precondition (asserted): 0 < theta < 1.
  explicit SkewedLatestGenerator(uint64_t last, double theta = ZipfianGenerator::kDefaultTheta);

  // One record number in [0, last], where last is the newest record now. It
  // may only grow (asserted). Consumes exactly one rng.uniform().
  uint64_t next(Rng& rng, uint64_t last);
  // The same draw for a given uniform u in [0, 1).
  uint64_t from_uniform(double u, uint64_t last);

  double zetan() const { return zetan_; }

 private:
  uint64_t items_;  // the Zipfian's item count at construction
  uint64_t count_for_zeta_;
  double theta_;
  double zetan_;
  double zeta2theta_;  // zeta(2, theta), summed as YCSB does (for eta)
  double alpha_;
  double second_limit_;  // 1 + 0.5^theta, as YCSB's nextLong computes it
  double eta_;
};

// Exact Zipf law over ranks 0..items-1: P(rank k) = (k + 1)^-alpha / H, for
// any alpha >= 0 (alpha 0 is uniform). Used for the Twitter cache clusters,
// whose alphas (0.3048, 0.735, 1.065, 0) include ones Gray's method cannot do.
//
// Method: rejection-inversion, W. Hörmann and G. Derflinger, "Rejection-
// inversion to generate variates from monotone discrete distributions", ACM
// TOMACS 6(3), 1996 (the method behind Apache Commons RNG's Zipf sampler).
// Setup is O(1) with no table, so any item count up to 2^53 is fine. A draw
// costs one uniform, an exp and a log1p; under 2.5% of draws also need an
// expm1, a log and an exp for the full acceptance test, and under 1.5% are
// rejected and redrawn (measured for alpha 0.3..5, 2..2^40 items). Alpha 0
// draws rng.below(items) directly.
class ZipfSampler {
 public:
  // Preconditions (asserted): 1 <= items <= 2^53, alpha finite and >= 0.
  ZipfSampler(uint64_t items, double alpha);

  // One rank in [0, items).
  uint64_t next(Rng& rng) const;

  uint64_t items() const { return items_; }
  double alpha() const { return alpha_; }

 private:
  // The hat function's density h(x) = x^-alpha, its antiderivative H and H's
  // inverse, over the 1-based rank x.
  double h(double x) const;
  double big_h(double x) const;
  double big_h_inverse(double y) const;

  uint64_t items_;
  double alpha_;
  double h_integral_first_;  // H(1.5) - h(1): lower end of the uniform range
  double h_integral_last_;   // H(items + 0.5): upper end of the uniform range
  double squeeze_;           // accept at once when k - x <= squeeze_
};

}  // namespace ferry::workload
