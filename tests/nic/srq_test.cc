// Conformance: shared receive queues (verbs-semantics.md, "Shared receive
// queues").
#include "nic_test_util.h"

namespace ferry::nic::testing {
namespace {

class SrqTest : public NicTest {};

TEST_F(SrqTest, QpsOnOneSrqConsumeItsWqesInFifoOrderWhicheverQpReceives) {
  Host& server = add_host();
  SrqInitAttr srq_attr;
  srq_attr.max_wr = 16;
  SharedReceiveQueue* srq = &add_srq(server, srq_attr);
  QpInitAttr attr;
  attr.srq = srq;
  std::vector<QueuePair*> server_qps, client_qps;
  std::vector<Host*> clients;
  for (int i = 0; i < 3; ++i) {
    Host& c = add_host();
    QueuePair& cq = add_qp(c);
    QueuePair& sq = add_qp(server, attr);
    connect(cq, c, sq, server);
    clients.push_back(&c);
    client_qps.push_back(&cq);
    server_qps.push_back(&sq);
  }
  for (uint64_t i = 0; i < 6; ++i) {
    const Sge rs = server.sge(i * 64, 64);
    ASSERT_TRUE(srq->post_recv(RecvWr{i, std::span<const Sge>(&rs, 1)}).ok());
  }
  // Messages arrive from clients in this order; each tags its payload.
  const int order[6] = {1, 0, 2, 2, 1, 0};
  for (int k = 0; k < 6; ++k) {
    Host& c = *clients[order[k]];
    *c.at(0) = static_cast<uint8_t>(0xA0 + k);
    const Sge sge = c.sge(0, 1);
    SendWr wr;
    wr.opcode = WrOpcode::kSend;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    ASSERT_TRUE(client_qps[order[k]]->post_send(wr).ok());
    run();  // one at a time, so arrival order is the posting order
  }
  auto wcs = drain(*server.cq);
  ASSERT_EQ(wcs.size(), 6u);
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(wcs[k].wr_id, static_cast<uint64_t>(k)) << "SRQ WQEs are taken in FIFO order";
    EXPECT_EQ(wcs[k].qp_num, server_qps[order[k]]->qp_num()) << "the CQE names the receiving QP";
    EXPECT_EQ(*server.at(k * 64), 0xA0 + k);
  }
  EXPECT_EQ(srq->consumed(), 6u);
}

TEST_F(SrqTest, LimitEventFiresOnceWhenWqesDropBelowTheArmedLimit) {
  Host& server = add_host();
  Host& client = add_host();
  SrqInitAttr srq_attr;
  srq_attr.max_wr = 8;
  SharedReceiveQueue* srq = &add_srq(server, srq_attr);
  QpInitAttr attr;
  attr.srq = srq;
  QueuePair& cq = add_qp(client);
  QueuePair& sq = add_qp(server, attr);
  connect(cq, client, sq, server);
  const Sge rs = server.sge(0, 64);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(srq->post_recv(RecvWr{i, std::span<const Sge>(&rs, 1)}).ok());
  ASSERT_TRUE(srq->arm_limit(3).ok());
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  int events = 0;
  for (int k = 0; k < 4; ++k) {
    ASSERT_TRUE(cq.post_send(wr).ok());
    run();
    while (auto ev = server.nic->poll_async_event()) {
      if (ev->type == AsyncEventType::kSrqLimitReached) {
        EXPECT_EQ(ev->number, srq->number());
        EXPECT_EQ(k, 2) << "fires when 2 (< 3) remain";
        ++events;
      }
    }
  }
  EXPECT_EQ(events, 1) << "the limit disarms after firing";
}

TEST_F(SrqTest, EmptySrqRnrNaksThenSucceedsOncePosted) {
  Host& server = add_host();
  Host& client = add_host();
  SharedReceiveQueue* srq = &add_srq(server, SrqInitAttr{});
  QpInitAttr attr;
  attr.srq = srq;
  QueuePair& cq = add_qp(client);
  QueuePair& sq = add_qp(server, attr);
  connect(cq, client, sq, server);
  SendWr wr;
  wr.wr_id = 3;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kSendSignaled;
  ASSERT_TRUE(cq.post_send(wr).ok());
  // Let a few RNR rounds pass (each waits min_rnr_timer = 10 us).
  ASSERT_TRUE(engine_->run_until([&] { return server.nic->counters().rnr_naks_sent >= 3; }).ok());
  const Sge rs = server.sge(0, 8);
  ASSERT_TRUE(srq->post_recv(RecvWr{1, std::span<const Sge>(&rs, 1)}).ok());
  EXPECT_EQ(next_completion(*client.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(next_completion(*server.cq).wr_id, 1u);
}

TEST_F(SrqTest, PostRecvOnAnSrqAttachedQpIsRejected) {
  Host& server = add_host();
  SharedReceiveQueue* srq = &add_srq(server, SrqInitAttr{});
  QpInitAttr attr;
  attr.srq = srq;
  QueuePair& sq = add_qp(server, attr);
  const Sge rs = server.sge(0, 8);
  EXPECT_EQ(sq.post_recv(RecvWr{1, std::span<const Sge>(&rs, 1)}).code(), Code::kInvalidArgument);
}

TEST_F(SrqTest, SrqAttachedQpInErrorReportsLastWqeReachedAndKeepsSrqEntries) {
  Host& server = add_host();
  SharedReceiveQueue* srq = &add_srq(server, SrqInitAttr{});
  QpInitAttr attr;
  attr.srq = srq;
  QueuePair& sq = add_qp(server, attr);
  const Sge rs = server.sge(0, 8);
  ASSERT_TRUE(srq->post_recv(RecvWr{1, std::span<const Sge>(&rs, 1)}).ok());
  QpAttr qattr;
  qattr.state = QpState::kError;
  ASSERT_TRUE(sq.modify(qattr, kQpState).ok());
  run();
  bool last_wqe = false;
  while (auto ev = server.nic->poll_async_event()) last_wqe |= ev->type == AsyncEventType::kQpLastWqeReached;
  EXPECT_TRUE(last_wqe);
  EXPECT_TRUE(drain(*server.cq).empty()) << "SRQ WQEs are not flushed by one QP's error";
  EXPECT_EQ(srq->consumed(), 0u);
}

}  // namespace
}  // namespace ferry::nic::testing
