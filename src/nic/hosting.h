// A NIC's control operations on behalf of the NIC daemon's clients
// (internal header, meant for src/nicd).
//
// The daemon (`ferry nicd`, src/nicd/server.cc) creates verbs objects on
// its in-process NIC for applications in other processes: their rings and
// shared records are placed in the client's memory file (a RecordArena,
// shared_records.h), each object is tagged with the client that owns it,
// and the client learns where things are from plain descriptions
// (HostedCq, HostedSrq, HostedQp). Objects are named by their numbers (CQ
// and SRQ number, QPN, lkey); the engine-side state behind them (nic_core.h)
// stays inside the NIC layer.
//
// Threads: every call runs on the engine thread (Engine::run_control), as
// the NIC's own control operations do. A number that names no object is
// ignored by the calls that destroy or release (a dead client's objects are
// released in bulk) and refused by the others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "ferry/common/status.h"
#include "ferry/nic/types.h"
#include "ferry/nic/verbs.h"
#include "ferry/nic/wqe.h"
#include "shared_records.h"

namespace ferry::nic::detail {

class NicCore;
struct ChannelCore;

// A completion channel made for a client: its record (in the client's
// arena) and the eventfd its waiters block on (owned by the channel).
// Destroy it on the engine thread, after NicHosting::detach_channel.
class HostedChannel {
 public:
  ~HostedChannel();
  ChannelRecord* record() const;
  int event_fd() const;

 private:
  friend class NicHosting;
  explicit HostedChannel(std::unique_ptr<ChannelCore> core);
  std::unique_ptr<ChannelCore> core_;
};

// Where a created CQ's record and ring are (inside the arena given).
struct HostedCq {
  uint32_t number = 0;
  uint32_t depth = 0;
  const CqRecord* record = nullptr;
  const Cqe* ring = nullptr;  // nullptr for a count-only CQ
};

struct HostedSrq {
  uint32_t number = 0;
  uint32_t depth = 0, stride = 0, max_sge = 0;
  uint32_t mp_strides = 0, mp_stride_bytes = 0;
  const SrqRecord* record = nullptr;
  const uint8_t* ring = nullptr;  // in the arena, or the client's own ring memory
};

struct HostedQp {
  uint32_t qpn = 0;
  uint32_t sq_depth = 0, sq_stride = 0;
  uint32_t rq_depth = 0, rq_stride = 0;
  QpCapabilities cap;  // as granted
  const QpRecord* record = nullptr;
  const FreeMark* free_marks = nullptr;  // sq_depth marks
  const uint8_t* sq_ring = nullptr;      // in the arena, or the client's own ring memory
  const uint8_t* rq_ring = nullptr;      // likewise; nullptr with an SRQ
};

class NicHosting {
 public:
  // `nic` must run in this process (nic.core() != nullptr) and outlive this.
  explicit NicHosting(Nic& nic);

  // A client's doorbell ring, drained every engine pass; a QPN it names
  // counts only if that QP is `owner`'s.
  void attach_doorbells(DoorbellRing* ring, uint32_t owner);
  void detach_doorbells(uint32_t owner);

  uint32_t alloc_pd();
  void dealloc_pd(uint32_t pd);
  // MRs, QPs and SRQs using the PD (0 for no such PD).
  uint32_t pd_refs(uint32_t pd) const;

  // `addr` is where the NIC reaches the memory (the daemon's mapping),
  // `iova` the address the client names it by. Errors as Nic::reg_mr.
  Result<uint32_t> reg_mr(uint32_t pd, uint8_t* addr, size_t length, uint32_t access, uint64_t iova);
  void dereg_mr(uint32_t key);
  // Where the NIC reaches the MR's first byte; nullptr for no such MR.
  const uint8_t* mr_base(uint32_t key) const;

  // kResourceExhausted when the arena has no room for its record.
  Result<std::unique_ptr<HostedChannel>> create_channel(RecordArena* arena);
  // The channel is going away before its CQs: they stop raising events.
  void detach_channel(const HostedChannel& channel);

  // Errors as Nic::create_cq. `channel` may be nullptr.
  Result<HostedCq> create_cq(const CqInitAttr& attr, HostedChannel* channel, RecordArena* arena, uint32_t owner);
  // QPs using the CQ (0 for no such CQ).
  uint32_t cq_users(uint32_t number) const;
  void destroy_cq(uint32_t number);

  // Errors as Nic::create_srq; attr.ring_memory, when set, is the ring.
  Result<HostedSrq> create_srq(uint32_t pd, const SrqInitAttr& attr, RecordArena* arena, uint32_t owner);
  // QPs attached to the SRQ (0 for no such SRQ).
  uint32_t srq_users(uint32_t number) const;
  void destroy_srq(uint32_t number);

  // `send_cq`, `recv_cq`: CQ numbers; `srq`: an SRQ number, 0 for none.
  // attr's CQ/SRQ pointers are ignored; its ring spans, when set, are the
  // rings. Errors as Nic::create_qp.
  Result<HostedQp> create_qp(uint32_t pd, const QpInitAttr& attr, uint32_t send_cq, uint32_t recv_cq, uint32_t srq,
                             RecordArena* arena, uint32_t owner);
  // Moves the QP to ERROR as a failed modify would (a dead client's QPs
  // stop before they are destroyed).
  void force_error(uint32_t qpn);
  void destroy_qp(uint32_t qpn);
  // Errors as QueuePair::modify; kNotFound for no such QP.
  Status modify_qp(uint32_t qpn, const QpAttr& attr, uint32_t mask);
  // The QP's attributes with its current state; kNotFound for no such QP.
  Result<QpAttr> query_qp(uint32_t qpn) const;
  Result<QpTraffic> qp_traffic(uint32_t qpn) const;

  // The NIC's next asynchronous event, whoever's object raised it.
  std::optional<AsyncEvent> pop_async_event();

 private:
  NicCore* core_;
};

}  // namespace ferry::nic::detail
