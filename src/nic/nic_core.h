// Engine-side state of the software RNIC (internal header).
//
// Ownership: a NicCore owns every object core (QP, CQ, SRQ, MR, channel) in
// tables indexed by number/key. Public handles (verbs.h) point into them.
//
// Threads: fields marked "engine" are touched only by the engine thread (or by
// control commands, which the engine runs on its own thread). Fields marked
// "app" belong to the application thread that posts/polls that object. Shared
// fields are atomics with the ordering stated beside them.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ferry/common/block_table.h"
#include "ferry/common/counter.h"
#include "ferry/common/mpsc_queue.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/fabric.h"
#include "ferry/nic/verbs.h"
#include "ferry/nic/wire.h"
#include "ferry/nic/wqe.h"
#include "shared_records.h"

namespace ferry::nic::detail {

class NicCore;
class UdpPort;

// IBTA: the largest message (and RDMA length) is 2^31 bytes.
constexpr uint32_t kMaxMessageBytes = 1u << 31;

// Zeroed memory for the rings and records the NIC allocates: from the heap
// in cache-line (kCacheLine) granules, cache-line aligned (from anonymous
// pages, page-aligned, from kMapBytes up); or from `arena`
// (a daemon client's shared memory file) in whole pages, page-aligned, where
// it may fail: ptr is then nullptr. Either way the rings' 64-byte WQE and
// CQE slots and the records' alignas(64) lines never share a line with
// another buffer.
struct AlignedBuffer {
  static constexpr size_t kCacheLine = 64;
  static constexpr size_t kMapBytes = 64 * 1024;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, RecordArena* arena = nullptr);
  AlignedBuffer(AlignedBuffer&& o) noexcept : ptr(o.ptr), size(o.size), arena(o.arena) {
    o.ptr = nullptr;
    o.size = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  ~AlignedBuffer();
  uint8_t* ptr = nullptr;
  size_t size = 0;
  RecordArena* arena = nullptr;
};

// Starts loading the cache line at `p` (read). An asm statement on x86-64:
// GCC 12 at -O2 dropped __builtin_prefetch of an address loaded through a
// std::unique_ptr (NicCore::prefetch_qp compiled to nothing).
inline void prefetch_line(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

struct MrEntry {
  uint32_t key = 0;  // lkey == rkey: index << 8 | variant
  uint32_t pd = 0;
  uint8_t* base = nullptr;  // where the NIC reaches the region's first byte
  uint64_t iova = 0;        // the address the region's users name it by (the owner's virtual address)
  uint64_t length = 0;
  uint32_t access = 0;
  bool valid = false;

  // Points *host at [va, va+len) if that range lies inside the region.
  bool resolve(uint64_t va, uint64_t len, uint8_t** host) const {
    const uint64_t first = iova;
    if (va < first || len > length || va - first > length - len) return false;
    *host = base + (va - first);
    return true;
  }
};

// The memory-region table by index (key >> 8), in blocks allocated when an
// index in them is first used: a NIC's 65,536 entries cost memory only
// where its MRs are, and an entry never moves.
using MrTable = BlockTable<MrEntry, 1024>;

// Engine side of a completion channel: events go into `rec` (shared with
// the application), then a write to event_fd wakes its waiters.
struct ChannelCore {
  // A channel with its own eventfd and record on the heap (in process), or
  // in `arena` (ok() false if the arena is full).
  explicit ChannelCore(RecordArena* arena = nullptr);
  ~ChannelCore();
  bool ok() const { return rec != nullptr && event_fd >= 0; }
  void post(uint32_t cq_number);
  int event_fd = -1;
  AlignedBuffer rec_memory;
  ChannelRecord* rec = nullptr;
};

struct CqCore {
  uint32_t number = 0;
  bool count_only = false;
  uint32_t depth = 0;
  AlignedBuffer ring_memory;
  Cqe* ring = nullptr;
  AlignedBuffer rec_memory;
  CqRecord* rec = nullptr;         // shared with the application
  ChannelCore* channel = nullptr;
  uint32_t owner = 0;              // daemon client that created it (0: in process)
  uint32_t users = 0;              // engine: QPs using this CQ
  // engine: the protection domains of the QPs using this CQ, with how many
  // QPs of each. A CQ has no PD of its own in verbs; a WAIT may name it only
  // from a QP of one of these (cross_channel.cc).
  std::vector<std::pair<uint32_t, uint32_t>> pd_users;
  bool used_by_pd(uint32_t pd) const {
    for (const auto& [p, n] : pd_users) {
      if (p == pd) return true;
    }
    return false;
  }
  void add_pd_user(uint32_t pd) {
    for (auto& [p, n] : pd_users) {
      if (p == pd) {
        ++n;
        return;
      }
    }
    pd_users.emplace_back(pd, 1);
  }
  void remove_pd_user(uint32_t pd) {
    for (size_t i = 0; i < pd_users.size(); ++i) {
      if (pd_users[i].first == pd && --pd_users[i].second == 0) {
        pd_users.erase(pd_users.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    }
  }

  uint64_t produced = 0;                // engine: CQEs written (or counted)
  uint64_t consumer_cache = 0;         // engine: last consumer index read; re-read only when full
  struct QpCore* waiters = nullptr;    // engine: QPs stalled in WAIT on this CQ (intrusive list)
};

struct SrqCore {
  uint32_t number = 0;
  uint32_t pd = 0;
  uint32_t depth = 0;
  uint32_t stride = 0;
  uint32_t max_sge = 0;
  AlignedBuffer ring_memory;
  uint8_t* ring = nullptr;
  AlignedBuffer rec_memory;
  SrqRecord* rec = nullptr;             // shared with the application
  uint32_t owner = 0;                   // daemon client that created it (0: in process)
  uint32_t users = 0;                   // engine: QPs attached

  // Multi-packet SRQ (immutable after create; 0 strides = ordinary).
  uint32_t mp_strides = 0;
  uint32_t mp_stride_bytes = 0;
  uint32_t mp_max_message_strides = 0;
  uint32_t mp_buffer_bytes() const { return mp_strides * mp_stride_bytes; }
  // Engine: the buffer messages are being placed in.
  bool mp_active = false;
  uint64_t mp_index = 0;          // its SRQ index
  uint64_t mp_wr_id = 0;
  uint8_t* mp_base = nullptr;     // resolved host address (nullptr: its WQE failed the checks)
  WcStatus mp_status = WcStatus::kSuccess;
  uint32_t mp_next_stride = 0;    // first stride not yet given to a message
};

// A resolved local buffer segment (after lkey/bounds/access checks).
struct LocalSeg {
  uint8_t* ptr = nullptr;
  uint32_t length = 0;
  // The MR it was translated through (0: memory the NIC owns, an SRQ's
  // strides). Every later DMA through it checks the MR is still registered
  // (NicCore::segs_live): a WQE outlives a deregistration, its memory may not.
  uint32_t lkey = 0;
};

// Requester state of one started WQE, at slot (index % depth).
struct SendSlot {
  WrOpcode opcode = WrOpcode::kNop;
  uint8_t flags = 0;
  bool local = false;       // WAIT/ENABLE/NOP: no packets
  bool done = false;        // acknowledged / executed / failed; awaiting in-order completion
  bool rd_atomic = false;   // READ/ATOMIC/FLUSH: counts toward max_rd_atomic
  bool inline_data = false;
  WcStatus status = WcStatus::kSuccess;
  uint8_t nsge = 0;
  uint32_t imm_data = 0;
  uint64_t wr_id = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t aux = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint32_t first_psn = 0;
  uint32_t npkts = 0;       // PSNs occupied (READ: response packets)
  uint32_t length = 0;      // message bytes
  uint32_t resp_pkts = 0;    // READ/FLUSH: response packets received
  uint32_t resp_bytes = 0;   // READ: response bytes placed
  // READ: PSN of the last READ request sent for it (first_psn, or where a
  // re-request resumed). Its answer may start with FIRST/ONLY there.
  uint32_t request_psn = 0;
  const uint8_t* inline_ptr = nullptr;  // inside the ring slot
};

// Responder state of the RECV the current inbound message fills.
struct RecvContext {
  bool active = false;
  WcStatus status = WcStatus::kSuccess;  // kLocProtErr if its SGEs failed checks
  uint64_t wr_id = 0;
  uint32_t wqe_index = 0;
  uint32_t offset = 0;    // bytes placed so far
  uint32_t capacity = 0;  // sum of SGE lengths
  uint8_t nsge = 0;
  LocalSeg sges[kMaxRecvSge];
  // Multi-packet SRQ: the strides reserved for this message in buffer
  // wqe_index, [stride, stride + strides).
  bool mp = false;
  bool mp_bad_buffer = false;  // the buffer failed its checks: retired with this message
  uint16_t stride = 0;
  uint32_t strides = 0;
};

// One response a responder owes its requester, in PSN order: ACK/NAK,
// READ response packets, or an ATOMIC acknowledgement.
struct ResponseEntry {
  enum class Kind : uint8_t { kAck, kRead, kAtomicAck };
  Kind kind = Kind::kAck;
  uint8_t syndrome = 0;          // kAck: AETH syndrome
  // kRead, kAtomicAck: answers a duplicate request (re-executed READ or
  // FLUSH, replayed ATOMIC), not a new one.
  bool replay = false;
  // kRead: its MR was deregistered before every byte was read; sending the
  // rest is a DMA fault (remote access NAK, QP to ERROR).
  bool source_gone = false;
  uint32_t psn = 0;              // kAck: PSN acknowledged (NAK: PSN named); kRead, kAtomicAck: first PSN
  uint32_t msn = 0;              // MSN carried in the AETH
  uint64_t original = 0;         // kAtomicAck
  const uint8_t* data = nullptr; // kRead: responder memory (borrowed, see fabric.h)
  uint32_t rkey = 0;             // kRead: the MR `data` lies in (0: none, a 0-byte READ or FLUSH)
  uint32_t length = 0;           // kRead: bytes
  uint32_t npkts = 0;            // kRead: response packets
  uint32_t sent = 0;             // kRead: packets already transmitted
};

struct AtomicRecord {
  bool valid = false;
  uint32_t psn = 0;
  uint64_t original = 0;
};

struct QpCore {
  // ---- identity and configuration (immutable after create, but state) ----
  NicCore* nic = nullptr;
  uint32_t qpn = 0;
  uint32_t pd = 0;
  // The QP's state: the engine's own copy, which only it writes (set_state)
  // and reads; applications read the published one, rec->state. The record
  // stays off the packet path (a cache miss per packet with thousands of
  // QPs: issue 31), and a daemon client that overwrites it fools only itself.
  QpState state = QpState::kReset;
  CqCore* send_cq = nullptr;
  CqCore* recv_cq = nullptr;
  SrqCore* srq = nullptr;
  QpCapabilities cap;
  bool sq_sig_all = false;
  bool managed_send = false;
  bool cross_channel = false;  // may execute WAIT / SEND_ENABLE / RECV_ENABLE
  bool managed_recv = false;
  uint32_t owner = 0;  // daemon client that created it (0: in process)
  AlignedBuffer sq_memory, rq_memory;
  uint8_t* sq_ring = nullptr;
  uint32_t sq_depth = 0, sq_stride = 0;
  uint8_t* rq_ring = nullptr;
  uint32_t rq_depth = 0, rq_stride = 0;

  // ---- shared with the application (shared_records.h) ----
  // One block: the QpRecord, then sq_depth FreeMarks.
  AlignedBuffer rec_memory;
  QpRecord* rec = nullptr;
  FreeMark* free_marks = nullptr;
  uint32_t free_marks_size = 0;
  uint64_t free_marks_head_cache = 0;  // engine: last free_marks_head read

  // ---- engine side: attributes ----
  alignas(64) QpAttr attr;
  uint32_t mtu = 4096;

  // ---- engine side: requester ----
  uint64_t sq_limit = 0;     // doorbell value last read
  uint64_t sq_enable = 0;    // managed: WQEs below this may run
  uint64_t sq_next = 0;      // next WQE to start (fetch)
  uint64_t sq_done = 0;      // next WQE to complete, in order
  uint64_t sq_unacked = 0;   // first started WQE not yet done
  uint64_t tx_wqe = 0;       // transmit cursor: WQE
  uint32_t tx_pkt = 0;       // transmit cursor: packet within it
  uint32_t psn_next = 0;     // next PSN to assign
  uint32_t psn_high = 0;     // one past the highest PSN ever transmitted (retransmit accounting)
  uint32_t una_psn = 0;      // oldest PSN still needing an ACK or response (== psn_next when none)
  uint32_t rd_atomic_out = 0;
  uint8_t retries_left = 7;
  uint8_t rnr_retries_left = 7;
  // A READ/ATOMIC whose answer was seen to be missing (a later response or
  // ACK arrived) is asked for again once per gap: at gap_psn, until the
  // retry timer fires.
  bool gap_requested = false;
  uint32_t gap_psn = 0;
  uint64_t retry_deadline_ns = 0;  // 0 = disarmed
  uint64_t rnr_until_ns = 0;       // 0 = not waiting
  std::vector<SendSlot> slots;
  std::vector<LocalSeg> slot_sges;  // sq_depth * max(1, max_send_sge)
  bool in_ready = false;
  QpCore* ready_next = nullptr;
  bool waiting_cq = false;
  QpCore* wait_next = nullptr;
  bool in_timer_list = false;
  bool flush_needed = false;   // ERROR: posted WRs remain to be flushed
  uint64_t watch_last_ns = 0;  // last doorbell activity seen while watched (engine_watching)
  // When its number last came through a doorbell queue (nic_loop.cc: only
  // a QP that rings twice within the watch window is watched).
  uint64_t queued_doorbell_ns = 0;

  // ---- engine side: responder ----
  uint32_t epsn = 0;
  uint32_t msn = 0;
  bool nak_outstanding = false;  // a sequence/RNR NAK went out; stay quiet until epsn arrives
  enum class InMsg : uint8_t { kNone, kSend, kWrite } in_msg = InMsg::kNone;
  RecvContext recv;
  uint8_t* write_ptr = nullptr;
  uint32_t write_remaining = 0;
  uint32_t write_length = 0;
  uint32_t write_rkey = 0;          // MR the WRITE in progress targets
  bool write_target_gone = false;   // that MR was deregistered mid-message: the next packet faults
  bool ack_pending = false;
  uint32_t ack_psn = 0;
  bool in_ack_list = false;
  QpCore* ack_next = nullptr;
  std::vector<AtomicRecord> atomic_records;  // max_dest_rd_atomic entries, ring
  uint32_t atomic_next = 0;
  // Responses not yet transmitted (a READ burst throttled by the fabric, and
  // everything queued behind it, so nothing overtakes it). A ring of
  // 2 * max_dest_rd_atomic + 1 entries, which rd_atomic_room() and respond()
  // keep it within: at most max_dest_rd_atomic READ/ATOMIC entries answering
  // new requests, as many answering duplicates, and at most one ACK/NAK,
  // always the last (a later response folds into it).
  std::vector<ResponseEntry> responses;
  uint32_t resp_head = 0;
  uint32_t resp_count = 0;
  uint32_t resp_rd_atomic = 0;  // READ/ATOMIC entries among them answering new requests
  uint32_t resp_replays = 0;    // READ/ATOMIC entries among them answering duplicates
  bool in_resp_list = false;
  uint64_t rq_consumed = 0;  // engine copy of rq_consumer
  uint64_t rq_enable = 0;    // managed receive: RECVs below this are visible

  // What this QP transmitted (engine; read by control commands through
  // traffic()), one 32-byte entry per packet kind: a packet updates one
  // cache line, not one in each of QpTraffic's three arrays.
  struct TrafficEntry {
    uint64_t packets = 0;
    uint64_t header_bytes = 0;
    uint64_t payload_bytes = 0;
    uint64_t unused = 0;
  };
  alignas(64) TrafficEntry traffic_by_kind[kPacketKinds];
  QpTraffic traffic() const {
    QpTraffic t;
    for (int k = 0; k < kPacketKinds; ++k) {
      t.packets[k] = traffic_by_kind[k].packets;
      t.header_bytes[k] = traffic_by_kind[k].header_bytes;
      t.payload_bytes[k] = traffic_by_kind[k].payload_bytes;
    }
    return t;
  }

  void set_state(QpState to) {
    state = to;
    rec->state.store(to, std::memory_order_seq_cst);
  }

  SendSlot& slot(uint64_t index) { return slots[index & (sq_depth - 1)]; }
  LocalSeg* sges_of(uint64_t index) {
    const uint32_t per = cap.max_send_sge ? cap.max_send_sge : 1;
    return &slot_sges[(index & (sq_depth - 1)) * per];
  }
  uint8_t* send_slot_ptr(uint64_t index) const { return sq_ring + (index & (sq_depth - 1)) * sq_stride; }
  uint8_t* recv_slot_ptr(uint64_t index) const { return rq_ring + (index & (rq_depth - 1)) * rq_stride; }
  // Room to queue one more READ/ATOMIC response. For a new request: fewer
  // than max_dest_rd_atomic responses to new requests are queued (more means
  // the requester broke the limit). For a duplicate: fewer than
  // max_dest_rd_atomic READ/ATOMIC responses in all (else it is ignored and
  // the requester asks again), so replays never use up the resources new
  // requests are owed.
  bool rd_atomic_room(bool duplicate) const {
    return (duplicate ? resp_rd_atomic + resp_replays : resp_rd_atomic) < attr.max_dest_rd_atomic;
  }
};

// Mutable counters of a NIC (engine writes, anyone reads).
struct NicCounterSet {
  Counter tx_packets, rx_packets, rx_malformed, rx_unknown_qp, rx_duplicates, rx_out_of_sequence;
  Counter seq_naks_sent, rnr_naks_sent, error_naks_sent, acks_sent, retransmitted_packets;
  Counter ack_timeouts, rnr_retries, atomic_replays, read_replays, doorbells, wqes_fetched, cqes_written;
  Counter modeled_qpc_lookups, modeled_qpc_misses, modeled_recv_wqe_dmas;
};

// The modeled QP-context cache (NicResourceModel::qp_context_entries): a
// fully associative LRU over QP indices. Engine only.
class QpContextCache {
 public:
  QpContextCache(uint32_t entries, uint32_t qp_slots);
  bool enabled() const { return capacity_ != 0; }
  // Looks the context up and makes it the most recent: true on a hit.
  bool touch(uint32_t qp_index);
  // The QP is gone: its context no longer counts as cached.
  void forget(uint32_t qp_index);

 private:
  static constexpr uint32_t kNoQp = UINT32_MAX;
  void unlink(int32_t slot);
  void push_front(int32_t slot);
  uint32_t capacity_;
  uint32_t used_ = 0;
  std::vector<int32_t> slot_of_;  // by QP index: its slot, or -1
  std::vector<uint32_t> qp_of_;   // by slot
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;
};

class NicCore {
 public:
  NicCore(Engine* engine, Fabric* fabric, const NicOptions& options);
  ~NicCore();

  uint32_t address() const { return address_; }
  const std::string& name() const { return options_.name; }
  Engine* engine() const { return engine_; }
  Nic* handle() const { return handle_; }
  void set_handle(Nic* nic) { handle_ = nic; }
  // The NIC's UDP socket (owned by the Fabric), or nullptr in process only.
  // Set once by Engine::add_nic before the Nic is handed out; constant after.
  UdpPort* udp_port() const { return udp_; }
  void set_udp_port(UdpPort* port) { udp_ = port; }
  // Identity on the wire (udp_transport.cc); constant, any thread.
  Gid gid() const;
  std::optional<UdpEndpoint> udp_endpoint() const;
  uint32_t max_path_mtu() const;
  UdpCounters udp_counters() const;

  // ---- engine entry points (engine thread) ----
  void on_packet(const Packet& packet, uint64_t now);
  // Starts loading the context of the QP a queued packet names, so that the
  // cache misses overlap the packets handled before it (Fabric::deliver;
  // with thousands of QPs the first touch of a QP's context was a fifth of
  // the engine's time: issue 31).
  void prefetch_qp(const Packet& packet) const {
    // The BTH's destination QP, unchecked: prefetching the wrong QP (or
    // none) only wastes the prefetch; on_packet checks everything.
    if (packet.header_len < wire::kBthBytes) return;
    const uint32_t qpn = wire::peek_dest_qp(packet.header);
    const QpCore* qp = qps_[qpn & ((1u << qp_index_bits_) - 1)].get();
    if (qp == nullptr) return;
    const char* base = reinterpret_cast<const char*>(qp);
    for (size_t offset = 0; offset < kPrefetchBytes; offset += 64) prefetch_line(base + offset);
  }
  void end_rx_batch(uint64_t now);
  bool poll(uint64_t now);
  uint64_t next_timer_ns() const { return next_timer_ns_; }
  bool busy() const;  // has transmit/flush work or armed timers

  // ---- application-thread entry points ----
  // Queues an in-process QP whose record's doorbell_queued the caller just
  // set, and wakes the engine.
  void ring_doorbell(uint32_t qpn);
  // Stops polling every watched doorbell record (before the engine sleeps).
  // Returns true if a post slipped in meanwhile (then do not sleep).
  bool unwatch_all();

  // ---- control (runs on the engine through Engine::run_control) ----
  uint32_t alloc_pd();
  void dealloc_pd(uint32_t handle);
  bool pd_valid(uint32_t handle) const { return handle != 0 && handle < pd_refs_.size(); }
  uint32_t pd_refs(uint32_t handle) const { return pd_valid(handle) ? pd_refs_[handle] : 0; }
  // `addr` is where the NIC reaches the memory, `iova` the address its users
  // name it by (the same in process; the client's mapping under the daemon).
  Result<uint32_t> reg_mr(uint32_t pd, uint8_t* addr, size_t length, uint32_t access, uint64_t iova);
  Result<uint32_t> reg_mr(uint32_t pd, uint8_t* addr, size_t length, uint32_t access) {
    return reg_mr(pd, addr, length, access, reinterpret_cast<uint64_t>(addr));
  }
  void dereg_mr(uint32_t key);
  // Rings and shared records come from `arena` (nullptr: the heap); `owner`
  // tags the object with the daemon client that made it (0 in process).
  // For create_qp/create_srq, attr's ring spans and CQ/SRQ pointers are
  // ignored in favour of the resolved arguments.
  Result<CqCore*> create_cq(const CqInitAttr& attr, ChannelCore* channel, RecordArena* arena = nullptr,
                            uint32_t owner = 0);
  void destroy_cq(CqCore* cq);
  // A completion channel is going away before its CQs (verbs refuses with
  // EBUSY; a destructor cannot): they stop raising events.
  void detach_channel(const ChannelCore* channel);
  Result<SrqCore*> create_srq(uint32_t pd, const SrqInitAttr& attr, RecordArena* arena = nullptr, uint32_t owner = 0);
  void destroy_srq(SrqCore* srq);
  Result<QpCore*> create_qp(uint32_t pd, const QpInitAttr& attr, CqCore* send_cq, CqCore* recv_cq, SrqCore* srq,
                            RecordArena* arena = nullptr, uint32_t owner = 0);
  void destroy_qp(QpCore* qp);
  // A daemon client's doorbell ring: drained every pass; a QP number it
  // names counts only if that QP is the client's.
  void attach_doorbells(DoorbellRing* ring, uint32_t owner);
  void detach_doorbells(uint32_t owner);
  // Moves a QP to ERROR as a failed modify would (a dead client's QPs).
  void force_error(QpCore* qp);
  SrqCore* find_srq(uint32_t number) const {
    return number < srqs_.size() ? srqs_[number].get() : nullptr;
  }
  Status modify_qp(QpCore* qp, const QpAttr& attr, uint32_t mask);
  void push_async_event(AsyncEvent ev);
  std::optional<AsyncEvent> pop_async_event();
  NicCounters counters() const;

  // Lookups (engine).
  QpCore* find_qp(uint32_t qpn) const;
  CqCore* find_cq(uint32_t number) const;
  const MrEntry* find_mr(uint32_t key) const;
  // True if every segment's MR is still registered over its bytes. A NIC
  // translates each DMA through the MR's key, so a message whose MR was
  // deregistered while it was outstanding (a retransmission, its later
  // packets, a READ response or an atomic's result landing) fails with a
  // local protection error; it never touches memory that may be unmapped.
  bool segs_live(const LocalSeg* segs, uint32_t n) const;

 private:
  // requester.cc
  enum class TxResult : uint8_t { kIdle, kBlocked, kBudget, kBackpressure };
  enum class StartResult : uint8_t { kStarted, kIdle, kBlocked, kFailed };
  StartResult start_next_wqe(QpCore* qp);
  TxResult transmit_some(QpCore* qp, uint64_t now, uint32_t budget, bool* did);
  bool send_request_packet(QpCore* qp, uint64_t wqe_index, uint64_t now);
  WcStatus resolve_local_sges(QpCore* qp, SendSlot& s, const DecodedSendWqe& wqe, uint64_t index, bool need_write);
  void make_ready(QpCore* qp);
  bool run_ready(uint64_t now);
  // requester_ack.cc
  void on_response(QpCore* qp, const wire::Headers& h, const uint8_t* payload, uint32_t len, uint64_t now);
  bool process_ack(QpCore* qp, uint32_t psn, uint64_t now);
  void after_progress(QpCore* qp, uint64_t now);
  void update_una(QpCore* qp, uint32_t acked_through, bool have_ack);
  void on_nak(QpCore* qp, uint32_t psn, uint8_t syndrome, uint64_t now);
  void go_back_to(QpCore* qp, uint32_t psn);
  void request_missing(QpCore* qp, uint32_t psn);
  void advance_send_completions(QpCore* qp);
  // Writes a send completion to qp's send CQ and records when the slots
  // below `freed_to` become reusable (at once for a count-only CQ, else once
  // the application has polled that CQE).
  void complete_send(QpCore* qp, const WorkCompletion& wc, uint64_t freed_to);
  // Whether a CQE ring has no free slot; reads the application's consumer
  // index only when the cached one says full.
  bool cq_full(CqCore* cq) {
    if (cq->produced - cq->consumer_cache < cq->depth) return false;
    cq->consumer_cache = cq->rec->consumer.load(std::memory_order_acquire);
    return cq->produced - cq->consumer_cache >= cq->depth;
  }
  // Whether complete() would write a CQE to cq now (not in error, room).
  bool cq_accepts(CqCore* cq) {
    return !cq->rec->error.load(std::memory_order_relaxed) && (cq->count_only || !cq_full(cq));
  }
  void arm_retry_timer(QpCore* qp, uint64_t now);
  void arm_timer_at(QpCore* qp, uint64_t deadline);
  bool run_timers(uint64_t now);
  void on_qp_timer(QpCore* qp, uint64_t now);
  void fail_wqe_at_psn(QpCore* qp, uint32_t psn, WcStatus status);
  // responder.cc
  void on_request(QpCore* qp, const wire::Headers& h, const uint8_t* payload, uint32_t len, uint64_t now);
  void on_duplicate_request(QpCore* qp, const wire::Headers& h, uint64_t now);
  // Takes the RECV (or multi-packet SRQ strides) the message that starts
  // with this packet lands in: `first_len` is its length when the packet is
  // also the last (-1 if more packets follow). False if none is available.
  bool take_recv(QpCore* qp, int64_t first_len);
  bool take_mp_strides(QpCore* qp, SrqCore* srq, int64_t first_len);
  void release_unused_strides(QpCore* qp);
  bool place_recv_payload(QpCore* qp, const uint8_t* payload, uint32_t len);
  void complete_recv(QpCore* qp, WcOpcode opcode, uint32_t byte_len, bool has_imm, uint32_t imm, bool solicited);
  // The MR `rkey` names if this QP and that MR allow every right in `access`, else nullptr.
  const MrEntry* find_remote_mr(const QpCore* qp, uint32_t rkey, uint32_t access) const;
  // find_remote_mr, and [va, va+len) inside the MR: *host points at it.
  const MrEntry* check_remote_access(QpCore* qp, uint64_t va, uint32_t rkey, uint64_t len, uint32_t access,
                                     uint8_t** host);
  void schedule_ack(QpCore* qp, uint32_t psn);
  void send_ack(QpCore* qp, uint32_t psn, uint8_t syndrome, uint64_t now);
  void responder_fail(QpCore* qp, uint32_t psn, wire::NakCode code, uint64_t now);
  // responder_read_atomic.cc
  void execute_read(QpCore* qp, const wire::Headers& h, bool duplicate, uint64_t now);
  void execute_atomic(QpCore* qp, const wire::Headers& h, uint64_t now);
  void replay_atomic(QpCore* qp, const wire::Headers& h, uint64_t now);
  void execute_flush(QpCore* qp, const wire::Headers& h, bool duplicate, uint64_t now);
  void send_atomic_ack(QpCore* qp, uint32_t psn, uint64_t original, bool replay, uint64_t now);
  // responder_output.cc
  void respond(QpCore* qp, const ResponseEntry& e, uint64_t now);
  bool emit_response(QpCore* qp, ResponseEntry& e, uint64_t now);
  bool drain_responses(QpCore* qp, uint64_t now);
  bool run_responders(uint64_t now);
  void drop_responses(QpCore* qp);
  // qp_error.cc
  // Moves `qp` to ERROR and flushes its work. Responses already queued are
  // dropped unless `keep_owed_responses` (a responder error: what it owes for
  // requests executed before the failing one still goes out, then the NAK).
  void enter_error(QpCore* qp, bool keep_owed_responses = false);
  bool flush_qp(QpCore* qp);
  void reset_qp_state(QpCore* qp);
  // cross_channel.cc
  enum class CrossChannelResult : uint8_t { kDone, kBlocked, kBad };
  CrossChannelResult execute_wait(QpCore* qp, const DecodedSendWqe& wqe);
  CrossChannelResult execute_enable(QpCore* qp, const DecodedSendWqe& wqe);
  void wake_waiters(CqCore* cq);
  // completion.cc
  void complete(CqCore* cq, const WorkCompletion& wc);
  void cq_overrun(CqCore* cq);
  // transmit helpers
  bool transmit(QpCore* qp, Packet& p, bool is_request, uint64_t now);
  // resource_model.cc: a packet of this QP needed its context (counters only).
  void model_qp_context(const QpCore* qp);
  void fill_packet(Packet& p, QpCore* qp, const wire::Headers& h);

  Engine* engine_;
  Fabric* fabric_;
  NicOptions options_;
  HostMemory* memory_;
  uint32_t address_ = 0;
  Nic* handle_ = nullptr;
  UdpPort* udp_ = nullptr;

  // Object tables (engine; control commands modify them on the engine thread).
  std::vector<std::unique_ptr<QpCore>> qps_;  // index = qpn & (max_qps - 1)
  uint32_t qp_index_bits_ = 12;
  uint32_t next_qp_generation_ = 1;
  MrTable mrs_;  // index = key >> 8
  uint32_t next_mr_index_ = 1;
  uint8_t next_mr_variant_ = 1;
  std::vector<std::unique_ptr<CqCore>> cqs_;  // index = number
  std::vector<std::unique_ptr<SrqCore>> srqs_;
  uint32_t next_pd_ = 1;
  std::vector<uint32_t> pd_refs_;

  // Doorbells: qpn of each QP with new work, at most once each (doorbell_queued).
  MpscQueue<uint32_t> doorbells_;
  std::vector<DoorbellReader> client_doorbells_;  // daemon clients' rings
  void on_doorbell_qpn(QpCore* qp, uint64_t now);
  // Engine work lists.
  QpCore* ready_head_ = nullptr;
  QpCore* ready_tail_ = nullptr;
  QpCore* ack_head_ = nullptr;
  std::vector<QpCore*> timer_qps_;
  uint64_t next_timer_ns_ = UINT64_MAX;
  std::vector<QpCore*> flush_qps_;
  std::vector<QpCore*> watched_;  // QPs whose doorbell record the engine polls directly
  std::vector<QpCore*> responders_;  // QPs with queued responses
  bool poll_watched(uint64_t now);
  void watch(QpCore* qp, uint64_t now);
  bool unwatch(QpCore* qp);
  void on_doorbell(QpCore* qp, uint64_t doorbell);
  uint64_t watch_ns_ = 100'000;

  std::mutex async_mu_;
  std::deque<AsyncEvent> async_events_;  // guarded by async_mu_

  NicCounterSet counters_;
  QpContextCache qpc_cache_;
  uint32_t tx_burst_ = 16;
  uint32_t window_packets_ = 1024;
  static constexpr uint32_t kAckReqInterval = 16;
  // What prefetch_qp loads of a QpCore: its first eight cache lines, from
  // the identity and record pointers through the attributes, the
  // requester's cursors and the responder's PSN state (epsn, msn).
  static constexpr size_t kPrefetchBytes = 512;
};

}  // namespace ferry::nic::detail
