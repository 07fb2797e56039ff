// Requester, send side: fetching WQEs from the send ring when they start,
// checking local SGEs, assigning PSNs, segmenting messages into MTU packets,
// and the per-NIC transmit scheduler (round-robin over ready QPs).
//
// A WQE is read from host memory exactly when the NIC starts it (never when
// it is posted), so a WQE rewritten before that moment -- by the CPU, an RDMA
// WRITE or a RECV scatter -- runs with its new contents, opcode included.
#include <algorithm>

#include "nic_core.h"

namespace ferry::nic::detail {

using wire::Headers;

void NicCore::make_ready(QpCore* qp) {
  if (qp->in_ready) return;
  qp->in_ready = true;
  qp->ready_next = nullptr;
  if (ready_tail_ != nullptr) {
    ready_tail_->ready_next = qp;
  } else {
    ready_head_ = qp;
  }
  ready_tail_ = qp;
}

bool NicCore::run_ready(uint64_t now) {
  // Serve the QPs that are ready now; those with more to send go to the back.
  QpCore* list = ready_head_;
  ready_head_ = ready_tail_ = nullptr;
  bool work = false;
  while (list != nullptr) {
    QpCore* qp = list;
    list = qp->ready_next;
    qp->ready_next = nullptr;
    qp->in_ready = false;
    bool did = false;
    const TxResult r = transmit_some(qp, now, tx_burst_, &did);
    work |= did;
    if (r == TxResult::kBudget || r == TxResult::kBackpressure) make_ready(qp);
  }
  return work;
}

WcStatus NicCore::resolve_local_sges(QpCore* qp, SendSlot& s, const DecodedSendWqe& wqe, uint64_t index,
                                     bool need_write) {
  LocalSeg* segs = qp->sges_of(index);
  uint64_t total = 0;
  s.nsge = 0;
  for (uint16_t i = 0; i < wqe.num_ds; ++i) {
    const WqeDataSeg seg = load_data_seg(wqe.data + static_cast<size_t>(i) * sizeof(WqeDataSeg));
    if (seg.length == 0) continue;
    const MrEntry* mr = find_mr(seg.lkey);
    if (mr == nullptr || mr->pd != qp->pd) return WcStatus::kLocProtErr;
    if (need_write && !(mr->access & kAccessLocalWrite)) return WcStatus::kLocProtErr;
    uint8_t* host = nullptr;
    if (!mr->resolve(seg.addr, seg.length, &host)) return WcStatus::kLocProtErr;
    segs[s.nsge++] = LocalSeg{host, seg.length, seg.lkey};
    total += seg.length;
  }
  if (total > kMaxMessageBytes) return WcStatus::kLocLenErr;
  s.length = static_cast<uint32_t>(total);
  return WcStatus::kSuccess;
}

NicCore::StartResult NicCore::start_next_wqe(QpCore* qp) {
  // sq_limit moves only on doorbells (queued or watched); the record itself
  // is not re-read here, which would cost a contended cache line per WQE.
  const uint64_t limit = qp->managed_send ? qp->sq_enable : qp->sq_limit;
  if (qp->sq_next >= limit) return StartResult::kIdle;
  // The slot still holds an earlier WQE that has not completed.
  if (qp->sq_next - qp->sq_done >= qp->sq_depth) return StartResult::kBlocked;

  const uint64_t index = qp->sq_next;
  DecodedSendWqe wqe;
  const WqeError err = decode_send_wqe(std::span<const uint8_t>(qp->send_slot_ptr(index), qp->sq_stride),
                                       qp->cap.max_send_sge, qp->cap.max_inline_data, &wqe);
  // A managed queue enabled beyond what its owner has published waits at the
  // empty slot until a post fills it (on_doorbell re-readies it): an enable
  // exposes WQEs, it never makes one out of zeroed memory.
  if (err == WqeError::kEmpty && qp->managed_send) return StartResult::kIdle;
  SendSlot& s = qp->slot(index);
  auto fail = [&](WcStatus status) {
    s = SendSlot{};
    s.wr_id = wqe.wr_id;
    s.opcode = err == WqeError::kBadOpcode || err == WqeError::kEmpty ? WrOpcode::kNop : wqe.opcode;
    s.local = true;
    s.done = true;
    s.status = status;
    ++qp->sq_next;
    counters_.wqes_fetched.inc();
    enter_error(qp);
    return StartResult::kFailed;
  };
  if (err != WqeError::kNone) return fail(WcStatus::kLocQpOpErr);

  const WrOpcode op = wqe.opcode;
  // Post-time checks do not cover a WQE rewritten in the ring: check again.
  if ((wqe.flags & kSendInline) && !opcode_carries_payload(op)) return fail(WcStatus::kLocQpOpErr);
  const bool rd_atomic = op == WrOpcode::kRdmaRead || op == WrOpcode::kAtomicCmpAndSwp ||
                         op == WrOpcode::kAtomicFetchAndAdd || op == WrOpcode::kFlush;
  // A queue without the cross-channel capability runs none, whatever was
  // written into its ring (HyperLoop's data queues are rewritten by peers).
  if ((op == WrOpcode::kWait || op == WrOpcode::kSendEnable || op == WrOpcode::kRecvEnable) && !qp->cross_channel) {
    return fail(WcStatus::kLocQpOpErr);
  }
  switch (op) {
    case WrOpcode::kWait: {
      const CrossChannelResult r = execute_wait(qp, wqe);
      if (r == CrossChannelResult::kBlocked) return StartResult::kBlocked;
      if (r == CrossChannelResult::kBad) return fail(WcStatus::kLocQpOpErr);
      break;
    }
    case WrOpcode::kSendEnable:
    case WrOpcode::kRecvEnable:
      if (execute_enable(qp, wqe) == CrossChannelResult::kBad) return fail(WcStatus::kLocQpOpErr);
      break;
    case WrOpcode::kNop:
      break;
    default:
      // Ordering rules checked before anything is consumed.
      if ((wqe.flags & kSendFence) && qp->rd_atomic_out > 0) return StartResult::kBlocked;
      if (rd_atomic && qp->rd_atomic_out >= std::max<uint32_t>(qp->attr.max_rd_atomic, 1)) return StartResult::kBlocked;
      if (wire::psn_diff(qp->psn_next, qp->una_psn) >= static_cast<int32_t>(window_packets_)) return StartResult::kBlocked;
      break;
  }

  s = SendSlot{};
  s.opcode = op;
  s.flags = wqe.flags;
  s.wr_id = wqe.wr_id;
  s.imm_data = wqe.imm_data;
  if (op == WrOpcode::kWait || op == WrOpcode::kSendEnable || op == WrOpcode::kRecvEnable || op == WrOpcode::kNop) {
    s.local = true;
    s.done = true;
    ++qp->sq_next;
    counters_.wqes_fetched.inc();
    advance_send_completions(qp);  // completes now unless an earlier WQE is outstanding
    return StartResult::kStarted;
  }

  s.remote_addr = wqe.remote.remote_addr;
  s.rkey = wqe.remote.rkey;
  s.aux = wqe.remote.aux;
  s.compare_add = wqe.atomic.compare_add;
  s.swap = wqe.atomic.swap;
  if (wqe.flags & kSendInline) {
    s.inline_data = true;
    s.inline_ptr = wqe.data;
    s.length = wqe.num_ds;
  } else if (op == WrOpcode::kFlush) {
    s.length = static_cast<uint32_t>(std::min<uint64_t>(wqe.atomic.compare_add, UINT32_MAX));
  } else {
    const bool need_write = op == WrOpcode::kRdmaRead || op == WrOpcode::kAtomicCmpAndSwp ||
                            op == WrOpcode::kAtomicFetchAndAdd;
    const WcStatus st = resolve_local_sges(qp, s, wqe, index, need_write);
    if (st != WcStatus::kSuccess) return fail(st);
  }
  // An atomic returns 8 bytes into exactly one 8-byte local SGE.
  if ((op == WrOpcode::kAtomicCmpAndSwp || op == WrOpcode::kAtomicFetchAndAdd) && (s.nsge != 1 || s.length != 8)) {
    return fail(WcStatus::kLocLenErr);
  }

  uint32_t npkts = 1;
  if (op != WrOpcode::kAtomicCmpAndSwp && op != WrOpcode::kAtomicFetchAndAdd && op != WrOpcode::kFlush) {
    npkts = std::max<uint32_t>(1, (s.length + qp->mtu - 1) / qp->mtu);
  }
  s.first_psn = qp->psn_next;
  s.npkts = npkts;
  s.rd_atomic = rd_atomic;
  qp->psn_next = wire::psn_add(qp->psn_next, npkts);
  if (rd_atomic) ++qp->rd_atomic_out;
  ++qp->sq_next;
  counters_.wqes_fetched.inc();
  return StartResult::kStarted;
}

NicCore::TxResult NicCore::transmit_some(QpCore* qp, uint64_t now, uint32_t budget, bool* did) {
  if (qp->state != QpState::kRts) return TxResult::kIdle;
  if (qp->rnr_until_ns != 0) {
    if (now < qp->rnr_until_ns) return TxResult::kBlocked;  // the RNR timer re-readies us
    qp->rnr_until_ns = 0;
  }
  while (budget > 0) {
    if (qp->tx_wqe == qp->sq_next) {
      const StartResult r = start_next_wqe(qp);
      if (r == StartResult::kStarted) {
        *did = true;
        continue;
      }
      if (r == StartResult::kFailed) {
        *did = true;
        return TxResult::kIdle;
      }
      return r == StartResult::kIdle ? TxResult::kIdle : TxResult::kBlocked;
    }
    SendSlot& s = qp->slot(qp->tx_wqe);
    if (s.local || s.done) {
      ++qp->tx_wqe;
      qp->tx_pkt = 0;
      continue;
    }
    if (!fabric_->request_space(address_, qp->attr.dest_nic)) return TxResult::kBackpressure;
    if (!send_request_packet(qp, qp->tx_wqe, now)) return TxResult::kBackpressure;
    *did = true;
    --budget;
  }
  return TxResult::kBudget;
}

// Payload bytes [offset, offset+len) of a message: borrowed when they lie in
// one segment, else gathered into a fabric buffer. nullptr if no buffer free.
static const uint8_t* gather_payload(Fabric* fabric, QpCore* qp, const SendSlot& s, uint64_t index, uint32_t offset,
                                     uint32_t len, Packet& p) {
  if (len == 0) return nullptr;
  if (s.inline_data) return s.inline_ptr + offset;
  const LocalSeg* segs = qp->sges_of(index);
  uint32_t seg_start = 0;
  uint8_t i = 0;
  while (i < s.nsge && seg_start + segs[i].length <= offset) seg_start += segs[i++].length;
  FERRY_ASSERT(i < s.nsge, "payload offset beyond the message");
  const uint32_t in_seg = offset - seg_start;
  if (segs[i].length - in_seg >= len) return segs[i].ptr + in_seg;
  int32_t buffer = -1;
  uint8_t* out = fabric->alloc_buffer(&buffer);
  if (out == nullptr) return nullptr;
  p.buffer = buffer;
  uint32_t copied = 0;
  uint32_t skip = in_seg;
  for (; i < s.nsge && copied < len; ++i) {
    const uint32_t n = std::min(segs[i].length - skip, len - copied);
    std::memcpy(out + copied, segs[i].ptr + skip, n);
    copied += n;
    skip = 0;
  }
  return out;
}

bool NicCore::send_request_packet(QpCore* qp, uint64_t index, uint64_t now) {
  SendSlot& s = qp->slot(index);
  Packet p;
  Headers h;
  h.bth.dest_qp = qp->attr.dest_qp_num;
  uint32_t psn = s.first_psn;
  uint32_t len = 0;
  bool advance_wqe = true;
  switch (s.opcode) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm: {
      const bool is_send = s.opcode == WrOpcode::kSend || s.opcode == WrOpcode::kSendWithImm;
      const bool imm = s.opcode == WrOpcode::kSendWithImm || s.opcode == WrOpcode::kRdmaWriteWithImm;
      const uint32_t i = qp->tx_pkt;
      const uint32_t offset = i * qp->mtu;
      len = std::min(qp->mtu, s.length - offset);
      const bool first = i == 0;
      const bool last = i + 1 == s.npkts;
      psn = wire::psn_add(s.first_psn, i);
      uint8_t opcode;
      if (is_send) {
        opcode = first && last ? (imm ? wire::kSendOnlyImm : wire::kSendOnly)
                 : first       ? wire::kSendFirst
                 : last        ? (imm ? wire::kSendLastImm : wire::kSendLast)
                               : wire::kSendMiddle;
      } else {
        opcode = first && last ? (imm ? wire::kWriteOnlyImm : wire::kWriteOnly)
                 : first       ? wire::kWriteFirst
                 : last        ? (imm ? wire::kWriteLastImm : wire::kWriteLast)
                               : wire::kWriteMiddle;
        if (first) h.reth = wire::Reth{s.remote_addr, s.rkey, s.length};
      }
      h.bth.opcode = opcode;
      if (last && imm) h.imm = s.imm_data;
      if (!s.inline_data && !segs_live(qp->sges_of(index), s.nsge)) {
        s.status = WcStatus::kLocProtErr;  // its MR was deregistered while it was outstanding
        s.done = true;
        enter_error(qp);
        return false;  // the caller finds the QP no longer in RTS
      }
      h.bth.solicited = last && (s.flags & kSendSolicited) && (is_send || imm);
      h.bth.ack_req = last || ((i + 1) % kAckReqInterval == 0);
      p.payload = gather_payload(fabric_, qp, s, index, offset, len, p);
      if (len != 0 && p.payload == nullptr) return false;
      advance_wqe = last;
      break;
    }
    case WrOpcode::kRdmaRead:
      // A retransmitted READ asks only for the part not yet received.
      psn = wire::psn_add(s.first_psn, s.resp_pkts);
      s.request_psn = psn;
      h.bth.opcode = wire::kReadRequest;
      h.reth = wire::Reth{s.remote_addr + s.resp_bytes, s.rkey, s.length - s.resp_bytes};
      h.bth.ack_req = true;
      break;
    case WrOpcode::kAtomicCmpAndSwp:
    case WrOpcode::kAtomicFetchAndAdd: {
      const bool cas = s.opcode == WrOpcode::kAtomicCmpAndSwp;
      h.bth.opcode = cas ? wire::kCompareSwap : wire::kFetchAdd;
      h.atomic = wire::AtomicEth{s.remote_addr, s.rkey, cas ? s.swap : s.compare_add, cas ? s.compare_add : 0};
      h.bth.ack_req = true;
      break;
    }
    case WrOpcode::kFlush:
      h.bth.opcode = wire::kFlush;
      h.feth.placement = (s.aux & 1) ? wire::kPlacementPersistence : wire::kPlacementGlobalVisibility;
      h.feth.selectivity = (s.aux & 2) ? wire::kSelectMemoryRegion : wire::kSelectRange;
      h.reth = wire::Reth{s.remote_addr, s.rkey, s.length};
      h.bth.ack_req = true;
      break;
    default:
      FERRY_ASSERT(false, "local WQE reached the packet builder");
  }
  h.bth.psn = psn;
  h.bth.pad_count = wire::pad_for(len);
  p.payload_len = len;
  fill_packet(p, qp, h);
  if (!transmit(qp, p, true, now)) {
    if (p.buffer >= 0) fabric_->free_buffer(p.buffer);
    return false;
  }
  // Retransmission accounting: anything below the highest PSN sent is a resend.
  const uint32_t end = s.opcode == WrOpcode::kRdmaRead ? wire::psn_add(s.first_psn, s.npkts) : wire::psn_add(psn, 1);
  if (wire::psn_diff(psn, qp->psn_high) < 0) {
    counters_.retransmitted_packets.inc();
  }
  if (wire::psn_diff(end, qp->psn_high) > 0) qp->psn_high = end;
  if (advance_wqe) {
    ++qp->tx_wqe;
    qp->tx_pkt = 0;
  } else {
    ++qp->tx_pkt;
  }
  arm_retry_timer(qp, now);
  return true;
}

void NicCore::fill_packet(Packet& p, QpCore* qp, const Headers& h) {
  p.src_nic = address_;
  p.dst_nic = qp->attr.dest_nic;
  p.src_qpn = qp->qpn;
  p.header_len = static_cast<uint16_t>(wire::serialize_headers(h, std::span<uint8_t>(p.header, sizeof(p.header))));
  FERRY_DASSERT(p.header_len != 0);
}

static PacketKind packet_kind(uint8_t opcode) {
  switch (opcode) {
    case wire::kSendFirst: case wire::kSendMiddle: case wire::kSendLast: case wire::kSendLastImm:
    case wire::kSendOnly: case wire::kSendOnlyImm:
      return PacketKind::kSend;
    case wire::kWriteFirst: case wire::kWriteMiddle: case wire::kWriteLast: case wire::kWriteLastImm:
    case wire::kWriteOnly: case wire::kWriteOnlyImm:
      return PacketKind::kWrite;
    case wire::kReadRequest: case wire::kFlush:
      return PacketKind::kReadRequest;
    case wire::kReadResponseFirst: case wire::kReadResponseMiddle: case wire::kReadResponseLast:
    case wire::kReadResponseOnly:
      return PacketKind::kReadResponse;
    case wire::kCompareSwap: case wire::kFetchAdd: case wire::kAtomicAcknowledge:
      return PacketKind::kAtomic;
    default:
      return PacketKind::kAck;
  }
}

bool NicCore::transmit(QpCore* qp, Packet& p, bool is_request, uint64_t now) {
  if (!fabric_->transmit(p, is_request, now)) return false;
  counters_.tx_packets.inc();
  model_qp_context(qp);
  const int kind = static_cast<int>(packet_kind(p.header[0]));  // the BTH opcode byte
  QpCore::TrafficEntry& traffic = qp->traffic_by_kind[kind];
  ++traffic.packets;
  traffic.header_bytes += p.header_len;
  traffic.payload_bytes += p.payload_len;
  return true;
}

}  // namespace ferry::nic::detail
