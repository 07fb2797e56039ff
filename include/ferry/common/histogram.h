// Latency histogram with bounded relative error (log-linear buckets, in the
// spirit of HdrHistogram, which Debian does not package).
//
// Values are unsigned 64-bit (Ferry records nanoseconds). Values below 256 are
// exact; larger values land in buckets whose width is 1/128 of their power of
// two, so any reported percentile is within 0.8% of a recorded value. min,
// max, count and sum are exact. Recording is O(1) and never allocates; the
// object is ~60 KiB. Not thread-safe: one recorder per histogram, merge after.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace ferry {

class Histogram {
 public:
  static constexpr int kSubBucketBits = 7;
  static constexpr uint64_t kSubBuckets = 1ULL << kSubBucketBits;    // 128
  static constexpr size_t kBucketCount = (64 - kSubBucketBits + 1) * kSubBuckets;

  void record(uint64_t value) { record_n(value, 1); }
  void record_n(uint64_t value, uint64_t n);
  void merge(const Histogram& other);
  void reset();

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0.0; }
  // The value at quantile q in [0, 1] (0.5 = median, 0.999 = p99.9): the
  // midpoint of the bucket holding the ceil(q*count)-th smallest value,
  // clamped to [min, max]. 0 when empty.
  uint64_t percentile(double q) const;

  // {"count":..,"min":..,"avg":..,"p50":..,"p95":..,"p99":..,"p999":..,"max":..}
  std::string summary_json() const;

  static size_t bucket_index(uint64_t value);
  static uint64_t bucket_low(size_t index);
  static uint64_t bucket_high(size_t index);

 private:
  std::array<uint64_t, kBucketCount> buckets_{};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
};

}  // namespace ferry
