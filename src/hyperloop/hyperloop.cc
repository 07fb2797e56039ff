// HyperLoopClient: builds groups (the connection manager's part and the
// replicas' setup), turns each group operation into one message down the
// chain, and completes operations from the tail's WRITE_WITH_IMM. The
// replicas' control rings re-arm themselves (layout.h, ctl_block).
#include "ferry/hyperloop/hyperloop.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/common/assert.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/wqe.h"
#include "ferry/nic/shared_memory.h"
#include "host.h"
#include "layout.h"
#include "replica.h"
#include "wiring.h"

namespace ferry::hyperloop {

using detail::Chain;
using detail::kChainCount;
using detail::kDescBytes;
using detail::kWqeBytes;
using detail::ReplicaNode;
using nic::RecvWr;
using nic::SendWr;
using nic::Sge;
using nic::WrOpcode;

namespace {

struct Pending {
  uint64_t group_seq = 0;
  Primitive primitive = Primitive::kWrite;
  Callback done;
  uint8_t execute_map = 0;
  uint64_t old_value = 0;
  int32_t join = -1;  // gflush that this flush-only operation belongs to
};

// A gflush spans the chains that had unflushed operations.
struct FlushJoin {
  bool used = false;
  uint32_t remaining = 0;
  uint64_t group_seq = 0;
  Callback done;
};

struct ClientChain {
  Chain chain = Chain::kWrite;
  std::unique_ptr<nic::CompletionQueue> head_cq;
  std::unique_ptr<nic::CompletionQueue> ack_cq;
  std::unique_ptr<nic::QueuePair> head;  // client -> replica 0
  std::unique_ptr<nic::QueuePair> ack;   // tail -> client (WRITE_WITH_IMM)
  uint8_t* meta = nullptr;               // ring_ops message slots
  uint32_t meta_stride = 0;
  uint8_t* acks = nullptr;               // ring_ops acknowledgement slots (gCAS result maps)
  uint32_t ack_stride = 64;
  uint64_t next = 0;   // operations submitted on this chain
  uint64_t acked = 0;  // operations acknowledged
  bool dirty = false;  // operations since the last flush
  std::vector<Pending> pending;  // ring_ops slots
};

}  // namespace

struct Group {
  GroupId id = 0;
  GroupOptions options;
  uint32_t n = 0;
  // Memory of a group connected across processes (shared, so that a daemon
  // can map it): destroyed last.
  nic::SharedMemory remote_client_mem;
  nic::SharedMemory remote_buf_mem;
  // The client's side. In process `client` (an emulated host of the Engine)
  // owns the PD and the client memory; across processes the group does.
  nic::Nic* cnic = nullptr;
  nic::ProtectionDomain* cpd = nullptr;
  std::unique_ptr<detail::Host> client;
  std::unique_ptr<nic::ProtectionDomain> remote_pd;
  std::unique_ptr<nic::MemoryRegion> remote_client_mr;
  std::span<uint8_t> client_mem;       // the gwrite source
  nic::MemoryRegion* client_mr = nullptr;
  pm::Region* buf = nullptr;           // in process: message and acknowledgement slots
  uint8_t* buf_base = nullptr;
  std::unique_ptr<nic::MemoryRegion> buf_mr;
  // The replicas: built here (in process), or only their regions' base
  // addresses and the head's rkey (across processes).
  std::vector<std::unique_ptr<ReplicaNode>> replicas;
  std::array<uint64_t, kMaxReplicas> replica_iova{};
  uint32_t head_rkey = 0;
  std::string remote_name;             // across processes: the group's name
  std::unique_ptr<detail::LinkSet> acks;  // the tail's ack services, served until connected
  std::array<ClientChain, kChainCount> chains;
  std::vector<FlushJoin> joins;
  Status failed;
  bool stopped = false;            // stop_group: no queues until restart_group
  uint64_t next_seq = 0;
  uint32_t hosts_made = 0;         // replica hosts built for this group so far (names)
  uint64_t retired_cpu_ns = 0;     // replica CPU of data paths torn down by reconfigurations

  ~Group() {
    unserve();
    for (ClientChain& c : chains) {
      c.head.reset();
      c.ack.reset();
    }
    for (ClientChain& c : chains) {
      c.head_cq.reset();
      c.ack_cq.reset();
    }
    buf_mr.reset();
    remote_client_mr.reset();
    if (buf != nullptr) client->domain->release(buf);
    replicas.clear();
    remote_pd.reset();
    client.reset();
  }
  void unserve() {
    if (acks) acks->unserve();
  }
  bool remote() const { return !remote_name.empty(); }
  uint64_t buf_iova(const void* p) const { return reinterpret_cast<uint64_t>(p); }
  WrOpcode flush_opcode() const { return options.flush_verb ? WrOpcode::kFlush : WrOpcode::kRdmaRead; }
};

struct HyperLoopClient::Impl {
  HyperLoopClient* self = nullptr;
  std::vector<std::unique_ptr<Group>> groups;
  HyperLoopStats stats;
  std::deque<std::pair<Callback, OpResult>> ready;  // finished, callback not yet run
  std::function<void()> poll_hook;                  // set_poll_hook
  MessageHook message_hook;                         // set_message_hook

  Result<Group*> find(GroupId gid) const {
    if (gid >= groups.size() || groups[gid] == nullptr) return not_found("unknown group " + std::to_string(gid));
    return groups[gid].get();
  }

  // Builds g's data path over `hosts` (chain order; fresh ones are made
  // for the missing tail positions) and its client host if it has none.
  Status build(Group& g, std::vector<std::unique_ptr<detail::Host>> hosts = {});
  Result<ReplacementReport> replace(GroupId gid, uint32_t failed);
  // Fails every outstanding operation of g with `reason` and destroys every
  // queue, ring and buffer of its data path, the client's and the replicas',
  // keeping the hosts (regions, NICs, PDs) and the client's memory.
  void stop(Group& g, const Status& reason);
  // A new data path over g's members, in their order (stop first if needed).
  Status restart(GroupId gid);
  // Returns the bytes copied.
  Result<uint64_t> copy_region(detail::Host& from, detail::Host& to);
  Status build_client_side(Group& g);
  Status connect_remote(Group& g, const RemoteGroupOptions& ro);
  // The chains of a group across processes (client side: buffers, queues,
  // acknowledgement services, the head connection); connect_remote's second
  // half, and reconnect_group's after teardown_chains.
  Status connect_chains(Group& g, const RemoteGroupOptions& ro);
  // Fails every outstanding operation of g with `reason` and destroys its
  // client-side chains, keeping its PD and client memory.
  void teardown_chains(Group& g, const Status& reason);
  nic::Nic* nic = nullptr;  // a client created on a NIC (create(nic::Nic&)): its groups connect across processes
  Status acquire(Group& g, ClientChain& ch);
  void record(Group& g, ClientChain& ch, Primitive p, Callback done, uint8_t execute_map, uint64_t old_value,
              int32_t join, bool flushes);
  Status post_write(Group& g, uint64_t offset, uint32_t size, bool data, bool flush);
  Status post_cas(Group& g, uint64_t offset, uint64_t old_value, uint64_t new_value, uint8_t map, bool flush);
  Status post_memcpy(Group& g, uint64_t src, uint64_t dst, uint32_t size, bool copy, bool flush);
  Status post_flush_only(Group& g, ClientChain& ch);
  void fail(Group& g, const Status& status);
  void complete(Group& g, ClientChain& ch, const nic::WorkCompletion& wc);
  size_t poll_group(Group& g);
};

// ---- group construction -----------------------------------------------------

// The client's buffers (per chain the message slots and the acknowledgement
// slots), CQs and QPs, on g.cnic / g.cpd; shared by both kinds of group.
Status HyperLoopClient::Impl::build_client_side(Group& g) {
  const GroupOptions& o = g.options;
  const uint32_t n = g.n;
  const uint32_t d = o.ring_ops;
  size_t bytes = 0;
  std::array<size_t, kChainCount> meta_at{}, ack_at{};
  for (int c = 0; c < kChainCount; ++c) {
    const Chain chain = static_cast<Chain>(c);
    meta_at[c] = bytes;
    bytes += static_cast<size_t>(detail::forward_stride(chain, n)) * d;
    ack_at[c] = bytes;
    bytes += static_cast<size_t>(64) * d;
  }
  if (g.remote()) {
    FERRY_ASSIGN_OR_RETURN(g.remote_buf_mem, nic::SharedMemory::create(bytes, "ferry-hyperloop-client"));
    g.buf_base = g.remote_buf_mem.data();
  } else {
    FERRY_ASSIGN_OR_RETURN(g.buf, g.client->domain->alloc_dram(bytes));
    g.buf_base = g.buf->data();
  }
  std::memset(g.buf_base, 0, bytes);
  nic::Nic& cnic = *g.cnic;
  FERRY_ASSIGN_OR_RETURN(g.buf_mr, cnic.reg_mr(*g.cpd, g.buf_base, bytes, nic::kAccessLocalWrite | nic::kAccessRemoteWrite));
  for (int c = 0; c < kChainCount; ++c) {
    ClientChain& ch = g.chains[c];
    ch.chain = static_cast<Chain>(c);
    ch.meta = g.buf_base + meta_at[c];
    ch.meta_stride = detail::forward_stride(ch.chain, n);
    ch.acks = g.buf_base + ack_at[c];
    ch.pending.resize(d);
    nic::CqInitAttr cq;
    cq.cqe = 4 * d;
    FERRY_ASSIGN_OR_RETURN(ch.head_cq, cnic.create_cq(cq));
    FERRY_ASSIGN_OR_RETURN(ch.ack_cq, cnic.create_cq(cq));
    nic::QpInitAttr head;
    head.send_cq = head.recv_cq = ch.head_cq.get();
    head.cap.max_send_wr = 4 * o.window;  // at most three WQEs per operation
    head.cap.max_recv_wr = 1;
    FERRY_ASSIGN_OR_RETURN(ch.head, cnic.create_qp(*g.cpd, head));
    nic::QpInitAttr ack;
    ack.send_cq = ack.recv_cq = ch.ack_cq.get();
    ack.cap.max_send_wr = 1;
    ack.cap.max_recv_wr = d;
    FERRY_ASSIGN_OR_RETURN(ch.ack, cnic.create_qp(*g.cpd, ack));
  }
  g.joins.resize(o.window);
  return ok_status();
}

Status HyperLoopClient::Impl::build(Group& g, std::vector<std::unique_ptr<detail::Host>> hosts) {
  nic::Engine& engine = *self->engine();
  const GroupOptions& o = g.options;
  const uint32_t n = g.n;
  const uint32_t d = o.ring_ops;
  const std::string prefix = "g" + std::to_string(g.id);

  if (g.client == nullptr) {
    FERRY_ASSIGN_OR_RETURN(g.client, detail::make_host(engine, prefix + "-client", o, /*pm=*/false));
  }
  g.cnic = g.client->nic;
  g.cpd = g.client->pd.get();
  g.client_mem = std::span<uint8_t>(g.client->base(), g.client->region->size());
  g.client_mr = g.client->mr.get();
  FERRY_RETURN_IF_ERROR(build_client_side(g));

  // Replicas: each one's application thread creates its queues.
  for (uint32_t i = 0; i < n; ++i) {
    auto r = std::make_unique<ReplicaNode>();
    r->index = i;
    r->replicas = n;
    r->options = o;
    if (i < hosts.size()) {
      r->host = std::move(hosts[i]);
    } else {
      FERRY_ASSIGN_OR_RETURN(r->host, detail::make_host(engine, prefix + "-r" + std::to_string(g.hosts_made++), o,
                                                        o.media == pm::Media::kPm));
    }
    r->agent = std::make_unique<detail::Agent>("hl-" + prefix + "-r" + std::to_string(i),
                                               self->client_options().replica_cpu);
    FERRY_RETURN_IF_ERROR(detail::attach_host(*r));
    g.replica_iova[i] = r->region_iova(0);
    Status st;
    r->agent->run([&] { st = detail::create_replica_queues(*r); });
    FERRY_RETURN_IF_ERROR(st);
    g.replicas.push_back(std::move(r));
  }
  nic::Nic& cnic = *g.cnic;

  // Connection manager: wire the chains. Each connection grants the remote
  // access its protocol uses and nothing more (docs/hyperloop.md, "Safety"):
  // the links between hosts carry WRITEs, 0-byte READs and FLUSHes into the
  // regions and the client's acknowledgement slots, never atomics; the
  // loopback CAS/copy pair works on the own region; the control pair only
  // adds to the control ring's indices.
  auto connect = [](nic::QueuePair& a, const nic::Nic& na, nic::QueuePair& b, const nic::Nic& nb, uint32_t access) {
    nic::ConnectOptions o;
    o.access_flags = access;
    return nic::connect_qps(a, na, b, nb, o);
  };
  const uint32_t link = nic::kAccessRemoteWrite | nic::kAccessRemoteRead | nic::kAccessFlushGlobal |
                        nic::kAccessFlushPersistent;
  const uint32_t loopback = link | nic::kAccessRemoteAtomic;
  const uint32_t rearm = nic::kAccessRemoteAtomic;
  for (int c = 0; c < kChainCount; ++c) {
    ClientChain& ch = g.chains[c];
    FERRY_RETURN_IF_ERROR(connect(*ch.head, cnic, *g.replicas[0]->chains[c].up, *g.replicas[0]->host->nic, link));
    for (uint32_t i = 0; i < n; ++i) {
      ReplicaNode& r = *g.replicas[i];
      detail::ReplicaChain& rc = r.chains[c];
      if (i + 1 < n) {
        ReplicaNode& next = *g.replicas[i + 1];
        FERRY_RETURN_IF_ERROR(connect(*rc.down, *r.host->nic, *next.chains[c].up, *next.host->nic, link));
      } else {
        FERRY_RETURN_IF_ERROR(connect(*rc.down, *r.host->nic, *ch.ack, cnic, link));
      }
      if (rc.loop_a) FERRY_RETURN_IF_ERROR(connect(*rc.loop_a, *r.host->nic, *rc.loop_b, *r.host->nic, loopback));
      FERRY_RETURN_IF_ERROR(connect(*rc.ctl, *r.host->nic, *rc.ctl_peer, *r.host->nic, rearm));
    }
  }

  // The client's side of the acknowledgements: one RECV per ring slot.
  for (ClientChain& ch : g.chains) {
    std::vector<RecvWr> recvs(d);
    for (uint32_t s = 0; s < d; ++s) recvs[s].wr_id = s;
    FERRY_RETURN_IF_ERROR(ch.ack->post_recv(recvs));
  }

  // Replicas pre-post their chains and start them.
  for (uint32_t i = 0; i < n; ++i) {
    ReplicaNode& r = *g.replicas[i];
    detail::Downstream ds;
    if (i + 1 < n) {
      ds.region_iova = g.replicas[i + 1]->region_iova(0);
      ds.region_rkey = g.replicas[i + 1]->region_mr->rkey();
    }
    for (int c = 0; c < kChainCount; ++c) ds.ack_slots[c] = g.buf_iova(g.chains[c].acks);
    ds.ack_rkey = g.buf_mr->rkey();
    ds.ack_stride = 64;
    Status st;
    r.agent->run([&] { st = detail::post_replica_chains(r, ds); });
    FERRY_RETURN_IF_ERROR(st);
  }

  g.head_rkey = g.replicas[0]->region_mr->rkey();
  for (auto& r : g.replicas) r->agent->wait_asleep();
  return ok_status();
}

// ---- chain reconfiguration (in process) ------------------------------------------

// The new member's NIC READs `from`'s whole region into its own, over a QP
// pair made for the copy (the control path: its CPU posts and polls), then
// its CPU persists what arrived.
Result<uint64_t> HyperLoopClient::Impl::copy_region(detail::Host& from, detail::Host& to) {
  constexpr uint32_t kChunk = 64 << 10;
  constexpr uint32_t kDepth = 16;
  // The neighbour's region as the copy's READs see it: an MR of its own,
  // remote read only (the data path's grants none), dropped after the copy
  // (declared first, so destroyed after the QPs that use it).
  FERRY_ASSIGN_OR_RETURN(auto read_mr,
                         from.nic->reg_mr(*from.pd, from.region->data(), from.region->size(), nic::kAccessRemoteRead));
  nic::CqInitAttr cqa;
  cqa.cqe = 2 * kDepth;
  FERRY_ASSIGN_OR_RETURN(auto cq_to, to.nic->create_cq(cqa));
  FERRY_ASSIGN_OR_RETURN(auto cq_from, from.nic->create_cq(cqa));
  nic::QpInitAttr qa;
  qa.send_cq = qa.recv_cq = cq_to.get();
  qa.cap.max_send_wr = kDepth;
  qa.cap.max_recv_wr = 1;
  FERRY_ASSIGN_OR_RETURN(auto qp_to, to.nic->create_qp(*to.pd, qa));
  nic::QpInitAttr qb = qa;
  qb.send_cq = qb.recv_cq = cq_from.get();
  FERRY_ASSIGN_OR_RETURN(auto qp_from, from.nic->create_qp(*from.pd, qb));
  nic::ConnectOptions co;
  co.access_flags = nic::kAccessRemoteRead;  // the copy only reads the neighbour
  FERRY_RETURN_IF_ERROR(nic::connect_qps(*qp_to, *to.nic, *qp_from, *from.nic, co));
  const size_t bytes = std::min(from.region->size(), to.region->size());
  size_t posted = 0, done = 0;
  uint32_t in_flight = 0;
  Status failure;
  while (done < bytes) {
    while (in_flight < kDepth && posted < bytes) {
      const auto len = static_cast<uint32_t>(std::min<size_t>(kChunk, bytes - posted));
      const Sge sge = to.mr->sge(posted, len);
      SendWr rd;
      rd.opcode = WrOpcode::kRdmaRead;
      rd.wr_id = posted;
      rd.flags = nic::kSendSignaled;
      rd.sg_list = std::span<const Sge>(&sge, 1);
      rd.remote_addr = read_mr->iova() + posted;
      rd.rkey = read_mr->rkey();
      FERRY_RETURN_IF_ERROR(qp_to->post_send(rd));
      posted += len;
      ++in_flight;
    }
    auto reaped = [&] {
      nic::WorkCompletion wcs[kDepth];
      auto got = cq_to->poll(wcs);
      if (!got.ok()) {
        failure = got.status();
        return true;
      }
      for (uint32_t j = 0; j < got.value(); ++j) {
        if (wcs[j].status != nic::WcStatus::kSuccess) {
          failure = unavailable("copying the neighbour's region: " + std::string(nic::wc_status_name(wcs[j].status)));
        }
        done += std::min<size_t>(kChunk, bytes - wcs[j].wr_id);
        --in_flight;
      }
      return got.value() > 0 || !failure.ok();
    };
    FERRY_RETURN_IF_ERROR(self->wait_until(reaped));
    FERRY_RETURN_IF_ERROR(failure);
  }
  to.region->persist(to.region->data(), bytes);
  return bytes;
}

Result<ReplacementReport> HyperLoopClient::Impl::replace(GroupId gid, uint32_t failed) {
  FERRY_ASSIGN_OR_RETURN(Group * old, find(gid));
  if (old->remote()) {
    return failed_precondition("replace_replica: group " + std::to_string(gid) +
                               " runs in replica processes; their chain is rebuilt by the replicas themselves");
  }
  if (failed >= old->n) {
    return out_of_range("replace_replica: group " + std::to_string(gid) + " has " + std::to_string(old->n) +
                        " replicas, not " + std::to_string(failed + 1));
  }
  if (old->n < 2) return failed_precondition("replace_replica: a chain of one replica has no neighbour to copy");
  ReplacementReport report;
  report.removed = failed;
  for (const ClientChain& ch : old->chains) report.aborted_ops += ch.next - ch.acked;
  // 1. Pause: nothing outstanding survives the old data path.
  fail(*old, unavailable("group " + std::to_string(gid) + " is being reconfigured (replica " +
                         std::to_string(failed) + " leaves the chain)"));
  // 2. The new member copies log and database from its upstream neighbour,
  //    the last survivor, while the old chains still exist.
  const uint32_t neighbour = failed + 1 == old->n ? old->n - 2 : old->n - 1;
  nic::Engine& engine = *self->engine();
  FERRY_ASSIGN_OR_RETURN(auto fresh, detail::make_host(engine, "g" + std::to_string(gid) + "-r" +
                                                                   std::to_string(old->hosts_made++),
                                                       old->options, old->options.media == pm::Media::kPm));
  FERRY_ASSIGN_OR_RETURN(report.bytes_copied, copy_region(*old->replicas[neighbour]->host, *fresh));
  // 3. Tear the old data path down, keeping the survivors' hosts and the
  //    client's host (its memory).
  auto g = std::make_unique<Group>();
  g->id = old->id;
  g->options = old->options;
  g->n = old->n;
  g->next_seq = old->next_seq;
  g->hosts_made = old->hosts_made;
  g->retired_cpu_ns = old->retired_cpu_ns;
  for (ClientChain& c : old->chains) {
    c.head.reset();
    c.ack.reset();
  }
  for (ClientChain& c : old->chains) {
    c.head_cq.reset();
    c.ack_cq.reset();
  }
  old->buf_mr.reset();
  if (old->buf != nullptr) old->client->domain->release(old->buf);
  old->buf = nullptr;
  g->client = std::move(old->client);
  std::vector<std::unique_ptr<detail::Host>> hosts;
  for (uint32_t i = 0; i < old->n; ++i) {
    ReplicaNode& r = *old->replicas[i];
    if (r.agent != nullptr) g->retired_cpu_ns += r.agent->cpu_ns();
    if (i == failed) continue;
    r.teardown();
    hosts.push_back(std::move(r.host));
  }
  hosts.push_back(std::move(fresh));
  report.source = static_cast<uint32_t>(hosts.size() - 2);
  groups[gid].reset();  // the removed replica's host goes with it
  // 4. A new data path over survivors (in their order) and the new tail.
  Status st = build(*g, std::move(hosts));
  if (!st.ok()) return Status(st.code(), "replace_replica: rebuilding the chain: " + st.message());
  groups[gid] = std::move(g);
  return report;
}

void HyperLoopClient::Impl::stop(Group& g, const Status& reason) {
  fail(g, reason);
  // Verbs order, as the kernel tears down a dead process's objects: QPs,
  // then CQs, then MRs and memory. Packets still on the wire for these QPs
  // are dropped by the NICs that receive them.
  for (ClientChain& c : g.chains) {
    c.head.reset();
    c.ack.reset();
  }
  for (ClientChain& c : g.chains) c = ClientChain{};
  g.buf_mr.reset();
  if (g.buf != nullptr) g.client->domain->release(g.buf);
  g.buf = nullptr;
  g.buf_base = nullptr;
  for (auto& r : g.replicas) {
    if (r->agent != nullptr) g.retired_cpu_ns += r->agent->cpu_ns();
    r->teardown();
  }
  g.stopped = true;
}

Status HyperLoopClient::Impl::restart(GroupId gid) {
  FERRY_ASSIGN_OR_RETURN(Group * old, find(gid));
  if (old->remote()) {
    return failed_precondition("restart_group: group " + std::to_string(gid) +
                               " runs in replica processes; reconnect_group moves it to a rebuilt chain");
  }
  if (!old->stopped) stop(*old, unavailable("group " + std::to_string(gid) + " is restarting"));
  // A replica killed before (kill_replica) restarts too: its process
  // registers its region again.
  for (auto& r : old->replicas) {
    if (r->host->mr == nullptr) FERRY_RETURN_IF_ERROR(detail::register_region(*r->host));
  }
  auto g = std::make_unique<Group>();
  g->id = old->id;
  g->options = old->options;
  g->n = old->n;
  g->next_seq = old->next_seq;
  g->hosts_made = old->hosts_made;
  g->retired_cpu_ns = old->retired_cpu_ns;
  g->client = std::move(old->client);
  std::vector<std::unique_ptr<detail::Host>> hosts;
  for (auto& r : old->replicas) hosts.push_back(std::move(r->host));
  groups[gid].reset();
  Status st = build(*g, std::move(hosts));
  if (!st.ok()) return Status(st.code(), "restart_group: rebuilding the chain: " + st.message());
  groups[gid] = std::move(g);
  return ok_status();
}

// ---- a group across processes ---------------------------------------------------

Status HyperLoopClient::Impl::connect_remote(Group& g, const RemoteGroupOptions& ro) {
  const GroupOptions& o = g.options;
  nic::Nic& cnic = *nic;
  g.cnic = &cnic;
  FERRY_ASSIGN_OR_RETURN(g.remote_pd, cnic.alloc_pd());
  g.cpd = g.remote_pd.get();
  FERRY_ASSIGN_OR_RETURN(g.remote_client_mem, nic::SharedMemory::create(o.region_bytes, "ferry-hyperloop-client"));
  g.client_mem = std::span<uint8_t>(g.remote_client_mem.data(), o.region_bytes);
  FERRY_ASSIGN_OR_RETURN(g.remote_client_mr,
                         cnic.reg_mr(*g.cpd, g.client_mem.data(), g.client_mem.size(), nic::kAccessLocalWrite));
  g.client_mr = g.remote_client_mr.get();
  return connect_chains(g, ro);
}

void HyperLoopClient::Impl::teardown_chains(Group& g, const Status& reason) {
  fail(g, reason);
  g.unserve();
  g.acks.reset();
  for (ClientChain& c : g.chains) {
    c.head.reset();
    c.ack.reset();
  }
  for (ClientChain& c : g.chains) c = ClientChain{};
  g.buf_mr.reset();
  g.remote_buf_mem = nic::SharedMemory();
  g.buf_base = nullptr;
  g.joins.clear();
  g.replica_iova = {};
  g.head_rkey = 0;
  g.failed = ok_status();
}

Status HyperLoopClient::Impl::connect_chains(Group& g, const RemoteGroupOptions& ro) {
  const GroupOptions& o = g.options;
  const uint32_t n = g.n;
  const uint32_t d = o.ring_ops;
  nic::Nic& cnic = *g.cnic;
  FERRY_RETURN_IF_ERROR(build_client_side(g));

  // The acknowledgement QPs take one RECV per ring slot, then wait for the
  // tail on the client's listener.
  cm::QpOptions link;
  link.access_flags = detail::kLinkAccess;
  for (ClientChain& ch : g.chains) {
    FERRY_RETURN_IF_ERROR(cm::init_qp(*ch.ack, link));
    std::vector<RecvWr> recvs(d);
    for (uint32_t s = 0; s < d; ++s) recvs[s].wr_id = s;
    FERRY_RETURN_IF_ERROR(ch.ack->post_recv(recvs));
  }
  g.acks = std::make_unique<detail::LinkSet>("client of group " + ro.group, o, o.replicas - 1);
  std::vector<std::vector<uint8_t>> replies;
  for (ClientChain& ch : g.chains) {
    FERRY_RETURN_IF_ERROR(g.acks->serve(*ro.listener, detail::ack_service(ro.group, ch.chain), cnic, *ch.ack));
    detail::AckReply reply;
    reply.slots = g.buf_iova(ch.acks);
    reply.rkey = g.buf_mr->rkey();
    reply.stride = ch.ack_stride;
    replies.push_back(cm::private_data_of(reply));
  }
  g.acks->open(std::move(replies));

  // The head: replica 0 accepts once the whole chain behind it is armed.
  const std::vector<uint8_t> hello = cm::private_data_of(detail::hello_of(o, detail::kClientSender));
  for (ClientChain& ch : g.chains) {
    FERRY_ASSIGN_OR_RETURN(cm::Connection conn,
                           detail::connect_retrying(ro.head, detail::up_service(ro.group, ch.chain), cnic, *ch.head,
                                                    hello, ro.timeout_ms));
    FERRY_ASSIGN_OR_RETURN(const detail::UpReply up,
                           detail::parse_up_reply(conn.private_data, n, "client of group " + ro.group));
    g.replica_iova = up.region_iova;
    g.head_rkey = up.rkey;
  }

  // The tail connected before replica 0 became ready; its RTU may still be
  // on its way to the listener.
  FERRY_RETURN_IF_ERROR(g.acks->wait_connected(ro.timeout_ms));
  g.unserve();
  return ok_status();
}

// ---- submission --------------------------------------------------------------

namespace {

// Every descriptor the client sends holds only its slots' opcodes
// (layout.h, opcode_allowed): the replicas run whatever byte arrives.
void check_opcodes(const Group& g, Chain c, uint8_t op, uint8_t flush_op) {
  FERRY_ASSERT(detail::opcode_allowed(c, detail::OpcodeField::kData, g.options.flush_verb, op) &&
                   detail::opcode_allowed(c, detail::OpcodeField::kFlush, g.options.flush_verb, flush_op),
               "hyperloop: a descriptor with an opcode its slot may not hold");
}

}  // namespace

Status HyperLoopClient::Impl::acquire(Group& g, ClientChain& ch) {
  if (!g.failed.ok()) return failed_precondition("group " + std::to_string(g.id) + " failed: " + g.failed.message());
  auto room = [&] { return !g.failed.ok() || ch.next - ch.acked < g.options.window; };
  if (!room()) {
    ++stats.window_waits;
    FERRY_RETURN_IF_ERROR(self->wait_until(room));
  }
  if (!g.failed.ok()) return failed_precondition("group " + std::to_string(g.id) + " failed: " + g.failed.message());
  return ok_status();
}

void HyperLoopClient::Impl::record(Group& g, ClientChain& ch, Primitive p, Callback done, uint8_t execute_map,
                                   uint64_t old_value, int32_t join, bool flushes) {
  Pending& slot = ch.pending[ch.next % g.options.ring_ops];
  slot.group_seq = g.next_seq++;
  slot.primitive = p;
  slot.done = std::move(done);
  slot.execute_map = execute_map;
  slot.old_value = old_value;
  slot.join = join;
  ++ch.next;
  // A flush on a chain drains everything before it on that chain.
  ch.dirty = !flushes;
}

Status HyperLoopClient::Impl::post_write(Group& g, uint64_t offset, uint32_t size, bool data, bool flush) {
  ClientChain& ch = g.chains[static_cast<int>(Chain::kWrite)];
  const uint32_t n = g.n;
  const uint64_t k = ch.next;
  uint8_t* msg = ch.meta + (k % g.options.ring_ops) * ch.meta_stride;
  for (uint32_t i = 0; i < n; ++i) {
    detail::CopyDesc desc{};
    desc.imm = static_cast<uint32_t>(k);
    if (i + 1 < n) {
      desc.op = static_cast<uint8_t>(data ? WrOpcode::kRdmaWrite : WrOpcode::kNop);
      desc.flush_op = static_cast<uint8_t>(flush ? g.flush_opcode() : WrOpcode::kNop);
      desc.remote_addr = g.replica_iova[i + 1] + offset;
      desc.local_addr = g.replica_iova[i] + offset;
      desc.length = size;
      check_opcodes(g, Chain::kWrite, desc.op, desc.flush_op);
    }  // the tail's op bytes go to its discard scratch
    std::memcpy(msg + i * kDescBytes, &desc, kDescBytes);
  }
  SendWr wrs[3];
  uint32_t count = 0;
  const Sge data_sge = g.client_mr->sge(offset, size);
  if (data) {
    wrs[count].opcode = WrOpcode::kRdmaWrite;
    wrs[count].sg_list = std::span<const Sge>(&data_sge, 1);
    wrs[count].remote_addr = g.replica_iova[0] + offset;
    wrs[count].rkey = g.head_rkey;
    ++count;
  }
  if (flush) {
    SendWr& f = wrs[count++];
    f.opcode = g.flush_opcode();
    f.remote_addr = g.replica_iova[0];
    f.rkey = g.head_rkey;
    f.flush_persistent = true;
    f.flush_whole_mr = true;
  }
  const Sge msg_sge{g.buf_iova(msg), detail::message_bytes(Chain::kWrite, n, 0), g.buf_mr->lkey()};
  if (message_hook) message_hook(data ? Primitive::kWrite : Primitive::kFlush, {msg, msg_sge.length});
  SendWr& send = wrs[count++];
  send.opcode = WrOpcode::kSend;
  send.wr_id = k;
  send.flags = static_cast<uint8_t>(nic::kSendSignaled | (flush ? nic::kSendFence : 0));
  send.sg_list = std::span<const Sge>(&msg_sge, 1);
  return ch.head->post_send(std::span<const SendWr>(wrs, count));
}

Status HyperLoopClient::Impl::post_cas(Group& g, uint64_t offset, uint64_t old_value, uint64_t new_value,
                                       uint8_t map, bool flush) {
  ClientChain& ch = g.chains[static_cast<int>(Chain::kCas)];
  const uint32_t n = g.n;
  const uint64_t k = ch.next;
  uint8_t* msg = ch.meta + (k % g.options.ring_ops) * ch.meta_stride;
  for (uint32_t i = 0; i < n; ++i) {
    detail::CasDesc desc{};
    desc.op = static_cast<uint8_t>((map >> i) & 1 ? WrOpcode::kAtomicCmpAndSwp : WrOpcode::kNop);
    desc.flush_op = static_cast<uint8_t>(flush ? g.flush_opcode() : WrOpcode::kNop);
    desc.imm = static_cast<uint32_t>(k);
    desc.target = g.replica_iova[i] + offset;
    desc.compare = old_value;
    desc.swap = new_value;
    check_opcodes(g, Chain::kCas, desc.op, desc.flush_op);
    std::memcpy(msg + i * kDescBytes, &desc, kDescBytes);
  }
  std::memset(msg + n * kDescBytes, 0, 8 * n);  // the result map, filled in along the chain
  const Sge msg_sge{g.buf_iova(msg), detail::message_bytes(Chain::kCas, n, 0), g.buf_mr->lkey()};
  if (message_hook) message_hook(map != 0 || !flush ? Primitive::kCas : Primitive::kFlush, {msg, msg_sge.length});
  SendWr send;
  send.opcode = WrOpcode::kSend;
  send.wr_id = k;
  send.flags = nic::kSendSignaled;
  send.sg_list = std::span<const Sge>(&msg_sge, 1);
  return ch.head->post_send(send);
}

Status HyperLoopClient::Impl::post_memcpy(Group& g, uint64_t src, uint64_t dst, uint32_t size, bool copy,
                                          bool flush) {
  ClientChain& ch = g.chains[static_cast<int>(Chain::kMemcpy)];
  const uint32_t n = g.n;
  const uint64_t k = ch.next;
  uint8_t* msg = ch.meta + (k % g.options.ring_ops) * ch.meta_stride;
  for (uint32_t i = 0; i < n; ++i) {
    detail::CopyDesc desc{};
    desc.op = static_cast<uint8_t>(copy ? WrOpcode::kRdmaWrite : WrOpcode::kNop);
    desc.flush_op = static_cast<uint8_t>(flush ? g.flush_opcode() : WrOpcode::kNop);
    desc.imm = static_cast<uint32_t>(k);
    desc.remote_addr = g.replica_iova[i] + dst;
    desc.local_addr = g.replica_iova[i] + src;
    desc.length = size;
    check_opcodes(g, Chain::kMemcpy, desc.op, desc.flush_op);
    std::memcpy(msg + i * kDescBytes, &desc, kDescBytes);
  }
  const Sge msg_sge{g.buf_iova(msg), detail::message_bytes(Chain::kMemcpy, n, 0), g.buf_mr->lkey()};
  if (message_hook) message_hook(copy ? Primitive::kMemcpy : Primitive::kFlush, {msg, msg_sge.length});
  SendWr send;
  send.opcode = WrOpcode::kSend;
  send.wr_id = k;
  send.flags = nic::kSendSignaled;
  send.sg_list = std::span<const Sge>(&msg_sge, 1);
  return ch.head->post_send(send);
}

Status HyperLoopClient::Impl::post_flush_only(Group& g, ClientChain& ch) {
  switch (ch.chain) {
    case Chain::kWrite: return post_write(g, 0, 0, /*data=*/false, /*flush=*/true);
    case Chain::kCas: return post_cas(g, 0, 0, 0, /*map=*/0, /*flush=*/true);
    case Chain::kMemcpy: return post_memcpy(g, 0, 0, 0, /*copy=*/false, /*flush=*/true);
  }
  return internal_error("unknown chain");
}

// ---- completion --------------------------------------------------------------

void HyperLoopClient::Impl::fail(Group& g, const Status& status) {
  if (!g.failed.ok()) return;
  g.failed = status;
  for (ClientChain& ch : g.chains) {
    for (uint64_t k = ch.acked; k < ch.next; ++k) {
      Pending& p = ch.pending[k % g.options.ring_ops];
      if (p.join >= 0) {
        FlushJoin& j = g.joins[p.join];
        if (j.used) {
          OpResult r;
          r.status = status;
          r.primitive = Primitive::kFlush;
          r.seq = j.group_seq;
          ready.emplace_back(std::move(j.done), r);
          j = FlushJoin{};
        }
      } else {
        OpResult r;
        r.status = status;
        r.primitive = p.primitive;
        r.seq = p.group_seq;
        ready.emplace_back(std::move(p.done), r);
      }
      p = Pending{};
    }
    ch.acked = ch.next;
  }
}

void HyperLoopClient::Impl::complete(Group& g, ClientChain& ch, const nic::WorkCompletion& wc) {
  const uint64_t k = ch.acked;
  const uint32_t s = static_cast<uint32_t>(k % g.options.ring_ops);
  if (!wc.has_imm || wc.imm_data != static_cast<uint32_t>(k)) {
    fail(g, internal_error("hyperloop " + std::string(detail::chain_name(ch.chain)) + " chain: acknowledgement " +
                           std::to_string(wc.imm_data) + " arrived where operation " + std::to_string(k) +
                           " was expected"));
    return;
  }
  Pending& p = ch.pending[s];
  OpResult r;
  r.primitive = p.primitive;
  r.seq = p.group_seq;
  if (ch.chain == Chain::kCas && p.join < 0) {
    const uint8_t* map = ch.acks + static_cast<size_t>(s) * ch.ack_stride;
    r.cas.executed = p.execute_map;
    for (uint32_t i = 0; i < g.n; ++i) {
      if (!((p.execute_map >> i) & 1)) continue;
      uint64_t original;
      std::memcpy(&original, map + 8 * i, 8);
      r.cas.original[i] = original;
      if (original == p.old_value) r.cas.succeeded |= static_cast<uint8_t>(1u << i);
    }
  }
  ++ch.acked;
  ++stats.ops_completed;
  Status st = ch.ack->post_recv(RecvWr{s, {}});
  if (p.join >= 0) {
    FlushJoin& j = g.joins[p.join];
    if (--j.remaining == 0) {
      OpResult fr;
      fr.primitive = Primitive::kFlush;
      fr.seq = j.group_seq;
      ready.emplace_back(std::move(j.done), fr);
      j = FlushJoin{};
    }
  } else {
    ready.emplace_back(std::move(p.done), r);
  }
  p = Pending{};
  if (!st.ok()) fail(g, st);
}

// Takes every completion `cq` holds, handing each to `on`; a failed poll
// fails the group. Returns how many it took.
template <typename OnCompletion>
size_t drain_cq(HyperLoopClient::Impl& impl, Group& g, nic::CompletionQueue& cq, OnCompletion&& on) {
  nic::WorkCompletion wcs[16];
  size_t seen = 0;
  for (;;) {
    auto got = cq.poll(wcs);
    if (!got.ok()) {
      impl.fail(g, got.status());
      return seen;
    }
    for (uint32_t j = 0; j < got.value(); ++j) on(wcs[j]);
    seen += got.value();
    if (got.value() < std::size(wcs)) return seen;
  }
}

size_t HyperLoopClient::Impl::poll_group(Group& g) {
  // Messages are built only on failure: this runs on every poll.
  auto failure = [&](std::string_view what, const nic::WorkCompletion& wc) {
    fail(g, unavailable(std::string(what) + ": " + std::string(nic::wc_status_name(wc.status))));
  };
  auto chain_failure = [&](const ClientChain& ch, std::string_view what, const nic::WorkCompletion& wc) {
    failure("hyperloop " + std::string(detail::chain_name(ch.chain)) + " chain: " + std::string(what), wc);
  };
  size_t seen = 0;
  for (ClientChain& ch : g.chains) {
    if (ch.head_cq == nullptr || ch.ack_cq == nullptr) continue;  // a reconnection that failed half-way
    seen += drain_cq(*this, g, *ch.head_cq, [&](const nic::WorkCompletion& wc) {
      if (wc.status != nic::WcStatus::kSuccess) chain_failure(ch, "sending to replica 0 failed", wc);
    });
    seen += drain_cq(*this, g, *ch.ack_cq, [&](const nic::WorkCompletion& wc) {
      if (wc.status != nic::WcStatus::kSuccess) {
        chain_failure(ch, "acknowledgement failed", wc);
      } else if (g.failed.ok()) {
        complete(g, ch, wc);
      }
    });
  }
  return seen;
}

// ---- public API ----------------------------------------------------------------

HyperLoopClient::HyperLoopClient(nic::Engine* engine, const ClientOptions& options)
    : GroupClient(engine, options), impl_(std::make_unique<Impl>()) {
  impl_->self = this;
}

HyperLoopClient::~HyperLoopClient() = default;

Result<std::unique_ptr<HyperLoopClient>> HyperLoopClient::create(nic::Engine& engine, const ClientOptions& options) {
  return std::unique_ptr<HyperLoopClient>(new HyperLoopClient(&engine, options));
}

Result<std::unique_ptr<HyperLoopClient>> HyperLoopClient::create(nic::Nic& nic, const ClientOptions& options) {
  auto client = std::unique_ptr<HyperLoopClient>(new HyperLoopClient(nic.engine(), options));
  client->impl_->nic = &nic;
  return client;
}

Result<GroupId> HyperLoopClient::connect_group(const RemoteGroupOptions& options) {
  bool taken = false;
  for (const auto& g : impl_->groups) taken = taken || (g != nullptr && g->remote_name == options.group);
  FERRY_RETURN_IF_ERROR(detail::check_connect_args(impl_->nic != nullptr, options, taken));
  auto g = std::make_unique<Group>();
  g->id = static_cast<GroupId>(impl_->groups.size());
  g->options = options.options;
  g->n = options.options.replicas;
  g->remote_name = options.group;
  Status st = impl_->connect_remote(*g, options);
  if (!st.ok()) return Status(st.code(), "connect_group " + options.group + ": " + st.message());
  impl_->groups.push_back(std::move(g));
  return impl_->groups.back()->id;
}

Status HyperLoopClient::reconnect_group(GroupId gid, const RemoteGroupOptions& options) {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  if (!g->remote()) {
    return failed_precondition("reconnect_group: group " + std::to_string(gid) + " was built in process");
  }
  bool taken = false;
  for (const auto& other : impl_->groups) {
    taken = taken || (other != nullptr && other.get() != g && other->remote_name == options.group);
  }
  FERRY_RETURN_IF_ERROR(detail::check_connect_args(true, options, taken));
  if (options.options.region_bytes != g->options.region_bytes) {
    return invalid_argument("reconnect_group: region_bytes " + std::to_string(options.options.region_bytes) +
                            " differs from the group's " + std::to_string(g->options.region_bytes) +
                            " (its client memory is kept)");
  }
  impl_->teardown_chains(*g, unavailable("group " + std::to_string(gid) + " is reconnecting to the chain of " +
                                         options.group));
  g->options = options.options;
  g->n = options.options.replicas;
  g->remote_name = options.group;
  Status st = impl_->connect_chains(*g, options);
  if (!st.ok()) {
    g->failed = Status(st.code(), "reconnect_group " + options.group + ": " + st.message());
    return g->failed;
  }
  return ok_status();
}

Result<GroupId> HyperLoopClient::create_group(const GroupOptions& options) {
  if (engine() == nullptr) {
    return failed_precondition("create_group: this client's NIC is daemon-attached; its groups are connected "
                               "to replica processes (connect_group)");
  }
  FERRY_RETURN_IF_ERROR(validate_group_options(options));
  auto g = std::make_unique<Group>();
  g->id = static_cast<GroupId>(impl_->groups.size());
  g->options = options;
  g->n = options.replicas;
  Status st = impl_->build(*g);
  if (!st.ok()) return Status(st.code(), "create_group: " + st.message());
  impl_->groups.push_back(std::move(g));
  return impl_->groups.back()->id;
}

Status HyperLoopClient::kill_replica(GroupId gid, uint32_t index) {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  if (g->remote()) {
    return failed_precondition("kill_replica: replica " + std::to_string(index) + " runs in another process");
  }
  if (index >= g->n) {
    return out_of_range("kill_replica: group " + std::to_string(gid) + " has " + std::to_string(g->n) + " replicas");
  }
  ReplicaNode& r = *g->replicas[index];
  if (r.agent != nullptr) g->retired_cpu_ns += r.agent->cpu_ns();
  r.teardown();
  r.host->mr.reset();  // a dead process's memory registrations go with it
  return ok_status();
}

Result<ReplacementReport> HyperLoopClient::replace_replica(GroupId gid, uint32_t failed) {
  return impl_->replace(gid, failed);
}

Status HyperLoopClient::stop_group(GroupId gid) {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  if (g->remote()) {
    return failed_precondition("stop_group: group " + std::to_string(gid) + " runs in replica processes");
  }
  if (!g->stopped) impl_->stop(*g, unavailable("group " + std::to_string(gid) + "'s data path went down"));
  return ok_status();
}

Status HyperLoopClient::restart_group(GroupId gid) { return impl_->restart(gid); }

Result<std::span<uint8_t>> HyperLoopClient::client_memory(GroupId gid) {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  return g->client_mem;
}

Result<ReplicaView> HyperLoopClient::replica(GroupId gid, uint32_t index) {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  if (index >= g->n) {
    return out_of_range("group " + std::to_string(gid) + " has " + std::to_string(g->n) + " replicas, not " +
                        std::to_string(index + 1));
  }
  if (g->remote()) return failed_precondition("replica " + std::to_string(index) + " runs in another process");
  return ReplicaView{g->replicas[index]->host->domain.get(), g->replicas[index]->host->region};
}

Result<GroupOptions> HyperLoopClient::group_options(GroupId gid) const {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  return g->options;
}

Status HyperLoopClient::gwrite_async(GroupId gid, uint64_t offset, uint32_t size, bool flush, Callback done) {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  FERRY_RETURN_IF_ERROR(check_write_args(offset, size, g->options));
  ClientChain& ch = g->chains[static_cast<int>(Chain::kWrite)];
  FERRY_RETURN_IF_ERROR(impl_->acquire(*g, ch));
  FERRY_RETURN_IF_ERROR(impl_->post_write(*g, offset, size, /*data=*/true, flush));
  impl_->record(*g, ch, Primitive::kWrite, std::move(done), 0, 0, -1, flush);
  return ok_status();
}

Status HyperLoopClient::gcas_async(GroupId gid, uint64_t offset, uint64_t old_value, uint64_t new_value,
                                   uint8_t execute_map, bool flush, Callback done) {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  FERRY_RETURN_IF_ERROR(check_cas_args(offset, execute_map, g->options));
  ClientChain& ch = g->chains[static_cast<int>(Chain::kCas)];
  FERRY_RETURN_IF_ERROR(impl_->acquire(*g, ch));
  FERRY_RETURN_IF_ERROR(impl_->post_cas(*g, offset, old_value, new_value, execute_map, flush));
  impl_->record(*g, ch, Primitive::kCas, std::move(done), execute_map, old_value, -1, flush);
  return ok_status();
}

Status HyperLoopClient::gmemcpy_async(GroupId gid, uint64_t src_offset, uint64_t dst_offset, uint32_t size,
                                      bool flush, Callback done) {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  FERRY_RETURN_IF_ERROR(check_memcpy_args(src_offset, dst_offset, size, g->options));
  ClientChain& ch = g->chains[static_cast<int>(Chain::kMemcpy)];
  FERRY_RETURN_IF_ERROR(impl_->acquire(*g, ch));
  FERRY_RETURN_IF_ERROR(impl_->post_memcpy(*g, src_offset, dst_offset, size, /*copy=*/true, flush));
  impl_->record(*g, ch, Primitive::kMemcpy, std::move(done), 0, 0, -1, flush);
  return ok_status();
}

Status HyperLoopClient::gflush_async(GroupId gid, Callback done) {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  if (!g->failed.ok()) {
    return failed_precondition("group " + std::to_string(g->id) + " failed: " + g->failed.message());
  }
  const uint64_t seq = g->next_seq;
  // Every chain with unflushed operations gets a flush-only operation; the
  // gflush completes when the last of them does.
  std::array<ClientChain*, kChainCount> dirty{};
  uint32_t count = 0;
  for (ClientChain& ch : g->chains) {
    if (ch.dirty) dirty[count++] = &ch;
  }
  if (count == 0) {
    ++g->next_seq;
    OpResult r;
    r.primitive = Primitive::kFlush;
    r.seq = seq;
    impl_->ready.emplace_back(std::move(done), r);
    return ok_status();
  }
  int32_t join = -1;
  auto free_join = [&] {
    for (size_t j = 0; j < g->joins.size(); ++j) {
      if (!g->joins[j].used) {
        join = static_cast<int32_t>(j);
        return true;
      }
    }
    return !g->failed.ok();
  };
  if (!free_join()) FERRY_RETURN_IF_ERROR(wait_until(free_join));
  if (!g->failed.ok()) return failed_precondition("group " + std::to_string(g->id) + " failed: " + g->failed.message());
  FlushJoin& j = g->joins[join];
  j.used = true;
  j.remaining = count;
  j.group_seq = seq;
  j.done = std::move(done);
  ++g->next_seq;
  for (uint32_t c = 0; c < count; ++c) {
    ClientChain& ch = *dirty[c];
    Status st = impl_->acquire(*g, ch);
    if (st.ok()) st = impl_->post_flush_only(*g, ch);
    if (!st.ok()) {
      // Part of the gflush is in flight: fail the group rather than report a
      // flush that half happened.
      impl_->fail(*g, st);
      return ok_status();
    }
    Pending& p = ch.pending[ch.next % g->options.ring_ops];
    p.group_seq = seq;
    p.primitive = Primitive::kFlush;
    p.join = join;
    ++ch.next;
    ch.dirty = false;
  }
  return ok_status();
}

Result<uint32_t> HyperLoopClient::outstanding(GroupId gid) const {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  uint64_t n = 0;
  for (const ClientChain& ch : g->chains) n += ch.next - ch.acked;
  return static_cast<uint32_t>(n);
}

uint64_t HyperLoopClient::replica_cpu_ns() const {
  uint64_t ns = 0;
  for (const auto& g : impl_->groups) {
    ns += g->retired_cpu_ns;
    for (const auto& r : g->replicas) {
      if (r->agent != nullptr) ns += r->agent->cpu_ns();
    }
  }
  return ns;
}

Result<WireBytes> HyperLoopClient::wire_bytes(GroupId gid) const {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  using detail::QpRole;
  WireBytes w;
  for (const ClientChain& ch : g->chains) {
    if (ch.head == nullptr) continue;  // stopped
    detail::add_traffic(w, *ch.head, QpRole::kData);
    detail::add_traffic(w, *ch.ack, QpRole::kResponder);
  }
  for (const auto& r : g->replicas) {
    if (r->dead()) continue;  // its queues died with it
    for (const detail::ReplicaChain& rc : r->chains) {
      detail::add_traffic(w, *rc.up, QpRole::kResponder);
      detail::add_traffic(w, *rc.down, rc.tail ? QpRole::kAcknowledge : QpRole::kData);
      for (const nic::QueuePair* lo : {rc.loop_a.get(), rc.loop_b.get(), rc.ctl.get(), rc.ctl_peer.get()}) {
        if (lo != nullptr) detail::add_traffic(w, *lo, QpRole::kLoopback);
      }
    }
  }
  return w;
}

HyperLoopStats HyperLoopClient::stats() const { return impl_->stats; }

Result<ReplicaRings> HyperLoopClient::replica_rings(GroupId gid, uint32_t index) const {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  if (index >= g->n) return out_of_range("replica " + std::to_string(index) + " of a group of " + std::to_string(g->n));
  if (g->remote()) return failed_precondition("replica " + std::to_string(index) + " runs in another process");
  const ReplicaNode& r = *g->replicas[index];
  if (r.dead()) return failed_precondition("replica " + std::to_string(index) + " was killed: it has no rings");
  ReplicaRings rings;
  rings.nic = r.host->nic;
  rings.pd = r.host->pd.get();
  rings.addr = r.wq_mr->iova();
  rings.bytes = r.wq_mr->length();
  rings.key = r.wq_mr->rkey();
  rings.access = r.wq_mr->access();
  for (int c = 0; c < kChainCount; ++c) {
    const detail::ReplicaChain& rc = r.chains[c];
    ReplicaRings::Chain& out = rings.chains[c];
    out.down_ring = reinterpret_cast<uint64_t>(rc.down_ring);
    out.ctl_ring = rc.ctl_mr->iova();
    out.ctl_bytes = rc.ctl_mr->length();
    out.ctl_key = rc.ctl_mr->rkey();
    out.ctl_access = rc.ctl_mr->access();
    out.down_qpn = rc.down->qp_num();
    out.ctl_qpn = rc.ctl->qp_num();
  }
  return rings;
}

void HyperLoopClient::set_poll_hook(std::function<void()> hook) { impl_->poll_hook = std::move(hook); }

void HyperLoopClient::set_message_hook(MessageHook hook) { impl_->message_hook = std::move(hook); }

size_t HyperLoopClient::poll_completions() {
  if (impl_->poll_hook) impl_->poll_hook();
  for (auto& g : impl_->groups) {
    if (g != nullptr) impl_->poll_group(*g);
  }
  // Callbacks run last, one at a time off the queue: they may submit new
  // operations (and so poll again) without disturbing this loop.
  size_t ran = 0;
  while (!impl_->ready.empty()) {
    auto [cb, result] = std::move(impl_->ready.front());
    impl_->ready.pop_front();
    ++ran;
    if (cb) cb(result);
  }
  return ran;
}

}  // namespace ferry::hyperloop
