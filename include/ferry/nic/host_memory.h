// The seam between the NIC engine and host memory. Every DMA write the NIC
// performs into application-visible memory (WRITE/SEND payload placement,
// READ response data, atomic results, RECV scatter into WQE rings) goes
// through HostMemory::dma_write, and every NIC atomic through atomic_*.
// The persistent-memory model (pm/) interposes here to track what reached the
// persistence domain. CQE writes into NIC-owned CQ rings do not pass the seam
// (CQ rings are always DRAM).
//
// Thread rules: called only from the engine thread that drives the NIC.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ferry::nic {

class HostMemory {
 public:
  virtual ~HostMemory() = default;

  // DMA write of `len` bytes from `src` (NIC buffer or borrowed packet
  // payload) to host address `dst`, issued by queue pair `qpn` of this NIC.
  virtual void dma_write(uint32_t qpn, uint8_t* dst, const uint8_t* src, size_t len) = 0;

  // 8-byte atomics on host memory, atomic against CPU atomics on the same
  // word. Return the original value.
  virtual uint64_t atomic_compare_swap(uint32_t qpn, uint64_t* addr, uint64_t compare, uint64_t swap) = 0;
  virtual uint64_t atomic_fetch_add(uint32_t qpn, uint64_t* addr, uint64_t add) = 0;

  // A READ response or FLUSH for `qpn` is about to be generated: every write
  // `qpn` issued before must be placed first (PCIe read-after-write ordering).
  virtual void order_before_read(uint32_t qpn) { (void)qpn; }

  // IBTA 1.5 FLUSH at the responder: every write `qpn` issued before must be
  // placed, and, for `persistent`, [addr, addr+len) must be in the
  // persistence domain before the FLUSH is acknowledged.
  virtual void flush(uint32_t qpn, const uint8_t* addr, size_t len, bool persistent) {
    (void)addr;
    (void)len;
    (void)persistent;
    order_before_read(qpn);
  }
};

// Plain DRAM: memcpy and real atomic instructions.
class DramHostMemory final : public HostMemory {
 public:
  void dma_write(uint32_t, uint8_t* dst, const uint8_t* src, size_t len) override {
    std::memcpy(dst, src, len);
  }
  uint64_t atomic_compare_swap(uint32_t, uint64_t* addr, uint64_t compare, uint64_t swap) override {
    std::atomic_ref<uint64_t> word(*addr);
    word.compare_exchange_strong(compare, swap, std::memory_order_seq_cst);
    return compare;  // holds the original value whether or not the swap happened
  }
  uint64_t atomic_fetch_add(uint32_t, uint64_t* addr, uint64_t add) override {
    return std::atomic_ref<uint64_t>(*addr).fetch_add(add, std::memory_order_seq_cst);
  }
  static DramHostMemory& instance() {
    static DramHostMemory memory;
    return memory;
  }
};

}  // namespace ferry::nic
