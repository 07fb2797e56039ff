// Power failure and process crash (docs/persistence.md, "Failures").
//
// One algorithm over (visible, durable) byte pairs per region, applied either
// to copies (image_after_power_fail) or in place (power_fail):
//  1. NIC buffer: a random prefix of the FIFO reached memory; the write at the
//     boundary kept a random prefix of its 64 B chunks; the rest is undone.
//     What reached memory is durable (DDIO off, or eADR) or sits in the cache.
//  2. Fenced nothing yet: each pending clwb/non-temporal snapshot survived or
//     not.
//  3. The cache: every byte still differing from the durable image is
//     unpersisted. eADR keeps all of it; otherwise each 8-byte word (each
//     64 B line for DDIO-delivered lines) survives or not.
//  4. DRAM is lost.
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
  uint8_t* visible;  // what the CPU sees: becomes the post-failure content
  uint8_t* durable;  // the durable image
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
  // Lines whose surviving content arrived by DDIO: decided per 64 B line.
  std::vector<std::vector<uint8_t>> ddio_line(targets.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    const RegionState* r = targets[t].region;
    if (r->media != Media::kPm) continue;
    ddio_line[t].assign(r->lines.size(), 0);
    for (size_t line = 0; line < r->lines.size(); ++line) ddio_line[t][line] = r->lines[line].ddio ? 1 : 0;
  }
  auto index_of = [&](const RegionState* r) -> size_t {
    for (size_t t = 0; t < targets.size(); ++t) {
      if (targets[t].region == r) return t;
    }
    return targets.size();
  };

  // 1. The NIC buffer: a prefix reached memory, the next write is torn.
  const size_t n = impl.fifo.size();
  report.nic_writes_pending = n;
  const size_t kept = static_cast<size_t>(rng.below(n + 1));
  report.nic_writes_kept = kept;
  size_t torn_chunks_kept = 0;
  if (kept < n) {
    const PendingWrite& w = impl.fifo[kept];
    const size_t chunks = (w.offset + w.length - 1) / kLine - w.offset / kLine + 1;
    torn_chunks_kept = static_cast<size_t>(rng.below(chunks + 1));
    report.nic_write_torn = (torn_chunks_kept > 0 && torn_chunks_kept < chunks) ? 1 : 0;
  }
  // Undo, newest first, what did not arrive (restoring each write's `before`).
  for (size_t i = n; i > kept; --i) {
    const PendingWrite& w = impl.fifo[i - 1];
    Target* t = target_of(targets, w.region);
    if (t == nullptr) continue;
    size_t from = 0;  // bytes of w that arrived
    if (i - 1 == kept && torn_chunks_kept > 0) {
      const size_t boundary = (w.offset / kLine + torn_chunks_kept) * kLine;  // chunks in increasing address order
      from = std::min<size_t>(w.length, boundary - w.offset);
    }
    std::memcpy(t->visible + w.offset + from, w.before.data() + from, w.length - from);
  }
  // What arrived: durable, or into the cache.
  for (size_t i = 0; i <= kept && i < n; ++i) {
    const PendingWrite& w = impl.fifo[i];
    size_t arrived = w.length;
    if (i == kept) {
      if (torn_chunks_kept == 0) break;
      arrived = std::min<size_t>(w.length, (w.offset / kLine + torn_chunks_kept) * kLine - w.offset);
    }
    const size_t t = index_of(w.region);
    if (t == targets.size()) continue;
    if (!config.ddio || config.eadr) {
      std::memcpy(targets[t].durable + w.offset, w.data.data(), arrived);
    } else {
      for (uint64_t line = w.offset / kLine; line <= (w.offset + arrived - 1) / kLine; ++line) ddio_line[t][line] = 1;
    }
  }

  // 2. Write-backs and non-temporal stores still waiting for their fence.
  for (const auto& f : impl.fence) {
    Target* t = target_of(targets, f.region);
    if (t == nullptr) continue;
    if (config.eadr || rng.chance(0.5)) std::memcpy(t->durable + f.offset, impl.fence_bytes.data() + f.at, f.length);
  }

  // 3. Whatever still differs from the durable image was never persisted.
  for (size_t ti = 0; ti < targets.size(); ++ti) {
    Target& t = targets[ti];
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
      if (ddio_line[ti][off / kLine]) {
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
  impl_->apply_drained(config_);  // bookkeeping only: what is durable does not change
  // Copies of every PM region (the NIC buffer's boundary is drawn over all
  // of them, so the answer matches power_fail(seed) exactly).
  std::vector<std::vector<uint8_t>> visible, durable;
  std::vector<Target> targets;
  visible.reserve(impl_->states.size());
  durable.reserve(impl_->states.size());
  for (auto& s : impl_->states) {
    visible.emplace_back(s->base, s->base + s->size);
    durable.emplace_back(s->media == Media::kPm ? s->durable : std::vector<uint8_t>(s->size));
    targets.push_back({s.get(), visible.back().data(), durable.back().data()});
  }
  apply_power_failure(*impl_, config_, targets, seed);
  for (size_t i = 0; i < impl_->states.size(); ++i) {
    if (impl_->states[i].get() == region.state_) return std::move(visible[i]);
  }
  return {};
}

PowerFailReport PersistenceDomain::power_fail(uint64_t seed) {
  std::lock_guard<SpinLock> lock(impl_->mu);
  impl_->apply_drained(config_);
  std::vector<Target> targets;
  std::vector<std::vector<uint8_t>> dram_scratch;
  for (auto& s : impl_->states) {
    if (s->media == Media::kPm) {
      targets.push_back({s.get(), s->base, s->durable.data()});
    } else {
      dram_scratch.emplace_back(s->size);
      targets.push_back({s.get(), s->base, dram_scratch.back().data()});
    }
  }
  const PowerFailReport report = apply_power_failure(*impl_, config_, targets, seed);
  // The machine comes back: empty NIC buffer, cold cache, nothing in flight.
  for (auto& w : impl_->fifo) {
    impl_->spare.push_back(std::move(w.before));
    impl_->spare.push_back(std::move(w.data));
  }
  impl_->fifo.clear();
  impl_->fifo_bytes = 0;
  impl_->cache.clear();
  impl_->fence.clear();
  impl_->fence_bytes.clear();
  for (auto& s : impl_->states) {
    if (s->media != Media::kPm) continue;
    for (auto& line : s->lines) line = detail::LineMeta{};
    s->nic_pending_writes = 0;
  }
  return report;
}

void PersistenceDomain::process_crash() {
  std::lock_guard<SpinLock> lock(impl_->mu);
  impl_->apply_drained(config_);
  // The machine lives on: the NIC delivers what it buffered and the caches
  // are written back eventually, so PM keeps everything visible.
  for (auto& w : impl_->fifo) {
    impl_->spare.push_back(std::move(w.before));
    impl_->spare.push_back(std::move(w.data));
  }
  impl_->fifo.clear();
  impl_->fifo_bytes = 0;
  impl_->cache.clear();
  impl_->fence.clear();
  impl_->fence_bytes.clear();
  for (auto& s : impl_->states) {
    if (s->media == Media::kPm) {
      std::memcpy(s->durable.data(), s->base, s->size);
      for (auto& line : s->lines) line = detail::LineMeta{};
      s->nic_pending_writes = 0;
    } else {
      std::memset(s->base, 0, s->size);
    }
  }
}

}  // namespace ferry::pm
