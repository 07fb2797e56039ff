// Application side of the work queues: post_send / post_recv write WQEs into
// the rings in host memory and ring the doorbell. Nothing here executes a
// request; the NIC fetches each WQE when it starts it (requester.cc).
#include <cstring>
#include <string>

#include "device.h"
#include "ferry/nic/wqe.h"

namespace ferry::nic {

namespace {

// Application side of slot freeing (see FreeMark): the send slots the NIC
// has finished with and whose covering CQE has been polled.
void refresh_sq_freed(detail::QpView* qp, const detail::CqView* cq) {
  if (cq->count_only) {
    qp->app_sq_freed_cache = qp->rec->sq_freed.load(std::memory_order_acquire);
    return;
  }
  const uint64_t polled = cq->rec->consumer.load(std::memory_order_acquire);
  const uint64_t size = qp->free_marks_size;
  uint64_t head = qp->rec->free_marks_head.load(std::memory_order_relaxed);  // this thread is its only writer
  const uint64_t tail = qp->rec->free_marks_tail.load(std::memory_order_acquire);
  while (head < tail) {
    const detail::FreeMark& m = qp->free_marks[head % size];
    if (m.cqe >= polled) break;
    qp->app_sq_freed_cache = m.freed_to;
    ++head;
  }
  qp->rec->free_marks_head.store(head, std::memory_order_release);
}

// After publishing the doorbell record (seq_cst): queue the QP unless the
// engine is watching it, and unless it is queued already.
void notify_posted(detail::Device* dev, detail::QpView* qp) {
  if (qp->rec->engine_watching.load(std::memory_order_seq_cst)) return;
  // acq_rel RMW pairs with the engine's exchange(0) before it reads the
  // doorbell record: either the engine sees our new producer index, or we
  // see the flag cleared and queue the QP again.
  if (qp->rec->doorbell_queued.exchange(1, std::memory_order_acq_rel) == 0) dev->ring_doorbell(qp->qpn);
}

}  // namespace

Status QueuePair::post_send(std::span<const SendWr> wrs) {
  detail::QpView* qp = view_.get();
  if (dev_->dead()) return dev_->fatal_status();
  const QpState st = qp->rec->state.load(std::memory_order_seq_cst);
  if (st != QpState::kRts && st != QpState::kError) {
    return failed_precondition("post_send: QP " + std::to_string(qp->qpn) + " is in " +
                               std::string(qp_state_name(st)) + "; sends need RTS");
  }
  for (size_t i = 0; i < wrs.size(); ++i) {
    const SendWr& wr = wrs[i];
    // Messages are built only on the error path: this loop runs per post.
    auto bad = [i](const std::string& why) {
      return invalid_argument("post_send: WR " + std::to_string(i) + ": " + why);
    };
    if (!valid_wr_opcode(static_cast<uint8_t>(wr.opcode))) return bad("unknown opcode");
    if (wr.flags & ~(kSendSignaled | kSendFence | kSendSolicited | kSendInline)) return bad("unknown send flags");
    // Inline or not, a WR gathers at most max_send_sge SGEs (libmlx5: EINVAL).
    if (wr.sg_list.size() > qp->cap.max_send_sge) {
      return bad(std::to_string(wr.sg_list.size()) + " SGEs exceed max_send_sge " +
                 std::to_string(qp->cap.max_send_sge));
    }
    if (wr.flags & kSendInline) {
      if (!opcode_carries_payload(wr.opcode)) return bad("inline data only for SEND/WRITE");
      size_t total = 0;
      for (const Sge& sge : wr.sg_list) total += sge.length;
      if (total > qp->cap.max_inline_data) {
        return bad("inline payload of " + std::to_string(total) + " bytes exceeds max_inline_data " +
                   std::to_string(qp->cap.max_inline_data));
      }
    }
    const bool cross = wr.opcode == WrOpcode::kWait || wr.opcode == WrOpcode::kSendEnable ||
                       wr.opcode == WrOpcode::kRecvEnable;
    if (cross && !qp->cross_channel) return bad("WAIT / ENABLE need a QP created with cross_channel");
    if (wr.opcode == WrOpcode::kWait && (wr.wait_cq == nullptr || wr.wait_cq->dev_ != dev_)) {
      return bad("WAIT needs a CQ of this NIC");
    }
    if ((wr.opcode == WrOpcode::kSendEnable || wr.opcode == WrOpcode::kRecvEnable) &&
        (wr.enable_qp == nullptr || wr.enable_qp->dev_ != dev_ || wr.enable_qp->view_->pd != qp->pd)) {
      return bad("ENABLE needs a QP of this NIC and of this QP's protection domain");
    }
  }
  uint64_t in_use = qp->app_sq_producer - qp->app_sq_freed_cache;
  if (in_use + wrs.size() > qp->sq_depth) {
    refresh_sq_freed(qp, send_cq_->view_.get());
    if (qp->app_sq_freed_cache > qp->app_sq_producer) {
      // Only a managed queue can get here: an ENABLE let the NIC run slots
      // this application never posted, so its posts would never run.
      return failed_precondition("post_send: the NIC has executed WQEs past this queue's posts (a SEND_ENABLE "
                                 "index beyond what was posted); re-post from index " +
                                 std::to_string(qp->app_sq_freed_cache));
    }
    in_use = qp->app_sq_producer - qp->app_sq_freed_cache;
  }
  if (in_use + wrs.size() > qp->sq_depth) {
    return resource_exhausted("post_send: send queue full (" + std::to_string(in_use) + " of " +
                              std::to_string(qp->sq_depth) + " slots in use; a slot frees when the completion "
                              "covering it has been polled, unsignaled WRs with a later signaled one)");
  }
  for (const SendWr& wr : wrs) {
    uint8_t* slot = qp->sq_ring + (qp->app_sq_producer & (qp->sq_depth - 1)) * qp->sq_stride;
    std::memset(slot, 0, qp->sq_stride);
    const uint32_t cq_number = wr.opcode == WrOpcode::kWait ? wr.wait_cq->view_->number : 0;
    const uint32_t qp_number =
        (wr.opcode == WrOpcode::kSendEnable || wr.opcode == WrOpcode::kRecvEnable) ? wr.enable_qp->view_->qpn : 0;
    encode_send_wqe(wr, cq_number, qp_number, std::span<uint8_t>(slot, qp->sq_stride));
    ++qp->app_sq_producer;
  }
  // seq_cst: pairs with the engine's unwatch (store engine_watching=false,
  // then load sq_doorbell), so a post is never missed by both.
  qp->rec->sq_doorbell.store(qp->app_sq_producer, std::memory_order_seq_cst);
  notify_posted(dev_, qp);
  return ok_status();
}

Status QueuePair::post_recv(std::span<const RecvWr> wrs) {
  detail::QpView* qp = view_.get();
  if (qp->has_srq) return invalid_argument("post_recv: QP is attached to an SRQ; post to the SRQ");
  if (dev_->dead()) return dev_->fatal_status();
  const QpState st = qp->rec->state.load(std::memory_order_seq_cst);
  if (st == QpState::kReset) return failed_precondition("post_recv: QP in RESET; RECVs may be posted from INIT on");
  for (size_t i = 0; i < wrs.size(); ++i) {
    if (wrs[i].sg_list.size() > qp->cap.max_recv_sge) {
      return invalid_argument("post_recv: WR " + std::to_string(i) + " has " + std::to_string(wrs[i].sg_list.size()) +
                              " SGEs, max_recv_sge is " + std::to_string(qp->cap.max_recv_sge));
    }
  }
  uint64_t in_use = qp->app_rq_producer - qp->app_rq_consumer_cache;
  if (in_use + wrs.size() > qp->rq_depth) {
    qp->app_rq_consumer_cache = qp->rec->rq_consumer.load(std::memory_order_acquire);
    in_use = qp->app_rq_producer - qp->app_rq_consumer_cache;
  }
  if (in_use + wrs.size() > qp->rq_depth) return resource_exhausted("post_recv: receive queue full");
  for (const RecvWr& wr : wrs) {
    uint8_t* slot = qp->rq_ring + (qp->app_rq_producer & (qp->rq_depth - 1)) * qp->rq_stride;
    std::memset(slot, 0, qp->rq_stride);
    encode_recv_wqe(wr, std::span<uint8_t>(slot, qp->rq_stride));
    ++qp->app_rq_producer;
  }
  // seq_cst store then seq_cst load of state: pairs with the engine entering
  // ERROR (store state, then read rq_producer) so that a RECV posted while the
  // QP goes to ERROR is flushed by one side or the other.
  qp->rec->rq_producer.store(qp->app_rq_producer, std::memory_order_seq_cst);
  if (qp->rec->state.load(std::memory_order_seq_cst) == QpState::kError &&
      qp->rec->doorbell_queued.exchange(1, std::memory_order_acq_rel) == 0) {
    dev_->ring_doorbell(qp->qpn);
  }
  return ok_status();
}

Status SharedReceiveQueue::post_recv(std::span<const RecvWr> wrs) {
  detail::SrqView* srq = view_.get();
  if (dev_->dead()) return dev_->fatal_status();
  for (size_t i = 0; i < wrs.size(); ++i) {
    if (wrs[i].sg_list.size() > srq->max_sge) {
      return invalid_argument("srq post_recv: WR " + std::to_string(i) + " exceeds max_sge " + std::to_string(srq->max_sge));
    }
    const uint64_t mp_bytes = static_cast<uint64_t>(srq->mp_strides) * srq->mp_stride_bytes;
    if (srq->mp_strides != 0 && (wrs[i].sg_list.size() != 1 || wrs[i].sg_list[0].length < mp_bytes)) {
      return invalid_argument("srq post_recv: WR " + std::to_string(i) + ": a multi-packet SRQ takes one SGE of " +
                              std::to_string(mp_bytes) + " bytes (mp_strides x mp_stride_bytes)");
    }
  }
  uint64_t in_use = srq->app_producer - srq->app_consumer_cache;
  if (in_use + wrs.size() > srq->depth) {
    srq->app_consumer_cache = srq->rec->consumer.load(std::memory_order_acquire);
    in_use = srq->app_producer - srq->app_consumer_cache;
  }
  if (in_use + wrs.size() > srq->depth) return resource_exhausted("srq post_recv: shared receive queue full");
  for (const RecvWr& wr : wrs) {
    uint8_t* slot = srq->ring + (srq->app_producer & (srq->depth - 1)) * srq->stride;
    std::memset(slot, 0, srq->stride);
    encode_recv_wqe(wr, std::span<uint8_t>(slot, srq->stride));
    ++srq->app_producer;
  }
  srq->rec->producer.store(srq->app_producer, std::memory_order_release);
  return ok_status();
}

Status SharedReceiveQueue::arm_limit(uint32_t limit) {
  if (limit > view_->depth) return invalid_argument("srq arm_limit: limit above the queue depth");
  view_->rec->limit.store(limit, std::memory_order_release);
  return ok_status();
}

uint32_t SharedReceiveQueue::number() const { return view_->number; }
uint32_t SharedReceiveQueue::mp_strides() const { return view_->mp_strides; }
uint32_t SharedReceiveQueue::mp_stride_bytes() const { return view_->mp_stride_bytes; }
uint32_t SharedReceiveQueue::depth() const { return view_->depth; }
uint32_t SharedReceiveQueue::stride() const { return view_->stride; }
std::span<uint8_t> SharedReceiveQueue::ring() const {
  return {view_->ring, static_cast<size_t>(view_->depth) * view_->stride};
}
uint64_t SharedReceiveQueue::posted() const { return view_->app_producer; }
uint64_t SharedReceiveQueue::consumed() const { return view_->rec->consumer.load(std::memory_order_acquire); }

uint32_t QueuePair::qp_num() const { return view_->qpn; }
QpState QueuePair::state() const { return view_->rec->state.load(std::memory_order_acquire); }

Status QueuePair::modify(const QpAttr& attr, uint32_t mask) {
  Status status = dev_->modify_qp(view_->handle, attr, mask);
  if (status.ok() && (mask & kQpState) && attr.state == QpState::kReset) {
    // RESET empties the queues (the NIC zeroed its indices): start over.
    view_->app_sq_producer = view_->app_rq_producer = 0;
    view_->app_sq_freed_cache = view_->app_rq_consumer_cache = 0;
  }
  return status;
}

QpAttr QueuePair::attributes() const {
  Result<QpAttr> attr = dev_->query_qp(view_->handle);
  if (!attr.ok()) {
    QpAttr gone;
    gone.state = QpState::kError;
    return gone;
  }
  return attr.value();
}

QpTraffic QueuePair::traffic() const {
  Result<QpTraffic> t = dev_->qp_traffic(view_->handle);
  return t.ok() ? t.value() : QpTraffic{};
}

std::span<uint8_t> QueuePair::send_ring() const {
  return {view_->sq_ring, static_cast<size_t>(view_->sq_depth) * view_->sq_stride};
}
uint32_t QueuePair::send_stride() const { return view_->sq_stride; }
uint32_t QueuePair::send_depth() const { return view_->sq_depth; }
std::span<uint8_t> QueuePair::recv_ring() const {
  return {view_->rq_ring, static_cast<size_t>(view_->rq_depth) * view_->rq_stride};
}
uint32_t QueuePair::recv_stride() const { return view_->rq_stride; }
uint32_t QueuePair::recv_depth() const { return view_->rq_depth; }
uint8_t* QueuePair::send_wqe(uint64_t index) const {
  return view_->sq_ring + (index & (view_->sq_depth - 1)) * view_->sq_stride;
}
uint8_t* QueuePair::recv_wqe(uint64_t index) const {
  return view_->rq_ring ? view_->rq_ring + (index & (view_->rq_depth - 1)) * view_->rq_stride : nullptr;
}
uint64_t QueuePair::send_posted() const { return view_->app_sq_producer; }
uint64_t QueuePair::recv_posted() const { return view_->app_rq_producer; }
const QpCapabilities& QueuePair::cap() const { return view_->cap; }
bool QueuePair::managed_send() const { return view_->managed_send; }
bool QueuePair::managed_recv() const { return view_->managed_recv; }

}  // namespace ferry::nic
