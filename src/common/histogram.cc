#include "ferry/common/histogram.h"

#include <algorithm>
#include <cmath>

#include "ferry/common/assert.h"

namespace ferry {

size_t Histogram::bucket_index(uint64_t value) {
  if (value < 2 * kSubBuckets) return static_cast<size_t>(value);
  const int msb = 63 - __builtin_clzll(value);
  const int shift = msb - kSubBucketBits;  // >= 1
  const uint64_t sub = (value >> shift) - kSubBuckets;  // [0, 128)
  return static_cast<size_t>((static_cast<uint64_t>(shift) + 1) * kSubBuckets + sub);
}

uint64_t Histogram::bucket_low(size_t index) {
  if (index < 2 * kSubBuckets) return index;
  const uint64_t shift = index / kSubBuckets - 1;
  const uint64_t sub = index % kSubBuckets + kSubBuckets;
  return sub << shift;
}

uint64_t Histogram::bucket_high(size_t index) {
  if (index < 2 * kSubBuckets) return index;
  const uint64_t shift = index / kSubBuckets - 1;
  const uint64_t sub = index % kSubBuckets + kSubBuckets;
  // (sub + 1) << shift can overflow only for the very last bucket.
  if (shift >= 56 && sub == 2 * kSubBuckets - 1) return UINT64_MAX;
  return ((sub + 1) << shift) - 1;
}

void Histogram::record_n(uint64_t value, uint64_t n) {
  if (n == 0) return;
  buckets_[bucket_index(value)] += n;
  count_ += n;
  sum_ += value * n;
  min_ = std::min(min_, value);
  max_ = std::max(max_, value);
}

void Histogram::merge(const Histogram& other) {
  for (size_t i = 0; i < kBucketCount; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

void Histogram::reset() { *this = Histogram(); }

uint64_t Histogram::percentile(double q) const {
  if (count_ == 0) return 0;
  if (!(q >= 0.0)) q = 0.0;  // also catches NaN
  q = std::min(q, 1.0);
  uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  uint64_t seen = 0;
  for (size_t i = 0; i < kBucketCount; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      const uint64_t lo = bucket_low(i);
      const uint64_t hi = bucket_high(i);
      const uint64_t mid = lo + (hi - lo) / 2;
      return std::clamp(mid, min_, max_);
    }
  }
  FERRY_ASSERT(false, "histogram counts inconsistent");
  return max_;
}

std::string Histogram::summary_json() const {
  std::string s = "{\"count\":" + std::to_string(count_) + ",\"min\":" + std::to_string(min()) +
                  ",\"avg\":" + std::to_string(mean()) + ",\"p50\":" + std::to_string(percentile(0.5)) +
                  ",\"p95\":" + std::to_string(percentile(0.95)) + ",\"p99\":" + std::to_string(percentile(0.99)) +
                  ",\"p999\":" + std::to_string(percentile(0.999)) + ",\"max\":" + std::to_string(max_) + "}";
  return s;
}

}  // namespace ferry
