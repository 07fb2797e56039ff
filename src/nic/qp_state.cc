// QP state machine: RESET -> INIT -> RTR -> RTS, ERROR from anywhere (with
// flushed completions), RESET from anywhere.
#include <algorithm>
#include <string>

#include "nic_core.h"

namespace ferry::nic::detail {

static bool valid_mtu(uint32_t mtu) {
  return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

Status NicCore::modify_qp(QpCore* qp, const QpAttr& attr, uint32_t mask) {
  if (!(mask & kQpState)) return invalid_argument("modify: kQpState is required");
  const QpState cur = qp->state;
  const QpState to = attr.state;
  auto missing = [&](uint32_t required, const char* names) -> Status {
    if ((mask & required) != required) {
      return invalid_argument(std::string("modify ") + std::string(qp_state_name(cur)) + "->" +
                              std::string(qp_state_name(to)) + " requires " + names);
    }
    return ok_status();
  };
  auto bad_transition = [&]() {
    return invalid_argument("modify: no transition " + std::string(qp_state_name(cur)) + "->" +
                            std::string(qp_state_name(to)));
  };
  switch (to) {
    case QpState::kReset:
      reset_qp_state(qp);
      qp->set_state(QpState::kReset);
      return ok_status();
    case QpState::kError:
      if (cur != QpState::kError) enter_error(qp);
      return ok_status();
    case QpState::kInit:
      if (cur != QpState::kReset && cur != QpState::kInit) return bad_transition();
      if (cur == QpState::kReset) FERRY_RETURN_IF_ERROR(missing(kQpAccessFlags, "kQpAccessFlags"));
      break;
    case QpState::kRtr:
      if (cur != QpState::kInit) return bad_transition();
      FERRY_RETURN_IF_ERROR(missing(kQpPathMtu | kQpDest | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer,
                                    "kQpPathMtu, kQpDest, kQpRqPsn, kQpMaxDestRdAtomic, kQpMinRnrTimer"));
      break;
    case QpState::kRts:
      if (cur != QpState::kRtr && cur != QpState::kRts) return bad_transition();
      if (cur == QpState::kRtr) {
        FERRY_RETURN_IF_ERROR(missing(kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic,
                                      "kQpSqPsn, kQpTimeout, kQpRetryCnt, kQpRnrRetry, kQpMaxRdAtomic"));
      }
      break;
  }
  // Validate before changing anything.
  if ((mask & kQpAccessFlags) && (attr.access_flags & ~kAccessAll)) return invalid_argument("modify: unknown access flags");
  if ((mask & kQpPathMtu) && !valid_mtu(attr.path_mtu)) {
    return invalid_argument("modify: path_mtu must be 256, 512, 1024, 2048 or 4096");
  }
  if (mask & kQpDest) {
    if (Status route = fabric_->check_route(address_, attr.dest_nic); !route.ok()) {
      return invalid_argument("modify: " + route.message());
    }
    if (attr.dest_qp_num == 0 || attr.dest_qp_num > wire::kQpnMask) return invalid_argument("modify: dest_qp_num must be a 24-bit QP number");
  }
  if (mask & (kQpDest | kQpPathMtu)) {
    // Over UDP a packet must fit the interface's MTU (DF is set): refuse a
    // path MTU that would not, rather than clamp it behind the peer's back
    // (both ends must agree on it).
    const uint32_t dest = (mask & kQpDest) ? attr.dest_nic : qp->attr.dest_nic;
    const uint32_t mtu = (mask & kQpPathMtu) ? attr.path_mtu : qp->attr.path_mtu;
    const uint32_t max_mtu = fabric_->max_path_mtu(address_, dest);
    if (mtu > max_mtu) {
      return invalid_argument("modify: path_mtu " + std::to_string(mtu) + " exceeds " + std::to_string(max_mtu) +
                              ", the largest the UDP socket's interface carries (Nic::max_path_mtu)");
    }
  }
  if ((mask & kQpRetryCnt) && attr.retry_cnt > 7) return invalid_argument("modify: retry_cnt must be 0..7");
  if ((mask & kQpRnrRetry) && attr.rnr_retry > 7) return invalid_argument("modify: rnr_retry must be 0..7");
  if ((mask & kQpMinRnrTimer) && attr.min_rnr_timer > 31) return invalid_argument("modify: min_rnr_timer must be 0..31");
  if ((mask & kQpTimeout) && attr.timeout > 31) return invalid_argument("modify: timeout must be 0..31");
  // The responder's READ/ATOMIC resources are sized when it enters RTR.
  if ((mask & kQpMaxDestRdAtomic) && to == QpState::kRts) {
    return invalid_argument("modify: max_dest_rd_atomic is set on the way to RTR, not to RTS");
  }

  QpAttr& a = qp->attr;
  if (mask & kQpAccessFlags) a.access_flags = attr.access_flags;
  if (mask & kQpPathMtu) {
    a.path_mtu = attr.path_mtu;
    qp->mtu = attr.path_mtu;
  }
  if (mask & kQpDest) {
    a.dest_nic = attr.dest_nic;
    a.dest_qp_num = attr.dest_qp_num;
  }
  if (mask & kQpRqPsn) a.rq_psn = attr.rq_psn & wire::kPsnMask;
  if (mask & kQpSqPsn) a.sq_psn = attr.sq_psn & wire::kPsnMask;
  if (mask & kQpMaxDestRdAtomic) a.max_dest_rd_atomic = std::max<uint8_t>(attr.max_dest_rd_atomic, 1);
  if (mask & kQpMinRnrTimer) a.min_rnr_timer = attr.min_rnr_timer;
  if (mask & kQpTimeout) a.timeout = attr.timeout;
  if (mask & kQpRetryCnt) a.retry_cnt = attr.retry_cnt;
  if (mask & kQpRnrRetry) a.rnr_retry = attr.rnr_retry;
  if (mask & kQpMaxRdAtomic) a.max_rd_atomic = std::max<uint8_t>(attr.max_rd_atomic, 1);

  if (to == QpState::kRtr) {
    qp->epsn = a.rq_psn;
    qp->msn = 0;
    qp->nak_outstanding = false;
    qp->in_msg = QpCore::InMsg::kNone;
    qp->atomic_records.assign(a.max_dest_rd_atomic, AtomicRecord{});
    qp->atomic_next = 0;
    qp->responses.assign(2u * a.max_dest_rd_atomic + 1u, ResponseEntry{});  // see QpCore::responses
    drop_responses(qp);
  }
  if (to == QpState::kRts && cur == QpState::kRtr) {
    qp->psn_next = qp->psn_high = qp->una_psn = a.sq_psn;
    qp->retries_left = a.retry_cnt;
    qp->rnr_retries_left = a.rnr_retry;
  }
  qp->set_state(to);
  if (to == QpState::kRts) {
    qp->sq_limit = qp->rec->sq_doorbell.load(std::memory_order_acquire);
    make_ready(qp);
  }
  return ok_status();
}

void NicCore::enter_error(QpCore* qp, bool keep_owed_responses) {
  const bool was_error = qp->state == QpState::kError;
  qp->set_state(QpState::kError);
  // Requester: started WQEs not yet done are flushed; a WQE that already
  // carries its real error status keeps it. Completions stay in order.
  for (uint64_t w = qp->sq_done; w < qp->sq_next; ++w) {
    SendSlot& s = qp->slot(w);
    if (!s.done) {
      s.done = true;
      s.status = WcStatus::kWrFlushErr;
    }
  }
  qp->rd_atomic_out = 0;
  qp->retry_deadline_ns = 0;
  qp->rnr_until_ns = 0;
  advance_send_completions(qp);
  qp->sq_unacked = qp->tx_wqe = qp->sq_next;
  qp->tx_pkt = 0;
  qp->una_psn = qp->psn_next;
  // Responder: a RECV being filled completes with its error (or is flushed).
  if (qp->recv.active) {
    if (qp->recv.status == WcStatus::kSuccess) qp->recv.status = WcStatus::kWrFlushErr;
    complete_recv(qp, WcOpcode::kRecv, qp->recv.offset, false, 0, false);
  }
  qp->in_msg = QpCore::InMsg::kNone;
  qp->ack_pending = false;
  if (!keep_owed_responses) drop_responses(qp);
  // The application may reuse buffers once it sees flush completions; copy
  // any payload still in flight that borrows them.
  fabric_->materialize_from(address_, qp->qpn);
  if (!was_error && qp->srq != nullptr) push_async_event({AsyncEventType::kQpLastWqeReached, qp->qpn});
  if (!qp->flush_needed) {
    qp->flush_needed = true;
    flush_qps_.push_back(qp);
  }
}

bool NicCore::flush_qp(QpCore* qp) {
  qp->flush_needed = false;
  if (qp->state != QpState::kError) return false;
  bool work = false;
  // Every posted send WR not yet started completes with WR_FLUSH_ERR.
  const uint64_t posted = qp->rec->sq_doorbell.load(std::memory_order_acquire);
  while (qp->sq_next < posted) {
    WqeCtrlSeg ctrl;
    std::memcpy(&ctrl, qp->send_slot_ptr(qp->sq_next), sizeof(ctrl));
    WorkCompletion wc;
    wc.wr_id = ctrl.wr_id;
    wc.status = WcStatus::kWrFlushErr;
    wc.opcode = wc_opcode_for(valid_wr_opcode(ctrl.opcode) ? static_cast<WrOpcode>(ctrl.opcode) : WrOpcode::kNop);
    wc.qp_num = qp->qpn;
    wc.wqe_index = static_cast<uint32_t>(qp->sq_next & 0xFFFF);
    ++qp->sq_next;
    complete_send(qp, wc, qp->sq_next);
    work = true;
  }
  if (work) qp->sq_done = qp->sq_unacked = qp->tx_wqe = qp->sq_next;
  // Every posted RECV (own receive queue only; SRQ entries stay in the SRQ).
  if (qp->srq == nullptr) {
    const uint64_t produced = qp->rec->rq_producer.load(std::memory_order_seq_cst);
    while (qp->rq_consumed < produced) {
      RecvWqeHeader hdr;
      std::memcpy(&hdr, qp->recv_slot_ptr(qp->rq_consumed), sizeof(hdr));
      WorkCompletion wc;
      wc.wr_id = hdr.wr_id;
      wc.status = WcStatus::kWrFlushErr;
      wc.opcode = WcOpcode::kRecv;
      wc.qp_num = qp->qpn;
      wc.src_qp = qp->attr.dest_qp_num;
      wc.wqe_index = static_cast<uint32_t>(qp->rq_consumed & 0xFFFF);
      complete(qp->recv_cq, wc);
      ++qp->rq_consumed;
      work = true;
    }
    qp->rec->rq_consumer.store(qp->rq_consumed, std::memory_order_release);
  }
  return work;
}

void NicCore::reset_qp_state(QpCore* qp) {
  fabric_->materialize_from(address_, qp->qpn);
  // Leave the engine work lists; QPs there are skipped once in RESET, but
  // timers and CQ waits are dropped explicitly.
  qp->retry_deadline_ns = 0;
  qp->rnr_until_ns = 0;
  for (auto& cq : cqs_) {
    if (!cq) continue;
    for (QpCore** link = &cq->waiters; *link; link = &(*link)->wait_next) {
      if (*link == qp) {
        *link = qp->wait_next;
        break;
      }
    }
  }
  qp->waiting_cq = false;
  qp->wait_next = nullptr;
  if (qp->rec->engine_watching.load(std::memory_order_relaxed)) {  // the engine is its only writer
    watched_.erase(std::remove(watched_.begin(), watched_.end(), qp), watched_.end());
    qp->rec->engine_watching.store(false, std::memory_order_seq_cst);
  }
  // Queues are emptied without completions (IBTA RESET).
  qp->rec->sq_doorbell.store(0, std::memory_order_relaxed);
  qp->rec->sq_freed.store(0, std::memory_order_relaxed);
  qp->rec->free_marks_tail.store(0, std::memory_order_relaxed);
  qp->rec->free_marks_head.store(0, std::memory_order_relaxed);
  qp->free_marks_head_cache = 0;
  qp->rec->rq_producer.store(0, std::memory_order_relaxed);
  qp->rec->rq_consumer.store(0, std::memory_order_relaxed);
  // (The application's own producer indices reset in QueuePair::modify.)
  qp->sq_limit = qp->sq_enable = qp->sq_next = qp->sq_done = qp->sq_unacked = qp->tx_wqe = 0;
  qp->tx_pkt = 0;
  qp->psn_next = qp->psn_high = qp->una_psn = 0;
  qp->rd_atomic_out = 0;
  qp->gap_requested = false;
  qp->epsn = qp->msn = 0;
  qp->nak_outstanding = false;
  qp->in_msg = QpCore::InMsg::kNone;
  qp->recv = RecvContext{};
  qp->ack_pending = false;
  drop_responses(qp);
  qp->rq_consumed = qp->rq_enable = 0;
  qp->attr = QpAttr{};
  qp->mtu = 4096;
  for (SendSlot& s : qp->slots) s = SendSlot{};
}

}  // namespace ferry::nic::detail
