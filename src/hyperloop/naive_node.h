// The replica side of the Naive-RDMA baseline (naive.cc's file comment has
// the protocol): one replica's queues and the CPU path that serves it --
// shared by NaiveClient's in-process replicas and NaiveReplica (replica.h),
// which runs one in its own process.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include "ferry/common/status.h"
#include "ferry/hyperloop/group.h"
#include "ferry/nic/shared_memory.h"
#include "ferry/nic/verbs.h"
#include "ferry/pm/region.h"
#include "host.h"
#include "naive_wire.h"

namespace ferry::hyperloop::detail {

// A replica's receive slot is larger than a header so that an oversized
// message is delivered, parsed and rejected, instead of failing the QP with
// a local length error (which would take the chain down).
constexpr size_t kRecvSlotBytes = 256;
constexpr size_t kForwardSlotBytes = 128;  // a header, cache-line multiple
constexpr size_t kHeaderSlotBytes = 128;   // the client's header ring
constexpr size_t kAckSlotBytes = 64;       // the tail writes 8 bytes per replica here
constexpr size_t kDirtyRangesMax = 64;
constexpr uint32_t kPollBatch = 16;

static_assert(kNaiveHeaderBytes <= kForwardSlotBytes && kNaiveHeaderBytes <= kHeaderSlotBytes &&
                  kNaiveHeaderBytes < kRecvSlotBytes,
              "a header fits every ring slot");
static_assert(8 * kMaxReplicas <= kAckSlotBytes, "the result map fits an ack slot");

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Result<Buffer> alloc_buffer(size_t bytes);

// Ranges a replica's CPU changed (gcas, gmemcpy without flush) since its last
// gflush, which persists them. Fixed capacity so the replica path never
// allocates; on overflow the next gflush persists the whole region.
class DirtyRanges {
 public:
  void add(uint64_t offset, uint64_t size) {
    if (all_) return;
    if (count_ > 0) {
      Range& last = ranges_[count_ - 1];
      if (offset <= last.offset + last.size && last.offset <= offset + size) {  // overlaps or touches: merge
        const uint64_t end = std::max(last.offset + last.size, offset + size);
        last.offset = std::min(last.offset, offset);
        last.size = end - last.offset;
        return;
      }
    }
    if (count_ == kDirtyRangesMax) {
      all_ = true;
      return;
    }
    ranges_[count_++] = Range{offset, size};
  }

  // Persists the ranges (or everything) of the region at `base`, of `bytes`,
  // through `persist(address, length)`.
  template <typename Persist>
  void persist(uint8_t* base, size_t bytes, Persist&& persist) {
    if (all_) {
      persist(base, bytes);
    } else {
      for (size_t i = 0; i < count_; ++i) persist(base + ranges_[i].offset, ranges_[i].size);
    }
    count_ = 0;
    all_ = false;
  }

 private:
  struct Range {
    uint64_t offset;
    uint64_t size;
  };
  std::array<Range, kDirtyRangesMax> ranges_{};
  size_t count_ = 0;
  bool all_ = false;
};

// One replica of a group. Declaration order is teardown order reversed:
// QPs go before the CQs they use, CQs before their channel, the ring MR
// before its memory, and everything before the host (its PD and domain).
struct NaiveNode {
  uint32_t index = 0;
  uint32_t replicas = 0;
  uint32_t ring_ops = 0;
  size_t region_bytes = 0;
  bool tail = false;
  bool flush_verb = false;

  // The replica's NIC, PD and group region: in process owned by `host` (an
  // emulated machine of the Engine, whose PM region `pm_region` persists
  // through the model); in a replica process the caller's (a NIC daemon's,
  // a region file, persisted with msync).
  nic::Nic* nic = nullptr;
  nic::ProtectionDomain* pd = nullptr;
  nic::MemoryRegion* region_mr = nullptr;
  uint8_t* region_base = nullptr;
  pm::Region* pm_region = nullptr;
  std::unique_ptr<Host> host;
  // ring_ops receive slots, then ring_ops forward slots: heap memory for an
  // in-process NIC, shared memory for a daemon-attached one.
  uint8_t* rings = nullptr;
  Buffer rings_heap;
  nic::SharedMemory rings_shared;
  std::unique_ptr<nic::MemoryRegion> rings_mr;
  std::unique_ptr<nic::CompletionChannel> channel;  // kEvent only
  std::unique_ptr<nic::CompletionQueue> recv_cq;    // receives from upstream
  // Count-only: the signaled WR of each forwarded operation lands here so
  // the send ring's slots free; nobody needs the completions themselves.
  std::unique_ptr<nic::CompletionQueue> send_cq;
  std::unique_ptr<nic::QueuePair> up;
  std::unique_ptr<nic::QueuePair> down;

  // Where `down` writes: the next replica's region, or (tail) the client's
  // ack ring.
  uint64_t next_iova = 0;
  uint32_t next_rkey = 0;

  // Owned by the thread that serves this replica.
  uint64_t forwarded = 0;
  DirtyRanges dirty;
  bool failed = false;

  // Read by anyone (diagnostics).
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> malformed{0};
  std::atomic<uint64_t> errors{0};

  size_t recv_offset(uint64_t slot) const { return (slot % ring_ops) * kRecvSlotBytes; }
  size_t forward_offset(uint64_t n) const {
    return size_t{ring_ops} * kRecvSlotBytes + (n % ring_ops) * kForwardSlotBytes;
  }
};

// One replica application thread. cpu_ns is what it used, stored as it exits.
struct Worker {
  std::thread thread;
  std::atomic<bool> exited{false};
  std::atomic<uint64_t> cpu_ns{0};
};

// One hop with one doorbell (see naive_node.cc).
size_t build_hop(const NaiveHeader& h, bool flush_verb, const nic::Sge& data, const nic::Sge& header,
                 uint64_t target_iova, uint32_t target_rkey, std::span<nic::SendWr, 3> wrs);

// The replica's rings, CQs (with a completion channel for the event mode)
// and QPs, on r.nic / r.pd; r.index .. r.flush_verb must be set.
Status create_naive_queues(NaiveNode& r, bool event_mode);
Status post_recv_slot(NaiveNode& r, uint64_t slot);
// Makes [p, p+n) of the replica's region durable.
void naive_persist(NaiveNode& r, uint8_t* p, size_t n);
// Handles what the replica's receive CQ holds; true if there was anything.
bool serve(NaiveNode& r, const std::atomic<bool>& stop);
void finish_worker(Worker& w);
void name_thread(const std::string& name);
// kEvent: serves r, blocking on its completion channel when idle, until
// `stop` (with `stop_fd` written to wake it).
void run_event_replica(NaiveNode& r, const std::atomic<bool>& stop, int stop_fd, int cpu, Worker& w);

}  // namespace ferry::hyperloop::detail
