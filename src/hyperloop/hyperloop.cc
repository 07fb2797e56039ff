// HyperLoopClient's public API: groups built in process, connected to
// replica processes, killed, replaced, stopped and restarted; each group
// operation checked and handed to its chain. The client's internals
// (client_impl.h) are split by concern: building a group, reconfiguring it,
// connecting it across processes, submitting operations, completing them.
// The replicas' control rings re-arm themselves (layout.h, ctl_block).
#include "ferry/hyperloop/hyperloop.h"

#include <array>
#include <string>

#include "client_impl.h"
#include "replica_node.h"
#include "wiring.h"

namespace ferry::hyperloop {

using detail::Chain;
using detail::kChainCount;
using detail::ReplicaNode;

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
  return detail::add_connected_group(impl_->groups, impl_->nic != nullptr, options, [&](Group& g) {
    g.n = options.options.replicas;
    return impl_->connect_remote(g, options);
  });
}

Status HyperLoopClient::reconnect_group(GroupId gid, const RemoteGroupOptions& options) {
  FERRY_ASSIGN_OR_RETURN(Group * g, impl_->find(gid));
  if (!g->remote()) {
    return failed_precondition("reconnect_group: group " + std::to_string(gid) + " was built in process");
  }
  FERRY_RETURN_IF_ERROR(
      detail::check_connect_args(true, options, detail::group_name_taken(impl_->groups, options.group, g)));
  if (options.options.region_bytes != g->options.region_bytes) {
    return invalid_argument("reconnect_group: region_bytes " + std::to_string(options.options.region_bytes) +
                            " differs from the group's " + std::to_string(g->options.region_bytes) +
                            " (its client memory is kept)");
  }
  impl_->teardown_chains(
      *g, unavailable("group " + std::to_string(gid) + " is reconnecting to the chain of " + options.group));
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
    return failed_precondition(
        "create_group: this client's NIC is daemon-attached; its groups are connected "
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

Status HyperLoopClient::gmemcpy_async(GroupId gid, uint64_t src_offset, uint64_t dst_offset, uint32_t size, bool flush,
                                      Callback done) {
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
