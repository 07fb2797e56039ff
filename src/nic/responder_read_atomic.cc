// Responder: RDMA READ (responses first/middle/last/only; duplicates
// re-executed), ATOMIC CMP_AND_SWP / FETCH_AND_ADD (results saved so a
// duplicate replays the original value instead of executing twice), FLUSH.
#include <algorithm>

#include "nic_core.h"

namespace ferry::nic::detail {

using wire::Headers;
using wire::psn_add;
using wire::psn_diff;

void NicCore::execute_read(QpCore* qp, const Headers& h, bool duplicate, uint64_t now) {
  const uint32_t psn = h.bth.psn;
  const uint32_t len = h.reth.dma_length;
  uint8_t* host = nullptr;
  if (len > kMaxMessageBytes) {  // IBTA: messages are at most 2^31 bytes
    if (!duplicate) responder_fail(qp, psn, wire::kNakInvalidRequest, now);
    return;
  }
  // A 0-byte READ is legal and needs no valid rkey.
  if (len != 0 && check_remote_access(qp, h.reth.va, h.reth.rkey, len, kAccessRemoteRead, &host) == nullptr) {
    if (duplicate) return;  // a duplicate cannot turn into a new error
    responder_fail(qp, psn, wire::kNakRemoteAccessError, now);
    return;
  }
  const uint32_t npkts = len == 0 ? 1 : static_cast<uint32_t>((uint64_t{len} + qp->mtu - 1) / qp->mtu);
  if (!qp->rd_atomic_room(duplicate)) {
    // Out of responder resources: more READ/ATOMIC outstanding than agreed.
    if (!duplicate) responder_fail(qp, psn, wire::kNakInvalidRequest, now);
    return;
  }
  if (duplicate) {
    // Must lie inside what was already executed.
    if (psn_diff(psn_add(psn, npkts), qp->epsn) > 0) return;
    counters_.read_replays.inc();
  } else {
    qp->epsn = psn_add(psn, npkts);
    qp->msn = psn_add(qp->msn, 1);
    qp->nak_outstanding = false;
  }
  // PCIe ordering: the READ is served after every earlier write of this QP
  // was placed (the idiom gFLUSH and persistent ACKs rely on).
  memory_->order_before_read(qp->qpn);
  ResponseEntry e;
  e.kind = ResponseEntry::Kind::kRead;
  e.psn = psn;
  e.msn = qp->msn;
  e.data = host;
  e.rkey = len != 0 ? h.reth.rkey : 0;
  e.length = len;
  e.npkts = npkts;
  e.replay = duplicate;
  respond(qp, e, now);
}

void NicCore::send_atomic_ack(QpCore* qp, uint32_t psn, uint64_t original, bool replay, uint64_t now) {
  ResponseEntry e;
  e.kind = ResponseEntry::Kind::kAtomicAck;
  e.psn = psn;
  e.msn = qp->msn;
  e.original = original;
  e.replay = replay;
  respond(qp, e, now);
}

void NicCore::execute_atomic(QpCore* qp, const Headers& h, uint64_t now) {
  const uint32_t psn = h.bth.psn;
  if (h.atomic.va & 7) {
    responder_fail(qp, psn, wire::kNakInvalidRequest, now);  // misaligned target
    return;
  }
  uint8_t* host = nullptr;
  if (check_remote_access(qp, h.atomic.va, h.atomic.rkey, 8, kAccessRemoteAtomic, &host) == nullptr) {
    responder_fail(qp, psn, wire::kNakRemoteAccessError, now);
    return;
  }
  if (!qp->rd_atomic_room(false)) {
    responder_fail(qp, psn, wire::kNakInvalidRequest, now);  // out of responder resources
    return;
  }
  uint64_t* word = reinterpret_cast<uint64_t*>(host);
  const uint64_t original = h.bth.opcode == wire::kCompareSwap
                                ? memory_->atomic_compare_swap(qp->qpn, word, h.atomic.compare, h.atomic.swap_add)
                                : memory_->atomic_fetch_add(qp->qpn, word, h.atomic.swap_add);
  AtomicRecord& rec = qp->atomic_records[qp->atomic_next++ % qp->atomic_records.size()];
  rec = AtomicRecord{true, psn, original};
  qp->epsn = psn_add(psn, 1);
  qp->msn = psn_add(qp->msn, 1);
  qp->nak_outstanding = false;
  send_atomic_ack(qp, psn, original, false, now);
}

void NicCore::replay_atomic(QpCore* qp, const Headers& h, uint64_t now) {
  for (const AtomicRecord& rec : qp->atomic_records) {
    if (rec.valid && rec.psn == h.bth.psn) {
      if (!qp->rd_atomic_room(true)) return;  // no room now; it will be resent
      counters_.atomic_replays.inc();
      send_atomic_ack(qp, rec.psn, rec.original, true, now);
      return;
    }
  }
  // Older than the saved window (max_dest_rd_atomic): cannot be answered.
}

void NicCore::execute_flush(QpCore* qp, const Headers& h, bool duplicate, uint64_t now) {
  const uint32_t psn = h.bth.psn;
  const uint8_t placement = h.feth.placement;
  const uint8_t selectivity = h.feth.selectivity;
  if ((placement & ~(wire::kPlacementGlobalVisibility | wire::kPlacementPersistence)) != 0 || placement == 0 ||
      selectivity > wire::kSelectMemoryRegion) {
    if (!duplicate) responder_fail(qp, psn, wire::kNakInvalidRequest, now);
    return;
  }
  const bool persistent = (placement & wire::kPlacementPersistence) != 0;
  const uint32_t access = (persistent ? kAccessFlushPersistent : 0u) |
                          ((placement & wire::kPlacementGlobalVisibility) ? kAccessFlushGlobal : 0u);
  // The QP must allow, and the MR grant, every placement type requested.
  // Unlike READ and WRITE, a FLUSH needs a valid rkey even for length 0.
  const MrEntry* mr = find_remote_mr(qp, h.reth.rkey, access);
  uint8_t* host = nullptr;
  uint64_t len = h.reth.dma_length;
  bool allowed = mr != nullptr;
  if (allowed && selectivity == wire::kSelectMemoryRegion) {
    host = mr->base;  // the whole region; no range check
    len = mr->length;
  } else if (allowed && len != 0) {
    allowed = mr->resolve(h.reth.va, len, &host);
  }
  if (!allowed) {
    if (!duplicate) responder_fail(qp, psn, wire::kNakRemoteAccessError, now);
    return;
  }
  if (!qp->rd_atomic_room(duplicate)) {
    if (!duplicate) responder_fail(qp, psn, wire::kNakInvalidRequest, now);  // out of responder resources
    return;
  }
  // A FLUSH is idempotent: a duplicate is executed again and answered again.
  memory_->flush(qp->qpn, host, len, persistent);
  if (!duplicate) {
    qp->epsn = psn_add(psn, 1);
    qp->msn = psn_add(qp->msn, 1);
    qp->nak_outstanding = false;
  }
  ResponseEntry e;  // IBTA 1.5 / rxe: acknowledged by an empty READ RESPONSE ONLY
  e.kind = ResponseEntry::Kind::kRead;
  e.psn = psn;
  e.msn = qp->msn;
  e.npkts = 1;
  e.replay = duplicate;
  respond(qp, e, now);
}

}  // namespace ferry::nic::detail
