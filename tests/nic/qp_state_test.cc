// Conformance: the QP state machine (verbs-semantics.md, "Queue pairs and
// states").
#include "nic_test_util.h"

namespace ferry::nic::testing {
namespace {

class QpStateTest : public NicTest {};

TEST_F(QpStateTest, PostingASendBeforeRtsFailsImmediately) {
  Host& a = add_host();
  Host& b = add_host();
  QueuePair& qa = add_qp(a);
  QueuePair& qb = add_qp(b);
  SendWr wr;
  wr.opcode = WrOpcode::kNop;
  EXPECT_EQ(qa.post_send(wr).code(), Code::kFailedPrecondition) << "RESET";
  QpAttr attr;
  attr.state = QpState::kInit;
  attr.access_flags = kAccessRemoteWrite;
  ASSERT_TRUE(qa.modify(attr, kQpState | kQpAccessFlags).ok());
  EXPECT_EQ(qa.post_send(wr).code(), Code::kFailedPrecondition) << "INIT";
  attr.state = QpState::kRtr;
  attr.dest_nic = b.nic->address();
  attr.dest_qp_num = qb.qp_num();
  ASSERT_TRUE(qa.modify(attr, kQpState | kQpPathMtu | kQpDest | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer).ok());
  EXPECT_EQ(qa.post_send(wr).code(), Code::kFailedPrecondition) << "RTR";
  attr.state = QpState::kRts;
  ASSERT_TRUE(qa.modify(attr, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic).ok());
  EXPECT_TRUE(qa.post_send(wr).ok());
}

TEST_F(QpStateTest, RecvsMayBePostedFromInitOn) {
  Host& a = add_host();
  QueuePair& qa = add_qp(a);
  const Sge rs = a.sge(0, 8);
  const RecvWr rwr{1, std::span<const Sge>(&rs, 1)};
  EXPECT_EQ(qa.post_recv(rwr).code(), Code::kFailedPrecondition);
  QpAttr attr;
  attr.state = QpState::kInit;
  ASSERT_TRUE(qa.modify(attr, kQpState | kQpAccessFlags).ok());
  EXPECT_TRUE(qa.post_recv(rwr).ok());
}

TEST_F(QpStateTest, EachTransitionRequiresItsAttributes) {
  Host& a = add_host();
  QueuePair& qa = add_qp(a);
  QpAttr attr;
  attr.state = QpState::kInit;
  EXPECT_EQ(qa.modify(attr, kQpState).code(), Code::kInvalidArgument) << "INIT needs access flags";
  ASSERT_TRUE(qa.modify(attr, kQpState | kQpAccessFlags).ok());
  attr.state = QpState::kRtr;
  attr.dest_qp_num = 5;
  Status s = qa.modify(attr, kQpState | kQpPathMtu | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("kQpDest"), std::string::npos) << s.message();
  EXPECT_EQ(qa.state(), QpState::kInit) << "a rejected modify changes nothing";
}

TEST_F(QpStateTest, MaxDestRdAtomicIsSetOnlyOnTheWayToRtr) {
  auto pr = make_pair();
  QpAttr attr;
  attr.state = QpState::kRts;
  attr.max_dest_rd_atomic = 32;
  EXPECT_EQ(pr.qa->modify(attr, kQpState | kQpMaxDestRdAtomic).code(), Code::kInvalidArgument)
      << "the responder's READ/ATOMIC resources are sized at RTR (IBTA: not modifiable RTS->RTS)";
  EXPECT_EQ(pr.qa->state(), QpState::kRts);
}

TEST_F(QpStateTest, IllegalTransitionsAreRejected) {
  Host& a = add_host();
  QueuePair& qa = add_qp(a);
  QpAttr attr;
  attr.state = QpState::kRts;
  EXPECT_EQ(qa.modify(attr, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic).code(),
            Code::kInvalidArgument);
  attr.state = QpState::kRtr;
  EXPECT_EQ(qa.modify(attr, ~0u).code(), Code::kInvalidArgument) << "RESET -> RTR skips INIT";
}

TEST_F(QpStateTest, AttributeValuesAreValidated) {
  Host& a = add_host();
  QueuePair& qa = add_qp(a);
  QpAttr attr;
  attr.state = QpState::kInit;
  ASSERT_TRUE(qa.modify(attr, kQpState | kQpAccessFlags).ok());
  attr.state = QpState::kRtr;
  attr.dest_qp_num = 5;
  attr.path_mtu = 3000;
  EXPECT_EQ(qa.modify(attr, ~0u).code(), Code::kInvalidArgument) << "MTU must be an IBTA value";
  attr.path_mtu = 1024;
  attr.dest_nic = 99;
  EXPECT_EQ(qa.modify(attr, ~0u).code(), Code::kInvalidArgument) << "no such NIC";
}

TEST_F(QpStateTest, RtrReceivesButDoesNotSend) {
  Host& a = add_host();
  Host& b = add_host();
  // qc (on b) is brought only to RTR; qd (on a) is fully connected toward it.
  QueuePair& qc = add_qp(b);
  QueuePair& qd = add_qp(a);
  QpAttr attr;
  attr.state = QpState::kInit;
  attr.access_flags = kAccessRemoteWrite;
  ASSERT_TRUE(qc.modify(attr, kQpState | kQpAccessFlags).ok());
  attr.state = QpState::kRtr;
  attr.dest_nic = a.nic->address();
  attr.dest_qp_num = qd.qp_num();
  attr.rq_psn = 0x20;
  ASSERT_TRUE(qc.modify(attr, kQpState | kQpPathMtu | kQpDest | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer).ok());
  attr.state = QpState::kInit;
  ASSERT_TRUE(qd.modify(attr, kQpState | kQpAccessFlags).ok());
  attr.state = QpState::kRtr;
  attr.dest_nic = b.nic->address();
  attr.dest_qp_num = qc.qp_num();
  ASSERT_TRUE(qd.modify(attr, kQpState | kQpPathMtu | kQpDest | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer).ok());
  attr.state = QpState::kRts;
  attr.sq_psn = 0x20;
  ASSERT_TRUE(qd.modify(attr, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic).ok());
  b.at(0)[0] = 0;
  a.at(0)[0] = 0x5A;
  const Sge sge = a.sge(0, 1);
  ASSERT_TRUE(qd.post_send(write_wr(1, &sge, b.va(0), b.mr->rkey())).ok());
  auto wcs = drain(*a.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess) << "a QP in RTR executes incoming requests";
  EXPECT_EQ(b.at(0)[0], 0x5A);
  SendWr nop;
  nop.opcode = WrOpcode::kNop;
  EXPECT_EQ(qc.post_send(nop).code(), Code::kFailedPrecondition) << "but cannot send";
}

TEST_F(QpStateTest, ResetDiscardsQueuedWorkWithoutCompletions) {
  auto pr = make_pair();
  const Sge rs = pr.b->sge(0, 8);
  ASSERT_TRUE(pr.qb->post_recv(RecvWr{1, std::span<const Sge>(&rs, 1)}).ok());
  QpAttr attr;
  attr.state = QpState::kReset;
  ASSERT_TRUE(pr.qb->modify(attr, kQpState).ok());
  EXPECT_TRUE(drain(*pr.b->cq).empty());
  EXPECT_EQ(pr.qb->recv_posted(), 0u);
  EXPECT_EQ(pr.qb->state(), QpState::kReset);
}

TEST_F(QpStateTest, ErrorThenResetThenReconnectWorksAgain) {
  auto pr = make_pair();
  const Sge sge = pr.a->sge(0, 8);
  ASSERT_TRUE(pr.qa->post_send(write_wr(1, &sge, pr.b->va(0), 0xbad)).ok());
  ASSERT_EQ(next_completion(*pr.a->cq).status, WcStatus::kRemAccessErr);
  run();
  QpAttr attr;
  attr.state = QpState::kReset;
  ASSERT_TRUE(pr.qa->modify(attr, kQpState).ok());
  ASSERT_TRUE(pr.qb->modify(attr, kQpState).ok());
  connect(*pr.qa, *pr.a, *pr.qb, *pr.b);
  ASSERT_TRUE(pr.qa->post_send(write_wr(2, &sge, pr.b->va(0), pr.b->mr->rkey())).ok());
  const WorkCompletion wc = next_completion(*pr.a->cq);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
}

}  // namespace
}  // namespace ferry::nic::testing
