// A statistics counter with one writer and any number of readers. The writer
// increments with a relaxed load+store (no locked instruction on the hot
// path); readers see a recent value. Copying takes a snapshot.
#pragma once

#include <atomic>
#include <cstdint>

namespace ferry {

class Counter {
 public:
  Counter() = default;
  Counter(const Counter& other) : v_(other.get()) {}
  Counter& operator=(const Counter& other) {
    v_.store(other.get(), std::memory_order_relaxed);
    return *this;
  }
  void add(uint64_t n) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void inc() { add(1); }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }
  operator uint64_t() const { return get(); }  // NOLINT(google-explicit-constructor)

 private:
  std::atomic<uint64_t> v_{0};
};

}  // namespace ferry
