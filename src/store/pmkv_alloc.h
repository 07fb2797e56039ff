// PmKv's block allocator: best fit over free extents of 64 B units, with
// immediate coalescing. It lives in DRAM only -- no allocator metadata is ever
// written to PM -- and open() rebuilds it from the blocks the index reaches
// (Makalu's idea, OOPSLA'16: persistent reachability defines what is
// allocated, so a crash can neither leak a block nor hand out a live one).
//
// Not thread-safe (one PmKv, one thread).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "ferry/store/pmkv.h"

namespace ferry::store {

class PmKv::Allocator {
 public:
  // Manages units [begin, end) (absolute: region offset / 64), all free.
  Allocator(uint64_t begin, uint64_t end);
  // Marks free exactly the units whose bit is clear in `used` (bit i: unit
  // begin + i); everything else is allocated.
  void rebuild(const std::vector<uint64_t>& used);

  // A block of `units` units whose first unit is a multiple of `align`
  // (1 or 4: 64 B or 256 B). Best fit: the smallest extent that holds it,
  // the lowest such; the block is taken from the extent's start. nullopt
  // when nothing fits.
  std::optional<uint64_t> allocate(uint64_t units, uint64_t align);
  // Returns [unit, unit + units), which must be allocated, merging it with
  // free neighbours.
  void release(uint64_t unit, uint64_t units);
  // Takes every free unit in [begin, end) out of the free extents, calling
  // fn(unit, units) for each run taken; allocated units there stay as they are.
  template <typename Fn>
  void take_range(uint64_t begin, uint64_t end, Fn&& fn);

  uint64_t free_units() const { return free_units_; }
  uint64_t largest_free_units() const { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }
  uint64_t extents() const { return by_offset_.size(); }
  // Calls fn(unit, units) for every free extent in address order.
  template <typename Fn>
  void for_each_free(Fn&& fn) const {
    for (const auto& [unit, units] : by_offset_) fn(unit, units);
  }

 private:
  void insert(uint64_t unit, uint64_t units);
  void erase(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t begin_;
  uint64_t end_;
  uint64_t free_units_ = 0;
  std::map<uint64_t, uint64_t> by_offset_;           // free extent start -> length
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (length, start)
};

template <typename Fn>
void PmKv::Allocator::take_range(uint64_t begin, uint64_t end, Fn&& fn) {
  auto it = by_offset_.upper_bound(begin);
  if (it != by_offset_.begin()) --it;
  while (it != by_offset_.end() && it->first < end) {
    const uint64_t start = it->first;
    const uint64_t length = it->second;
    auto next = std::next(it);
    const uint64_t lo = std::max(start, begin);
    const uint64_t hi = std::min(start + length, end);
    if (lo < hi) {
      erase(it);
      if (start < lo) insert(start, lo - start);
      if (hi < start + length) insert(hi, start + length - hi);
      fn(lo, hi - lo);
    }
    it = next;
  }
}

}  // namespace ferry::store
