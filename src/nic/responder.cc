// Responder: PSN checking (in order, exactly once), SEND and WRITE
// execution, RECV/SRQ consumption, coalesced ACKs and error NAKs.
#include <algorithm>

#include "nic_core.h"

namespace ferry::nic::detail {

using wire::Headers;
using wire::psn_add;
using wire::psn_diff;

void NicCore::schedule_ack(QpCore* qp, uint32_t psn) {
  if (!qp->ack_pending || psn_diff(psn, qp->ack_psn) > 0) qp->ack_psn = psn;
  qp->ack_pending = true;
  if (!qp->in_ack_list) {
    qp->in_ack_list = true;
    qp->ack_next = ack_head_;
    ack_head_ = qp;
  }
}

void NicCore::end_rx_batch(uint64_t now) {
  // Coalesced ACKs: one per QP per batch of received packets.
  while (ack_head_ != nullptr) {
    QpCore* qp = ack_head_;
    ack_head_ = qp->ack_next;
    qp->in_ack_list = false;
    qp->ack_next = nullptr;
    if (qp->ack_pending) send_ack(qp, qp->ack_psn, wire::make_syndrome(wire::kAckTypeAck, wire::kAckNoCredit), now);
  }
}

void NicCore::send_ack(QpCore* qp, uint32_t psn, uint8_t syndrome, uint64_t now) {
  ResponseEntry e;
  e.kind = ResponseEntry::Kind::kAck;
  e.psn = psn;
  e.syndrome = syndrome;
  e.msn = qp->msn;
  respond(qp, e, now);
}

void NicCore::responder_fail(QpCore* qp, uint32_t psn, wire::NakCode code, uint64_t now) {
  // Everything still queued answers requests executed before this one (a
  // READ held back by flow control, say): it is still owed and goes out
  // first, then the NAK, in PSN order. The QP enters ERROR now and takes no
  // further requests; its output queue drains on.
  ResponseEntry e;
  e.kind = ResponseEntry::Kind::kAck;
  e.psn = psn;
  e.syndrome = wire::make_syndrome(wire::kAckTypeNak, code);
  e.msn = qp->msn;
  respond(qp, e, now);
  counters_.error_naks_sent.inc();
  enter_error(qp, /*keep_owed_responses=*/true);
}

const MrEntry* NicCore::find_remote_mr(const QpCore* qp, uint32_t rkey, uint32_t access) const {
  if ((qp->attr.access_flags & access) != access) return nullptr;  // the QP does not allow this remote access
  const MrEntry* mr = find_mr(rkey);
  if (mr == nullptr || mr->pd != qp->pd || (mr->access & access) != access) return nullptr;
  return mr;
}

const MrEntry* NicCore::check_remote_access(QpCore* qp, uint64_t va, uint32_t rkey, uint64_t len, uint32_t access,
                                            uint8_t** host) {
  const MrEntry* mr = find_remote_mr(qp, rkey, access);
  return mr != nullptr && mr->resolve(va, len, host) ? mr : nullptr;
}

// Multi-packet SRQ: reserve strides for a message in the buffer being filled,
// or release that buffer (a filler completion) and take the next WQE. The
// strides are the message's from its first packet on (JUNE BERRY's rule 1:
// positions are given in arrival order, before the ACK).
bool NicCore::take_mp_strides(QpCore* qp, SrqCore* srq, int64_t first_len) {
  RecvContext& r = qp->recv;
  const uint32_t k = srq->mp_stride_bytes;
  // A message takes at least one stride; a multi-packet one is given room
  // for the largest message, since its first packet does not say its length.
  uint32_t need = first_len >= 0
                            ? std::max<uint32_t>(1, static_cast<uint32_t>((static_cast<uint64_t>(first_len) + k - 1) / k))
                            : srq->mp_max_message_strides;
  if (srq->mp_active && srq->mp_next_stride + need > srq->mp_strides) {
    // It does not fit what is left: the buffer is done; say so now.
    WorkCompletion wc;
    wc.wr_id = srq->mp_wr_id;
    wc.status = srq->mp_status;
    wc.opcode = WcOpcode::kRecv;
    wc.qp_num = qp->qpn;
    wc.src_qp = qp->attr.dest_qp_num;
    wc.wqe_index = static_cast<uint32_t>(srq->mp_index & 0xFFFF);
    wc.stride_index = static_cast<uint16_t>(srq->mp_next_stride);
    wc.mp_strides_consumed = static_cast<uint16_t>(srq->mp_strides - srq->mp_next_stride);
    wc.mp_buffer_done = true;
    wc.mp_filler = true;
    complete(qp->recv_cq, wc);
    srq->mp_active = false;
  }
  if (!srq->mp_active) {
    const uint64_t producer = srq->rec->producer.load(std::memory_order_acquire);
    const uint64_t index = srq->rec->consumer.load(std::memory_order_relaxed);  // engine is the only writer
    if (index >= producer) return false;
    const uint8_t* slot = srq->ring + (index & (srq->depth - 1)) * srq->stride;
    DecodedRecvWqe wqe;
    const WqeError err = decode_recv_wqe(std::span<const uint8_t>(slot, srq->stride), srq->max_sge, &wqe);
    srq->rec->consumer.store(index + 1, std::memory_order_release);
    counters_.modeled_recv_wqe_dmas.inc();  // one WQE fetch serves every message of the buffer
    const uint32_t limit = srq->rec->limit.load(std::memory_order_acquire);
    if (limit != 0 && producer - (index + 1) < limit && srq->rec->limit.exchange(0, std::memory_order_acq_rel) != 0) {
      push_async_event({AsyncEventType::kSrqLimitReached, srq->number});
    }
    srq->mp_active = true;
    srq->mp_index = index;
    srq->mp_wr_id = wqe.wr_id;
    srq->mp_next_stride = 0;
    srq->mp_base = nullptr;
    srq->mp_status = WcStatus::kSuccess;
    if (err != WqeError::kNone || wqe.num_sge != 1) {
      srq->mp_status = WcStatus::kLocQpOpErr;
    } else {
      // The buffer is one segment of exactly strides x stride bytes (or more).
      const WqeDataSeg seg = load_data_seg(wqe.sges);
      const MrEntry* mr = find_mr(seg.lkey);
      uint8_t* host = nullptr;
      if (seg.length < srq->mp_buffer_bytes() || mr == nullptr || mr->pd != srq->pd ||
          !(mr->access & kAccessLocalWrite) || !mr->resolve(seg.addr, srq->mp_buffer_bytes(), &host)) {
        srq->mp_status = WcStatus::kLocProtErr;
      } else {
        srq->mp_base = host;
      }
    }
  }
  // A message larger than a whole buffer gets what the buffer has: placing
  // it overflows that, and it fails with LOC_LEN_ERR as on any RECV.
  need = std::min(need, srq->mp_strides - srq->mp_next_stride);
  r.active = true;
  r.mp = true;
  r.wr_id = srq->mp_wr_id;
  r.wqe_index = static_cast<uint32_t>(srq->mp_index & 0xFFFF);
  r.stride = static_cast<uint16_t>(srq->mp_next_stride);
  r.strides = need;
  r.offset = 0;
  r.status = srq->mp_status;
  r.nsge = 0;
  r.capacity = 0;
  if (r.status == WcStatus::kSuccess) {
    r.sges[0] = LocalSeg{srq->mp_base + static_cast<size_t>(r.stride) * k, need * k};
    r.nsge = 1;
    r.capacity = need * k;
  }
  srq->mp_next_stride += need;
  r.mp_bad_buffer = r.status != WcStatus::kSuccess;
  if (r.mp_bad_buffer) srq->mp_active = false;  // a bad buffer serves no further message
  return true;
}

// A multi-packet message that used fewer strides than it was given returns
// the rest, if nothing was placed after it meanwhile.
void NicCore::release_unused_strides(QpCore* qp) {
  RecvContext& r = qp->recv;
  SrqCore* srq = qp->srq;
  if (!r.mp || srq == nullptr || !srq->mp_active || (srq->mp_index & 0xFFFF) != r.wqe_index) return;
  const uint32_t used = std::max<uint32_t>(1, (r.offset + srq->mp_stride_bytes - 1) / srq->mp_stride_bytes);
  if (used < r.strides && srq->mp_next_stride == r.stride + r.strides) {
    srq->mp_next_stride = r.stride + used;
    r.strides = used;
  }
}

// The RECV WQE is read here, when a message starts to use it.
bool NicCore::take_recv(QpCore* qp, int64_t first_len) {
  RecvContext& r = qp->recv;
  r.mp = false;
  if (qp->srq != nullptr && qp->srq->mp_strides != 0) return take_mp_strides(qp, qp->srq, first_len);
  const uint8_t* slot;
  uint32_t stride;
  uint32_t max_sge;
  uint32_t pd;
  uint64_t index;
  DecodedRecvWqe wqe;
  WqeError err;
  if (qp->srq != nullptr) {
    SrqCore* srq = qp->srq;
    const uint64_t producer = srq->rec->producer.load(std::memory_order_acquire);
    index = srq->rec->consumer.load(std::memory_order_relaxed);  // engine is the only writer
    if (index >= producer) return false;
    slot = srq->ring + (index & (srq->depth - 1)) * srq->stride;
    stride = srq->stride;
    max_sge = srq->max_sge;
    pd = srq->pd;
    err = decode_recv_wqe(std::span<const uint8_t>(slot, stride), max_sge, &wqe);
    srq->rec->consumer.store(index + 1, std::memory_order_release);
    counters_.modeled_recv_wqe_dmas.inc();  // list-based SRQ WQEs are fetched one at a time (pointer chasing)
    const uint32_t limit = srq->rec->limit.load(std::memory_order_acquire);
    if (limit != 0 && producer - (index + 1) < limit && srq->rec->limit.exchange(0, std::memory_order_acq_rel) != 0) {
      push_async_event({AsyncEventType::kSrqLimitReached, srq->number});
    }
  } else {
    const uint64_t producer = qp->rec->rq_producer.load(std::memory_order_acquire);
    // A managed RQ is owned by its enables, like a managed SQ: RECV_ENABLE is
    // the ownership grant, so slots are re-used lap after lap without posts.
    const uint64_t limit = qp->managed_recv ? qp->rq_enable : producer;
    if (qp->rq_consumed >= limit) return false;
    index = qp->rq_consumed;
    slot = qp->recv_slot_ptr(index);
    stride = qp->rq_stride;
    max_sge = qp->cap.max_recv_sge;
    pd = qp->pd;
    err = decode_recv_wqe(std::span<const uint8_t>(slot, stride), max_sge, &wqe);
    // ... but an enable only exposes RECVs the owner has posted: a slot that
    // never held one is no RECV (the message is RNR-NAKed until a post).
    if (err == WqeError::kEmpty && qp->managed_recv) return false;
    // An array-based RQ is prefetched several contiguous WQEs per DMA.
    if (index % std::max<uint32_t>(1, options_.resource_model.rq_prefetch_wqes) == 0) {
      counters_.modeled_recv_wqe_dmas.inc();
    }
    ++qp->rq_consumed;
    qp->rec->rq_consumer.store(qp->rq_consumed, std::memory_order_release);
  }
  r.active = true;
  r.wr_id = wqe.wr_id;
  r.wqe_index = static_cast<uint32_t>(index & 0xFFFF);
  r.offset = 0;
  r.capacity = 0;
  r.nsge = 0;
  r.status = WcStatus::kSuccess;
  if (err != WqeError::kNone) {
    r.status = WcStatus::kLocQpOpErr;
    return true;
  }
  uint64_t capacity = 0;
  for (uint16_t i = 0; i < wqe.num_sge; ++i) {
    const WqeDataSeg seg = load_data_seg(wqe.sges + static_cast<size_t>(i) * sizeof(WqeDataSeg));
    if (seg.length == 0) continue;
    const MrEntry* mr = find_mr(seg.lkey);
    uint8_t* host = nullptr;
    if (mr == nullptr || mr->pd != pd || !(mr->access & kAccessLocalWrite) ||
        !mr->resolve(seg.addr, seg.length, &host)) {
      r.status = WcStatus::kLocProtErr;
      return true;
    }
    r.sges[r.nsge++] = LocalSeg{host, seg.length, seg.lkey};
    capacity += seg.length;
  }
  r.capacity = static_cast<uint32_t>(std::min<uint64_t>(capacity, UINT32_MAX));
  return true;
}

bool NicCore::place_recv_payload(QpCore* qp, const uint8_t* payload, uint32_t len) {
  RecvContext& r = qp->recv;
  if (len > r.capacity - r.offset) return false;
  uint32_t offset = r.offset;
  uint32_t placed = 0;
  for (uint8_t i = 0; i < r.nsge && placed < len; ++i) {
    if (offset >= r.sges[i].length) {
      offset -= r.sges[i].length;
      continue;
    }
    const uint32_t n = std::min(r.sges[i].length - offset, len - placed);
    memory_->dma_write(qp->qpn, r.sges[i].ptr + offset, payload + placed, n);
    placed += n;
    offset = 0;
  }
  r.offset += len;
  return true;
}

void NicCore::complete_recv(QpCore* qp, WcOpcode opcode, uint32_t byte_len, bool has_imm, uint32_t imm,
                            bool solicited) {
  WorkCompletion wc;
  wc.wr_id = qp->recv.wr_id;
  wc.status = qp->recv.status;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.has_imm = has_imm;
  wc.imm_data = imm;
  wc.solicited = solicited;
  wc.qp_num = qp->qpn;
  wc.src_qp = qp->attr.dest_qp_num;
  wc.wqe_index = qp->recv.wqe_index;
  if (qp->recv.mp) {
    release_unused_strides(qp);
    SrqCore* srq = qp->srq;
    wc.stride_index = qp->recv.stride;
    wc.mp_strides_consumed = static_cast<uint16_t>(qp->recv.strides);
    // This message took the buffer's last strides: nothing more lands there.
    wc.mp_buffer_done = qp->recv.mp_bad_buffer ||
                        (srq->mp_active && (srq->mp_index & 0xFFFF) == qp->recv.wqe_index &&
                         srq->mp_next_stride == srq->mp_strides && qp->recv.stride + qp->recv.strides == srq->mp_strides);
    if (wc.mp_buffer_done) srq->mp_active = false;
  }
  qp->recv.active = false;
  complete(qp->recv_cq, wc);
}

void NicCore::on_request(QpCore* qp, const Headers& h, const uint8_t* payload, uint32_t len, uint64_t now) {
  const uint32_t psn = h.bth.psn;
  const int32_t d = psn_diff(psn, qp->epsn);
  if (d < 0) {
    counters_.rx_duplicates.inc();
    on_duplicate_request(qp, h, now);
    return;
  }
  if (d > 0) {
    // A gap: NAK once, then drop until the expected PSN arrives.
    counters_.rx_out_of_sequence.inc();
    if (!qp->nak_outstanding) {
      send_ack(qp, qp->epsn, wire::make_syndrome(wire::kAckTypeNak, wire::kNakPsnSequenceError), now);
      counters_.seq_naks_sent.inc();
      qp->nak_outstanding = true;
    }
    return;
  }

  const uint8_t op = h.bth.opcode;
  const wire::OpcodeInfo& info = wire::opcode_info(op);
  bool in_sequence;
  switch (qp->in_msg) {
    case QpCore::InMsg::kSend:
      in_sequence = op == wire::kSendMiddle || op == wire::kSendLast || op == wire::kSendLastImm;
      break;
    case QpCore::InMsg::kWrite:
      in_sequence = op == wire::kWriteMiddle || op == wire::kWriteLast || op == wire::kWriteLastImm;
      break;
    default:
      in_sequence = info.first;
      break;
  }
  if (!in_sequence || len > qp->mtu) {
    responder_fail(qp, psn, wire::kNakInvalidRequest, now);
    return;
  }

  switch (op) {
    case wire::kSendFirst:
    case wire::kSendMiddle:
    case wire::kSendLast:
    case wire::kSendLastImm:
    case wire::kSendOnly:
    case wire::kSendOnlyImm: {
      if (info.first && !take_recv(qp, info.last ? static_cast<int64_t>(len) : -1)) {
        send_ack(qp, psn, wire::make_syndrome(wire::kAckTypeRnrNak, qp->attr.min_rnr_timer), now);
        counters_.rnr_naks_sent.inc();
        qp->nak_outstanding = true;
        return;
      }
      if (!info.last && len != qp->mtu) {
        responder_fail(qp, psn, wire::kNakInvalidRequest, now);
        return;
      }
      if (qp->recv.status == WcStatus::kSuccess && !segs_live(qp->recv.sges, qp->recv.nsge)) {
        qp->recv.status = WcStatus::kLocProtErr;  // their MR was deregistered mid-message
      }
      if (qp->recv.status != WcStatus::kSuccess) {
        // The RECV's own buffers failed local checks.
        responder_fail(qp, psn, wire::kNakRemoteOperationalError, now);
        return;
      }
      if (!place_recv_payload(qp, payload, len)) {
        qp->recv.status = WcStatus::kLocLenErr;  // message longer than the RECV buffers
        responder_fail(qp, psn, wire::kNakInvalidRequest, now);
        return;
      }
      if (info.last) {
        complete_recv(qp, WcOpcode::kRecv, qp->recv.offset, op == wire::kSendLastImm || op == wire::kSendOnlyImm,
                      h.imm, h.bth.solicited);
        qp->msn = psn_add(qp->msn, 1);
        qp->in_msg = QpCore::InMsg::kNone;
      } else {
        qp->in_msg = QpCore::InMsg::kSend;
      }
      break;
    }
    case wire::kWriteFirst:
    case wire::kWriteMiddle:
    case wire::kWriteLast:
    case wire::kWriteLastImm:
    case wire::kWriteOnly:
    case wire::kWriteOnlyImm: {
      if (info.first) {
        const uint32_t dma_len = h.reth.dma_length;
        uint8_t* host = nullptr;
        if (dma_len > kMaxMessageBytes) {
          responder_fail(qp, psn, wire::kNakInvalidRequest, now);
          return;
        }
        // A zero-length WRITE touches no memory and needs no valid rkey.
        if (dma_len != 0 &&
            check_remote_access(qp, h.reth.va, h.reth.rkey, dma_len, kAccessRemoteWrite, &host) == nullptr) {
          responder_fail(qp, psn, wire::kNakRemoteAccessError, now);
          return;
        }
        const bool shape_ok = info.last ? len == dma_len : (len == qp->mtu && dma_len > qp->mtu);
        if (!shape_ok) {
          responder_fail(qp, psn, wire::kNakInvalidRequest, now);
          return;
        }
        qp->write_ptr = host;
        qp->write_remaining = dma_len;
        qp->write_length = dma_len;
        qp->write_rkey = h.reth.rkey;
        qp->write_target_gone = false;
      } else {
        const bool shape_ok = info.last ? len == qp->write_remaining : (len == qp->mtu && len < qp->write_remaining);
        if (!shape_ok) {
          responder_fail(qp, psn, wire::kNakInvalidRequest, now);
          return;
        }
        if (qp->write_target_gone) {
          // Its MR was deregistered after the first packet (dereg_mr): the
          // DMA write faults, as the first packet's rkey check would now.
          responder_fail(qp, psn, wire::kNakRemoteAccessError, now);
          return;
        }
      }
      const bool with_imm = op == wire::kWriteLastImm || op == wire::kWriteOnlyImm;
      if (with_imm) {
        // The immediate consumes a RECV; without one the last packet is RNR-NAKed.
        if (!take_recv(qp, 0)) {
          send_ack(qp, psn, wire::make_syndrome(wire::kAckTypeRnrNak, qp->attr.min_rnr_timer), now);
          counters_.rnr_naks_sent.inc();
          qp->nak_outstanding = true;
          qp->in_msg = info.first ? QpCore::InMsg::kNone : QpCore::InMsg::kWrite;
          return;
        }
        if (qp->recv.status != WcStatus::kSuccess) {
          responder_fail(qp, psn, wire::kNakRemoteOperationalError, now);
          return;
        }
      }
      if (len != 0) memory_->dma_write(qp->qpn, qp->write_ptr, payload, len);
      qp->write_ptr += len;
      qp->write_remaining -= len;
      if (info.last) {
        if (with_imm) complete_recv(qp, WcOpcode::kRecvRdmaWithImm, qp->write_length, true, h.imm, h.bth.solicited);
        qp->msn = psn_add(qp->msn, 1);
        qp->in_msg = QpCore::InMsg::kNone;
      } else {
        qp->in_msg = QpCore::InMsg::kWrite;
      }
      break;
    }
    case wire::kReadRequest:
      execute_read(qp, h, false, now);
      return;
    case wire::kCompareSwap:
    case wire::kFetchAdd:
      execute_atomic(qp, h, now);
      return;
    case wire::kFlush:
      execute_flush(qp, h, false, now);
      return;
    default:
      responder_fail(qp, psn, wire::kNakInvalidRequest, now);
      return;
  }
  qp->epsn = psn_add(qp->epsn, 1);
  qp->nak_outstanding = false;
  if (h.bth.ack_req) schedule_ack(qp, psn);
}

void NicCore::on_duplicate_request(QpCore* qp, const Headers& h, uint64_t now) {
  switch (h.bth.opcode) {
    case wire::kReadRequest:
      execute_read(qp, h, true, now);  // READs are re-executed
      return;
    case wire::kCompareSwap:
    case wire::kFetchAdd:
      replay_atomic(qp, h, now);  // atomics replay their saved result
      return;
    case wire::kFlush:
      execute_flush(qp, h, true, now);  // idempotent: executed and answered again
      return;
    default:
      // SEND/WRITE: already executed; re-acknowledge the latest PSN.
      schedule_ack(qp, psn_add(qp->epsn, wire::kPsnMask));
      return;
  }
}

}  // namespace ferry::nic::detail
