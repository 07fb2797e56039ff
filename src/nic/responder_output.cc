// Responder output: ACKs, NAKs, READ responses and ATOMIC ACKs leave in PSN
// order through one per-QP queue. A large READ is sent as far as the
// requester's inbound queue has room, and the rest (with anything behind it)
// waits for the next engine pass -- the responder's share of flow control.
// A queued READ whose MR is deregistered fails when its turn comes (dereg_mr).
#include "nic_core.h"

namespace ferry::nic::detail {

using wire::Headers;
using wire::psn_add;
using wire::psn_diff;

bool NicCore::emit_response(QpCore* qp, ResponseEntry& e, uint64_t now) {
  Headers h;
  h.bth.dest_qp = qp->attr.dest_qp_num;
  h.aeth.msn = e.msn;
  switch (e.kind) {
    case ResponseEntry::Kind::kAck: {
      Packet p;
      h.bth.opcode = wire::kAcknowledge;
      h.bth.psn = e.psn;
      h.aeth.syndrome = e.syndrome;
      fill_packet(p, qp, h);
      transmit(qp, p, false, now);
      if (wire::syndrome_type(e.syndrome) == wire::kAckTypeAck) counters_.acks_sent.inc();
      return true;
    }
    case ResponseEntry::Kind::kAtomicAck: {
      Packet p;
      h.bth.opcode = wire::kAtomicAcknowledge;
      h.bth.psn = e.psn;
      h.aeth.syndrome = wire::make_syndrome(wire::kAckTypeAck, wire::kAckNoCredit);
      h.atomic_ack_orig = e.original;
      fill_packet(p, qp, h);
      transmit(qp, p, false, now);
      return true;
    }
    case ResponseEntry::Kind::kRead:
      h.aeth.syndrome = wire::make_syndrome(wire::kAckTypeAck, wire::kAckNoCredit);
      while (e.sent < e.npkts) {
        if (!fabric_->response_space(address_, qp->attr.dest_nic)) return false;  // resume next pass
        const uint32_t i = e.sent;
        const bool first = i == 0;
        const bool last = i + 1 == e.npkts;
        h.bth.opcode = first && last ? wire::kReadResponseOnly
                       : first       ? wire::kReadResponseFirst
                       : last        ? wire::kReadResponseLast
                                     : wire::kReadResponseMiddle;
        h.bth.psn = psn_add(e.psn, i);
        const uint32_t offset = i * qp->mtu;
        const uint32_t n = e.length == 0 ? 0 : std::min(qp->mtu, e.length - offset);
        h.bth.pad_count = wire::pad_for(n);
        Packet p;
        p.payload = n ? e.data + offset : nullptr;
        p.payload_len = n;
        fill_packet(p, qp, h);
        transmit(qp, p, false, now);
        ++e.sent;
      }
      return true;
  }
  return true;
}

void NicCore::respond(QpCore* qp, const ResponseEntry& entry, uint64_t now) {
  // A response for PSN p also acknowledges a coalesced ACK pending at <= p.
  const uint32_t last_psn = entry.kind == ResponseEntry::Kind::kRead ? psn_add(entry.psn, entry.npkts - 1) : entry.psn;
  if (qp->ack_pending && psn_diff(last_psn, qp->ack_psn) >= 0) qp->ack_pending = false;
  const bool rd_atomic = entry.kind != ResponseEntry::Kind::kAck;
  if (qp->resp_count == 0) {
    ResponseEntry e = entry;
    if (emit_response(qp, e, now)) return;
    // Partly sent: the rest waits, and everything after it queues behind.
    qp->responses[qp->resp_head] = e;
    qp->resp_count = 1;
    (e.replay ? qp->resp_replays : qp->resp_rd_atomic) = 1;
    if (!qp->in_resp_list) {
      qp->in_resp_list = true;
      responders_.push_back(qp);
    }
    return;
  }
  const uint32_t cap = static_cast<uint32_t>(qp->responses.size());
  auto append = [&](const ResponseEntry& e) {
    // READ/ATOMIC entries are limited (rd_atomic_room) before they get here,
    // and ACK/NAK entries fold (below): the ring cannot overflow.
    FERRY_ASSERT(qp->resp_count < cap, "responder output queue overflow on QP ", qp->qpn);
    qp->responses[(qp->resp_head + qp->resp_count) % cap] = e;
    ++qp->resp_count;
  };
  if (rd_atomic) ++(entry.replay ? qp->resp_replays : qp->resp_rd_atomic);
  ResponseEntry& tail = qp->responses[(qp->resp_head + qp->resp_count - 1) % cap];
  if (tail.kind != ResponseEntry::Kind::kAck) {
    append(entry);
    return;
  }
  // The tail is an ACK, a sequence NAK or an RNR NAK (error NAKs bypass the
  // queue). The requester takes an ACK for p as acknowledging everything up
  // to p, and a NAK, READ response or ATOMIC ACK for p as acknowledging
  // everything before p (requester_ack.cc); the responder's PSNs only move
  // forward. So a later response makes the queued ACK/NAK redundant, and the
  // queue keeps at most one ACK/NAK, as its last entry.
  const bool tail_is_nak = wire::syndrome_type(tail.syndrome) != wire::kAckTypeAck;
  const int32_t ahead = psn_diff(entry.psn, tail.psn);
  if (!rd_atomic) {
    const bool entry_is_ack = wire::syndrome_type(entry.syndrome) == wire::kAckTypeAck;
    if (entry_is_ack && ahead < 0) return;  // a re-ACK the queued ACK/NAK already implies
    tail = entry;  // a later ACK, or a NAK, which implies everything before it
    return;
  }
  // A READ response or ATOMIC ACK for p covers an ACK for a PSN before p, and
  // a NAK for p (p has arrived since: the NAK's resend request is moot).
  if (tail_is_nak ? ahead >= 0 : ahead > 0) {
    tail = entry;
    return;
  }
  // A duplicate READ/ATOMIC answered for an older PSN goes before the ACK/NAK,
  // which stays last (an ACK past a READ whose responses have not arrived
  // would make the requester ask for them again).
  const ResponseEntry ack = tail;
  tail = entry;
  append(ack);
}

bool NicCore::drain_responses(QpCore* qp, uint64_t now) {
  bool work = false;
  const uint32_t cap = static_cast<uint32_t>(qp->responses.size());
  while (qp->resp_count != 0) {
    ResponseEntry& e = qp->responses[qp->resp_head];
    if (e.source_gone) {
      // The NIC would DMA-read the rest now, from an MR deregistered since the
      // READ was checked: a remote access error, like a failed rkey check.
      // This READ fails, so nothing queued behind it is owed any more.
      const uint32_t psn = psn_add(e.psn, e.sent);
      drop_responses(qp);
      responder_fail(qp, psn, wire::kNakRemoteAccessError, now);
      return true;
    }
    const uint32_t before = e.sent;
    const bool done = emit_response(qp, e, now);
    work |= done || e.sent != before;
    if (!done) break;
    if (e.kind != ResponseEntry::Kind::kAck) --(e.replay ? qp->resp_replays : qp->resp_rd_atomic);
    qp->resp_head = (qp->resp_head + 1) % cap;
    --qp->resp_count;
  }
  return work;
}

bool NicCore::run_responders(uint64_t now) {
  bool work = false;
  size_t i = 0;
  while (i < responders_.size()) {
    QpCore* qp = responders_[i];
    work |= drain_responses(qp, now);
    if (qp->resp_count == 0) {
      qp->in_resp_list = false;
      responders_[i] = responders_.back();
      responders_.pop_back();
      continue;
    }
    ++i;
  }
  return work;
}

void NicCore::drop_responses(QpCore* qp) {
  qp->resp_head = qp->resp_count = qp->resp_rd_atomic = qp->resp_replays = 0;
  // The QP stays in responders_ until the next pass finds it empty.
}

}  // namespace ferry::nic::detail
