// Bad input and exhausted resources: a clear error to the client or a
// counted drop, never a crash and never a wrong execution.
#include "ferry/rpc/format.h"
#include "rpc_test_util.h"

namespace ferry::rpc::testing {
namespace {

// A raw client QP connected to a worker, for sending crafted bytes.
class RawPeer {
 public:
  RawPeer(nic::Nic& nic, Server& server, uint32_t worker) {
    pd_ = nic.alloc_pd().value();
    cq_ = nic.create_cq({}).value();
    mem_.assign(64 << 10, 0);
    mr_ = nic.reg_mr(*pd_, mem_.data(), mem_.size(), nic::kAccessLocalWrite).value();
    nic::QpInitAttr a;
    a.send_cq = a.recv_cq = cq_.get();
    qp_ = nic.create_qp(*pd_, a).value();
    nic::ConnectOptions o;
    o.timeout = 8;
    EXPECT_TRUE(server.connect(worker, *qp_, nic, o).ok());
    for (uint32_t i = 0; i < 8; ++i) {
      const nic::Sge sge = mr_->sge(32768 + i * 4096, 4096);
      EXPECT_TRUE(qp_->post_recv(nic::RecvWr{100 + i, std::span<const nic::Sge>(&sge, 1)}).ok());
    }
  }
  // A well-formed request in the send area; returns its size.
  uint32_t build(uint16_t type, uint8_t flags, std::string_view key, std::string_view value, uint64_t id = 7) {
    const auto p = kv(key, value);
    std::memcpy(mem_.data() + kRequestHeaderBytes, p.data(), p.size());
    return seal_request(std::span<uint8_t>(mem_.data(), 32768), type, flags, id, 0, static_cast<uint32_t>(p.size()));
  }
  uint8_t* bytes() { return mem_.data(); }
  void send(uint32_t len) {
    const nic::Sge sge = mr_->sge(0, len);
    nic::SendWr wr;
    wr.opcode = nic::WrOpcode::kSend;
    wr.flags = nic::kSendSignaled;
    wr.sg_list = std::span<const nic::Sge>(&sge, 1);
    EXPECT_TRUE(qp_->post_send(wr).ok());
  }
  // Completions so far (sends and receives).
  std::vector<nic::WorkCompletion> completions() {
    nic::WorkCompletion wcs[16];
    auto n = cq_->poll(std::span<nic::WorkCompletion>(wcs, 16));
    for (uint32_t i = 0; n.ok() && i < n.value(); ++i) seen_.push_back(wcs[i]);
    return seen_;
  }
  size_t count(nic::WcOpcode op) {
    size_t k = 0;
    for (const auto& wc : completions()) k += wc.opcode == op;
    return k;
  }
  ResponseView response(size_t i) {
    size_t k = 0;
    for (const auto& wc : completions()) {
      if (wc.opcode != nic::WcOpcode::kRecv) continue;
      if (k++ == i) {
        ResponseView v;
        EXPECT_TRUE(parse_response(std::span<const uint8_t>(mem_.data() + 32768 + (wc.wr_id - 100) * 4096, wc.byte_len), &v));
        return v;
      }
    }
    ADD_FAILURE() << "no response " << i;
    return {};
  }

 private:
  std::unique_ptr<nic::ProtectionDomain> pd_;
  std::unique_ptr<nic::CompletionQueue> cq_;
  std::vector<uint8_t> mem_;
  std::unique_ptr<nic::MemoryRegion> mr_;
  std::unique_ptr<nic::QueuePair> qp_;
  std::vector<nic::WorkCompletion> seen_;
};

class RpcErrorsTest : public RpcSim {
 protected:
  void SetUp() override {
    ServerOptions so;
    so.mode = Mode::kRawRpc;
    so.workers = 1;
    so.max_request_bytes = 512;
    so.buffer_bytes = 1024;
    so.buffers = 4;
    build(so);
    peer_ = std::make_unique<RawPeer>(*client_nic_, *server_, 0);
  }
  void TearDown() override {
    peer_.reset();
    RpcSim::TearDown();
  }
  std::unique_ptr<RawPeer> peer_;
};

TEST_F(RpcErrorsTest, AWrongChecksumIsDroppedAndCountedAndTheQpStaysUsable) {
  uint32_t n = peer_->build(kPut, 0, "k", "v");
  peer_->bytes()[n - 1] ^= 1;  // one payload bit
  peer_->send(n);
  ASSERT_TRUE(drive([&] { return server_->counters().dropped == 1; }));
  EXPECT_EQ(server_->counters().requests, 0u);
  EXPECT_TRUE(kv_.parts[0].empty()) << "nothing executed";
  n = peer_->build(kGet, 0, "k", "");
  peer_->send(n);
  ASSERT_TRUE(drive([&] { return peer_->count(nic::WcOpcode::kRecv) == 1; }));
  EXPECT_EQ(peer_->response(0).kind, ResponseKind::kReply);
  EXPECT_EQ(peer_->response(0).status, 1) << "absent: the corrupted put never ran";
}

TEST_F(RpcErrorsTest, TruncatedAndInconsistentRequestsAreDropped) {
  uint32_t n = peer_->build(kPut, 0, "k", "v");
  peer_->send(10);  // shorter than a header
  peer_->send(n - 1);  // its size field says one byte more than arrived
  RequestHeader h;
  n = peer_->build(kPut, 0, "k", "v");
  std::memcpy(&h, peer_->bytes(), sizeof(h));
  h.version = 9;
  std::memcpy(peer_->bytes(), &h, sizeof(h));
  peer_->send(n);
  ASSERT_TRUE(drive([&] { return server_->counters().dropped == 3; }));
  EXPECT_EQ(server_->counters().requests, 0u);
  EXPECT_EQ(peer_->count(nic::WcOpcode::kRecv), 0u) << "nothing in them can be trusted, not even the request id";
}

TEST_F(RpcErrorsTest, AnUnknownTypeGetsAnErrorReply) {
  auto o = call(0, 99, "k", "", false);
  ASSERT_TRUE(drive([&] { return o->done; }));
  EXPECT_EQ(o->status.code(), Code::kNotFound) << o->status.to_string();
  EXPECT_EQ(server_->counters().errors, 1u);
}

TEST_F(RpcErrorsTest, ANilextRequestOfANonNilextTypeIsRefusedNotExecuted) {
  // The client library refuses it locally...
  EXPECT_EQ(client_->session(0).call_async(kAppend, 0, kv("k", "x"), true, [](const CallResult&) {}).code(),
            Code::kInvalidArgument);
  // ... and a client that sends it anyway gets an error and no execution.
  const uint32_t n = peer_->build(kAppend, kRequestNilext, "k", "x");
  peer_->send(n);
  ASSERT_TRUE(drive([&] { return peer_->count(nic::WcOpcode::kRecv) == 1; }));
  EXPECT_EQ(peer_->response(0).kind, ResponseKind::kError);
  EXPECT_EQ(peer_->response(0).status, static_cast<uint8_t>(RpcError::kNotNilext));
  EXPECT_EQ(kv_.appends[0], 0u);
}

TEST_F(RpcErrorsTest, APayloadTooLargeForTheServerIsRefusedLocally) {
  const std::string big(600, 'x');
  EXPECT_EQ(client_->session(0).call_async(kPut, 0, kv("k", big), true, [](const CallResult&) {}).code(),
            Code::kInvalidArgument);
}

TEST_F(RpcErrorsTest, AnOversizedRequestIsDroppedAndOneLargerThanABufferFailsOnlyItsConnection) {
  // 600 B: fits a 1 KiB buffer but not max_request_bytes (512).
  uint32_t n = peer_->build(kPut, 0, "k", std::string(600, 'y'));
  peer_->send(n);
  ASSERT_TRUE(drive([&] { return server_->counters().dropped == 1; }));
  // 2000 B: larger than any buffer: the NIC fails it (LOC_LEN_ERR) and the
  // connection with it; nothing lands past the buffer.
  n = peer_->build(kPut, 0, "k", std::string(2000, 'z'));
  peer_->send(n);
  ASSERT_TRUE(drive([&] {
    for (const auto& wc : peer_->completions()) {
      if (wc.opcode == nic::WcOpcode::kSend && wc.status != nic::WcStatus::kSuccess) return true;
    }
    return false;
  }));
  ASSERT_TRUE(drive([&] { return server_->counters().recv_errors == 1; }));
  // Other clients carry on.
  auto put = call(0, kPut, "k2", "ok", true);
  auto get = call(0, kGet, "k2", "", false);
  ASSERT_TRUE(drive([&] { return put->done && get->done; }));
  EXPECT_EQ(get->payload, "ok");
}

TEST_F(RpcErrorsTest, AReplyLargerThanMaxResponseBytesIsAnErrorNotAnOverflow) {
  TearDown();
  ServerOptions so;
  so.mode = Mode::kRawRpc;
  so.workers = 1;
  so.max_response_bytes = 64;
  build(so);
  auto put = call(0, kPut, "k", std::string(100, 'v'), true);
  auto get = call(0, kGet, "k", "", false);
  ASSERT_TRUE(drive([&] { return put->done && get->done; }));
  EXPECT_TRUE(put->status.ok());
  EXPECT_EQ(get->status.code(), Code::kResourceExhausted) << get->status.to_string();
}

class RnrTest : public RpcSim {};

TEST_F(RnrTest, AFullSrqHoldsSendersBackUntilTheWorkerCatchesUp) {
  ServerOptions so;
  so.workers = 1;
  so.buffers = 2;
  so.buffer_bytes = 256;  // 4 strides: 2-stride requests, 2 per buffer
  so.max_request_bytes = 128;
  build(so);
  stalled_.insert(0);
  std::vector<std::shared_ptr<Outcome>> puts;
  for (int i = 0; i < 12; ++i) puts.push_back(call(0, kPut, "k" + std::to_string(i), std::string(60, 'a' + i), true));
  ASSERT_TRUE(drive([&] { return server_nic_->counters().rnr_naks_sent > 0; }));
  size_t committed = 0;
  for (auto& p : puts) committed += p->done;
  EXPECT_LE(committed, 4u) << "only what the two posted buffers hold";
  stalled_.clear();
  ASSERT_TRUE(drive([&] {
    for (auto& p : puts) {
      if (!p->done) return false;
    }
    return server_->counters().requests == puts.size();
  }));
  for (auto& p : puts) EXPECT_TRUE(p->status.ok());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(kv_.parts[0]["k" + std::to_string(i)], std::string(60, 'a' + i));
}

TEST_F(RnrTest, WithFiniteRnrRetriesTheCallFailsWithAClearErrorAndTheConnectionIsMarked) {
  ServerOptions so;
  so.workers = 1;
  so.buffers = 1;
  so.buffer_bytes = 128;
  so.max_request_bytes = 128;
  ClientOptions co;
  co.connect.rnr_retry = 1;
  build(so, co);
  stalled_.insert(0);
  std::vector<std::shared_ptr<Outcome>> puts;
  for (int i = 0; i < 4; ++i) puts.push_back(call(0, kPut, "k" + std::to_string(i), std::string(60, 'x'), true));
  ASSERT_TRUE(drive([&] {
    for (auto& p : puts) {
      if (!p->done) return false;
    }
    return true;
  }));
  size_t rnr = 0, flushed = 0;
  for (auto& p : puts) {
    if (p->status.ok()) continue;
    EXPECT_EQ(p->status.code(), Code::kUnavailable);
    rnr += p->status.message().find("RNR_RETRY_EXC_ERR") != std::string::npos;
    flushed += p->status.message().find("WR_FLUSH_ERR") != std::string::npos;
  }
  EXPECT_EQ(rnr, 1u) << "the first call the SRQ could not take says why";
  EXPECT_GT(flushed, 0u) << "the calls behind it were flushed with the QP";
  const Status again = client_->session(0).call_async(kGet, route_of("k0"), kv("k0"), false, [](const CallResult&) {});
  EXPECT_EQ(again.code(), Code::kUnavailable) << "the connection is known to have failed";
}

}  // namespace
}  // namespace ferry::rpc::testing
