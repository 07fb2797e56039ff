// The NIC's share of an engine pass: packet intake (parse, validate,
// dispatch), doorbells, timers, error flushes and the transmit scheduler.
#include "nic_core.h"

namespace ferry::nic::detail {

void NicCore::on_packet(const Packet& packet, uint64_t now) {
  counters_.rx_packets.inc();
  wire::Headers h;
  size_t header_len = 0;
  // Nothing in a packet is trusted: parse, then check lengths and fields.
  if (wire::parse_headers(packet.header_bytes(), &h, &header_len) != wire::ParseError::kNone ||
      header_len != packet.header_len || wire::check_payload(h, packet.payload_len) != wire::ParseError::kNone ||
      h.bth.pkey != wire::kDefaultPkey) {
    counters_.rx_malformed.inc();
    return;
  }
  QpCore* qp = find_qp(h.bth.dest_qp);
  // An RC QP accepts packets only from the QP it is connected to.
  if (qp == nullptr || packet.src_nic != qp->attr.dest_nic || packet.src_qpn != qp->attr.dest_qp_num) {
    counters_.rx_unknown_qp.inc();
    return;
  }
  const wire::OpcodeInfo& info = wire::opcode_info(h.bth.opcode);
  if (info.request) {
    const QpState st = qp->state.load(std::memory_order_relaxed);
    if (st != QpState::kRtr && st != QpState::kRts) {
      counters_.rx_unknown_qp.inc();
      return;
    }
    on_request(qp, h, packet.payload, packet.payload_len, now);
  } else {
    on_response(qp, h, packet.payload, packet.payload_len, now);
  }
}

bool NicCore::poll(uint64_t now) {
  bool work = false;
  uint32_t qpn;
  while (doorbells_.pop(&qpn)) {
    work = true;
    counters_.doorbells.inc();
    QpCore* qp = find_qp(qpn);
    if (qp == nullptr) continue;
    // Clear the flag before reading the doorbell record (see ring_doorbell).
    qp->doorbell_queued.exchange(false, std::memory_order_acq_rel);
    qp->sq_limit = qp->sq_doorbell.load(std::memory_order_acquire);
    const QpState st = qp->state.load(std::memory_order_relaxed);
    if (st == QpState::kError) {
      flush_qp(qp);
    } else if (st == QpState::kRts && !qp->managed_send) {
      make_ready(qp);
    }
  }
  if (now >= next_timer_ns_) work |= run_timers(now);
  if (!flush_qps_.empty()) {
    // flush_qp may add QPs (a CQ overrun moves others to ERROR): drain by index.
    for (size_t i = 0; i < flush_qps_.size(); ++i) flush_qp(flush_qps_[i]);
    flush_qps_.clear();
    work = true;
  }
  if (ready_head_ != nullptr) work |= run_ready(now);
  return work;
}

bool NicCore::busy() const {
  return ready_head_ != nullptr || !flush_qps_.empty() || doorbells_.maybe_nonempty();
}

}  // namespace ferry::nic::detail
