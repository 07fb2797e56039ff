// A lock for short critical sections shared with the NIC engine thread: spins
// (with pause) and then yields, instead of sleeping in the kernel -- a futex
// sleep and wake-up costs the engine tens of microseconds. BasicLockable, so
// std::lock_guard works.
#pragma once

#include <atomic>
#include <thread>

#include "ferry/common/cpu.h"

namespace ferry {

class SpinLock {
 public:
  void lock() {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 4096) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace ferry
