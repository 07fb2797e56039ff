// Test fixtures for the RPC layer: a tiny partitioned key-value service
// (put is nilext; get, append and cas are not), and a deterministic
// simulation of a server and one client machine on a manual engine with a
// fake clock, driven by poll loops instead of threads.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/format.h"
#include "ferry/rpc/server.h"

namespace ferry::rpc::testing {

enum : uint16_t {
  kPut = 1,     // nilext: key, value -> nothing
  kGet = 2,     // key -> value (status 1: absent)
  kAppend = 3,  // not idempotent: key, suffix -> the new value
  kRemove = 4,  // nilext: key -> nothing
  kSlow = 5,    // not nilext: spins the worker for the payload's u32 microseconds of fake work
};

// payload = u16 key length, key, value
inline std::vector<uint8_t> kv(std::string_view key, std::string_view value = {}) {
  std::vector<uint8_t> p(2 + key.size() + value.size());
  const uint16_t n = static_cast<uint16_t>(key.size());
  std::memcpy(p.data(), &n, 2);
  if (!key.empty()) std::memcpy(p.data() + 2, key.data(), key.size());
  if (!value.empty()) std::memcpy(p.data() + 2 + key.size(), value.data(), value.size());
  return p;
}

inline std::pair<std::string, std::string> parse_kv(std::span<const uint8_t> p) {
  uint16_t n = 0;
  if (p.size() < 2) return {};
  std::memcpy(&n, p.data(), 2);
  if (2u + n > p.size()) return {};
  return {std::string(reinterpret_cast<const char*>(p.data() + 2), n),
          std::string(reinterpret_cast<const char*>(p.data() + 2 + n), p.size() - 2 - n)};
}

inline uint64_t route_of(std::string_view key) { return std::hash<std::string_view>{}(key); }

// One map per worker (a partition): only that worker's thread touches it.
struct TinyKv {
  std::vector<std::map<std::string, std::string>> parts;
  std::vector<std::vector<uint64_t>> executed_positions;  // per worker, in execution order
  std::vector<uint64_t> appends;  // executions of kAppend per worker

  void attach(Server& server) {
    parts.assign(server.workers(), {});
    executed_positions.assign(server.workers(), {});
    appends.assign(server.workers(), 0);
    auto note = [this](const Request& r) { executed_positions[r.worker].push_back(r.position); };
    ASSERT_TRUE(server
                    .register_handler(kPut, {"put", true, /*replay_safe=*/true},
                                      [this, note](const Request& r, Reply&) {
                                        note(r);
                                        auto [k, v] = parse_kv(r.payload);
                                        parts[r.worker][k] = v;
                                      })
                    .ok());
    ASSERT_TRUE(server
                    .register_handler(kRemove, {"remove", true, /*replay_safe=*/true},
                                      [this, note](const Request& r, Reply&) {
                                        note(r);
                                        parts[r.worker].erase(parse_kv(r.payload).first);
                                      })
                    .ok());
    ASSERT_TRUE(server
                    .register_handler(kGet, {"get", false},
                                      [this, note](const Request& r, Reply& out) {
                                        note(r);
                                        auto it = parts[r.worker].find(parse_kv(r.payload).first);
                                        if (it == parts[r.worker].end()) {
                                          out.set_status(1);
                                          return;
                                        }
                                        out.append(std::span<const uint8_t>(
                                            reinterpret_cast<const uint8_t*>(it->second.data()), it->second.size()));
                                      })
                    .ok());
    ASSERT_TRUE(server
                    .register_handler(kAppend, {"append", false},
                                      [this, note](const Request& r, Reply& out) {
                                        note(r);
                                        ++appends[r.worker];
                                        auto [k, v] = parse_kv(r.payload);
                                        std::string& cur = parts[r.worker][k];
                                        cur += v;
                                        out.append(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(cur.data()),
                                                                            cur.size()));
                                      })
                    .ok());
    ASSERT_TRUE(server.register_handler(kSlow, {"slow", false}, [note](const Request& r, Reply&) { note(r); }).ok());
  }
};

inline std::string text(std::span<const uint8_t> b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

// A raw client QP connected to a worker, for sending crafted bytes (or a
// request with no READ behind it: a durable client that died after its SEND).
class RawPeer {
 public:
  RawPeer(nic::Nic& nic, Server& server, uint32_t worker, uint32_t path_mtu = 4096) {
    pd_ = nic.alloc_pd().value();
    cq_ = nic.create_cq({}).value();
    mem_.assign(64 << 10, 0);
    mr_ = nic.reg_mr(*pd_, mem_.data(), mem_.size(), nic::kAccessLocalWrite).value();
    nic::QpInitAttr a;
    a.send_cq = a.recv_cq = cq_.get();
    qp_ = nic.create_qp(*pd_, a).value();
    nic::ConnectOptions o;
    o.timeout = 8;
    o.path_mtu = path_mtu;
    EXPECT_TRUE(server.connect(worker, *qp_, nic, o).ok());
    for (uint32_t i = 0; i < 8; ++i) {
      const nic::Sge sge = mr_->sge(32768 + i * 4096, 4096);
      EXPECT_TRUE(qp_->post_recv(nic::RecvWr{100 + i, std::span<const nic::Sge>(&sge, 1)}).ok());
    }
  }
  // A well-formed request in the send area; returns its size.
  uint32_t build(uint16_t type, uint8_t flags, std::string_view key, std::string_view value, uint64_t id = 7) {
    return build(type, flags, kv(key, value), id);
  }
  uint32_t build(uint16_t type, uint8_t flags, std::span<const uint8_t> payload, uint64_t id = 7) {
    if (!payload.empty()) std::memcpy(mem_.data() + kRequestHeaderBytes, payload.data(), payload.size());
    return seal_request(std::span<uint8_t>(mem_.data(), 32768), type, flags, id, 0,
                        static_cast<uint32_t>(payload.size()));
  }
  uint8_t* bytes() { return mem_.data(); }
  uint32_t qpn() const { return qp_->qp_num(); }
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

// A server host and one client machine on a manual engine with a fake clock.
// Nothing runs unless the test drives it (drive()/poll_all()).
class RpcSim : public ::testing::Test {
 protected:
  void build(ServerOptions so, ClientOptions co = {}, const nic::FaultModel& faults = {},
             pm::PersistenceDomain* server_memory = nullptr) {
    nic::EngineOptions eo;
    eo.threaded = false;
    eo.clock = &clock_;
    eo.faults = faults;
    engine_ = std::make_unique<nic::Engine>(eo);
    nic::NicOptions sno;
    sno.name = "server";
    sno.memory = server_memory;
    server_nic_ = engine_->add_nic(sno).value();
    client_nic_ = engine_->add_nic({.name = "client"}).value();
    so.threaded = false;
    auto s = Server::create(*engine_, *server_nic_, so);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(s.value());
    kv_.attach(*server_);
    ASSERT_TRUE(server_->start().ok());
    co.connect.timeout = 8;  // 1 ms of fake time before a retransmission
    auto c = Client::create(*engine_, *client_nic_, *server_, co);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    client_ = std::move(c.value());
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    engine_.reset();
  }

  // One pass of every worker (unless stalled) and session.
  size_t poll_all() {
    size_t n = 0;
    for (uint32_t w = 0; w < server_->workers(); ++w) {
      if (!stalled_.count(w)) n += server_->poll_worker(w);
    }
    for (uint32_t s = 0; s < client_->sessions(); ++s) n += client_->session(s).poll();
    return n;
  }
  // Runs the engine, the workers and the sessions until cond() holds.
  bool drive(const std::function<bool()>& cond, uint64_t max_fake_ns = 10'000'000'000ULL) {
    for (int round = 0; round < 100; ++round) {
      Status st = engine_->run_until(
          [&] {
            poll_all();
            return cond();
          },
          max_fake_ns);
      if (cond()) return true;
      if (st.code() != Code::kTimedOut || poll_all() == 0) {
        // Idle with the condition false: one more look after a last poll.
        if (!engine_->step() && poll_all() == 0 && !cond()) return false;
      }
    }
    return cond();
  }

  // An async call whose result lands in *out; returns the submit status.
  struct Outcome {
    bool done = false;
    Status status;
    Commit commit = Commit::kNone;
    uint8_t app_status = 0;
    std::string payload;
    uint64_t fake_ns = 0;  // when it committed
  };
  std::shared_ptr<Outcome> call(uint32_t session, uint16_t type, std::string_view key, std::string_view value,
                                bool nilext) {
    auto o = std::make_shared<Outcome>();
    const auto payload = kv(key, value);
    Status st = client_->session(session).call_async(type, route_of(key), payload, nilext, [o, this](const CallResult& r) {
      o->done = true;
      o->status = r.status;
      o->commit = r.commit;
      o->app_status = r.app_status;
      o->payload = text(r.payload);
      o->fake_ns = clock_.now_ns();
    });
    EXPECT_TRUE(st.ok()) << st.to_string();
    return o;
  }

  FakeClock clock_;
  std::unique_ptr<nic::Engine> engine_;
  nic::Nic* server_nic_ = nullptr;
  nic::Nic* client_nic_ = nullptr;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
  TinyKv kv_;
  std::set<uint32_t> stalled_;  // workers drive() must not poll
};

}  // namespace ferry::rpc::testing
