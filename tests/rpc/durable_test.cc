// Durable Ordered Queue (JUNE BERRY-D, NSDI'25 §5.3) under power failure.
//
// Each seed runs clients against a durable OQ server for a random while on a
// manual engine, fails the power at a random moment (the persistence model
// keeps what was durable and an adversarial subset of the rest), rebuilds
// the hosts, recovers the server from PM and checks:
//  - every nilext put whose READ completed (kPersistentAck) is there after
//    recovery, or a later put of the same key is;
//  - every non-nilext append whose reply arrived executed exactly once; no
//    append executed twice; recovery executed none.
// FERRY_RPC_POWER_SEEDS sets the number of seeds (default 2000; the full
// campaign is 20000), FERRY_SEED the first (default 0).
#include <filesystem>
#include <optional>
#include <string>

#include "ferry/common/rng.h"
#include "ferry/common/temp_dir.h"
#include "rpc_test_util.h"
#include "test_seed.h"

namespace ferry::rpc::testing {
namespace {

constexpr uint16_t kRegPut = 11;     // nilext: u32 key, u64 value -> register[key] = value (persisted)
constexpr uint16_t kLogAppend = 12;  // non-nilext, not idempotent: u32 key, u64 token -> appended to log[key]
constexpr uint16_t kRegGet = 13;     // u32 key (+ 8 ignored bytes) -> register[key]
constexpr uint32_t kKeysPerSession = 3;
constexpr uint32_t kLogCapacity = 120;

// This process's own new directory (a pid-named one could hold a dead
// process's files, which map_pm would open), removed after the last test.
const std::string& temp_dir() {
  static const std::string dir = [] {
    auto d = make_temp_dir("ferry-rpc-test");
    if (!d.ok()) ADD_FAILURE() << d.status().to_string();
    return d.ok() ? std::move(d).value() : std::string();
  }();
  return dir;
}

class TempDirCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(temp_dir(), ignored);
  }
};
::testing::Environment* const kTempDirCleanup = ::testing::AddGlobalTestEnvironment(new TempDirCleanup);

std::string temp_path(const std::string& name) { return temp_dir() + "/" + name; }

// The service's own durable state, in a PM region of the server host:
// registers (one 64 B line each) and append logs (count + tokens).
struct PmState {
  pm::Region* region = nullptr;
  uint32_t keys = 0;
  bool appended_in_recovery = false;

  uint64_t* reg(uint32_t k) const { return reinterpret_cast<uint64_t*>(region->data() + static_cast<size_t>(k) * 64); }
  uint64_t* log(uint32_t k) const {
    return reinterpret_cast<uint64_t*>(region->data() + static_cast<size_t>(keys) * 64 +
                                       static_cast<size_t>(k) * (kLogCapacity + 8) * 8);
  }
  static size_t bytes(uint32_t keys) { return static_cast<size_t>(keys) * (64 + (kLogCapacity + 8) * 8) + 4096; }

  void attach(Server& server) {
    ASSERT_TRUE(server
                    .register_handler(kRegPut, {"reg-put", true, /*replay_safe=*/true},
                                      [this](const Request& r, Reply&) {
                                        uint32_t k;
                                        uint64_t v;
                                        if (r.payload.size() != 12) return;
                                        std::memcpy(&k, r.payload.data(), 4);
                                        std::memcpy(&v, r.payload.data() + 4, 8);
                                        if (k >= keys) return;
                                        region->store(reg(k), &v, 8);
                                        region->persist(reg(k), 8);
                                      })
                    .ok());
    ASSERT_TRUE(server
                    .register_handler(kRegGet, {"reg-get", false},
                                      [this](const Request& r, Reply& out) {
                                        uint32_t k;
                                        if (r.payload.size() != 12) return;
                                        std::memcpy(&k, r.payload.data(), 4);
                                        if (k >= keys) return;
                                        out.append(std::span<const uint8_t>(
                                            reinterpret_cast<const uint8_t*>(reg(k)), 8));
                                      })
                    .ok());
    ASSERT_TRUE(server
                    .register_handler(kLogAppend, {"log-append", false},
                                      [this](const Request& r, Reply& out) {
                                        if (r.recovering) appended_in_recovery = true;
                                        uint32_t k;
                                        uint64_t token;
                                        if (r.payload.size() != 12) return;
                                        std::memcpy(&k, r.payload.data(), 4);
                                        std::memcpy(&token, r.payload.data() + 4, 8);
                                        if (k >= keys) return;
                                        uint64_t* l = log(k);
                                        const uint64_t n = l[0];
                                        if (n >= kLogCapacity) {
                                          out.set_status(2);
                                          return;
                                        }
                                        // Token, then the count: the count is the commit point.
                                        region->store(&l[1 + n], &token, 8);
                                        region->persist(&l[1 + n], 8);
                                        const uint64_t next = n + 1;
                                        region->store(&l[0], &next, 8);
                                        region->persist(&l[0], 8);
                                      })
                    .ok());
  }
};

size_t round_page(size_t n) { return (n + 4095) / 4096 * 4096; }

std::vector<uint8_t> payload(uint32_t key, uint64_t value) {
  std::vector<uint8_t> p(12);
  std::memcpy(p.data(), &key, 4);
  std::memcpy(p.data() + 4, &value, 8);
  return p;
}

// One emulated server host that survives power failures (its PM), and the
// hosts that do not (NICs, queues, client machine), rebuilt after each.
class DurableSim {
 public:
  explicit DurableSim(uint64_t seed, uint32_t sessions) : sessions_(sessions) {
    domain_ = std::make_unique<pm::PersistenceDomain>(pm::PlatformConfig{});
    so_.mode = Mode::kOrderedQueue;
    so_.workers = 2;
    so_.buffers = 4;
    so_.buffer_bytes = 512;
    so_.max_request_bytes = 128;
    so_.threaded = false;
    // ReqToExecute's group commit, drawn per seed: after every batch, every
    // 4 or every 64 nilext requests; when idle at the second empty poll or
    // never. (Real time never decides: the seed alone does.)
    so_.req_to_execute_group = std::array<uint32_t, 3>{1, 4, 64}[seed % 3];
    so_.req_to_execute_idle_us = (seed / 3) % 2 == 0 ? 0 : 1'000'000'000;
    const DurableLayout layout{so_.buffers, so_.buffer_bytes, so_.stride_bytes};
    const std::string tag = std::to_string(seed);
    srq_ = domain_->map_pm(temp_path("srq-" + tag), round_page(so_.workers * layout.area_bytes()), true).value();
    state_.keys = sessions * kKeysPerSession;
    state_.region = domain_->map_pm(temp_path("data-" + tag), round_page(PmState::bytes(state_.keys)), true).value();
    paths_ = {srq_->path(), state_.region->path()};
  }
  ~DurableSim() {
    down();
    domain_.reset();
    for (const auto& p : paths_) std::filesystem::remove(p);
  }

  // Brings the hosts up (recovering the server from PM if `recover`).
  void up(bool recover) {
    nic::EngineOptions eo;
    eo.threaded = false;
    eo.clock = &clock_;
    engine_ = std::make_unique<nic::Engine>(eo);
    nic::NicOptions sno;
    sno.name = "server";
    sno.memory = domain_.get();
    server_nic_ = engine_->add_nic(sno).value();
    client_nic_ = engine_->add_nic({.name = "client"}).value();
    ServerOptions so = so_;
    so.durable_region = srq_;
    so.recover = recover;
    server_ = Server::create(*engine_, *server_nic_, so).value();
    state_.attach(*server_);
    Status st = server_->start();
    ASSERT_TRUE(st.ok()) << st.to_string();
    ClientOptions co;
    co.sessions = sessions_;
    co.max_inflight = 4;
    co.connect.timeout = 8;
    client_ = Client::create(*engine_, *client_nic_, *server_, co).value();
  }
  // The hosts go away (after a power failure: their state is already lost).
  void down() {
    client_.reset();
    server_.reset();
    engine_.reset();
  }

  pm::PersistenceDomain& domain() { return *domain_; }
  ServerOptions& options() { return so_; }  // for the next up()
  nic::Engine& engine() { return *engine_; }
  Server& server() { return *server_; }
  Client& client() { return *client_; }
  nic::Nic& client_nic() { return *client_nic_; }
  PmState& state() { return state_; }

 private:
  uint32_t sessions_;
  FakeClock clock_;
  std::unique_ptr<pm::PersistenceDomain> domain_;
  ServerOptions so_;
  pm::Region* srq_ = nullptr;
  PmState state_;
  std::vector<std::string> paths_;
  std::unique_ptr<nic::Engine> engine_;
  nic::Nic* server_nic_ = nullptr;
  nic::Nic* client_nic_ = nullptr;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

struct Tracked {
  bool committed = false;
  bool done = false;
};

// Found by the simulator (ferry sim juneberry, a power failure during a
// recovery): the recovery ends by starting the area afresh, and the power
// may go at any fence of that. Each fence in turn: the power goes there,
// and the next recovery must accept what is left (it refused a control
// block whose ReqToExecute survived and whose SRQTail did not).
TEST(DurableOrderedQueue, APowerFailureAtAnyFenceOfARecoveryLeavesAnAreaTheNextRecoveryAccepts) {
  DurableSim sim(11, 1);
  sim.up(false);
  uint64_t fences = 0;
  for (uint64_t k = 1; k < 500; ++k) {
    sim.down();
    (void)sim.domain().power_fail(k);
    sim.domain().arm_cut(k);
    ASSERT_NO_FATAL_FAILURE(sim.up(true));
    const bool cut = sim.domain().cut_taken();
    sim.down();
    for (uint64_t seed = 0; seed < 8; ++seed) {
      // The failure at fence k, drawn eight ways (which pending words
      // survive), each recovered from.
      (void)sim.domain().power_fail(k * 8 + seed);
      ASSERT_NO_FATAL_FAILURE(sim.up(true)) << "power failure at fence " << k << " of a recovery, seed " << seed;
      sim.down();
      if (!cut || seed == 7) break;
      sim.domain().arm_cut(k);
      ASSERT_NO_FATAL_FAILURE(sim.up(true));
      sim.down();
    }
    sim.up(true);
    if (!cut) break;
    fences = k;
  }
  EXPECT_GT(fences, 4u) << "a recovery has several fences";
}

TEST(DurableOrderedQueue, NilextPutsCommitOnThePersistentAckAndAppendsOnTheReply) {
  DurableSim sim(1, 1);
  sim.up(false);
  std::optional<CallResult> put_result, append_result;
  Commit put_commit = Commit::kNone, append_commit = Commit::kNone;
  ASSERT_TRUE(sim.client().session(0).call_async(kRegPut, 0, payload(0, 42), true, [&](const CallResult& r) {
    put_commit = r.commit;
  }).ok());
  ASSERT_TRUE(sim.client().session(0).call_async(kLogAppend, 1, payload(0, 7), false, [&](const CallResult& r) {
    append_commit = r.commit;
  }).ok());
  ASSERT_TRUE(sim.engine()
                  .run_until([&] {
                    for (uint32_t w = 0; w < 2; ++w) sim.server().poll_worker(w);
                    sim.client().session(0).poll();
                    return put_commit != Commit::kNone && append_commit != Commit::kNone;
                  })
                  .ok());
  EXPECT_EQ(put_commit, Commit::kPersistentAck);
  EXPECT_EQ(append_commit, Commit::kReply);
}

// §5.3 persists ReqToExecute before a reply, so that recovery cannot run
// earlier nilext requests again over what the reply showed: a get's reply
// too, although the get itself changes nothing. Nilext requests alone leave
// it to the group commit.
TEST(DurableOrderedQueue, EveryReplyPersistsReqToExecutePastWhatItShowed) {
  DurableSim sim(1, 1);
  sim.options().req_to_execute_group = 64;
  sim.options().req_to_execute_idle_us = 1'000'000'000;  // only the group commit and replies persist it
  sim.up(false);
  Session& session = sim.client().session(0);
  auto drive = [&](auto&& done) {
    ASSERT_TRUE(sim.engine()
                    .run_until([&] {
                      for (uint32_t w = 0; w < 2; ++w) sim.server().poll_worker(w);
                      session.poll();
                      return done();
                    })
                    .ok());
  };
  for (uint64_t v = 1; v <= 3; ++v) {
    Commit commit = Commit::kNone;
    ASSERT_TRUE(
        session.call_async(kRegPut, 0, payload(0, v), true, [&](const CallResult& r) { commit = r.commit; }).ok());
    drive([&] { return commit == Commit::kPersistentAck && *sim.state().reg(0) == v; });
  }
  // Three puts executed, none passed by a durable ReqToExecute yet.
  sim.domain().power_fail(3);
  sim.down();
  sim.up(/*recover=*/true);
  EXPECT_EQ(sim.server().counters().recovered, 3u) << "the group commit lags: recovery runs the three again";
  EXPECT_EQ(*sim.state().reg(0), 3u);
  // Now with a get after them.
  for (uint64_t v = 4; v <= 6; ++v) {
    Commit commit = Commit::kNone;
    ASSERT_TRUE(sim.client().session(0).call_async(kRegPut, 0, payload(0, v), true, [&](const CallResult& r) {
      commit = r.commit;
    }).ok());
    ASSERT_TRUE(sim.engine()
                    .run_until([&] {
                      for (uint32_t w = 0; w < 2; ++w) sim.server().poll_worker(w);
                      sim.client().session(0).poll();
                      return commit == Commit::kPersistentAck && *sim.state().reg(0) == v;
                    })
                    .ok());
  }
  uint64_t got = 0;
  bool replied = false;
  ASSERT_TRUE(sim.client().session(0).call_async(kRegGet, 0, payload(0, 0), false, [&](const CallResult& r) {
    replied = r.commit == Commit::kReply && r.payload.size() == 8;
    if (replied) std::memcpy(&got, r.payload.data(), 8);
  }).ok());
  ASSERT_TRUE(sim.engine()
                  .run_until([&] {
                    for (uint32_t w = 0; w < 2; ++w) sim.server().poll_worker(w);
                    sim.client().session(0).poll();
                    return replied;
                  })
                  .ok());
  EXPECT_EQ(got, 6u);
  sim.domain().power_fail(3);
  sim.down();
  sim.up(/*recover=*/true);
  EXPECT_EQ(sim.server().counters().recovered, 0u) << "the get's reply persisted ReqToExecute past the puts";
  EXPECT_EQ(*sim.state().reg(0), 6u);
}

// A reply shows only what a power failure cannot take back. The NIC's DMA
// is visible to the worker before it is durable: QP A's put(0, 2) executes
// while its bytes still sit in the NIC's write buffer (A's client died
// after the SEND, before its READ). QP B's get then returns 2. If the power
// fails now and the put's bytes are lost, recovery must not run put(0, 1)
// again behind a ReqToExecute that never passed put(0, 2): the store would
// say 1 after a committed read said 2. Every power-fail seed is tried: the
// model keeps a random prefix of the NIC's buffer.
TEST(DurableOrderedQueue, AReplyNeverShowsAWriteThatAPowerFailureCanTakeBack) {
  int lost_bytes = 0;
  for (uint64_t fail_seed = 0; fail_seed < 16; ++fail_seed) {
    SCOPED_TRACE("power-fail seed " + std::to_string(fail_seed));
    DurableSim sim(1, 2);
    sim.options().req_to_execute_group = 64;               // the group commit lags ...
    sim.options().req_to_execute_idle_us = 1'000'000'000;  // ... and idleness never persists it
    sim.up(false);
    auto drive = [&](auto&& done) {
      ASSERT_TRUE(sim.engine()
                      .run_until([&] {
                        for (uint32_t w = 0; w < 2; ++w) sim.server().poll_worker(w);
                        for (uint32_t s = 0; s < 2; ++s) sim.client().session(s).poll();
                        return done();
                      })
                      .ok());
    };
    Commit commit = Commit::kNone;
    ASSERT_TRUE(sim.client().session(0).call_async(kRegPut, 0, payload(0, 1), true, [&](const CallResult& r) {
      commit = r.commit;
    }).ok());
    drive([&] { return commit == Commit::kPersistentAck && *sim.state().reg(0) == 1; });
    {
      // put(0, 2) from a client that dies right after its SEND (worker 0 owns route 0).
      RawPeer dying(sim.client_nic(), sim.server(), 0);
      dying.send(dying.build(kRegPut, kRequestNilext, payload(0, 2)));
      drive([&] { return *sim.state().reg(0) == 2; });
      uint64_t got = 0;
      bool replied = false;
      ASSERT_TRUE(sim.client().session(1).call_async(kRegGet, 0, payload(0, 0), false, [&](const CallResult& r) {
        replied = r.commit == Commit::kReply && r.payload.size() == 8;
        if (replied) std::memcpy(&got, r.payload.data(), 8);
      }).ok());
      drive([&] { return replied; });
      ASSERT_EQ(got, 2u);
      const pm::PowerFailReport report = sim.domain().power_fail(fail_seed);
      lost_bytes += report.nic_writes_kept < report.nic_writes_pending;
    }
    sim.down();
    sim.up(/*recover=*/true);
    EXPECT_EQ(*sim.state().reg(0), 2u) << "a get replied 2, then recovery rolled the register back";
  }
  EXPECT_GT(lost_bytes, 0) << "no seed lost the dying client's SEND: the test shows nothing";
}

// §5.3's recovery re-executes the nilext requests from ReqToExecute on, and
// ReqToExecute may lag: re-running that suffix must be harmless, which is
// more than each request being idempotent (copy(a->b) then put(a), re-run,
// changes b). A durable server refuses a nilext handler that does not say so.
TEST(DurableOrderedQueue, ANilextHandlerMustDeclareThatRerunningAnySuffixIsHarmless) {
  pm::PersistenceDomain domain;
  pm::Region* srq = domain.map_pm(temp_path("suffix-srq"), 64 << 10, true).value();
  nic::EngineOptions eo;
  eo.threaded = false;
  nic::Engine engine(eo);
  nic::NicOptions no;
  no.memory = &domain;
  nic::Nic* nic = engine.add_nic(no).value();
  ServerOptions so;
  so.threaded = false;
  so.workers = 1;
  so.buffers = 4;
  so.buffer_bytes = 512;
  so.max_request_bytes = 128;
  so.durable_region = srq;
  auto server = Server::create(engine, *nic, so).value();
  const Status s = server->register_handler(20, {"copy", /*nilext=*/true}, [](const Request&, Reply&) {});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_TRUE(server->register_handler(21, {"put", true, /*replay_safe=*/true}, [](const Request&, Reply&) {}).ok());
  EXPECT_TRUE(server->register_handler(22, {"get", false}, [](const Request&, Reply&) {}).ok());
  std::filesystem::remove(srq->path());
}

// DDIO on without eADR: the NIC's DMA lands in the CPU cache, which a power
// failure loses, so the READ behind a SEND proves nothing (H3). A durable
// server refuses that platform instead of acknowledging writes it can lose.
TEST(DurableOrderedQueue, ADurableServerRefusesAPlatformWhosePersistentAckIsNotPersistent) {
  for (const bool eadr : {false, true}) {
    SCOPED_TRACE(eadr ? "DDIO on, eADR" : "DDIO on, no eADR");
    pm::PlatformConfig platform;
    platform.ddio = true;
    platform.eadr = eadr;
    pm::PersistenceDomain domain(platform);
    pm::Region* srq = domain.map_pm(temp_path("ddio-srq"), 64 << 10, true).value();
    nic::EngineOptions eo;
    eo.threaded = false;
    nic::Engine engine(eo);
    nic::NicOptions no;
    no.memory = &domain;
    nic::Nic* nic = engine.add_nic(no).value();
    ServerOptions so;
    so.threaded = false;
    so.workers = 1;
    so.buffers = 4;
    so.buffer_bytes = 512;
    so.max_request_bytes = 128;
    so.durable_region = srq;
    auto server = Server::create(engine, *nic, so);
    if (eadr) {
      EXPECT_TRUE(server.ok()) << server.status().to_string();
    } else {
      ASSERT_FALSE(server.ok());
      EXPECT_EQ(server.status().code(), Code::kFailedPrecondition) << server.status().to_string();
      EXPECT_NE(server.status().message().find("DDIO"), std::string::npos) << server.status().to_string();
    }
    std::filesystem::remove(srq->path());
  }
}

TEST(DurableOrderedQueue, EveryCommittedRequestSurvivesPowerFailureExactlyOnce) {
  const ferry::testing::SeedRange seeds = ferry::testing::seed_range("FERRY_RPC_POWER_SEEDS", 0, 2000);
  constexpr uint32_t kSessions = 2;
  uint64_t committed_puts = 0, committed_appends = 0, recovered = 0, torn = 0;
  for (uint64_t seed = seeds.first; seed < seeds.first + seeds.count; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed) +
                 " (replay: " + ferry::testing::rerun_with(seed, "FERRY_RPC_POWER_SEEDS") + ")");
    Rng rng(static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ULL + 1);
    DurableSim sim(static_cast<uint64_t>(seed), kSessions);
    sim.up(false);
    const uint32_t keys = kSessions * kKeysPerSession;
    std::vector<uint64_t> issued(keys, 0), acked(keys, 0);  // per register: last value issued / committed
    std::vector<std::vector<uint64_t>> appended(keys);       // tokens issued per log
    std::vector<std::vector<uint64_t>> replied(keys);        // tokens whose reply arrived
    uint64_t next_token = 1;
    const int steps = 20 + static_cast<int>(rng.below(400));
    for (int step = 0; step < steps; ++step) {
      const uint32_t s = static_cast<uint32_t>(rng.below(kSessions));
      Session& session = sim.client().session(s);
      if (rng.below(3) == 0 && session.inflight() < 4) {
        // Each session owns its keys, so one session's calls to a key go in
        // order through one QP into one SRQ.
        const uint32_t k = s * kKeysPerSession + static_cast<uint32_t>(rng.below(kKeysPerSession));
        if (rng.below(4) != 0) {
          const uint64_t v = ++issued[k];
          ASSERT_TRUE(session.call_async(kRegPut, k, payload(k, v), true, [&acked, k, v](const CallResult& r) {
            if (r.status.ok() && r.commit == Commit::kPersistentAck) acked[k] = std::max(acked[k], v);
          }).ok());
        } else if (appended[k].size() < kLogCapacity) {
          const uint64_t token = next_token++;
          appended[k].push_back(token);
          ASSERT_TRUE(session.call_async(kLogAppend, k, payload(k, token), false, [&replied, k, token](const CallResult& r) {
            if (r.status.ok() && r.commit == Commit::kReply && r.app_status == 0) replied[k].push_back(token);
          }).ok());
        }
      }
      sim.engine().step();
      const uint64_t what = rng.below(4);
      if (what == 0) sim.server().poll_worker(0);
      if (what == 1) sim.server().poll_worker(1);
      if (what == 2) sim.client().session(s).poll();
    }
    for (uint32_t k = 0; k < keys; ++k) {
      committed_puts += acked[k] != 0;
      committed_appends += replied[k].size();
    }
    // Power fails between two engine steps; the hosts come back and the
    // server recovers from PM.
    const pm::PowerFailReport report = sim.domain().power_fail(static_cast<uint64_t>(seed));
    torn += report.nic_write_torn;
    sim.down();
    sim.up(/*recover=*/true);
    recovered += sim.server().counters().recovered;
    ASSERT_FALSE(sim.state().appended_in_recovery) << "recovery executed a non-nilext request";
    for (uint32_t k = 0; k < keys; ++k) {
      const uint64_t v = *sim.state().reg(k);
      ASSERT_GE(v, acked[k]) << "register " << k << ": a put acknowledged as persistent was lost";
      ASSERT_LE(v, issued[k]) << "register " << k << ": a value no one wrote";
      const uint64_t* log = sim.state().log(k);
      const uint64_t count = log[0];
      ASSERT_LE(count, appended[k].size()) << "log " << k;
      std::set<uint64_t> seen;
      for (uint64_t i = 0; i < count; ++i) {
        ASSERT_TRUE(seen.insert(log[1 + i]).second) << "log " << k << ": token " << log[1 + i] << " appended twice";
        ASSERT_NE(std::find(appended[k].begin(), appended[k].end(), log[1 + i]), appended[k].end());
      }
      for (uint64_t token : replied[k]) {
        ASSERT_TRUE(seen.count(token)) << "log " << k << ": append " << token << " was answered, then lost";
      }
    }
    // The recovered server serves again.
    bool done = false;
    ASSERT_TRUE(sim.client().session(0).call_async(kRegPut, 0, payload(0, 1u << 30), true, [&](const CallResult& r) {
      done = r.status.ok();
    }).ok());
    ASSERT_TRUE(sim.engine()
                    .run_until([&] {
                      sim.server().poll_worker(0);
                      sim.server().poll_worker(1);
                      sim.client().session(0).poll();
                      return done && *sim.state().reg(0) == (1u << 30);
                    })
                    .ok());
  }
  std::printf("committed puts %llu, answered appends %llu, nilext re-executed by recovery %llu, torn DMA %llu\n",
              static_cast<unsigned long long>(committed_puts), static_cast<unsigned long long>(committed_appends),
              static_cast<unsigned long long>(recovered), static_cast<unsigned long long>(torn));
  EXPECT_GT(committed_puts, 0u);
  EXPECT_GT(committed_appends, 0u);
  EXPECT_GT(recovered, 0u) << "some seeds failed between a persistent ACK and the execution";
}

}  // namespace
}  // namespace ferry::rpc::testing
