// PmKv's reservations: heap set aside for puts that must not fail for lack
// of room (JUNE BERRY's admission: a nilext put commits at the NIC, before
// the server executes it; PmKvService reserves per receive buffer).
//
// A reservation is a contiguous, 256-byte aligned run of heap units taken
// out of the allocator. Records placed in it are ordinary records (reachable
// from the index, found by open()'s walk); a record freed inside it goes back
// to the reservation, not the allocator, so its spot cannot be handed to
// anyone else until release(). Nothing of this is in PM: after a failure the
// caller adopt()s what it had reserved (it keeps the offsets where it can
// find them, e.g. the RPC server's durable admission table).
#include <string>

#include "ferry/store/pmkv.h"
#include "pmkv_alloc.h"
#include "pmkv_format.h"

namespace ferry::store {

using detail::kUnit;
using detail::kXpLine;

namespace {
constexpr uint64_t kAlignUnits = kXpLine / kUnit;
}  // namespace

Result<PmKvReservation> PmKv::reserve(uint64_t bytes) {
  FERRY_RETURN_IF_ERROR(check_usable());
  if (bytes == 0 || bytes > layout_->heap_bytes) {
    return invalid_argument("PmKv: reserve of " + std::to_string(bytes) + " bytes");
  }
  const uint64_t units = (bytes + kXpLine - 1) / kXpLine * kAlignUnits;
  const auto unit = alloc_->allocate(units, kAlignUnits);
  if (!unit) {
    return resource_exhausted("PmKv: no free extent of " + std::to_string(units * kUnit) + " bytes to reserve (" +
                              std::to_string(alloc_->free_units() * kUnit) + " bytes free, largest extent " +
                              std::to_string(alloc_->largest_free_units() * kUnit) + ")");
  }
  Reserved& r = reserved_[*unit];
  r.units = units;
  r.live.assign(units, false);
  r.live_units = 0;
  return PmKvReservation{*unit * kUnit, units * kUnit};
}

Status PmKv::adopt(const PmKvReservation& r) {
  FERRY_RETURN_IF_ERROR(check_usable());
  if (r.bytes == 0 || r.offset % kXpLine != 0 || r.bytes % kXpLine != 0 || r.offset < layout_->heap_offset ||
      r.offset > layout_->heap_end() || r.bytes > layout_->heap_end() - r.offset) {
    return invalid_argument("PmKv: adopt of [" + std::to_string(r.offset) + ", +" + std::to_string(r.bytes) +
                            ") is not a 256-aligned range of the heap");
  }
  const uint64_t first = r.offset / kUnit;
  const uint64_t units = r.bytes / kUnit;
  auto next = reserved_.lower_bound(first);
  const bool overlaps_next = next != reserved_.end() && next->first < first + units;
  const bool overlaps_prev = next != reserved_.begin() && std::prev(next)->first + std::prev(next)->second.units > first;
  if (overlaps_next || overlaps_prev) {
    return failed_precondition("PmKv: adopt of [" + std::to_string(r.offset) + ", +" + std::to_string(r.bytes) +
                               ") overlaps a live reservation");
  }
  Reserved res;
  res.units = units;
  res.live.assign(units, true);  // what the allocator does not hold free holds records
  res.live_units = units;
  alloc_->take_range(first, first + units, [&](uint64_t unit, uint64_t n) {
    for (uint64_t u = unit; u < unit + n; ++u) res.live[u - first] = false;
    res.live_units -= n;
  });
  reserved_[first] = std::move(res);
  return ok_status();
}

void PmKv::release(const PmKvReservation& r) {
  auto it = reserved_.find(r.offset / kUnit);
  if (it == reserved_.end() || it->second.units * kUnit != r.bytes) return;
  const uint64_t first = it->first;
  const Reserved& res = it->second;
  uint64_t i = 0;
  while (i < res.units) {
    if (res.live[i]) {
      ++i;
      continue;
    }
    const uint64_t start = i;
    while (i < res.units && !res.live[i]) ++i;
    alloc_->release(first + start, i - start);
  }
  reserved_.erase(it);
}

std::optional<std::pair<uint64_t, uint64_t>> PmKv::place_reserved(size_t record, const PmKvReservation& r,
                                                                   uint64_t at, uint64_t room) {
  auto it = reserved_.find(r.offset / kUnit);
  if (it == reserved_.end() || at % kUnit != 0) return std::nullopt;
  Reserved& res = it->second;
  auto take = [&](uint64_t first, uint64_t units) -> bool {  // relative units
    if (first + units > res.units) return false;
    for (uint64_t u = first; u < first + units; ++u) {
      if (res.live[u]) return false;
    }
    for (uint64_t u = first; u < first + units; ++u) res.live[u] = true;
    res.live_units += units;
    return true;
  };
  // The reservation starts 256-aligned, so alignment within it is alignment.
  const uint64_t align = detail::block_alignment(record);
  const uint64_t padded_at = (at + align - 1) / align * align;
  const uint64_t padded = detail::block_bytes(record);
  if (padded_at + padded <= at + room && take(padded_at / kUnit, padded / kUnit)) {
    return std::make_pair(it->first + padded_at / kUnit, padded / kUnit);
  }
  const uint64_t lined = detail::line_bytes(record);
  if (lined <= room && take(at / kUnit, lined / kUnit)) return std::make_pair(it->first + at / kUnit, lined / kUnit);
  return std::nullopt;
}

void PmKv::free_block(uint64_t unit, uint64_t units) {
  auto it = reserved_.upper_bound(unit);
  if (it != reserved_.begin()) {
    --it;
    Reserved& res = it->second;
    if (unit < it->first + res.units) {
      FERRY_ASSERT(unit + units <= it->first + res.units, "PmKv: a record straddles a reservation's end");
      for (uint64_t u = unit - it->first; u < unit - it->first + units; ++u) {
        FERRY_ASSERT(res.live[u], "PmKv: double free in a reservation at unit ", unit);
        res.live[u] = false;
      }
      res.live_units -= units;
      return;
    }
  }
  alloc_->release(unit, units);
}

}  // namespace ferry::store
