// Requester, receive side: ACKs (cumulative), NAKs (sequence, RNR, errors),
// READ responses and ATOMIC acknowledgements; go-back-N retransmission,
// the local ACK timeout and RNR timers; in-order send completions.
#include <algorithm>

#include "nic_core.h"

namespace ferry::nic::detail {

using wire::Headers;
using wire::psn_add;
using wire::psn_diff;

// READ and FLUSH are answered by READ response packets (FLUSH: one, empty).
static bool is_read(const SendSlot& s) { return s.opcode == WrOpcode::kRdmaRead || s.opcode == WrOpcode::kFlush; }
static bool is_atomic(const SendSlot& s) {
  return s.opcode == WrOpcode::kAtomicCmpAndSwp || s.opcode == WrOpcode::kAtomicFetchAndAdd;
}

void NicCore::update_una(QpCore* qp, uint32_t acked_through, bool have_ack) {
  while (qp->sq_unacked < qp->sq_next) {
    const SendSlot& s = qp->slot(qp->sq_unacked);
    if (!s.local && !s.done) break;
    ++qp->sq_unacked;
  }
  if (qp->sq_unacked == qp->sq_next) {
    qp->una_psn = qp->psn_next;
    return;
  }
  const SendSlot& s = qp->slot(qp->sq_unacked);
  uint32_t una = s.first_psn;
  if (is_read(s)) {
    una = psn_add(s.first_psn, s.resp_pkts);
  } else if (have_ack && !is_atomic(s)) {
    // A coalesced ACK may cover part of a multi-packet message.
    const uint32_t next = psn_add(acked_through, 1);
    if (psn_diff(next, s.first_psn) > 0 && psn_diff(next, psn_add(s.first_psn, s.npkts)) < 0) una = next;
  }
  if (psn_diff(una, qp->una_psn) > 0) qp->una_psn = una;
}

bool NicCore::process_ack(QpCore* qp, uint32_t psn, uint64_t now) {
  // An ACK for PSN p acknowledges every request up to and including p.
  if (psn_diff(psn, qp->psn_next) >= 0) return false;  // acknowledges something never sent
  if (psn_diff(psn, qp->una_psn) < 0) return false;    // older than what we already know
  bool resend = false;
  uint32_t resend_psn = 0;
  while (qp->sq_unacked < qp->sq_next) {
    SendSlot& s = qp->slot(qp->sq_unacked);
    if (s.local || s.done) {
      ++qp->sq_unacked;
      continue;
    }
    if (is_read(s)) {
      // The responder is past this READ but its responses did not all arrive:
      // they were lost; ask again for the missing part.
      const uint32_t need = psn_add(s.first_psn, s.resp_pkts);
      if (psn_diff(psn, need) >= 0) {
        resend = true;
        resend_psn = need;
      }
      break;
    }
    if (is_atomic(s)) {
      if (psn_diff(psn, s.first_psn) >= 0) {
        resend = true;  // the responder replays the saved result
        resend_psn = s.first_psn;
      }
      break;
    }
    const uint32_t last = psn_add(s.first_psn, s.npkts - 1);
    if (psn_diff(psn, last) < 0) break;
    s.done = true;
    ++qp->sq_unacked;
  }
  const uint32_t old_una = qp->una_psn;
  update_una(qp, psn, true);
  const bool progress = psn_diff(qp->una_psn, old_una) > 0;
  if (progress) after_progress(qp, now);
  if (resend) request_missing(qp, resend_psn);
  return progress;
}

void NicCore::request_missing(QpCore* qp, uint32_t psn) {
  // Every packet past a gap shows it again; asking again for each would
  // flood the responder with re-requests, each answered in full (a livelock
  // without loss of time). Once per gap; the retry timer covers a re-request
  // that is itself lost.
  if (qp->gap_requested && qp->gap_psn == psn) return;
  qp->gap_requested = true;
  qp->gap_psn = psn;
  go_back_to(qp, psn);
}

void NicCore::after_progress(QpCore* qp, uint64_t now) {
  if (qp->gap_requested && psn_diff(qp->una_psn, qp->gap_psn) > 0) qp->gap_requested = false;  // filled
  qp->retries_left = qp->attr.retry_cnt;
  qp->rnr_retries_left = qp->attr.rnr_retry;
  const uint64_t timeout = ack_timeout_ns(qp->attr.timeout);
  if (qp->una_psn != qp->psn_next && timeout != 0) {
    qp->retry_deadline_ns = now + timeout;
    arm_timer_at(qp, qp->retry_deadline_ns);
  } else {
    qp->retry_deadline_ns = 0;
  }
  advance_send_completions(qp);
  make_ready(qp);  // window, rd_atomic slots or ring space may have opened
}

void NicCore::go_back_to(QpCore* qp, uint32_t psn) {
  // Go-back-N: everything before `psn` is acknowledged, so the transmit
  // cursor moves to the packet carrying `psn` and resends from there.
  for (uint64_t w = qp->sq_unacked; w < qp->sq_next; ++w) {
    const SendSlot& s = qp->slot(w);
    if (s.local || s.done) continue;
    const int32_t off = psn_diff(psn, s.first_psn);
    if (off >= 0 && off < static_cast<int32_t>(s.npkts)) {
      qp->tx_wqe = w;
      // READ resends one request for what is missing; ATOMIC/FLUSH are one packet.
      qp->tx_pkt = s.rd_atomic ? 0 : static_cast<uint32_t>(off);
      make_ready(qp);
      return;
    }
  }
}

void NicCore::on_response(QpCore* qp, const Headers& h, const uint8_t* payload, uint32_t len, uint64_t now) {
  if (qp->state != QpState::kRts) {
    counters_.rx_unknown_qp.inc();
    return;
  }
  const uint8_t op = h.bth.opcode;
  const uint32_t psn = h.bth.psn;
  if (op == wire::kAcknowledge) {
    if (wire::syndrome_type(h.aeth.syndrome) == wire::kAckTypeAck) {
      process_ack(qp, psn, now);
    } else {
      on_nak(qp, psn, h.aeth.syndrome, now);
    }
    return;
  }
  // READ responses and ATOMIC ACKs acknowledge everything before them.
  process_ack(qp, psn_add(psn, wire::kPsnMask), now);
  if (qp->state != QpState::kRts) return;
  update_una(qp, 0, false);
  if (qp->sq_unacked == qp->sq_next) return;  // stale
  SendSlot& s = qp->slot(qp->sq_unacked);
  const uint64_t index = qp->sq_unacked;

  if (op == wire::kAtomicAcknowledge) {
    if (!is_atomic(s) || s.first_psn != psn) return;  // duplicate or stale
    if (!segs_live(qp->sges_of(index), s.nsge)) return fail_wqe_at_psn(qp, psn, WcStatus::kLocProtErr);
    const uint64_t original = h.atomic_ack_orig;
    memory_->dma_write(qp->qpn, qp->sges_of(index)[0].ptr, reinterpret_cast<const uint8_t*>(&original),
                       sizeof(original));
    s.done = true;
    --qp->rd_atomic_out;
    update_una(qp, 0, false);
    after_progress(qp, now);
    return;
  }

  // READ response first/middle/last/only.
  const wire::OpcodeInfo& info = wire::opcode_info(op);
  // Out of order (a packet before it was lost): dropped; the gap was
  // re-requested by the implicit ACK above.
  if (!is_read(s) || psn != psn_add(s.first_psn, s.resp_pkts)) return;
  const bool expect_first = s.resp_pkts == 0;
  const bool expect_last = s.resp_pkts + 1 == s.npkts;
  // The answer to a re-request that resumed mid-READ is a READ response of
  // its own: it starts with FIRST (or ONLY) at the PSN asked for, while the
  // original stream, if it still arrives, continues with MIDDLE/LAST there.
  const bool first_ok = info.first ? expect_first || psn == s.request_psn : !expect_first;
  // A FLUSH's answer is one empty READ RESPONSE ONLY; its length is the range flushed.
  const uint32_t remaining = (s.opcode == WrOpcode::kRdmaRead ? s.length : 0) - s.resp_bytes;
  const bool ok = first_ok && info.last == expect_last && (expect_last ? len == remaining : len == qp->mtu);
  if (!ok) {
    counters_.rx_malformed.inc();
    return;
  }
  // Scatter into the local SGEs at offset resp_bytes.
  const LocalSeg* segs = qp->sges_of(index);
  if (!segs_live(segs, s.nsge)) return fail_wqe_at_psn(qp, s.first_psn, WcStatus::kLocProtErr);
  uint32_t offset = s.resp_bytes;
  uint32_t placed = 0;
  for (uint8_t i = 0; i < s.nsge && placed < len; ++i) {
    if (offset >= segs[i].length) {
      offset -= segs[i].length;
      continue;
    }
    const uint32_t n = std::min(segs[i].length - offset, len - placed);
    memory_->dma_write(qp->qpn, segs[i].ptr + offset, payload + placed, n);
    placed += n;
    offset = 0;
  }
  ++s.resp_pkts;
  s.resp_bytes += len;
  if (expect_last) {
    s.done = true;
    --qp->rd_atomic_out;
  }
  const uint32_t old_una = qp->una_psn;
  update_una(qp, 0, false);
  if (psn_diff(qp->una_psn, old_una) > 0) after_progress(qp, now);
}

void NicCore::on_nak(QpCore* qp, uint32_t psn, uint8_t syndrome, uint64_t now) {
  // A NAK for PSN p implicitly acknowledges everything before p.
  process_ack(qp, psn_add(psn, wire::kPsnMask), now);
  if (qp->state != QpState::kRts) return;
  if (psn_diff(psn, qp->una_psn) < 0 || psn_diff(psn, qp->psn_next) >= 0) return;  // stale
  const wire::AckType type = wire::syndrome_type(syndrome);
  const uint8_t value = wire::syndrome_value(syndrome);
  if (type == wire::kAckTypeRnrNak) {
    counters_.rnr_retries.inc();
    if (qp->attr.rnr_retry != 7) {
      if (qp->rnr_retries_left == 0) {
        fail_wqe_at_psn(qp, psn, WcStatus::kRnrRetryExcErr);
        return;
      }
      --qp->rnr_retries_left;
    }
    qp->rnr_until_ns = now + rnr_timer_ns(value);
    qp->retry_deadline_ns = 0;  // the RNR wait replaces the ACK timeout
    arm_timer_at(qp, qp->rnr_until_ns);
    go_back_to(qp, psn);  // resent when the RNR timer expires
    return;
  }
  if (type != wire::kAckTypeNak) return;  // reserved syndrome type: ignore
  switch (value) {
    case wire::kNakPsnSequenceError:
      go_back_to(qp, psn);
      return;
    case wire::kNakInvalidRequest:
      fail_wqe_at_psn(qp, psn, WcStatus::kRemInvReqErr);
      return;
    case wire::kNakRemoteAccessError:
      fail_wqe_at_psn(qp, psn, WcStatus::kRemAccessErr);
      return;
    default:
      fail_wqe_at_psn(qp, psn, WcStatus::kRemOpErr);
      return;
  }
}

void NicCore::fail_wqe_at_psn(QpCore* qp, uint32_t psn, WcStatus status) {
  for (uint64_t w = qp->sq_unacked; w < qp->sq_next; ++w) {
    SendSlot& s = qp->slot(w);
    if (s.local || s.done) continue;
    const int32_t off = psn_diff(psn, s.first_psn);
    if (off >= 0 && off < static_cast<int32_t>(s.npkts)) {
      s.status = status;
      s.done = true;
      break;
    }
  }
  enter_error(qp);
}

void NicCore::complete_send(QpCore* qp, const WorkCompletion& wc, uint64_t freed_to) {
  CqCore* cq = qp->send_cq;
  // The slots are marked free before the completion is visible: a program
  // that polls it and posts at once must find them free (verbs: a polled
  // completion frees its WQE's slot and those before it). Marked after, an
  // engine preempted between the two made that post fail "send queue full"
  // (perftest's ib_write_bw under load).
  if (cq->count_only) {
    qp->rec->sq_freed.store(freed_to, std::memory_order_release);
    complete(cq, wc);
    return;
  }
  if (!cq_accepts(cq)) {
    complete(cq, wc);  // the CQ is in error or overruns: no CQE, nothing to poll, no mark
    return;
  }
  const uint64_t size = qp->free_marks_size;
  uint64_t tail = qp->rec->free_marks_tail.load(std::memory_order_relaxed);  // the engine is its only writer
  bool room = tail - qp->free_marks_head_cache < size;
  if (!room) {
    qp->free_marks_head_cache = qp->rec->free_marks_head.load(std::memory_order_acquire);
    // Marks name distinct posted slots not yet seen free, at most sq_depth of
    // them; more means the NIC ran a managed queue past its posts (enables
    // re-running published slots), which post_send reports on its own.
    room = tail - qp->free_marks_head_cache < size;
  }
  if (room) {
    qp->free_marks[tail % size] = FreeMark{cq->produced, freed_to};
    qp->rec->free_marks_tail.store(tail + 1, std::memory_order_release);
  }
  complete(cq, wc);
}

void NicCore::advance_send_completions(QpCore* qp) {
  while (qp->sq_done < qp->sq_next) {
    const SendSlot& s = qp->slot(qp->sq_done);
    if (!s.done) break;
    const bool signaled = s.status != WcStatus::kSuccess || qp->sq_sig_all || (s.flags & kSendSignaled);
    const uint64_t index = qp->sq_done++;
    if (!signaled) continue;  // its slot frees with the next signaled completion
    WorkCompletion wc;
    wc.wr_id = s.wr_id;
    wc.status = s.status;
    wc.opcode = wc_opcode_for(s.opcode);
    wc.byte_len = s.length;
    wc.qp_num = qp->qpn;
    wc.wqe_index = static_cast<uint32_t>(index & 0xFFFF);
    complete_send(qp, wc, qp->sq_done);
  }
  if (qp->sq_unacked < qp->sq_done) qp->sq_unacked = qp->sq_done;
  if (qp->tx_wqe < qp->sq_done) {
    qp->tx_wqe = qp->sq_done;
    qp->tx_pkt = 0;
  }
}

void NicCore::arm_retry_timer(QpCore* qp, uint64_t now) {
  if (qp->retry_deadline_ns != 0) return;
  const uint64_t timeout = ack_timeout_ns(qp->attr.timeout);
  if (timeout == 0) return;
  qp->retry_deadline_ns = now + timeout;
  arm_timer_at(qp, qp->retry_deadline_ns);
}

void NicCore::arm_timer_at(QpCore* qp, uint64_t deadline) {
  if (!qp->in_timer_list) {
    qp->in_timer_list = true;
    timer_qps_.push_back(qp);
  }
  next_timer_ns_ = std::min(next_timer_ns_, deadline);
}

bool NicCore::run_timers(uint64_t now) {
  if (now < next_timer_ns_) return false;
  bool work = false;
  uint64_t next = UINT64_MAX;
  size_t i = 0;
  while (i < timer_qps_.size()) {
    QpCore* qp = timer_qps_[i];
    if ((qp->rnr_until_ns != 0 && now >= qp->rnr_until_ns) ||
        (qp->retry_deadline_ns != 0 && now >= qp->retry_deadline_ns)) {
      on_qp_timer(qp, now);
      work = true;
    }
    uint64_t d = UINT64_MAX;
    if (qp->rnr_until_ns != 0) d = std::min(d, qp->rnr_until_ns);
    if (qp->retry_deadline_ns != 0) d = std::min(d, qp->retry_deadline_ns);
    if (d == UINT64_MAX) {
      qp->in_timer_list = false;
      timer_qps_[i] = timer_qps_.back();
      timer_qps_.pop_back();
      continue;
    }
    next = std::min(next, d);
    ++i;
  }
  next_timer_ns_ = next;
  return work;
}

void NicCore::on_qp_timer(QpCore* qp, uint64_t now) {
  if (qp->rnr_until_ns != 0 && now >= qp->rnr_until_ns) {
    qp->rnr_until_ns = 0;
    make_ready(qp);
  }
  if (qp->retry_deadline_ns == 0 || now < qp->retry_deadline_ns) return;
  qp->retry_deadline_ns = 0;
  if (qp->state != QpState::kRts) return;
  update_una(qp, 0, false);
  if (qp->una_psn == qp->psn_next) return;  // nothing outstanding
  counters_.ack_timeouts.inc();
  if (qp->retries_left == 0) {
    fail_wqe_at_psn(qp, qp->una_psn, WcStatus::kRetryExcErr);
    return;
  }
  --qp->retries_left;
  qp->gap_requested = false;  // the timer asks again; a gap seen after it may too
  go_back_to(qp, qp->una_psn);
}

}  // namespace ferry::nic::detail
