// NicHosting: the NIC daemon's control operations, translated from object
// numbers to the engine-side objects and back into plain descriptions.
#include "hosting.h"

#include <utility>

#include "ferry/common/assert.h"
#include "nic_core.h"

namespace ferry::nic::detail {

HostedChannel::HostedChannel(std::unique_ptr<ChannelCore> core) : core_(std::move(core)) {}
HostedChannel::~HostedChannel() = default;
ChannelRecord* HostedChannel::record() const { return core_->rec; }
int HostedChannel::event_fd() const { return core_->event_fd; }

NicHosting::NicHosting(Nic& nic) : core_(nic.core()) {
  FERRY_ASSERT(core_ != nullptr, "NicHosting: the NIC must run in this process");
}

void NicHosting::attach_doorbells(DoorbellRing* ring, uint32_t owner) { core_->attach_doorbells(ring, owner); }
void NicHosting::detach_doorbells(uint32_t owner) { core_->detach_doorbells(owner); }

uint32_t NicHosting::alloc_pd() { return core_->alloc_pd(); }
void NicHosting::dealloc_pd(uint32_t pd) { core_->dealloc_pd(pd); }
uint32_t NicHosting::pd_refs(uint32_t pd) const { return core_->pd_refs(pd); }

Result<uint32_t> NicHosting::reg_mr(uint32_t pd, uint8_t* addr, size_t length, uint32_t access, uint64_t iova) {
  return core_->reg_mr(pd, addr, length, access, iova);
}

void NicHosting::dereg_mr(uint32_t key) {
  if (core_->find_mr(key) != nullptr) core_->dereg_mr(key);
}

const uint8_t* NicHosting::mr_base(uint32_t key) const {
  const MrEntry* mr = core_->find_mr(key);
  return mr != nullptr ? mr->base : nullptr;
}

Result<std::unique_ptr<HostedChannel>> NicHosting::create_channel(RecordArena* arena) {
  auto core = std::make_unique<ChannelCore>(arena);
  if (!core->ok()) return resource_exhausted("no room for a completion channel");
  return std::unique_ptr<HostedChannel>(new HostedChannel(std::move(core)));
}

void NicHosting::detach_channel(const HostedChannel& channel) { core_->detach_channel(channel.core_.get()); }

Result<HostedCq> NicHosting::create_cq(const CqInitAttr& attr, HostedChannel* channel, RecordArena* arena,
                                       uint32_t owner) {
  FERRY_ASSIGN_OR_RETURN(const CqCore* cq,
                         core_->create_cq(attr, channel != nullptr ? channel->core_.get() : nullptr, arena, owner));
  return HostedCq{.number = cq->number, .depth = cq->depth, .record = cq->rec, .ring = cq->ring};
}

uint32_t NicHosting::cq_users(uint32_t number) const {
  const CqCore* cq = core_->find_cq(number);
  return cq != nullptr ? cq->users : 0;
}

void NicHosting::destroy_cq(uint32_t number) {
  if (CqCore* cq = core_->find_cq(number)) core_->destroy_cq(cq);
}

Result<HostedSrq> NicHosting::create_srq(uint32_t pd, const SrqInitAttr& attr, RecordArena* arena, uint32_t owner) {
  FERRY_ASSIGN_OR_RETURN(const SrqCore* srq, core_->create_srq(pd, attr, arena, owner));
  return HostedSrq{.number = srq->number,
                   .depth = srq->depth,
                   .stride = srq->stride,
                   .max_sge = srq->max_sge,
                   .mp_strides = srq->mp_strides,
                   .mp_stride_bytes = srq->mp_stride_bytes,
                   .record = srq->rec,
                   .ring = srq->ring};
}

uint32_t NicHosting::srq_users(uint32_t number) const {
  const SrqCore* srq = core_->find_srq(number);
  return srq != nullptr ? srq->users : 0;
}

void NicHosting::destroy_srq(uint32_t number) {
  if (SrqCore* srq = core_->find_srq(number)) core_->destroy_srq(srq);
}

Result<HostedQp> NicHosting::create_qp(uint32_t pd, const QpInitAttr& attr, uint32_t send_cq, uint32_t recv_cq,
                                       uint32_t srq, RecordArena* arena, uint32_t owner) {
  FERRY_ASSIGN_OR_RETURN(const QpCore* qp, core_->create_qp(pd, attr, core_->find_cq(send_cq), core_->find_cq(recv_cq),
                                                            srq != 0 ? core_->find_srq(srq) : nullptr, arena, owner));
  return HostedQp{.qpn = qp->qpn,
                  .sq_depth = qp->sq_depth,
                  .sq_stride = qp->sq_stride,
                  .rq_depth = qp->rq_depth,
                  .rq_stride = qp->rq_stride,
                  .cap = qp->cap,
                  .record = qp->rec,
                  .free_marks = qp->free_marks,
                  .sq_ring = qp->sq_ring,
                  .rq_ring = qp->rq_ring};
}

void NicHosting::force_error(uint32_t qpn) {
  if (QpCore* qp = core_->find_qp(qpn)) core_->force_error(qp);
}

void NicHosting::destroy_qp(uint32_t qpn) {
  if (QpCore* qp = core_->find_qp(qpn)) core_->destroy_qp(qp);
}

Status NicHosting::modify_qp(uint32_t qpn, const QpAttr& attr, uint32_t mask) {
  QpCore* qp = core_->find_qp(qpn);
  if (qp == nullptr) return not_found("modify_qp: no QP " + std::to_string(qpn));
  return core_->modify_qp(qp, attr, mask);
}

Result<QpAttr> NicHosting::query_qp(uint32_t qpn) const {
  const QpCore* qp = core_->find_qp(qpn);
  if (qp == nullptr) return not_found("query_qp: no QP " + std::to_string(qpn));
  QpAttr attr = qp->attr;
  attr.state = qp->state;
  return attr;
}

Result<QpTraffic> NicHosting::qp_traffic(uint32_t qpn) const {
  const QpCore* qp = core_->find_qp(qpn);
  if (qp == nullptr) return not_found("qp_traffic: no QP " + std::to_string(qpn));
  return qp->traffic();
}

std::optional<AsyncEvent> NicHosting::pop_async_event() { return core_->pop_async_event(); }

}  // namespace ferry::nic::detail
