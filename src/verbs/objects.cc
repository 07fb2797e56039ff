// libibverbs over the NIC daemon: protection domains, memory regions,
// completion channels and queues, SRQs and RC queue pairs
// (docs/verbs-compat.md).
//
// Destroying an object that others still use returns EBUSY, as the kernel
// does, where Ferry's own API would assert. Memory a program registers is
// its own (malloc'd, on its stack, ...), which the daemon cannot reach:
// ibv_reg_mr moves those pages into a memory file in place
// (SharedMemory::adopt) and the daemon maps the file.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "../nic/device.h"
#include "verbs_internal.h"

namespace ferry::verbs {

namespace {

uint32_t access_from_ibv(unsigned int access) {
  uint32_t a = 0;
  if (access & IBV_ACCESS_LOCAL_WRITE) a |= nic::kAccessLocalWrite;
  if (access & IBV_ACCESS_REMOTE_WRITE) a |= nic::kAccessRemoteWrite;
  if (access & IBV_ACCESS_REMOTE_READ) a |= nic::kAccessRemoteRead;
  if (access & IBV_ACCESS_REMOTE_ATOMIC) a |= nic::kAccessRemoteAtomic;
  return a;
}

unsigned int access_to_ibv(uint32_t a) {
  unsigned int access = 0;
  if (a & nic::kAccessLocalWrite) access |= IBV_ACCESS_LOCAL_WRITE;
  if (a & nic::kAccessRemoteWrite) access |= IBV_ACCESS_REMOTE_WRITE;
  if (a & nic::kAccessRemoteRead) access |= IBV_ACCESS_REMOTE_READ;
  if (a & nic::kAccessRemoteAtomic) access |= IBV_ACCESS_REMOTE_ATOMIC;
  return access;
}

// The protection of every mapping covering [start, end), if they all are
// private and agree; -1 otherwise (a shared file mapping is not ours to
// move into another file; unmapped pages cannot be registered).
int private_protection(uintptr_t start, uintptr_t end) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uintptr_t covered = start;
  int prot = -2;
  while (std::getline(maps, line) && covered < end) {
    std::istringstream in(line);
    std::string range, perms;
    in >> range >> perms;
    const size_t dash = range.find('-');
    const uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (hi <= covered) continue;
    std::string offset, device, inode, name;
    in >> offset >> device >> inode >> name;
    // Pages adopted before and released since are a memory file of ours.
    const bool ours = name.rfind("/memfd:ferry-adopted", 0) == 0;
    if (lo > covered || perms.size() < 4 || (perms[3] != 'p' && !ours) || perms[0] != 'r') return -1;
    const int p = PROT_READ | (perms[1] == 'w' ? PROT_WRITE : 0);
    if (prot != -2 && p != prot) return -1;
    prot = p;
    covered = hi;
  }
  return covered >= end ? prot : -1;
}

// The adopted ranges. Never destroyed: a program that exits with MRs
// registered must not run their destructors after the mapping registry's
// (shared_memory.cc).
std::mutex& adopted_mu = *new std::mutex;
std::map<uintptr_t, std::unique_ptr<Adopted>>& adopted_ranges =
    *new std::map<uintptr_t, std::unique_ptr<Adopted>>;  // by base address

// Makes [addr, addr + length) reachable by the daemon: inside a
// SharedMemory already (the program's own, or pages an earlier MR
// adopted), or by adopting its pages now. Returns the adoption the MR
// holds, nullptr when none was needed.
Result<Adopted*> make_shared(void* addr, size_t length) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  std::lock_guard<std::mutex> lock(adopted_mu);
  auto it = adopted_ranges.upper_bound(a);
  if (it != adopted_ranges.begin()) {
    Adopted* prev = std::prev(it)->second.get();
    const auto base = reinterpret_cast<uintptr_t>(prev->memory.data());
    if (a >= base && a + length <= base + prev->memory.size()) {
      ++prev->mrs;
      return prev;
    }
  }
  if (nic::detail::find_shared_mapping(a, length)) return static_cast<Adopted*>(nullptr);
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = a & ~(page - 1);
  const uintptr_t end = (a + length + page - 1) & ~(page - 1);
  // Pages an earlier MR adopted cannot move again (the daemon maps them).
  for (const auto& [base, adopted] : adopted_ranges) {
    if (base < end && base + adopted->memory.size() > start) {
      return invalid_argument("the range overlaps part of an earlier MR's pages (register the union instead)");
    }
  }
  const int prot = private_protection(start, end);
  if (prot < 0) return invalid_argument("the range is not all private readable memory of this process");
  Result<nic::SharedMemory> m = nic::SharedMemory::adopt(reinterpret_cast<void*>(start), end - start, prot);
  if (!m.ok()) return m.status();
  auto adopted = std::make_unique<Adopted>();
  adopted->memory = std::move(*m);
  adopted->mrs = 1;
  Adopted* raw = adopted.get();
  adopted_ranges[start] = std::move(adopted);
  return raw;
}

void release_adopted(Adopted* a) {
  if (a == nullptr) return;
  std::lock_guard<std::mutex> lock(adopted_mu);
  if (--a->mrs == 0) adopted_ranges.erase(reinterpret_cast<uintptr_t>(a->memory.data()));
}

// What the program sees of a QP's queues: the NIC's rounded-up sizes, no
// receive queue of its own on an SRQ.
ibv_qp_cap cap_of(const FerryQp& f) {
  const nic::QpCapabilities& cap = f.qp_->cap();
  ibv_qp_cap out{};
  out.max_send_wr = cap.max_send_wr;
  out.max_recv_wr = f.qp.srq != nullptr ? 0 : cap.max_recv_wr;
  out.max_send_sge = cap.max_send_sge;
  out.max_recv_sge = cap.max_recv_sge;
  out.max_inline_data = cap.max_inline_data;
  return out;
}

ibv_qp_state state_to_ibv(nic::QpState s) {
  switch (s) {
    case nic::QpState::kReset:
      return IBV_QPS_RESET;
    case nic::QpState::kInit:
      return IBV_QPS_INIT;
    case nic::QpState::kRtr:
      return IBV_QPS_RTR;
    case nic::QpState::kRts:
      return IBV_QPS_RTS;
    case nic::QpState::kError:
      break;
  }
  return IBV_QPS_ERR;
}

}  // namespace

}  // namespace ferry::verbs

using namespace ferry;
using namespace ferry::verbs;

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  FerryContext* c = ctx_of(context);
  Result<std::unique_ptr<nic::ProtectionDomain>> pd = c->nic->alloc_pd();
  if (!pd.ok()) return fail<ibv_pd>(errno_for(pd.status()));
  auto* p = new FerryPd{};
  p->pd_ = std::move(*pd);
  p->pd.context = context;
  p->pd.handle = p->pd_->handle();
  ++c->objects;
  return &p->pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  auto* p = reinterpret_cast<FerryPd*>(pd);
  if (p->users.load() != 0) return EBUSY;
  --ctx_of(pd)->objects;
  delete p;
  return 0;
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  FerryContext* c = ctx_of(pd);
  // Optional access bits (IBV_ACCESS_OPTIONAL_RANGE: relaxed ordering, ...)
  // a provider may ignore; the rest it must honour or refuse.
  const unsigned int mandatory = access & ~static_cast<unsigned int>(IBV_ACCESS_OPTIONAL_RANGE);
  constexpr unsigned int kSupported =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if ((mandatory & ~kSupported) != 0) {
    debug_log("ibv_reg_mr: access flags beyond local/remote write, read and atomic are not supported");
    return fail<ibv_mr>(EOPNOTSUPP);
  }
  if (iova != reinterpret_cast<uintptr_t>(addr)) {
    debug_log("ibv_reg_mr: an IOVA other than the address is not supported");
    return fail<ibv_mr>(EOPNOTSUPP);
  }
  if (length == 0 || addr == nullptr) return fail<ibv_mr>(EINVAL);
  Result<Adopted*> adopted = make_shared(addr, length);
  if (!adopted.ok()) {
    debug_log("ibv_reg_mr: " + adopted.status().to_string());
    return fail<ibv_mr>(EINVAL);
  }
  auto* p = reinterpret_cast<FerryPd*>(pd);
  Result<std::unique_ptr<nic::MemoryRegion>> mr = c->nic->reg_mr(*p->pd_, addr, length, access_from_ibv(mandatory));
  if (!mr.ok()) {
    release_adopted(*adopted);
    debug_log("ibv_reg_mr: " + mr.status().to_string());
    return fail<ibv_mr>(errno_for(mr.status()));
  }
  auto* m = new FerryMr{};
  m->mr_ = std::move(*mr);
  m->adopted = *adopted;
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.handle = m->mr_->lkey();
  m->mr.lkey = m->mr_->lkey();
  m->mr.rkey = m->mr_->rkey();
  ++p->users;
  ++c->objects;
  return &m->mr;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uintptr_t>(addr), static_cast<unsigned int>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, static_cast<unsigned int>(access));
}

int ibv_dereg_mr(ibv_mr* mr) {
  auto* m = reinterpret_cast<FerryMr*>(mr);
  FerryContext* c = ctx_of(mr->context);
  auto* p = reinterpret_cast<FerryPd*>(mr->pd);
  Adopted* adopted = m->adopted;
  delete m;  // deregisters before the pages can be released
  release_adopted(adopted);
  --p->users;
  --c->objects;
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  FerryContext* c = ctx_of(context);
  Result<std::unique_ptr<nic::CompletionChannel>> ch = c->nic->create_comp_channel();
  if (!ch.ok()) return fail<ibv_comp_channel>(errno_for(ch.status()));
  auto* f = new FerryChannel{};
  f->ch_ = std::move(*ch);
  f->ch.context = context;
  f->ch.fd = f->ch_->fd();
  // A channel's fd blocks until the program makes it non-blocking;
  // ibv_get_cq_event reads which it is from the flags.
  const int flags = fcntl(f->ch.fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) != 0) (void)fcntl(f->ch.fd, F_SETFL, flags & ~O_NONBLOCK);
  f->ch.refcnt = 0;
  ++c->objects;
  return &f->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  auto* f = reinterpret_cast<FerryChannel*>(channel);
  {
    std::lock_guard<std::mutex> lock(f->mu);
    if (!f->cqs.empty()) return EBUSY;
  }
  --ctx_of(channel->context)->objects;
  delete f;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
  if (cqe <= 0 || comp_vector < 0 || comp_vector >= context->num_comp_vectors) return fail<ibv_cq>(EINVAL);
  FerryContext* c = ctx_of(context);
  auto* ch = reinterpret_cast<FerryChannel*>(channel);
  nic::CqInitAttr attr;
  attr.cqe = static_cast<uint32_t>(cqe);
  attr.channel = ch != nullptr ? ch->ch_.get() : nullptr;
  Result<std::unique_ptr<nic::CompletionQueue>> cq = c->nic->create_cq(attr);
  if (!cq.ok()) {
    debug_log("ibv_create_cq: " + cq.status().to_string());
    return fail<ibv_cq>(errno_for(cq.status()));
  }
  auto* f = new FerryCq{};
  f->cq_ = std::move(*cq);
  f->cq.context = context;
  f->cq.channel = channel;
  f->cq.cq_context = cq_context;
  f->cq.handle = f->cq_->number();
  f->cq.cqe = static_cast<int>(f->cq_->capacity());
  pthread_mutex_init(&f->cq.mutex, nullptr);
  pthread_cond_init(&f->cq.cond, nullptr);
  if (ch != nullptr) {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->cqs[f->cq_.get()] = f;
    ++ch->ch.refcnt;
  }
  ++c->objects;
  return &f->cq;
}

int ibv_destroy_cq(ibv_cq* cq) {
  auto* f = reinterpret_cast<FerryCq*>(cq);
  if (f->users.load() != 0) return EBUSY;
  if (auto* ch = reinterpret_cast<FerryChannel*>(cq->channel)) {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->cqs.erase(f->cq_.get());
    --ch->ch.refcnt;
  }
  --ctx_of(cq->context)->objects;
  pthread_mutex_destroy(&cq->mutex);
  pthread_cond_destroy(&cq->cond);
  delete f;
  return 0;
}

int ibv_resize_cq(ibv_cq*, int) { return EOPNOTSUPP; }

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  auto* ch = reinterpret_cast<FerryChannel*>(channel);
  const bool nonblocking = (fcntl(channel->fd, F_GETFL) & O_NONBLOCK) != 0;
  Result<nic::CompletionQueue*> got = ch->ch_->get_event(nonblocking ? 0 : -1);
  if (!got.ok()) {
    errno = got.status().code() == Code::kTimedOut ? EAGAIN : errno_for(got.status());
    return -1;
  }
  FerryCq* f = nullptr;
  {
    std::lock_guard<std::mutex> lock(ch->mu);
    auto it = ch->cqs.find(*got);
    if (it != ch->cqs.end()) f = it->second;
  }
  if (f == nullptr) {
    errno = EIO;
    return -1;
  }
  *cq = &f->cq;
  *cq_context = f->cq.cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_broadcast(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
  FerryContext* c = ctx_of(pd);
  auto* p = reinterpret_cast<FerryPd*>(pd);
  nic::SrqInitAttr attr;
  attr.max_wr = init->attr.max_wr;
  attr.max_sge = init->attr.max_sge;
  attr.srq_limit = init->attr.srq_limit;
  Result<std::unique_ptr<nic::SharedReceiveQueue>> srq = c->nic->create_srq(*p->pd_, attr);
  if (!srq.ok()) {
    debug_log("ibv_create_srq: " + srq.status().to_string());
    return fail<ibv_srq>(errno_for(srq.status()));
  }
  auto* f = new FerrySrq{};
  f->srq_ = std::move(*srq);
  f->max_sge = attr.max_sge;
  f->srq.context = pd->context;
  f->srq.srq_context = init->srq_context;
  f->srq.pd = pd;
  f->srq.handle = f->srq_->number();
  pthread_mutex_init(&f->srq.mutex, nullptr);
  pthread_cond_init(&f->srq.cond, nullptr);
  init->attr.max_wr = f->srq_->depth();
  ++p->users;
  ++c->objects;
  return &f->srq;
}

int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  auto* f = reinterpret_cast<FerrySrq*>(srq);
  if (mask & IBV_SRQ_MAX_WR) return EINVAL;  // no resizing, as most providers
  if (mask & IBV_SRQ_LIMIT) {
    const Status s = f->srq_->arm_limit(attr->srq_limit);
    if (!s.ok()) return errno_for(s);
  }
  return 0;
}

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  auto* f = reinterpret_cast<FerrySrq*>(srq);
  *attr = ibv_srq_attr{};
  attr->max_wr = f->srq_->depth();
  attr->max_sge = f->max_sge;
  return 0;
}

int ibv_destroy_srq(ibv_srq* srq) {
  auto* f = reinterpret_cast<FerrySrq*>(srq);
  if (f->users.load() != 0) return EBUSY;
  --reinterpret_cast<FerryPd*>(srq->pd)->users;
  --ctx_of(srq->context)->objects;
  pthread_mutex_destroy(&srq->mutex);
  pthread_cond_destroy(&srq->cond);
  delete f;
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  if (init->qp_type != IBV_QPT_RC) {
    debug_log("ibv_create_qp: only RC queue pairs");
    return fail<ibv_qp>(EOPNOTSUPP);
  }
  if (init->send_cq == nullptr || init->recv_cq == nullptr) return fail<ibv_qp>(EINVAL);
  FerryContext* c = ctx_of(pd);
  auto* p = reinterpret_cast<FerryPd*>(pd);
  auto* scq = reinterpret_cast<FerryCq*>(init->send_cq);
  auto* rcq = reinterpret_cast<FerryCq*>(init->recv_cq);
  auto* srq = reinterpret_cast<FerrySrq*>(init->srq);
  nic::QpInitAttr attr;
  attr.send_cq = scq->cq_.get();
  attr.recv_cq = rcq->cq_.get();
  attr.srq = srq != nullptr ? srq->srq_.get() : nullptr;
  attr.cap.max_send_wr = init->cap.max_send_wr;
  attr.cap.max_recv_wr = srq != nullptr ? 0 : init->cap.max_recv_wr;
  attr.cap.max_send_sge = std::max(init->cap.max_send_sge, 1u);
  attr.cap.max_recv_sge = std::max(init->cap.max_recv_sge, 1u);
  attr.cap.max_inline_data = init->cap.max_inline_data;
  attr.sq_sig_all = init->sq_sig_all != 0;
  Result<std::unique_ptr<nic::QueuePair>> qp = c->nic->create_qp(*p->pd_, attr);
  if (!qp.ok()) {
    debug_log("ibv_create_qp: " + qp.status().to_string());
    return fail<ibv_qp>(errno_for(qp.status()));
  }
  auto* f = new FerryQp{};
  f->qp_ = std::move(*qp);
  f->sq_sig_all = attr.sq_sig_all;
  ibv_qp& q = f->qp;
  q.context = pd->context;
  q.qp_context = init->qp_context;
  q.pd = pd;
  q.send_cq = init->send_cq;
  q.recv_cq = init->recv_cq;
  q.srq = init->srq;
  q.handle = f->qp_->qp_num();
  q.qp_num = f->qp_->qp_num();
  q.state = IBV_QPS_RESET;
  q.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  init->cap = cap_of(*f);
  ++p->users;
  ++scq->users;
  ++rcq->users;
  if (srq != nullptr) ++srq->users;
  ++c->objects;
  return &q;
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  auto* f = reinterpret_cast<FerryQp*>(qp);
  FerryContext* c = ctx_of(qp->context);
  constexpr int kUnsupported =
      IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_RATE_LIMIT | IBV_QP_QKEY | IBV_QP_EN_SQD_ASYNC_NOTIFY;
  if (mask & kUnsupported) return EINVAL;
  nic::QpAttr a = f->qp_->attributes();
  uint32_t m = 0;
  if (mask & IBV_QP_STATE) {
    m |= nic::kQpState;
    switch (attr->qp_state) {
      case IBV_QPS_RESET:
        a.state = nic::QpState::kReset;
        break;
      case IBV_QPS_INIT:
        a.state = nic::QpState::kInit;
        break;
      case IBV_QPS_RTR:
        a.state = nic::QpState::kRtr;
        break;
      case IBV_QPS_RTS:
        a.state = nic::QpState::kRts;
        break;
      case IBV_QPS_ERR:
        a.state = nic::QpState::kError;
        break;
      default:  // SQD, SQE: not modeled
        return EINVAL;
    }
  }
  if ((mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
  if (mask & IBV_QP_ACCESS_FLAGS) {
    m |= nic::kQpAccessFlags;
    a.access_flags = access_from_ibv(attr->qp_access_flags);
  }
  if (mask & IBV_QP_PATH_MTU) {
    if (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096) return EINVAL;
    m |= nic::kQpPathMtu;
    a.path_mtu = 128u << attr->path_mtu;
  }
  // Ferry's address vector is the destination NIC and QP together.
  if ((mask & IBV_QP_AV) && (mask & IBV_QP_DEST_QPN)) {
    const ibv_ah_attr& ah = attr->ah_attr;
    if (!ah.is_global) {
      debug_log("ibv_modify_qp: a RoCE address needs the GRH (is_global, the peer's GID)");
      return EINVAL;
    }
    nic::Gid gid;
    std::memcpy(gid.raw.data(), ah.grh.dgid.raw, 16);
    Result<nic::UdpEndpoint> ep = nic::UdpEndpoint::from_gid(gid, c->udp_port);
    if (!ep.ok()) {
      debug_log("ibv_modify_qp: " + ep.status().to_string());
      return EINVAL;
    }
    Result<uint32_t> dest = c->nic->resolve(*ep);
    if (!dest.ok()) {
      debug_log("ibv_modify_qp: " + dest.status().to_string());
      return errno_for(dest.status());
    }
    m |= nic::kQpDest;
    a.dest_nic = *dest;
    a.dest_qp_num = attr->dest_qp_num;
    f->ah = ah;
  } else if (mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) {
    return EINVAL;
  }
  if (mask & IBV_QP_RQ_PSN) {
    m |= nic::kQpRqPsn;
    a.rq_psn = attr->rq_psn & 0xFFFFFF;
  }
  if (mask & IBV_QP_SQ_PSN) {
    m |= nic::kQpSqPsn;
    a.sq_psn = attr->sq_psn & 0xFFFFFF;
  }
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    m |= nic::kQpMaxDestRdAtomic;
    a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  }
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) {
    m |= nic::kQpMaxRdAtomic;
    a.max_rd_atomic = attr->max_rd_atomic;
  }
  if (mask & IBV_QP_MIN_RNR_TIMER) {
    m |= nic::kQpMinRnrTimer;
    a.min_rnr_timer = attr->min_rnr_timer;
  }
  if (mask & IBV_QP_TIMEOUT) {
    m |= nic::kQpTimeout;
    a.timeout = attr->timeout;
  }
  if (mask & IBV_QP_RETRY_CNT) {
    m |= nic::kQpRetryCnt;
    a.retry_cnt = attr->retry_cnt;
  }
  if (mask & IBV_QP_RNR_RETRY) {
    m |= nic::kQpRnrRetry;
    a.rnr_retry = attr->rnr_retry;
  }
  const Status s = f->qp_->modify(a, m);
  if (!s.ok()) {
    debug_log("ibv_modify_qp: " + s.to_string());
    return errno_for(s);
  }
  qp->state = state_to_ibv(f->qp_->state());
  return 0;
}

int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  auto* f = reinterpret_cast<FerryQp*>(qp);
  const nic::QpAttr a = f->qp_->attributes();
  *attr = ibv_qp_attr{};
  attr->qp_state = state_to_ibv(f->qp_->state());
  attr->cur_qp_state = attr->qp_state;
  attr->path_mtu = mtu_enum(a.path_mtu);
  attr->qp_access_flags = access_to_ibv(a.access_flags);
  attr->rq_psn = a.rq_psn;
  attr->sq_psn = a.sq_psn;
  attr->dest_qp_num = a.dest_qp_num;
  attr->cap = cap_of(*f);
  attr->ah_attr = f->ah;
  attr->max_rd_atomic = a.max_rd_atomic;
  attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
  attr->min_rnr_timer = a.min_rnr_timer;
  attr->port_num = 1;
  attr->timeout = a.timeout;
  attr->retry_cnt = a.retry_cnt;
  attr->rnr_retry = a.rnr_retry;
  if (init != nullptr) {
    *init = ibv_qp_init_attr{};
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
    init->cap = attr->cap;
    init->qp_type = IBV_QPT_RC;
    init->sq_sig_all = f->sq_sig_all ? 1 : 0;
  }
  return 0;
}

int ibv_destroy_qp(ibv_qp* qp) {
  auto* f = reinterpret_cast<FerryQp*>(qp);
  --reinterpret_cast<FerryPd*>(qp->pd)->users;
  --reinterpret_cast<FerryCq*>(qp->send_cq)->users;
  --reinterpret_cast<FerryCq*>(qp->recv_cq)->users;
  if (qp->srq != nullptr) --reinterpret_cast<FerrySrq*>(qp->srq)->users;
  --ctx_of(qp->context)->objects;
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  delete f;
  return 0;
}

// Not created by ibv_create_qp_ex: no extended send ops (as a provider
// returns for such a QP).
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp*) { return nullptr; }

// Address handles are for UD, which the NIC does not do.
ibv_ah* ibv_create_ah(ibv_pd*, ibv_ah_attr*) { return fail<ibv_ah>(EOPNOTSUPP); }
ibv_ah* ibv_create_ah_from_wc(ibv_pd*, ibv_wc*, ibv_grh*, uint8_t) { return fail<ibv_ah>(EOPNOTSUPP); }
int ibv_destroy_ah(ibv_ah*) { return EOPNOTSUPP; }

}  // extern "C"
