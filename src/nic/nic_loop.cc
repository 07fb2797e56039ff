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
  // An RC QP accepts packets only from the host it is connected to (RoCE
  // checks the source address; the BTH names no source QP, so neither do we).
  if (qp == nullptr || packet.src_nic != qp->attr.dest_nic) {
    counters_.rx_unknown_qp.inc();
    return;
  }
  model_qp_context(qp);
  const wire::OpcodeInfo& info = wire::opcode_info(h.bth.opcode);
  if (info.request) {
    const QpState st = qp->state;
    if (st != QpState::kRtr && st != QpState::kRts) {
      counters_.rx_unknown_qp.inc();
      return;
    }
    on_request(qp, h, packet.payload, packet.payload_len, now);
  } else {
    on_response(qp, h, packet.payload, packet.payload_len, now);
  }
}

void NicCore::on_doorbell(QpCore* qp, uint64_t doorbell) {
  counters_.doorbells.inc();
  // The doorbell record is the application's to write, and nothing it holds
  // is trusted: a producer index more than a ring ahead of the completed
  // WQEs would make the NIC reuse slots of WQEs still in flight. (A managed
  // queue's enables may run the NIC past the posts: then it is behind.)
  if (static_cast<int64_t>(doorbell - qp->sq_done) > static_cast<int64_t>(qp->sq_depth)) {
    if (qp->state != QpState::kError) {
      push_async_event({AsyncEventType::kQpFatal, qp->qpn});
      enter_error(qp);
    }
    return;
  }
  qp->sq_limit = doorbell;
  const QpState st = qp->state;
  if (st == QpState::kError) {
    flush_qp(qp);
  } else if (st == QpState::kRts && (!qp->managed_send || qp->sq_next < qp->sq_enable)) {
    // A managed queue runs on enables, not doorbells; a post matters to it
    // only when it waits at an enabled slot that was empty.
    make_ready(qp);
  }
}

// Doorbells, two ways (the io_uring SQPOLL scheme): a QP that rings often
// is watched -- the engine reads its doorbell record every pass and the
// application skips the doorbell queue; after a quiet spell the engine stops
// watching and the application goes back to queueing the QP number.
void NicCore::watch(QpCore* qp, uint64_t now) {
  qp->watch_last_ns = now;
  if (qp->rec->engine_watching.load(std::memory_order_relaxed)) return;  // the engine is its only writer
  qp->rec->engine_watching.store(true, std::memory_order_seq_cst);
  watched_.push_back(qp);
}

bool NicCore::unwatch(QpCore* qp) {
  qp->rec->engine_watching.store(false, std::memory_order_seq_cst);
  // A post that saw engine_watching == true published its doorbell before
  // the store above in the seq_cst order, so this load sees it.
  const uint64_t doorbell = qp->rec->sq_doorbell.load(std::memory_order_seq_cst);
  if (doorbell == qp->sq_limit) return false;
  on_doorbell(qp, doorbell);
  return true;
}

bool NicCore::poll_watched(uint64_t now) {
  bool work = false;
  size_t i = 0;
  while (i < watched_.size()) {
    QpCore* qp = watched_[i];
    const uint64_t doorbell = qp->rec->sq_doorbell.load(std::memory_order_acquire);
    if (doorbell != qp->sq_limit) {
      on_doorbell(qp, doorbell);
      qp->watch_last_ns = now;
      work = true;
    } else if (now - qp->watch_last_ns > watch_ns_) {
      watched_[i] = watched_.back();
      watched_.pop_back();
      work |= unwatch(qp);
      continue;
    }
    ++i;
  }
  return work;
}

bool NicCore::unwatch_all() {
  bool found = false;
  for (QpCore* qp : watched_) found |= unwatch(qp);
  watched_.clear();
  return found;
}

void NicCore::on_doorbell_qpn(QpCore* qp, uint64_t now) {
  // Clear the flag before reading the doorbell record (see notify_posted in post.cc).
  qp->rec->doorbell_queued.exchange(0, std::memory_order_acq_rel);
  on_doorbell(qp, qp->rec->sq_doorbell.load(std::memory_order_acquire));
  // Watch only a QP that rang twice within the watch window. One that posts
  // less often would be unwatched before its next post, having cost a
  // seq_cst store, a read of its doorbell record every pass and the
  // unwatch: with thousands of QPs taking turns, the watch list was a tenth
  // of the engine's time (issue 31). Its posts keep using the queue.
  const bool rang_recently = qp->queued_doorbell_ns != 0 && now - qp->queued_doorbell_ns <= watch_ns_;
  qp->queued_doorbell_ns = now;
  if (rang_recently && qp->state == QpState::kRts) watch(qp, now);
}

void NicCore::ring_doorbell(uint32_t qpn) {
  const bool pushed = doorbells_.push(qpn);
  FERRY_ASSERT(pushed, "doorbell queue overflow (each QP is queued at most once)");
  engine_->notify();
}

void NicCore::attach_doorbells(DoorbellRing* ring, uint32_t owner) {
  client_doorbells_.push_back(DoorbellReader{ring, 0, owner});
}

void NicCore::detach_doorbells(uint32_t owner) {
  std::erase_if(client_doorbells_, [owner](const DoorbellReader& r) { return r.owner == owner; });
}

void NicCore::force_error(QpCore* qp) {
  if (qp->state != QpState::kError) enter_error(qp);
}

bool NicCore::poll(uint64_t now) {
  bool work = false;
  uint32_t qpn;
  while (doorbells_.pop(&qpn)) {
    work = true;
    QpCore* qp = find_qp(qpn);
    if (qp == nullptr) continue;
    on_doorbell_qpn(qp, now);
  }
  for (DoorbellReader& ring : client_doorbells_) {
    // At most one ring's worth per pass: a client cannot hold the engine.
    for (uint32_t n = 0; n < DoorbellRing::kCapacity && ring.pop(&qpn); ++n) {
      work = true;
      QpCore* qp = find_qp(qpn);
      if (qp == nullptr || qp->owner != ring.owner) continue;  // not this client's QP
      on_doorbell_qpn(qp, now);
    }
  }
  if (!watched_.empty()) work |= poll_watched(now);
  if (now >= next_timer_ns_) work |= run_timers(now);
  if (!flush_qps_.empty()) {
    // flush_qp may add QPs (a CQ overrun moves others to ERROR): drain by index.
    for (size_t i = 0; i < flush_qps_.size(); ++i) flush_qp(flush_qps_[i]);
    flush_qps_.clear();
    work = true;
  }
  if (!responders_.empty()) work |= run_responders(now);
  if (ready_head_ != nullptr) work |= run_ready(now);
  return work;
}

bool NicCore::busy() const {
  if (ready_head_ != nullptr || !flush_qps_.empty() || !responders_.empty() || doorbells_.maybe_nonempty()) return true;
  for (const DoorbellReader& ring : client_doorbells_) {
    if (ring.maybe_nonempty()) return true;
  }
  return false;
}

}  // namespace ferry::nic::detail
