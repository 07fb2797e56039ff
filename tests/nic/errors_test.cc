// Conformance: permission and bounds violations, and QP error flush
// (verbs-semantics.md, "Requests", "Transport" and "Queue pairs and states").
#include "nic_test_util.h"

namespace ferry::nic::testing {
namespace {

class ErrorsTest : public NicTest {
 protected:
  // Posts one signaled WRITE of 8 bytes to (remote, rkey) and returns the
  // requester's completion.
  WorkCompletion write_once(Pair& pr, uint64_t remote, uint32_t rkey) {
    const Sge sge = pr.a->sge(0, 8);
    EXPECT_TRUE(pr.qa->post_send(write_wr(1, &sge, remote, rkey)).ok());
    return next_completion(*pr.a->cq);
  }
};

TEST_F(ErrorsTest, WriteWithUnknownRkeyIsRemoteAccessErrorAndBothQpsGoToError) {
  auto pr = make_pair();
  const WorkCompletion wc = write_once(pr, pr.b->va(0), pr.b->mr->rkey() ^ 0x100);
  EXPECT_EQ(wc.status, WcStatus::kRemAccessErr);
  run();
  EXPECT_EQ(pr.qa->state(), QpState::kError);
  EXPECT_EQ(pr.qb->state(), QpState::kError) << "the responder QP also moves to ERROR (class A error)";
}

TEST_F(ErrorsTest, WriteBeyondTheRegionIsRemoteAccessError) {
  auto pr = make_pair();
  // Last byte in bounds is fine; one past the end is not.
  EXPECT_EQ(write_once(pr, pr.b->va(pr.b->mem_bytes - 8), pr.b->mr->rkey()).status, WcStatus::kSuccess);
  EXPECT_EQ(write_once(pr, pr.b->va(pr.b->mem_bytes - 7), pr.b->mr->rkey()).status, WcStatus::kRemAccessErr);
}

TEST_F(ErrorsTest, WriteBelowTheRegionIsRemoteAccessError) {
  auto pr = make_pair();
  EXPECT_EQ(write_once(pr, pr.b->va(0) - 8, pr.b->mr->rkey()).status, WcStatus::kRemAccessErr);
}

TEST_F(ErrorsTest, AddressOverflowDoesNotWrapIntoTheRegion) {
  auto pr = make_pair();
  EXPECT_EQ(write_once(pr, UINT64_MAX - 3, pr.b->mr->rkey()).status, WcStatus::kRemAccessErr);
}

TEST_F(ErrorsTest, MemoryRegionWithoutRemoteWriteRefusesWrites) {
  auto pr = make_pair();
  auto ro = pr.b->nic->reg_mr(*pr.b->pd, pr.b->at(0), 4096, kAccessLocalWrite | kAccessRemoteRead).value();
  EXPECT_EQ(write_once(pr, pr.b->va(0), ro->rkey()).status, WcStatus::kRemAccessErr);
}

TEST_F(ErrorsTest, QpWithoutRemoteWriteAccessRefusesWrites) {
  ConnectOptions o;
  o.access_flags = kAccessRemoteRead;  // QP-level access excludes write
  auto pr = make_pair({}, o);
  EXPECT_EQ(write_once(pr, pr.b->va(0), pr.b->mr->rkey()).status, WcStatus::kRemAccessErr);
}

TEST_F(ErrorsTest, MemoryRegionOfAnotherProtectionDomainIsRefused) {
  auto pr = make_pair();
  auto other_pd = pr.b->nic->alloc_pd().value();
  {
    auto foreign = pr.b->nic->reg_mr(*other_pd, pr.b->at(0), 4096, kAccessAll).value();
    EXPECT_EQ(write_once(pr, pr.b->va(0), foreign->rkey()).status, WcStatus::kRemAccessErr);
  }
}

TEST_F(ErrorsTest, ReadNeedsRemoteReadAccess) {
  auto pr = make_pair();
  auto wo = pr.b->nic->reg_mr(*pr.b->pd, pr.b->at(0), 4096, kAccessLocalWrite | kAccessRemoteWrite).value();
  const Sge sge = pr.a->sge(0, 8);
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaRead;
  wr.flags = kSendSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = pr.b->va(0);
  wr.rkey = wo->rkey();
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kRemAccessErr);
}

TEST_F(ErrorsTest, AtomicNeedsRemoteAtomicAccess) {
  auto pr = make_pair();
  auto rw = pr.b->nic->reg_mr(*pr.b->pd, pr.b->at(0), 4096, kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead)
                .value();
  const Sge sge = pr.a->sge(0, 8);
  SendWr wr;
  wr.opcode = WrOpcode::kAtomicFetchAndAdd;
  wr.flags = kSendSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = pr.b->va(0);
  wr.rkey = rw->rkey();
  wr.compare_add = 1;
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kRemAccessErr);
}

TEST_F(ErrorsTest, MisalignedAtomicIsRemoteInvalidRequest) {
  auto pr = make_pair();
  const Sge sge = pr.a->sge(0, 8);
  SendWr wr;
  wr.opcode = WrOpcode::kAtomicCmpAndSwp;
  wr.flags = kSendSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = pr.b->va(4);
  wr.rkey = pr.b->mr->rkey();
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kRemInvReqErr);
}

TEST_F(ErrorsTest, AtomicWithLocalBufferNotEightBytesIsLocalLengthError) {
  auto pr = make_pair();
  const Sge sge = pr.a->sge(0, 4);
  SendWr wr;
  wr.opcode = WrOpcode::kAtomicFetchAndAdd;
  wr.flags = kSendSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = pr.b->va(0);
  wr.rkey = pr.b->mr->rkey();
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kLocLenErr);
}

// Regression: the 8-byte atomic result used to be written at the first SGE
// whatever its length, overrunning a 4-byte SGE (found by review of the fuzz
// helper). An atomic needs exactly one 8-byte SGE.
TEST_F(ErrorsTest, AtomicResultSplitAcrossTwoSgesIsLocalLengthError) {
  QpInitAttr attr;
  attr.cap.max_send_sge = 2;
  auto pr = make_pair(attr);
  std::memset(pr.a->at(100), 0xAB, 8);
  const Sge sges[2] = {pr.a->sge(100, 4), pr.a->sge(200, 4)};
  SendWr wr;
  wr.opcode = WrOpcode::kAtomicFetchAndAdd;
  wr.flags = kSendSignaled;
  wr.sg_list = sges;
  wr.remote_addr = pr.b->va(0);
  wr.rkey = pr.b->mr->rkey();
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kLocLenErr);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(*pr.a->at(100 + i), 0xAB) << "nothing written past the 4-byte SGE";
}

TEST_F(ErrorsTest, FlushOfAnUnregisteredRangeIsRemoteAccessError) {
  auto pr = make_pair();
  SendWr wr;
  wr.opcode = WrOpcode::kFlush;
  wr.flags = kSendSignaled;
  wr.remote_addr = pr.b->va(0);
  wr.rkey = 0xdead00;
  wr.flush_length = 4096;
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kRemAccessErr);
}

TEST_F(ErrorsTest, FlushOfARegisteredRangeCompletes) {
  auto pr = make_pair();
  SendWr wr;
  wr.opcode = WrOpcode::kFlush;
  wr.flags = kSendSignaled;
  wr.remote_addr = pr.b->va(0);
  wr.rkey = pr.b->mr->rkey();
  wr.flush_length = 4096;
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  const WorkCompletion wc = next_completion(*pr.a->cq);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(wc.opcode, WcOpcode::kFlush);
}

TEST_F(ErrorsTest, BadLocalLkeyIsLocalProtectionErrorAndNothingIsSent) {
  auto pr = make_pair();
  const uint64_t tx_before = pr.a->nic->counters().tx_packets;
  const Sge sge{pr.a->va(0), 8, pr.a->mr->lkey() ^ 0x200};
  ASSERT_TRUE(pr.qa->post_send(write_wr(1, &sge, pr.b->va(0), pr.b->mr->rkey())).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kLocProtErr);
  EXPECT_EQ(pr.a->nic->counters().tx_packets, tx_before);
  EXPECT_EQ(pr.qa->state(), QpState::kError);
}

TEST_F(ErrorsTest, LocalSgeOutsideItsRegionIsLocalProtectionError) {
  auto pr = make_pair();
  const Sge sge = pr.a->sge(pr.a->mem_bytes - 4, 8);
  ASSERT_TRUE(pr.qa->post_send(write_wr(1, &sge, pr.b->va(0), pr.b->mr->rkey())).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kLocProtErr);
}

TEST_F(ErrorsTest, ReadIntoRegionWithoutLocalWriteIsLocalProtectionError) {
  auto pr = make_pair();
  auto ro = pr.a->nic->reg_mr(*pr.a->pd, pr.a->at(0), 4096, kAccessRemoteRead).value();
  const Sge sge{pr.a->va(0), 8, ro->lkey()};
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaRead;
  wr.flags = kSendSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = pr.b->va(0);
  wr.rkey = pr.b->mr->rkey();
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kLocProtErr);
}

TEST_F(ErrorsTest, SendLargerThanRecvIsLengthErrorOnBothSides) {
  auto pr = make_pair();
  const Sge rs = pr.b->sge(0, 16);
  ASSERT_TRUE(pr.qb->post_recv(RecvWr{5, std::span<const Sge>(&rs, 1)}).ok());
  const Sge sge = pr.a->sge(0, 17);
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kSendSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kRemInvReqErr);
  const WorkCompletion recv = next_completion(*pr.b->cq);
  EXPECT_EQ(recv.status, WcStatus::kLocLenErr);
  EXPECT_EQ(recv.wr_id, 5u);
  EXPECT_EQ(pr.qb->state(), QpState::kError);
}

TEST_F(ErrorsTest, RecvWithBadLkeyIsLocalProtectionErrorAtResponder) {
  auto pr = make_pair();
  const Sge rs{pr.b->va(0), 16, 0x7777};
  ASSERT_TRUE(pr.qb->post_recv(RecvWr{6, std::span<const Sge>(&rs, 1)}).ok());
  const Sge sge = pr.a->sge(0, 8);
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kSendSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kRemOpErr);
  EXPECT_EQ(next_completion(*pr.b->cq).status, WcStatus::kLocProtErr);
}

TEST_F(ErrorsTest, ErrorFlushesOutstandingAndLaterWrsInOrder) {
  auto pr = make_pair();
  const Sge sge = pr.a->sge(0, 8);
  SendWr wrs[4];
  wrs[0] = write_wr(100, &sge, pr.b->va(0), 0xbad);  // fails
  for (int i = 1; i < 4; ++i) wrs[i] = write_wr(100 + i, &sge, pr.b->va(0), pr.b->mr->rkey(), 0);  // unsignaled
  ASSERT_TRUE(pr.qa->post_send(wrs).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 4u) << "error and flush completions are produced even for unsignaled WRs";
  EXPECT_EQ(wcs[0].wr_id, 100u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr) << "the first failing WR carries the real error";
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 100u + i);
    EXPECT_EQ(wcs[i].status, WcStatus::kWrFlushErr);
  }
  // Posting in ERROR is allowed and completes with a flush error.
  ASSERT_TRUE(pr.qa->post_send(write_wr(200, &sge, pr.b->va(0), pr.b->mr->rkey())).ok());
  wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 200u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kRdmaWrite) << "a flushed WR reports its own opcode";
}

// Regression: the inline flag was checked only at post time, so a READ
// rewritten in the ring with INLINE set threw its data away and succeeded.
TEST_F(ErrorsTest, InlineFlagOnAReadRewrittenInTheRingIsLocalQpOperationError) {
  auto pr = make_pair();
  const Sge sge = pr.a->sge(0, 8);
  SendWr read;
  read.opcode = WrOpcode::kRdmaRead;
  read.flags = kSendSignaled;
  read.sg_list = std::span<const Sge>(&sge, 1);
  read.remote_addr = pr.b->va(0);
  read.rkey = pr.b->mr->rkey();
  ASSERT_TRUE(pr.qa->post_send(read).ok());
  pr.qa->send_wqe(0)[1] |= kSendInline;  // as a remote rewrite could
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kLocQpOpErr);
}

TEST_F(ErrorsTest, PostedRecvsAreFlushedWhenTheQpEntersError) {
  auto pr = make_pair();
  const Sge rs = pr.b->sge(0, 16);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(pr.qb->post_recv(RecvWr{i, std::span<const Sge>(&rs, 1)}).ok());
  QpAttr attr;
  attr.state = QpState::kError;
  ASSERT_TRUE(pr.qb->modify(attr, kQpState).ok());
  auto wcs = drain(*pr.b->cq);
  ASSERT_EQ(wcs.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i);
    EXPECT_EQ(wcs[i].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(wcs[i].opcode, WcOpcode::kRecv);
  }
  ASSERT_TRUE(pr.qb->post_recv(RecvWr{9, std::span<const Sge>(&rs, 1)}).ok());
  wcs = drain(*pr.b->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 9u);
}

TEST_F(ErrorsTest, MalformedWqeInTheRingIsLocalQpOperationError) {
  auto pr = make_pair();
  const Sge sge = pr.a->sge(0, 8);
  ASSERT_TRUE(pr.qa->post_send(write_wr(1, &sge, pr.b->va(0), pr.b->mr->rkey())).ok());
  // The NIC has not fetched it yet: corrupt the opcode in host memory.
  pr.qa->send_wqe(0)[0] = 0xEE;
  const WorkCompletion wc = next_completion(*pr.a->cq);
  EXPECT_EQ(wc.status, WcStatus::kLocQpOpErr);
  EXPECT_EQ(wc.wr_id, 1u);
}

TEST_F(ErrorsTest, RegisteringRemoteWriteWithoutLocalWriteIsRejected) {
  Host& h = add_host();
  auto mr = h.nic->reg_mr(*h.pd, h.at(0), 64, kAccessRemoteWrite);
  EXPECT_EQ(mr.status().code(), Code::kInvalidArgument);
}

TEST_F(ErrorsTest, StaleRkeyAfterDeregistrationIsRefused) {
  auto pr = make_pair();
  uint32_t stale;
  {
    auto tmp = pr.b->nic->reg_mr(*pr.b->pd, pr.b->at(0), 4096, kAccessAll).value();
    stale = tmp->rkey();
  }
  EXPECT_EQ(write_once(pr, pr.b->va(0), stale).status, WcStatus::kRemAccessErr);
}

}  // namespace
}  // namespace ferry::nic::testing
