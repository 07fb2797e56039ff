#include "ferry/nic/connect.h"

namespace ferry::nic {

static Status bring_up(QueuePair& qp, uint32_t dest_nic, uint32_t dest_qp, uint32_t rq_psn, uint32_t sq_psn,
                       const ConnectOptions& o) {
  QpAttr attr;
  attr.state = QpState::kInit;
  attr.access_flags = o.access_flags;
  FERRY_RETURN_IF_ERROR(qp.modify(attr, kQpState | kQpAccessFlags));
  attr.state = QpState::kRtr;
  attr.path_mtu = o.path_mtu;
  attr.dest_nic = dest_nic;
  attr.dest_qp_num = dest_qp;
  attr.rq_psn = rq_psn;
  attr.max_dest_rd_atomic = o.max_rd_atomic;
  attr.min_rnr_timer = o.min_rnr_timer;
  FERRY_RETURN_IF_ERROR(
      qp.modify(attr, kQpState | kQpPathMtu | kQpDest | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer));
  attr.state = QpState::kRts;
  attr.sq_psn = sq_psn;
  attr.timeout = o.timeout;
  attr.retry_cnt = o.retry_cnt;
  attr.rnr_retry = o.rnr_retry;
  attr.max_rd_atomic = o.max_rd_atomic;
  return qp.modify(attr, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic);
}

Status connect_qps(QueuePair& a, const Nic& nic_a, QueuePair& b, const Nic& nic_b, const ConnectOptions& options) {
  FERRY_RETURN_IF_ERROR(bring_up(a, nic_b.address(), b.qp_num(), options.b_psn, options.a_psn, options));
  return bring_up(b, nic_a.address(), a.qp_num(), options.a_psn, options.b_psn, options);
}

Status connect_qp(QueuePair& qp, uint32_t dest_nic, uint32_t dest_qp, uint32_t rq_psn, uint32_t sq_psn,
                  const ConnectOptions& options) {
  return bring_up(qp, dest_nic, dest_qp, rq_psn, sq_psn, options);
}

}  // namespace ferry::nic
