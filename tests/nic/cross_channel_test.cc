// Conformance: cross-channel (CORE-Direct) requests and remote work-request
// manipulation (verbs-semantics.md, "Cross-channel"; HyperLoop §4.1).
#include "ferry/nic/wqe.h"
#include "nic_test_util.h"

namespace ferry::nic::testing {
namespace {

class CrossChannelTest : public NicTest {};

TEST_F(CrossChannelTest, ManagedSendQueueDoesNothingUntilEnabled) {
  Host& a = add_host();
  Host& b = add_host();
  QpInitAttr managed;
  managed.managed_send = true;
  QueuePair& qa = add_qp(a, managed);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  QueuePair& ctrl = loopback_qp(a);
  *a.at(0) = 0x42;
  const Sge sge = a.sge(0, 1);
  ASSERT_TRUE(qa.post_send(write_wr(1, &sge, b.va(0), b.mr->rkey())).ok());
  const uint64_t tx = a.nic->counters().tx_packets;
  run();
  EXPECT_EQ(*b.at(0), 0) << "a managed queue ignores doorbells";
  EXPECT_EQ(a.nic->counters().tx_packets, tx);
  EXPECT_TRUE(drain(*a.cq).empty());
  ASSERT_TRUE(ctrl.post_send(enable_wr(qa, 1)).ok());
  run();
  EXPECT_EQ(*b.at(0), 0x42);
  auto wcs = drain(*a.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
}

TEST_F(CrossChannelTest, EnableIndexIsAbsoluteAndOnlyMovesForward) {
  Host& a = add_host();
  Host& b = add_host();
  QpInitAttr managed;
  managed.managed_send = true;
  QueuePair& qa = add_qp(a, managed);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  QueuePair& ctrl = loopback_qp(a);
  const Sge sge = a.sge(0, 8);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(qa.post_send(write_wr(i, &sge, b.va(i * 8), b.mr->rkey())).ok());
  ASSERT_TRUE(ctrl.post_send(enable_wr(qa, 2)).ok());
  EXPECT_EQ(drain(*a.cq).size(), 2u);
  ASSERT_TRUE(ctrl.post_send(enable_wr(qa, 1)).ok());
  EXPECT_EQ(drain(*a.cq).size(), 0u) << "an older index does not move the enable back or forward";
  ASSERT_TRUE(ctrl.post_send(enable_wr(qa, 3)).ok());
  auto wcs = drain(*a.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 2u);
}

TEST_F(CrossChannelTest, WaitReleasesExactlyAtItsIndex) {
  Host& h = add_host();
  CqInitAttr count_only;
  count_only.count_only = true;
  CompletionQueue& counted = add_cq(h, count_only);
  QpInitAttr ticker_attr;
  ticker_attr.send_cq = &counted;
  ticker_attr.sq_sig_all = true;
  QueuePair& ticker = loopback_qp(h, ticker_attr);  // each NOP adds one completion to `counted`
  QueuePair& waiter = loopback_qp(h);
  *h.at(0) = 0x77;
  const Sge sge = h.sge(0, 1);
  SendWr wrs[2] = {wait_wr(counted, 3), write_wr(9, &sge, h.va(4096), h.mr->rkey())};
  ASSERT_TRUE(waiter.post_send(wrs).ok());
  SendWr nop;
  nop.opcode = WrOpcode::kNop;
  for (int k = 1; k <= 3; ++k) {
    ASSERT_TRUE(ticker.post_send(nop).ok());
    run();
    EXPECT_EQ(counted.completions_total(), static_cast<uint64_t>(k));
    if (k < 3) {
      EXPECT_EQ(*h.at(4096), 0) << "WAIT(3) still blocks after " << k << " completions";
    } else {
      EXPECT_EQ(*h.at(4096), 0x77) << "WAIT(3) releases at the third completion";
    }
  }
  auto wcs = drain(*h.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 9u);
}

TEST_F(CrossChannelTest, WaitOnAnIndexAlreadyReachedDoesNotBlock) {
  Host& h = add_host();
  QueuePair& q = loopback_qp(h);
  SendWr wrs[2] = {wait_wr(*h.cq, 0), SendWr{}};
  wrs[1].opcode = WrOpcode::kNop;
  wrs[1].flags = kSendSignaled;
  wrs[1].wr_id = 5;
  ASSERT_TRUE(q.post_send(wrs).ok());
  auto wcs = drain(*h.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 5u);
}

// The HyperLoop forwarding pattern on replica B: A rewrites a WQE pre-posted
// on B's managed queue toward C, then triggers it with a SEND whose RECV
// completion releases a WAIT that enables the queue.
class RewriteTest : public CrossChannelTest {
 protected:
  void SetUp() override {
    a_ = &add_host();
    b_ = &add_host();
    c_ = &add_host();
    qa_ = &add_qp(*a_);
    CqInitAttr count_only;
    count_only.count_only = true;
    recv_counter_ = &add_cq(*b_, count_only);
    QpInitAttr in_attr;
    in_attr.recv_cq = recv_counter_;
    in_attr.cap.max_recv_sge = 4;
    qb_in_ = &add_qp(*b_, in_attr);
    QpInitAttr fwd_attr;
    fwd_attr.managed_send = true;
    qb_fwd_ = &add_qp(*b_, fwd_attr);
    qc_ = &add_qp(*c_);
    connect(*qa_, *a_, *qb_in_, *b_);
    connect(*qb_fwd_, *b_, *qc_, *c_);
    ctrl_ = &loopback_qp(*b_);
    // B's send ring is registered so that A (and B's own RECVs) may write it.
    std::span<uint8_t> ring = qb_fwd_->send_ring();
    ring_mr_ = b_->nic->reg_mr(*b_->pd, ring.data(), ring.size(), kAccessLocalWrite | kAccessRemoteWrite).value();
  }
  void TearDown() override { ring_mr_.reset(); }

  // B pre-posts WAIT(recv counter, recvs) + SEND_ENABLE(fwd, wqes) on its control QP.
  void arm(uint64_t recvs, uint64_t wqes) {
    SendWr wrs[2] = {wait_wr(*recv_counter_, recvs), enable_wr(*qb_fwd_, wqes)};
    ASSERT_TRUE(ctrl_->post_send(wrs).ok());
  }
  uint64_t slot_va(uint64_t index, size_t offset) const {
    return reinterpret_cast<uint64_t>(qb_fwd_->send_wqe(index)) + offset;
  }

  Host *a_, *b_, *c_;
  QueuePair *qa_, *qb_in_, *qb_fwd_, *qc_, *ctrl_;
  CompletionQueue* recv_counter_;
  std::unique_ptr<MemoryRegion> ring_mr_;
};

TEST_F(RewriteTest, PrepostedWqeRewrittenByRdmaWriteRunsWithTheNewContents) {
  // Pre-posted: WRITE B[0..8) -> C[0..8). The rewrite: B[1024..1040) -> C[512..528).
  for (int i = 0; i < 16; ++i) *b_->at(1024 + i) = static_cast<uint8_t>(0xB0 + i);
  std::memset(b_->at(0), 0xEE, 8);
  const Sge old_sge = b_->sge(0, 8);
  ASSERT_TRUE(qb_fwd_->post_send(write_wr(1, &old_sge, c_->va(0), c_->mr->rkey())).ok());
  const Sge rs = b_->sge(60000, 8);
  ASSERT_TRUE(qb_in_->post_recv(RecvWr{1, std::span<const Sge>(&rs, 1)}).ok());
  arm(1, 1);
  run();
  EXPECT_EQ(*c_->at(0), 0) << "nothing runs before the trigger";

  // A builds the new remote and data segments in its own memory.
  const WqeRemoteSeg remote{c_->va(512), c_->mr->rkey(), 0};
  const WqeDataSeg data{b_->va(1024), 16, b_->mr->lkey()};
  std::memcpy(a_->at(0), &remote, 16);
  std::memcpy(a_->at(16), &data, 16);
  const Sge remote_src = a_->sge(0, 16);
  const Sge data_src = a_->sge(16, 16);
  SendWr wrs[3] = {write_wr(10, &remote_src, slot_va(0, kWqeRemoteOffset), ring_mr_->rkey(), 0),
                   write_wr(11, &data_src, slot_va(0, kWqeDataOffset), ring_mr_->rkey(), 0), SendWr{}};
  wrs[2].opcode = WrOpcode::kSend;  // the trigger (0 bytes)
  wrs[2].flags = kSendSignaled;
  ASSERT_TRUE(qa_->post_send(wrs).ok());
  run();
  EXPECT_EQ(std::memcmp(c_->at(512), b_->at(1024), 16), 0) << "the WQE ran with its rewritten contents";
  EXPECT_EQ(*c_->at(0), 0) << "the original destination was not written";
  auto wcs = drain(*b_->cq);
  ASSERT_FALSE(wcs.empty());
  EXPECT_EQ(wcs.back().byte_len, 16u);
}

TEST_F(RewriteTest, RecvScatterIntoTheRingRewritesAddressesAndOpcode) {
  // Two pre-posted WQEs: a CAS that the client turns into a NOP, and a WRITE
  // whose addresses the client supplies. One RECV scatters all of it.
  uint64_t* word = reinterpret_cast<uint64_t*>(c_->at(64));
  *word = 1;
  const Sge cas_result = b_->sge(2048, 8);
  SendWr cas;
  cas.opcode = WrOpcode::kAtomicCmpAndSwp;
  cas.sg_list = std::span<const Sge>(&cas_result, 1);
  cas.remote_addr = c_->va(64);
  cas.rkey = c_->mr->rkey();
  cas.compare_add = 1;
  cas.swap = 2;
  const Sge placeholder = b_->sge(0, 1);
  SendWr write = write_wr(2, &placeholder, c_->va(0), c_->mr->rkey());
  SendWr pre[2] = {cas, write};
  ASSERT_TRUE(qb_fwd_->post_send(pre).ok());

  for (int i = 0; i < 32; ++i) *b_->at(3000 + i) = static_cast<uint8_t>(i + 1);
  // RECV scatter list: [opcode byte of WQE 0] [remote seg of WQE 1] [data seg of WQE 1].
  const Sge scatter[3] = {Sge{slot_va(0, 0), 1, ring_mr_->lkey()},
                          Sge{slot_va(1, kWqeRemoteOffset), 16, ring_mr_->lkey()},
                          Sge{slot_va(1, kWqeDataOffset), 16, ring_mr_->lkey()}};
  ASSERT_TRUE(qb_in_->post_recv(RecvWr{7, scatter}).ok());
  arm(1, 2);

  // The client's metadata message: 1 + 16 + 16 bytes.
  uint8_t meta[33];
  meta[0] = static_cast<uint8_t>(WrOpcode::kNop);
  const WqeRemoteSeg remote{c_->va(8192), c_->mr->rkey(), 0};
  const WqeDataSeg data{b_->va(3000), 32, b_->mr->lkey()};
  std::memcpy(meta + 1, &remote, 16);
  std::memcpy(meta + 17, &data, 16);
  std::memcpy(a_->at(0), meta, sizeof(meta));
  const Sge msg = a_->sge(0, sizeof(meta));
  SendWr send;
  send.opcode = WrOpcode::kSend;
  send.sg_list = std::span<const Sge>(&msg, 1);
  ASSERT_TRUE(qa_->post_send(send).ok());
  run();
  EXPECT_EQ(*word, 1u) << "the CAS became a NOP: the word is untouched";
  EXPECT_EQ(std::memcmp(c_->at(8192), b_->at(3000), 32), 0) << "the WRITE used the scattered addresses";
  EXPECT_EQ(*c_->at(0), 0);
}

TEST_F(RewriteTest, WaitGatedOrdinaryQueueReadsItsWqeOnlyWhenReached) {
  // Without a managed queue: [WAIT][WRITE] posted with a doorbell. The WRITE
  // is rewritten while the WAIT blocks; the NIC fetches it afterwards.
  QpInitAttr waits;
  waits.cross_channel = true;
  QueuePair& plain = add_qp(*b_, waits);
  QueuePair& sink = add_qp(*c_);
  connect(plain, *b_, sink, *c_);
  std::span<uint8_t> ring = plain.send_ring();
  auto mr = b_->nic->reg_mr(*b_->pd, ring.data(), ring.size(), kAccessLocalWrite | kAccessRemoteWrite).value();
  const Sge placeholder = b_->sge(0, 4);
  SendWr wrs[2] = {wait_wr(*recv_counter_, 1), write_wr(1, &placeholder, c_->va(0), c_->mr->rkey())};
  ASSERT_TRUE(plain.post_send(wrs).ok());
  run();
  for (int i = 0; i < 4; ++i) *b_->at(500 + i) = static_cast<uint8_t>(0xC0 + i);
  const WqeDataSeg data{b_->va(500), 4, b_->mr->lkey()};
  const uint64_t data_va = reinterpret_cast<uint64_t>(plain.send_wqe(1)) + kWqeDataOffset;
  const Sge scatter{data_va, 16, mr->lkey()};
  ASSERT_TRUE(qb_in_->post_recv(RecvWr{1, std::span<const Sge>(&scatter, 1)}).ok());
  std::memcpy(a_->at(0), &data, 16);
  const Sge msg = a_->sge(0, 16);
  SendWr send;
  send.opcode = WrOpcode::kSend;
  send.sg_list = std::span<const Sge>(&msg, 1);
  ASSERT_TRUE(qa_->post_send(send).ok());
  run();
  EXPECT_EQ(std::memcmp(c_->at(0), b_->at(500), 4), 0);
}

TEST_F(CrossChannelTest, ManagedRecvQueueExposesRecvsOnlyWhenEnabled) {
  Host& a = add_host();
  Host& b = add_host();
  QueuePair& qa = add_qp(a);
  QpInitAttr managed;
  managed.managed_recv = true;
  QueuePair& qb = add_qp(b, managed);
  connect(qa, a, qb, b);
  QueuePair& ctrl = loopback_qp(b);
  const Sge rs = b.sge(0, 8);
  ASSERT_TRUE(qb.post_recv(RecvWr{1, std::span<const Sge>(&rs, 1)}).ok());
  SendWr send;
  send.opcode = WrOpcode::kSend;
  send.flags = kSendSignaled;
  ASSERT_TRUE(qa.post_send(send).ok());
  ASSERT_TRUE(engine_->run_until([&] { return b.nic->counters().rnr_naks_sent >= 2; }).ok());
  WorkCompletion wc;
  EXPECT_EQ(b.cq->poll(std::span<WorkCompletion>(&wc, 1)).value(), 0u)
      << "a posted but not enabled RECV is invisible (RNR)";
  ASSERT_TRUE(ctrl.post_send(enable_wr(qb, 1, /*recv=*/true)).ok());
  EXPECT_EQ(next_completion(*a.cq).status, WcStatus::kSuccess);
  auto wcs = drain(*b.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
}

TEST_F(CrossChannelTest, ManagedRecvQueueReusesItsRingLapAfterLapByEnablesAlone) {
  // HyperLoop re-arms receive rings with RECV_ENABLE only: the RECVs posted
  // once at setup serve every lap of the ring.
  Host& a = add_host();
  Host& b = add_host();
  QueuePair& qa = add_qp(a);
  QpInitAttr managed;
  managed.managed_recv = true;
  managed.cap.max_recv_wr = 2;
  QueuePair& qb = add_qp(b, managed);
  ASSERT_EQ(qb.recv_depth(), 2u);
  connect(qa, a, qb, b);
  QueuePair& ctrl = loopback_qp(b);
  const Sge r0 = b.sge(0, 8);
  const Sge r1 = b.sge(8, 8);
  ASSERT_TRUE(qb.post_recv(RecvWr{10, std::span<const Sge>(&r0, 1)}).ok());
  ASSERT_TRUE(qb.post_recv(RecvWr{11, std::span<const Sge>(&r1, 1)}).ok());
  ASSERT_TRUE(ctrl.post_send(enable_wr(qb, 6, /*recv=*/true)).ok());
  for (uint8_t i = 0; i < 6; ++i) {
    *a.at(64) = static_cast<uint8_t>(0x30 + i);
    const Sge s = a.sge(64, 1);
    SendWr send;
    send.opcode = WrOpcode::kSend;
    send.flags = kSendSignaled;
    send.sg_list = std::span<const Sge>(&s, 1);
    ASSERT_TRUE(qa.post_send(send).ok());
    EXPECT_EQ(next_completion(*a.cq).status, WcStatus::kSuccess);
    auto wcs = drain(*b.cq);
    ASSERT_EQ(wcs.size(), 1u) << "message " << int(i);
    EXPECT_EQ(wcs[0].wr_id, 10u + i % 2) << "slot i % depth serves message i";
    EXPECT_EQ(*b.at((i % 2) * 8), 0x30 + i);
  }
  SendWr send;
  send.opcode = WrOpcode::kSend;
  ASSERT_TRUE(qa.post_send(send).ok());
  ASSERT_TRUE(engine_->run_until([&] { return b.nic->counters().rnr_naks_sent >= 1; }).ok())
      << "past the enable index the queue is empty again (RNR)";
}

TEST_F(CrossChannelTest, EnablingAQueueThatIsNotManagedIsALocalQpOperationError) {
  Host& h = add_host();
  QueuePair& target = loopback_qp(h);
  QueuePair& ctrl = loopback_qp(h);
  SendWr wr = enable_wr(target, 1);
  wr.flags = kSendSignaled;
  ASSERT_TRUE(ctrl.post_send(wr).ok());
  auto wcs = drain(*h.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kLocQpOpErr);
}

// ---- only a queue created with the capability issues cross-channel requests --
// (mlx5: IBV_EXP_QP_CREATE_CROSS_CHANNEL, the QP context's cd_master.) A
// peer that rewrites a data queue's WQEs -- HyperLoop's upstream, through a
// RECV scatter -- must not be able to turn one into a WAIT (the queue stalls)
// or an ENABLE (its rkey field read as a QP number: another managed queue of
// the PD runs).

TEST_F(CrossChannelTest, AQueueWithoutTheCapabilityCannotPostAWaitOrAnEnable) {
  Host& h = add_host();
  QpInitAttr managed;
  managed.managed_send = true;
  QueuePair& target = add_qp(h, managed);
  QueuePair& data = add_qp(h);  // no cross_channel
  QueuePair& peer = add_qp(h);
  connect(data, h, peer, h);
  EXPECT_EQ(data.post_send(enable_wr(target, 1)).code(), Code::kInvalidArgument);
  EXPECT_EQ(data.post_send(wait_wr(*h.cq, 0)).code(), Code::kInvalidArgument);
  EXPECT_EQ(data.post_send(enable_wr(target, 1, /*recv=*/true)).code(), Code::kInvalidArgument);
}

TEST_F(CrossChannelTest, AWqeRewrittenIntoAnEnableOnAQueueWithoutTheCapabilityFailsAndEnablesNothing) {
  // The target: a managed queue of the same PD with a WRITE pre-posted.
  Host& h = add_host();
  Host& remote = add_host();
  QpInitAttr managed;
  managed.managed_send = true;
  QueuePair& target = add_qp(h, managed);
  QueuePair& target_peer = add_qp(remote);
  connect(target, h, target_peer, remote);
  *h.at(0) = 0x5A;
  const Sge sge = h.sge(0, 1);
  ASSERT_TRUE(target.post_send(write_wr(1, &sge, remote.va(64), remote.mr->rkey())).ok());
  // The data queue: managed (enabled by a control queue), a NOP pre-posted
  // whose slot is rewritten into SEND_ENABLE(target, 1) before it runs.
  QueuePair& data = add_qp(h, managed);
  QueuePair& data_peer = add_qp(h);
  connect(data, h, data_peer, h);
  SendWr nop;
  nop.opcode = WrOpcode::kNop;
  nop.flags = kSendSignaled;
  nop.wr_id = 7;
  ASSERT_TRUE(data.post_send(nop).ok());
  uint8_t* slot = data.send_wqe(0);
  slot[0] = static_cast<uint8_t>(WrOpcode::kSendEnable);
  WqeRemoteSeg seg{1, target.qp_num(), 0};  // remote_addr: the index; rkey: the QP number
  std::memcpy(slot + kWqeRemoteOffset, &seg, sizeof(seg));
  QueuePair& ctrl = loopback_qp(h);
  ASSERT_TRUE(ctrl.post_send(enable_wr(data, 1)).ok());
  run();
  auto wcs = drain(*h.cq);
  ASSERT_FALSE(wcs.empty());
  EXPECT_EQ(wcs.front().status, WcStatus::kLocQpOpErr) << "a data queue ran a cross-channel request";
  EXPECT_EQ(data.state(), QpState::kError);
  EXPECT_EQ(*remote.at(64), 0) << "the rewritten ENABLE let the target queue run its WRITE";
}

TEST_F(CrossChannelTest, AWqeRewrittenIntoAWaitOnAQueueWithoutTheCapabilityFailsInsteadOfStalling) {
  Host& h = add_host();
  QpInitAttr managed;
  managed.managed_send = true;
  QueuePair& data = add_qp(h, managed);
  QueuePair& data_peer = add_qp(h);
  connect(data, h, data_peer, h);
  SendWr nop;
  nop.opcode = WrOpcode::kNop;
  nop.flags = kSendSignaled;
  ASSERT_TRUE(data.post_send(nop).ok());
  uint8_t* slot = data.send_wqe(0);
  slot[0] = static_cast<uint8_t>(WrOpcode::kWait);
  WqeRemoteSeg seg{1'000'000, h.cq->number(), 0};  // a count the CQ never reaches
  std::memcpy(slot + kWqeRemoteOffset, &seg, sizeof(seg));
  QueuePair& ctrl = loopback_qp(h);
  ASSERT_TRUE(ctrl.post_send(enable_wr(data, 1)).ok());
  run();
  auto wcs = drain(*h.cq);
  ASSERT_FALSE(wcs.empty()) << "the queue stalls in a WAIT a peer wrote into it";
  EXPECT_EQ(wcs.front().status, WcStatus::kLocQpOpErr);
}

// ---- protection: cross-channel requests stay inside their PD ----------------
// verbs-semantics.md: "WAIT and ENABLE may only name a CQ / QP of the same
// protection domain as the queue that executes them". Each test below fails
// if the NIC's check is removed (cross_channel.cc).

class CrossChannelProtectionTest : public CrossChannelTest {
 protected:
  // A second tenant on the same NIC: its own PD, CQ, and a loopback QP pair.
  struct Tenant {
    std::unique_ptr<ProtectionDomain> pd;
    std::unique_ptr<CompletionQueue> cq;
    std::unique_ptr<QueuePair> qp, peer;
  };
  Tenant other_tenant(Host& h, QpInitAttr attr = {}) {
    Tenant t;
    t.pd = h.nic->alloc_pd().value();
    t.cq = h.nic->create_cq({}).value();
    attr.send_cq = attr.recv_cq = t.cq.get();
    t.qp = h.nic->create_qp(*t.pd, attr).value();
    QpInitAttr plain;
    plain.send_cq = plain.recv_cq = t.cq.get();
    t.peer = h.nic->create_qp(*t.pd, plain).value();
    connect(*t.qp, h, *t.peer, h);
    return t;
  }
  void TearDown() override {
    qps_.clear();  // some of them use a tenant's CQ
    for (Tenant& t : tenants_) {
      t.qp.reset();
      t.peer.reset();
      t.cq.reset();
    }
    tenants_.clear();
  }
  std::vector<Tenant> tenants_;
};

TEST_F(CrossChannelProtectionTest, PostingAnEnableForAnotherPdsQueueIsRejected) {
  Host& h = add_host();
  QpInitAttr managed;
  managed.managed_send = true;
  tenants_.push_back(other_tenant(h, managed));
  QueuePair& mine = loopback_qp(h);
  const Status s = mine.post_send(enable_wr(*tenants_[0].qp, 1));
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
}

TEST_F(CrossChannelProtectionTest, EnableRewrittenToNameAnotherPdsQueueFailsAndMovesTheQpToError) {
  // The victim: a managed queue of another tenant with a WRITE pre-posted.
  Host& h = add_host();
  Host& remote = add_host();
  QpInitAttr managed;
  managed.managed_send = true;
  tenants_.push_back(other_tenant(h, managed));
  Tenant& victim = tenants_[0];
  *h.at(0) = 0x99;
  auto victim_mr = h.nic->reg_mr(*victim.pd, h.at(0), 64, kAccessAll).value();
  const Sge sge = victim_mr->sge(0, 1);
  ASSERT_TRUE(victim.qp->post_send(write_wr(1, &sge, h.va(128), victim_mr->rkey())).ok());
  // The attacker posts an ENABLE of its own managed queue, then rewrites the
  // WQE's target QP number in its ring (as a remote peer could) before it runs.
  QpInitAttr attacker_attr;
  attacker_attr.managed_send = true;
  QueuePair& own_managed = add_qp(h, attacker_attr);
  QueuePair& own_peer = add_qp(remote);
  connect(own_managed, h, own_peer, remote);
  QpInitAttr gated;
  gated.cap.max_send_wr = 4;
  QueuePair& attacker = loopback_qp(h, gated);
  CompletionQueue& never = add_cq(h);
  // WAIT on a CQ that never completes holds the ENABLE until the rewrite is done.
  QpInitAttr uses_never;
  uses_never.send_cq = uses_never.recv_cq = &never;
  add_qp(h, uses_never);
  SendWr wrs[2] = {wait_wr(never, 0), enable_wr(own_managed, 1)};
  wrs[1].flags = kSendSignaled;
  ASSERT_TRUE(attacker.post_send(wrs).ok());
  uint8_t* enable_wqe = attacker.send_wqe(1);
  WqeRemoteSeg remote_seg;
  std::memcpy(&remote_seg, enable_wqe + kWqeRemoteOffset, sizeof(remote_seg));
  remote_seg.rkey = victim.qp->qp_num();
  std::memcpy(enable_wqe + kWqeRemoteOffset, &remote_seg, sizeof(remote_seg));
  auto wcs = drain(*h.cq);
  ASSERT_FALSE(wcs.empty());
  EXPECT_EQ(wcs.back().status, WcStatus::kLocQpOpErr) << "an ENABLE naming another PD's queue is an error";
  EXPECT_EQ(attacker.state(), QpState::kError);
  EXPECT_EQ(*h.at(128), 0) << "the victim's WRITE did not run";
  victim_mr.reset();
}

TEST_F(CrossChannelProtectionTest, WaitOnACqUsedOnlyByAnotherPdFailsAndMovesTheQpToError) {
  Host& h = add_host();
  tenants_.push_back(other_tenant(h));
  QueuePair& mine = loopback_qp(h);
  SendWr wait = wait_wr(*tenants_[0].cq, 1);
  wait.flags = kSendSignaled;
  ASSERT_TRUE(mine.post_send(wait).ok());
  auto wcs = drain(*h.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kLocQpOpErr) << "a WAIT may only name a CQ its own PD uses";
  EXPECT_EQ(mine.state(), QpState::kError);
}

TEST_F(CrossChannelProtectionTest, WaitOnACqSharedWithTheOwnPdIsAllowed) {
  // The other tenant's CQ, once a QP of this PD also uses it, is this PD's too.
  Host& h = add_host();
  tenants_.push_back(other_tenant(h));
  QpInitAttr shares;
  shares.send_cq = shares.recv_cq = tenants_[0].cq.get();
  add_qp(h, shares);
  QueuePair& mine = loopback_qp(h);
  SendWr wait = wait_wr(*tenants_[0].cq, 0);
  wait.flags = kSendSignaled;
  ASSERT_TRUE(mine.post_send(wait).ok());
  auto wcs = drain(*h.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

}  // namespace
}  // namespace ferry::nic::testing
