// Region: the CPU side of the persistence model (stores, non-temporal stores,
// cache-line write-back and fences) and the region's accessors.
#include <immintrin.h>
#include <libpmem2.h>

#include <algorithm>
#include <cstring>

#include "state.h"

namespace ferry::pm {

using detail::kLine;

Media Region::media() const { return state_->media; }
uint8_t* Region::data() const { return state_->base; }
size_t Region::size() const { return state_->size; }
const std::string& Region::path() const { return state_->path; }
bool Region::real_pm() const {
  return state_->media == Media::kPm && (state_->granularity == PMEM2_GRANULARITY_BYTE ||
                                         state_->granularity == PMEM2_GRANULARITY_CACHE_LINE);
}
const char* Region::granularity() const {
  switch (state_->granularity) {
    case PMEM2_GRANULARITY_BYTE: return "byte (real PM, eADR platform)";
    case PMEM2_GRANULARITY_CACHE_LINE: return "cache line (real PM, ADR platform)";
    case PMEM2_GRANULARITY_PAGE: return "page (not PM: an ordinary file; persistence is modeled)";
    default: return "DRAM";
  }
}
bool Region::contains(const void* p, size_t len) const {
  const auto* a = static_cast<const uint8_t*>(p);
  return a >= state_->base && static_cast<size_t>(a - state_->base) <= state_->size &&
         len <= state_->size - static_cast<size_t>(a - state_->base);
}

MediaCounters Region::counters() const {
  std::lock_guard<SpinLock> lock(domain_->impl_->mu);
  return state_->media_model.counters;
}

void Region::reset_counters() {
  std::lock_guard<SpinLock> lock(domain_->impl_->mu);
  state_->media_model.counters = MediaCounters{};
}

void Region::settle_media_model() {
  std::lock_guard<SpinLock> lock(domain_->impl_->mu);
  auto& impl = *domain_->impl_;
  if (state_->media != Media::kPm) return;
  while (state_->nic_pending_writes != 0) impl.drain_front(domain_->config_);
  // The cache writes this region's lines back as its eviction would: each
  // a random one among the oldest `cache_eviction_window` still cached.
  std::deque<uint64_t> mine;  // oldest first
  for (const auto& c : impl.cache_window) {
    if (c.region == state_ && impl.cache_live(c)) mine.push_back(c.line);
  }
  for (const auto& c : impl.cache_order) {
    if (c.region == state_ && impl.cache_live(c)) mine.push_back(c.line);
  }
  const size_t window = std::max<size_t>(domain_->config_.cache_eviction_window, 1);
  std::vector<uint64_t> candidates;
  while (!mine.empty() || !candidates.empty()) {
    while (candidates.size() < window && !mine.empty()) {
      candidates.push_back(mine.front());
      mine.pop_front();
    }
    const size_t j = impl.eviction_rng.below(candidates.size());
    impl.cache_remove(state_, candidates[j], true);
    candidates[j] = candidates.back();
    candidates.pop_back();
  }
  state_->media_model.settle();
}

void Region::store(void* dst, const void* src, size_t len) {
  if (len == 0) return;
  std::lock_guard<SpinLock> lock(domain_->impl_->mu);
  store_locked(dst, src, len);
}

void Region::store_locked(void* dst, const void* src, size_t len) {
  if (state_->media == Media::kPm) {
    const size_t off = state_->offset_of(dst);
    domain_->impl_->drain_through_range(domain_->config_, state_, off, len);
    for (uint64_t line = off / kLine; line <= (off + len - 1) / kLine; ++line) {
      if (state_->lines[line].cache_pos == 0) {
        // A cached store reads the line first (read for ownership).
        ++state_->media_model.counters.cpu_rfo;
        state_->media_model.read_line(line);
      }
      domain_->impl_->cache_insert(domain_->config_, state_, line, /*ddio=*/false);
    }
  }
  std::memcpy(dst, src, len);
}

void Region::store_persist(void* dst, const void* src, size_t len) {
  if (len == 0) return;
  std::lock_guard<SpinLock> lock(domain_->impl_->mu);
  store_locked(dst, src, len);
  flush_locked(dst, len);
  drain_locked();
}

// Non-temporal copy: streaming stores for the aligned middle, plain copies for
// unaligned edges. On real PM libpmem2's own non-temporal memcpy is used; on an
// ordinary file libpmem2 would msync pages, which measures the kernel instead
// of the store path.
static void nt_copy(uint8_t* dst, const uint8_t* src, size_t len) {
  size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (head > len) head = len;
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 16 <= len; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  std::memcpy(dst + i, src + i, len - i);
}

void Region::store_nt(void* dst, const void* src, size_t len) {
  if (len == 0) return;
  std::lock_guard<SpinLock> lock(domain_->impl_->mu);
  store_nt_locked(dst, src, len);
}

void Region::store_nt_many(std::span<void* const> dsts, const void* src, size_t len) {
  if (len == 0 || dsts.empty()) return;
  std::lock_guard<SpinLock> lock(domain_->impl_->mu);
  for (void* dst : dsts) store_nt_locked(dst, src, len);
}

void Region::store_nt_locked(void* dst, const void* src, size_t len) {
  auto* d = static_cast<uint8_t*>(dst);
  if (state_->media != Media::kPm) {
    nt_copy(d, static_cast<const uint8_t*>(src), len);
    return;
  }
  const size_t off = state_->offset_of(dst);
  domain_->impl_->drain_through_range(domain_->config_, state_, off, len);
  for (uint64_t line = off / kLine; line <= (off + len - 1) / kLine; ++line) {
    const size_t lo = std::max<size_t>(off, line * kLine);
    const size_t hi = std::min<size_t>(off + len, (line + 1) * kLine);
    if (hi - lo < kLine) {
      // A partly filled write-combining buffer: the controller merges it with
      // a read (H7: pad small writes to whole lines).
      ++state_->media_model.counters.nt_partial;
      state_->media_model.read_line(line);
    }
    state_->media_model.write_line(line);
    domain_->impl_->cache_remove(state_, line, false);  // streaming stores bypass (and evict) the cache
  }
  if (real_pm()) {
    pmem2_get_memcpy_fn(state_->map)(dst, src, len, PMEM2_F_MEM_NONTEMPORAL | PMEM2_F_MEM_NODRAIN);
  } else {
    nt_copy(d, static_cast<const uint8_t*>(src), len);
  }
  // Durable at the next fence. (Snapshot from the source: the streamed
  // destination lines are not in the cache, and reading them back would
  // charge the model's bookkeeping a cache miss per line.)
  auto& impl = *domain_->impl_;
  const auto* from = static_cast<const uint8_t*>(src);
  impl.fence.push_back({state_, off, len, impl.fence_bytes.size()});
  impl.fence_bytes.insert(impl.fence_bytes.end(), from, from + len);
}

void Region::flush(const void* addr, size_t len) {
  if (len == 0 || state_->media != Media::kPm) return;
  std::lock_guard<SpinLock> lock(domain_->impl_->mu);
  flush_locked(addr, len);
}

void Region::flush_locked(const void* addr, size_t len) {
  if (len == 0 || state_->media != Media::kPm) return;
  auto& impl = *domain_->impl_;
  const size_t off = state_->offset_of(addr);
  const size_t first = off / kLine * kLine;
  const size_t end = std::min(state_->size, (off + len + kLine - 1) / kLine * kLine);
  // The lines hold what the CPU sees, NIC writes included: those left the
  // NIC's buffer before the CPU could see them.
  impl.drain_through_range(domain_->config_, state_, first, end - first);
  for (uint64_t line = first / kLine; line * kLine < end; ++line) {
    if (state_->lines[line].cache_pos != 0) {
      state_->media_model.write_line(line);  // write-back of a dirty line
      impl.cache_remove(state_, line, false);
    }
  }
  // clwb writes back the lines as they are now; the fence makes that durable.
  impl.fence.push_back({state_, first, end - first, impl.fence_bytes.size()});
  impl.fence_bytes.insert(impl.fence_bytes.end(), state_->base + first, state_->base + end);
  if (real_pm()) pmem2_get_flush_fn(state_->map)(state_->base + first, end - first);
}

void Region::drain() {
  std::lock_guard<SpinLock> lock(domain_->impl_->mu);
  drain_locked();
}

void Region::drain_locked() {
  auto& impl = *domain_->impl_;
  impl.at_fence();
  for (const auto& f : impl.fence) {
    std::memcpy(f.region->durable.data() + f.offset, impl.fence_bytes.data() + f.at, f.length);
  }
  impl.fence.clear();
  impl.fence_bytes.clear();
  if (real_pm()) pmem2_get_drain_fn(state_->map)();
}

// One acquisition of the domain's lock for both: on the emulator that lock is
// shared with the NIC engine's DMA, and each acquisition can wait for it.
void Region::persist(const void* addr, size_t len) {
  std::lock_guard<SpinLock> lock(domain_->impl_->mu);
  flush_locked(addr, len);
  drain_locked();
}

}  // namespace ferry::pm
