// Parker: lets one thread sleep until another unparks it or a deadline passes,
// without a syscall on the unpark side unless the sleeper is actually asleep.
//
// Protocol (Dekker style): the sleeper calls prepare_park(), then re-checks
// its work sources with seq_cst loads, then park(); a waker first publishes
// its work with a seq_cst store, then calls unpark(). All four accesses sit in
// the single seq_cst order, so either the sleeper sees the work or the waker
// sees the sleeper's flag and issues the futex wake. Only one thread may park
// on a given Parker; any thread may unpark it.
#pragma once

#include <atomic>
#include <cstdint>

namespace ferry {

class Parker {
 public:
  void prepare_park() { state_.store(kParked, std::memory_order_seq_cst); }
  // Cancels a prepare_park() when the re-check found work.
  void cancel_park() { state_.store(kRunning, std::memory_order_seq_cst); }
  // Sleeps until unpark() or until `timeout_ns` elapsed (0 = no timeout).
  void park(uint64_t timeout_ns);
  // Wakes the parked thread if it is parked; cheap (one load) if it is not.
  void unpark() {
    if (state_.load(std::memory_order_seq_cst) == kParked) wake();
  }
  bool parked() const { return state_.load(std::memory_order_relaxed) == kParked; }
  uint64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }

 private:
  void wake();
  static constexpr uint32_t kRunning = 0;
  static constexpr uint32_t kParked = 1;
  std::atomic<uint32_t> state_{kRunning};
  std::atomic<uint64_t> wakeups_{0};
};

}  // namespace ferry
