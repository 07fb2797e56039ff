// A group whose replicas are processes (Replica, each on its host's NIC
// daemon): the client's side of its chains, connected through the
// connection manager (wiring.h: the tail connects to the client's
// acknowledgement services, the client to replica 0 once the chain behind
// it is armed), and torn down again when the group reconnects.
#include <string>
#include <vector>

#include "client_impl.h"
#include "ferry/cm/cm.h"
#include "wiring.h"

namespace ferry::hyperloop {

using nic::RecvWr;

Status HyperLoopClient::Impl::connect_remote(Group& g, const RemoteGroupOptions& ro) {
  FERRY_RETURN_IF_ERROR(detail::attach_client_memory(g, *nic, "ferry-hyperloop-client"));
  return connect_chains(g, ro);
}

void HyperLoopClient::Impl::teardown_chains(Group& g, const Status& reason) {
  fail(g, reason);
  g.unserve();
  g.acks.reset();
  g.release_client_chains();
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

}  // namespace ferry::hyperloop
