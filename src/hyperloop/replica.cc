// Replica: one HyperLoop replica in its own process (include/ferry/hyperloop/
// replica.h), the public face of a detail::ReplicaNode. The queues and chains
// are those of the in-process replicas (replica_node.cc); only the wiring
// differs: the connection manager instead of nic::connect_qps.
#include "ferry/hyperloop/replica.h"

#include <atomic>
#include <cstring>

#include "ferry/nic/connect.h"
#include "ferry/nic/shared_memory.h"
#include "replica_node.h"
#include "wiring.h"

namespace ferry::hyperloop {

using detail::Chain;
using detail::kChainCount;

struct Replica::Impl {
  ReplicaSpec spec;
  std::span<uint8_t> region;
  nic::Nic* nic = nullptr;
  // Destroyed in reverse: the node (QPs, CQs, the WQ MR) before the region's
  // MR, the PD and the WQ memory.
  nic::SharedMemory wq_mem;
  std::unique_ptr<nic::ProtectionDomain> pd;
  std::unique_ptr<nic::MemoryRegion> region_mr;
  std::unique_ptr<detail::ReplicaNode> node;
  std::atomic<bool> downstream_done{false};  // status() may ask from another thread
  std::unique_ptr<detail::LinkSet> up;  // the up services (upstream connects), open once downstream is done
  detail::UpReply up_reply;

  ~Impl() {
    if (up) up->unserve();
    node.reset();
    region_mr.reset();
    pd.reset();
  }

  std::string who() const {
    return "replica " + std::to_string(spec.index) + " of group " + spec.group;
  }
};

Replica::Replica(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Replica::~Replica() = default;

Result<std::unique_ptr<Replica>> Replica::create(nic::Nic& nic, std::span<uint8_t> region, const ReplicaSpec& spec) {
  FERRY_RETURN_IF_ERROR(detail::check_replica_args(spec, region.size()));
  const GroupOptions& o = spec.options;
  auto impl = std::make_unique<Impl>();
  Impl& r = *impl;
  r.spec = spec;
  r.region = region.first(o.region_bytes);
  r.nic = &nic;
  FERRY_ASSIGN_OR_RETURN(r.pd, nic.alloc_pd());
  FERRY_ASSIGN_OR_RETURN(r.region_mr, nic.reg_mr(*r.pd, r.region.data(), r.region.size(), detail::kRegionAccess));
  const size_t wq_bytes = detail::replica_wq_bytes(o.replicas, o.ring_ops);
  FERRY_ASSIGN_OR_RETURN(r.wq_mem, nic::SharedMemory::create(wq_bytes, "ferry-hyperloop-wq"));

  r.node = std::make_unique<detail::ReplicaNode>();
  detail::ReplicaNode& node = *r.node;
  node.index = spec.index;
  node.replicas = o.replicas;
  node.options = o;
  node.nic = &nic;
  node.pd = r.pd.get();
  node.region_mr = r.region_mr.get();
  node.wq = r.wq_mem.data();
  FERRY_RETURN_IF_ERROR(detail::create_replica_queues(node));

  // The replica's own pairs (one NIC): the loopback CAS/copy pair works on
  // its region, the control pair only adds to the control ring's indices.
  for (detail::ReplicaChain& rc : node.chains) {
    nic::ConnectOptions loop;
    loop.access_flags = detail::kLinkAccess | nic::kAccessRemoteAtomic;
    if (rc.loop_a) FERRY_RETURN_IF_ERROR(nic::connect_qps(*rc.loop_a, nic, *rc.loop_b, nic, loop));
    nic::ConnectOptions rearm;
    rearm.access_flags = nic::kAccessRemoteAtomic;
    FERRY_RETURN_IF_ERROR(nic::connect_qps(*rc.ctl, nic, *rc.ctl_peer, nic, rearm));
    // The up QP takes its RECVs before its upstream can connect.
    cm::QpOptions up;
    up.access_flags = detail::kLinkAccess;
    FERRY_RETURN_IF_ERROR(cm::init_qp(*rc.up, up));
  }
  r.up_reply.rkey = r.region_mr->rkey();
  r.up_reply.count = 1;
  r.up_reply.region_iova[0] = r.region_mr->iova();
  r.up = std::make_unique<detail::LinkSet>(r.who(), o, spec.index == 0 ? detail::kClientSender : spec.index - 1);
  return std::unique_ptr<Replica>(new Replica(std::move(impl)));
}

Status Replica::serve(cm::Listener& listener) {
  Impl& r = *impl_;
  for (int c = 0; c < kChainCount; ++c) {
    Status st = r.up->serve(listener, detail::up_service(r.spec.group, Chain(c)), *r.nic, *r.node->chains[c].up);
    if (!st.ok()) {
      r.up->unserve();
      return st;
    }
  }
  return ok_status();
}

Status Replica::connect_downstream(std::string_view address) {
  Impl& r = *impl_;
  if (r.downstream_done) return failed_precondition(r.who() + ": downstream already connected");
  detail::ReplicaNode& node = *r.node;
  const bool tail = node.tail();
  const detail::ChainHello hello = detail::hello_of(r.spec.options, r.spec.index);
  const std::vector<uint8_t> hello_bytes = cm::private_data_of(hello);
  detail::Downstream ds;
  detail::UpReply reply = r.up_reply;
  for (int c = 0; c < kChainCount; ++c) {
    const Chain chain = static_cast<Chain>(c);
    const std::string service = tail ? detail::ack_service(r.spec.group, chain) : detail::up_service(r.spec.group, chain);
    Result<cm::Connection> conn = detail::connect_retrying(address, service, *r.nic, *node.chains[c].down, hello_bytes,
                                                           r.spec.connect_timeout_ms);
    if (!conn.ok()) {
      return Status(conn.status().code(), r.who() + ": connecting downstream to " + std::string(address) + ": " +
                                              conn.status().message());
    }
    const std::span<const uint8_t> pd(conn.value().private_data);
    if (tail) {
      FERRY_ASSIGN_OR_RETURN(const detail::AckReply ack, detail::parse_ack_reply(pd, 0, r.who()));
      ds.ack_slots[c] = ack.slots;
      ds.ack_rkey = ack.rkey;
      ds.ack_stride = ack.stride;
    } else {
      FERRY_ASSIGN_OR_RETURN(const detail::UpReply up,
                             detail::parse_up_reply(pd, r.spec.options.replicas - r.spec.index - 1, r.who()));
      ds.region_iova = up.region_iova[0];
      ds.region_rkey = up.rkey;
      reply.count = 1 + up.count;
      for (uint32_t i = 0; i < up.count; ++i) reply.region_iova[1 + i] = up.region_iova[i];
    }
  }
  FERRY_RETURN_IF_ERROR(detail::post_replica_chains(node, ds));
  r.downstream_done = true;
  r.up_reply = reply;
  r.up->open(std::vector<std::vector<uint8_t>>(kChainCount, cm::private_data_of(reply)));
  return ok_status();
}

ReplicaStatus Replica::status() const {
  ReplicaStatus s;
  s.ready = impl_->downstream_done;
  s.upstream_links = impl_->up->connected();
  s.last_error = impl_->up->last_error();
  return s;
}

const ReplicaSpec& Replica::spec() const { return impl_->spec; }
std::span<uint8_t> Replica::region() const { return impl_->region; }

}  // namespace ferry::hyperloop
