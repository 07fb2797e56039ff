// Conformance: every verb's data movement and completion (verbs-semantics.md,
// "Requests" and "Completion queues").
#include <numeric>

#include "ferry/nic/wire.h"
#include "nic_test_util.h"

namespace ferry::nic::testing {
namespace {

class VerbsTest : public NicTest {};

void fill_pattern(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}

TEST_F(VerbsTest, WriteCopiesBytesAndCompletesOnlyAtRequester) {
  auto pr = make_pair();
  fill_pattern(pr.a->at(0), 64, 1);
  const Sge sge = pr.a->sge(0, 64);
  ASSERT_TRUE(pr.qa->post_send(write_wr(7, &sge, pr.b->va(128), pr.b->mr->rkey())).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(wcs[0].wr_id, 7u);
  EXPECT_EQ(wcs[0].qp_num, pr.qa->qp_num());
  EXPECT_EQ(std::memcmp(pr.b->at(128), pr.a->at(0), 64), 0);
  EXPECT_TRUE(drain(*pr.b->cq).empty()) << "a plain WRITE produces no responder completion";
}

TEST_F(VerbsTest, MultiPacketWriteIsSegmentedAtPathMtu) {
  ConnectOptions o;
  o.path_mtu = 1024;
  auto pr = make_pair({}, o);
  const uint32_t len = 10 * 1024 + 17;
  fill_pattern(pr.a->at(0), len, 3);
  const uint64_t tx_before = pr.a->nic->counters().tx_packets;
  const Sge sge = pr.a->sge(0, len);
  ASSERT_TRUE(pr.qa->post_send(write_wr(1, &sge, pr.b->va(4096), pr.b->mr->rkey())).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(pr.b->at(4096), pr.a->at(0), len), 0);
  EXPECT_EQ(pr.a->nic->counters().tx_packets - tx_before, 11u);
}

TEST_F(VerbsTest, QpTrafficCountsPacketsHeadersAndPayloadByKind) {
  ConnectOptions o;
  o.path_mtu = 256;
  auto pr = make_pair({}, o);
  const Sge sge = pr.a->sge(0, 1000);  // WRITE: 4 packets, the first with a RETH
  const Sge local = pr.a->sge(4096, 300);  // READ: 1 request, 2 responses
  SendWr read;
  read.wr_id = 2;
  read.opcode = WrOpcode::kRdmaRead;
  read.flags = kSendSignaled;
  read.sg_list = std::span<const Sge>(&local, 1);
  read.remote_addr = pr.b->va(0);
  read.rkey = pr.b->mr->rkey();
  SendWr wrs[2] = {write_wr(1, &sge, pr.b->va(8192), pr.b->mr->rkey()), read};
  ASSERT_TRUE(pr.qa->post_send(wrs).ok());
  ASSERT_EQ(drain(*pr.a->cq).size(), 2u);
  const QpTraffic a = pr.qa->traffic();
  const int write = static_cast<int>(PacketKind::kWrite);
  const int read_req = static_cast<int>(PacketKind::kReadRequest);
  const int read_resp = static_cast<int>(PacketKind::kReadResponse);
  const int ack = static_cast<int>(PacketKind::kAck);
  EXPECT_EQ(a.packets[write], 4u);
  EXPECT_EQ(a.payload_bytes[write], 1000u);
  EXPECT_EQ(a.header_bytes[write], 4 * wire::kBthBytes + wire::kRethBytes);
  EXPECT_EQ(a.packets[read_req], 1u);
  EXPECT_EQ(a.header_bytes[read_req], wire::kBthBytes + wire::kRethBytes);
  EXPECT_EQ(a.total_packets(), 5u) << "the requester sent no responses";
  const QpTraffic b = pr.qb->traffic();
  EXPECT_EQ(b.packets[read_resp], 2u);
  EXPECT_EQ(b.payload_bytes[read_resp], 300u);
  EXPECT_EQ(b.header_bytes[read_resp], 2 * (wire::kBthBytes + wire::kAethBytes)) << "AETH on FIRST and LAST";
  // The WRITE's ACK is a separate packet, or folded into the READ response.
  EXPECT_LE(b.packets[ack], 1u);
  EXPECT_EQ(b.header_bytes[ack], b.packets[ack] * (wire::kBthBytes + wire::kAethBytes));
  EXPECT_EQ(b.total_packets(), 2u + b.packets[ack]) << "the responder sent no requests";
  EXPECT_EQ(b.total_bytes(), b.header_bytes[read_resp] + b.payload_bytes[read_resp] + b.header_bytes[ack]);
}

TEST_F(VerbsTest, ZeroLengthWriteNeedsNoValidRkey) {
  auto pr = make_pair();
  ASSERT_TRUE(pr.qa->post_send(write_wr(1, nullptr, 0, 0xdead)).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(pr.qa->state(), QpState::kRts);
}

TEST_F(VerbsTest, WriteWithImmConsumesRecvAndDeliversImmediate) {
  auto pr = make_pair();
  fill_pattern(pr.a->at(0), 300, 9);
  const Sge recv_sge = pr.b->sge(8192, 64);
  ASSERT_TRUE(pr.qb->post_recv(RecvWr{42, std::span<const Sge>(&recv_sge, 1)}).ok());
  const Sge sge = pr.a->sge(0, 300);
  SendWr wr = write_wr(5, &sge, pr.b->va(0), pr.b->mr->rkey());
  wr.opcode = WrOpcode::kRdmaWriteWithImm;
  wr.imm_data = 0xabcdef01;
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  auto recv = drain(*pr.b->cq);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(recv[0].wr_id, 42u);
  EXPECT_TRUE(recv[0].has_imm);
  EXPECT_EQ(recv[0].imm_data, 0xabcdef01u);
  EXPECT_EQ(recv[0].byte_len, 300u);
  EXPECT_EQ(recv[0].qp_num, pr.qb->qp_num());
  EXPECT_EQ(recv[0].src_qp, pr.qa->qp_num());
  EXPECT_EQ(std::memcmp(pr.b->at(0), pr.a->at(0), 300), 0);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(*pr.b->at(8192 + i), 0) << "no data lands in the RECV buffer";
  auto send = drain(*pr.a->cq);
  ASSERT_EQ(send.size(), 1u);
  EXPECT_EQ(send[0].opcode, WcOpcode::kRdmaWrite);
}

TEST_F(VerbsTest, SendLandsInPostedRecv) {
  auto pr = make_pair();
  fill_pattern(pr.a->at(0), 100, 4);
  const Sge recv_sge = pr.b->sge(1000, 200);
  ASSERT_TRUE(pr.qb->post_recv(RecvWr{11, std::span<const Sge>(&recv_sge, 1)}).ok());
  SendWr wr;
  wr.wr_id = 3;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kSendSignaled;
  const Sge sge = pr.a->sge(0, 100);
  wr.sg_list = std::span<const Sge>(&sge, 1);
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  auto recv = drain(*pr.b->cq);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, WcStatus::kSuccess);
  EXPECT_EQ(recv[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(recv[0].byte_len, 100u);
  EXPECT_FALSE(recv[0].has_imm);
  EXPECT_EQ(std::memcmp(pr.b->at(1000), pr.a->at(0), 100), 0);
  auto send = drain(*pr.a->cq);
  ASSERT_EQ(send.size(), 1u);
  EXPECT_EQ(send[0].opcode, WcOpcode::kSend);
}

TEST_F(VerbsTest, SendWithImmAndSolicitedFlag) {
  auto pr = make_pair();
  const Sge recv_sge = pr.b->sge(0, 16);
  ASSERT_TRUE(pr.qb->post_recv(RecvWr{1, std::span<const Sge>(&recv_sge, 1)}).ok());
  SendWr wr;
  wr.opcode = WrOpcode::kSendWithImm;
  wr.flags = kSendSignaled | kSendSolicited;
  wr.imm_data = 77;
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  auto recv = drain(*pr.b->cq);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_TRUE(recv[0].has_imm);
  EXPECT_EQ(recv[0].imm_data, 77u);
  EXPECT_TRUE(recv[0].solicited);
  EXPECT_EQ(recv[0].byte_len, 0u);
}

TEST_F(VerbsTest, GatherFromSeveralSgesAndScatterIntoSeveral) {
  QpInitAttr attr;
  attr.cap.max_send_sge = 3;
  attr.cap.max_recv_sge = 3;
  ConnectOptions o;
  o.path_mtu = 1024;
  auto pr = make_pair(attr, o);
  fill_pattern(pr.a->at(0), 5000, 1);
  // Gather: 1500 + 2000 + 1500 bytes from scattered places.
  const Sge send_sges[3] = {pr.a->sge(0, 1500), pr.a->sge(10000, 2000), pr.a->sge(20000, 1500)};
  std::memcpy(pr.a->at(10000), pr.a->at(1500), 2000);
  std::memcpy(pr.a->at(20000), pr.a->at(3500), 1500);
  const Sge recv_sges[3] = {pr.b->sge(0, 700), pr.b->sge(8000, 3000), pr.b->sge(16000, 4000)};
  ASSERT_TRUE(pr.qb->post_recv(RecvWr{1, recv_sges}).ok());
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kSendSignaled;
  wr.sg_list = send_sges;
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  auto recv = drain(*pr.b->cq);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].byte_len, 5000u);
  EXPECT_EQ(std::memcmp(pr.b->at(0), pr.a->at(0), 700), 0);
  EXPECT_EQ(std::memcmp(pr.b->at(8000), pr.a->at(700), 3000), 0);
  EXPECT_EQ(std::memcmp(pr.b->at(16000), pr.a->at(3700), 1300), 0);
}

TEST_F(VerbsTest, ReadFetchesRemoteBytesSingleAndMultiPacket) {
  auto pr = make_pair();
  fill_pattern(pr.b->at(0), 20000, 5);
  for (uint32_t len : {64u, 20000u}) {
    std::memset(pr.a->at(100000), 0, 20000);
    const Sge sge = pr.a->sge(100000, len);
    SendWr wr;
    wr.wr_id = len;
    wr.opcode = WrOpcode::kRdmaRead;
    wr.flags = kSendSignaled;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    wr.remote_addr = pr.b->va(0);
    wr.rkey = pr.b->mr->rkey();
    ASSERT_TRUE(pr.qa->post_send(wr).ok());
    auto wcs = drain(*pr.a->cq);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(wcs[0].opcode, WcOpcode::kRdmaRead);
    EXPECT_EQ(wcs[0].byte_len, len);
    EXPECT_EQ(std::memcmp(pr.a->at(100000), pr.b->at(0), len), 0) << "len " << len;
  }
}

TEST_F(VerbsTest, ZeroByteReadCompletesWithoutValidRkey) {
  auto pr = make_pair();
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaRead;
  wr.flags = kSendSignaled;
  wr.remote_addr = 0;
  wr.rkey = 0x12345;
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[0].byte_len, 0u);
}

TEST_F(VerbsTest, CompareAndSwapSwapsOnlyOnMatchAndReturnsOriginal) {
  auto pr = make_pair();
  uint64_t* target = reinterpret_cast<uint64_t*>(pr.b->at(64));
  *target = 5;
  auto cas = [&](uint64_t compare, uint64_t swap) {
    const Sge sge = pr.a->sge(0, 8);
    SendWr wr;
    wr.opcode = WrOpcode::kAtomicCmpAndSwp;
    wr.flags = kSendSignaled;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    wr.remote_addr = pr.b->va(64);
    wr.rkey = pr.b->mr->rkey();
    wr.compare_add = compare;
    wr.swap = swap;
    EXPECT_TRUE(pr.qa->post_send(wr).ok());
    auto wcs = drain(*pr.a->cq);
    EXPECT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].opcode, WcOpcode::kCompSwap);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
    uint64_t original;
    std::memcpy(&original, pr.a->at(0), 8);
    return original;
  };
  EXPECT_EQ(cas(5, 9), 5u);
  EXPECT_EQ(*target, 9u);
  EXPECT_EQ(cas(5, 7), 9u) << "mismatch returns the current value";
  EXPECT_EQ(*target, 9u) << "mismatch leaves the word alone";
}

TEST_F(VerbsTest, FetchAndAddReturnsOriginalAndAdds) {
  auto pr = make_pair();
  uint64_t* target = reinterpret_cast<uint64_t*>(pr.b->at(8));
  *target = 100;
  const Sge sge = pr.a->sge(16, 8);
  SendWr wr;
  wr.opcode = WrOpcode::kAtomicFetchAndAdd;
  wr.flags = kSendSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = pr.b->va(8);
  wr.rkey = pr.b->mr->rkey();
  wr.compare_add = 23;
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kFetchAdd);
  uint64_t original;
  std::memcpy(&original, pr.a->at(16), 8);
  EXPECT_EQ(original, 100u);
  EXPECT_EQ(*target, 123u);
}

TEST_F(VerbsTest, NopCompletesInOrder) {
  auto pr = make_pair();
  const Sge sge = pr.a->sge(0, 8);
  SendWr wrs[3];
  wrs[0] = write_wr(1, &sge, pr.b->va(0), pr.b->mr->rkey());
  wrs[1].wr_id = 2;
  wrs[1].opcode = WrOpcode::kNop;
  wrs[1].flags = kSendSignaled;
  wrs[2] = write_wr(3, &sge, pr.b->va(8), pr.b->mr->rkey());
  ASSERT_TRUE(pr.qa->post_send(wrs).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].opcode, WcOpcode::kNop);
  EXPECT_EQ(wcs[2].wr_id, 3u);
}

TEST_F(VerbsTest, UnsignaledWrsProduceNoCqe) {
  auto pr = make_pair();
  fill_pattern(pr.a->at(0), 32, 2);
  SendWr wrs[4];
  Sge sges[4];
  for (int i = 0; i < 4; ++i) {
    sges[i] = pr.a->sge(i * 8, 8);
    wrs[i] = write_wr(i, &sges[i], pr.b->va(i * 8), pr.b->mr->rkey(), i == 3 ? kSendSignaled : 0);
  }
  ASSERT_TRUE(pr.qa->post_send(wrs).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 3u);
  EXPECT_EQ(std::memcmp(pr.b->at(0), pr.a->at(0), 32), 0) << "unsignaled WRs still execute";
}

TEST_F(VerbsTest, UnsignaledSlotsFreeOnlyWhenALaterSignaledWrCompletes) {
  QpInitAttr attr;
  attr.cap.max_send_wr = 4;
  auto pr = make_pair(attr);
  const Sge sge = pr.a->sge(0, 8);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(pr.qa->post_send(write_wr(i, &sge, pr.b->va(0), pr.b->mr->rkey(), 0)).ok());
  }
  run();
  // All four executed, but none was signaled: their slots are still held.
  Status full = pr.qa->post_send(write_wr(9, &sge, pr.b->va(0), pr.b->mr->rkey()));
  EXPECT_EQ(full.code(), Code::kResourceExhausted);

  // With a signaled WR at the end, the whole batch frees when it completes.
  QpInitAttr attr2;
  attr2.cap.max_send_wr = 4;
  auto pr2 = make_pair(attr2);
  const Sge sge2 = pr2.a->sge(0, 8);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        pr2.qa->post_send(write_wr(i, &sge2, pr2.b->va(0), pr2.b->mr->rkey(), i == 3 ? kSendSignaled : 0)).ok());
  }
  auto wcs = drain(*pr2.a->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(pr2.qa->post_send(write_wr(i, &sge2, pr2.b->va(0), pr2.b->mr->rkey(), 0)).ok());
  }
}

TEST_F(VerbsTest, SqSigAllSignalsEveryWr) {
  QpInitAttr attr;
  attr.sq_sig_all = true;
  auto pr = make_pair(attr);
  const Sge sge = pr.a->sge(0, 8);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pr.qa->post_send(write_wr(i, &sge, pr.b->va(0), pr.b->mr->rkey(), 0)).ok());
  EXPECT_EQ(drain(*pr.a->cq).size(), 3u);
}

TEST_F(VerbsTest, InlineDataIsCopiedAtPostTime) {
  QpInitAttr attr;
  attr.cap.max_inline_data = 128;
  auto pr = make_pair(attr);
  uint8_t stack_buffer[100];
  fill_pattern(stack_buffer, sizeof(stack_buffer), 6);
  uint8_t expected[100];
  std::memcpy(expected, stack_buffer, sizeof(expected));
  const Sge sge{reinterpret_cast<uint64_t>(stack_buffer), sizeof(stack_buffer), 0};  // no lkey needed
  SendWr wr = write_wr(1, &sge, pr.b->va(0), pr.b->mr->rkey(), kSendSignaled | kSendInline);
  ASSERT_TRUE(pr.qa->post_send(wr).ok());
  std::memset(stack_buffer, 0xEE, sizeof(stack_buffer));  // reuse before the NIC ran
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(pr.b->at(0), expected, 100), 0);
}

TEST_F(VerbsTest, InlineLargerThanCapabilityIsRejectedAtPost) {
  QpInitAttr attr;
  attr.cap.max_inline_data = 32;
  auto pr = make_pair(attr);
  uint8_t buf[64] = {};
  const Sge sge{reinterpret_cast<uint64_t>(buf), sizeof(buf), 0};
  Status s = pr.qa->post_send(write_wr(1, &sge, pr.b->va(0), pr.b->mr->rkey(), kSendSignaled | kSendInline));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
}

TEST_F(VerbsTest, TooManySgesRejectedAtPost) {
  auto pr = make_pair();  // max_send_sge = 1
  const Sge sges[2] = {pr.a->sge(0, 8), pr.a->sge(8, 8)};
  SendWr wr = write_wr(1, sges, pr.b->va(0), pr.b->mr->rkey());
  wr.sg_list = sges;
  EXPECT_EQ(pr.qa->post_send(wr).code(), Code::kInvalidArgument);
}

TEST_F(VerbsTest, FenceDelaysAWriteUntilAnEarlierReadCompleted) {
  // READ remote->local L, then WRITE local L->remote R2. Without a fence the
  // WRITE may leave before the READ's data arrived; with it, it carries them.
  for (bool fence : {false, true}) {
    auto pr = make_pair();
    fill_pattern(pr.b->at(0), 64, 50);
    std::memset(pr.a->at(0), 0x11, 64);
    const Sge local = pr.a->sge(0, 64);
    SendWr read;
    read.opcode = WrOpcode::kRdmaRead;
    read.flags = kSendSignaled;
    read.sg_list = std::span<const Sge>(&local, 1);
    read.remote_addr = pr.b->va(0);
    read.rkey = pr.b->mr->rkey();
    SendWr write = write_wr(2, &local, pr.b->va(4096), pr.b->mr->rkey(),
                            static_cast<uint8_t>(kSendSignaled | (fence ? kSendFence : 0)));
    SendWr wrs[2] = {read, write};
    ASSERT_TRUE(pr.qa->post_send(wrs).ok());
    ASSERT_EQ(drain(*pr.a->cq).size(), 2u);
    const bool carried_read_data = std::memcmp(pr.b->at(4096), pr.b->at(0), 64) == 0;
    if (fence) {
      EXPECT_TRUE(carried_read_data) << "a fenced WRITE starts only after the READ completed";
    } else {
      EXPECT_FALSE(carried_read_data) << "without a fence the WRITE is not held back (the model pipelines)";
    }
  }
}

TEST_F(VerbsTest, CompletionChannelRaisesOneEventPerArm) {
  Host& a = add_host();
  Host& b = add_host();
  auto channel = b.nic->create_comp_channel().value();
  CqInitAttr cq_attr;
  cq_attr.channel = channel.get();
  CompletionQueue& recv_cq = add_cq(b, cq_attr);
  QueuePair& qa = add_qp(a);
  QpInitAttr battr;
  battr.recv_cq = &recv_cq;
  QueuePair& qb = add_qp(b, battr);
  connect(qa, a, qb, b);
  const Sge rs = b.sge(0, 64);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(qb.post_recv(RecvWr{static_cast<uint64_t>(i), std::span<const Sge>(&rs, 1)}).ok());
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  ASSERT_TRUE(recv_cq.req_notify(false).ok());
  ASSERT_TRUE(qa.post_send(wr).ok());
  run();
  auto ev = channel->get_event(0);
  ASSERT_TRUE(ev.ok()) << ev.status().to_string();
  EXPECT_EQ(ev.value(), &recv_cq);
  // Not re-armed: the next completion raises nothing.
  ASSERT_TRUE(qa.post_send(wr).ok());
  run();
  EXPECT_EQ(channel->get_event(0).status().code(), Code::kTimedOut);
  EXPECT_EQ(drain(recv_cq).size(), 2u);
}

TEST_F(VerbsTest, SolicitedOnlyArmIgnoresUnsolicitedCompletions) {
  Host& a = add_host();
  Host& b = add_host();
  auto channel = b.nic->create_comp_channel().value();
  CqInitAttr cq_attr;
  cq_attr.channel = channel.get();
  CompletionQueue& recv_cq = add_cq(b, cq_attr);
  QueuePair& qa = add_qp(a);
  QpInitAttr battr;
  battr.recv_cq = &recv_cq;
  QueuePair& qb = add_qp(b, battr);
  connect(qa, a, qb, b);
  const Sge rs = b.sge(0, 64);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(qb.post_recv(RecvWr{static_cast<uint64_t>(i), std::span<const Sge>(&rs, 1)}).ok());
  ASSERT_TRUE(recv_cq.req_notify(true).ok());
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  ASSERT_TRUE(qa.post_send(wr).ok());
  run();
  EXPECT_EQ(channel->get_event(0).status().code(), Code::kTimedOut);
  wr.flags = kSendSolicited;
  ASSERT_TRUE(qa.post_send(wr).ok());
  run();
  EXPECT_TRUE(channel->get_event(0).ok());
}

TEST_F(VerbsTest, CountOnlyCqCountsButCannotBePolled) {
  Host& a = add_host();
  Host& b = add_host();
  CqInitAttr cq_attr;
  cq_attr.count_only = true;
  CompletionQueue& counting = add_cq(a, cq_attr);
  QpInitAttr attr;
  attr.send_cq = &counting;
  attr.sq_sig_all = true;
  QueuePair& qa = add_qp(a, attr);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  const Sge sge = a.sge(0, 8);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(qa.post_send(write_wr(i, &sge, b.va(0), b.mr->rkey(), 0)).ok());
    if (i % 64 == 63) run();
  }
  run();
  EXPECT_EQ(counting.completions_total(), 1000u) << "count-only CQs never overrun";
  WorkCompletion wc;
  EXPECT_EQ(counting.poll(std::span<WorkCompletion>(&wc, 1)).status().code(), Code::kInvalidArgument);
}

TEST_F(VerbsTest, CqOverrunPutsCqAndItsQpsInError) {
  Host& a = add_host(1 << 20, kAccessAll, 2);  // CQ of 2 entries
  Host& b = add_host();
  QueuePair& qa = add_qp(a);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  const Sge sge = a.sge(0, 8);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(qa.post_send(write_wr(i, &sge, b.va(0), b.mr->rkey())).ok());
  run();
  WorkCompletion wc[4];
  auto n = a.cq->poll(wc);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value(), 2u);
  EXPECT_EQ(a.cq->poll(wc).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(qa.state(), QpState::kError);
  bool saw_cq_error = false;
  while (auto ev = a.nic->poll_async_event()) saw_cq_error |= ev->type == AsyncEventType::kCqError;
  EXPECT_TRUE(saw_cq_error);
}

TEST_F(VerbsTest, LoopbackQpCopiesAndAtomicsOnOneNic) {
  Host& h = add_host();
  QueuePair& q1 = add_qp(h);
  QueuePair& q2 = add_qp(h);
  connect(q1, h, q2, h);
  fill_pattern(h.at(0), 512, 8);
  const Sge sge = h.sge(0, 512);
  ASSERT_TRUE(q1.post_send(write_wr(1, &sge, h.va(65536), h.mr->rkey())).ok());
  *reinterpret_cast<uint64_t*>(h.at(4096)) = 1;
  const Sge res = h.sge(8192, 8);
  SendWr cas;
  cas.opcode = WrOpcode::kAtomicCmpAndSwp;
  cas.flags = kSendSignaled;
  cas.sg_list = std::span<const Sge>(&res, 1);
  cas.remote_addr = h.va(4096);
  cas.rkey = h.mr->rkey();
  cas.compare_add = 1;
  cas.swap = 2;
  ASSERT_TRUE(q1.post_send(cas).ok());
  auto wcs = drain(*h.cq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(std::memcmp(h.at(65536), h.at(0), 512), 0);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(h.at(4096)), 2u);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(h.at(8192)), 1u);
}

TEST_F(VerbsTest, PsnWrapsAroundTwoToThe24) {
  ConnectOptions o;
  o.a_psn = 0xFFFFF0;
  o.path_mtu = 256;
  auto pr = make_pair({}, o);
  const Sge rs = pr.b->sge(0, 600);
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(pr.qb->post_recv(RecvWr{static_cast<uint64_t>(i), std::span<const Sge>(&rs, 1)}).ok());
  }
  for (int i = 0; i < 40; ++i) {
    *reinterpret_cast<uint32_t*>(pr.a->at(i * 1024)) = static_cast<uint32_t>(i);
    const Sge sge = pr.a->sge(i * 1024, 600);  // 3 packets each: crosses 2^24 early
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = WrOpcode::kSend;
    wr.flags = kSendSignaled;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    ASSERT_TRUE(pr.qa->post_send(wr).ok());
  }
  auto sends = drain(*pr.a->cq);
  ASSERT_EQ(sends.size(), 40u);
  for (auto& wc : sends) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(drain(*pr.b->cq).size(), 40u);
}

TEST_F(VerbsTest, CompletionsAppearInPostingOrderAcrossOpcodes) {
  auto pr = make_pair();
  const Sge rs = pr.b->sge(0, 64);
  ASSERT_TRUE(pr.qb->post_recv(RecvWr{1, std::span<const Sge>(&rs, 1)}).ok());
  const Sge s8 = pr.a->sge(0, 8);
  const Sge big = pr.a->sge(4096, 40000);
  SendWr wrs[5];
  wrs[0] = write_wr(10, &big, pr.b->va(100000), pr.b->mr->rkey());
  wrs[1].wr_id = 11;
  wrs[1].opcode = WrOpcode::kRdmaRead;
  wrs[1].flags = kSendSignaled;
  wrs[1].sg_list = std::span<const Sge>(&s8, 1);
  wrs[1].remote_addr = pr.b->va(0);
  wrs[1].rkey = pr.b->mr->rkey();
  wrs[2] = write_wr(12, &s8, pr.b->va(8), pr.b->mr->rkey());
  wrs[3].wr_id = 13;
  wrs[3].opcode = WrOpcode::kAtomicFetchAndAdd;
  wrs[3].flags = kSendSignaled;
  wrs[3].sg_list = std::span<const Sge>(&s8, 1);
  wrs[3].remote_addr = pr.b->va(16);
  wrs[3].rkey = pr.b->mr->rkey();
  wrs[4].wr_id = 14;
  wrs[4].opcode = WrOpcode::kSend;
  wrs[4].flags = kSendSignaled;
  ASSERT_TRUE(pr.qa->post_send(wrs).ok());
  auto wcs = drain(*pr.a->cq);
  ASSERT_EQ(wcs.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 10u + i);
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess);
  }
}

}  // namespace
}  // namespace ferry::nic::testing
