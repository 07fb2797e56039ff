// A HyperLoop group's data path built in process: the client's buffers and
// queues, the replicas (each one's application thread creates its queues
// and pre-posts its chains: replica_node.h), and the connections between them.
#include <cstring>
#include <string>
#include <vector>

#include "client_impl.h"
#include "ferry/nic/connect.h"
#include "replica_node.h"
#include "wiring.h"

namespace ferry::hyperloop {

using detail::Chain;
using detail::kChainCount;
using detail::ReplicaNode;
using nic::RecvWr;

Group::Group() = default;

Group::~Group() {
  unserve();
  release_client_chains();
  remote_client_mr.reset();
  replicas.clear();
  remote_pd.reset();
  client.reset();
}

void Group::unserve() {
  if (acks) acks->unserve();
}

void Group::release_client_chains() {
  for (ClientChain& c : chains) {
    c.head.reset();
    c.ack.reset();
  }
  for (ClientChain& c : chains) c = ClientChain{};
  buf_mr.reset();
  if (buf != nullptr) client->domain->release(buf);
  buf = nullptr;
  remote_buf_mem = nic::SharedMemory();
  buf_base = nullptr;
}

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
  FERRY_ASSIGN_OR_RETURN(g.buf_mr,
                         cnic.reg_mr(*g.cpd, g.buf_base, bytes, nic::kAccessLocalWrite | nic::kAccessRemoteWrite));
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
    r->agent =
        std::make_unique<detail::Agent>("hl-" + prefix + "-r" + std::to_string(i), self->client_options().replica_cpu);
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
  const uint32_t link =
      nic::kAccessRemoteWrite | nic::kAccessRemoteRead | nic::kAccessFlushGlobal | nic::kAccessFlushPersistent;
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

}  // namespace ferry::hyperloop
