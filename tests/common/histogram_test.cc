// Histogram: exact small values, bounded relative error for large ones,
// percentiles of known distributions, merge, and the empty histogram.
#include "ferry/common/histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "ferry/common/rng.h"

namespace ferry {
namespace {

constexpr uint64_t kSeed = 0x5EEDF00D;  // randomized tests: rerun with this seed

// |got - want| <= want * fraction
void expect_within(uint64_t got, uint64_t want, double fraction) {
  const double diff = std::fabs(static_cast<double>(got) - static_cast<double>(want));
  EXPECT_LE(diff, static_cast<double>(want) * fraction) << "got " << got << ", want " << want;
}

void expect_bucket_brackets(uint64_t v) {
  const size_t i = Histogram::bucket_index(v);
  ASSERT_LT(i, Histogram::kBucketCount) << v;
  const uint64_t lo = Histogram::bucket_low(i);
  const uint64_t hi = Histogram::bucket_high(i);
  EXPECT_LE(lo, v) << "value " << v << " bucket " << i;
  EXPECT_GE(hi, v) << "value " << v << " bucket " << i;
  // Width (hi - lo + 1) at most 1/128 of the bucket's low edge. Written so
  // that nothing overflows for the top bucket.
  if (v >= 256) {
    EXPECT_LE(hi - lo, lo / 128 - 1) << "value " << v << " bucket [" << lo << ", " << hi << "]";
  }
}

TEST(Histogram, ValuesBelow256AreExact) {
  for (uint64_t v = 0; v < 256; ++v) {
    const size_t i = Histogram::bucket_index(v);
    EXPECT_EQ(Histogram::bucket_low(i), v);
    EXPECT_EQ(Histogram::bucket_high(i), v);
    Histogram h;
    h.record(v);
    EXPECT_EQ(h.percentile(0.5), v);
    EXPECT_EQ(h.percentile(0.0), v);
    EXPECT_EQ(h.percentile(1.0), v);
  }
  Histogram h;
  for (uint64_t v = 0; v < 256; ++v) h.record(v);
  EXPECT_EQ(h.percentile(0.5), 127u);  // the 128th smallest of 0..255
  EXPECT_EQ(h.percentile(0.25), 63u);
  EXPECT_EQ(h.percentile(1.0), 255u);
}

TEST(Histogram, BucketsBracketPowersOfTwoAndTheirNeighbours) {
  for (int k = 0; k < 64; ++k) {
    const uint64_t p = 1ULL << k;
    expect_bucket_brackets(p);
    expect_bucket_brackets(p - 1);
    expect_bucket_brackets(p + 1);
    expect_bucket_brackets(p + p / 2);
  }
  expect_bucket_brackets(1ULL << 63);
  expect_bucket_brackets((1ULL << 63) - 1);
  expect_bucket_brackets(UINT64_MAX);
  expect_bucket_brackets(UINT64_MAX - 1);
  EXPECT_EQ(Histogram::bucket_high(Histogram::bucket_index(UINT64_MAX)), UINT64_MAX);
  EXPECT_EQ(Histogram::bucket_index(UINT64_MAX), Histogram::kBucketCount - 1);
  // 2^63 starts a bucket of width 2^56.
  EXPECT_EQ(Histogram::bucket_low(Histogram::bucket_index(1ULL << 63)), 1ULL << 63);
  EXPECT_EQ(Histogram::bucket_high(Histogram::bucket_index(1ULL << 63)), (1ULL << 63) + (1ULL << 56) - 1);
}

TEST(Histogram, BucketsBracketRandomValuesOfEveryMagnitude) {
  SCOPED_TRACE(::testing::Message() << "seed " << kSeed);
  Rng rng(kSeed);
  for (int i = 0; i < 20000; ++i) {
    const int bits = static_cast<int>(rng.below(64)) + 1;
    const uint64_t v = bits == 64 ? rng.next() : rng.next() & ((1ULL << bits) - 1);
    expect_bucket_brackets(v);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(Histogram, BucketsTileTheWholeRangeWithoutGaps) {
  EXPECT_EQ(Histogram::bucket_low(0), 0u);
  for (size_t i = 0; i + 1 < Histogram::kBucketCount; ++i) {
    ASSERT_EQ(Histogram::bucket_high(i) + 1, Histogram::bucket_low(i + 1)) << "bucket " << i;
    ASSERT_EQ(Histogram::bucket_index(Histogram::bucket_low(i)), i);
    ASSERT_EQ(Histogram::bucket_index(Histogram::bucket_high(i)), i);
  }
  EXPECT_EQ(Histogram::bucket_high(Histogram::kBucketCount - 1), UINT64_MAX);
}

TEST(Histogram, UniformOneToTenThousand) {
  auto h = std::make_unique<Histogram>();
  for (uint64_t v = 1; v <= 10000; ++v) h->record(v);
  EXPECT_EQ(h->count(), 10000u);
  EXPECT_EQ(h->min(), 1u);
  EXPECT_EQ(h->max(), 10000u);
  EXPECT_DOUBLE_EQ(h->mean(), 5000.5);
  expect_within(h->percentile(0.5), 5000, 0.01);
  expect_within(h->percentile(0.9), 9000, 0.01);
  expect_within(h->percentile(0.99), 9900, 0.01);
  expect_within(h->percentile(0.999), 9990, 0.01);
  EXPECT_EQ(h->percentile(0.0), 1u) << "the smallest value is below 256, so exact";
  EXPECT_LE(h->percentile(1.0), 10000u) << "clamped to max";
  expect_within(h->percentile(1.0), 10000, 0.008);
  // Percentiles never decrease with q.
  uint64_t prev = 0;
  for (int i = 0; i <= 1000; ++i) {
    const uint64_t p = h->percentile(i / 1000.0);
    EXPECT_GE(p, prev) << "q=" << i / 1000.0;
    prev = p;
  }
}

TEST(Histogram, LargeValuesWithinBoundedRelativeError) {
  auto h = std::make_unique<Histogram>();
  // Nanosecond latencies: 1 us .. 1 s in 1 us steps would be too many; use
  // 1000 values spaced 1 ms apart starting at 1 s.
  for (uint64_t i = 1; i <= 1000; ++i) h->record(1'000'000'000ULL + i * 1'000'000ULL);
  expect_within(h->percentile(0.5), 1'500'000'000ULL, 0.008);
  expect_within(h->percentile(0.99), 1'990'000'000ULL, 0.008);
  EXPECT_EQ(h->max(), 2'000'000'000ULL);
  EXPECT_EQ(h->min(), 1'001'000'000ULL);
}

TEST(Histogram, ConstantValueIsReportedExactly) {
  auto h = std::make_unique<Histogram>();
  h->record_n(123'456'789, 1000);
  EXPECT_EQ(h->count(), 1000u);
  for (double q : {0.0, 0.01, 0.5, 0.99, 1.0}) EXPECT_EQ(h->percentile(q), 123'456'789u) << q;
  EXPECT_DOUBLE_EQ(h->mean(), 123'456'789.0);
}

TEST(Histogram, BimodalDistribution) {
  auto h = std::make_unique<Histogram>();
  h->record_n(100, 900);
  h->record_n(1'000'000, 100);
  EXPECT_EQ(h->percentile(0.5), 100u);
  EXPECT_EQ(h->percentile(0.9), 100u) << "rank 900 is the last small value";
  expect_within(h->percentile(0.901), 1'000'000, 0.008);
  EXPECT_EQ(h->percentile(1.0), 1'000'000u) << "midpoint clamped to the exact max";
  EXPECT_DOUBLE_EQ(h->mean(), (900.0 * 100 + 100.0 * 1'000'000) / 1000.0);
}

TEST(Histogram, RecordNEqualsRepeatedRecord) {
  auto a = std::make_unique<Histogram>();
  auto b = std::make_unique<Histogram>();
  a->record_n(5000, 7);
  a->record_n(17, 0);  // n = 0 records nothing
  for (int i = 0; i < 7; ++i) b->record(5000);
  EXPECT_EQ(a->count(), 7u);
  EXPECT_EQ(a->min(), 5000u) << "a zero-count record must not move min";
  EXPECT_EQ(a->summary_json(), b->summary_json());
}

TEST(Histogram, MergeEqualsRecordingEverythingInOne) {
  SCOPED_TRACE(::testing::Message() << "seed " << kSeed);
  Rng rng(kSeed);
  auto a = std::make_unique<Histogram>();
  auto b = std::make_unique<Histogram>();
  auto all = std::make_unique<Histogram>();
  for (int i = 0; i < 5000; ++i) {
    const uint64_t v = rng.below(1'000'000) + (i % 2 ? 0 : 5'000'000);
    (rng.below(3) == 0 ? *a : *b).record(v);
    all->record(v);
  }
  a->merge(*b);
  EXPECT_EQ(a->count(), all->count());
  EXPECT_EQ(a->min(), all->min());
  EXPECT_EQ(a->max(), all->max());
  EXPECT_DOUBLE_EQ(a->mean(), all->mean());
  for (int i = 0; i <= 100; ++i) EXPECT_EQ(a->percentile(i / 100.0), all->percentile(i / 100.0)) << i;
  EXPECT_EQ(a->summary_json(), all->summary_json());
}

TEST(Histogram, MergeWithEmptyKeepsMinAndMax) {
  auto a = std::make_unique<Histogram>();
  auto empty = std::make_unique<Histogram>();
  a->record(300);
  a->record(40);
  a->merge(*empty);
  EXPECT_EQ(a->count(), 2u);
  EXPECT_EQ(a->min(), 40u);
  EXPECT_EQ(a->max(), 300u);
  empty->merge(*a);
  EXPECT_EQ(empty->count(), 2u);
  EXPECT_EQ(empty->min(), 40u);
  EXPECT_EQ(empty->max(), 300u);
  EXPECT_EQ(empty->percentile(0.0), 40u);
}

TEST(Histogram, EmptyReportsZero) {
  auto h = std::make_unique<Histogram>();
  EXPECT_EQ(h->count(), 0u);
  EXPECT_EQ(h->min(), 0u);
  EXPECT_EQ(h->max(), 0u);
  EXPECT_EQ(h->mean(), 0.0);
  for (double q : {0.0, 0.5, 0.99, 1.0}) EXPECT_EQ(h->percentile(q), 0u) << q;
  EXPECT_EQ(h->summary_json(),
            "{\"count\":0,\"min\":0,\"avg\":0.000000,\"p50\":0,\"p95\":0,\"p99\":0,\"p999\":0,\"max\":0}");
}

TEST(Histogram, ResetEmptiesIt) {
  auto h = std::make_unique<Histogram>();
  h->record(1);
  h->record(1'000'000);
  h->reset();
  EXPECT_EQ(h->count(), 0u);
  EXPECT_EQ(h->min(), 0u);
  EXPECT_EQ(h->max(), 0u);
  EXPECT_EQ(h->percentile(0.5), 0u);
  h->record(77);
  EXPECT_EQ(h->min(), 77u) << "min restarts after reset";
  EXPECT_EQ(h->percentile(0.5), 77u);
}

TEST(Histogram, ExtremeValues) {
  auto h = std::make_unique<Histogram>();
  h->record(UINT64_MAX);
  h->record(0);
  EXPECT_EQ(h->min(), 0u);
  EXPECT_EQ(h->max(), UINT64_MAX);
  EXPECT_EQ(h->percentile(0.0), 0u);
  // The top bucket is [255 << 56, 2^64 - 1]; its midpoint is within 1/256 of max.
  EXPECT_GE(h->percentile(1.0), 255ULL << 56);
  EXPECT_GE(static_cast<double>(h->percentile(1.0)), static_cast<double>(UINT64_MAX) * (1 - 1.0 / 128));
}

}  // namespace
}  // namespace ferry
