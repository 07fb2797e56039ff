// The RPC layer under SimRuntime: "threaded" servers whose workers are fibers,
// synchronous calls from client fibers and from inside a handler, a call
// timeout in virtual time, all on one OS thread and a manual engine stepped
// by the scheduler (docs/tailwind-simulation-plan.md, commit 3).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ferry/nic/engine.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"
#include "ferry/sim/runtime.h"

namespace ferry::sim::rpc_fiber {
namespace {

enum : uint16_t {
  kPut = 1,      // nilext: key=value
  kGet = 2,      // key -> value
  kForward = 3,  // server A: a synchronous get on server B, answered with B's reply
  kSlow = 4,     // sleeps the worker's fiber for 2 s of virtual time
};

constexpr uint64_t kSlowNs = 2'000'000'000ULL;

std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string text(std::span<const uint8_t> b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

// key "k" value "v" travels as "k=v".
std::pair<std::string, std::string> split(std::span<const uint8_t> p) {
  const std::string s = text(p);
  const size_t eq = s.find('=');
  if (eq == std::string::npos) return {s, {}};
  return {s.substr(0, eq), s.substr(eq + 1)};
}

// Two servers and a client host on one manual engine, every worker and every
// caller a fiber of one SimRuntime.
class World {
 public:
  World(uint64_t seed, uint64_t client_timeout_ns = 10'000'000'000ULL) : runtime_(clock_, seed) {
    nic::EngineOptions eo;
    eo.threaded = false;
    eo.clock = &clock_;
    engine_ = std::make_unique<nic::Engine>(eo);
    runtime_.set_step_engine([this] { return engine_->step(); });
    runtime_.set_next_deadline([this] {
      const uint64_t d = engine_->next_deadline_ns();
      return d == UINT64_MAX ? 0 : d;
    });
    runtime_.set_trace([this](const std::string& event) { trace_.push_back(event); });
    nic_a_ = engine_->add_nic({.name = "a"}).value();
    nic_b_ = engine_->add_nic({.name = "b"}).value();
    nic_c_ = engine_->add_nic({.name = "c"}).value();
    server_a_ = make_server(*nic_a_);
    server_b_ = make_server(*nic_b_);
    register_store(*server_b_, store_b_);
    register_store(*server_a_, store_a_);
    EXPECT_TRUE(server_a_
                    ->register_handler(kForward, {"forward", false},
                                       [this](const rpc::Request& r, rpc::Reply& out) {
                                         handler_threads_.push_back(std::this_thread::get_id());
                                         // A handler that waits on another server: its worker's
                                         // fiber parks while the rest of the world runs.
                                         auto got = a_to_b_->session(r.worker).call(kGet, 0, r.payload, false);
                                         if (!got.ok()) {
                                           out.set_status(9);
                                           return;
                                         }
                                         out.set_status(got->app_status);
                                         out.append(got->payload);
                                       })
                    .ok());
    EXPECT_TRUE(server_a_
                    ->register_handler(kSlow, {"slow", false},
                                       [this](const rpc::Request&, rpc::Reply&) { runtime_.sleep_for_ns(kSlowNs); })
                    .ok());
    EXPECT_TRUE(server_b_->start().ok());
    EXPECT_TRUE(server_a_->start().ok());
    rpc::ClientOptions co;
    co.runtime = &runtime_;
    co.sessions = 2;  // one per worker of A
    co.connect.timeout = 8;
    a_to_b_ = rpc::Client::create(*engine_, *nic_a_, *server_b_, co).value();
    co.sessions = 3;  // one per client fiber
    co.timeout_ns = client_timeout_ns;
    client_ = rpc::Client::create(*engine_, *nic_c_, *server_a_, co).value();
    co.sessions = 1;
    to_b_ = rpc::Client::create(*engine_, *nic_c_, *server_b_, co).value();
  }

  ~World() {
    server_a_->stop();
    server_b_->stop();
    client_.reset();
    to_b_.reset();
    a_to_b_.reset();
    server_a_.reset();
    server_b_.reset();
  }

  SimRuntime& runtime() { return runtime_; }
  FakeClock& clock() { return clock_; }
  rpc::Session& session(uint32_t i) { return client_->session(i); }  // to A
  rpc::Session& session_to_b() { return to_b_->session(0); }
  const std::vector<std::string>& trace() const { return trace_; }
  const std::vector<std::thread::id>& handler_threads() const { return handler_threads_; }

 private:
  std::unique_ptr<rpc::Server> make_server(nic::Nic& nic) {
    rpc::ServerOptions so;
    so.workers = 2;
    so.threaded = true;  // worker "threads": fibers of the runtime
    so.runtime = &runtime_;
    so.buffers = 8;
    so.buffer_bytes = 4096;
    return rpc::Server::create(*engine_, nic, so).value();
  }

  void register_store(rpc::Server& server, std::map<std::string, std::string>& store) {
    EXPECT_TRUE(server
                    .register_handler(kPut, {"put", true, true},
                                      [this, &store](const rpc::Request& r, rpc::Reply&) {
                                        handler_threads_.push_back(std::this_thread::get_id());
                                        auto [k, v] = split(r.payload);
                                        store[k] = v;
                                      })
                    .ok());
    EXPECT_TRUE(server
                    .register_handler(kGet, {"get", false},
                                      [this, &store](const rpc::Request& r, rpc::Reply& out) {
                                        handler_threads_.push_back(std::this_thread::get_id());
                                        auto it = store.find(text(r.payload));
                                        if (it == store.end()) {
                                          out.set_status(1);
                                          return;
                                        }
                                        out.append(std::span<const uint8_t>(
                                            reinterpret_cast<const uint8_t*>(it->second.data()), it->second.size()));
                                      })
                    .ok());
  }

  FakeClock clock_;
  SimRuntime runtime_;
  std::unique_ptr<nic::Engine> engine_;
  nic::Nic* nic_a_ = nullptr;
  nic::Nic* nic_b_ = nullptr;
  nic::Nic* nic_c_ = nullptr;
  std::unique_ptr<rpc::Server> server_a_;
  std::unique_ptr<rpc::Server> server_b_;
  std::unique_ptr<rpc::Client> a_to_b_;
  std::unique_ptr<rpc::Client> client_;  // host c -> A, one session per client fiber
  std::unique_ptr<rpc::Client> to_b_;    // host c -> B
  std::map<std::string, std::string> store_a_;
  std::map<std::string, std::string> store_b_;
  std::vector<std::string> trace_;
  std::vector<std::thread::id> handler_threads_;
};

// Three client fibers: each puts its keys on A, gets them back, and asks A to
// forward a get of a key B holds (B's store is filled through a put on B).
struct Outcome {
  int failures = 0;
  std::vector<std::string> log;  // what each call returned, in completion order
  uint64_t trace_digest = 0;
  uint64_t end_ns = 0;
};

Outcome run_three_clients(uint64_t seed) {
  World world(seed);
  Outcome out;
  // B holds "b-key" before any client asks A to forward.
  Thread seeder = world.runtime().spawn("seeder", "c", [&] {
    auto r = world.session_to_b().call(kPut, 0, bytes("b-key=bee"), true);
    if (!r.ok()) ++out.failures;
  });
  seeder.join();
  std::vector<Thread> clients;
  for (uint32_t c = 0; c < 3; ++c) {
    clients.push_back(world.runtime().spawn("client-" + std::to_string(c), "c", [&, c] {
      rpc::Session& s = world.session(c);
      for (int i = 0; i < 4; ++i) {
        const std::string key = "k" + std::to_string(c) + "-" + std::to_string(i);
        const std::string value = "v" + std::to_string(i) + "-" + std::to_string(seed % 7);
        auto put = s.call(kPut, c, bytes(key + "=" + value), true);
        if (!put.ok()) {
          ++out.failures;
          continue;
        }
        auto get = s.call(kGet, c, bytes(key), false);
        if (!get.ok() || text(get->payload) != value) ++out.failures;
        out.log.push_back(key + "->" + (get.ok() ? text(get->payload) : get.status().to_string()));
        auto fwd = s.call(kForward, c, bytes("b-key"), false);
        if (!fwd.ok() || fwd->app_status != 0 || text(fwd->payload) != "bee") ++out.failures;
        auto miss = s.call(kForward, c, bytes(key), false);  // A holds it, B does not
        if (!miss.ok() || miss->app_status != 1) ++out.failures;
      }
    }));
  }
  for (Thread& t : clients) t.join();
  out.trace_digest = world.runtime().trace_digest();
  out.end_ns = world.clock().now_ns();
  for (std::thread::id id : world.handler_threads()) {
    if (id != std::this_thread::get_id()) ++out.failures;
  }
  // put, get, 2 forwards on A and 2 gets on B per round, and the seeder's put.
  if (world.handler_threads().size() != 3 * 4 * 6 + 1) ++out.failures;
  return out;
}

TEST(RpcOnFibers, SyncCallsFromFibersAndFromAHandlerCompleteOnOneThread) {
  const Outcome out = run_three_clients(11);
  EXPECT_EQ(out.failures, 0);
  EXPECT_EQ(out.log.size(), 12u);
  EXPECT_GT(out.end_ns, 0u) << "virtual time must move (NIC steps and per-step advances)";
}

TEST(RpcOnFibers, TheSameSeedGivesTheSameScheduleAndAnotherSeedAnother) {
  const Outcome first = run_three_clients(5);
  const Outcome second = run_three_clients(5);
  const Outcome other = run_three_clients(6);
  EXPECT_EQ(first.failures, 0);
  EXPECT_EQ(first.trace_digest, second.trace_digest);
  EXPECT_EQ(first.log, second.log);
  EXPECT_EQ(first.end_ns, second.end_ns);
  EXPECT_NE(first.trace_digest, other.trace_digest) << "the seed must steer the schedule";
}

TEST(RpcOnFibers, AForwardedGetReturnsWhatTheOtherServerHolds) {
  World world(3);
  int failures = 0;
  std::string seen_b;
  std::string seen_a;
  Thread caller = world.runtime().spawn("caller", "c", [&] {
    if (!world.session_to_b().call(kPut, 0, bytes("x=on-b"), true).ok()) ++failures;
    if (!world.session(0).call(kPut, 0, bytes("x=on-a"), true).ok()) ++failures;
    auto fwd = world.session(0).call(kForward, 0, bytes("x"), false);
    auto direct = world.session(0).call(kGet, 0, bytes("x"), false);
    if (!fwd.ok() || !direct.ok()) {
      ++failures;
      return;
    }
    seen_b = std::to_string(fwd->app_status) + ":" + text(fwd->payload);
    seen_a = std::to_string(direct->app_status) + ":" + text(direct->payload);
  });
  caller.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(seen_b, "0:on-b");
  EXPECT_EQ(seen_a, "0:on-a");
}

TEST(RpcOnFibers, ACallTimesOutAtItsVirtualDeadline) {
  constexpr uint64_t kTimeoutNs = 500'000'000ULL;
  World world(9, kTimeoutNs);
  Status status;
  uint64_t waited_ns = 0;
  Thread caller = world.runtime().spawn("caller", "c", [&] {
    const uint64_t start = world.clock().now_ns();
    auto r = world.session(0).call(kSlow, 0, bytes("z"), false);
    waited_ns = world.clock().now_ns() - start;
    status = r.status();
  });
  caller.join();
  EXPECT_EQ(status.code(), Code::kTimedOut) << status.to_string();
  // At its own deadline, not at the end of the slow handler's 2 s sleep.
  EXPECT_GE(waited_ns, kTimeoutNs);
  EXPECT_LT(waited_ns, kTimeoutNs + 1'000'000) << "timed out at " << waited_ns << " ns";
}

}  // namespace
}  // namespace ferry::sim::rpc_fiber
