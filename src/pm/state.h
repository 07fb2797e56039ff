// Internal state of the persistence model. Everything here is guarded by the
// owning PersistenceDomain's mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ferry/common/rng.h"
#include "ferry/common/spin_lock.h"
#include "ferry/pm/domain.h"
#include "ferry/pm/region.h"

struct pmem2_config;
struct pmem2_source;
struct pmem2_map;

namespace ferry::pm::detail {

constexpr size_t kLine = 64;     // CPU cache line, PCIe data-word granularity used by the study
constexpr size_t kXpLine = 256;  // 3D XPoint media granularity
constexpr size_t kWord = 8;      // CPU store atomicity

// The PM controller's write-combining buffer (XPBuffer) and the media
// accounting it implies: 64 B writes to the same 256 B XPLine merge while the
// XPLine is buffered; an XPLine leaves either complete (one media write) or
// partly written (media read-modify-write).
class MediaModel {
 public:
  explicit MediaModel(size_t xplines);
  void write_line(uint64_t line);
  void read_line(uint64_t line);
  void settle();  // evict everything
  MediaCounters counters;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  uint32_t slot_for(uint64_t xpline);
  uint32_t find(uint64_t xpline) const;  // kNone if not held
  void evict(uint32_t slot);
  // Index: open addressing, linear probing, backward-shift deletion (no
  // tombstones); at most a quarter full. The model runs for every drained
  // write, on the engine thread, so lookups must be O(1).
  void index_insert(uint64_t xpline, uint32_t slot);
  void index_erase(uint64_t xpline);
  size_t home(uint64_t xpline) const { return (xpline * 0x9E3779B97F4A7C15ULL) >> shift_; }
  void lru_unlink(uint32_t slot);
  void lru_push_front(uint32_t slot);

  std::vector<uint64_t> ids_;     // XPLine held by each slot (UINT64_MAX: free)
  std::vector<uint8_t> masks_;    // which of its four 64 B lines were written
  std::vector<uint32_t> prev_, next_;  // LRU list, most recent first
  uint32_t head_ = kNone, tail_ = kNone;
  std::vector<uint32_t> free_;    // free slots
  std::vector<uint64_t> keys_;    // index: XPLine or UINT64_MAX
  std::vector<uint32_t> vals_;    // index: slot
  int shift_ = 64;
  uint32_t last_ = kNone;
};

// Per 64 B line of a PM region.
struct LineMeta {
  uint32_t cache_pos = 0;    // 1 + index in the domain's cache pool; 0 = not in the modeled cache
  uint32_t nic_pending = 0;  // DMA writes covering it still in the NIC buffer (256 KiB holds 262,144 1-byte writes)
  bool ddio = false;         // its cached content arrived by DDIO DMA (64 B survival granularity)
};

struct RegionState {
  Media media = Media::kDram;
  std::string path;
  uint8_t* base = nullptr;  // PM: the libpmem2 mapping; DRAM: owned (aligned_alloc)
  size_t size = 0;
  int granularity = 0;  // enum pmem2_granularity, or -1 for DRAM
  // PM only:
  int fd = -1;
  pmem2_config* config = nullptr;
  pmem2_source* source = nullptr;
  pmem2_map* map = nullptr;
  std::vector<uint8_t> durable;  // what survives a power failure right now
  std::vector<LineMeta> lines;
  MediaModel media_model{64};
  uint64_t nic_pending_writes = 0;

  size_t offset_of(const void* p) const { return static_cast<size_t>(static_cast<const uint8_t*>(p) - base); }
};

// A DMA write still in the NIC's volatile buffer.
struct PendingWrite {
  RegionState* region;
  size_t offset;
  uint32_t length;
  uint32_t qpn;
  std::vector<uint8_t> before;  // the bytes it replaced (restored if it is lost)
  std::vector<uint8_t> data;    // the bytes it carries (made durable when drained)
};

// A cache-line write-back (clwb) or non-temporal store waiting for the fence.
// It is older than any NIC write or write-back that reaches its bytes later:
// those overwrite its copy (Impl::supersede_snapshots), so the fence cannot
// roll them back.
struct FenceSnapshot {
  RegionState* region;
  size_t offset;
  size_t length;
  size_t at;  // into the domain's fence_bytes
};

}  // namespace ferry::pm::detail

namespace ferry::pm {

struct PersistenceDomain::Impl {
  mutable SpinLock mu;  // short sections, shared with the engine thread
  std::vector<std::unique_ptr<detail::RegionState>> states;  // creation order
  std::vector<std::unique_ptr<Region>> regions;
  std::vector<detail::RegionState*> by_address;  // sorted by base, PM and DRAM
  // NIC write buffer
  std::deque<detail::PendingWrite> fifo;
  size_t fifo_bytes = 0;
  // Buffers of drained writes for enqueue to reuse: each drain returns the
  // two an enqueue took, so there is no allocation in steady state.
  std::vector<std::vector<uint8_t>> spare;
  // CPU cache (PM lines only)
  struct CachedLine {
    detail::RegionState* region;
    uint64_t line;
    uint64_t gen;  // which insertion of the line this is (stale order entries differ)
  };
  std::vector<CachedLine> cache;  // unordered pool: O(1) removal by LineMeta::cache_pos
  // Eviction order: the lines in insertion order (stale entries skipped) and
  // the window of the oldest `cache_eviction_window` of them, from which a
  // victim is drawn at random.
  std::deque<CachedLine> cache_order;
  std::vector<CachedLine> cache_window;
  uint64_t cache_gen = 0;
  Rng eviction_rng{0x5eed};
  // drain_through_qp's scratch (reused, no allocation per READ)
  struct DrainSpan {
    const detail::RegionState* region;
    size_t lo, hi;
  };
  std::vector<uint8_t> drain_mark;
  std::vector<DrainSpan> drain_spans;
  std::vector<detail::PendingWrite> drained_batch;
  // Fence
  std::vector<detail::FenceSnapshot> fence;
  std::vector<uint8_t> fence_bytes;

  // A crash point (arm_cut): fences left before the power goes (0: none
  // armed), and the machine as it stood when it went.
  struct Cut {
    std::vector<std::vector<uint8_t>> visible;  // per PM state, in `states` order
    std::vector<std::vector<uint8_t>> durable;
    std::deque<detail::PendingWrite> fifo;
    std::vector<detail::FenceSnapshot> fence;
    std::vector<uint8_t> fence_bytes;
  };
  uint64_t cut_countdown = 0;
  std::unique_ptr<Cut> cut;
  // At a fence: counts down, and takes the cut when it reaches zero.
  void at_fence() {
    if (cut_countdown != 0 && --cut_countdown == 0) take_cut();
  }
  void take_cut();
  // Puts the machine back as it stood at the cut (before a failure).
  void restore_cut();

  detail::RegionState* find(const void* p, size_t len) const;
  // Puts a DMA write of r's [off, off+len) into the NIC buffer, draining the
  // oldest writes first while it would not fit. `before` is what the bytes
  // hold now, `data` what the write carries; both are copied.
  void enqueue(const PlatformConfig& config, detail::RegionState* r, size_t off, const uint8_t* before,
               const uint8_t* data, size_t len, uint32_t qpn);
  // The drain of the oldest pending write (model of the NIC buffer emptying).
  // Its effects (durable image, cache, media counters) are applied at once:
  // batching them would land a batch's whole cost on one request, a latency
  // spike that belongs to the model, not the NIC.
  void drain_front(const PlatformConfig& config);
  void apply_drained(const PlatformConfig& config, detail::PendingWrite&& w);
  // What a READ or FLUSH on QP qpn guarantees: that QP's earlier writes are
  // out of the buffer (and, per address, any older write they cover).
  void drain_through_qp(const PlatformConfig& config, uint32_t qpn);
  // The CPU is about to write (back) [off, off+len) of r: every NIC write
  // still buffered over those bytes -- and, PCIe being ordered, everything
  // queued before it -- has reached memory, because the CPU can only build
  // on bytes it could see.
  void drain_through_range(const PlatformConfig& config, detail::RegionState* r, size_t off, size_t len);
  // Copies the visible bytes of [off, off+len) into the durable image, except
  // bytes still covered by NIC-pending writes, which keep their pre-write value.
  void make_durable(detail::RegionState* r, size_t off, size_t len);
  // [off, off+len) of r's durable image was just written by something newer
  // than every pending fence snapshot (a drained NIC write, a cache
  // write-back): the snapshots take those bytes, so the fence cannot put
  // older ones back.
  void supersede_snapshots(detail::RegionState* r, size_t off, size_t len);
  void cache_insert(const PlatformConfig& config, detail::RegionState* r, uint64_t line, bool ddio);
  void cache_remove(detail::RegionState* r, uint64_t line, bool write_back);
  bool cache_live(const CachedLine& c) const {
    const uint32_t pos = c.region->lines[c.line].cache_pos;
    return pos != 0 && cache[pos - 1].gen == c.gen;
  }
  // Writes back one line: a random one among the oldest insertions.
  void cache_evict(const PlatformConfig& config);
  // Forgets region r's entries in the eviction order (r is going away).
  void cache_forget(const detail::RegionState* r);
  // Empties what a failure loses or the surviving machine finishes -- the NIC
  // buffer, the cache, pending fences -- and clears the per-line state.
  void reset_volatile();
};

}  // namespace ferry::pm
