// An RPC server served through the connection manager (Server::serve) and
// clients that reach it by address and service name (Client::connect), on
// threaded engines: both NICs on one Engine, or each on its own Engine
// attached over UDP on loopback, as two processes would be. Calls must reach
// the worker their route names, a client must learn (or check) the server's
// parameters in the handshake, CM failures must come back with the address,
// and a server that goes away must make calls fail rather than hang.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/nic/engine.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"

namespace ferry::rpc::connect_thread_test {
namespace {

constexpr uint32_t kLoopback = 0x7F000001;
// Bounds a wait for something that must happen: turns a hang into a
// failure, not a timing assertion.
constexpr auto kPatience = std::chrono::seconds(20);
constexpr std::string_view kService = "rpc-test";

enum : uint16_t {
  kEcho = 1,  // not nilext: replies with the executing worker (u32) and the payload
  kNote = 2,  // nilext: records the payload and the worker
};

enum class Attachment { kInProcess, kUdp };

void PrintTo(Attachment a, std::ostream* os) { *os << (a == Attachment::kUdp ? "UDP" : "in-process"); }

std::span<const uint8_t> bytes_of(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

struct Echoed {
  uint32_t worker = UINT32_MAX;
  std::string payload;
};

Echoed parse_echo(std::span<const uint8_t> reply) {
  Echoed e;
  if (reply.size() < 4) return e;
  std::memcpy(&e.worker, reply.data(), 4);
  e.payload.assign(reinterpret_cast<const char*>(reply.data()) + 4, reply.size() - 4);
  return e;
}

bool has(const Status& st, std::string_view text) { return st.message().find(text) != std::string::npos; }

// What the nilext handler executed, written by worker threads.
struct Notes {
  std::mutex mu;
  std::vector<std::pair<uint32_t, std::string>> seen;  // (worker, payload)

  bool contains(uint32_t worker, const std::string& payload) {
    std::lock_guard<std::mutex> lock(mu);
    return std::find(seen.begin(), seen.end(), std::make_pair(worker, payload)) != seen.end();
  }
};

ServerOptions small_server(Mode mode, uint32_t workers) {
  ServerOptions so;
  so.mode = mode;
  so.workers = workers;
  so.buffers = 8;
  so.buffer_bytes = 4096;
  so.max_request_bytes = 1024;
  so.max_response_bytes = 1024;
  return so;
}

// A server host with a CM listener and a client host; the server is served
// as kService once start() returned.
class Hosts {
 public:
  explicit Hosts(Attachment attachment) : attachment_(attachment) {}

  ~Hosts() {
    // Clients before the server they talk to, the server (which unserves)
    // before the listener, every NIC object before its engine.
    clients_.clear();
    server_.reset();
    listener_.reset();
    engines_.clear();
  }

  void start(const ServerOptions& so) {
    nic::EngineOptions eo;
    eo.threaded = true;
    eo.spin_ns = 20'000;
    engines_.push_back(std::make_unique<nic::Engine>(eo));
    if (attachment_ == Attachment::kUdp) engines_.push_back(std::make_unique<nic::Engine>(eo));
    server_nic_ = add_nic(*engines_.front(), "server");
    client_nic_ = add_nic(*engines_.back(), "client");
    ASSERT_NE(server_nic_, nullptr);
    ASSERT_NE(client_nic_, nullptr);
    auto l = cm::Listener::start("127.0.0.1:0");
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    listener_ = std::move(l).value();
    auto s = Server::create(*server_nic_, so);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(s).value();
    ASSERT_TRUE(server_
                    ->register_handler(kEcho, {"echo", false},
                                       [](const Request& r, Reply& out) {
                                         const uint32_t w = r.worker;
                                         out.append({reinterpret_cast<const uint8_t*>(&w), sizeof w});
                                         out.append(r.payload);
                                       })
                    .ok());
    ASSERT_TRUE(server_
                    ->register_handler(kNote, {"note", true},
                                       [this](const Request& r, Reply&) {
                                         std::lock_guard<std::mutex> lock(notes_.mu);
                                         notes_.seen.emplace_back(
                                             r.worker, std::string(reinterpret_cast<const char*>(r.payload.data()),
                                                                   r.payload.size()));
                                       })
                    .ok());
    ASSERT_TRUE(server_->start().ok());
    ASSERT_TRUE(server_->serve(*listener_, kService).ok());
  }

  Result<std::unique_ptr<Client>> connect(const ClientOptions& co, const ServerInfo* expect = nullptr,
                                          std::string_view service = kService) {
    return Client::connect(*client_nic_, listener_->address(), service, co, expect);
  }
  // Connects and keeps the client (destroyed before the server).
  Client* connect_kept(const ClientOptions& co, const ServerInfo* expect = nullptr) {
    auto c = connect(co, expect);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (!c.ok()) return nullptr;
    clients_.push_back(std::move(c).value());
    return clients_.back().get();
  }

  Server& server() { return *server_; }
  void destroy_server() { server_.reset(); }
  nic::Nic& client_nic() { return *client_nic_; }
  std::string address() const { return listener_->address(); }
  Notes& notes() { return notes_; }

 private:
  nic::Nic* add_nic(nic::Engine& engine, const std::string& name) {
    nic::NicOptions no;
    no.name = name;
    no.udp.enabled = attachment_ == Attachment::kUdp;
    no.udp.bind = nic::UdpEndpoint{kLoopback, 0};
    auto n = engine.add_nic(no);
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    return n.ok() ? n.value() : nullptr;
  }

  Attachment attachment_;
  std::vector<std::unique_ptr<nic::Engine>> engines_;
  nic::Nic* server_nic_ = nullptr;
  nic::Nic* client_nic_ = nullptr;
  std::unique_ptr<cm::Listener> listener_;
  Notes notes_;
  std::unique_ptr<Server> server_;
  std::vector<std::unique_ptr<Client>> clients_;
};

class RpcConnectTest : public ::testing::TestWithParam<Attachment> {};

TEST_P(RpcConnectTest, SyncCallsReachTheWorkerTheirRouteNames) {
  Hosts hosts(GetParam());
  ASSERT_NO_FATAL_FAILURE(hosts.start(small_server(Mode::kRawRpc, 3)));
  Client* client = hosts.connect_kept({});
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->queue_pairs(), 3u) << "one session, one QP per worker";
  for (uint64_t route = 0; route < 7; ++route) {
    const std::string payload = "sync-" + std::to_string(route);
    auto r = client->session(0).call(kEcho, route, bytes_of(payload), /*nilext=*/false);
    ASSERT_TRUE(r.ok()) << "route " << route << ": " << r.status().to_string();
    EXPECT_EQ(r->commit, Commit::kReply);
    const Echoed e = parse_echo(r->payload);
    EXPECT_EQ(e.worker, route % 3) << "route " << route;
    EXPECT_EQ(e.payload, payload);
  }
}

TEST_P(RpcConnectTest, AsyncCallsInFlightFromTwoSessionsOnTwoThreadsGetTheirOwnReplies) {
  Hosts hosts(GetParam());
  ASSERT_NO_FATAL_FAILURE(hosts.start(small_server(Mode::kOrderedQueue, 3)));
  constexpr uint32_t kThreads = 2;
  constexpr uint32_t kCalls = 300;
  ClientOptions co;
  co.sessions = kThreads;
  co.max_inflight = 16;
  Client* client = hosts.connect_kept(co);
  ASSERT_NE(client, nullptr);

  struct Outcome {
    uint32_t issued = 0;
    uint32_t done = 0;
    uint32_t wrong = 0;  // a failed call, a reply from the wrong worker or with another call's payload
    uint32_t peak_inflight = 0;
    std::vector<uint32_t> per_worker = std::vector<uint32_t>(3, 0);
    std::string first_error;
  };
  std::vector<Outcome> outcomes(kThreads);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Session& session = client->session(t);
      Outcome& o = outcomes[t];
      const auto deadline = std::chrono::steady_clock::now() + kPatience;
      while (o.done < kCalls && std::chrono::steady_clock::now() < deadline) {
        // Fill every slot before polling: only poll() finishes a call, so
        // max_inflight calls are in flight at once.
        while (o.issued < kCalls) {
          const uint32_t i = o.issued;
          const uint64_t route = 5ull * i + t;  // every residue mod 3
          const std::string payload = "t" + std::to_string(t) + "-" + std::to_string(i);
          Status st =
              session.call_async(kEcho, route, bytes_of(payload), false, [&o, route, payload](const CallResult& r) {
                ++o.done;
                const Echoed e = parse_echo(r.payload);
                if (!r.status.ok() || r.commit != Commit::kReply || e.worker != route % 3 || e.payload != payload) {
                  if (o.wrong++ == 0) {
                    o.first_error = payload + ": " + r.status.to_string() + ", worker " + std::to_string(e.worker) +
                                    ", payload " + e.payload;
                  }
                  return;
                }
                ++o.per_worker[e.worker];
              });
          if (st.code() == Code::kResourceExhausted) break;
          if (!st.ok()) {
            o.first_error = "call_async: " + st.to_string();
            return;
          }
          ++o.issued;
          o.peak_inflight = std::max(o.peak_inflight, session.inflight());
        }
        session.poll();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (uint32_t t = 0; t < kThreads; ++t) {
    const Outcome& o = outcomes[t];
    SCOPED_TRACE("session " + std::to_string(t));
    EXPECT_EQ(o.issued, kCalls) << o.first_error;
    EXPECT_EQ(o.done, kCalls) << "calls never finished; the server dropped " << hosts.server().counters().dropped
                              << " requests or replies";
    EXPECT_EQ(o.wrong, 0u) << o.first_error;
    EXPECT_EQ(o.peak_inflight, co.max_inflight) << "the session never had every slot in flight";
    for (uint32_t w = 0; w < 3; ++w) EXPECT_GT(o.per_worker[w], 0u) << "no reply from worker " << w;
  }
}

TEST_P(RpcConnectTest, ARequestThatOvertakesTheClientsRtuStillGetsItsReply) {
  // Regression: the server's QP is in RTR until the listener has the
  // client's RTU, and a client sends as soon as connect returns. A reply the
  // worker tried to post before the RTU was processed used to be dropped
  // (post_send refused on RTR), and the call never finished. The last link
  // connected (worker 1) is the one whose RTU a first call can overtake.
  Hosts hosts(GetParam());
  ASSERT_NO_FATAL_FAILURE(hosts.start(small_server(Mode::kRawRpc, 2)));
  ClientOptions co;
  co.timeout_ns = 5'000'000'000ULL;  // a dropped reply: kTimedOut instead of the 10 s default
  for (int round = 0; round < 50; ++round) {
    auto client = hosts.connect(co);
    ASSERT_TRUE(client.ok()) << client.status().to_string();
    for (uint64_t route : {1, 0}) {
      auto r = client.value()->session(0).call(kEcho, route, bytes_of("first"), false);
      ASSERT_TRUE(r.ok()) << "round " << round << ", route " << route << ": " << r.status().to_string()
                          << "; the server dropped " << hosts.server().counters().dropped << " replies";
      EXPECT_EQ(parse_echo(r->payload).worker, route);
    }
  }
}

TEST_P(RpcConnectTest, NilextTypesAreLearnedFromTheHandshake) {
  Hosts hosts(GetParam());
  ASSERT_NO_FATAL_FAILURE(hosts.start(small_server(Mode::kOrderedQueue, 2)));
  Client* client = hosts.connect_kept({});  // no expectation: learned from worker 0's handshake
  ASSERT_NE(client, nullptr);
  Session& session = client->session(0);
  const uint64_t route = 3;
  const uint32_t worker = route % 2;
  auto note = session.call(kNote, route, bytes_of("learned"), /*nilext=*/true);
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(note->commit, Commit::kHardwareAck) << commit_name(note->commit);
  // The client knows exactly the server's nilext types: echo is not one.
  Status refused = session.call_async(kEcho, route, bytes_of("x"), /*nilext=*/true, [](const CallResult&) {});
  EXPECT_EQ(refused.code(), Code::kInvalidArgument) << refused.to_string();
  // The worker executes in buffer order: once a later call on the same QP
  // and worker has its reply, the nilext call has executed.
  auto echo = session.call(kEcho, route, bytes_of("after"), false);
  ASSERT_TRUE(echo.ok()) << echo.status().to_string();
  EXPECT_EQ(parse_echo(echo->payload).worker, worker);
  EXPECT_TRUE(hosts.notes().contains(worker, "learned"));
}

TEST_P(RpcConnectTest, AMatchingExpectationConnectsAndWorks) {
  Hosts hosts(GetParam());
  ASSERT_NO_FATAL_FAILURE(hosts.start(small_server(Mode::kOrderedQueue, 2)));
  const ServerInfo expect = hosts.server().info();
  ASSERT_EQ(expect.nilext_types, std::vector<uint16_t>{kNote});
  Client* client = hosts.connect_kept({}, &expect);
  ASSERT_NE(client, nullptr);
  Session& session = client->session(0);
  auto note = session.call(kNote, 0, bytes_of("expected"), true);
  ASSERT_TRUE(note.ok()) << note.status().to_string();
  EXPECT_EQ(note->commit, Commit::kHardwareAck) << commit_name(note->commit);
  auto echo = session.call(kEcho, 0, bytes_of("after"), false);
  ASSERT_TRUE(echo.ok()) << echo.status().to_string();
  EXPECT_EQ(parse_echo(echo->payload).worker, 0u);
  EXPECT_TRUE(hosts.notes().contains(0, "expected"));
}

TEST_P(RpcConnectTest, AnExpectationTheServerDoesNotMeetIsRefusedNamingTheField) {
  Hosts hosts(GetParam());
  ASSERT_NO_FATAL_FAILURE(hosts.start(small_server(Mode::kOrderedQueue, 2)));
  const ServerInfo actual = hosts.server().info();
  struct Case {
    const char* field;
    void (*change)(ServerInfo&);
  };
  const Case cases[] = {
      {"workers", [](ServerInfo& i) { i.workers = 3; }},
      {"workers", [](ServerInfo& i) { i.workers = 1; }},
      {"max_request_bytes", [](ServerInfo& i) { i.max_request_bytes = 512; }},
      {"max_response_bytes", [](ServerInfo& i) { i.max_response_bytes = 2048; }},
      {"mode", [](ServerInfo& i) { i.mode = Mode::kRawRpc; }},
      {"nilext types",
       [](ServerInfo& i) {
         i.nilext_types = {kEcho, kNote};
       }},
  };
  for (const Case& c : cases) {
    ServerInfo expect = actual;
    c.change(expect);
    auto client = hosts.connect({}, &expect);
    ASSERT_FALSE(client.ok()) << c.field;
    EXPECT_EQ(client.status().code(), Code::kFailedPrecondition) << client.status().to_string();
    EXPECT_TRUE(has(client.status(), c.field)) << client.status().to_string();
    EXPECT_TRUE(has(client.status(), hosts.address())) << client.status().to_string();
  }
  ServerInfo fewer = actual;
  fewer.workers = 1;
  auto client = hosts.connect({}, &fewer);
  EXPECT_TRUE(has(client.status(), "workers 2, expected 1")) << client.status().to_string();
}

TEST_P(RpcConnectTest, AnUnknownServiceIsNotFoundAndTheMessageNamesTheAddress) {
  Hosts hosts(GetParam());
  ASSERT_NO_FATAL_FAILURE(hosts.start(small_server(Mode::kRawRpc, 2)));
  const ServerInfo expect = hosts.server().info();
  for (const ServerInfo* e : {static_cast<const ServerInfo*>(nullptr), &expect}) {
    auto client = hosts.connect({}, e, "no-such-service");
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.status().code(), Code::kNotFound) << client.status().to_string();
    EXPECT_TRUE(has(client.status(), hosts.address())) << client.status().to_string();
  }
}

TEST_P(RpcConnectTest, AnAddressWhereNothingListensIsUnavailable) {
  Hosts hosts(GetParam());
  ASSERT_NO_FATAL_FAILURE(hosts.start(small_server(Mode::kRawRpc, 2)));
  // A port bound but not listening: connecting to it is refused, and nobody
  // else can take it while the socket is open.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(kLoopback);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const ServerInfo expect = hosts.server().info();
  for (const ServerInfo* e : {static_cast<const ServerInfo*>(nullptr), &expect}) {
    auto client = Client::connect(hosts.client_nic(), address, kService, {}, e);
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.status().code(), Code::kUnavailable) << client.status().to_string();
    EXPECT_TRUE(has(client.status(), address)) << client.status().to_string();
  }
  ::close(fd);
}

TEST_P(RpcConnectTest, CallsFailWithoutHangingOnceTheServerIsDestroyed) {
  Hosts hosts(GetParam());
  ASSERT_NO_FATAL_FAILURE(hosts.start(small_server(Mode::kOrderedQueue, 2)));
  ClientOptions co;
  co.timeout_ns = 300'000'000;  // a synchronous call gives up after 0.3 s
  co.connect.timeout = 8;       // ~1 ms before a retransmission
  co.connect.retry_cnt = 3;
  Client* client = hosts.connect_kept(co);
  ASSERT_NE(client, nullptr);
  Session& session = client->session(0);
  auto before = session.call(kEcho, 0, bytes_of("alive"), false);
  ASSERT_TRUE(before.ok()) << before.status().to_string();

  hosts.destroy_server();

  auto failed = [](const Status& st) { return st.code() == Code::kUnavailable || st.code() == Code::kTimedOut; };
  for (int round = 0; round < 2; ++round) {
    for (uint64_t route = 0; route < 2; ++route) {
      auto r = session.call(kEcho, route, bytes_of("gone"), false);
      ASSERT_FALSE(r.ok()) << "route " << route << " answered after the server was destroyed";
      EXPECT_TRUE(failed(r.status())) << r.status().to_string();
    }
  }
  // An asynchronous call is refused at once or finishes with an error.
  bool done = false;
  Status result;
  Status st = session.call_async(kEcho, 1, bytes_of("gone"), false, [&](const CallResult& r) {
    done = true;
    result = r.status;
  });
  if (st.ok()) {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (!done && std::chrono::steady_clock::now() < deadline) session.poll();
    ASSERT_TRUE(done) << "an async call to a destroyed server never finished";
    EXPECT_TRUE(failed(result)) << result.to_string();
  } else {
    EXPECT_TRUE(failed(st) || st.code() == Code::kResourceExhausted) << st.to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(Attachments, RpcConnectTest, ::testing::Values(Attachment::kInProcess, Attachment::kUdp),
                         [](const ::testing::TestParamInfo<Attachment>& info) {
                           return info.param == Attachment::kUdp ? std::string("TwoEnginesOverUdp")
                                                                 : std::string("OneEngineInProcess");
                         });

}  // namespace
}  // namespace ferry::rpc::connect_thread_test
