// Power failure and process crash (docs/persistence.md, "Failures").
//
// One algorithm over (visible, durable) byte pairs per region, applied either
// to copies (image_after_power_fail) or in place (power_fail):
//  1. NIC buffer: a random prefix of the FIFO reached memory; the write at the
//     boundary kept a random proper prefix of its 64 B chunks (possibly none);
//     the rest is undone.
//  2. Fenced nothing yet: each pending clwb/non-temporal snapshot survived or
//     not.
//  3. What step 1 delivered is durable (DDIO off, or eADR) or sits in the
//     cache. It lands after step 2: a flush drains every NIC write over its
//     lines first, so a buffered NIC write is newer than any snapshot of its
//     bytes.
//  4. The cache: every byte still differing from the durable image is
//     unpersisted. eADR keeps all of it; otherwise each 8-byte word (each
//     64 B line for DDIO-delivered lines) survives or not. DRAM is lost.
#include <algorithm>
#include <cstring>

#include "ferry/common/rng.h"
#include "state.h"

namespace ferry::pm {

using detail::kLine;
using detail::kWord;
using detail::PendingWrite;
using detail::RegionState;

namespace {

struct Target {
  RegionState* region;
  uint8_t* visible;                // what the CPU sees: becomes the post-failure content
  uint8_t* durable;                // the durable image (PM only)
  std::vector<uint8_t> ddio_line;  // per 64 B line: its unpersisted content arrived by DDIO (PM only)
};

Target* target_of(std::vector<Target>& targets, const RegionState* r) {
  for (Target& t : targets) {
    if (t.region == r) return &t;
  }
  return nullptr;
}

}  // namespace

static PowerFailReport apply_power_failure(const PersistenceDomain::Impl& impl, const PlatformConfig& config,
                                           std::vector<Target>& targets, uint64_t seed) {
  Rng rng(seed);
  PowerFailReport report;
  for (Target& t : targets) {
    const RegionState* r = t.region;
    if (r->media != Media::kPm) continue;
    t.ddio_line.resize(r->lines.size());
    for (size_t line = 0; line < r->lines.size(); ++line) t.ddio_line[line] = r->lines[line].ddio ? 1 : 0;
  }

  // 1. The NIC buffer: a prefix reached memory, the next write is torn (a
  // proper prefix of its chunks: all of them would make it part of the prefix).
  const size_t n = impl.fifo.size();
  report.nic_writes_pending = n;
  const size_t kept = static_cast<size_t>(rng.below(n + 1));
  report.nic_writes_kept = kept;
  size_t torn_chunks_kept = 0;
  if (kept < n) {
    const PendingWrite& w = impl.fifo[kept];
    const size_t chunks = (w.offset + w.length - 1) / kLine - w.offset / kLine + 1;
    torn_chunks_kept = static_cast<size_t>(rng.below(chunks));
    report.nic_write_torn = torn_chunks_kept > 0 ? 1 : 0;
  }
  // Bytes of fifo[i] that arrived: chunks in increasing address order.
  auto arrived = [&](size_t i) -> size_t {
    const PendingWrite& w = impl.fifo[i];
    if (i < kept) return w.length;
    if (i > kept || torn_chunks_kept == 0) return 0;
    return std::min<size_t>(w.length, (w.offset / kLine + torn_chunks_kept) * kLine - w.offset);
  };
  // Undo, newest first, what did not arrive (restoring each write's `before`).
  for (size_t i = n; i > kept; --i) {
    const PendingWrite& w = impl.fifo[i - 1];
    Target* t = target_of(targets, w.region);
    if (t == nullptr) continue;
    const size_t from = arrived(i - 1);
    std::memcpy(t->visible + w.offset + from, w.before.data() + from, w.length - from);
  }

  // 2. Write-backs and non-temporal stores still waiting for their fence.
  for (const auto& f : impl.fence) {
    Target* t = target_of(targets, f.region);
    if (t == nullptr) continue;
    if (config.eadr || rng.chance(0.5)) std::memcpy(t->durable + f.offset, impl.fence_bytes.data() + f.at, f.length);
  }

  // 3. What arrived from the NIC: durable, or into the cache.
  for (size_t i = 0; i <= kept && i < n; ++i) {
    const PendingWrite& w = impl.fifo[i];
    const size_t len = arrived(i);
    Target* t = target_of(targets, w.region);
    if (len == 0 || t == nullptr) continue;
    if (!config.ddio || config.eadr) {
      std::memcpy(t->durable + w.offset, w.data.data(), len);
    } else {
      for (uint64_t line = w.offset / kLine; line <= (w.offset + len - 1) / kLine; ++line) t->ddio_line[line] = 1;
    }
  }

  // 4. Whatever still differs from the durable image was never persisted.
  for (Target& t : targets) {
    const RegionState* r = t.region;
    if (r->media == Media::kDram) {
      report.dram_bytes_lost += r->size;
      std::memset(t.visible, 0, r->size);
      continue;
    }
    for (size_t off = 0; off < r->size; off += kLine) {
      const size_t len = std::min(kLine, r->size - off);
      if (std::memcmp(t.visible + off, t.durable + off, len) == 0) continue;
      if (config.eadr) {
        std::memcpy(t.durable + off, t.visible + off, len);  // the cache is in the persistence domain
        continue;
      }
      if (t.ddio_line[off / kLine]) {
        if (rng.chance(0.5)) {
          ++report.cache_lines_kept;
          std::memcpy(t.durable + off, t.visible + off, len);
        } else {
          ++report.cache_lines_lost;
          std::memcpy(t.visible + off, t.durable + off, len);
        }
        continue;
      }
      for (size_t w = off; w < off + len; w += kWord) {
        const size_t wl = std::min(kWord, off + len - w);
        if (std::memcmp(t.visible + w, t.durable + w, wl) == 0) continue;
        if (rng.chance(0.5)) {
          ++report.cpu_words_kept;
          std::memcpy(t.durable + w, t.visible + w, wl);
        } else {
          ++report.cpu_words_lost;
          std::memcpy(t.visible + w, t.durable + w, wl);
        }
      }
    }
  }
  return report;
}

std::vector<uint8_t> PersistenceDomain::image_after_power_fail(const Region& region, uint64_t seed) const {
  std::lock_guard<SpinLock> lock(impl_->mu);
  if (region.state_->media == Media::kDram) return std::vector<uint8_t>(region.state_->size);  // lost
  // Copies of every PM region: the draws run over all of them, so the answer
  // matches power_fail(seed) exactly. DRAM draws nothing and is left out.
  std::vector<std::vector<uint8_t>> visible, durable;
  std::vector<Target> targets;
  visible.reserve(impl_->states.size());
  durable.reserve(impl_->states.size());
  std::vector<uint8_t>* mine = nullptr;
  for (auto& s : impl_->states) {
    if (s->media != Media::kPm) continue;
    visible.emplace_back(s->base, s->base + s->size);
    durable.push_back(s->durable);
    targets.push_back({s.get(), visible.back().data(), durable.back().data(), {}});
    if (s.get() == region.state_) mine = &visible.back();
  }
  apply_power_failure(*impl_, config_, targets, seed);
  return mine != nullptr ? std::move(*mine) : std::vector<uint8_t>{};
}

void PersistenceDomain::arm_cut(uint64_t fences) {
  std::lock_guard<SpinLock> lock(impl_->mu);
  impl_->cut_countdown = fences;
  impl_->cut.reset();
}

bool PersistenceDomain::cut_taken() const {
  std::lock_guard<SpinLock> lock(impl_->mu);
  return impl_->cut != nullptr;
}

void PersistenceDomain::Impl::take_cut() {
  cut = std::make_unique<Cut>();
  for (const auto& s : states) {
    if (s->media != Media::kPm) continue;
    cut->visible.emplace_back(s->base, s->base + s->size);
    cut->durable.push_back(s->durable);
  }
  cut->fifo = fifo;
  cut->fence = fence;
  cut->fence_bytes = fence_bytes;
}

void PersistenceDomain::Impl::restore_cut() {
  if (cut == nullptr) return;
  size_t i = 0;
  for (auto& s : states) {
    if (s->media != Media::kPm) continue;
    if (i >= cut->visible.size()) break;  // mapped after the cut: nothing of it was there
    std::memcpy(s->base, cut->visible[i].data(), s->size);
    s->durable = std::move(cut->durable[i]);
    ++i;
  }
  reset_volatile();
  fifo = std::move(cut->fifo);
  fifo_bytes = 0;
  for (const auto& w : fifo) fifo_bytes += w.length;
  fence = std::move(cut->fence);
  fence_bytes = std::move(cut->fence_bytes);
  cut.reset();
  cut_countdown = 0;
}

PowerFailReport PersistenceDomain::power_fail(uint64_t seed) {
  std::lock_guard<SpinLock> lock(impl_->mu);
  impl_->restore_cut();
  std::vector<Target> targets;
  for (auto& s : impl_->states) {
    targets.push_back({s.get(), s->base, s->media == Media::kPm ? s->durable.data() : nullptr, {}});
  }
  const PowerFailReport report = apply_power_failure(*impl_, config_, targets, seed);
  // The machine comes back: empty NIC buffer, cold cache, nothing in flight.
  impl_->reset_volatile();
  return report;
}

void PersistenceDomain::process_crash() {
  std::lock_guard<SpinLock> lock(impl_->mu);
  impl_->restore_cut();  // a crash point: nothing after it ran
  // The machine lives on: the NIC delivers what it buffered and the caches
  // are written back eventually, so PM keeps everything visible.
  impl_->reset_volatile();
  for (auto& s : impl_->states) {
    if (s->media == Media::kPm) {
      std::memcpy(s->durable.data(), s->base, s->size);
    } else {
      std::memset(s->base, 0, s->size);
    }
  }
}

void PersistenceDomain::Impl::reset_volatile() {
  for (auto& w : fifo) {
    spare.push_back(std::move(w.before));
    spare.push_back(std::move(w.data));
  }
  fifo.clear();
  fifo_bytes = 0;
  cache.clear();
  cache_order.clear();
  cache_window.clear();
  fence.clear();
  fence_bytes.clear();
  for (auto& s : states) {
    if (s->media != Media::kPm) continue;
    for (auto& line : s->lines) line = detail::LineMeta{};
    s->nic_pending_writes = 0;
  }
}

}  // namespace ferry::pm
