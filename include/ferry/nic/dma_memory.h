// Memory a NIC can DMA to and from, whichever kind of NIC it is.
//
// An in-process NIC (its Engine runs in this process) reaches any memory of
// the process; a daemon-attached NIC (`ferry nicd`) reaches only pages the
// daemon maps too, so registered memory must be a SharedMemory there
// (shared_memory.h). Code that runs on both (the RPC layer, Tailwind's
// backups and logs) allocates its buffers here and registers them with
// either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ferry/common/status.h"
#include "ferry/nic/shared_memory.h"
#include "ferry/nic/verbs.h"

namespace ferry::nic {

class DmaMemory {
 public:
  // `bytes` of zeroed memory that `nic` can register: anonymous pages for an
  // in-process NIC (not touched: they read as zero until written), a memfd
  // SharedMemory for a daemon-attached one. kInvalidArgument for 0 bytes,
  // kResourceExhausted when the memory cannot be had.
  static Result<DmaMemory> allocate(const Nic& nic, size_t bytes, std::string_view name = "ferry-dma");
  DmaMemory() = default;
  DmaMemory(DmaMemory&& o) noexcept;
  DmaMemory& operator=(DmaMemory&& o) noexcept;
  ~DmaMemory();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool shared() const { return shared_.data() != nullptr; }

 private:
  void reset();
  SharedMemory shared_;
  uint8_t* data_ = nullptr;  // shared_.data(), or an anonymous mapping
  size_t size_ = 0;
};

}  // namespace ferry::nic
