// A region of one emulated host's memory: volatile DRAM, or persistent memory
// (a file mapped with PMDK's libpmem2). Regions are created by a
// PersistenceDomain (domain.h), which models what survives a power failure.
//
// Applications use data() like any memory. What the model needs to know about
// CPU writes it learns two ways: stores made through store()/store_nt() are
// counted by the media model, and every byte that differs from the durable
// image at a power failure is, by definition, not yet persisted -- so plain
// stores to data() are legal and just as volatile until persist()ed.
//
// Thread rules: any thread may call any method; the domain serializes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ferry::pm {

enum class Media : uint8_t { kDram, kPm };

// Modeled device counters of one PM region, after the Optane counters the
// ATC'21 study reads with ipmctl (NWriteReq, NReadReq, NMediaWrite,
// NMediaRead). They are computed by the model from the accesses Ferry sees,
// not measured on hardware.
struct MediaCounters {
  uint64_t write_requests = 0;       // 64 B writes reaching the PM controller (NWriteReq)
  uint64_t read_requests = 0;        // 64 B reads reaching it, RMW reads included (NReadReq)
  uint64_t media_bytes_written = 0;  // written to the media in 256 B XPLines (NMediaWrite)
  uint64_t media_bytes_read = 0;     // read from the media (NMediaRead)
  uint64_t pcie_rmw = 0;             // DMA writes covering part of a 64 B line: read-modify-write (H6)
  uint64_t cpu_rfo = 0;              // cached CPU stores that read the line first (H4, H7)
  uint64_t nt_partial = 0;           // non-temporal stores covering part of a line (H7)
  uint64_t xpline_rmw = 0;           // XPLines evicted partly written: media read-modify-write (H5)
  uint64_t atomics = 0;              // NIC atomics executed on PM (H8)

  // Media bytes written per byte the controller received.
  double write_amplification() const {
    return write_requests ? static_cast<double>(media_bytes_written) / (64.0 * static_cast<double>(write_requests)) : 0.0;
  }
};

class PersistenceDomain;
namespace detail {
struct RegionState;
}

class Region {
 public:
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  Media media() const;
  uint8_t* data() const;
  size_t size() const;
  const std::string& path() const;  // PM: backing file; DRAM: empty
  PersistenceDomain& domain() const { return *domain_; }  // the host whose power failures it follows
  // True when libpmem2 reports byte or cache-line store granularity (DAX on
  // real PM). On an ordinary file (page granularity) the region works, and
  // the model -- not the file -- decides what survives a power failure.
  bool real_pm() const;
  const char* granularity() const;
  bool contains(const void* p, size_t len) const;

  // CPU writes through the model (counted; persistence as any store).
  void store(void* dst, const void* src, size_t len);     // cached: reads each line first (RFO)
  void store_nt(void* dst, const void* src, size_t len);  // non-temporal: durable at the next drain()
  // store_nt() of the same `len` bytes to each of `dsts`, as one call (on
  // the emulator each call takes the domain's lock, which the NIC engine's
  // DMA also takes).
  void store_nt_many(std::span<void* const> dsts, const void* src, size_t len);
  // Cache-line write-back of [addr, addr+len): flush() snapshots the lines,
  // the next drain() (fence) makes those snapshots durable; persist() is both.
  // Bytes a later NIC write or write-back made durable keep the newer value.
  void flush(const void* addr, size_t len);
  void drain();
  void persist(const void* addr, size_t len);
  // store() then persist() of the same bytes, as one call: on the emulator
  // each call takes the domain's lock, which the NIC engine's DMA also takes.
  void store_persist(void* dst, const void* src, size_t len);

  MediaCounters counters() const;
  void reset_counters();
  // Writes back everything the modeled cache and write-combining buffer
  // still hold (the cache in its eviction order), so counters are complete.
  void settle_media_model();

 private:
  friend class PersistenceDomain;
  Region(PersistenceDomain* domain, detail::RegionState* state) : domain_(domain), state_(state) {}
  // store(), flush() and drain() with the domain's lock held (persist() and
  // store_persist() take it once).
  void store_locked(void* dst, const void* src, size_t len);
  void store_nt_locked(void* dst, const void* src, size_t len);
  void flush_locked(const void* addr, size_t len);
  void drain_locked();
  PersistenceDomain* domain_;
  detail::RegionState* state_;
};

}  // namespace ferry::pm
