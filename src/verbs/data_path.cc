// The libibverbs data path: post_send, post_recv, post_srq_recv, poll_cq and
// req_notify_cq, the ops verbs.h's inline functions call through
// ibv_context::ops. Each translates the work requests or completions and
// calls the daemon-attached NIC's verbs, which write the WQEs into the
// rings shared with the daemon and ring its doorbell record (no system
// call while the engine polls; payload is never copied here).
#include <sched.h>

#include <array>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "verbs_internal.h"

namespace ferry::verbs {

namespace {

// Work requests go to the NIC in chunks, so translating a long list needs
// no allocation once the thread's buffers have grown.
constexpr size_t kChunk = 32;

struct Scratch {
  std::vector<nic::SendWr> send;
  std::vector<nic::RecvWr> recv;
  std::vector<nic::Sge> sges;
};
thread_local Scratch scratch;

bool poll_yield() {
  static const bool yield = [] {
    const char* v = std::getenv("FERRY_VERBS_POLL_YIELD");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return yield;
}

bool translate_sges(const ibv_sge* list, int n, size_t* used) {
  if (n < 0) return false;
  for (int i = 0; i < n; ++i) {
    scratch.sges[*used + static_cast<size_t>(i)] = nic::Sge{list[i].addr, list[i].length, list[i].lkey};
  }
  *used += static_cast<size_t>(n);
  return true;
}

// One ibv_send_wr as a Ferry SendWr (its SGEs appended to scratch.sges);
// false for what the NIC cannot do.
bool translate_send(const ibv_send_wr& in, nic::SendWr* out, size_t* sges_used) {
  *out = nic::SendWr{};
  out->wr_id = in.wr_id;
  switch (in.opcode) {
    case IBV_WR_RDMA_WRITE:
      out->opcode = nic::WrOpcode::kRdmaWrite;
      break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      out->opcode = nic::WrOpcode::kRdmaWriteWithImm;
      break;
    case IBV_WR_SEND:
      out->opcode = nic::WrOpcode::kSend;
      break;
    case IBV_WR_SEND_WITH_IMM:
      out->opcode = nic::WrOpcode::kSendWithImm;
      break;
    case IBV_WR_RDMA_READ:
      out->opcode = nic::WrOpcode::kRdmaRead;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      out->opcode = nic::WrOpcode::kAtomicCmpAndSwp;
      break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      out->opcode = nic::WrOpcode::kAtomicFetchAndAdd;
      break;
    default:  // LOCAL_INV, BIND_MW, SEND_WITH_INV, TSO, DRIVER1, ...
      return false;
  }
  if (in.send_flags & ~(IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE)) return false;
  if (in.send_flags & IBV_SEND_SIGNALED) out->flags |= nic::kSendSignaled;
  if (in.send_flags & IBV_SEND_FENCE) out->flags |= nic::kSendFence;
  if (in.send_flags & IBV_SEND_SOLICITED) out->flags |= nic::kSendSolicited;
  if (in.send_flags & IBV_SEND_INLINE) out->flags |= nic::kSendInline;
  // The immediate travels as the program wrote it (network order in
  // ibv_send_wr and ibv_wc alike).
  out->imm_data = in.imm_data;
  if (out->opcode == nic::WrOpcode::kAtomicCmpAndSwp || out->opcode == nic::WrOpcode::kAtomicFetchAndAdd) {
    out->remote_addr = in.wr.atomic.remote_addr;
    out->rkey = in.wr.atomic.rkey;
    out->compare_add = in.wr.atomic.compare_add;
    out->swap = in.wr.atomic.swap;
  } else {
    out->remote_addr = in.wr.rdma.remote_addr;
    out->rkey = in.wr.rdma.rkey;
  }
  const size_t first = *sges_used;
  if (!translate_sges(in.sg_list, in.num_sge, sges_used)) return false;
  out->sg_list = std::span<const nic::Sge>(scratch.sges.data() + first, static_cast<size_t>(in.num_sge));
  return true;
}

template <typename Wr>
size_t count_chunk(Wr* wr, size_t* sges) {
  size_t n = 0;
  *sges = 0;
  for (Wr* w = wr; w != nullptr && n < kChunk; w = w->next, ++n) *sges += static_cast<size_t>(std::max(w->num_sge, 0));
  return n;
}

void ensure(size_t wrs, size_t sges) {
  if (scratch.send.size() < wrs) scratch.send.resize(wrs);
  if (scratch.recv.size() < wrs) scratch.recv.resize(wrs);
  if (scratch.sges.size() < sges) scratch.sges.resize(sges);
}

// Receive WRs of a chunk into scratch.recv; the number translated.
size_t translate_recv_chunk(ibv_recv_wr* wr, size_t n) {
  size_t used = 0, i = 0;
  for (ibv_recv_wr* w = wr; i < n; w = w->next, ++i) {
    const size_t first = used;
    if (!translate_sges(w->sg_list, w->num_sge, &used)) break;
    scratch.recv[i] =
        nic::RecvWr{w->wr_id, std::span<const nic::Sge>(scratch.sges.data() + first, static_cast<size_t>(w->num_sge))};
  }
  return i;
}

template <typename Wr>
Wr* nth(Wr* wr, size_t n) {
  while (n-- > 0) wr = wr->next;
  return wr;
}

// Posts a WR list in chunks: `translate(wr, n)` translates up to n WRs
// into scratch and returns how many it could, `post(k)` posts the first k.
// As verbs: bad_wr is the first WR not posted (the NIC takes a chunk all or
// nothing), EINVAL for one the NIC cannot do.
template <typename Wr, typename Translate, typename Post>
int post_list(Wr* wr, Wr** bad_wr, const char* what, Translate&& translate, Post&& post) {
  while (wr != nullptr) {
    size_t sges = 0;
    const size_t n = count_chunk(wr, &sges);
    ensure(n, sges);
    const size_t ok = translate(wr, n);
    if (ok > 0) {
      const Status s = post(ok);
      if (!s.ok()) {
        debug_log(std::string(what) + ": " + s.to_string());
        *bad_wr = wr;
        return errno_for(s);
      }
    }
    if (ok < n) {
      *bad_wr = nth(wr, ok);
      return EINVAL;
    }
    wr = nth(wr, n);
  }
  return 0;
}

ibv_wc_status wc_status(nic::WcStatus s) {
  switch (s) {
    case nic::WcStatus::kSuccess:
      return IBV_WC_SUCCESS;
    case nic::WcStatus::kLocLenErr:
      return IBV_WC_LOC_LEN_ERR;
    case nic::WcStatus::kLocQpOpErr:
      return IBV_WC_LOC_QP_OP_ERR;
    case nic::WcStatus::kLocProtErr:
      return IBV_WC_LOC_PROT_ERR;
    case nic::WcStatus::kWrFlushErr:
      return IBV_WC_WR_FLUSH_ERR;
    case nic::WcStatus::kRemInvReqErr:
      return IBV_WC_REM_INV_REQ_ERR;
    case nic::WcStatus::kRemAccessErr:
      return IBV_WC_REM_ACCESS_ERR;
    case nic::WcStatus::kRemOpErr:
      return IBV_WC_REM_OP_ERR;
    case nic::WcStatus::kRetryExcErr:
      return IBV_WC_RETRY_EXC_ERR;
    case nic::WcStatus::kRnrRetryExcErr:
      return IBV_WC_RNR_RETRY_EXC_ERR;
    case nic::WcStatus::kGeneralErr:
      break;
  }
  return IBV_WC_GENERAL_ERR;
}

ibv_wc_opcode wc_opcode(nic::WcOpcode op) {
  switch (op) {
    case nic::WcOpcode::kRdmaWrite:
      return IBV_WC_RDMA_WRITE;
    case nic::WcOpcode::kRdmaRead:
      return IBV_WC_RDMA_READ;
    case nic::WcOpcode::kCompSwap:
      return IBV_WC_COMP_SWAP;
    case nic::WcOpcode::kFetchAdd:
      return IBV_WC_FETCH_ADD;
    case nic::WcOpcode::kRecv:
      return IBV_WC_RECV;
    case nic::WcOpcode::kRecvRdmaWithImm:
      return IBV_WC_RECV_RDMA_WITH_IMM;
    default:  // SEND, and Ferry's own opcodes no ibv WR can post
      return IBV_WC_SEND;
  }
}

}  // namespace

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  auto* q = reinterpret_cast<FerryQp*>(qp);
  return post_list(
      wr, bad_wr, "post_send",
      [](ibv_send_wr* w, size_t n) {
        size_t ok = 0, used = 0;
        for (; ok < n && translate_send(*w, &scratch.send[ok], &used); w = w->next) ++ok;
        return ok;
      },
      [&](size_t k) { return q->qp_->post_send(std::span<const nic::SendWr>(scratch.send.data(), k)); });
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  auto* q = reinterpret_cast<FerryQp*>(qp);
  return post_list(wr, bad_wr, "post_recv", translate_recv_chunk,
                   [&](size_t k) { return q->qp_->post_recv(std::span<const nic::RecvWr>(scratch.recv.data(), k)); });
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  auto* s = reinterpret_cast<FerrySrq*>(srq);
  return post_list(wr, bad_wr, "post_srq_recv", translate_recv_chunk,
                   [&](size_t k) { return s->srq_->post_recv(std::span<const nic::RecvWr>(scratch.recv.data(), k)); });
}

int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  auto* c = reinterpret_cast<FerryCq*>(cq);
  std::array<nic::WorkCompletion, kChunk> buf;
  int done = 0;
  while (done < num_entries) {
    const size_t want = std::min(kChunk, static_cast<size_t>(num_entries - done));
    Result<uint32_t> r = c->cq_->poll(std::span<nic::WorkCompletion>(buf.data(), want));
    if (!r.ok()) {
      debug_log("poll_cq: " + r.status().to_string());
      return done > 0 ? done : -errno_for(r.status());
    }
    for (uint32_t i = 0; i < *r; ++i) {
      const nic::WorkCompletion& in = buf[i];
      ibv_wc& out = wc[done + static_cast<int>(i)];
      out = ibv_wc{};
      out.wr_id = in.wr_id;
      out.status = wc_status(in.status);
      out.opcode = wc_opcode(in.opcode);
      out.byte_len = in.byte_len;
      out.imm_data = in.imm_data;
      out.qp_num = in.qp_num;
      out.src_qp = in.src_qp;
      out.wc_flags = in.has_imm ? IBV_WC_WITH_IMM : 0;
    }
    done += static_cast<int>(*r);
    if (*r < want) break;
  }
  // A poll that found nothing gives the CPU to whoever else is runnable
  // here, the NIC daemon's engine first among them: on a host where it
  // shares the cores with the program (any host without a core per busy
  // thread), a program spinning on its CQ otherwise holds a core until the
  // scheduler's slice ends and every round trip costs milliseconds.
  // FERRY_VERBS_POLL_YIELD=0 spins without yielding (a daemon with a core
  // of its own; docs/verbs-compat.md).
  if (done == 0 && poll_yield()) sched_yield();
  return done;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  const Status s = reinterpret_cast<FerryCq*>(cq)->cq_->req_notify(solicited_only != 0);
  if (!s.ok()) debug_log("req_notify_cq: " + s.to_string());
  return s.ok() ? 0 : errno_for(s);
}

}  // namespace ferry::verbs
