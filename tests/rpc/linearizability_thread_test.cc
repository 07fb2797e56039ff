// Linearizability of the RPC layer in every mode, with real threads: client
// threads run put/get/remove mixes on a few hot keys against worker threads
// and the engine thread, with packet loss; the recorded history (invocation
// and commit times) is checked by tests/support/linearizability.
//
// A nilext put committed by the hardware ACK is recorded as complete when
// the ACK was seen: that is the claim OQ makes (a get invoked after it must
// see it). Sized by FERRY_RPC_LIN_OPS (operations per client thread, default
// 150); the full campaign is FERRY_RPC_LIN_OPS=5000.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "ferry/common/rng.h"
#include "linearizability.h"
#include "rpc_test_util.h"
#include "test_seed.h"

namespace ferry::rpc::testing {
namespace {

using ferry::testing::KvOp;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

int ops_per_thread() {
  return static_cast<int>(std::max<uint64_t>(1, ferry::testing::env_u64("FERRY_RPC_LIN_OPS", 150)));
}

struct LinParam {
  Mode mode;
  bool delegation;
  bool multi_packet;
  double drop;
};

class LinearizabilityTest : public ::testing::TestWithParam<LinParam> {};

TEST_P(LinearizabilityTest, HotKeyHistoriesAreLinearizable) {
  const LinParam param = GetParam();
  const uint64_t seed = ferry::testing::test_seed(0x11a7 + static_cast<uint64_t>(param.mode) * 31 +
                                                  param.delegation * 7 + param.multi_packet);
  std::printf("%d ops per client thread (FERRY_RPC_LIN_OPS)\n", ops_per_thread());
  nic::EngineOptions eo;
  eo.faults.drop = param.drop;
  eo.faults.seed = seed;
  nic::Engine engine(eo);
  nic::Nic* server_nic = engine.add_nic({.name = "server"}).value();
  nic::Nic* client_nic = engine.add_nic({.name = "client"}).value();
  ServerOptions so;
  so.mode = param.mode;
  so.workers = 2;
  so.multi_packet = param.multi_packet;
  so.buffers = 8;
  so.buffer_bytes = 2048;
  so.max_request_bytes = 512;
  auto server = Server::create(engine, *server_nic, so).value();
  TinyKv store;
  store.attach(*server);
  ASSERT_TRUE(server->start().ok());
  constexpr uint32_t kThreads = 3;
  ClientOptions co;
  co.sessions = kThreads;
  co.delegation = param.delegation;
  co.connect.timeout = 8;  // ~1 ms before a lost packet is retransmitted
  co.timeout_ns = 30'000'000'000ULL;
  auto client = Client::create(engine, *client_nic, *server, co).value();

  const char* keys[] = {"alpha", "beta", "gamma"};  // alpha and beta share a worker or not: either way
  std::vector<std::vector<KvOp>> histories(kThreads);
  std::atomic<uint32_t> finished{0};
  std::atomic<uint64_t> failures{0};
  const int ops = ops_per_thread();
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Rng rng(seed * 1000 + t);
      Session& s = client->session(t);
      for (int i = 0; i < ops; ++i) {
        const uint64_t key = rng.below(3);
        const uint64_t r = rng.below(10);
        const uint64_t value = (static_cast<uint64_t>(t + 1) << 32) | static_cast<uint64_t>(i);
        const std::string k = keys[key];
        const uint64_t invoke = now_ns();
        if (r < 4) {
          auto res = s.call(kPut, route_of(k), kv(k, std::to_string(value)), true);
          const uint64_t done = now_ns();
          if (!res.ok()) failures.fetch_add(1);
          histories[t].push_back(KvOp::put(t, key, value, invoke, res.ok() ? std::optional<uint64_t>(done) : std::nullopt));
        } else if (r < 5) {
          auto res = s.call(kRemove, route_of(k), kv(k), true);
          const uint64_t done = now_ns();
          if (!res.ok()) failures.fetch_add(1);
          histories[t].push_back(KvOp::remove(t, key, invoke, res.ok() ? std::optional<uint64_t>(done) : std::nullopt));
        } else {
          auto res = s.call(kGet, route_of(k), kv(k), false);
          const uint64_t done = now_ns();
          if (!res.ok()) {
            failures.fetch_add(1);
            continue;  // a get that never answered constrains nothing
          }
          std::optional<uint64_t> got;
          if (res.value().app_status == 0) {
            got = std::stoull(std::string(res.value().payload.begin(), res.value().payload.end()));
          }
          histories[t].push_back(KvOp::get(t, key, got, invoke, done));
        }
      }
      // With delegation this session carries others' calls: keep polling
      // until every thread is done.
      finished.fetch_add(1);
      while (finished.load() < kThreads) {
        if (s.poll() == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0u) << "no call failed (loss is retransmitted)";
  std::vector<KvOp> history;
  for (auto& h : histories) history.insert(history.end(), h.begin(), h.end());
  const auto result = ferry::testing::check_kv_history(history);
  EXPECT_TRUE(result.ok) << ferry::testing::verdict_name(result.verdict) << ": " << result.explanation;
  EXPECT_EQ(history.size(), static_cast<size_t>(kThreads) * ops);
  if (param.drop > 0) {
    EXPECT_GT(engine.fabric().counters().dropped_fault.get(), 0u) << "the loss model dropped packets";
  }
  client.reset();
  server.reset();
}

INSTANTIATE_TEST_SUITE_P(
    Modes, LinearizabilityTest,
    ::testing::Values(LinParam{Mode::kOrderedQueue, false, true, 0.01}, LinParam{Mode::kOrderedQueue, true, true, 0.01},
                      LinParam{Mode::kOrderedQueue, false, false, 0.01}, LinParam{Mode::kDeferredExec, false, true, 0.01},
                      LinParam{Mode::kDeferredExec, true, true, 0.0}, LinParam{Mode::kRawRpc, false, true, 0.01},
                      LinParam{Mode::kRawRpc, true, false, 0.0}),
    [](const auto& info) {
      const LinParam& p = info.param;
      return std::string(mode_name(p.mode)) + (p.delegation ? "_Delegation" : "_PerThreadQps") +
             (p.multi_packet ? "_MultiPacket" : "_OrdinarySrq") + (p.drop > 0 ? "_Loss" : "_NoLoss");
    });

}  // namespace
}  // namespace ferry::rpc::testing
