// White-box protocol tests: the test plays the peer NIC, injecting crafted
// packets and capturing what the NIC under test transmits, packet by packet.
#include <algorithm>
#include <deque>

#include "ferry/nic/wire.h"
#include "nic_test_util.h"

namespace ferry::nic::testing {
namespace {

using wire::Headers;

struct Captured {
  Headers h;
  std::vector<uint8_t> payload;
};

class ProtocolTest : public NicTest {
 protected:
  static constexpr uint32_t kPeerQpn = 0x000777;
  static constexpr uint32_t kPsn = 0x100;  // first PSN each side uses

  // The NIC under test (`dut`) with one QP connected to a fake peer QP on
  // `peer`; the test intercepts everything `dut` sends.
  void SetUp() override {
    dut_ = &add_host();
    peer_ = &add_host();
    qp_ = &add_qp(*dut_);
    QpAttr attr;
    attr.state = QpState::kInit;
    attr.access_flags = kAccessAll;
    ASSERT_TRUE(qp_->modify(attr, kQpState | kQpAccessFlags).ok());
    attr.state = QpState::kRtr;
    attr.path_mtu = 256;
    attr.dest_nic = peer_->nic->address();
    attr.dest_qp_num = kPeerQpn;
    attr.rq_psn = kPsn;
    attr.min_rnr_timer = 7;
    attr.max_dest_rd_atomic = 4;
    ASSERT_TRUE(qp_->modify(attr, kQpState | kQpPathMtu | kQpDest | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer).ok());
    attr.state = QpState::kRts;
    attr.sq_psn = kPsn;
    attr.timeout = 20;  // long: tests drive recovery explicitly
    ASSERT_TRUE(qp_->modify(attr, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic).ok());
    const uint32_t dut_address = dut_->nic->address();
    engine_->fabric().set_tap([this, dut_address](const Packet& p) {
      if (p.src_nic != dut_address) return false;
      Captured c;
      size_t len = 0;
      EXPECT_EQ(wire::parse_headers(p.header_bytes(), &c.h, &len), wire::ParseError::kNone);
      c.payload.assign(p.payload, p.payload + p.payload_len);
      out_.push_back(std::move(c));
      return true;
    });
  }
  void TearDown() override { engine_->fabric().set_tap(nullptr); }

  // Injects a packet from the fake peer to the NIC under test.
  void inject(Headers h, std::vector<uint8_t> payload = {}, uint32_t src_nic = UINT32_MAX) {
    payloads_.push_back(std::move(payload));
    const std::vector<uint8_t>& body = payloads_.back();
    Packet p;
    h.bth.dest_qp = qp_->qp_num();
    h.bth.pad_count = wire::pad_for(body.size());
    p.src_nic = src_nic == UINT32_MAX ? peer_->nic->address() : src_nic;
    p.dst_nic = dut_->nic->address();
    p.src_qpn = kPeerQpn;
    p.header_len = static_cast<uint16_t>(wire::serialize_headers(h, std::span<uint8_t>(p.header, sizeof(p.header))));
    p.payload = body.data();
    p.payload_len = static_cast<uint32_t>(body.size());
    engine_->fabric().inject(p);
  }
  // Runs the engine until it has nothing to do right now, without letting
  // simulated time pass (so no retransmission timer fires behind the test).
  void settle() {
    while (engine_->step()) {
    }
  }
  std::vector<Captured> take() {
    settle();
    std::vector<Captured> v(out_.begin(), out_.end());
    out_.clear();
    return v;
  }

  static Headers write_only(uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len, bool ack_req = true) {
    Headers h;
    h.bth.opcode = wire::kWriteOnly;
    h.bth.psn = psn;
    h.bth.ack_req = ack_req;
    h.reth = wire::Reth{va, rkey, len};
    return h;
  }
  static Headers ack(uint32_t psn, uint8_t syndrome = wire::make_syndrome(wire::kAckTypeAck, wire::kAckNoCredit)) {
    Headers h;
    h.bth.opcode = wire::kAcknowledge;
    h.bth.psn = psn;
    h.aeth.syndrome = syndrome;
    return h;
  }
  static std::vector<uint8_t> bytes(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i);
    return v;
  }

  std::vector<WorkCompletion> completions() {
    settle();
    std::vector<WorkCompletion> out;
    WorkCompletion wc[16];
    for (;;) {
      auto n = dut_->cq->poll(wc);
      if (!n.ok() || n.value() == 0) break;
      out.insert(out.end(), wc, wc + n.value());
    }
    return out;
  }

  Host* dut_;
  Host* peer_;
  QueuePair* qp_;
  std::deque<Captured> out_;
  std::deque<std::vector<uint8_t>> payloads_;
};

// ---- responder ---------------------------------------------------------------

TEST_F(ProtocolTest, WriteIsExecutedAndAcknowledgedWhenAckRequested) {
  inject(write_only(kPsn, dut_->va(64), dut_->mr->rkey(), 16), bytes(16, 1));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.opcode, wire::kAcknowledge);
  EXPECT_EQ(out[0].h.bth.psn, kPsn);
  EXPECT_EQ(out[0].h.bth.dest_qp, kPeerQpn);
  EXPECT_EQ(wire::syndrome_type(out[0].h.aeth.syndrome), wire::kAckTypeAck);
  EXPECT_EQ(out[0].h.aeth.msn, 1u);
  EXPECT_EQ(std::memcmp(dut_->at(64), bytes(16, 1).data(), 16), 0);
}

TEST_F(ProtocolTest, ResponderCoalescesAcksWithinAReceiveBatch) {
  for (uint32_t i = 0; i < 5; ++i) inject(write_only(kPsn + i, dut_->va(i * 8), dut_->mr->rkey(), 8), bytes(8, i));
  auto out = take();
  ASSERT_EQ(out.size(), 1u) << "one ACK covers the batch";
  EXPECT_EQ(out[0].h.bth.psn, kPsn + 4);
  EXPECT_EQ(out[0].h.aeth.msn, 5u);
}

TEST_F(ProtocolTest, WriteWithoutAckRequestIsNotAcknowledgedYet) {
  inject(write_only(kPsn, dut_->va(0), dut_->mr->rkey(), 8, /*ack_req=*/false), bytes(8, 3));
  EXPECT_TRUE(take().empty());
  inject(write_only(kPsn + 1, dut_->va(8), dut_->mr->rkey(), 8, true), bytes(8, 4));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.psn, kPsn + 1) << "a later ACK is cumulative";
}

TEST_F(ProtocolTest, DuplicateWriteIsReacknowledgedButNotExecutedAgain) {
  inject(write_only(kPsn, dut_->va(0), dut_->mr->rkey(), 8), bytes(8, 10));
  ASSERT_EQ(take().size(), 1u);
  std::memset(dut_->at(0), 0x5A, 8);  // the application changed it since
  inject(write_only(kPsn, dut_->va(0), dut_->mr->rkey(), 8), bytes(8, 20));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.psn, kPsn) << "re-ACK of the latest PSN";
  for (int i = 0; i < 8; ++i) EXPECT_EQ(*dut_->at(i), 0x5A) << "duplicate WRITE must not be re-executed";
  EXPECT_EQ(dut_->nic->counters().rx_duplicates, 1u);
}

TEST_F(ProtocolTest, DuplicateAtomicReplaysTheSavedResult) {
  uint64_t* word = reinterpret_cast<uint64_t*>(dut_->at(128));
  *word = 0;
  Headers cas;
  cas.bth.opcode = wire::kCompareSwap;
  cas.bth.psn = kPsn;
  cas.bth.ack_req = true;
  cas.atomic = wire::AtomicEth{dut_->va(128), dut_->mr->rkey(), /*swap=*/5, /*compare=*/0};
  inject(cas);
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.opcode, wire::kAtomicAcknowledge);
  EXPECT_EQ(out[0].h.atomic_ack_orig, 0u);
  EXPECT_EQ(*word, 5u);
  inject(cas);  // the requester did not see the ACK and resends
  out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.atomic_ack_orig, 0u) << "replayed, not re-executed (re-execution would return 5)";
  EXPECT_EQ(*word, 5u);
  EXPECT_EQ(dut_->nic->counters().atomic_replays, 1u);
}

TEST_F(ProtocolTest, DuplicateReadIsExecutedAgain) {
  std::memcpy(dut_->at(0), bytes(8, 1).data(), 8);
  Headers read;
  read.bth.opcode = wire::kReadRequest;
  read.bth.psn = kPsn;
  read.bth.ack_req = true;
  read.reth = wire::Reth{dut_->va(0), dut_->mr->rkey(), 8};
  inject(read);
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.opcode, wire::kReadResponseOnly);
  EXPECT_EQ(out[0].payload, bytes(8, 1));
  std::memcpy(dut_->at(0), bytes(8, 9).data(), 8);
  inject(read);
  out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].payload, bytes(8, 9)) << "a duplicate READ reads memory again";
  EXPECT_EQ(dut_->nic->counters().read_replays, 1u);
  // The duplicate did not move the expected PSN: the next new request is kPsn+1.
  inject(write_only(kPsn + 1, dut_->va(64), dut_->mr->rkey(), 4), bytes(4, 0));
  out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.psn, kPsn + 1);
}

TEST_F(ProtocolTest, ReadResponsesAreSegmentedWithAethOnFirstAndLast) {
  const uint32_t len = 3 * 256 + 5;
  std::vector<uint8_t> data = bytes(len, 7);
  std::memcpy(dut_->at(0), data.data(), len);
  Headers read;
  read.bth.opcode = wire::kReadRequest;
  read.bth.psn = kPsn;
  read.reth = wire::Reth{dut_->va(0), dut_->mr->rkey(), len};
  inject(read);
  auto out = take();
  ASSERT_EQ(out.size(), 4u);
  const uint8_t ops[4] = {wire::kReadResponseFirst, wire::kReadResponseMiddle, wire::kReadResponseMiddle,
                          wire::kReadResponseLast};
  std::vector<uint8_t> joined;
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i].h.bth.opcode, ops[i]);
    EXPECT_EQ(out[i].h.bth.psn, kPsn + i) << "responses take the READ's PSN range";
    joined.insert(joined.end(), out[i].payload.begin(), out[i].payload.end());
  }
  EXPECT_EQ(joined, data);
  // The READ occupied four PSNs: the next request is kPsn + 4.
  inject(write_only(kPsn + 4, dut_->va(4096), dut_->mr->rkey(), 4), bytes(4, 0));
  out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.opcode, wire::kAcknowledge);
  EXPECT_EQ(out[0].h.bth.psn, kPsn + 4);
}

TEST_F(ProtocolTest, GapIsNakedOnceThenDroppedUntilTheExpectedPsnArrives) {
  inject(write_only(kPsn + 2, dut_->va(16), dut_->mr->rkey(), 8), bytes(8, 2));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_type(out[0].h.aeth.syndrome), wire::kAckTypeNak);
  EXPECT_EQ(wire::syndrome_value(out[0].h.aeth.syndrome), wire::kNakPsnSequenceError);
  EXPECT_EQ(out[0].h.bth.psn, kPsn) << "the NAK names the expected PSN";
  inject(write_only(kPsn + 3, dut_->va(24), dut_->mr->rkey(), 8), bytes(8, 3));
  EXPECT_TRUE(take().empty()) << "one NAK per gap";
  EXPECT_EQ(*dut_->at(16), 0) << "out-of-sequence packets are not executed";
  inject(write_only(kPsn, dut_->va(0), dut_->mr->rkey(), 8), bytes(8, 0));
  out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_type(out[0].h.aeth.syndrome), wire::kAckTypeAck);
  EXPECT_EQ(out[0].h.bth.psn, kPsn);
  EXPECT_EQ(dut_->nic->counters().seq_naks_sent, 1u);
  EXPECT_EQ(dut_->nic->counters().rx_out_of_sequence, 2u);
}

TEST_F(ProtocolTest, SendWithoutRecvGetsRnrNakWithMinRnrTimer) {
  Headers send;
  send.bth.opcode = wire::kSendOnly;
  send.bth.psn = kPsn;
  send.bth.ack_req = true;
  inject(send, bytes(4, 1));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_type(out[0].h.aeth.syndrome), wire::kAckTypeRnrNak);
  EXPECT_EQ(wire::syndrome_value(out[0].h.aeth.syndrome), 7u) << "carries the responder's min_rnr_timer";
  EXPECT_EQ(out[0].h.bth.psn, kPsn);
  // Once a RECV is posted, the resent SEND is accepted at the same PSN.
  const Sge rs = dut_->sge(0, 16);
  ASSERT_TRUE(qp_->post_recv(RecvWr{1, std::span<const Sge>(&rs, 1)}).ok());
  inject(send, bytes(4, 1));
  out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_type(out[0].h.aeth.syndrome), wire::kAckTypeAck);
}

TEST_F(ProtocolTest, MalformedPacketsAreDroppedAndCounted) {
  const uint64_t before = dut_->nic->counters().rx_malformed;
  Packet p;
  p.src_nic = peer_->nic->address();
  p.dst_nic = dut_->nic->address();
  p.src_qpn = kPeerQpn;
  // 1. truncated BTH
  p.header_len = 5;
  std::memset(p.header, 0, sizeof(p.header));
  engine_->fabric().inject(p);
  // 2. an opcode Ferry does not speak
  Headers h = write_only(kPsn, dut_->va(0), dut_->mr->rkey(), 0);
  h.bth.dest_qp = qp_->qp_num();
  p.header_len = static_cast<uint16_t>(wire::serialize_headers(h, std::span<uint8_t>(p.header, sizeof(p.header))));
  p.header[0] = 0x15;
  engine_->fabric().inject(p);
  // 3. payload whose length disagrees with the pad count
  p.header[0] = wire::kWriteOnly;
  static const uint8_t three[3] = {1, 2, 3};
  p.payload = three;
  p.payload_len = 3;
  engine_->fabric().inject(p);
  // 4. payload on a READ request
  Headers r;
  r.bth.opcode = wire::kReadRequest;
  r.bth.dest_qp = qp_->qp_num();
  r.bth.pad_count = wire::pad_for(4);
  p.header_len = static_cast<uint16_t>(wire::serialize_headers(r, std::span<uint8_t>(p.header, sizeof(p.header))));
  static const uint8_t four[4] = {1, 2, 3, 4};
  p.payload = four;
  p.payload_len = 4;
  engine_->fabric().inject(p);
  // 5. wrong partition key
  Headers k = write_only(kPsn, dut_->va(0), dut_->mr->rkey(), 0);
  k.bth.dest_qp = qp_->qp_num();
  k.bth.pkey = 0x1234;
  p.header_len = static_cast<uint16_t>(wire::serialize_headers(k, std::span<uint8_t>(p.header, sizeof(p.header))));
  p.payload = nullptr;
  p.payload_len = 0;
  engine_->fabric().inject(p);
  EXPECT_TRUE(take().empty()) << "malformed packets get no response";
  EXPECT_EQ(dut_->nic->counters().rx_malformed - before, 5u);
  EXPECT_EQ(qp_->state(), QpState::kRts) << "and do not disturb the QP";
}

TEST_F(ProtocolTest, PacketsFromAnotherHostAreIgnored) {
  Host& stranger = add_host();
  inject(write_only(kPsn, dut_->va(0), dut_->mr->rkey(), 8), bytes(8, 1), stranger.nic->address());
  EXPECT_TRUE(take().empty());
  EXPECT_EQ(*dut_->at(0), 0);
  EXPECT_EQ(dut_->nic->counters().rx_unknown_qp, 1u);
}

TEST_F(ProtocolTest, MiddlePacketWithoutFirstIsAnInvalidRequest) {
  Headers mid;
  mid.bth.opcode = wire::kWriteMiddle;
  mid.bth.psn = kPsn;
  inject(mid, bytes(256, 0));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_value(out[0].h.aeth.syndrome), wire::kNakInvalidRequest);
  EXPECT_EQ(qp_->state(), QpState::kError);
}

// Regression: the response count of a READ near 2^32 bytes wrapped to 0, so
// the responder answered nothing at all. Messages above 2^31 are invalid.
TEST_F(ProtocolTest, ReadLongerThanTheLargestMessageIsAnInvalidRequest) {
  Headers read;
  read.bth.opcode = wire::kReadRequest;
  read.bth.psn = kPsn;
  read.reth = wire::Reth{dut_->va(0), dut_->mr->rkey(), 0xFFFFFFFF};
  inject(read);
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_type(out[0].h.aeth.syndrome), wire::kAckTypeNak);
  EXPECT_EQ(wire::syndrome_value(out[0].h.aeth.syndrome), wire::kNakInvalidRequest);
}

TEST_F(ProtocolTest, WriteFirstShorterThanTheMtuIsAnInvalidRequest) {
  Headers first = write_only(kPsn, dut_->va(0), dut_->mr->rkey(), 1000);
  first.bth.opcode = wire::kWriteFirst;
  inject(first, bytes(100, 0));  // a FIRST packet must carry exactly one MTU
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_value(out[0].h.aeth.syndrome), wire::kNakInvalidRequest);
}

static Headers flush_request(uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len, uint8_t placement,
                             uint8_t selectivity = wire::kSelectRange) {
  Headers h;
  h.bth.opcode = wire::kFlush;
  h.bth.psn = psn;
  h.bth.ack_req = true;
  h.feth.placement = placement;
  h.feth.selectivity = selectivity;
  h.reth = wire::Reth{va, rkey, len};
  return h;
}

TEST_F(ProtocolTest, FlushIsAnsweredByAnEmptyReadResponseAndReplayedWhenDuplicated) {
  inject(flush_request(kPsn, dut_->va(0), dut_->mr->rkey(), 4096, wire::kPlacementPersistence));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.opcode, wire::kReadResponseOnly) << "IBTA 1.5 / rxe acknowledge FLUSH like a READ";
  EXPECT_TRUE(out[0].payload.empty());
  EXPECT_EQ(out[0].h.bth.psn, kPsn);
  inject(flush_request(kPsn, dut_->va(0), dut_->mr->rkey(), 4096, wire::kPlacementPersistence));
  out = take();
  ASSERT_EQ(out.size(), 1u) << "a duplicate FLUSH is executed and answered again";
  EXPECT_EQ(out[0].h.bth.opcode, wire::kReadResponseOnly);
}

TEST_F(ProtocolTest, FlushNeedsTheFlushAccessOfItsPlacementType) {
  auto global_only = dut_->nic->reg_mr(*dut_->pd, dut_->at(0), 8192, kAccessLocalWrite | kAccessFlushGlobal).value();
  inject(flush_request(kPsn, dut_->va(0), global_only->rkey(), 64, wire::kPlacementGlobalVisibility));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.opcode, wire::kReadResponseOnly);
  inject(flush_request(kPsn + 1, dut_->va(0), global_only->rkey(), 64, wire::kPlacementPersistence));
  out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_value(out[0].h.aeth.syndrome), wire::kNakRemoteAccessError)
      << "persistence placement needs FLUSH_PERSISTENT access";
}

TEST_F(ProtocolTest, FlushOfTheWholeRegionSkipsTheRangeCheck) {
  // VA and length name nothing valid; MR selectivity flushes the whole region.
  inject(flush_request(kPsn, 0xdead0000, dut_->mr->rkey(), 0x7fffffff, wire::kPlacementPersistence,
                       wire::kSelectMemoryRegion));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.opcode, wire::kReadResponseOnly);
}

TEST_F(ProtocolTest, FlushWithAnUnknownPlacementTypeIsAnInvalidRequest) {
  inject(flush_request(kPsn, dut_->va(0), dut_->mr->rkey(), 64, 0x8));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_value(out[0].h.aeth.syndrome), wire::kNakInvalidRequest);
}

TEST_F(ProtocolTest, DeregisteringTheTargetOfAnUnfinishedWriteNaksItsNextPacket) {
  AlignedBytes target = aligned_bytes(4096);
  auto target_mr = dut_->nic->reg_mr(*dut_->pd, target.get(), 4096, kAccessAll).value();
  Headers first = write_only(kPsn, target_mr->iova(), target_mr->rkey(), 512, /*ack_req=*/false);
  first.bth.opcode = wire::kWriteFirst;
  inject(first, bytes(256, 1));
  EXPECT_TRUE(take().empty());
  target_mr.reset();  // the region goes away between the WRITE's packets
  Headers last;
  last.bth.opcode = wire::kWriteLast;
  last.bth.psn = kPsn + 1;
  last.bth.ack_req = true;
  inject(last, bytes(256, 2));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_type(out[0].h.aeth.syndrome), wire::kAckTypeNak);
  EXPECT_EQ(wire::syndrome_value(out[0].h.aeth.syndrome), wire::kNakRemoteAccessError);
  EXPECT_EQ(out[0].h.bth.psn, kPsn + 1);
  EXPECT_EQ(std::count(target.get() + 256, target.get() + 512, 0), 256) << "nothing written after the deregistration";
  EXPECT_EQ(qp_->state(), QpState::kError);
}

TEST_F(ProtocolTest, DeregisteringTheBuffersOfARecvMidMessageFailsItsNextPacketAndWritesNothingMore) {
  AlignedBytes buf = aligned_bytes(1024);
  auto mr = dut_->nic->reg_mr(*dut_->pd, buf.get(), 1024, kAccessLocalWrite).value();
  const Sge rs = mr->sge(0, 1024);
  ASSERT_TRUE(qp_->post_recv(RecvWr{1, std::span<const Sge>(&rs, 1)}).ok());
  Headers first;
  first.bth.opcode = wire::kSendFirst;
  first.bth.psn = kPsn;
  inject(first, bytes(256, 1));
  EXPECT_TRUE(take().empty());
  EXPECT_EQ(buf[0], 1);
  mr.reset();  // the application deregisters the buffer of a RECV in use
  Headers last;
  last.bth.opcode = wire::kSendLast;
  last.bth.psn = kPsn + 1;
  last.bth.ack_req = true;
  inject(last, bytes(256, 2));
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::syndrome_type(out[0].h.aeth.syndrome), wire::kAckTypeNak);
  EXPECT_EQ(wire::syndrome_value(out[0].h.aeth.syndrome), wire::kNakRemoteOperationalError);
  EXPECT_EQ(std::count(buf.get() + 256, buf.get() + 512, 0), 256) << "nothing placed after the deregistration";
  EXPECT_EQ(qp_->state(), QpState::kError);
}

// ---- requester ---------------------------------------------------------------

// A WQE outlives a deregistration of its local buffer (the verbs do not
// forbid it; the memory may be unmapped right after). The NIC translates
// every DMA through the key, so whatever the WQE would still read or write
// fails with LOC_PROT_ERR: a go-back-N resend, a READ's response, an
// atomic's result. (The Tailwind simulator found an emulator crash here: a
// resend borrowing a log segment already freed.)
TEST_F(ProtocolTest, AResendAfterItsLocalBufferWasDeregisteredFailsInsteadOfReadingIt) {
  AlignedBytes src = aligned_bytes(1024, 0x5a);
  auto mr = dut_->nic->reg_mr(*dut_->pd, src.get(), 1024, kAccessLocalWrite).value();
  const Sge sge = mr->sge(0, 600);
  ASSERT_TRUE(qp_->post_send(write_wr(1, &sge, 0x1000, 0x42)).ok());
  ASSERT_EQ(take().size(), 3u);
  mr.reset();
  src.reset();  // unmapped, as far as the NIC knows
  inject(ack(kPsn, wire::make_syndrome(wire::kAckTypeNak, wire::kNakPsnSequenceError)));
  EXPECT_TRUE(take().empty()) << "nothing resent from memory no longer registered";
  auto wcs = completions();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kLocProtErr);
  EXPECT_EQ(qp_->state(), QpState::kError);
}

// A READ or an atomic (remote 0x2000/0x42) into one 8-byte local SGE in a
// fresh region: sent, then the region deregistered before its answer.
class DeregisteredMeanwhileTest : public ProtocolTest {
 protected:
  AlignedBytes post_then_deregister(SendWr wr) {
    AlignedBytes dst = aligned_bytes(64);
    auto mr = dut_->nic->reg_mr(*dut_->pd, dst.get(), 64, kAccessLocalWrite).value();
    const Sge local = mr->sge(0, 8);
    wr.wr_id = 1;
    wr.flags = kSendSignaled;
    wr.sg_list = std::span<const Sge>(&local, 1);
    wr.remote_addr = 0x2000;
    wr.rkey = 0x42;
    EXPECT_TRUE(qp_->post_send(wr).ok());
    EXPECT_EQ(take().size(), 1u);
    return dst;  // `mr` goes here: deregistered with the request outstanding
  }
  // The one completion is LOC_PROT_ERR and nothing was placed in `dst`.
  void expect_failed_unplaced(const AlignedBytes& dst) {
    auto wcs = completions();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kLocProtErr);
    EXPECT_EQ(std::count(dst.get(), dst.get() + 8, 0), 8) << "nothing placed in the deregistered region";
    EXPECT_EQ(qp_->state(), QpState::kError);
  }
};

TEST_F(DeregisteredMeanwhileTest, AReadResponseForABufferDeregisteredMeanwhileIsNotPlaced) {
  SendWr read;
  read.opcode = WrOpcode::kRdmaRead;
  const AlignedBytes dst = post_then_deregister(read);
  Headers resp;
  resp.bth.opcode = wire::kReadResponseOnly;
  resp.bth.psn = kPsn;
  resp.aeth.syndrome = wire::make_syndrome(wire::kAckTypeAck, wire::kAckNoCredit);
  inject(resp, bytes(8, 0x30));
  expect_failed_unplaced(dst);
}

TEST_F(DeregisteredMeanwhileTest, AnAtomicResultForABufferDeregisteredMeanwhileIsNotPlaced) {
  SendWr faa;
  faa.opcode = WrOpcode::kAtomicFetchAndAdd;
  faa.compare_add = 1;
  const AlignedBytes dst = post_then_deregister(faa);
  Headers resp;
  resp.bth.opcode = wire::kAtomicAcknowledge;
  resp.bth.psn = kPsn;
  resp.aeth.syndrome = wire::make_syndrome(wire::kAckTypeAck, wire::kAckNoCredit);
  resp.atomic_ack_orig = 0x1122334455667788ULL;
  inject(resp);
  expect_failed_unplaced(dst);
}

TEST_F(ProtocolTest, RequesterCompletesAFlushOnItsEmptyReadResponse) {
  SendWr flush;
  flush.wr_id = 4;
  flush.opcode = WrOpcode::kFlush;
  flush.flags = kSendSignaled;
  flush.remote_addr = 0x9000;
  flush.rkey = 0x42;
  flush.flush_length = 256;
  ASSERT_TRUE(qp_->post_send(flush).ok());
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.opcode, wire::kFlush);
  EXPECT_EQ(out[0].h.feth.placement, wire::kPlacementPersistence);
  EXPECT_EQ(out[0].h.reth.dma_length, 256u);
  inject(ack(kPsn));  // a plain ACK is not the FLUSH's answer...
  EXPECT_TRUE(completions().empty());
  Headers resp;
  resp.bth.opcode = wire::kReadResponseOnly;
  resp.bth.psn = kPsn;
  resp.aeth.syndrome = wire::make_syndrome(wire::kAckTypeAck, wire::kAckNoCredit);
  inject(resp);  // ...the empty READ response is
  auto wcs = completions();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kFlush);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

TEST_F(ProtocolTest, MultiPacketWriteSetsAckReqOnlyOnItsLastPacket) {
  const Sge sge = dut_->sge(0, 600);
  ASSERT_TRUE(qp_->post_send(write_wr(1, &sge, 0x1000, 0x42)).ok());
  auto out = take();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].h.bth.opcode, wire::kWriteFirst);
  EXPECT_EQ(out[0].h.reth.dma_length, 600u);
  EXPECT_EQ(out[0].h.reth.va, 0x1000u);
  EXPECT_EQ(out[0].h.reth.rkey, 0x42u);
  EXPECT_FALSE(out[0].h.bth.ack_req);
  EXPECT_EQ(out[1].h.bth.opcode, wire::kWriteMiddle);
  EXPECT_FALSE(out[1].h.bth.ack_req);
  EXPECT_EQ(out[2].h.bth.opcode, wire::kWriteLast);
  EXPECT_TRUE(out[2].h.bth.ack_req);
  EXPECT_EQ(out[2].payload.size(), 600u - 512u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(out[i].h.bth.psn, kPsn + i);
}

TEST_F(ProtocolTest, OneCumulativeAckCompletesEveryEarlierRequest) {
  const Sge sge = dut_->sge(0, 8);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(qp_->post_send(write_wr(i, &sge, 0x1000, 0x42)).ok());
  ASSERT_EQ(take().size(), 3u);
  EXPECT_TRUE(completions().empty()) << "nothing completes before an ACK";
  inject(ack(kPsn + 2));
  auto wcs = completions();
  ASSERT_EQ(wcs.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(wcs[i].wr_id, static_cast<uint64_t>(i));
}

TEST_F(ProtocolTest, SequenceNakMakesTheRequesterGoBackN) {
  const Sge sge = dut_->sge(0, 8);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(qp_->post_send(write_wr(i, &sge, 0x1000, 0x42)).ok());
  ASSERT_EQ(take().size(), 3u);
  inject(ack(kPsn + 1, wire::make_syndrome(wire::kAckTypeNak, wire::kNakPsnSequenceError)));
  auto out = take();
  ASSERT_EQ(out.size(), 2u) << "resends from the NAKed PSN on";
  EXPECT_EQ(out[0].h.bth.psn, kPsn + 1);
  EXPECT_EQ(out[1].h.bth.psn, kPsn + 2);
  auto wcs = completions();
  ASSERT_EQ(wcs.size(), 1u) << "the NAK implicitly acknowledged the first WRITE";
  EXPECT_EQ(wcs[0].wr_id, 0u);
  EXPECT_EQ(dut_->nic->counters().retransmitted_packets, 2u);
}

TEST_F(ProtocolTest, AckBeyondAReadWithoutItsResponseMakesTheRequesterAskAgain) {
  const Sge local = dut_->sge(0, 8);
  SendWr read;
  read.wr_id = 1;
  read.opcode = WrOpcode::kRdmaRead;
  read.flags = kSendSignaled;
  read.sg_list = std::span<const Sge>(&local, 1);
  read.remote_addr = 0x2000;
  read.rkey = 0x42;
  const Sge src = dut_->sge(64, 8);
  SendWr wrs[2] = {read, write_wr(2, &src, 0x1000, 0x42)};
  ASSERT_TRUE(qp_->post_send(wrs).ok());
  ASSERT_EQ(take().size(), 2u);
  inject(ack(kPsn + 1));  // the WRITE's ACK: the READ's response must have been lost
  auto out = take();
  ASSERT_GE(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.opcode, wire::kReadRequest);
  EXPECT_EQ(out[0].h.bth.psn, kPsn);
  EXPECT_TRUE(completions().empty()) << "completions stay in order behind the READ";
  Headers resp;
  resp.bth.opcode = wire::kReadResponseOnly;
  resp.bth.psn = kPsn;
  resp.aeth.syndrome = wire::make_syndrome(wire::kAckTypeAck, wire::kAckNoCredit);
  inject(resp, bytes(8, 0x30));
  inject(ack(kPsn + 1));
  auto wcs = completions();
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(std::memcmp(dut_->at(0), bytes(8, 0x30).data(), 8), 0);
}

TEST_F(ProtocolTest, AcksForUnsentPsnsAreIgnored) {
  const Sge sge = dut_->sge(0, 8);
  ASSERT_TRUE(qp_->post_send(write_wr(1, &sge, 0x1000, 0x42)).ok());
  ASSERT_EQ(take().size(), 1u);
  inject(ack(kPsn + 50));
  EXPECT_TRUE(completions().empty());
  inject(ack(kPsn));
  EXPECT_EQ(completions().size(), 1u);
}

TEST_F(ProtocolTest, RemoteAccessNakFailsTheRequestAndFlushesTheRest) {
  const Sge sge = dut_->sge(0, 8);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(qp_->post_send(write_wr(i, &sge, 0x1000, 0x42)).ok());
  ASSERT_EQ(take().size(), 3u);
  inject(ack(kPsn + 1, wire::make_syndrome(wire::kAckTypeNak, wire::kNakRemoteAccessError)));
  auto wcs = completions();
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(wcs[2].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(qp_->state(), QpState::kError);
}

}  // namespace
}  // namespace ferry::nic::testing
