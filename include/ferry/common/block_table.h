// A fixed-capacity table indexed by a small integer whose storage comes in
// blocks of kBlock entries, each allocated (value-initialized) when an index
// in it is first written. Entries never move. A NIC's MR table (65,536 keys)
// and an RPC server's handler table (65,536 types) are mostly empty: zeroing
// them whole made creating a simulated cluster mostly page faults.
// Not thread-safe: callers serialize writers, and a reader must not race
// with the write that allocates its block.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ferry/common/assert.h"

namespace ferry {

template <typename T, uint32_t kBlock>
class BlockTable {
 public:
  explicit BlockTable(uint32_t capacity) : capacity_(capacity), blocks_((capacity + kBlock - 1) / kBlock) {}

  uint32_t capacity() const { return capacity_; }

  // The entry at index, or nullptr when index is past the capacity or its
  // block was never written.
  const T* find(uint32_t index) const {
    if (index >= capacity_) return nullptr;
    const std::unique_ptr<T[]>& b = blocks_[index / kBlock];
    return b ? &b[index % kBlock] : nullptr;
  }

  // The entry at index, allocating its block. Precondition (asserted):
  // index < capacity().
  T& at(uint32_t index) {
    FERRY_ASSERT(index < capacity_, "table index ", index, " past capacity ", capacity_);
    std::unique_ptr<T[]>& b = blocks_[index / kBlock];
    if (!b) b = std::make_unique<T[]>(kBlock);
    return b[index % kBlock];
  }

  // f(index, entry) for every entry of every allocated block, ascending.
  template <typename F>
  void for_each_allocated(F&& f) const {
    for (uint32_t b = 0; b < blocks_.size(); ++b) {
      if (!blocks_[b]) continue;
      for (uint32_t i = 0; i < kBlock && b * kBlock + i < capacity_; ++i) f(b * kBlock + i, blocks_[b][i]);
    }
  }

 private:
  uint32_t capacity_;
  std::vector<std::unique_ptr<T[]>> blocks_;
};

}  // namespace ferry
