// Conformance: multi-packet (striding) shared receive queues, the Ordered
// Queue's NIC rule (JUNE BERRY §5.1: SRQ buffers are allocated in order, the
// hardware ACK comes after allocation) under loss, and the modeled RNIC
// resource counters (verbs-semantics.md, "Shared receive queues";
// docs/wqe-format.md, "Multi-packet SRQ").
#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "ferry/common/rng.h"
#include "nic_test_util.h"
#include "test_seed.h"

namespace ferry::nic::testing {
namespace {

class MpSrqTest : public NicTest {
 protected:
  explicit MpSrqTest(const FaultModel& faults = {}) : NicTest(faults) {}

  // A server host with an SRQ (multi-packet if strides > 0) and `clients`
  // client hosts, each with one QP connected to a server QP on the SRQ.
  void build(uint32_t strides, uint32_t stride_bytes, int clients, uint32_t max_message = 0,
             const ConnectOptions& o = {}) {
    server_ = &add_host(4 << 20);
    SrqInitAttr a;
    a.max_wr = 64;
    a.mp_strides = strides;
    a.mp_stride_bytes = stride_bytes;
    a.mp_max_message_bytes = max_message;
    srq_ = &add_srq(*server_, a);
    QpInitAttr attr;
    attr.srq = srq_;
    for (int i = 0; i < clients; ++i) {
      Host& c = add_host();
      QueuePair& cq = add_qp(c);
      QueuePair& sq = add_qp(*server_, attr);
      connect(cq, c, sq, *server_, o);
      clients_.push_back(&c);
      client_qps_.push_back(&cq);
    }
  }
  // Posts one buffer: buffer i lives at server offset i * buffer_bytes.
  void post_buffer(uint64_t i, uint32_t buffer_bytes) {
    const Sge sge = server_->sge(i * buffer_bytes, buffer_bytes);
    ASSERT_TRUE(srq_->post_recv(RecvWr{1000 + i, std::span<const Sge>(&sge, 1)}).ok());
  }
  // Client c sends `len` bytes whose first byte is `tag` and the rest a pattern.
  void send(int c, uint32_t len, uint8_t tag, uint64_t wr_id = 0) {
    uint8_t* p = clients_[c]->at(0);
    for (uint32_t i = 0; i < len; ++i) p[i] = static_cast<uint8_t>(tag + i * 3);
    const Sge sge = clients_[c]->sge(0, len);
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::kSend;
    wr.flags = kSendSignaled;
    wr.sg_list = std::span<const Sge>(&sge, len ? 1 : 0);
    ASSERT_TRUE(client_qps_[c]->post_send(wr).ok());
  }
  bool data_at(uint64_t buffer, uint32_t buffer_bytes, uint32_t stride, uint32_t stride_bytes, uint32_t len,
               uint8_t tag) {
    const uint8_t* p = server_->at(buffer * buffer_bytes + static_cast<size_t>(stride) * stride_bytes);
    for (uint32_t i = 0; i < len; ++i) {
      if (p[i] != static_cast<uint8_t>(tag + i * 3)) return false;
    }
    return true;
  }

  Host* server_ = nullptr;
  SharedReceiveQueue* srq_ = nullptr;
  std::vector<Host*> clients_;
  std::vector<QueuePair*> client_qps_;
};

TEST_F(MpSrqTest, MessagesLandBackToBackAtStrideBoundaries) {
  build(16, 64, 3);
  post_buffer(0, 1024);
  const uint32_t lens[4] = {10, 100, 64, 200};
  const uint32_t expect_stride[4] = {0, 1, 3, 4};  // 1, 2, 1, 4 strides
  for (int m = 0; m < 4; ++m) {
    send(m % 3, lens[m], static_cast<uint8_t>(0x10 * (m + 1)));
    run();
  }
  auto wcs = drain(*server_->cq);
  ASSERT_EQ(wcs.size(), 4u);
  for (int m = 0; m < 4; ++m) {
    EXPECT_EQ(wcs[m].status, WcStatus::kSuccess);
    EXPECT_EQ(wcs[m].wr_id, 1000u) << "every message reports its buffer's RECV";
    EXPECT_EQ(wcs[m].wqe_index, 0u);
    EXPECT_EQ(wcs[m].stride_index, expect_stride[m]) << "message " << m;
    EXPECT_EQ(wcs[m].byte_len, lens[m]);
    EXPECT_FALSE(wcs[m].mp_buffer_done);
    EXPECT_FALSE(wcs[m].mp_filler);
    EXPECT_TRUE(data_at(0, 1024, expect_stride[m], 64, lens[m], static_cast<uint8_t>(0x10 * (m + 1))));
  }
  EXPECT_EQ(srq_->consumed(), 1u) << "one WQE served all four messages";
}

TEST_F(MpSrqTest, ABufferThatIsFullOrCannotTakeTheNextMessageIsReported) {
  build(4, 64, 1);  // 256-byte buffers
  for (uint64_t i = 0; i < 3; ++i) post_buffer(i, 256);
  // 100 + 100 fill buffer 0 exactly; 100 goes to buffer 1 at 0; 150 does not
  // fit the 2 strides left there: a filler releases buffer 1, 150 lands at 2.0.
  const uint32_t lens[4] = {100, 100, 100, 150};
  for (int m = 0; m < 4; ++m) {
    send(0, lens[m], static_cast<uint8_t>(m + 1));
    run();
  }
  auto wcs = drain(*server_->cq);
  ASSERT_EQ(wcs.size(), 5u);
  EXPECT_EQ(wcs[0].stride_index, 0u);
  EXPECT_FALSE(wcs[0].mp_buffer_done);
  EXPECT_EQ(wcs[1].stride_index, 2u);
  EXPECT_TRUE(wcs[1].mp_buffer_done) << "the message that took the last strides says the buffer is done";
  EXPECT_EQ(wcs[2].wqe_index, 1u);
  EXPECT_EQ(wcs[2].stride_index, 0u);
  EXPECT_TRUE(wcs[3].mp_filler) << "buffer 1 released before the message that did not fit";
  EXPECT_TRUE(wcs[3].mp_buffer_done);
  EXPECT_EQ(wcs[3].wqe_index, 1u);
  EXPECT_EQ(wcs[3].wr_id, 1001u);
  EXPECT_EQ(wcs[3].byte_len, 0u);
  EXPECT_EQ(wcs[3].stride_index, 2u) << "the filler names the first stride left unused";
  EXPECT_EQ(wcs[3].mp_strides_consumed, 2u) << "... and covers the rest of the buffer";
  EXPECT_EQ(wcs[0].mp_strides_consumed, 2u);
  EXPECT_EQ(wcs[1].mp_strides_consumed, 2u);
  EXPECT_EQ(wcs[4].mp_strides_consumed, 3u) << "150 B in 64 B strides";
  EXPECT_EQ(wcs[4].wqe_index, 2u);
  EXPECT_EQ(wcs[4].stride_index, 0u);
  EXPECT_EQ(wcs[4].byte_len, 150u);
  EXPECT_TRUE(data_at(2, 256, 0, 64, 150, 4));
}

TEST_F(MpSrqTest, AMultiPacketMessageReservesTheLargestMessageAndGivesBackWhatItDidNotUse) {
  ConnectOptions o;
  o.path_mtu = 256;
  build(64, 64, 1, /*max_message=*/1024, o);
  post_buffer(0, 4096);
  send(0, 600, 7);  // three packets
  run();
  send(0, 40, 9);
  run();
  auto wcs = drain(*server_->cq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].stride_index, 0u);
  EXPECT_EQ(wcs[0].byte_len, 600u);
  EXPECT_EQ(wcs[1].stride_index, 10u) << "600 B used 10 strides of the 16 reserved; the rest came back";
  EXPECT_EQ(wcs[0].mp_strides_consumed, 10u) << "the completion counts what it kept";
  EXPECT_TRUE(data_at(0, 4096, 0, 64, 600, 7));
  EXPECT_TRUE(data_at(0, 4096, 10, 64, 40, 9));
}

TEST_F(MpSrqTest, InterleavedMultiPacketMessagesGetDisjointStrides) {
  ConnectOptions o;
  o.path_mtu = 256;
  build(64, 64, 2, /*max_message=*/1024, o);
  post_buffer(0, 4096);
  // Client 0's 700 B message: its first packet passes, the other two are held
  // until client 1's 900 B message has landed whole.
  const uint32_t c0 = clients_[0]->nic->address();
  std::vector<Packet> held;
  std::deque<std::vector<uint8_t>> held_payloads;
  int c0_packets = 0;
  engine_->fabric().set_tap([&](const Packet& p) {
    if (p.src_nic != c0 || ++c0_packets == 1) return false;
    held.push_back(p);
    held_payloads.emplace_back(p.payload, p.payload + p.payload_len);
    held.back().payload = held_payloads.back().data();
    held.back().buffer = -1;
    return true;
  });
  send(0, 700, 0x20);
  for (int i = 0; i < 50; ++i) engine_->step();  // its retransmissions are held too
  send(1, 900, 0x40);
  for (int i = 0; i < 50; ++i) engine_->step();
  auto early = drain(*server_->cq);
  ASSERT_EQ(early.size(), 1u) << "client 1's message completed while client 0's was open";
  EXPECT_EQ(early[0].byte_len, 900u);
  EXPECT_EQ(early[0].stride_index, 16u) << "after the 16 strides reserved for the open message";
  EXPECT_EQ(early[0].mp_strides_consumed, 15u) << "last placed: it gave back what it did not use";
  engine_->fabric().set_tap(nullptr);
  ASSERT_GE(held.size(), 2u) << "its second and third packets (and retransmissions of them)";
  for (const Packet& p : held) engine_->fabric().inject(p);
  run();
  auto late = drain(*server_->cq);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].byte_len, 700u);
  EXPECT_EQ(late[0].stride_index, 0u);
  EXPECT_EQ(late[0].mp_strides_consumed, 16u) << "a message was placed after it: its reservation stays";
  EXPECT_TRUE(data_at(0, 4096, 0, 64, 700, 0x20));
  EXPECT_TRUE(data_at(0, 4096, 16, 64, 900, 0x40));
  // The next message lands after both, at 16 + 15.
  send(1, 10, 0x60);
  run();
  auto next = drain(*server_->cq);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].stride_index, 31u);
}

TEST_F(MpSrqTest, AMessageLargerThanAWholeBufferFailsWithALengthErrorAndWritesNothingPastIt) {
  build(4, 64, 1);  // 256-byte buffers
  post_buffer(0, 256);
  post_buffer(1, 256);
  std::memset(server_->at(512), 0xEE, 64);  // just past both buffers
  send(0, 100, 1);
  run();
  send(0, 300, 2);  // one packet, more than any buffer holds
  run();
  auto server_wcs = drain(*server_->cq);
  ASSERT_EQ(server_wcs.size(), 3u);
  EXPECT_EQ(server_wcs[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(server_wcs[1].mp_filler) << "buffer 0 could not take it";
  EXPECT_EQ(server_wcs[2].status, WcStatus::kLocLenErr);
  EXPECT_EQ(server_wcs[2].wqe_index, 1u);
  auto client_wcs = drain(*clients_[0]->cq);
  ASSERT_EQ(client_wcs.size(), 2u);
  EXPECT_EQ(client_wcs[1].status, WcStatus::kRemInvReqErr) << wc_status_name(client_wcs[1].status);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(*server_->at(512 + i), 0xEE) << "byte " << i << " past the buffers";
}

TEST_F(MpSrqTest, AMultiPacketSrqTakesOneWholeBufferPerRecv) {
  build(16, 64, 1);
  const Sge small = server_->sge(0, 512);
  EXPECT_EQ(srq_->post_recv(RecvWr{1, std::span<const Sge>(&small, 1)}).code(), Code::kInvalidArgument);
  const Sge whole = server_->sge(0, 1024);
  EXPECT_TRUE(srq_->post_recv(RecvWr{2, std::span<const Sge>(&whole, 1)}).ok());
  EXPECT_EQ(srq_->mp_strides(), 16u);
  EXPECT_EQ(srq_->mp_stride_bytes(), 64u);
}

TEST_F(MpSrqTest, BadMultiPacketAttributesAreRejected) {
  Host& h = add_host();
  SrqInitAttr a;
  a.mp_strides = 12;  // not a power of two
  EXPECT_FALSE(h.nic->create_srq(*h.pd, a).ok());
  a.mp_strides = 16;
  a.mp_stride_bytes = 48;
  EXPECT_FALSE(h.nic->create_srq(*h.pd, a).ok());
  a.mp_stride_bytes = 64;
  a.mp_max_message_bytes = 2048;  // more than one buffer
  EXPECT_FALSE(h.nic->create_srq(*h.pd, a).ok());
}

TEST_F(MpSrqTest, WithNoBufferPostedTheMessageIsRnrNakedAndLandsOnceOneIs) {
  build(16, 64, 1);
  send(0, 32, 3);
  ASSERT_TRUE(engine_->run_until([&] { return server_->nic->counters().rnr_naks_sent >= 1; }).ok());
  post_buffer(0, 1024);
  auto wcs = drain(*server_->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].stride_index, 0u);
  EXPECT_TRUE(data_at(0, 1024, 0, 64, 32, 3));
}

// ---- the Ordered Queue's NIC rule, under loss --------------------------------
// Clients send one message at a time and each takes the hardware ACK (its
// send completion) as the commit. Rule 1: every message has its own position,
// and a message sent after another was acknowledged -- by any client -- lands
// after it. Duplicates and retransmissions must not take a second position.

struct Placed {
  uint64_t buffer = 0;
  uint32_t stride = 0;
  bool operator<(const Placed& o) const { return buffer != o.buffer ? buffer < o.buffer : stride < o.stride; }
};

class OrderedQueueNicRule : public MpSrqTest, public ::testing::WithParamInterface<std::tuple<uint64_t, bool>> {
 protected:
  OrderedQueueNicRule() : MpSrqTest(faults()) {
    ferry::testing::print_seed(seed(), std::get<1>(GetParam()) ? "multi-packet 1" : "multi-packet 0");
  }
  static uint64_t seed() { return ferry::testing::seed_from_env().value_or(std::get<0>(GetParam())); }
  static FaultModel faults() {
    FaultModel f;
    f.seed = seed();
    f.drop = 0.03;
    f.duplicate = 0.03;
    f.delay = 0.03;
    f.delay_max_ns = 20'000;
    return f;
  }
};

TEST_P(OrderedQueueNicRule, AMessageSentAfterAnotherWasAcknowledgedLandsAfterIt) {
  const bool mp = std::get<1>(GetParam());
  ConnectOptions o;
  o.timeout = 4;
  o.rnr_retry = 7;
  constexpr int kClients = 4;
  constexpr int kPerClient = 300;
  constexpr uint32_t kBuffer = 4096;
  build(mp ? 64 : 0, 64, kClients, 0, o);
  // Ordinary SRQ: one message per 512-byte buffer.
  const uint32_t buffer_bytes = mp ? kBuffer : 512;
  uint64_t posted = 0;
  auto post = [&] {
    const Sge sge = server_->sge((posted % 512) * buffer_bytes, buffer_bytes);
    ASSERT_TRUE(srq_->post_recv(RecvWr{posted, std::span<const Sge>(&sge, 1)}).ok());
    ++posted;
  };
  for (int i = 0; i < 32; ++i) post();
  Rng rng(seed());
  struct Msg {
    int client = 0;
    int seq = 0;
    uint64_t posted_at = 0;
    uint64_t acked_at = 0;
    Placed where;
    bool landed = false;
  };
  std::vector<Msg> msgs;
  std::vector<int> next(kClients, 0), in_flight(kClients, -1);
  std::map<std::pair<uint64_t, uint32_t>, int> position_owner;
  uint64_t landed = 0, buffers_done = 0;
  bool ok = true;
  auto pump = [&]() -> bool {
    // Server: record where each message landed (its first bytes name it).
    WorkCompletion wcs[32];
    for (uint32_t n; (n = server_->cq->poll(wcs).value()) > 0;) {
      for (uint32_t i = 0; i < n; ++i) {
        const WorkCompletion& wc = wcs[i];
        if (wc.status != WcStatus::kSuccess) {
          ADD_FAILURE() << "receive failed: " << wc_status_name(wc.status);
          ok = false;
          continue;
        }
        if (wc.mp_filler || (!mp) || wc.mp_buffer_done) ++buffers_done;
        if (wc.mp_filler) continue;
        const uint64_t buffer = wc.wr_id;
        const uint8_t* p = server_->at((buffer % 512) * buffer_bytes + static_cast<size_t>(wc.stride_index) * 64);
        int id;
        std::memcpy(&id, p, sizeof id);
        if (id < 0 || id >= static_cast<int>(msgs.size()) || msgs[id].landed) {
          ADD_FAILURE() << "a message landed twice or an unknown one landed (" << id << ")";
          ok = false;
          continue;
        }
        msgs[id].where = Placed{buffer, wc.stride_index};
        msgs[id].landed = true;
        if (!position_owner.emplace(std::make_pair(buffer, wc.stride_index), id).second) {
          ADD_FAILURE() << "two messages at one position";
          ok = false;
        }
        ++landed;
      }
    }
    while (posted < buffers_done + 32) post();
    // Clients: the ACK (send completion) commits; then the next message.
    for (int c = 0; c < kClients; ++c) {
      WorkCompletion wc;
      if (clients_[c]->cq->poll(std::span<WorkCompletion>(&wc, 1)).value() == 1) {
        if (wc.status != WcStatus::kSuccess) {
          ADD_FAILURE() << "send failed: " << wc_status_name(wc.status);
          ok = false;
        }
        msgs[in_flight[c]].acked_at = clock_.now_ns();
        in_flight[c] = -1;
      }
      if (in_flight[c] < 0 && next[c] < kPerClient) {
        const int id = static_cast<int>(msgs.size());
        Msg m;
        m.client = c;
        m.seq = next[c]++;
        m.posted_at = clock_.now_ns();
        msgs.push_back(m);
        uint8_t* p = clients_[c]->at(0);
        std::memcpy(p, &id, sizeof id);
        const uint32_t len = static_cast<uint32_t>(rng.between(sizeof id, 300));
        const Sge sge = clients_[c]->sge(0, len);
        SendWr wr;
        wr.opcode = WrOpcode::kSend;
        wr.flags = kSendSignaled;
        wr.sg_list = std::span<const Sge>(&sge, 1);
        EXPECT_TRUE(client_qps_[c]->post_send(wr).ok());
        in_flight[c] = id;
      }
    }
    bool all_done = landed == static_cast<uint64_t>(kClients * kPerClient);
    for (int c = 0; c < kClients; ++c) all_done &= in_flight[c] < 0 && next[c] == kPerClient;
    return all_done || !ok;
  };
  ASSERT_TRUE(engine_->run_until(pump).ok());
  ASSERT_TRUE(ok);
  // Rule 1: ACK after allocation, allocation in order.
  size_t pairs = 0;
  for (const Msg& a : msgs) {
    for (const Msg& b : msgs) {
      if (b.posted_at > a.acked_at) {
        ++pairs;
        ASSERT_TRUE(a.where < b.where) << "client " << b.client << " message " << b.seq << " was sent after client "
                                       << a.client << " message " << a.seq << " was acknowledged, but landed before it";
      }
    }
  }
  EXPECT_GT(pairs, 100000u);
  EXPECT_GT(engine_->fabric().counters().dropped_fault.get(), 0u);
  EXPECT_GT(server_->nic->counters().rx_duplicates, 0u) << "duplicates arrived and took no position";
}

INSTANTIATE_TEST_SUITE_P(Seeds, OrderedQueueNicRule,
                         ::testing::Combine(::testing::Values(3u, 0x0D0Eu, 20261123u), ::testing::Bool()));

// ---- modeled resource counters ---------------------------------------------------

class ResourceModelTest : public NicTest {
 protected:
  ResourceModelTest() {
    EngineOptions options;
    options.threaded = false;
    options.clock = &clock_;
    engine_ = std::make_unique<Engine>(options);
  }
  Host& host_with(uint32_t qpc_entries) {
    auto host = std::make_unique<Host>();
    NicOptions no;
    no.resource_model.qp_context_entries = qpc_entries;
    host->nic = engine_->add_nic(no).value();
    host->pd = host->nic->alloc_pd().value();
    host->cq = host->nic->create_cq({}).value();
    host->mem = aligned_bytes(1 << 20);
    host->mem_bytes = 1 << 20;
    host->mr = host->nic->reg_mr(*host->pd, host->mem.get(), 1 << 20, kAccessAll).value();
    hosts_.push_back(std::move(host));
    return *hosts_.back();
  }
};

TEST_F(ResourceModelTest, TheQpContextCacheThrashesWhenMoreQpsTakeTurnsThanItHolds) {
  for (const uint32_t entries : {2u, 4u}) {
    Host& server = host_with(entries);
    Host& client = add_host();
    std::vector<QueuePair*> qps;
    for (int i = 0; i < 3; ++i) {
      QueuePair& c = add_qp(client);
      QueuePair& s = add_qp(server);
      connect(c, client, s, server);
      qps.push_back(&c);
    }
    const NicCounters before = server.nic->counters();
    const Sge sge = client.sge(0, 8);
    for (int round = 0; round < 10; ++round) {
      for (QueuePair* q : qps) {
        ASSERT_TRUE(q->post_send(write_wr(0, &sge, server.va(0), server.mr->rkey())).ok());
        run();
      }
    }
    drain(*client.cq);
    const NicCounters after = server.nic->counters();
    const uint64_t lookups = after.modeled_qpc_lookups - before.modeled_qpc_lookups;
    const uint64_t misses = after.modeled_qpc_misses - before.modeled_qpc_misses;
    EXPECT_EQ(lookups, 60u) << "30 WRITEs in, 30 ACKs out";
    if (entries == 2) {
      EXPECT_EQ(misses, 30u) << "three QPs round robin over two entries: every packet in misses";
    } else {
      EXPECT_LE(misses, 3u) << "only the first touch of each QP misses";
    }
  }
}

TEST_F(ResourceModelTest, ReceiveWqeFetchesPerMessage) {
  // List-based SRQ: one DMA per message; multi-packet SRQ: one per buffer;
  // array RQ: one per eight WQEs (rq_prefetch_wqes).
  Host& server = add_host();
  Host& client = add_host();
  SrqInitAttr list;
  list.max_wr = 64;
  SharedReceiveQueue& srq = add_srq(server, list);
  SrqInitAttr mp = list;
  mp.mp_strides = 64;
  SharedReceiveQueue& mpsrq = add_srq(server, mp);
  QpInitAttr on_list, on_mp;
  on_list.srq = &srq;
  on_mp.srq = &mpsrq;
  QpInitAttr plain;
  plain.cap.max_recv_wr = 64;
  QueuePair* clients[3];
  QueuePair* servers[3];
  const QpInitAttr attrs[3] = {on_list, on_mp, plain};
  for (int i = 0; i < 3; ++i) {
    clients[i] = &add_qp(client);
    servers[i] = &add_qp(server, attrs[i]);
    connect(*clients[i], client, *servers[i], server);
  }
  for (uint64_t i = 0; i < 32; ++i) {
    const Sge s = server.sge(i * 64, 64);
    ASSERT_TRUE(srq.post_recv(RecvWr{i, std::span<const Sge>(&s, 1)}).ok());
    ASSERT_TRUE(servers[2]->post_recv(RecvWr{i, std::span<const Sge>(&s, 1)}).ok());
  }
  const Sge big = server.sge(64 * 1024, 4096);
  ASSERT_TRUE(mpsrq.post_recv(RecvWr{99, std::span<const Sge>(&big, 1)}).ok());
  const Sge src = client.sge(0, 32);
  uint64_t dmas[3];
  for (int q = 0; q < 3; ++q) {
    const uint64_t before = server.nic->counters().modeled_recv_wqe_dmas;
    for (int m = 0; m < 32; ++m) {
      SendWr wr;
      wr.opcode = WrOpcode::kSend;
      wr.sg_list = std::span<const Sge>(&src, 1);
      ASSERT_TRUE(clients[q]->post_send(wr).ok());
      run();
    }
    dmas[q] = server.nic->counters().modeled_recv_wqe_dmas - before;
  }
  EXPECT_EQ(dmas[0], 32u) << "list-based SRQ";
  EXPECT_EQ(dmas[1], 1u) << "multi-packet SRQ: 32 messages of 32 B in one 4 KB buffer";
  EXPECT_EQ(dmas[2], 4u) << "array RQ, 8 WQEs per fetch";
}

}  // namespace
}  // namespace ferry::nic::testing
