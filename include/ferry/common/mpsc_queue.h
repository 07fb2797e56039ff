// Bounded multi-producer single-consumer queue of trivially copyable values
// (Vyukov's bounded queue with per-cell sequence numbers). Lock-free; push
// fails when full. Producers: any thread. Consumer: one thread.
// The publishing store of push() and the load of maybe_nonempty() are seq_cst
// so that the queue can take part in a Dekker-style sleep/wake handshake
// (see Parker).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "ferry/common/assert.h"

namespace ferry {

template <typename T>
class MpscQueue {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  explicit MpscQueue(size_t capacity) {
    size_t cap = 2;
    while (cap < capacity) cap <<= 1;
    mask_ = cap - 1;
    cells_ = std::make_unique<Cell[]>(cap);
    for (size_t i = 0; i < cap; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  bool push(const T& value) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      const size_t seq = cell.seq.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          cell.seq.store(pos + 1, std::memory_order_seq_cst);
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // Consumer only.
  bool pop(T* out) {
    Cell& cell = cells_[head_ & mask_];
    const size_t seq = cell.seq.load(std::memory_order_acquire);
    if (seq != head_ + 1) return false;
    *out = cell.value;
    cell.seq.store(head_ + mask_ + 1, std::memory_order_release);
    ++head_;
    return true;
  }

  // Consumer only: true if a pop would (probably) succeed.
  bool maybe_nonempty() const {
    return cells_[head_ & mask_].seq.load(std::memory_order_seq_cst) == head_ + 1;
  }

 private:
  struct alignas(64) Cell {
    std::atomic<size_t> seq;
    T value;
  };
  std::unique_ptr<Cell[]> cells_;
  size_t mask_ = 0;
  alignas(64) std::atomic<size_t> tail_{0};  // producers
  alignas(64) size_t head_ = 0;              // consumer only
};

}  // namespace ferry
