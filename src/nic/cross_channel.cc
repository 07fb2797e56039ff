// Cross-channel (CORE-Direct) requests, Ferry's model of mlx5 cd_master /
// cd_slave queues (docs/wqe-format.md, "Managed queues and cross-channel requests"):
//   WAIT {cq, index}: the queue holding it stalls until the CQ has produced
//     `index` completions in total (absolute since creation). No traffic.
//   SEND_ENABLE / RECV_ENABLE {qp, index}: a managed queue of this NIC may
//     execute (expose) WQEs below `index`. Enables only move forward.
// Both are confined to the executing queue's protection domain.
#include "nic_core.h"

namespace ferry::nic::detail {

NicCore::CrossChannelResult NicCore::execute_wait(QpCore* qp, const DecodedSendWqe& wqe) {
  CqCore* cq = find_cq(wqe.remote.rkey);
  // Protection: a queue may only wait on a CQ that a QP of its own PD uses,
  // so a tenant cannot pace its queues on (or probe) another tenant's CQs.
  if (cq == nullptr || !cq->used_by_pd(qp->pd)) return CrossChannelResult::kBad;
  if (cq->produced >= wqe.remote.remote_addr) return CrossChannelResult::kDone;
  if (!qp->waiting_cq) {
    qp->waiting_cq = true;
    qp->wait_next = cq->waiters;
    cq->waiters = qp;
  }
  return CrossChannelResult::kBlocked;
}

void NicCore::wake_waiters(CqCore* cq) {
  QpCore* list = cq->waiters;
  cq->waiters = nullptr;
  while (list != nullptr) {
    QpCore* qp = list;
    list = qp->wait_next;
    qp->wait_next = nullptr;
    qp->waiting_cq = false;
    make_ready(qp);  // re-reads its WAIT and checks the count again
  }
}

NicCore::CrossChannelResult NicCore::execute_enable(QpCore* qp, const DecodedSendWqe& wqe) {
  QpCore* target = find_qp(wqe.remote.rkey);
  // Protection: only a queue of the same PD may be enabled; otherwise any QP
  // on the host could run another tenant's pre-posted (or rewritten) WQEs.
  if (target == nullptr || target->pd != qp->pd) return CrossChannelResult::kBad;
  const uint64_t index = wqe.remote.remote_addr;
  if (wqe.opcode == WrOpcode::kSendEnable) {
    if (!target->managed_send) return CrossChannelResult::kBad;
    if (index > target->sq_enable) {
      target->sq_enable = index;
      make_ready(target);
    }
  } else {
    if (!target->managed_recv) return CrossChannelResult::kBad;
    if (index > target->rq_enable) target->rq_enable = index;
  }
  return CrossChannelResult::kDone;
}

}  // namespace ferry::nic::detail
