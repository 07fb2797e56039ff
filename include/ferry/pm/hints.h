// The ATC'21 remote-PM hints as reusable pieces (Wei et al., "Characterizing
// and Optimizing Remote Persistent Memory with RDMA and NVM", §4):
//   H4/H7  CPU writes to PM: non-temporal stores, whole 64 B lines for small
//          writes (no read-for-ownership, no partial write-combining flush)
//   H5/H6  write granularity: 256 B XPLines for large writes, 64 B (PCIe data
//          word / cache line) for writes smaller than an XPLine
//   H8     keep locks in DRAM, not on PM (atomics are read-modify-writes)
//   H9     persistent one-sided write in one round trip: WRITE and a READ (or
//          FLUSH) posted with one doorbell, only the last one signaled
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/nic/verbs.h"
#include "ferry/pm/region.h"

namespace ferry::pm {

// H5/H6: the alignment (and padding unit) for a write of `size` bytes:
// 64 below 256, 256 from 256 on.
size_t write_granularity(size_t size);
// `size` rounded up to its write granularity.
size_t padded_size(size_t size);

// Bump allocator handing out blocks of a region aligned and padded per
// write_granularity (H5, H6). Not thread-safe.
class PmAllocator {
 public:
  // Allocates from [offset, offset+length) of `region` (length 0: to its end).
  explicit PmAllocator(Region& region, size_t offset = 0, size_t length = 0);
  // kResourceExhausted when the range is used up.
  Result<uint8_t*> allocate(size_t size);
  void reset() { next_ = begin_; }
  size_t used() const { return next_ - begin_; }

 private:
  Region& region_;
  size_t begin_;
  size_t end_;
  size_t next_;
};

// How a CPU copies data into PM and makes it durable (H4, H7 on = both true).
struct CpuWriteHints {
  bool non_temporal = true;  // H4: streaming stores instead of cached stores
  bool whole_lines = true;   // H7: extend small writes to whole 64 B lines
};
// Copies `len` bytes to `dst` (inside `region`) and persists them. With
// whole_lines, the caller guarantees [dst rounded down, dst+len rounded up to
// 64 B) is its own to overwrite (e.g. blocks from PmAllocator); the padding
// bytes are written with zeros.
void persistent_copy(Region& region, uint8_t* dst, const void* src, size_t len, const CpuWriteHints& hints);

// H8: lock words kept in DRAM, one per 64 B line (no false sharing), to be
// registered as a memory region so remote CAS/FAA never touch PM.
class LockTable {
 public:
  explicit LockTable(size_t slots);
  ~LockTable();
  LockTable(const LockTable&) = delete;
  LockTable& operator=(const LockTable&) = delete;
  size_t slots() const { return slots_; }
  // The lock word for `key` (hashed) and its offset in the table.
  uint64_t* word(uint64_t key) const { return reinterpret_cast<uint64_t*>(base_ + offset(key)); }
  size_t offset(uint64_t key) const;
  uint8_t* data() const { return base_; }
  size_t bytes() const { return slots_ * 64; }

 private:
  size_t slots_;
  uint8_t* base_;
};

// H9: posts a WRITE of `local` to (remote_addr, rkey) followed, with the same
// doorbell, by a persistence point on the same QP -- a 0-byte READ, or a
// persistence FLUSH of the written range -- with only the last signaled
// (wr_id). Its completion means the WRITE reached the persistence domain
// (DDIO off, or eADR; with DDIO on use the FLUSH). Returns post_send's status.
enum class PersistPoint { kRead, kFlush };
Status post_persistent_write(nic::QueuePair& qp, const nic::Sge& local, uint64_t remote_addr, uint32_t rkey,
                             uint64_t wr_id, PersistPoint point);

// The strawman the hint replaces: a signaled WRITE, waited for, then a
// signaled READ (or FLUSH), waited for -- two round trips. Busy-polls `cq`
// (which receives this QP's send completions; nothing else may be posted).
// kInternal if either request completes with an error.
Status persistent_write_strawman(nic::QueuePair& qp, nic::CompletionQueue& cq, const nic::Sge& local,
                                 uint64_t remote_addr, uint32_t rkey, PersistPoint point);

}  // namespace ferry::pm
