// Clocks as parameters (sans-IO): protocol cores never read time themselves.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ferry {

// Monotonic nanoseconds. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() const = 0;
};

// CLOCK_MONOTONIC via std::chrono::steady_clock.
class SteadyClock final : public Clock {
 public:
  uint64_t now_ns() const override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
  static SteadyClock& instance() {
    static SteadyClock clock;
    return clock;
  }
};

// CLOCK_MONOTONIC-aligned nanoseconds from the invariant TSC: ~10 ns a read
// instead of ~25 ns for clock_gettime on a VM. For loops that read the time
// every iteration (the NIC engine). Use only when Tsc::invariant().
class TscClock final : public Clock {
 public:
  TscClock();
  uint64_t now_ns() const override;
  static TscClock& instance();

 private:
  uint64_t base_ticks_;
  uint64_t base_ns_;
  double ns_per_tick_;
};

// Deterministic time for simulation and tests; advanced explicitly.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(uint64_t start_ns = 1'000'000) : now_(start_ns) {}
  uint64_t now_ns() const override { return now_.load(std::memory_order_acquire); }
  void advance_ns(uint64_t delta) { now_.fetch_add(delta, std::memory_order_acq_rel); }
  // Moves time forward to `t` if it is later than now.
  void advance_to(uint64_t t) {
    uint64_t cur = now_.load(std::memory_order_acquire);
    while (t > cur && !now_.compare_exchange_weak(cur, t, std::memory_order_acq_rel)) {
    }
  }

 private:
  std::atomic<uint64_t> now_;
};

}  // namespace ferry
