// The records an application and the NIC share (internal header).
//
// Every field a posting or polling application thread and the NIC engine
// both touch lives in one of these records, never in the engine's private
// object state (nic_core.h). In process the records are ordinary heap
// memory; under the NIC daemon (`ferry nicd`, src/nicd/) the daemon places
// them, with the rings, in a memory file that the application maps too, so
// that posting and polling need no system call (docs/nicd.md). They are
// therefore standard-layout and use only lock-free, address-free atomics of
// fixed width, and hold no pointers: an application maps them at another
// address than the daemon does.
//
// Nothing here is trusted by the engine: an application may write anything
// into its own records, and the engine must only ever hurt that
// application's own objects by believing it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ferry/nic/types.h"

namespace ferry::nic::detail {

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<QpState>::is_always_lock_free);

// Polled send CQ: a send slot is free only once the application has polled
// the CQE that covers it (libmlx5 moves the SQ tail in poll_cq), so a CQ
// sized to the send queue never overruns. The engine records each send CQE
// it writes as a FreeMark in the QP's free-mark ring (sq_depth entries,
// index % size): writes the entry, then stores free_marks_tail (release).
// post_send, when the ring looks full, loads the tail (acquire), takes the
// marks whose CQE the send CQ's consumer index has passed, and stores
// free_marks_head (release), which the engine loads (acquire) only when the
// marks look full.
struct FreeMark {
  uint64_t cqe = 0;       // absolute position of the CQE in the send CQ
  uint64_t freed_to = 0;  // send slots below this index are free once it is polled
};

struct QpRecord {
  // Read-mostly line.
  alignas(64) std::atomic<QpState> state{QpState::kReset};  // engine stores (seq_cst); app loads in post
  // Engine stores (seq_cst) true while it polls sq_doorbell itself; the app
  // loads it (seq_cst) after publishing a doorbell and rings the doorbell
  // queue only when it is false (the io_uring SQPOLL NEED_WAKEUP handshake).
  std::atomic<uint32_t> engine_watching{0};
  // App-written line: the doorbell record.
  alignas(64) std::atomic<uint64_t> sq_doorbell{0};  // app stores (seq_cst) after writing WQEs
  std::atomic<uint64_t> rq_producer{0};              // app stores (seq_cst) after writing RECV WQEs
  // Both sides RMW (acq_rel): app when queueing the QP, engine when popping it.
  alignas(64) std::atomic<uint32_t> doorbell_queued{0};
  // Engine-written line.
  // Count-only send CQ (nobody polls it): slots below are reusable. Engine
  // stores (release) as completions are counted; app loads (acquire).
  alignas(64) std::atomic<uint64_t> sq_freed{0};
  std::atomic<uint64_t> rq_consumer{0};      // engine stores (release): RECVs taken
  std::atomic<uint64_t> free_marks_tail{0};  // engine stores (release); see FreeMark
  alignas(64) std::atomic<uint64_t> free_marks_head{0};  // app stores (release)
};

struct CqRecord {
  alignas(64) std::atomic<uint32_t> error{0};  // engine sets on overrun; app reads
  std::atomic<uint32_t> armed{0};              // app sets (1 any, 2 solicited only); engine clears when firing
  alignas(64) std::atomic<uint64_t> total{0};  // engine stores (release) after each completion; anyone reads
  alignas(64) std::atomic<uint64_t> consumer{0};  // app stores (release) in poll; engine reads (acquire) when full
};

struct SrqRecord {
  alignas(64) std::atomic<uint64_t> producer{0};  // app stores (release) after writing WQEs; engine reads (acquire)
  alignas(64) std::atomic<uint64_t> consumer{0};  // engine stores (release) when taking a WQE; app reads (acquire)
  std::atomic<uint32_t> limit{0};                 // app arms; engine clears when the event fires
};

// Completion events of one channel: the engine produces CQ numbers, the
// application consumes them (its threads serialize among themselves). A
// full ring drops the event but the eventfd still fires; events for one CQ
// need a re-arm each, so the ring fills only if an application re-arms
// without ever reading events.
struct ChannelRecord {
  static constexpr uint32_t kCapacity = 1024;
  alignas(64) std::atomic<uint64_t> tail{0};  // engine stores (release)
  alignas(64) std::atomic<uint64_t> head{0};  // app stores (release)
  std::atomic<uint64_t> dropped{0};           // engine: events lost to a full ring
  uint32_t cq[kCapacity] = {};
};

// Doorbells of one daemon client: the QP numbers of its QPs with new work
// (each at most once, by QpRecord::doorbell_queued). A bounded
// multi-producer queue (Vyukov's, with per-cell sequence numbers) whose
// producers are the application's threads and whose consumer is the engine.
// The consumer's head is the engine's own (DoorbellReader), so a client can
// corrupt only what it pushes, and every popped number is checked.
struct DoorbellRing {
  static constexpr uint32_t kCapacity = 8192;  // >= the QPs one client may hold
  struct alignas(16) Cell {
    std::atomic<uint64_t> seq;
    uint32_t qpn;
  };
  alignas(64) std::atomic<uint64_t> tail{0};  // producers
  Cell cells[kCapacity];

  void init() {
    for (uint32_t i = 0; i < kCapacity; ++i) cells[i].seq.store(i, std::memory_order_relaxed);
    tail.store(0, std::memory_order_release);
  }
  // Producer: false when full (cannot happen while each QP is queued at
  // most once and a client holds at most kCapacity QPs).
  bool push(uint32_t qpn) {
    uint64_t pos = tail.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells[pos % kCapacity];
      const uint64_t seq = cell.seq.load(std::memory_order_acquire);
      const int64_t diff = static_cast<int64_t>(seq - pos);
      if (diff == 0) {
        if (tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.qpn = qpn;
          cell.seq.store(pos + 1, std::memory_order_seq_cst);
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = tail.load(std::memory_order_relaxed);
      }
    }
  }
};

// The engine's side of a DoorbellRing.
struct DoorbellReader {
  DoorbellRing* ring = nullptr;
  uint64_t head = 0;
  uint32_t owner = 0;  // the client whose QPs it may name
  bool pop(uint32_t* qpn) {
    DoorbellRing::Cell& cell = ring->cells[head % DoorbellRing::kCapacity];
    if (cell.seq.load(std::memory_order_acquire) != head + 1) return false;
    *qpn = cell.qpn;
    cell.seq.store(head + DoorbellRing::kCapacity, std::memory_order_release);
    ++head;
    return true;
  }
  bool maybe_nonempty() const {
    return ring->cells[head % DoorbellRing::kCapacity].seq.load(std::memory_order_seq_cst) == head + 1;
  }
};

static_assert(std::is_standard_layout_v<QpRecord> && std::is_standard_layout_v<CqRecord> &&
              std::is_standard_layout_v<SrqRecord> && std::is_standard_layout_v<ChannelRecord> &&
              std::is_standard_layout_v<DoorbellRing>);

// Where a NIC places the rings and records of the objects it creates: the
// heap in process, a client's shared memory file under the daemon.
class RecordArena {
 public:
  virtual ~RecordArena() = default;
  // Zeroed, 4096-byte aligned; nullptr when the arena is full.
  virtual uint8_t* allocate(size_t bytes) = 0;
  virtual void release(uint8_t* ptr, size_t bytes) = 0;
};

}  // namespace ferry::nic::detail
