// Conformance rules found missing by an outside audit written from the IBTA
// specification, rdma-core's rxe and libmlx5 (issue 8). Each suite is named
// after the rule of ../shared/verbs-semantics.md it checks:
//
//   MultiPacketReadLoss      a lost READ response packet is re-requested once
//                            per gap, from the first missing PSN, and the READ
//                            succeeds (Transport)
//   SendSlotFreedOnPoll      a send-queue slot is free only once the
//                            application polled the completion covering it; a
//                            CQ sized to the send queue never overruns
//                            (Requests, signaled vs unsignaled)
//   ExecutedBeforeAnError    responses to requests the responder executed
//                            before a failing one are still delivered
//                            (Transport)
//   InlineObeysMaxSendSge    inline sends obey max_send_sge (Requests)
//   EnableExposesOnlyPosted  an enable never executes a ring slot the owner
//                            has not published (Cross-channel)
#include <algorithm>

#include "ferry/nic/wire.h"
#include "ferry/nic/wqe.h"
#include "nic_test_util.h"

namespace ferry::nic::testing {
namespace {

wire::Headers parse(const Packet& p) {
  wire::Headers h;
  size_t len = 0;
  EXPECT_EQ(wire::parse_headers(p.header_bytes(), &h, &len), wire::ParseError::kNone);
  return h;
}

bool is_read_response(uint8_t op) {
  return op == wire::kReadResponseFirst || op == wire::kReadResponseMiddle || op == wire::kReadResponseLast ||
         op == wire::kReadResponseOnly;
}

// ---- MultiPacketReadLoss -------------------------------------------------------

class MultiPacketReadLoss : public NicTest {
 protected:
  static constexpr uint32_t kMtu = 256;
  static constexpr uint32_t kPackets = 8;
  static constexpr uint32_t kLen = kMtu * kPackets - 100;  // the last packet is short

  void SetUp() override {
    ConnectOptions o;
    o.path_mtu = kMtu;
    o.timeout = 8;  // ~1 ms local ACK timeout
    o.retry_cnt = 1;  // one retry is all a single lost packet may need
    pr_ = make_pair({}, o);
    for (uint32_t i = 0; i < kLen; ++i) *pr_.b->at(i) = static_cast<uint8_t>(i * 11 + 3);
  }

  // Drops, once, the READ response packet `index` (0-based) of the first READ
  // response stream, and counts the READ requests the requester sends.
  void drop_response_packet(uint32_t index) {
    const uint32_t responder = pr_.b->nic->address();
    const uint32_t requester = pr_.a->nic->address();
    engine_->fabric().set_tap([this, index, responder, requester](const Packet& p) {
      const wire::Headers h = parse(p);
      if (p.src_nic == requester && h.bth.opcode == wire::kReadRequest) {
        ++read_requests_;
        request_psns_.push_back(h.bth.psn);
        return false;
      }
      if (p.src_nic != responder || !is_read_response(h.bth.opcode)) return false;
      if (first_psn_ == UINT32_MAX) first_psn_ = h.bth.psn;
      if (!dropped_ && h.bth.psn == wire::psn_add(first_psn_, index)) {
        dropped_ = true;
        return true;
      }
      return false;
    });
  }

  // Posts the READ (and, optionally, a WRITE behind it), runs with a bound on
  // engine passes so that a livelock fails instead of hanging, and checks
  // that everything completed successfully with the right bytes.
  void read_and_check(bool write_behind) {
    const Sge local = pr_.a->sge(0, kLen);
    const Sge src = pr_.a->sge(8192, 8);
    std::vector<SendWr> wrs = {read_wr(1, &local, pr_.b->va(0), pr_.b->mr->rkey())};
    if (write_behind) wrs.push_back(write_wr(2, &src, pr_.b->va(8192), pr_.b->mr->rkey()));
    ASSERT_TRUE(pr_.qa->post_send(wrs).ok());
    std::vector<WorkCompletion> wcs;
    uint64_t passes = 0;
    const Status s = engine_->run_until([&] {
      WorkCompletion wc[4];
      auto n = pr_.a->cq->poll(wc);
      if (n.ok()) wcs.insert(wcs.end(), wc, wc + n.value());
      return wcs.size() == wrs.size() || ++passes > 200'000;
    });
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_LE(passes, 200'000u) << "livelock: " << pr_.a->nic->counters().tx_packets << " packets sent, "
                                << read_requests_ << " READ requests";
    ASSERT_TRUE(dropped_) << "the test did not drop the packet it meant to";
    ASSERT_EQ(wcs.size(), wrs.size());
    for (size_t i = 0; i < wcs.size(); ++i) {
      EXPECT_EQ(wcs[i].wr_id, i + 1);
      EXPECT_EQ(wcs[i].status, WcStatus::kSuccess) << wc_status_name(wcs[i].status);
    }
    EXPECT_EQ(std::memcmp(pr_.a->at(0), pr_.b->at(0), kLen), 0) << "READ data";
  }

  Pair pr_{};
  uint32_t first_psn_ = UINT32_MAX;
  bool dropped_ = false;
  uint32_t read_requests_ = 0;
  std::vector<uint32_t> request_psns_;
};

TEST_F(MultiPacketReadLoss, LostMiddlePacketIsReRequestedOnceFromTheFirstMissingPsn) {
  drop_response_packet(3);
  read_and_check(false);
  ASSERT_EQ(read_requests_, 2u) << "one request, then one re-request for the gap (not one per later packet)";
  EXPECT_EQ(request_psns_[1], wire::psn_add(request_psns_[0], 3)) << "resumes at the first missing PSN";
  EXPECT_EQ(pr_.a->nic->counters().ack_timeouts, 0u) << "the gap is seen from the next packet, not by timeout";
}

TEST_F(MultiPacketReadLoss, LostLastPacketIsReRequestedAfterTheTimeoutAndSucceeds) {
  drop_response_packet(kPackets - 1);
  read_and_check(false);
  ASSERT_EQ(read_requests_, 2u);
  EXPECT_EQ(request_psns_[1], wire::psn_add(request_psns_[0], kPackets - 1));
  EXPECT_EQ(pr_.a->nic->counters().ack_timeouts, 1u) << "nothing follows the last packet: only the timer sees it";
}

TEST_F(MultiPacketReadLoss, LostFirstPacketIsReRequestedWhole) {
  drop_response_packet(0);
  read_and_check(false);
  ASSERT_EQ(read_requests_, 2u);
  EXPECT_EQ(request_psns_[1], request_psns_[0]);
}

TEST_F(MultiPacketReadLoss, LostMiddlePacketWithAWriteBehindIsReRequestedOnce) {
  // The WRITE's ACK also shows the gap; the gap is still re-requested once.
  drop_response_packet(5);
  read_and_check(true);
  EXPECT_EQ(read_requests_, 2u);
}

// The responder answers a partial re-request (a READ request whose PSN lies
// inside an earlier READ) as a READ of its own: FIRST ... LAST (or ONLY) from
// that PSN, with the data at the adjusted address; the requester accepts a
// FIRST at the PSN it resumed from.
class PartialReReadProtocol : public NicTest {};

TEST_F(PartialReReadProtocol, AReRequestIsAnsweredFromItsPsnWithFirstToLastAndAccepted) {
  ConnectOptions o;
  o.path_mtu = 256;
  o.timeout = 8;
  auto pr = make_pair({}, o);
  for (uint32_t i = 0; i < 1024; ++i) *pr.b->at(i) = static_cast<uint8_t>(i * 5 + 1);
  std::vector<wire::Headers> second;
  std::vector<std::vector<uint8_t>> payloads;
  uint32_t psn0 = UINT32_MAX;
  uint32_t seen = 0;
  wire::Headers rerequest{};
  engine_->fabric().set_tap([&](const Packet& p) {
    const wire::Headers h = parse(p);
    if (p.src_nic == pr.a->nic->address()) {
      if (h.bth.opcode == wire::kReadRequest && psn0 != UINT32_MAX) rerequest = h;
      return false;
    }
    if (!is_read_response(h.bth.opcode)) return false;
    if (psn0 == UINT32_MAX) psn0 = h.bth.psn;
    if (++seen <= 4) return wire::psn_diff(h.bth.psn, psn0) >= 2;  // the first stream loses its last two
    second.push_back(h);
    payloads.emplace_back(p.payload, p.payload + p.payload_len);
    return false;
  });
  const Sge local = pr.a->sge(0, 1024);
  ASSERT_TRUE(pr.qa->post_send(read_wr(1, &local, pr.b->va(0), pr.b->mr->rkey())).ok());
  WorkCompletion wc{};
  uint64_t passes = 0;
  ASSERT_TRUE(engine_->run_until([&] {
    return pr.a->cq->poll(std::span<WorkCompletion>(&wc, 1)).value() == 1 || ++passes > 100'000;
  }).ok());
  ASSERT_LE(passes, 100'000u) << "livelock";
  EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc_status_name(wc.status);
  EXPECT_EQ(std::memcmp(pr.a->at(0), pr.b->at(0), 1024), 0);
  // The re-request resumed at the first missing PSN with the address and
  // length adjusted...
  EXPECT_EQ(rerequest.bth.psn, wire::psn_add(psn0, 2));
  EXPECT_EQ(rerequest.reth.va, pr.b->va(512));
  EXPECT_EQ(rerequest.reth.dma_length, 512u);
  // ... and was answered by a READ response of its own.
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].bth.opcode, wire::kReadResponseFirst);
  EXPECT_EQ(second[0].bth.psn, wire::psn_add(psn0, 2));
  EXPECT_EQ(second[1].bth.opcode, wire::kReadResponseLast);
  EXPECT_EQ(second[1].bth.psn, wire::psn_add(psn0, 3));
  ASSERT_EQ(payloads[0].size(), 256u);
  EXPECT_EQ(std::memcmp(payloads[0].data(), pr.b->at(512), 256), 0);
  EXPECT_EQ(pr.a->nic->counters().rx_malformed, 0u);
}

// ---- SendSlotFreedOnPoll ---------------------------------------------------------

class SendSlotFreedOnPoll : public NicTest {};

TEST_F(SendSlotFreedOnPoll, SlotIsFreeOnlyOnceTheApplicationPolledItsCompletion) {
  Host& a = add_host(1 << 20, kAccessAll, /*cqe=*/4);
  Host& b = add_host();
  QpInitAttr attr;
  attr.cap.max_send_wr = 4;
  QueuePair& qa = add_qp(a, attr);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  ASSERT_EQ(qa.send_depth(), 4u);
  ASSERT_EQ(a.cq->capacity(), 4u);
  const Sge sge = a.sge(0, 8);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(qa.post_send(write_wr(i, &sge, b.va(0), b.mr->rkey())).ok());
  run();  // all four complete; their CQEs wait in the CQ
  const Status full = qa.post_send(write_wr(4, &sge, b.va(0), b.mr->rkey()));
  EXPECT_EQ(full.code(), Code::kResourceExhausted) << "no slot is free before its completion is polled";
  run();
  EXPECT_EQ(qa.state(), QpState::kRts) << "the CQ sized to the send queue did not overrun";
  WorkCompletion wc[4];
  ASSERT_EQ(a.cq->poll(std::span<WorkCompletion>(wc, 1)).value(), 1u);
  EXPECT_TRUE(qa.post_send(write_wr(4, &sge, b.va(0), b.mr->rkey())).ok()) << "polling one CQE frees one slot";
  EXPECT_EQ(qa.post_send(write_wr(5, &sge, b.va(0), b.mr->rkey())).code(), Code::kResourceExhausted);
  auto rest = drain(*a.cq);
  ASSERT_EQ(rest.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rest[i].wr_id, i + 1);
    EXPECT_EQ(rest[i].status, WcStatus::kSuccess);
  }
}

TEST_F(SendSlotFreedOnPoll, UnsignaledSlotsAreFreedByThePolledCompletionOfALaterSignaledWr) {
  Host& a = add_host();
  Host& b = add_host();
  QpInitAttr attr;
  attr.cap.max_send_wr = 4;
  QueuePair& qa = add_qp(a, attr);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  const Sge sge = a.sge(0, 8);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(qa.post_send(write_wr(i, &sge, b.va(0), b.mr->rkey(), 0)).ok());
  ASSERT_TRUE(qa.post_send(write_wr(3, &sge, b.va(0), b.mr->rkey())).ok());
  run();
  EXPECT_EQ(qa.post_send(write_wr(4, &sge, b.va(0), b.mr->rkey())).code(), Code::kResourceExhausted);
  WorkCompletion wc;
  ASSERT_EQ(a.cq->poll(std::span<WorkCompletion>(&wc, 1)).value(), 1u);
  EXPECT_EQ(wc.wr_id, 3u);
  std::vector<SendWr> four(4, write_wr(5, &sge, b.va(0), b.mr->rkey()));
  EXPECT_TRUE(qa.post_send(four).ok()) << "the polled CQE covers its three unsignaled predecessors";
}

TEST_F(SendSlotFreedOnPoll, ACqSizedToTheSendQueueNeverOverrunsWhateverThePollingPace) {
  // The application posts as much as the queue takes and polls one CQE now
  // and then; it must see ENOMEM-like refusals, never a CQ overrun.
  Host& a = add_host(1 << 20, kAccessAll, /*cqe=*/16);
  Host& b = add_host();
  QpInitAttr attr;
  attr.cap.max_send_wr = 16;
  attr.sq_sig_all = true;
  QueuePair& qa = add_qp(a, attr);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  const Sge sge = a.sge(0, 8);
  uint64_t posted = 0, polled = 0, refused = 0;
  for (int round = 0; round < 2000; ++round) {
    while (true) {
      const Status s = qa.post_send(write_wr(posted, &sge, b.va(0), b.mr->rkey()));
      if (!s.ok()) {
        ASSERT_EQ(s.code(), Code::kResourceExhausted) << s.to_string();
        ++refused;
        break;
      }
      ++posted;
    }
    for (int k = 0; k < round % 5; ++k) engine_->step();
    WorkCompletion wc;
    auto n = a.cq->poll(std::span<WorkCompletion>(&wc, 1));
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    if (n.value() == 1) {
      ASSERT_EQ(wc.status, WcStatus::kSuccess);
      ASSERT_EQ(wc.wr_id, polled);
      ++polled;
    }
  }
  EXPECT_EQ(qa.state(), QpState::kRts);
  EXPECT_GT(polled, 1000u);
  EXPECT_GT(refused, 0u);
  EXPECT_FALSE(a.nic->poll_async_event().has_value()) << "no CQ error, no fatal QP event";
}

// ---- ExecutedBeforeAnError -------------------------------------------------------

// A 64-packet inbound queue: a large READ's responses are held back by flow
// control in the responder's output queue when the next request arrives.
class ExecutedBeforeAnError : public NicTest {
 protected:
  ExecutedBeforeAnError() : NicTest(FaultModel{}, 64) {}
};

TEST_F(ExecutedBeforeAnError, ReadHeldBackByFlowControlCompletesWhenTheNextWriteFailsItsRkeyCheck) {
  ConnectOptions o;
  o.path_mtu = 1024;
  auto pr = make_pair({}, o);
  const uint32_t len = 256 * 1024;  // 256 response packets, 4x the queue
  for (uint32_t i = 0; i < len; ++i) *pr.b->at(i) = static_cast<uint8_t>(i * 13 + 7);
  const Sge local = pr.a->sge(0, len);
  const Sge src = pr.a->sge(len, 8);
  SendWr wrs[3] = {read_wr(1, &local, pr.b->va(0), pr.b->mr->rkey()),
                   write_wr(2, &src, pr.b->va(0), pr.b->mr->rkey() ^ 0x5500),  // no such rkey
                   write_wr(3, &src, pr.b->va(0), pr.b->mr->rkey())};
  ASSERT_TRUE(pr.qa->post_send(wrs).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess) << "the READ was executed before the failing WRITE: "
                                               << wc_status_name(wcs[0].status);
  EXPECT_EQ(std::memcmp(pr.a->at(0), pr.b->at(0), len), 0);
  EXPECT_EQ(wcs[1].status, WcStatus::kRemAccessErr) << "the first failing WR carries the real status";
  EXPECT_EQ(wcs[2].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(pr.qa->state(), QpState::kError);
  EXPECT_EQ(pr.qb->state(), QpState::kError);
}

TEST_F(ExecutedBeforeAnError, AtomicAndReadBeforeAMisalignedAtomicBothComplete) {
  ConnectOptions o;
  o.path_mtu = 1024;
  auto pr = make_pair({}, o);
  uint64_t* word = reinterpret_cast<uint64_t*>(pr.b->at(300 * 1024));
  *word = 41;
  const uint32_t len = 200 * 1024;
  const Sge local = pr.a->sge(0, len);
  const Sge result = pr.a->sge(len, 8);
  const Sge result2 = pr.a->sge(len + 8, 8);
  SendWr faa;
  faa.wr_id = 2;
  faa.opcode = WrOpcode::kAtomicFetchAndAdd;
  faa.flags = kSendSignaled;
  faa.sg_list = std::span<const Sge>(&result, 1);
  faa.remote_addr = pr.b->va(300 * 1024);
  faa.rkey = pr.b->mr->rkey();
  faa.compare_add = 1;
  SendWr bad = faa;
  bad.wr_id = 3;
  bad.sg_list = std::span<const Sge>(&result2, 1);
  bad.remote_addr += 4;  // misaligned
  SendWr wrs[3] = {read_wr(1, &local, pr.b->va(0), pr.b->mr->rkey()), faa, bad};
  ASSERT_TRUE(pr.qa->post_send(wrs).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
  uint64_t original;
  std::memcpy(&original, pr.a->at(len), 8);
  EXPECT_EQ(original, 41u);
  EXPECT_EQ(*word, 42u);
  EXPECT_EQ(wcs[2].status, WcStatus::kRemInvReqErr);
}

// ---- InlineObeysMaxSendSge -------------------------------------------------------

class InlineObeysMaxSendSge : public NicTest {};

TEST_F(InlineObeysMaxSendSge, InlineSendWithMoreSgesThanMaxSendSgeIsRejected) {
  Host& a = add_host();
  Host& b = add_host();
  QpInitAttr attr;
  attr.cap.max_send_sge = 2;
  attr.cap.max_inline_data = 64;
  QueuePair& qa = add_qp(a, attr);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  const Sge three[3] = {a.sge(0, 4), a.sge(8, 4), a.sge(16, 4)};
  SendWr wr = write_wr(1, nullptr, b.va(0), b.mr->rkey(), kSendSignaled | kSendInline);
  wr.sg_list = std::span<const Sge>(three, 3);
  const Status s = qa.post_send(wr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << "12 inline bytes fit, but 3 SGEs exceed max_send_sge 2";
  EXPECT_EQ(qa.send_posted(), 0u) << "nothing was written to the ring";
  wr.sg_list = std::span<const Sge>(three, 2);
  EXPECT_TRUE(qa.post_send(wr).ok());
  EXPECT_EQ(next_completion(*a.cq).status, WcStatus::kSuccess);
}

// ---- EnableExposesOnlyPosted -----------------------------------------------------

class EnableExposesOnlyPosted : public NicTest {};

TEST_F(EnableExposesOnlyPosted, SendEnableBeyondThePostedCountWaitsForThePosts) {
  Host& a = add_host();
  Host& b = add_host();
  QpInitAttr managed;
  managed.managed_send = true;
  managed.cap.max_send_wr = 8;
  QueuePair& qa = add_qp(a, managed);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  QueuePair& ctrl = loopback_qp(a);
  for (uint32_t i = 0; i < 3; ++i) *a.at(i) = static_cast<uint8_t>(0x40 + i);
  const Sge s0 = a.sge(0, 1);
  ASSERT_TRUE(qa.post_send(write_wr(10, &s0, b.va(0), b.mr->rkey())).ok());
  ASSERT_TRUE(ctrl.post_send(enable_wr(qa, 3)).ok());  // two more than posted
  const uint64_t rx_before = b.nic->counters().rx_packets;
  auto wcs = drain(*a.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 10u);
  EXPECT_EQ(b.nic->counters().rx_packets - rx_before, 1u) << "no empty ring slot went on the wire";
  // The posts that arrive later run, each with its completion.
  const Sge s1 = a.sge(1, 1);
  const Sge s2 = a.sge(2, 1);
  SendWr later[2] = {write_wr(11, &s1, b.va(1), b.mr->rkey()), write_wr(12, &s2, b.va(2), b.mr->rkey())};
  ASSERT_TRUE(qa.post_send(later).ok());
  wcs = drain(*a.cq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 11u);
  EXPECT_EQ(wcs[1].wr_id, 12u);
  EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
  EXPECT_EQ(*b.at(1), 0x41);
  EXPECT_EQ(*b.at(2), 0x42);
  // And the enable limit still holds: a fourth post waits for its enable.
  const Sge s3 = a.sge(3, 1);
  ASSERT_TRUE(qa.post_send(write_wr(13, &s3, b.va(3), b.mr->rkey())).ok());
  EXPECT_TRUE(drain(*a.cq).empty());
}

TEST_F(EnableExposesOnlyPosted, AnEmptyRingSlotIsNeverExecuted) {
  // A slot that has never held a published WQE (zeroed) is not a WQE: an
  // enable far beyond the posts sends nothing and completes nothing.
  Host& a = add_host();
  Host& b = add_host();
  QpInitAttr managed;
  managed.managed_send = true;
  managed.cap.max_send_wr = 4;
  QueuePair& qa = add_qp(a, managed);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  QueuePair& ctrl = loopback_qp(a);
  ASSERT_TRUE(ctrl.post_send(enable_wr(qa, 100)).ok());
  EXPECT_TRUE(drain(*a.cq).empty());
  EXPECT_EQ(b.nic->counters().rx_packets, 0u) << "nothing from an empty slot went on the wire";
  EXPECT_EQ(qa.state(), QpState::kRts);
  const Sge s0 = a.sge(0, 1);
  ASSERT_TRUE(qa.post_send(write_wr(7, &s0, b.va(0), b.mr->rkey())).ok());
  auto wcs = drain(*a.cq);
  ASSERT_EQ(wcs.size(), 1u) << "the one posted WQE ran once; the empty slots after it wait";
  EXPECT_EQ(wcs[0].wr_id, 7u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

TEST_F(EnableExposesOnlyPosted, RecvEnableBeyondThePostedCountExposesNoRecvUntilOneIsPosted) {
  Host& a = add_host();
  Host& b = add_host();
  QueuePair& qa = add_qp(a);
  QpInitAttr managed;
  managed.managed_recv = true;
  managed.cap.max_recv_wr = 4;
  QueuePair& qb = add_qp(b, managed);
  connect(qa, a, qb, b);
  QueuePair& ctrl = loopback_qp(b);
  ASSERT_TRUE(ctrl.post_send(enable_wr(qb, 2, /*recv=*/true)).ok());
  run();
  *a.at(0) = 0x77;
  const Sge s = a.sge(0, 1);
  SendWr send;
  send.wr_id = 1;
  send.opcode = WrOpcode::kSend;
  send.flags = kSendSignaled;
  send.sg_list = std::span<const Sge>(&s, 1);
  ASSERT_TRUE(qa.post_send(send).ok());
  ASSERT_TRUE(engine_->run_until([&] { return b.nic->counters().rnr_naks_sent >= 2; }).ok())
      << "an enabled but never posted RECV slot is no RECV (RNR)";
  WorkCompletion wc;
  EXPECT_EQ(b.cq->poll(std::span<WorkCompletion>(&wc, 1)).value(), 0u);
  const Sge rs = b.sge(64, 8);
  ASSERT_TRUE(qb.post_recv(RecvWr{42, std::span<const Sge>(&rs, 1)}).ok());
  EXPECT_EQ(next_completion(*a.cq).status, WcStatus::kSuccess);
  wc = next_completion(*b.cq);
  EXPECT_EQ(wc.wr_id, 42u) << "the message landed in the RECV posted later";
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(*b.at(64), 0x77);
}

}  // namespace
}  // namespace ferry::nic::testing
