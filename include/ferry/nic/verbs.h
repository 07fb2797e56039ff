// The verbs API of Ferry's software RDMA NIC.
//
// Objects mirror libibverbs: a Nic (one per emulated host; ibv_context),
// ProtectionDomain, MemoryRegion, CompletionChannel, CompletionQueue,
// SharedReceiveQueue and RC QueuePair. Semantics are those of
// ../shared/verbs-semantics.md (IBTA Vol. 1 ch. 9-11) and are tested by the
// conformance suite in tests/nic/.
//
// Creation returns owning handles; destroying a handle releases the object.
// Destroy in dependency order, as with verbs: QPs before the CQs, SRQs and PD
// they use, MRs before their PD (violations assert).
//
// Threads: every object may be created and destroyed from any thread. A given
// QueuePair's post_send must be called by one thread at a time, likewise its
// post_recv, a CQ's poll, and an SRQ's post_recv; different objects are
// independent. The NIC itself runs on the Engine (engine.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <optional>
#include <span>
#include <string>

#include "ferry/common/status.h"
#include "ferry/nic/host_memory.h"
#include "ferry/nic/types.h"

namespace ferry::nic {

class Engine;
namespace detail {
class NicCore;
class Device;
struct QpView;
struct CqView;
struct SrqView;
struct ChannelView;
}  // namespace detail

class ProtectionDomain {
 public:
  ~ProtectionDomain();
  ProtectionDomain(const ProtectionDomain&) = delete;
  ProtectionDomain& operator=(const ProtectionDomain&) = delete;
  uint32_t handle() const { return handle_; }

 private:
  friend class Nic;
  ProtectionDomain(detail::Device* dev, uint32_t handle) : dev_(dev), handle_(handle) {}
  detail::Device* dev_;
  uint32_t handle_;
};

// A registered memory region. The memory is the caller's and must stay
// mapped until the MemoryRegion is destroyed.
class MemoryRegion {
 public:
  // Deregisters (ibv_dereg_mr). Remote operations still using the region
  // fail as after a hardware mkey invalidation: a READ response not yet sent
  // from it, or the rest of a multi-packet WRITE into it, is NAKed (remote
  // access error) and that responder QP goes to ERROR. After this returns no
  // remote operation touches the memory; local WRs and RECVs whose SGEs use
  // the region must have completed (as with verbs).
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  uint32_t lkey() const { return lkey_; }
  uint32_t rkey() const { return rkey_; }
  uint8_t* addr() const { return addr_; }
  // The address remote peers and SGEs name the region's first byte by:
  // its address in this process.
  uint64_t iova() const { return reinterpret_cast<uint64_t>(addr_); }
  size_t length() const { return length_; }
  uint32_t access() const { return access_; }
  // An SGE covering [offset, offset+length) of this region (not bounds-checked:
  // the NIC checks when it executes).
  Sge sge(size_t offset, uint32_t length) const { return Sge{iova() + offset, length, lkey_}; }

 private:
  friend class Nic;
  MemoryRegion(detail::Device* dev, uint8_t* addr, size_t length, uint32_t access, uint32_t key)
      : dev_(dev), addr_(addr), length_(length), access_(access), lkey_(key), rkey_(key) {}
  detail::Device* dev_;
  uint8_t* addr_;
  size_t length_;
  uint32_t access_;
  uint32_t lkey_;
  uint32_t rkey_;
};

// Completion event channel (ibv_comp_channel): an armed CQ posts one event
// here on its next (solicited) completion.
class CompletionChannel {
 public:
  ~CompletionChannel();
  CompletionChannel(const CompletionChannel&) = delete;
  CompletionChannel& operator=(const CompletionChannel&) = delete;

  // A file descriptor that is readable while an event is pending (for
  // poll/epoll). Owned by the channel.
  int fd() const;
  // Waits up to timeout_ms (-1 = forever) for an event and returns its CQ.
  // kTimedOut if none arrived; kUnavailable once the device is gone (its
  // daemon died). The CQ must be re-armed to get another event.
  Result<CompletionQueue*> get_event(int timeout_ms);

 private:
  friend class Nic;
  friend class CompletionQueue;
  CompletionChannel(detail::Device* dev, std::unique_ptr<detail::ChannelView> view);
  Result<CompletionQueue*> take_event();
  detail::Device* dev_;
  std::unique_ptr<detail::ChannelView> view_;
  std::mutex mu_;  // serializes consumers of the event ring and guards cqs_
  std::unordered_map<uint32_t, CompletionQueue*> cqs_;  // by CQ number
};

class CompletionQueue {
 public:
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Moves up to out.size() completions into `out`, oldest first; returns the
  // number moved. kFailedPrecondition if the CQ overran (it is then in
  // error, as are its QPs), kInvalidArgument for a count-only CQ, and
  // kUnavailable once the device is gone (no completion will ever come).
  Result<uint32_t> poll(std::span<WorkCompletion> out);
  // Arms the CQ: its next completion (next solicited one, or any error, if
  // solicited_only) posts one event to the channel. Poll again after arming
  // to close the race with completions that arrived before.
  Status req_notify(bool solicited_only);
  // Completions produced since creation (absolute; what WAIT compares to).
  uint64_t completions_total() const;
  uint32_t number() const;
  uint32_t capacity() const;
  bool count_only() const;

 private:
  friend class Nic;
  friend class QueuePair;
  friend class CompletionChannel;
  CompletionQueue(detail::Device* dev, std::unique_ptr<detail::CqView> view, CompletionChannel* channel);
  detail::Device* dev_;
  std::unique_ptr<detail::CqView> view_;
  CompletionChannel* channel_;
  uint64_t consumer_ = 0;  // app-owned consumer index
};

class SharedReceiveQueue {
 public:
  ~SharedReceiveQueue();
  SharedReceiveQueue(const SharedReceiveQueue&) = delete;
  SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

  // Appends receive WQEs (all or none). kResourceExhausted if full,
  // kInvalidArgument if a WR has too many SGEs.
  Status post_recv(std::span<const RecvWr> wrs);
  Status post_recv(const RecvWr& wr) { return post_recv(std::span<const RecvWr>(&wr, 1)); }
  // Arms the limit: one kSrqLimitReached event when fewer than `limit` WQEs
  // remain posted. 0 disarms.
  Status arm_limit(uint32_t limit);
  uint32_t number() const;
  uint32_t depth() const;
  uint32_t stride() const;  // of its WQE ring
  // Multi-packet SRQ: strides per buffer and stride size (0, 0: ordinary).
  uint32_t mp_strides() const;
  uint32_t mp_stride_bytes() const;
  std::span<uint8_t> ring() const;
  uint64_t posted() const;    // absolute producer index
  uint64_t consumed() const;  // absolute consumer index (WQEs taken by the NIC)

 private:
  friend class Nic;
  SharedReceiveQueue(detail::Device* dev, std::unique_ptr<detail::SrqView> view);
  detail::Device* dev_;
  std::unique_ptr<detail::SrqView> view_;
};

class QueuePair {
 public:
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  uint32_t qp_num() const;
  QpState state() const;
  // ibv_modify_qp: moves the QP along RESET -> INIT -> RTR -> RTS, or to
  // ERROR/RESET from any state. The attributes each transition requires must
  // be in `mask` (kInvalidArgument otherwise, naming the missing one).
  Status modify(const QpAttr& attr, uint32_t mask);
  QpAttr attributes() const;
  // A snapshot of what this QP has transmitted (a control command: not for
  // the data path).
  QpTraffic traffic() const;

  // Writes WQEs into the send ring and rings the doorbell (one doorbell for
  // the batch). All-or-nothing: kFailedPrecondition in RESET/INIT/RTR,
  // kInvalidArgument for a malformed WR, kResourceExhausted if the ring lacks
  // space (slots free in order, when a later signaled WR completes). For a
  // managed send queue the WQEs are written but run only once enabled.
  Status post_send(std::span<const SendWr> wrs);
  Status post_send(const SendWr& wr) { return post_send(std::span<const SendWr>(&wr, 1)); }
  // Receive WQEs; allowed from INIT on. kInvalidArgument on an SRQ-attached QP.
  Status post_recv(std::span<const RecvWr> wrs);
  Status post_recv(const RecvWr& wr) { return post_recv(std::span<const RecvWr>(&wr, 1)); }

  // The work queues in host memory (docs/wqe-format.md). They may be
  // registered as memory regions; slot i of a ring is at ring + (i % depth) *
  // stride. The NIC reads a WQE only when it starts executing it.
  std::span<uint8_t> send_ring() const;
  uint32_t send_stride() const;
  uint32_t send_depth() const;
  std::span<uint8_t> recv_ring() const;
  uint32_t recv_stride() const;
  uint32_t recv_depth() const;
  uint8_t* send_wqe(uint64_t index) const;
  uint8_t* recv_wqe(uint64_t index) const;
  uint64_t send_posted() const;  // absolute producer index of the send queue
  uint64_t recv_posted() const;
  const QpCapabilities& cap() const;
  bool managed_send() const;
  bool managed_recv() const;

 private:
  friend class Nic;
  QueuePair(detail::Device* dev, std::unique_ptr<detail::QpView> view, CompletionQueue* send_cq);
  detail::Device* dev_;
  std::unique_ptr<detail::QpView> view_;
  CompletionQueue* send_cq_;
};

// Counters of one NIC (snapshots; monotonically increasing).
struct NicCounters {
  uint64_t tx_packets = 0;
  uint64_t rx_packets = 0;
  uint64_t rx_malformed = 0;        // failed header/payload parsing: dropped
  uint64_t rx_unknown_qp = 0;       // no such QP, or QP not able to receive: dropped
  uint64_t rx_duplicates = 0;       // duplicate requests seen by responders
  uint64_t rx_out_of_sequence = 0;  // requests ahead of the expected PSN: dropped
  uint64_t seq_naks_sent = 0;
  uint64_t rnr_naks_sent = 0;
  uint64_t error_naks_sent = 0;
  uint64_t acks_sent = 0;
  uint64_t retransmitted_packets = 0;
  uint64_t ack_timeouts = 0;
  uint64_t rnr_retries = 0;
  uint64_t atomic_replays = 0;      // duplicate atomics answered from saved results
  uint64_t read_replays = 0;        // duplicate READs re-executed
  uint64_t doorbells = 0;
  uint64_t wqes_fetched = 0;
  uint64_t cqes_written = 0;
  // Modeled, not measured (NicResourceModel): what an RNIC's on-chip caches
  // would do with this traffic (JUNE BERRY §5.2, Fig. 6).
  uint64_t modeled_qpc_lookups = 0;    // packets that needed their QP's context
  uint64_t modeled_qpc_misses = 0;     // ... not in the context cache: a DMA to fetch it
  uint64_t modeled_recv_wqe_dmas = 0;  // DMAs fetching receive WQEs
};

// A model of an RNIC's on-chip resources, for counters only (nothing is
// slower for it): the QP-context cache, which thrashes with many QPs, and the
// receive-WQE fetch, one DMA per WQE for a list-based SRQ, one per
// `rq_prefetch_wqes` for an array-based RQ, one per buffer for a
// multi-packet SRQ (JUNE BERRY §5.2.1-5.2.2).
struct NicResourceModel {
  uint32_t qp_context_entries = 0;  // fully associative, LRU; 0 = not modeled (no lookups counted)
  uint32_t rq_prefetch_wqes = 8;
};

// Attaches a NIC to the network through one UDP socket (RoCEv2 framing,
// docs/wire-format.md "RoCEv2 over UDP"). The NIC then reaches NICs of other
// Engines -- other processes or hosts -- at the addresses Engine::resolve
// returns; NICs of its own Engine it still reaches in process.
struct UdpOptions {
  bool enabled = false;
  // An IPv4 address of a local interface (not 0.0.0.0: the GID and the ICRC
  // need the address) and a port: kRoceV2UdpPort (4791) in deployment, 0 for
  // an ephemeral one (tests, so parallel runs cannot collide).
  UdpEndpoint bind{0x7F000001, kRoceV2UdpPort};
  // Framed datagrams waiting for room in the socket; the bound behind
  // request back-pressure (3/4 of it) and READ-response pacing (7/8).
  uint32_t tx_queue_datagrams = 256;
  // SO_SNDBUF / SO_RCVBUF asked for; the kernel caps them (net.core.*mem_max).
  uint32_t socket_buffer_bytes = 4u << 20;
  // A cap on the path MTU below what the interface allows, for a path whose
  // MTU is smaller than the local interface's (nothing discovers it).
  uint32_t max_path_mtu = 4096;
};

// Counters of a NIC's UDP socket (snapshots; zero for an in-process NIC).
// Every received datagram is counted once in rx_datagrams and, if dropped,
// once in exactly one of the rx_ drop counters; the rest went to the NIC core.
struct UdpCounters {
  uint64_t rx_datagrams = 0;
  uint64_t rx_malformed = 0;     // too short/long or headers invalid (after a good ICRC)
  uint64_t rx_bad_icrc = 0;      // ICRC mismatch
  uint64_t rx_unknown_qp = 0;    // no QP with the BTH's DestQP
  uint64_t rx_unconnected = 0;   // the QP exists but its peer is not the datagram's source address/port
  uint64_t rx_calls = 0;         // receive system calls (recvmmsg) made
  uint64_t rx_empty_calls = 0;   // of those, the ones that found nothing
  uint64_t rx_skipped = 0;       // receive calls not made: the engine's ppoll had just reported the socket idle
  uint64_t tx_datagrams = 0;     // accepted by the socket
  uint64_t tx_eagain = 0;        // sends the socket refused for now (EAGAIN/ENOBUFS): retried next pass
  uint64_t tx_backpressure = 0;  // times a requester was held back: the TX queue was above its high-water mark
  uint64_t tx_queue_full = 0;    // responses dropped because the TX queue was full (the transport recovers)
  uint64_t tx_errors = 0;        // datagrams the socket rejected for good (dropped)
  uint64_t tx_queue_max = 0;     // most datagrams ever queued at once (never above the capacity)
  uint64_t tx_queue_capacity = 0;
};

struct NicOptions {
  std::string name;                 // for logs and reports
  HostMemory* memory = nullptr;     // DMA seam; DRAM when null
  uint32_t max_qps = 4096;
  uint32_t max_mrs = 65536;
  uint32_t max_cqs = 4096;
  uint32_t max_srqs = 1024;
  NicResourceModel resource_model = {};
  UdpOptions udp = {};              // off: an in-process NIC only
};

// One emulated host adapter (ibv_context). Created by Engine::add_nic and
// owned by the Engine.
class Nic {
 public:
  uint32_t address() const;
  const std::string& name() const;
  // The NIC's GID: ::ffff:a.b.c.d of its UDP bind address, or the synthetic
  // in-process GID (types.h). Constant; any thread.
  Gid gid() const;
  // Where its UDP socket is bound (the ephemeral port resolved), or nullopt
  // for an in-process NIC. Constant; any thread.
  std::optional<UdpEndpoint> udp_endpoint() const;
  // The largest path MTU a QP of this NIC may use toward a remote (UDP)
  // peer: from its interface's MTU; 4096 in process.
  uint32_t max_path_mtu() const;
  UdpCounters udp_counters() const;

  Result<std::unique_ptr<ProtectionDomain>> alloc_pd();
  // Registers [addr, addr+length) with the given Access flags. Remote write
  // or atomic access requires local write (as in IBTA), else kInvalidArgument.
  Result<std::unique_ptr<MemoryRegion>> reg_mr(ProtectionDomain& pd, void* addr, size_t length,
                                               uint32_t access);
  Result<std::unique_ptr<CompletionChannel>> create_comp_channel();
  Result<std::unique_ptr<CompletionQueue>> create_cq(const CqInitAttr& attr);
  Result<std::unique_ptr<SharedReceiveQueue>> create_srq(ProtectionDomain& pd, const SrqInitAttr& attr);
  Result<std::unique_ptr<QueuePair>> create_qp(ProtectionDomain& pd, const QpInitAttr& attr);

  // The address of a peer NIC's UDP endpoint for QpAttr::dest_nic (as
  // Engine::resolve, for whichever engine runs this NIC). Any thread.
  Result<uint32_t> resolve(const UdpEndpoint& endpoint);

  // Next asynchronous event, if any (ibv_get_async_event, non-blocking).
  // kDeviceFatal once the device is gone (its daemon died).
  std::optional<AsyncEvent> poll_async_event();
  NicCounters counters() const;
  // False once the device is gone (a daemon-attached NIC whose daemon died):
  // every operation then fails with kUnavailable.
  bool alive() const;

  // The in-process NIC core, or nullptr for a daemon-attached NIC.
  detail::NicCore* core() const;
  // The Engine that runs this NIC in this process, or nullptr for a
  // daemon-attached NIC (its engine runs in the daemon).
  Engine* engine() const;

  // A NIC served by `device` (the Engine's, or a daemon client's).
  explicit Nic(std::unique_ptr<detail::Device> device);
  ~Nic();
  Nic(const Nic&) = delete;
  Nic& operator=(const Nic&) = delete;

 private:
  std::unique_ptr<detail::Device> dev_;
};

}  // namespace ferry::nic
