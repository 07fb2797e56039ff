// Reconfiguring a group built in process: a failed replica replaced by a
// fresh one that copies its neighbour's region (HyperLoop §4.4), and a
// group's data path stopped and restarted over the same members. Each
// fails what was outstanding and builds a new data path (client_build.cc);
// the group keeps its id, its sequence numbers and its client memory.
#include <algorithm>
#include <string>
#include <vector>

#include "client_impl.h"
#include "ferry/nic/connect.h"
#include "replica_node.h"

namespace ferry::hyperloop {

using detail::ReplicaNode;
using nic::SendWr;
using nic::Sge;
using nic::WrOpcode;

namespace {

// A group to take `old`'s place on a new data path: its id, options,
// sequence and counters, and its client host (the client's memory). The
// caller has released old's client-side chains.
std::unique_ptr<Group> successor_of(Group& old) {
  auto g = std::make_unique<Group>();
  g->id = old.id;
  g->options = old.options;
  g->n = old.n;
  g->next_seq = old.next_seq;
  g->hosts_made = old.hosts_made;
  g->retired_cpu_ns = old.retired_cpu_ns;
  g->client = std::move(old.client);
  return g;
}

}  // namespace

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
  fail(*old, unavailable("group " + std::to_string(gid) + " is being reconfigured (replica " + std::to_string(failed) +
                         " leaves the chain)"));
  // 2. The new member copies log and database from its upstream neighbour,
  //    the last survivor, while the old chains still exist.
  const uint32_t neighbour = failed + 1 == old->n ? old->n - 2 : old->n - 1;
  nic::Engine& engine = *self->engine();
  FERRY_ASSIGN_OR_RETURN(auto fresh,
                         detail::make_host(engine, "g" + std::to_string(gid) + "-r" + std::to_string(old->hosts_made++),
                                           old->options, old->options.media == pm::Media::kPm));
  FERRY_ASSIGN_OR_RETURN(report.bytes_copied, copy_region(*old->replicas[neighbour]->host, *fresh));
  // 3. Tear the old data path down, keeping the survivors' hosts and the
  //    client's host (its memory).
  old->release_client_chains();
  std::unique_ptr<Group> g = successor_of(*old);
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
  g.release_client_chains();
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
  std::unique_ptr<Group> g = successor_of(*old);
  std::vector<std::unique_ptr<detail::Host>> hosts;
  for (auto& r : old->replicas) hosts.push_back(std::move(r->host));
  groups[gid].reset();
  Status st = build(*g, std::move(hosts));
  if (!st.ok()) return Status(st.code(), "restart_group: rebuilding the chain: " + st.message());
  groups[gid] = std::move(g);
  return ok_status();
}

}  // namespace ferry::hyperloop
