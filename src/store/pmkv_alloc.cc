// PmKv's DRAM allocator (pmkv_alloc.h).
#include "pmkv_alloc.h"

#include "ferry/common/assert.h"

namespace ferry::store {

PmKv::Allocator::Allocator(uint64_t begin, uint64_t end) : begin_(begin), end_(end) {
  FERRY_ASSERT(begin <= end);
  if (end > begin) insert(begin, end - begin);
}

void PmKv::Allocator::rebuild(const std::vector<uint64_t>& used) {
  by_offset_.clear();
  by_size_.clear();
  free_units_ = 0;
  auto is_used = [&](uint64_t i) { return (used[i / 64] >> (i % 64)) & 1; };
  const uint64_t n = end_ - begin_;
  FERRY_ASSERT(used.size() * 64 >= n, "bitmap shorter than the heap");
  uint64_t i = 0;
  while (i < n) {
    if (is_used(i)) {
      ++i;
      continue;
    }
    const uint64_t start = i;
    while (i < n && !is_used(i)) ++i;
    insert(begin_ + start, i - start);
  }
}

std::optional<uint64_t> PmKv::Allocator::allocate(uint64_t units, uint64_t align) {
  FERRY_ASSERT(units > 0 && (align == 1 || align == 4), "units ", units, " align ", align);
  auto fits = [&](uint64_t start, uint64_t length) {
    const uint64_t at = (start + align - 1) / align * align;
    return at - start <= length && length - (at - start) >= units;
  };
  // The smallest extents that could hold it first; an unaligned extent may
  // need up to align - 1 more units, and one that large always fits.
  auto it = by_size_.lower_bound({units, 0});
  int tries = 0;
  while (it != by_size_.end() && !fits(it->second, it->first)) {
    if (++tries == 8) {
      it = by_size_.lower_bound({units + align - 1, 0});
      break;
    }
    ++it;
  }
  if (it == by_size_.end()) return std::nullopt;
  const uint64_t start = it->second;
  const uint64_t length = it->first;
  FERRY_ASSERT(fits(start, length));
  const uint64_t at = (start + align - 1) / align * align;
  erase(by_offset_.find(start));
  if (at > start) insert(start, at - start);
  if (start + length > at + units) insert(at + units, start + length - (at + units));
  return at;
}

void PmKv::Allocator::release(uint64_t unit, uint64_t units) {
  FERRY_ASSERT(units > 0 && unit >= begin_ && unit + units <= end_, "release of [", unit, ", +", units, ")");
  uint64_t start = unit;
  uint64_t length = units;
  auto next = by_offset_.lower_bound(unit);
  FERRY_ASSERT(next == by_offset_.end() || next->first >= unit + units, "double free of unit ", unit);
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    FERRY_ASSERT(prev->first + prev->second <= unit, "double free of unit ", unit);
    if (prev->first + prev->second == unit) {
      start = prev->first;
      length += prev->second;
      erase(prev);
    }
  }
  if (next != by_offset_.end() && next->first == unit + units) {
    length += next->second;
    erase(next);
  }
  insert(start, length);
}

void PmKv::Allocator::insert(uint64_t unit, uint64_t units) {
  by_offset_.emplace(unit, units);
  by_size_.emplace(units, unit);
  free_units_ += units;
}

void PmKv::Allocator::erase(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_units_ -= it->second;
  by_offset_.erase(it);
}

}  // namespace ferry::store
