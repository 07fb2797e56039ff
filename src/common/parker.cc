#include "ferry/common/parker.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace ferry {

static long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

void Parker::park(uint64_t timeout_ns) {
  timespec ts{};
  const timespec* tsp = nullptr;
  if (timeout_ns != 0) {
    ts.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000ULL);
    ts.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000ULL);
    tsp = &ts;
  }
  // Returns at once if a waker already flipped the state to running.
  futex(&state_, FUTEX_WAIT_PRIVATE, kParked, tsp);
  state_.store(kRunning, std::memory_order_seq_cst);
}

void Parker::wake() {
  uint32_t expected = kParked;
  if (state_.compare_exchange_strong(expected, kRunning, std::memory_order_seq_cst)) {
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    futex(&state_, FUTEX_WAKE_PRIVATE, 1, nullptr);
  }
}

}  // namespace ferry
