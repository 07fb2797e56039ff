// Completion queues: the NIC writes CQEs into a ring (owner-byte protocol,
// docs/wqe-format.md), the application polls them; count-only CQs only
// count. Armed CQs raise one event on their completion channel.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "device.h"
#include "nic_core.h"

namespace ferry::nic {
namespace detail {

void NicCore::complete(CqCore* cq, const WorkCompletion& wc) {
  if (cq->rec->error.load(std::memory_order_relaxed)) return;  // an overrun CQ drops completions
  if (!cq->count_only) {
    if (cq_full(cq)) {
      cq_overrun(cq);
      return;
    }
    Cqe* cqe = &cq->ring[cq->produced & (cq->depth - 1)];
    cqe->wr_id = wc.wr_id;
    cqe->byte_len = wc.byte_len;
    cqe->imm_data = wc.imm_data;
    cqe->qp_num = wc.qp_num;
    cqe->src_qp = wc.src_qp;
    cqe->wqe_index = static_cast<uint16_t>(wc.wqe_index);
    cqe->opcode = static_cast<uint8_t>(wc.opcode);
    cqe->status = static_cast<uint8_t>(wc.status);
    cqe->flags = static_cast<uint8_t>((wc.has_imm ? kCqeFlagImm : 0) | (wc.solicited ? kCqeFlagSolicited : 0) |
                                      (wc.mp_buffer_done ? kCqeFlagMpBufferDone : 0) |
                                      (wc.mp_filler ? kCqeFlagMpFiller : 0));
    cqe->stride_index = wc.stride_index;
    cqe->mp_strides_consumed = wc.mp_strides_consumed;
    const uint8_t owner = static_cast<uint8_t>(((cq->produced / cq->depth) & 1) + 1);
    std::atomic_ref<uint8_t>(cqe->owner).store(owner, std::memory_order_release);
    counters_.cqes_written.inc();
  }
  ++cq->produced;
  cq->rec->total.store(cq->produced, std::memory_order_release);
  if (cq->waiters != nullptr) wake_waiters(cq);
  const uint8_t armed = cq->rec->armed.load(std::memory_order_acquire);
  if (armed != 0 && cq->channel != nullptr) {
    const bool fire = armed == 1 || wc.solicited || wc.status != WcStatus::kSuccess;
    if (fire && cq->rec->armed.exchange(0, std::memory_order_acq_rel) != 0) {
      cq->channel->post(cq->number);
    }
  }
}

void ChannelCore::post(uint32_t cq_number) {
  const uint64_t tail = rec->tail.load(std::memory_order_relaxed);  // the engine is the only producer
  if (tail - rec->head.load(std::memory_order_acquire) < ChannelRecord::kCapacity) {
    rec->cq[tail % ChannelRecord::kCapacity] = cq_number;
    rec->tail.store(tail + 1, std::memory_order_release);
  } else {
    rec->dropped.fetch_add(1, std::memory_order_relaxed);
  }
  const uint64_t one = 1;
  ssize_t n = write(event_fd, &one, sizeof(one));
  (void)n;
}

void NicCore::cq_overrun(CqCore* cq) {
  cq->rec->error.store(true, std::memory_order_release);
  push_async_event({AsyncEventType::kCqError, cq->number});
  // verbs-semantics: the CQ goes to error and the QPs using it too.
  for (auto& qp : qps_) {
    if (qp && (qp->send_cq == cq || qp->recv_cq == cq) && qp->state != QpState::kError) {
      push_async_event({AsyncEventType::kQpFatal, qp->qpn});
      enter_error(qp.get());
    }
  }
}

}  // namespace detail

CompletionQueue::CompletionQueue(detail::Device* dev, std::unique_ptr<detail::CqView> view,
                                 CompletionChannel* channel)
    : dev_(dev), view_(std::move(view)), channel_(channel) {}

Result<uint32_t> CompletionQueue::poll(std::span<WorkCompletion> out) {
  detail::CqView* cq = view_.get();
  if (cq->count_only) return invalid_argument("poll: CQ " + std::to_string(cq->number) + " is count-only");
  uint32_t n = 0;
  while (n < out.size()) {
    const Cqe* cqe = &cq->ring[consumer_ & (cq->depth - 1)];
    const uint8_t expected = static_cast<uint8_t>(((consumer_ / cq->depth) & 1) + 1);
    const uint8_t owner = std::atomic_ref<const uint8_t>(cqe->owner).load(std::memory_order_acquire);
    if (owner != expected) break;
    WorkCompletion& wc = out[n];
    wc.wr_id = cqe->wr_id;
    wc.byte_len = cqe->byte_len;
    wc.imm_data = cqe->imm_data;
    wc.qp_num = cqe->qp_num;
    wc.src_qp = cqe->src_qp;
    wc.wqe_index = cqe->wqe_index;
    wc.opcode = static_cast<WcOpcode>(cqe->opcode);
    wc.status = static_cast<WcStatus>(cqe->status);
    wc.has_imm = (cqe->flags & kCqeFlagImm) != 0;
    wc.solicited = (cqe->flags & kCqeFlagSolicited) != 0;
    wc.mp_buffer_done = (cqe->flags & kCqeFlagMpBufferDone) != 0;
    wc.mp_filler = (cqe->flags & kCqeFlagMpFiller) != 0;
    wc.stride_index = cqe->stride_index;
    wc.mp_strides_consumed = cqe->mp_strides_consumed;
    ++consumer_;
    ++n;
  }
  if (n != 0) {
    cq->rec->consumer.store(consumer_, std::memory_order_release);
    return n;
  }
  if (cq->rec->error.load(std::memory_order_acquire)) {
    return failed_precondition("poll: CQ " + std::to_string(cq->number) + " overran and is in error");
  }
  if (dev_->dead()) return dev_->fatal_status();
  return 0u;
}

Status CompletionQueue::req_notify(bool solicited_only) {
  if (!view_->has_channel) return failed_precondition("req_notify: CQ has no completion channel");
  if (dev_->dead()) return dev_->fatal_status();
  view_->rec->armed.store(solicited_only ? 2 : 1, std::memory_order_release);
  return ok_status();
}

uint64_t CompletionQueue::completions_total() const { return view_->rec->total.load(std::memory_order_acquire); }
uint32_t CompletionQueue::number() const { return view_->number; }
uint32_t CompletionQueue::capacity() const { return view_->depth; }
bool CompletionQueue::count_only() const { return view_->count_only; }

CompletionChannel::CompletionChannel(detail::Device* dev, std::unique_ptr<detail::ChannelView> view)
    : dev_(dev), view_(std::move(view)) {}
CompletionChannel::~CompletionChannel() {
  // Destroyed before its CQs (verbs would refuse with EBUSY): they must not
  // reach back into it when they go.
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [number, cq] : cqs_) cq->channel_ = nullptr;
  }
  dev_->destroy_channel(*view_);
}
int CompletionChannel::fd() const { return view_->event_fd; }

Result<CompletionQueue*> CompletionChannel::take_event() {
  std::lock_guard<std::mutex> lock(mu_);
  detail::ChannelRecord* rec = view_->rec;
  for (;;) {
    const uint64_t head = rec->head.load(std::memory_order_relaxed);  // consumers hold mu_
    if (head == rec->tail.load(std::memory_order_acquire)) return not_found("no event");
    const uint32_t number = rec->cq[head % detail::ChannelRecord::kCapacity];
    rec->head.store(head + 1, std::memory_order_release);
    auto it = cqs_.find(number);
    if (it != cqs_.end()) return it->second;
    // An event of a CQ destroyed since: dropped, as verbs does.
  }
}

Result<CompletionQueue*> CompletionChannel::get_event(int timeout_ms) {
  // The event ring is the truth; the eventfd only wakes pollers and is
  // drained whenever it is seen readable. A wake-up that finds no event (its
  // event was taken by another waiter) waits only for what is left of the
  // timeout.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    Result<CompletionQueue*> event = take_event();
    if (event.ok()) return event;
    if (dev_->dead()) return dev_->fatal_status();
    int wait_ms = timeout_ms;
    if (timeout_ms >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      wait_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    // A daemon-attached channel also wakes when the device dies: then the
    // backend writes the eventfd itself.
    pollfd pfd{view_->event_fd, POLLIN, 0};
    const int rc = ::poll(&pfd, 1, wait_ms);
    if (rc == 0) {
      return timed_out("get_event: no completion event within " + std::to_string(timeout_ms) + " ms");
    }
    if (rc < 0) {
      if (errno == EINTR) continue;
      return internal_error("get_event: poll failed");
    }
    uint64_t drained;
    ssize_t n = read(view_->event_fd, &drained, sizeof(drained));
    (void)n;
  }
}

}  // namespace ferry::nic
