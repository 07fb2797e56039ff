// The RPC layer's modes, commit signals and ordering rules, on a
// deterministic simulation (manual engine, fake clock, polled workers).
#include "rpc_test_util.h"

namespace ferry::rpc::testing {
namespace {

class ModeTest : public RpcSim, public ::testing::WithParamInterface<std::tuple<Mode, bool>> {};

TEST_P(ModeTest, APutIsVisibleToTheNextGetAndCommitsAsTheModeSays) {
  const auto [mode, mp] = GetParam();
  ServerOptions so;
  so.mode = mode;
  so.multi_packet = mp;
  build(so);
  auto put = call(0, kPut, "k", "v1", /*nilext=*/true);
  ASSERT_TRUE(drive([&] { return put->done; }));
  ASSERT_TRUE(put->status.ok()) << put->status.to_string();
  const Commit expect = mode == Mode::kOrderedQueue   ? Commit::kHardwareAck
                        : mode == Mode::kDeferredExec ? Commit::kSoftwareAck
                                                      : Commit::kReply;
  EXPECT_EQ(put->commit, expect) << commit_name(put->commit);
  auto get = call(0, kGet, "k", "", false);
  ASSERT_TRUE(drive([&] { return get->done; }));
  ASSERT_TRUE(get->status.ok());
  EXPECT_EQ(get->commit, Commit::kReply);
  EXPECT_EQ(get->payload, "v1");
  auto missing = call(0, kGet, "nothing", "", false);
  ASSERT_TRUE(drive([&] { return missing->done; }));
  EXPECT_EQ(missing->app_status, 1) << "the handler's status byte reaches the client";
  // OQ sends no software response for a nilext request; the others do.
  const WorkerCounters c = server_->counters();
  EXPECT_EQ(c.requests, 3u);
  EXPECT_EQ(c.nilext, 1u);
  EXPECT_EQ(c.replies, mode == Mode::kOrderedQueue ? 2u : 3u);
  EXPECT_EQ(c.acks, mode == Mode::kDeferredExec ? 1u : 0u);
  EXPECT_EQ(c.dropped, 0u);
  EXPECT_EQ(client_->session(0).inflight(), 0u) << "every slot came back";
}

INSTANTIATE_TEST_SUITE_P(AllModes, ModeTest,
                         ::testing::Combine(::testing::Values(Mode::kRawRpc, Mode::kDeferredExec, Mode::kOrderedQueue),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(mode_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_MultiPacket" : "_OrdinarySrq");
                         });

using OrderedQueueTest = RpcSim;

TEST_F(OrderedQueueTest, ANilextPutCommitsWithTheWorkerStopped) {
  // The commit is the NIC's ACK: with no worker running at all, the put
  // still commits; the worker executes it only when it runs again.
  build({});
  const uint32_t w = static_cast<uint32_t>(route_of("k") % server_->workers());
  stalled_.insert(w);
  auto put = call(0, kPut, "k", "v", true);
  ASSERT_TRUE(drive([&] { return put->done; }));
  EXPECT_TRUE(put->status.ok());
  EXPECT_EQ(put->commit, Commit::kHardwareAck);
  EXPECT_EQ(server_->counters().requests, 0u) << "committed before any execution";
  EXPECT_TRUE(kv_.parts[w].empty());
  stalled_.clear();
  ASSERT_TRUE(drive([&] { return server_->counters().requests == 1; }));
  EXPECT_EQ(kv_.parts[w]["k"], "v");
}

TEST_F(OrderedQueueTest, AGetRightAfterASetsAckSeesTheSet) {
  // §4's pathological pattern: the get is sent the moment the put's ACK is
  // seen, before the worker executed the put. Rule 1 puts the get behind the
  // put in the SRQ, Rule 2 executes the put first.
  build({});
  const uint32_t w = static_cast<uint32_t>(route_of("hot") % server_->workers());
  for (int i = 0; i < 50; ++i) {
    const std::string value = "v" + std::to_string(i);
    stalled_.insert(w);
    auto put = call(0, kPut, "hot", value, true);
    ASSERT_TRUE(drive([&] { return put->done; }));
    ASSERT_EQ(put->commit, Commit::kHardwareAck);
    auto get = call(0, kGet, "hot", "", false);
    // The get lands too while the worker is still away: its completion and
    // the put's wait in the CQ together, and the worker must take the put
    // first (SRQ order), whatever order it finds them in.
    EXPECT_FALSE(drive([] { return false; }, 1'000'000));
    ASSERT_FALSE(get->done);
    stalled_.clear();
    ASSERT_TRUE(drive([&] { return get->done; }));
    ASSERT_TRUE(get->status.ok());
    EXPECT_EQ(get->payload, value) << "round " << i;
  }
}

TEST_F(OrderedQueueTest, ExecutionFollowsSrqPositionsThroughRepostsAndFillers) {
  ClientOptions co;
  co.sessions = 4;
  ServerOptions so;
  so.buffers = 4;
  so.buffer_bytes = 1024;  // small buffers: many fillers and reposts
  so.max_request_bytes = 256;
  build(so, co);
  std::vector<std::shared_ptr<Outcome>> puts;
  for (int round = 0; round < 200; ++round) {
    for (uint32_t s = 0; s < 4; ++s) {
      // 2- and 3-stride requests: the buffers do not divide evenly.
      const std::string value = "s" + std::to_string(s) + "r" + std::to_string(round) + std::string(((round + s) % 2) * 64 + 40, 'x');
      puts.push_back(call(s, kPut, "key" + std::to_string(round % 7), value, true));
    }
    ASSERT_TRUE(drive([&] {
      for (auto& p : puts) {
        if (!p->done) return false;
      }
      return true;
    }));
  }
  ASSERT_TRUE(drive([&] { return server_->counters().requests == puts.size(); }));
  for (auto& p : puts) ASSERT_TRUE(p->status.ok());
  // Rule 2: every worker executed in strictly increasing SRQ position.
  for (const auto& positions : kv_.executed_positions) {
    for (size_t i = 1; i < positions.size(); ++i) ASSERT_LT(positions[i - 1], positions[i]);
  }
  EXPECT_GT(server_->counters().reposts, 0u);
  EXPECT_GT(server_->counters().fillers, 0u);
}

TEST_F(OrderedQueueTest, WithDelegationOneQpPerWorkerCarriesEverySessionsCalls) {
  ClientOptions co;
  co.sessions = 3;
  co.delegation = true;
  ServerOptions so;
  so.workers = 2;
  build(so, co);
  EXPECT_EQ(client_->queue_pairs(), 2u) << "one QP per server worker for the machine";
  std::vector<std::shared_ptr<Outcome>> calls;
  auto all_done = [&] {
    for (auto& c : calls) {
      if (!c->done) return false;
    }
    return true;
  };
  for (int i = 0; i < 60; ++i) {
    const std::string key = "key" + std::to_string(i);
    calls.push_back(call(i % 3, kPut, key, "v" + std::to_string(i), true));
    calls.push_back(call(i % 3, kGet, key, "", false));
    if (i % 10 == 9) {
      ASSERT_TRUE(drive(all_done));
    }
  }
  for (size_t i = 0; i < calls.size(); i += 2) {
    EXPECT_TRUE(calls[i]->status.ok());
    EXPECT_EQ(calls[i]->commit, Commit::kHardwareAck);
    EXPECT_EQ(calls[i + 1]->payload, "v" + std::to_string(i / 2)) << "get " << i / 2;
  }
  uint64_t delegated = 0, carried = 0;
  for (uint32_t s = 0; s < 3; ++s) {
    delegated += client_->session(s).counters().delegated;
    carried += client_->session(s).counters().carried;
  }
  EXPECT_GT(delegated, 0u);
  EXPECT_EQ(delegated, carried) << "every delegated call was posted by its owner";
}

TEST_F(OrderedQueueTest, WithoutDelegationEverySessionHasAQpPerWorker) {
  ClientOptions co;
  co.sessions = 3;
  ServerOptions so;
  so.workers = 2;
  build(so, co);
  EXPECT_EQ(client_->queue_pairs(), 6u);
}

}  // namespace
}  // namespace ferry::rpc::testing
