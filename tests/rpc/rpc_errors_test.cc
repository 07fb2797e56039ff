// Bad input and exhausted resources: a clear error to the client or a
// counted drop, never a crash and never a wrong execution.
#include "ferry/rpc/format.h"
#include "rpc_test_util.h"

namespace ferry::rpc::testing {
namespace {

class RpcErrorsTest : public RpcSim {
 protected:
  void SetUp() override {
    ServerOptions so;
    so.mode = Mode::kRawRpc;
    so.workers = 1;
    so.max_request_bytes = 512;
    so.buffer_bytes = 1024;
    so.buffers = 4;
    adjust(so);
    build(so);
    peer_ = std::make_unique<RawPeer>(*client_nic_, *server_, 0);
  }
  void TearDown() override {
    peer_.reset();
    RpcSim::TearDown();
  }
  virtual void adjust(ServerOptions&) {}  // a derived fixture's options
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

// Found by the simulator (ferry sim juneberry: a client crash while a
// partition held its SEND back). The NIC gives a multi-packet message its
// strides when the first packet arrives; a client that dies before the
// rest never completes it, and the worker, executing in buffer order,
// would wait on those strides for good while every later request --
// other clients' -- queues behind. The stall probe finds the dead client
// (its zero-length WRITE is never ACKed), its QP goes to the error state,
// the NIC flushes the partial message and the worker moves past it.
class StallTest : public RpcSim {
 protected:
  void start(uint32_t stall_probe_us) {
    ServerOptions so;
    so.mode = Mode::kOrderedQueue;
    so.workers = 1;
    so.max_request_bytes = 2048;
    so.buffer_bytes = 4096;
    so.buffers = 4;
    so.clock = &clock_;
    so.stall_probe_us = stall_probe_us;
    build(so);
  }
  // A dead client's 1.5 KB SEND of which only the first 256 B packet arrived.
  void dead_client_mid_send() {
    auto dead = std::make_unique<RawPeer>(*client_nic_, *server_, 0, /*path_mtu=*/256);
    const uint32_t qpn = dead->qpn();
    int packets = 0;
    engine_->fabric().set_tap([qpn, &packets](const nic::Packet& p) { return p.src_qpn == qpn && ++packets > 1; });
    dead->send(dead->build(kPut, kRequestNilext, "dead", std::string(1500, 'x')));
    for (int i = 0; i < 50; ++i) engine_->step();
    dead.reset();  // the process dies: its QP is gone
    engine_->fabric().set_tap({});
  }
  // Runs everything, moving the clock on in 100 us steps, for `ms` of fake time.
  bool run_for(uint64_t ms, const std::function<bool()>& cond) {
    for (uint64_t t = 0; t < ms * 10; ++t) {
      clock_.advance_ns(100'000);
      while (engine_->step()) poll_all();
      poll_all();
      if (cond()) return true;
    }
    return false;
  }
};

TEST_F(StallTest, AClientThatDiesInTheMiddleOfAMultiPacketSendDoesNotStallTheWorker) {
  start(/*stall_probe_us=*/10'000);
  dead_client_mid_send();
  auto put = call(0, kPut, "live", "v", /*nilext=*/false);
  EXPECT_TRUE(run_for(2000, [&] { return put->done; })) << "the worker still waits on the dead client's strides";
  EXPECT_TRUE(put->status.ok()) << put->status.to_string();
  EXPECT_GE(server_->counters().stall_probes, 1u);
  // The live client's connection is still fine: the probe only ACKed there.
  auto get = call(0, kGet, "live", "", false);
  ASSERT_TRUE(drive([&] { return get->done; }));
  EXPECT_EQ(get->payload, "v");
}

TEST_F(StallTest, WithoutTheProbeTheWorkerWaitsForever) {
  start(/*stall_probe_us=*/0);
  dead_client_mid_send();
  auto put = call(0, kPut, "live", "v", /*nilext=*/false);
  EXPECT_FALSE(run_for(500, [&] { return put->done; }));
  EXPECT_EQ(server_->counters().stall_probes, 0u);
}

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

// A crash of the host (Server::halt) in the middle of a handler: the handler
// finishes, but nothing leaves the host any more -- not its reply, and no
// later request is executed. (LogKv's crash halts first, then fences the
// log: a worker whose append meets the fence must not tell its client.)
class HaltTest : public RpcErrorsTest {
 protected:
  void adjust(ServerOptions& so) override {
    so.on_execute = [this](const Request& r) {
      if (r.type == kAppend) server_->halt();
    };
  }
};

TEST_F(HaltTest, AHandlerRunningAtTheCrashFinishesButItsReplyNeverLeavesAndNothingRunsAfter) {
  peer_->send(peer_->build(kGet, 0, "k", "", 1));
  ASSERT_TRUE(drive([&] { return peer_->count(nic::WcOpcode::kRecv) == 1; })) << "served before the crash";
  peer_->send(peer_->build(kAppend, 0, "k", "x", 2));
  ASSERT_TRUE(drive([&] { return kv_.appends[0] == 1; }));
  EXPECT_EQ(kv_.parts[0]["k"], "x") << "the handler ran to its end";
  EXPECT_EQ(server_->counters().dropped, 1u) << "its reply was dropped, counted";
  peer_->send(peer_->build(kGet, 0, "k", "", 3));
  EXPECT_FALSE(drive([&] { return peer_->count(nic::WcOpcode::kRecv) > 1; }, 50'000'000))
      << "no reply to the append, and the get after the crash is not answered";
  EXPECT_EQ(server_->counters().requests, 2u) << "nothing executed after the crash";
}

}  // namespace
}  // namespace ferry::rpc::testing
