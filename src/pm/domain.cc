// PersistenceDomain: regions, the NIC write buffer and the modeled cache, and
// the DMA seam through which the NIC engine writes host memory.
#include "ferry/pm/domain.h"

#include <fcntl.h>
#include <libpmem2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "state.h"

namespace ferry::pm {

using detail::kLine;
using detail::LineMeta;
using detail::PendingWrite;
using detail::RegionState;

PersistenceDomain::PersistenceDomain(const PlatformConfig& config) : config_(config), impl_(std::make_unique<Impl>()) {}

PersistenceDomain::~PersistenceDomain() {
  for (auto& s : impl_->states) {
    if (s->media == Media::kPm) {
      if (s->map) pmem2_map_delete(&s->map);
      if (s->source) pmem2_source_delete(&s->source);
      if (s->config) pmem2_config_delete(&s->config);
      if (s->fd >= 0) close(s->fd);
    } else {
      std::free(s->base);
    }
  }
}

RegionState* PersistenceDomain::Impl::find(const void* p, size_t len) const {
  const auto* addr = static_cast<const uint8_t*>(p);
  auto it = std::upper_bound(by_address.begin(), by_address.end(), addr,
                             [](const uint8_t* a, const RegionState* s) { return a < s->base; });
  if (it == by_address.begin()) return nullptr;
  RegionState* s = *(it - 1);
  const size_t off = static_cast<size_t>(addr - s->base);
  return (off < s->size && len <= s->size - off) ? s : nullptr;
}

Result<Region*> PersistenceDomain::map_pm(const std::string& path, size_t size, bool create) {
  int fd = open(path.c_str(), O_RDWR | (create ? O_CREAT : 0), 0644);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("map_pm: " + path + " does not exist (create it with create=true)");
    return internal_error("map_pm: cannot open " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  fstat(fd, &st);
  if (size == 0) size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    close(fd);
    return invalid_argument("map_pm: " + path + " is empty and no size was given");
  }
  if (static_cast<size_t>(st.st_size) < size) {
    if (!create) {
      close(fd);
      return invalid_argument("map_pm: " + path + " holds " + std::to_string(st.st_size) + " bytes, fewer than " +
                              std::to_string(size));
    }
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
      close(fd);
      return internal_error("map_pm: cannot size " + path + ": " + std::strerror(errno));
    }
  }
  auto s = std::make_unique<RegionState>();
  s->media = Media::kPm;
  s->path = path;
  s->fd = fd;
  auto fail = [&](const char* what) -> Status {
    std::string msg = std::string("map_pm: ") + what + " failed for " + path + ": " + pmem2_errormsg();
    if (s->map) pmem2_map_delete(&s->map);
    if (s->source) pmem2_source_delete(&s->source);
    if (s->config) pmem2_config_delete(&s->config);
    close(fd);
    return internal_error(msg);
  };
  if (pmem2_config_new(&s->config) != 0) return fail("pmem2_config_new");
  // Accept any mapping: on an ordinary file the granularity is a page, and
  // the model (not the file) decides what a power failure keeps.
  if (pmem2_config_set_required_store_granularity(s->config, PMEM2_GRANULARITY_PAGE) != 0) {
    return fail("pmem2_config_set_required_store_granularity");
  }
  if (pmem2_config_set_length(s->config, size) != 0) return fail("pmem2_config_set_length");
  if (pmem2_source_from_fd(&s->source, fd) != 0) return fail("pmem2_source_from_fd");
  if (pmem2_map_new(&s->map, s->config, s->source) != 0) return fail("pmem2_map_new");
  s->base = static_cast<uint8_t*>(pmem2_map_get_address(s->map));
  s->size = size;
  // Fault every page in for writing now, so that first-touch page faults do
  // not land on the data path (and in measurements) later.
  const long page = sysconf(_SC_PAGESIZE);
  for (size_t off = 0; off < size; off += static_cast<size_t>(page)) {
    volatile uint8_t* p = s->base + off;
    *p = *p;
  }
  s->granularity = static_cast<int>(pmem2_map_get_store_granularity(s->map));
  // The file's content at mapping time is what survived: the durable image.
  s->durable.assign(s->base, s->base + size);
  s->lines.resize((size + kLine - 1) / kLine);
  s->media_model = detail::MediaModel(config_.xbuffer_xplines);
  return add_region(std::move(s));
}

Result<Region*> PersistenceDomain::alloc_dram(size_t size) {
  if (size == 0) return invalid_argument("alloc_dram: size 0");
  auto s = std::make_unique<RegionState>();
  s->media = Media::kDram;
  s->granularity = -1;
  s->size = size;
  s->base = static_cast<uint8_t*>(std::aligned_alloc(4096, (size + 4095) & ~size_t{4095}));
  if (s->base == nullptr) return resource_exhausted("alloc_dram: out of memory for " + std::to_string(size) + " bytes");
  std::memset(s->base, 0, size);
  return add_region(std::move(s));
}

Region* PersistenceDomain::add_region(std::unique_ptr<RegionState> state) {
  std::lock_guard<SpinLock> lock(impl_->mu);
  RegionState* raw = state.get();
  impl_->states.push_back(std::move(state));
  impl_->regions.push_back(std::unique_ptr<Region>(new Region(this, raw)));
  impl_->by_address.insert(
      std::upper_bound(impl_->by_address.begin(), impl_->by_address.end(), raw,
                       [](const RegionState* a, const RegionState* b) { return a->base < b->base; }),
      raw);
  return impl_->regions.back().get();
}

void PersistenceDomain::release(Region* region) {
  std::lock_guard<SpinLock> lock(impl_->mu);
  RegionState* s = region->state_;
  // Drain what the NIC still holds for it, drop it from the cache model.
  while (s->nic_pending_writes != 0) impl_->drain_front(config_);
  for (uint64_t line = 0; line < s->lines.size(); ++line) {
    if (s->lines[line].cache_pos != 0) impl_->cache_remove(s, line, false);
  }
  impl_->cache_forget(s);
  impl_->fence.erase(std::remove_if(impl_->fence.begin(), impl_->fence.end(),
                                    [&](const detail::FenceSnapshot& f) { return f.region == s; }),
                     impl_->fence.end());
  impl_->by_address.erase(std::remove(impl_->by_address.begin(), impl_->by_address.end(), s), impl_->by_address.end());
  if (s->media == Media::kPm) {
    pmem2_map_delete(&s->map);
    pmem2_source_delete(&s->source);
    pmem2_config_delete(&s->config);
    close(s->fd);
  } else {
    std::free(s->base);
  }
  for (size_t i = 0; i < impl_->states.size(); ++i) {
    if (impl_->states[i].get() == s) {
      impl_->states.erase(impl_->states.begin() + static_cast<long>(i));
      impl_->regions.erase(impl_->regions.begin() + static_cast<long>(i));
      break;
    }
  }
}

size_t PersistenceDomain::nic_buffer_bytes() const {
  std::lock_guard<SpinLock> lock(impl_->mu);
  return impl_->fifo_bytes;
}

// ---- the modeled CPU cache ---------------------------------------------------

void PersistenceDomain::Impl::cache_insert(const PlatformConfig& config, RegionState* r, uint64_t line, bool ddio) {
  LineMeta& m = r->lines[line];
  if (m.cache_pos == 0) {
    const CachedLine c{r, line, ++cache_gen};
    cache.push_back(c);
    cache_order.push_back(c);
    m.cache_pos = static_cast<uint32_t>(cache.size());
    m.ddio = ddio;
    while (cache.size() > config.cache_lines) cache_evict(config);
    // Entries of lines written back or streamed over since: drop them before
    // they outnumber the cache (a cache that never fills never pops them).
    if (cache_order.size() > 2 * (cache.size() + config.cache_eviction_window) + 1024) {
      std::erase_if(cache_order, [&](const CachedLine& e) { return !cache_live(e); });
    }
  } else if (!ddio) {
    m.ddio = false;  // a CPU store mixed into it: word granularity from now on
  }
}

void PersistenceDomain::Impl::cache_remove(RegionState* r, uint64_t line, bool write_back) {
  LineMeta& m = r->lines[line];
  if (m.cache_pos == 0) return;
  const uint32_t pos = m.cache_pos - 1;
  if (write_back) {
    r->media_model.write_line(line);
    make_durable(r, line * kLine, std::min(kLine, r->size - line * kLine));
  }
  cache[pos] = cache.back();
  cache.pop_back();
  if (pos < cache.size()) cache[pos].region->lines[cache[pos].line].cache_pos = pos + 1;
  m.cache_pos = 0;
  m.ddio = false;
}

void PersistenceDomain::Impl::cache_evict(const PlatformConfig& config) {
  // Not LRU, not uniform: a victim drawn from the oldest insertions. A real
  // last-level cache replaces per set with an undisclosed policy, and DDIO
  // fills only a few ways, so a sequential DMA stream leaves in roughly, not
  // exactly, the order it came in; how roughly decides how many of an
  // XPLine's four lines the controller still merges (ATC'21 Fig. 11b: about
  // 2x amplification). The window size is that calibration.
  const size_t window = std::max<size_t>(config.cache_eviction_window, 1);
  while (true) {
    while (cache_window.size() < window && !cache_order.empty()) {
      cache_window.push_back(cache_order.front());
      cache_order.pop_front();
    }
    if (cache_window.empty()) return;  // nothing cached
    const size_t j = eviction_rng.below(cache_window.size());
    const CachedLine victim = cache_window[j];
    cache_window[j] = cache_window.back();
    cache_window.pop_back();
    if (!cache_live(victim)) continue;  // written back or streamed over already
    cache_remove(victim.region, victim.line, /*write_back=*/true);
    return;
  }
}

void PersistenceDomain::Impl::cache_forget(const RegionState* r) {
  std::erase_if(cache_order, [&](const CachedLine& e) { return e.region == r; });
  std::erase_if(cache_window, [&](const CachedLine& e) { return e.region == r; });
}

void PersistenceDomain::Impl::make_durable(RegionState* r, size_t off, size_t len) {
  if (len == 0) return;
  std::memcpy(r->durable.data() + off, r->base + off, len);
  bool covered = false;  // the per-line counts spare a scan of the whole buffer
  for (uint64_t line = off / kLine; r->nic_pending_writes != 0 && line <= (off + len - 1) / kLine && !covered; ++line) {
    covered = r->lines[line].nic_pending != 0;
  }
  if (covered) {
    // Bytes the NIC has not delivered yet are not in memory: the durable
    // image keeps the value they replaced (the oldest pending write's `before`).
    for (auto it = fifo.rbegin(); it != fifo.rend(); ++it) {
      if (it->region != r) continue;
      const size_t lo = std::max(off, it->offset);
      const size_t hi = std::min(off + len, it->offset + it->length);
      if (lo < hi) std::memcpy(r->durable.data() + lo, it->before.data() + (lo - it->offset), hi - lo);
    }
  }
  supersede_snapshots(r, off, len);
}

void PersistenceDomain::Impl::supersede_snapshots(RegionState* r, size_t off, size_t len) {
  // On hardware the write-back leaves the cache when clwb runs and reaches
  // the controller before anything that writes the line later; the model
  // holds it until the fence, so it must not carry stale bytes there.
  for (const detail::FenceSnapshot& f : fence) {
    if (f.region != r) continue;
    const size_t lo = std::max(off, f.offset);
    const size_t hi = std::min(off + len, f.offset + f.length);
    if (lo < hi) std::memcpy(fence_bytes.data() + f.at + (lo - f.offset), r->durable.data() + lo, hi - lo);
  }
}

// ---- the NIC write buffer ----------------------------------------------------

void PersistenceDomain::Impl::drain_front(const PlatformConfig& config) {
  // Off the buffer before its effects: a write-back they cause (eviction)
  // must not take this write for one still pending.
  PendingWrite w = std::move(fifo.front());
  fifo.pop_front();
  apply_drained(config, std::move(w));
}

void PersistenceDomain::Impl::apply_drained(const PlatformConfig& config, PendingWrite&& w) {
  RegionState* r = w.region;
  const uint64_t first = w.offset / kLine;
  const uint64_t last = (w.offset + w.length - 1) / kLine;
  for (uint64_t line = first; line <= last; ++line) --r->lines[line].nic_pending;
  --r->nic_pending_writes;
  fifo_bytes -= w.length;
  if (!config.ddio || config.eadr) {
    // DDIO off: straight to the PM controller. DDIO on under eADR: into the
    // cache, which is persistent. Either way durable now.
    std::memcpy(r->durable.data() + w.offset, w.data.data(), w.length);
    supersede_snapshots(r, w.offset, w.length);
  }
  for (uint64_t line = first; line <= last; ++line) {
    const bool partial =
        (line == first && w.offset % kLine != 0) || (line == last && (w.offset + w.length) % kLine != 0);
    if (!config.ddio) {
      // Seen by the media model in the order the NIC issued it.
      if (partial) {
        ++r->media_model.counters.pcie_rmw;  // a PCIe partial write: read-modify-write (H6)
        r->media_model.read_line(line);
      }
      r->media_model.write_line(line);
    } else {
      // DDIO: into the last-level cache; without eADR durable only at
      // eviction or when someone persists the range.
      if (partial && r->lines[line].cache_pos == 0) {
        ++r->media_model.counters.pcie_rmw;  // the line must be read into the cache first
        r->media_model.read_line(line);
      }
      cache_insert(config, r, line, /*ddio=*/true);
    }
  }
  spare.push_back(std::move(w.before));
  spare.push_back(std::move(w.data));
}

void PersistenceDomain::Impl::drain_through_qp(const PlatformConfig& config, uint32_t qpn) {
  // IBTA orders a READ or FLUSH behind the earlier writes of its own QP only
  // (the property gFLUSH, H9 and JUNE BERRY-D rely on); another QP's writes
  // may still sit in the buffer, and the model keeps them there, adversarially.
  // Per address, writes still reach memory in the order they were issued: an
  // older write of another QP over bytes a drained write covers drains first.
  size_t through = 0;
  for (size_t i = fifo.size(); i > 0; --i) {
    if (fifo[i - 1].qpn == qpn) {
      through = i;
      break;
    }
  }
  if (through == 0) return;
  // Scratch kept across calls: a READ is on the data path of every durable
  // request, and allocating here showed up in its cost.
  drain_mark.assign(through, 0);
  drain_spans.clear();  // of the writes drained so far (newest first)
  for (size_t i = through; i > 0; --i) {
    const PendingWrite& w = fifo[i - 1];
    bool take = w.qpn == qpn;
    for (size_t k = 0; !take && k < drain_spans.size(); ++k) {
      const DrainSpan& s = drain_spans[k];
      take = s.region == w.region && w.offset < s.hi && s.lo < w.offset + w.length;
    }
    if (!take) continue;
    drain_mark[i - 1] = 1;
    drain_spans.push_back({w.region, w.offset, w.offset + w.length});
  }
  // Out of the buffer, all of them before any takes effect; the others keep
  // their order. Compacted in place: the kept ones slide to the back of the
  // prefix, and the slots in front of them (moved out) are erased.
  drained_batch.clear();  // newest first
  size_t kept_from = through;
  for (size_t i = through; i > 0; --i) {
    if (drain_mark[i - 1]) {
      drained_batch.push_back(std::move(fifo[i - 1]));
    } else if (--kept_from != i - 1) {
      fifo[kept_from] = std::move(fifo[i - 1]);
    }
  }
  fifo.erase(fifo.begin(), fifo.begin() + static_cast<long>(kept_from));
  for (auto it = drained_batch.rbegin(); it != drained_batch.rend(); ++it) apply_drained(config, std::move(*it));
  drained_batch.clear();
}

void PersistenceDomain::Impl::drain_through_range(const PlatformConfig& config, RegionState* r, size_t off,
                                                   size_t len) {
  if (r->nic_pending_writes == 0 || len == 0) return;
  // The per-line counts say whether any pending write overlaps the range;
  // most CPU stores touch lines no DMA is pending on, and the FIFO can hold
  // thousands of writes to scan.
  bool overlaps = false;
  for (uint64_t line = off / kLine; line <= (off + len - 1) / kLine && !overlaps; ++line) {
    overlaps = r->lines[line].nic_pending != 0;
  }
  if (!overlaps) return;
  size_t through = 0;
  for (size_t i = fifo.size(); i > 0; --i) {
    const PendingWrite& w = fifo[i - 1];
    if (w.region == r && w.offset < off + len && off < w.offset + w.length) {
      through = i;
      break;
    }
  }
  for (size_t i = 0; i < through; ++i) drain_front(config);
}

void PersistenceDomain::Impl::enqueue(const PlatformConfig& config, RegionState* r, size_t off, const uint8_t* before,
                                      const uint8_t* data, size_t len, uint32_t qpn) {
  while (fifo_bytes + len > config.nic_write_buffer_bytes && !fifo.empty()) drain_front(config);
  auto take = [&](std::vector<uint8_t>& v, const uint8_t* from) {
    if (!spare.empty()) {
      v = std::move(spare.back());
      spare.pop_back();
    }
    v.assign(from, from + len);
  };
  PendingWrite& w = fifo.emplace_back();
  w.region = r;
  w.offset = off;
  w.length = static_cast<uint32_t>(len);
  w.qpn = qpn;
  take(w.before, before);
  take(w.data, data);
  for (uint64_t line = off / kLine; line <= (off + len - 1) / kLine; ++line) ++r->lines[line].nic_pending;
  ++r->nic_pending_writes;
  fifo_bytes += len;
}

void PersistenceDomain::dma_write(uint32_t qpn, uint8_t* dst, const uint8_t* src, size_t len) {
  if (len == 0) return;
  std::lock_guard<SpinLock> lock(impl_->mu);
  RegionState* r = impl_->find(dst, len);
  if (r == nullptr || r->media == Media::kDram) {
    std::memcpy(dst, src, len);  // DRAM: nothing to model
    return;
  }
  impl_->enqueue(config_, r, r->offset_of(dst), dst, src, len, qpn);
  std::memcpy(dst, src, len);  // visible at once; durable per the model
}

// The NIC's read-modify-write on PM (H8): a read request now, and the
// written word enters the NIC buffer like any DMA write.
static uint64_t pm_atomic(PersistenceDomain::Impl& impl, const PlatformConfig& config, RegionState* r, uint32_t qpn,
                          uint64_t* addr, uint64_t original, uint64_t now_value) {
  const size_t off = r->offset_of(addr);
  impl.enqueue(config, r, off, reinterpret_cast<const uint8_t*>(&original),
               reinterpret_cast<const uint8_t*>(&now_value), sizeof(uint64_t), qpn);
  ++r->media_model.counters.atomics;
  r->media_model.read_line(off / kLine);
  return original;
}

uint64_t PersistenceDomain::atomic_compare_swap(uint32_t qpn, uint64_t* addr, uint64_t compare, uint64_t swap) {
  std::lock_guard<SpinLock> lock(impl_->mu);
  std::atomic_ref<uint64_t> word(*addr);
  uint64_t original = compare;
  const bool swapped = word.compare_exchange_strong(original, swap, std::memory_order_seq_cst);
  RegionState* r = impl_->find(addr, 8);
  if (r == nullptr || r->media == Media::kDram) return original;
  return pm_atomic(*impl_, config_, r, qpn, addr, original, swapped ? swap : original);
}

uint64_t PersistenceDomain::atomic_fetch_add(uint32_t qpn, uint64_t* addr, uint64_t add) {
  std::lock_guard<SpinLock> lock(impl_->mu);
  const uint64_t original = std::atomic_ref<uint64_t>(*addr).fetch_add(add, std::memory_order_seq_cst);
  RegionState* r = impl_->find(addr, 8);
  if (r == nullptr || r->media == Media::kDram) return original;
  return pm_atomic(*impl_, config_, r, qpn, addr, original, original + add);
}

void PersistenceDomain::order_before_read(uint32_t qpn) {
  std::lock_guard<SpinLock> lock(impl_->mu);
  impl_->drain_through_qp(config_, qpn);
}

void PersistenceDomain::flush(uint32_t qpn, const uint8_t* addr, size_t len, bool persistent) {
  std::lock_guard<SpinLock> lock(impl_->mu);
  impl_->drain_through_qp(config_, qpn);
  if (!persistent || !config_.ddio || config_.eadr || len == 0) return;
  // DDIO without eADR: the drained data sits in the cache; a persistence
  // FLUSH writes the range's lines back before it is acknowledged.
  RegionState* r = impl_->find(addr, len);
  if (r == nullptr || r->media == Media::kDram) return;
  const size_t off = r->offset_of(addr);
  const size_t first = off / kLine * kLine;
  const size_t end = std::min(r->size, (off + len + kLine - 1) / kLine * kLine);
  for (uint64_t line = first / kLine; line * kLine < end; ++line) {
    if (r->lines[line].cache_pos == 0) continue;
    r->media_model.write_line(line);
    impl_->cache_remove(r, line, /*write_back=*/false);  // the bytes: once, for the whole range, below
  }
  impl_->make_durable(r, first, end - first);
}

}  // namespace ferry::pm
