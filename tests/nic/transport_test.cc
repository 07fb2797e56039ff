// Reliable transport under faults: exactly-once, in-order delivery with
// seeded loss, duplication and reordering; RNR retry; retry exhaustion
// (verbs-semantics.md, "Transport").
//
// Randomized tests print their seed; rerun one with FERRY_SEED=<n>.
#include <algorithm>
#include <iostream>

#include "ferry/common/rng.h"
#include "nic_test_util.h"
#include "test_seed.h"

namespace ferry::nic::testing {
namespace {

std::vector<uint64_t> test_seeds() { return ferry::testing::test_seeds({1, 0xfe44, 20261122}); }

FaultModel faults_for(uint64_t seed) {
  FaultModel f;
  f.seed = seed;
  f.drop = 0.02;
  f.duplicate = 0.02;
  f.delay = 0.03;
  f.delay_max_ns = 30'000;  // reorders across tens of packets
  return f;
}

class FaultyTransportTest : public NicTest, public ::testing::WithParamInterface<uint64_t> {
 protected:
  explicit FaultyTransportTest(size_t fabric_queue_packets = 8192)
      : NicTest(faults_for(GetParam()), fabric_queue_packets) {
    ferry::testing::print_seed(GetParam());
  }
  void writes_reads_and_atomics_take_effect_exactly_once();
  static ConnectOptions options() {
    ConnectOptions o;
    o.path_mtu = 256;  // many multi-packet messages
    o.timeout = 4;     // 65 us local ACK timeout
    o.retry_cnt = 7;
    return o;
  }
};

constexpr int kMessages = 10'000;

uint8_t pattern_byte(uint32_t seq, uint32_t i) { return static_cast<uint8_t>(seq * 31 + i * 7 + 1); }

TEST_P(FaultyTransportTest, SendsArriveExactlyOnceAndInOrder) {
  QpInitAttr attr;
  attr.cap.max_send_wr = 128;
  attr.cap.max_recv_wr = 256;
  auto pr = make_pair(attr, options());
  Rng rng(GetParam() ^ 0x5eed);
  constexpr uint32_t kSlot = 1024;
  constexpr uint32_t kRecvs = 256;
  constexpr uint32_t kSendSlots = 64;
  uint64_t recv_posted = 0;
  auto post_recv = [&] {
    const Sge rs = pr.b->sge((recv_posted % kRecvs) * kSlot, kSlot);
    ASSERT_TRUE(pr.qb->post_recv(RecvWr{recv_posted, std::span<const Sge>(&rs, 1)}).ok());
    ++recv_posted;
  };
  for (uint32_t i = 0; i < kRecvs; ++i) post_recv();

  uint32_t sent = 0, send_done = 0, received = 0;
  std::vector<uint32_t> lengths(kMessages);
  auto pump = [&]() -> bool {
    WorkCompletion wcs[32];
    auto n = pr.a->cq->poll(wcs);
    for (uint32_t i = 0; i < n.value(); ++i) {
      EXPECT_EQ(wcs[i].status, WcStatus::kSuccess);
      EXPECT_EQ(wcs[i].wr_id, send_done) << "send completions in posting order";
      ++send_done;
    }
    n = pr.b->cq->poll(wcs);
    for (uint32_t i = 0; i < n.value(); ++i) {
      const WorkCompletion& wc = wcs[i];
      EXPECT_EQ(wc.status, WcStatus::kSuccess);
      const uint8_t* buf = pr.b->at((wc.wr_id % kRecvs) * kSlot);
      uint32_t seq;
      std::memcpy(&seq, buf, 4);
      EXPECT_EQ(seq, received) << "message " << received << " arrived out of order or twice";
      EXPECT_EQ(wc.byte_len, lengths[received]);
      bool content_ok = true;
      for (uint32_t k = 4; k < wc.byte_len; ++k) content_ok &= buf[k] == pattern_byte(seq, k);
      EXPECT_TRUE(content_ok) << "payload of message " << seq;
      ++received;
      post_recv();
    }
    while (sent < kMessages && sent - send_done < kSendSlots) {
      const uint32_t len = static_cast<uint32_t>(rng.between(4, 700));  // up to 3 packets
      lengths[sent] = len;
      uint8_t* src = pr.a->at((sent % kSendSlots) * kSlot);
      std::memcpy(src, &sent, 4);
      for (uint32_t k = 4; k < len; ++k) src[k] = pattern_byte(sent, k);
      const Sge sge = pr.a->sge((sent % kSendSlots) * kSlot, len);
      SendWr wr;
      wr.wr_id = sent;
      wr.opcode = WrOpcode::kSend;
      wr.flags = kSendSignaled;
      wr.sg_list = std::span<const Sge>(&sge, 1);
      EXPECT_TRUE(pr.qa->post_send(wr).ok());
      ++sent;
    }
    return received == kMessages && send_done == kMessages;
  };
  ASSERT_TRUE(engine_->run_until(pump).ok()) << "sent " << sent << " completed " << send_done << " received "
                                              << received;
  EXPECT_EQ(received, static_cast<uint32_t>(kMessages));
  // The faults really happened and the transport recovered from them.
  const FabricCounters& f = engine_->fabric().counters();
  EXPECT_GT(f.dropped_fault.get(), 0u);
  EXPECT_GT(f.duplicated_fault.get(), 0u);
  EXPECT_GT(f.delayed_fault.get(), 0u);
  EXPECT_GT(pr.a->nic->counters().retransmitted_packets, 0u);
  EXPECT_GT(pr.b->nic->counters().rx_duplicates, 0u);
  EXPECT_GT(pr.b->nic->counters().seq_naks_sent, 0u);
}

TEST_P(FaultyTransportTest, WritesReadsAndAtomicsTakeEffectExactlyOnce) {
  writes_reads_and_atomics_take_effect_exactly_once();
}

// The same with a 16-packet inbound queue: READ/ATOMIC responses wait in the
// responder's output queue (flow control) while the requester times out and
// resends them; the duplicates' answers must not use up the responder's
// max_dest_rd_atomic resources for new requests.
class FaultySmallQueueTransportTest : public FaultyTransportTest {
 protected:
  FaultySmallQueueTransportTest() : FaultyTransportTest(16) {}
};

TEST_P(FaultySmallQueueTransportTest, WritesReadsAndAtomicsTakeEffectExactlyOnce) {
  writes_reads_and_atomics_take_effect_exactly_once();
}

void FaultyTransportTest::writes_reads_and_atomics_take_effect_exactly_once() {
  QpInitAttr attr;
  attr.cap.max_send_wr = 128;
  auto pr = make_pair(attr, options());
  constexpr uint32_t kWindow = 64;
  constexpr uint64_t kCounter = 0;         // remote FETCH_AND_ADD target
  constexpr uint64_t kSlots = 4096;        // remote WRITE targets: 512 slots of 8 bytes
  uint64_t* counter = reinterpret_cast<uint64_t*>(pr.b->at(kCounter));
  *counter = 0;
  // Op i: i%3==0 FETCH_AND_ADD(1); i%3==1 WRITE value i to slot; i%3==2 READ that slot back.
  uint32_t posted = 0, done = 0;
  uint64_t faa_posted = 0;
  std::vector<uint64_t> faa_expect(kMessages, 0), read_expect(kMessages, 0);
  auto slot_of = [](uint32_t i) { return kSlots + ((i / 3) % 512) * 8; };
  auto pump = [&]() -> bool {
    WorkCompletion wcs[32];
    auto n = pr.a->cq->poll(wcs);
    for (uint32_t k = 0; k < n.value(); ++k) {
      const uint32_t i = static_cast<uint32_t>(wcs[k].wr_id);
      EXPECT_EQ(wcs[k].status, WcStatus::kSuccess);
      EXPECT_EQ(i, done);
      uint64_t local;
      std::memcpy(&local, pr.a->at((i % kWindow) * 8), 8);
      if (i % 3 == 0) {
        EXPECT_EQ(local, faa_expect[i]) << "FETCH_AND_ADD " << i << " saw a duplicate execution";
      } else if (i % 3 == 2) {
        EXPECT_EQ(local, read_expect[i]) << "READ " << i << " did not see the preceding WRITE";
      }
      ++done;
    }
    while (posted < kMessages && posted - done < kWindow) {
      const uint32_t i = posted;
      std::memset(pr.a->at((i % kWindow) * 8), 0xFF, 8);
      const Sge local = pr.a->sge((i % kWindow) * 8, 8);
      const Sge src = pr.a->sge(65536 + (i % kWindow) * 8, 8);
      SendWr wr;
      wr.wr_id = i;
      wr.flags = kSendSignaled;
      wr.rkey = pr.b->mr->rkey();
      if (i % 3 == 0) {
        wr.opcode = WrOpcode::kAtomicFetchAndAdd;
        wr.sg_list = std::span<const Sge>(&local, 1);
        wr.remote_addr = pr.b->va(kCounter);
        wr.compare_add = 1;
        faa_expect[i] = faa_posted++;
      } else if (i % 3 == 1) {
        const uint64_t value = i;
        std::memcpy(pr.a->at(65536 + (i % kWindow) * 8), &value, 8);
        wr.opcode = WrOpcode::kRdmaWrite;
        wr.sg_list = std::span<const Sge>(&src, 1);
        wr.remote_addr = pr.b->va(slot_of(i));
      } else {
        wr.opcode = WrOpcode::kRdmaRead;
        wr.sg_list = std::span<const Sge>(&local, 1);
        wr.remote_addr = pr.b->va(slot_of(i));
        read_expect[i] = i - 1;
      }
      EXPECT_TRUE(pr.qa->post_send(wr).ok());
      ++posted;
    }
    return done == kMessages;
  };
  ASSERT_TRUE(engine_->run_until(pump).ok()) << "posted " << posted << " done " << done;
  EXPECT_EQ(*counter, faa_posted) << "each FETCH_AND_ADD applied exactly once";
  EXPECT_GT(pr.a->nic->counters().retransmitted_packets, 0u);
  const NicCounters b = pr.b->nic->counters();
  EXPECT_GT(b.atomic_replays + b.read_replays, 0u) << "duplicates were answered by replay/re-execution";
}

INSTANTIATE_TEST_SUITE_P(Seeds, FaultyTransportTest, ::testing::ValuesIn(test_seeds()));
INSTANTIATE_TEST_SUITE_P(Seeds, FaultySmallQueueTransportTest, ::testing::ValuesIn(test_seeds()));

class RetryTest : public NicTest {};

TEST_F(RetryTest, RnrNakRetriesAfterTheTimerThenSucceeds) {
  ConnectOptions o;
  o.min_rnr_timer = 14;  // 1.28 ms
  o.rnr_retry = 7;       // infinite
  auto pr = make_pair({}, o);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kSendSignaled;
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  const uint64_t t0 = clock_.now_ns();
  ASSERT_TRUE(engine_->run_until([&] { return pr.b->nic->counters().rnr_naks_sent >= 3; }).ok());
  // Three RNR NAKs mean two waits of at least the advertised timer.
  EXPECT_GE(clock_.now_ns() - t0, 2 * rnr_timer_ns(14));
  const Sge rs = pr.b->sge(0, 8);
  ASSERT_TRUE(pr.qb->post_recv(RecvWr{2, std::span<const Sge>(&rs, 1)}).ok());
  const WorkCompletion wc = next_completion(*pr.a->cq);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(next_completion(*pr.b->cq).wr_id, 2u);
  EXPECT_GE(pr.a->nic->counters().rnr_retries, 3u);
}

TEST_F(RetryTest, RnrRetryCountExhaustedIsRnrRetryExceeded) {
  ConnectOptions o;
  o.rnr_retry = 2;
  auto pr = make_pair({}, o);
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kSendSignaled;
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  const WorkCompletion wc = next_completion(*pr.a->cq);
  EXPECT_EQ(wc.status, WcStatus::kRnrRetryExcErr);
  EXPECT_EQ(pr.b->nic->counters().rnr_naks_sent, 3u) << "first attempt plus rnr_retry=2 retries";
  EXPECT_EQ(pr.qa->state(), QpState::kError);
}

TEST_F(RetryTest, SilentPeerExhaustsRetryCount) {
  ConnectOptions o;
  o.retry_cnt = 3;
  o.timeout = 10;  // 4.2 ms
  auto pr = make_pair({}, o);
  FaultModel black_hole;
  black_hole.drop = 1.0;
  engine_->fabric().set_faults(black_hole);
  const Sge sge = pr.a->sge(0, 8);
  ASSERT_TRUE(pr.qa->post_send(write_wr(1, &sge, pr.b->va(0), pr.b->mr->rkey())).ok());
  const uint64_t t0 = clock_.now_ns();
  const WorkCompletion wc = next_completion(*pr.a->cq);
  EXPECT_EQ(wc.status, WcStatus::kRetryExcErr);
  const NicCounters c = pr.a->nic->counters();
  EXPECT_EQ(c.ack_timeouts, 4u) << "retry_cnt=3: four timeouts, the last one fatal";
  EXPECT_EQ(c.retransmitted_packets, 3u);
  EXPECT_GE(clock_.now_ns() - t0, 4 * ack_timeout_ns(10));
}

TEST_F(RetryTest, LostAckIsRecoveredByTimeoutAndDuplicateIsNotReexecuted) {
  ConnectOptions o;
  o.timeout = 8;
  auto pr = make_pair({}, o);
  uint64_t* counter = reinterpret_cast<uint64_t*>(pr.b->at(0));
  *counter = 10;
  // Drop every packet B sends (ACKs), once, then heal.
  int dropped = 0;
  engine_->fabric().set_tap([&](const Packet& p) {
    if (p.src_nic == pr.b->nic->address() && dropped < 1) {
      ++dropped;
      return true;
    }
    return false;
  });
  const Sge sge = pr.a->sge(0, 8);
  SendWr faa;
  faa.opcode = WrOpcode::kAtomicFetchAndAdd;
  faa.flags = kSendSignaled;
  faa.sg_list = std::span<const Sge>(&sge, 1);
  faa.remote_addr = pr.b->va(0);
  faa.rkey = pr.b->mr->rkey();
  faa.compare_add = 5;
  ASSERT_TRUE(pr.qa->post_send(faa).ok());
  const WorkCompletion wc = next_completion(*pr.a->cq);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(*counter, 15u) << "the resent atomic was replayed, not executed again";
  uint64_t original;
  std::memcpy(&original, pr.a->at(0), 8);
  EXPECT_EQ(original, 10u);
  EXPECT_EQ(pr.b->nic->counters().atomic_replays, 1u);
  EXPECT_EQ(pr.a->nic->counters().ack_timeouts, 1u);
}

class WireDelayTest : public NicTest {
 protected:
  WireDelayTest() {
    EngineOptions options;
    options.threaded = false;
    options.clock = &clock_;
    options.wire_delay_ns = 1000;
    engine_ = std::make_unique<Engine>(options);
  }
};

TEST_F(WireDelayTest, EveryPacketTakesTheModeledWireDelayAndOrderIsKept) {
  auto pr = make_pair();
  const uint64_t t0 = clock_.now_ns();
  const Sge sge = pr.a->sge(0, 8);
  ASSERT_TRUE(pr.qa->post_send(write_wr(1, &sge, pr.b->va(0), pr.b->mr->rkey())).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).status, WcStatus::kSuccess);
  EXPECT_GE(clock_.now_ns() - t0, 2000u) << "request and ACK each cross the wire once";
  EXPECT_LT(clock_.now_ns() - t0, 3000u);
  // Two WRITE+READ pairs: completions still in order across the delayed wire.
  const uint64_t t1 = clock_.now_ns();
  SendWr read;
  read.wr_id = 3;
  read.opcode = WrOpcode::kRdmaRead;
  read.flags = kSendSignaled;
  read.remote_addr = pr.b->va(0);
  read.rkey = pr.b->mr->rkey();
  SendWr wrs[2] = {write_wr(2, &sge, pr.b->va(8), pr.b->mr->rkey(), 0), read};
  ASSERT_TRUE(pr.qa->post_send(wrs).ok());
  EXPECT_EQ(next_completion(*pr.a->cq).wr_id, 3u);
  EXPECT_LT(clock_.now_ns() - t1, 3000u) << "behind one doorbell the READ costs no second round trip";
}

// A tiny inbound queue (64 packets) on every NIC: flow control must hold
// large READ bursts back instead of overflowing the requester.
class SmallQueueTest : public NicTest {
 protected:
  SmallQueueTest() : NicTest(FaultModel{}, 64) {}
};

TEST_F(SmallQueueTest, ReadLargerThanTheRequestersQueueCompletesWithoutLossOrTimeout) {
  ConnectOptions o;
  o.path_mtu = 1024;
  auto pr = make_pair({}, o);
  const uint32_t len = 512 * 1024;  // 512 response packets, 8x the queue
  for (uint32_t i = 0; i < len; ++i) *pr.b->at(i) = static_cast<uint8_t>(i * 13 + 5);
  const Sge local = pr.a->sge(0, len);
  SendWr read;
  read.opcode = WrOpcode::kRdmaRead;
  read.flags = kSendSignaled;
  read.sg_list = std::span<const Sge>(&local, 1);
  read.remote_addr = pr.b->va(0);
  read.rkey = pr.b->mr->rkey();
  ASSERT_TRUE(pr.qa->post_send(read).ok());
  const WorkCompletion wc = next_completion(*pr.a->cq);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(pr.a->at(0), pr.b->at(0), len), 0);
  EXPECT_EQ(engine_->fabric().counters().dropped_overflow.get(), 0u);
  EXPECT_EQ(pr.a->nic->counters().ack_timeouts, 0u);
}

TEST_F(SmallQueueTest, AcksDoNotOvertakeAThrottledReadResponse) {
  ConnectOptions o;
  o.path_mtu = 1024;
  auto pr = make_pair({}, o);
  const Sge local = pr.a->sge(0, 256 * 1024);
  SendWr read;
  read.wr_id = 1;
  read.opcode = WrOpcode::kRdmaRead;
  read.flags = kSendSignaled;
  read.sg_list = std::span<const Sge>(&local, 1);
  read.remote_addr = pr.b->va(0);
  read.rkey = pr.b->mr->rkey();
  const Sge src = pr.a->sge(600000, 8);
  SendWr wrs[2] = {read, write_wr(2, &src, pr.b->va(600000), pr.b->mr->rkey())};
  ASSERT_TRUE(pr.qa->post_send(wrs).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(pr.a->nic->counters().retransmitted_packets, 0u)
      << "an ACK that overtook the READ's responses would have made the requester ask again";
}

TEST_F(SmallQueueTest, MoreOutstandingReadsThanTheResponderAllowsIsAnInvalidRequest) {
  Host& a = add_host(4 << 20);
  Host& b = add_host(4 << 20);
  QueuePair& qa = add_qp(a);
  QueuePair& qb = add_qp(b);
  // The requester may keep 4 READs outstanding, the responder accepts 1.
  auto up = [&](QueuePair& q, Host& peer, QueuePair& peer_qp, uint8_t rd, uint8_t dest_rd) {
    QpAttr attr;
    attr.state = QpState::kInit;
    attr.access_flags = kAccessAll;
    ASSERT_TRUE(q.modify(attr, kQpState | kQpAccessFlags).ok());
    attr.state = QpState::kRtr;
    attr.path_mtu = 1024;
    attr.dest_nic = peer.nic->address();
    attr.dest_qp_num = peer_qp.qp_num();
    attr.max_dest_rd_atomic = dest_rd;
    ASSERT_TRUE(q.modify(attr, kQpState | kQpPathMtu | kQpDest | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer).ok());
    attr.state = QpState::kRts;
    attr.max_rd_atomic = rd;
    ASSERT_TRUE(q.modify(attr, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic).ok());
  };
  up(qa, b, qb, 4, 1);
  up(qb, a, qa, 1, 1);
  SendWr wrs[2];
  Sge locals[2] = {a.sge(0, 512 * 1024), a.sge(1 << 20, 512 * 1024)};
  for (int i = 0; i < 2; ++i) {
    wrs[i].wr_id = i;
    wrs[i].opcode = WrOpcode::kRdmaRead;
    wrs[i].flags = kSendSignaled;
    wrs[i].sg_list = std::span<const Sge>(&locals[i], 1);
    wrs[i].remote_addr = b.va(0);
    wrs[i].rkey = b.mr->rkey();
  }
  ASSERT_TRUE(qa.post_send(wrs).ok());
  auto wcs = drain(*a.cq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[1].status, WcStatus::kRemInvReqErr) << "the second READ exceeded max_dest_rd_atomic";
}

// The responder's READ source is deregistered while the READ's response is
// still queued behind flow control: the unsent bytes must not be read from the
// (possibly freed) memory. Like a DMA fault on hardware, the READ fails.
TEST_F(SmallQueueTest, DeregisteringTheSourceOfAQueuedReadResponseFailsTheRead) {
  ConnectOptions o;
  o.path_mtu = 1024;
  auto pr = make_pair({}, o);
  const uint32_t len = 512 * 1024;  // 512 response packets, 8x the queue
  AlignedBytes source = aligned_bytes(len, 0x5A);
  auto source_mr = pr.b->nic->reg_mr(*pr.b->pd, source.get(), len, kAccessAll).value();
  const Sge local = pr.a->sge(0, len);
  SendWr read;
  read.wr_id = 1;
  read.opcode = WrOpcode::kRdmaRead;
  read.flags = kSendSignaled;
  read.sg_list = std::span<const Sge>(&local, 1);
  read.remote_addr = source_mr->iova();
  read.rkey = source_mr->rkey();
  ASSERT_TRUE(pr.qa->post_send(read).ok());
  engine_->step();
  engine_->step();
  WorkCompletion wc{};
  ASSERT_EQ(pr.a->cq->poll(std::span<WorkCompletion>(&wc, 1)).value(), 0u) << "the READ is still being answered";
  source_mr.reset();
  std::memset(source.get(), 0xEE, len);  // the application reuses the memory it deregistered
  wc = next_completion(*pr.a->cq);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, WcStatus::kRemAccessErr);
  EXPECT_EQ(std::count(pr.a->at(0), pr.a->at(len), 0xEE), 0) << "no byte was read after the deregistration";
}

// READ, ACK, READ, ACK, ... queued behind a throttled READ: the output queue
// (max_dest_rd_atomic READ/ATOMIC entries) must not overflow and drop one.
TEST_F(SmallQueueTest, AcksBetweenReadsQueuedBehindAThrottledReadAreNotDropped) {
  Host& a = add_host(4 << 20);
  Host& b = add_host(4 << 20);
  QueuePair& qa = add_qp(a);
  QueuePair& qb = add_qp(b);
  ConnectOptions o;
  o.path_mtu = 1024;
  o.max_rd_atomic = 4;
  connect(qa, a, qb, b, o);
  // 960 response packets: throttled for many passes, yet within the
  // requester's 1024-PSN window so the later requests may start.
  const uint32_t big = 960 * 1024;
  const Sge big_local = a.sge(0, big);
  SendWr read;
  read.wr_id = 0;
  read.opcode = WrOpcode::kRdmaRead;
  read.flags = kSendSignaled;
  read.sg_list = std::span<const Sge>(&big_local, 1);
  read.remote_addr = b.va(0);
  read.rkey = b.mr->rkey();
  ASSERT_TRUE(qa.post_send(read).ok());
  engine_->step();
  // Each request in a pass of its own, so each ACK is queued on its own.
  std::vector<Sge> sges;
  sges.reserve(8);
  for (uint64_t i = 1; i <= 7; ++i) {
    sges.push_back(a.sge(big + i * 64, 8));
    SendWr wr = write_wr(i, &sges.back(), b.va(big + i * 64), b.mr->rkey());
    if (i % 2 == 0) {
      wr.opcode = WrOpcode::kRdmaRead;
      wr.remote_addr = b.va(i * 64);
    }
    ASSERT_TRUE(qa.post_send(wr).ok());
    engine_->step();
  }
  WorkCompletion wc{};
  ASSERT_EQ(a.cq->poll(std::span<WorkCompletion>(&wc, 1)).value(), 0u) << "the first READ is still throttled";
  auto wcs = drain(*a.cq);
  ASSERT_EQ(wcs.size(), 8u);
  for (uint64_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, i);
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess);
  }
  EXPECT_EQ(a.nic->counters().ack_timeouts, 0u) << "a response was dropped and recovered only by timeout";
  EXPECT_EQ(a.nic->counters().retransmitted_packets, 0u);
}

// Wire delay and a small inbound queue: packets on the wire count against the
// destination's queue, so flow control holds the sender back instead of the
// wire overflowing.
class SmallQueueWireDelayTest : public NicTest {
 protected:
  SmallQueueWireDelayTest() {
    EngineOptions options;
    options.threaded = false;
    options.clock = &clock_;
    options.fabric_queue_packets = 64;
    options.wire_delay_ns = 1000;
    engine_ = std::make_unique<Engine>(options);
  }
};

TEST_F(SmallQueueWireDelayTest, ReadsAndWritesLargerThanTheQueueAreFlowControlledOnTheWire) {
  ConnectOptions o;
  o.path_mtu = 1024;
  auto pr = make_pair({}, o);
  const uint32_t len = 256 * 1024;  // 256 packets each way, 4x the queue
  for (uint32_t i = 0; i < len; ++i) *pr.b->at(i) = static_cast<uint8_t>(i * 13 + 5);
  for (uint32_t i = 0; i < len; ++i) *pr.a->at(len + i) = static_cast<uint8_t>(i * 7 + 3);
  const Sge read_local = pr.a->sge(0, len);
  SendWr read;
  read.wr_id = 1;
  read.opcode = WrOpcode::kRdmaRead;
  read.flags = kSendSignaled;
  read.sg_list = std::span<const Sge>(&read_local, 1);
  read.remote_addr = pr.b->va(0);
  read.rkey = pr.b->mr->rkey();
  const Sge write_local = pr.a->sge(len, len);
  SendWr wrs[2] = {read, write_wr(2, &write_local, pr.b->va(len), pr.b->mr->rkey())};
  ASSERT_TRUE(pr.qa->post_send(wrs).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(pr.a->at(0), pr.b->at(0), len), 0);
  EXPECT_EQ(std::memcmp(pr.a->at(len), pr.b->at(len), len), 0);
  EXPECT_EQ(engine_->fabric().counters().dropped_overflow.get(), 0u);
  EXPECT_EQ(pr.a->nic->counters().ack_timeouts, 0u);
  EXPECT_EQ(pr.a->nic->counters().retransmitted_packets, 0u);
}

}  // namespace
}  // namespace ferry::nic::testing
