// The persistence domain of one emulated host: its memory regions (DRAM and
// PM), the NIC's volatile write buffer, and the CPU cache as far as
// persistence is concerned -- and power-failure injection that loses exactly
// what the platform could lose. It is the NIC's HostMemory (host_memory.h):
// pass it as NicOptions::memory and every DMA goes through the model.
//
// The model (docs/persistence.md):
//  - CPU stores to PM are durable after persist (flush + drain); under eADR,
//    as soon as they are made.
//  - NIC DMA writes enter the NIC's write buffer, a FIFO (PCIe posted writes
//    stay ordered). They leave it (drain) when a READ or FLUSH on the same QP
//    is served -- everything up to that QP's last write -- or when the buffer
//    is full (oldest first). DDIO off: a drained write is durable. DDIO on: it
//    lands in the CPU cache, durable only under eADR, or when the CPU persists
//    the range, or when the modeled cache evicts the line.
//  - A FLUSH with persistence placement makes its range durable even with
//    DDIO on (the responder's guarantee).
//  - power_fail(seed): DRAM is lost; PM keeps the durable image plus an
//    adversarial random subset of what was not durable: a random prefix of
//    the NIC buffer FIFO, its boundary write torn to a prefix of its 64 B
//    chunks (increasing address order); unpersisted CPU stores kept or lost
//    per 8-byte word; DDIO lines in the cache kept or lost per 64 B line.
//  - process_crash(): DRAM lost, PM kept (caches and NIC keep running).
//
// Thread rules: every method is thread-safe. power_fail/process_crash must
// run while no NIC is executing (manual engine between steps, or after the
// engine is destroyed): NIC state is lost with the host, so a test rebuilds
// its Engine after the failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/nic/host_memory.h"
#include "ferry/pm/region.h"

namespace ferry::pm {

struct PlatformConfig {
  bool ddio = false;  // DMA writes land in the CPU's last-level cache (H3: disable it)
  bool eadr = false;  // the CPU caches are in the persistence domain
  size_t nic_write_buffer_bytes = 256 << 10;  // NIC volatile buffer; drains oldest first when full
  size_t cache_lines = 32768;                 // modeled cache capacity for PM lines (2 MiB)
  size_t cache_eviction_window = 160;         // victim: random among this many oldest lines (calibrated, see persistence.md)
  size_t xbuffer_xplines = 64;                // PM controller write-combining buffer (16 KiB), LRU
};

struct PowerFailReport {
  uint64_t nic_writes_pending = 0;  // DMA writes still in the NIC buffer
  uint64_t nic_writes_kept = 0;     // of those, fully reached memory
  uint64_t nic_write_torn = 0;      // 1 if one write was cut to a prefix of its chunks
  uint64_t cpu_words_lost = 0;      // unpersisted 8-byte words reverted
  uint64_t cpu_words_kept = 0;      // unpersisted 8-byte words that happened to survive
  uint64_t cache_lines_lost = 0;    // DDIO lines reverted
  uint64_t cache_lines_kept = 0;
  uint64_t dram_bytes_lost = 0;
};

class PersistenceDomain final : public nic::HostMemory {
 public:
  explicit PersistenceDomain(const PlatformConfig& config = {});
  ~PersistenceDomain() override;
  PersistenceDomain(const PersistenceDomain&) = delete;
  PersistenceDomain& operator=(const PersistenceDomain&) = delete;

  // Maps `path` as persistent memory with libpmem2. `size` 0 maps the whole
  // existing file; `create` makes (or extends) it to `size` bytes, zeroed.
  // kNotFound if the file is missing and !create; kInvalidArgument for a bad
  // size; kInternal with libpmem2's message if mapping fails.
  Result<Region*> map_pm(const std::string& path, size_t size, bool create);
  // Volatile memory: lost at a power failure or process crash.
  Result<Region*> alloc_dram(size_t size);
  // Unmaps a region (it must no longer be registered with a NIC).
  void release(Region* region);

  const PlatformConfig& config() const { return config_; }
  // Bytes of DMA writes waiting in the NIC buffer.
  size_t nic_buffer_bytes() const;

  // What `region` would hold after power_fail(seed), without failing.
  std::vector<uint8_t> image_after_power_fail(const Region& region, uint64_t seed) const;
  // Power failure: applies the model to every region and resets the NIC
  // buffer and cache state. Regions stay mapped, holding what survived.
  PowerFailReport power_fail(uint64_t seed);
  // The process dies, the machine does not: DRAM lost, PM keeps everything.
  void process_crash();

  // Crash points (the simulator, docs/simulation.md): the power goes at the
  // start of the `fences`-th fence from now (a drain, persist or
  // store_persist of any region of this domain). The machine as it stood at
  // that instant is kept aside -- memory as the CPU and the NIC had left
  // it, the NIC's buffer, the write-backs waiting for that fence -- and the
  // next power_fail() or process_crash() starts from it, as if nothing after
  // it had run. The code that was running goes on (it cannot be stopped
  // mid-call), so the caller must let nothing leave the machine once
  // cut_taken(): a reply sent after the cut would show what the failure
  // takes back. 0 disarms (and forgets a cut taken).
  void arm_cut(uint64_t fences);
  bool cut_taken() const;

  // ---- nic::HostMemory (engine thread) ----
  void dma_write(uint32_t qpn, uint8_t* dst, const uint8_t* src, size_t len) override;
  uint64_t atomic_compare_swap(uint32_t qpn, uint64_t* addr, uint64_t compare, uint64_t swap) override;
  uint64_t atomic_fetch_add(uint32_t qpn, uint64_t* addr, uint64_t add) override;
  void order_before_read(uint32_t qpn) override;
  void flush(uint32_t qpn, const uint8_t* addr, size_t len, bool persistent) override;

  struct Impl;  // internal (src/pm/state.h)

 private:
  friend class Region;
  // Takes ownership of a filled-in region and makes it findable by address.
  Region* add_region(std::unique_ptr<detail::RegionState> state);
  PlatformConfig config_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::pm
