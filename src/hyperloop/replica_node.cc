// Replica setup: pre-posting HyperLoop's WQE chains (docs/hyperloop.md).
#include "replica_node.h"

#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ferry/common/cpu.h"

namespace ferry::hyperloop::detail {

using nic::QpInitAttr;
using nic::RecvWr;
using nic::SendWr;
using nic::Sge;
using nic::WrOpcode;

// ---- Agent -------------------------------------------------------------------

Agent::Agent(std::string name, int cpu) : name_(std::move(name)), cpu_(cpu) {
  thread_ = std::thread([this] { main(); });
}

Agent::~Agent() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Agent::main() {
  const std::string short_name = name_.substr(0, 15);
  pthread_setname_np(pthread_self(), short_name.c_str());
  tid_.store(static_cast<int>(gettid()), std::memory_order_release);
  if (cpu_ >= 0) (void)pin_current_thread(cpu_);  // best effort: a report says where it ran
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Blocked here between setup steps and for the whole life of the group:
    // the data path never needs this thread.
    cv_.wait(lock, [&] { return stop_ || task_ != nullptr; });
    if (stop_) return;
    (*task_)();
    task_ = nullptr;
    done_ = true;
    cv_.notify_all();
  }
}

void Agent::run(const std::function<void()>& fn) {
  std::unique_lock<std::mutex> lock(mu_);
  task_ = &fn;
  done_ = false;
  cv_.notify_all();
  cv_.wait(lock, [&] { return done_; });
}

void Agent::wait_asleep() const {
  int tid = 0;
  for (int i = 0; i < 10000 && (tid = tid_.load(std::memory_order_acquire)) == 0; ++i) usleep(100);
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  for (int i = 0; i < 10000; ++i) {
    // Field 3 of stat, after the parenthesized name: R running, S sleeping.
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size()) return;
    if (line[close + 2] == 'S') {
      // Asleep -- but perhaps on the mutex on its way back to the wait: it is
      // settled when its CPU time also stays put.
      const uint64_t before = cpu_ns();
      usleep(1000);
      if (cpu_ns() == before) return;
    }
    usleep(100);
  }
}

uint64_t Agent::cpu_ns() const { return thread_cpu_time_ns(const_cast<std::thread&>(thread_).native_handle()); }

// ---- queues ------------------------------------------------------------------

ReplicaNode::~ReplicaNode() {
  teardown();
  host.reset();
}

void ReplicaNode::teardown() {
  agent.reset();
  // Verbs order: QPs, then CQs, then MRs, then the memory.
  for (ReplicaChain& c : chains) {
    c.up.reset();
    c.down.reset();
    c.loop_a.reset();
    c.loop_b.reset();
    c.ctl.reset();
    c.ctl_peer.reset();
  }
  for (ReplicaChain& c : chains) {
    c.rcq.reset();
    c.lcq.reset();
    c.ctl_mr.reset();
  }
  misc_cq.reset();
  wq_mr.reset();
  if (wq_region != nullptr) host->domain->release(wq_region);
  wq_region = nullptr;
  wq = nullptr;
}

namespace {

struct WqLayout {
  size_t down = 0, loop = 0, ctl = 0, forward = 0, end = 0;
};

size_t chain_bytes(Chain c, uint32_t n, uint32_t ring_ops, WqLayout* out, size_t at) {
  const ChainShape nontail = chain_shape(c, false);
  WqLayout l;
  l.down = at;
  at += static_cast<size_t>(nontail.down_per_op) * ring_ops * kWqeBytes;
  l.loop = at;
  at += static_cast<size_t>(nontail.loop_per_op) * ring_ops * kWqeBytes;
  l.ctl = at;
  at += static_cast<size_t>(ctl_depth(c, ring_ops)) * kWqeBytes;
  l.forward = at;
  at += static_cast<size_t>(forward_stride(c, n)) * ring_ops;
  l.end = at;
  *out = l;
  return at;
}

}  // namespace

size_t replica_wq_bytes(uint32_t n, uint32_t ring_ops) {
  std::array<WqLayout, kChainCount> layout;
  size_t at = 64;  // [0, 64): the discard scratch
  for (int c = 0; c < kChainCount; ++c) at = chain_bytes(static_cast<Chain>(c), n, ring_ops, &layout[c], at);
  return at;
}

Status attach_host(ReplicaNode& r) {
  r.nic = r.host->nic;
  r.pd = r.host->pd.get();
  r.region_mr = r.host->mr.get();
  const size_t bytes = replica_wq_bytes(r.replicas, r.options.ring_ops);
  FERRY_ASSIGN_OR_RETURN(r.wq_region, r.host->domain->alloc_dram(bytes));
  r.wq = r.wq_region->data();
  std::memset(r.wq, 0, bytes);
  return ok_status();
}

Status create_replica_queues(ReplicaNode& r) {
  const uint32_t d = r.options.ring_ops;
  nic::Nic& nic = *r.nic;
  nic::ProtectionDomain& pd = *r.pd;

  std::array<WqLayout, kChainCount> layout;
  size_t at = 64;  // [0, 64): the discard scratch
  for (int c = 0; c < kChainCount; ++c) at = chain_bytes(static_cast<Chain>(c), r.replicas, d, &layout[c], at);
  // The RECV scatter lists write into these rings: local write only. Nothing
  // reaches them from another host (docs/hyperloop.md, "Safety").
  FERRY_ASSIGN_OR_RETURN(r.wq_mr, nic.reg_mr(pd, r.wq, at, nic::kAccessLocalWrite));
  r.discard = r.wq;

  nic::CqInitAttr count_only;
  count_only.count_only = true;
  count_only.cqe = 1024;
  FERRY_ASSIGN_OR_RETURN(r.misc_cq, nic.create_cq(count_only));

  QpInitAttr plain;
  plain.send_cq = r.misc_cq.get();
  plain.recv_cq = r.misc_cq.get();
  plain.cap.max_send_wr = 4;
  plain.cap.max_recv_wr = 1;

  for (int ci = 0; ci < kChainCount; ++ci) {
    const Chain c = static_cast<Chain>(ci);
    ReplicaChain& ch = r.chains[ci];
    ch.chain = c;
    ch.tail = r.tail();
    const ChainShape shape = chain_shape(c, ch.tail);
    uint8_t* base = r.wq;
    ch.down_ring = base + layout[ci].down;
    ch.loop_ring = base + layout[ci].loop;
    ch.ctl_ring = base + layout[ci].ctl;
    ch.forward = base + layout[ci].forward;
    ch.forward_stride = forward_stride(c, r.replicas);
    ch.ctl_depth = ctl_depth(c, d);
    // The control ring re-arms itself with loopback FETCH_AND_ADDs on its
    // WQEs' index fields: remote atomics are all this MR allows, and only the
    // ctl_peer QP (loopback, this PD) grants them.
    FERRY_ASSIGN_OR_RETURN(ch.ctl_mr, nic.reg_mr(pd, ch.ctl_ring, static_cast<size_t>(ch.ctl_depth) * kWqeBytes,
                                                 nic::kAccessLocalWrite | nic::kAccessRemoteAtomic));

    FERRY_ASSIGN_OR_RETURN(ch.rcq, nic.create_cq(count_only));
    FERRY_ASSIGN_OR_RETURN(ch.lcq, nic.create_cq(count_only));

    QpInitAttr up = plain;
    up.recv_cq = ch.rcq.get();
    up.cap.max_recv_wr = d;
    up.cap.max_recv_sge = 8;
    up.managed_recv = true;
    FERRY_ASSIGN_OR_RETURN(ch.up, nic.create_qp(pd, up));

    QpInitAttr down = plain;
    down.cap.max_send_wr = shape.down_per_op * d;
    down.managed_send = true;
    down.send_ring_memory = {ch.down_ring, static_cast<size_t>(shape.down_per_op) * d * kWqeBytes};
    FERRY_ASSIGN_OR_RETURN(ch.down, nic.create_qp(pd, down));

    if (shape.loop_per_op != 0) {
      QpInitAttr loop_a = plain;
      loop_a.send_cq = ch.lcq.get();
      loop_a.cap.max_send_wr = shape.loop_per_op * d;
      loop_a.managed_send = true;
      loop_a.send_ring_memory = {ch.loop_ring, static_cast<size_t>(shape.loop_per_op) * d * kWqeBytes};
      FERRY_ASSIGN_OR_RETURN(ch.loop_a, nic.create_qp(pd, loop_a));
      FERRY_ASSIGN_OR_RETURN(ch.loop_b, nic.create_qp(pd, plain));
    }

    // Only the control pair may issue WAITs and ENABLEs: the data queues
    // above, whose WQEs the upstream's message rewrites, are created without
    // the capability, so no message can turn one of their slots into a WAIT
    // or an ENABLE (the NIC fails it with LOC_QP_OP_ERR).
    QpInitAttr ctl = plain;
    ctl.cap.max_send_wr = ch.ctl_depth;
    ctl.managed_send = true;
    ctl.cross_channel = true;
    ctl.send_ring_memory = {ch.ctl_ring, static_cast<size_t>(ch.ctl_depth) * kWqeBytes};
    FERRY_ASSIGN_OR_RETURN(ch.ctl, nic.create_qp(pd, ctl));
    QpInitAttr ctl_peer = plain;
    ctl_peer.cross_channel = true;  // posts the boot enables
    FERRY_ASSIGN_OR_RETURN(ch.ctl_peer, nic.create_qp(pd, ctl_peer));
  }
  return ok_status();
}

namespace {

// The flush WQE of a hop: a 0-byte READ (the paper's gFLUSH) or an IBTA 1.5
// FLUSH with persistence placement over the whole region.
SendWr flush_template(bool flush_verb, uint64_t addr, uint32_t rkey) {
  SendWr wr;
  wr.remote_addr = addr;
  wr.rkey = rkey;
  if (flush_verb) {
    wr.opcode = WrOpcode::kFlush;
    wr.flush_persistent = true;
    wr.flush_whole_mr = true;
  } else {
    wr.opcode = WrOpcode::kRdmaRead;
  }
  return wr;
}

// `k` is the block's operation, `discard` the 8-byte SGE a re-arm's fetched
// value goes to.
SendWr ctl_wr(const ReplicaChain& ch, const CtlWqe& w, uint64_t k, const Sge* discard) {
  SendWr wr;
  wr.opcode = w.opcode;
  wr.index = w.index;
  if (w.opcode == WrOpcode::kAtomicFetchAndAdd) {
    const uint32_t per = chain_shape(ch.chain, ch.tail).ctl_per_op;
    const uint64_t slot = (per * k + w.slot) % ch.ctl_depth;
    wr.remote_addr = reinterpret_cast<uint64_t>(ch.ctl_ring) + slot * kWqeBytes + kRemoteAddrField;
    wr.rkey = ch.ctl_mr->rkey();
    wr.compare_add = w.index;
    wr.sg_list = std::span<const Sge>(discard, 1);
    return wr;
  }
  switch (w.target) {
    case CtlTarget::kRecvCq: wr.wait_cq = ch.rcq.get(); break;
    case CtlTarget::kLoopCq: wr.wait_cq = ch.lcq.get(); break;
    case CtlTarget::kDown: wr.enable_qp = ch.down.get(); break;
    case CtlTarget::kLoop: wr.enable_qp = ch.loop_a.get(); break;
    case CtlTarget::kCtlRing:
    case CtlTarget::kNone: break;
  }
  return wr;
}

Status post_chain(ReplicaNode& r, ReplicaChain& ch, const Downstream& ds) {
  const uint32_t d = r.options.ring_ops;
  const uint32_t n = r.replicas;
  const uint32_t i = r.index;
  const Chain c = ch.chain;
  const ChainShape shape = chain_shape(c, ch.tail);
  const uint32_t wq_lkey = r.wq_mr->lkey();
  const bool flush_verb = r.options.flush_verb;

  // 1. RECVs: slot s scatters operation s (mod ring_ops) into its WQEs.
  ScatterTargets t;
  t.down_ring = r.wq_iova(ch.down_ring);
  t.loop_ring = r.wq_iova(ch.loop_ring);
  t.discard = r.wq_iova(r.discard);
  t.ring_ops = d;
  std::vector<ScatterPlan> plans(d);
  std::vector<RecvWr> recvs(d);
  for (uint32_t s = 0; s < d; ++s) {
    t.forward = r.wq_iova(ch.forward + static_cast<size_t>(s) * ch.forward_stride);
    plans[s] = scatter_plan(c, n, i, s, t);
    for (uint32_t k = 0; k < plans[s].count; ++k) plans[s].sges[k].lkey = wq_lkey;
    recvs[s].wr_id = s;
    recvs[s].sg_list = std::span<const Sge>(plans[s].sges.data(), plans[s].count);
  }
  FERRY_RETURN_IF_ERROR(ch.up->post_recv(recvs));

  // 2. Templates of the down and loopback WQEs: every field the metadata does
  //    not rewrite is fixed here, once.
  std::vector<SendWr> down;
  std::vector<SendWr> loop;
  std::vector<Sge> sges(static_cast<size_t>(d) * 2);  // at most two SGE-carrying WQEs per slot
  auto sge = [&](uint32_t s, uint32_t which, Sge value) {
    Sge& slot = sges[static_cast<size_t>(s) * 2 + which];
    slot = value;
    return std::span<const Sge>(&slot, 1);
  };
  for (uint32_t s = 0; s < d; ++s) {
    const uint64_t fwd = r.wq_iova(ch.forward + static_cast<size_t>(s) * ch.forward_stride);
    if (ch.tail) {
      SendWr ack;
      ack.opcode = WrOpcode::kRdmaWriteWithImm;
      ack.remote_addr = ds.ack_slots[static_cast<int>(c)] + static_cast<uint64_t>(s) * ds.ack_stride;
      ack.rkey = ds.ack_rkey;
      if (c == Chain::kCas) ack.sg_list = sge(s, 0, Sge{fwd, 8 * n, wq_lkey});  // the result map
      down.push_back(ack);
    } else if (c == Chain::kWrite) {
      SendWr w0;
      w0.opcode = WrOpcode::kRdmaWrite;
      w0.sg_list = sge(s, 0, Sge{r.region_iova(0), 0, r.region_mr->lkey()});
      w0.remote_addr = ds.region_iova;
      w0.rkey = ds.region_rkey;
      down.push_back(w0);
      down.push_back(flush_template(flush_verb, ds.region_iova, ds.region_rkey));
      SendWr fwd_send;
      fwd_send.opcode = WrOpcode::kSend;
      fwd_send.flags = nic::kSendFence;  // after the flush's response, if there is one
      fwd_send.sg_list = sge(s, 1, Sge{fwd, message_bytes(c, n, i + 1), wq_lkey});
      down.push_back(fwd_send);
      SendWr pad;
      pad.opcode = WrOpcode::kNop;
      down.push_back(pad);
    } else {
      SendWr fwd_send;
      fwd_send.opcode = WrOpcode::kSend;
      fwd_send.sg_list = sge(s, 0, Sge{fwd, message_bytes(c, n, i + 1), wq_lkey});
      down.push_back(fwd_send);
    }
    if (shape.loop_per_op != 0) {
      SendWr l0;
      l0.remote_addr = r.region_iova(0);
      l0.rkey = r.region_mr->rkey();
      if (c == Chain::kCas) {
        l0.opcode = WrOpcode::kAtomicCmpAndSwp;
        // The original value lands in this replica's field of the result map.
        l0.sg_list = sge(s, 1, Sge{fwd + result_offset_in_forward(n, i), 8, wq_lkey});
      } else {
        l0.opcode = WrOpcode::kRdmaWrite;
        l0.sg_list = sge(s, 1, Sge{r.region_iova(0), 0, r.region_mr->lkey()});
      }
      loop.push_back(l0);
      SendWr l1 = flush_template(flush_verb, r.region_iova(0), r.region_mr->rkey());
      l1.flags = nic::kSendSignaled;  // one loopback completion per operation: the WAIT's count
      loop.push_back(l1);
    }
  }
  FERRY_RETURN_IF_ERROR(ch.down->post_send(down));
  if (!loop.empty()) FERRY_RETURN_IF_ERROR(ch.loop_a->post_send(loop));

  // 3. The control blocks of the first lap; each re-arms itself for the next.
  std::vector<SendWr> ctl;
  ctl.reserve(ch.ctl_depth);
  const Sge discard{r.wq_iova(r.discard), 8, wq_lkey};
  for (uint64_t k = 0; k < d; ++k) {
    const auto block = ctl_block(c, ch.tail, d, k);
    for (uint32_t j = 0; j < shape.ctl_per_op; ++j) ctl.push_back(ctl_wr(ch, block[j], k, &discard));
  }
  FERRY_RETURN_IF_ERROR(ch.ctl->post_send(ctl));

  // 4. Boot: expose the RECVs and start the control chain, for good.
  SendWr boot[2];
  boot[0].opcode = WrOpcode::kRecvEnable;
  boot[0].enable_qp = ch.up.get();
  boot[0].index = kEnabledForever;
  boot[1].opcode = WrOpcode::kSendEnable;
  boot[1].enable_qp = ch.ctl.get();
  boot[1].index = kEnabledForever;
  return ch.ctl_peer->post_send(std::span<const SendWr>(boot, 2));
}

}  // namespace

Status post_replica_chains(ReplicaNode& r, const Downstream& down) {
  for (ReplicaChain& ch : r.chains) FERRY_RETURN_IF_ERROR(post_chain(r, ch, down));
  return ok_status();
}

}  // namespace ferry::hyperloop::detail
