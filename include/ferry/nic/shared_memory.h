// Memory that a NIC in another process can reach.
//
// A NIC served by the NIC daemon (`ferry nicd`, ferry/nicd/nicd.h) DMAs
// only into pages the daemon maps too: registered memory must lie inside a
// SharedMemory there (a memfd, or a file such as one on a DAX file system),
// which the daemon maps when the first MR inside it is registered.
// Registering memory outside one fails with kInvalidArgument. An in-process
// NIC accepts a SharedMemory like any other memory. Code that runs on both
// kinds of NIC allocates through DmaMemory (dma_memory.h) instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/common/status.h"

namespace ferry::nic {

class SharedMemory {
 public:
  // An anonymous memory file (memfd) of `bytes`, zeroed, sealed against
  // resizing (the daemon's DMA must not fault). kInvalidArgument for 0 bytes,
  // kUnavailable when no memfd can be made, kResourceExhausted when it
  // cannot be sized or mapped.
  static Result<SharedMemory> create(size_t bytes, std::string_view name = "ferry");
  // A file (e.g. on a DAX or tmpfs mount), grown to `bytes` if shorter.
  // kNotFound when it cannot be opened, kResourceExhausted when it cannot be
  // sized or mapped. The file is trusted not to be truncated while mapped.
  static Result<SharedMemory> map_file(const std::string& path, size_t bytes);
  // Moves the pages of [addr, addr + bytes) -- page-aligned, mapped
  // private and readable -- into a new memory file, in place: the same
  // addresses and contents, now shared with whoever maps the file. For
  // memory a program already owns (the libibverbs layer registers a
  // program's malloc'd buffers this way, docs/verbs-compat.md). A write to
  // those pages by another thread during the call may be lost, and a child
  // forked later shares them instead of copying them. Destroying the
  // SharedMemory leaves the pages mapped (they are the program's).
  // kInvalidArgument for an unaligned or empty range, kUnavailable or
  // kResourceExhausted when the file cannot be made or mapped.
  static Result<SharedMemory> adopt(void* addr, size_t bytes, int prot);
  SharedMemory() = default;
  SharedMemory(SharedMemory&& o) noexcept;
  SharedMemory& operator=(SharedMemory&& o) noexcept;
  // Unmaps. Deregister every MR inside it first.
  ~SharedMemory();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }

 private:
  void reset();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  uint64_t id_ = 0;  // in this process's registry of mappings (shared_memory.cc)
  bool adopted_ = false;  // made by adopt(): not unmapped on destruction
};

}  // namespace ferry::nic
