// The key-value services on the RPC layer: the cache engine and PmKv behind
// an rpc::Server, one partition per worker, driven on a manual engine.
//
// What matters here: which requests are nilext (and therefore committed by
// the NIC's ACK), that their effect is visible to the next request, that the
// partition a key lands in is the one hash(key) % workers names, that bad
// payloads get an answer and not a crash, and that a durable PmKv server
// keeps every put committed by its persistent ACK across a power failure.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "ferry/common/clock.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"
#include "ferry/store/kv_service.h"

namespace ferry::store {
namespace {

struct Outcome {
  bool done = false;
  Status status;
  rpc::Commit commit = rpc::Commit::kNone;
  uint8_t app_status = 0;
  std::string payload;
};

rpc::Callback record(std::shared_ptr<Outcome> o) {
  return [o](const rpc::CallResult& r) {
    o->done = true;
    o->status = r.status;
    o->commit = r.commit;
    o->app_status = r.app_status;
    o->payload.assign(reinterpret_cast<const char*>(r.payload.data()), r.payload.size());
  };
}

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("ferry-kvsvc-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// A server host and a client machine on a manual engine; the caller attaches
// services between make_server() and start().
class KvSim {
 public:
  explicit KvSim(pm::PersistenceDomain* server_memory = nullptr) {
    nic::EngineOptions eo;
    eo.threaded = false;
    eo.clock = &clock_;
    engine_ = std::make_unique<nic::Engine>(eo);
    nic::NicOptions sno;
    sno.name = "server";
    sno.memory = server_memory;
    server_nic_ = engine_->add_nic(sno).value();
    client_nic_ = engine_->add_nic({.name = "client"}).value();
  }
  ~KvSim() {
    kv_.reset();
    client_.reset();
    server_.reset();
    engine_.reset();
  }
  rpc::Server& make_server(rpc::ServerOptions so) {
    so.threaded = false;
    server_ = rpc::Server::create(*engine_, *server_nic_, so).value();
    return *server_;
  }
  // `rnr_retry`: the client QPs' (7: forever; less: a call fails kUnavailable
  // once the server has had no receive buffer that many times).
  void start(const CacheOptions& limits = {}, uint8_t rnr_retry = 7) {
    Status st = server_->start();
    ASSERT_TRUE(st.ok()) << st.to_string();
    rpc::ClientOptions co;
    co.connect.timeout = 8;
    co.connect.rnr_retry = rnr_retry;
    client_ = rpc::Client::create(*engine_, *client_nic_, *server_, co).value();
    kv_ = std::make_unique<KvClient>(client_->session(0), limits);
  }
  // `workers`: poll the server's workers too (false: they are stopped, and
  // only the NICs and the client run).
  bool drive(const std::shared_ptr<Outcome>& o, bool workers = true) {
    Status st = engine_->run_until(
        [&] {
          for (uint32_t w = 0; workers && w < server_->workers(); ++w) server_->poll_worker(w);
          client_->session(0).poll();
          return o->done;
        },
        10'000'000'000ULL);
    return st.ok() && o->done;
  }
  // Sends one request and runs until it commits or fails.
  std::shared_ptr<Outcome> run(KvRequestType type, std::string_view key, std::string_view value = {},
                               uint32_t flags = 0, int64_t exptime = 0, uint64_t arg = 0) {
    auto o = std::make_shared<Outcome>();
    Status st = kv_->request_async(type, key, value, flags, exptime, arg, record(o));
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (st.ok()) {
      EXPECT_TRUE(drive(o));
    }
    return o;
  }
  KvClient& kv() { return *kv_; }
  rpc::Client& client() { return *client_; }
  rpc::Server& server() { return *server_; }
  FakeClock& clock() { return clock_; }

 private:
  FakeClock clock_;
  std::unique_ptr<nic::Engine> engine_;
  nic::Nic* server_nic_ = nullptr;
  nic::Nic* client_nic_ = nullptr;
  std::unique_ptr<rpc::Server> server_;
  std::unique_ptr<rpc::Client> client_;
  std::unique_ptr<KvClient> kv_;
};

uint8_t st(CacheStatus s) { return static_cast<uint8_t>(s); }

TEST(CacheService, SetCommitsAtTheHardwareAckAndTheNextGetSeesIt) {
  KvSim sim;
  rpc::ServerOptions so;
  so.mode = rpc::Mode::kOrderedQueue;
  so.workers = 2;
  auto svc = CacheService::attach(sim.make_server(so), sim.clock(), {}).value();
  sim.start();
  const auto set = sim.run(kCacheSet, "user:42", "hello", 7, 0);
  ASSERT_TRUE(set->status.ok()) << set->status.to_string();
  EXPECT_EQ(set->commit, rpc::Commit::kHardwareAck);
  EXPECT_EQ(sim.server().counters().replies, 0u) << "OQ sends no software response for a nilext set";

  const auto get = sim.run(kCacheGet, "user:42");
  ASSERT_TRUE(get->status.ok());
  EXPECT_EQ(get->commit, rpc::Commit::kReply);
  ASSERT_EQ(get->app_status, st(CacheStatus::kOk));
  CacheValue v;
  ASSERT_TRUE(parse_cache_value(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(get->payload.data()),
                                                         get->payload.size()),
                                &v));
  EXPECT_EQ(v.value, "hello");
  EXPECT_EQ(v.flags, 7u);

  // The key lives in the partition hash(key) % workers names, and only there.
  const uint32_t owner = static_cast<uint32_t>(key_route("user:42") % 2);
  EXPECT_EQ(svc->partition(owner).get("user:42").status, CacheStatus::kOk);
  EXPECT_EQ(svc->partition(1 - owner).get("user:42").status, CacheStatus::kNotFound);
}

TEST(CacheService, StateDependentCommandsAreAnsweredByTheWorker) {
  KvSim sim;
  rpc::ServerOptions so;
  so.mode = rpc::Mode::kOrderedQueue;
  auto svc = CacheService::attach(sim.make_server(so), sim.clock(), {}).value();
  sim.start();
  EXPECT_EQ(sim.run(kCacheAdd, "k", "1")->app_status, st(CacheStatus::kStored));
  auto again = sim.run(kCacheAdd, "k", "2");
  EXPECT_EQ(again->commit, rpc::Commit::kReply);
  EXPECT_EQ(again->app_status, st(CacheStatus::kNotStored));
  EXPECT_EQ(sim.run(kCacheReplace, "absent", "x")->app_status, st(CacheStatus::kNotStored));
  EXPECT_EQ(sim.run(kCacheAppend, "k", "0")->app_status, st(CacheStatus::kStored));
  EXPECT_EQ(sim.run(kCachePrepend, "k", "9")->app_status, st(CacheStatus::kStored));

  auto incr = sim.run(kCacheIncr, "k", {}, 0, 0, 5);  // "910" + 5
  ASSERT_EQ(incr->app_status, st(CacheStatus::kOk));
  uint64_t n = 0;
  ASSERT_EQ(incr->payload.size(), 8u);
  std::memcpy(&n, incr->payload.data(), 8);
  EXPECT_EQ(n, 915u);
  EXPECT_EQ(sim.run(kCacheDecr, "absent", {}, 0, 0, 1)->app_status, st(CacheStatus::kNotFound));

  // cas with the unique from gets succeeds once, then is stale.
  auto gets = sim.run(kCacheGets, "k");
  CacheValue v;
  ASSERT_TRUE(parse_cache_value(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(gets->payload.data()), gets->payload.size()), &v));
  EXPECT_EQ(v.value, "915");
  EXPECT_EQ(sim.run(kCacheCas, "k", "new", 0, 0, v.cas)->app_status, st(CacheStatus::kStored));
  EXPECT_EQ(sim.run(kCacheCas, "k", "newer", 0, 0, v.cas)->app_status, st(CacheStatus::kExists));

  EXPECT_EQ(sim.run(kCacheTouch, "k", {}, 0, 100)->app_status, st(CacheStatus::kTouched));
  EXPECT_EQ(sim.run(kCacheDelete, "k")->app_status, st(CacheStatus::kDeleted));
  EXPECT_EQ(sim.run(kCacheDelete, "k")->app_status, st(CacheStatus::kNotFound));

  // The quiet delete is nilext: committed by the ACK, and the next get misses.
  EXPECT_EQ(sim.run(kCacheSet, "q", "v")->commit, rpc::Commit::kHardwareAck);
  EXPECT_EQ(sim.run(kCacheDeleteQuiet, "q")->commit, rpc::Commit::kHardwareAck);
  EXPECT_EQ(sim.run(kCacheGet, "q")->app_status, st(CacheStatus::kNotFound));
}

TEST(CacheService, OnlySetAndQuietDeleteMayBeNilext) {
  KvSim sim;
  rpc::ServerOptions so;
  auto svc = CacheService::attach(sim.make_server(so), sim.clock(), {}).value();
  for (uint16_t t = kCacheSet; t <= kCacheTouch; ++t) {
    const bool expect = t == kCacheSet || t == kCacheDeleteQuiet;
    EXPECT_EQ(sim.server().nilext_allowed(t), expect) << "type " << t;
  }
}

TEST(CacheService, ANilextSetThatCouldFailAtTheServerIsRefusedBeforeSending) {
  KvSim sim;
  rpc::ServerOptions so;
  so.max_request_bytes = 8192;
  CacheOptions limits;
  limits.max_item_bytes = 1024;
  auto svc = CacheService::attach(sim.make_server(so), sim.clock(), limits).value();
  sim.start(limits);
  const std::string big(2000, 'x');
  auto o = std::make_shared<Outcome>();
  const Status refused = sim.kv().set_async("k", big, 0, 0, /*nilext=*/true, record(o));
  EXPECT_EQ(refused.code(), Code::kInvalidArgument) << refused.to_string();
  // Not nilext, the same set goes out and the worker says why it failed.
  ASSERT_TRUE(sim.kv().set_async("k", big, 0, 0, /*nilext=*/false, record(o)).ok());
  ASSERT_TRUE(sim.drive(o));
  EXPECT_EQ(o->commit, rpc::Commit::kReply);
  EXPECT_EQ(o->app_status, st(CacheStatus::kTooLarge));
}

TEST(CacheService, AMalformedPayloadIsAnsweredNotExecuted) {
  KvSim sim;
  rpc::ServerOptions so;
  auto svc = CacheService::attach(sim.make_server(so), sim.clock(), {}).value();
  sim.start();
  // A header claiming a key longer than the payload.
  KvHeader h{};
  h.key_bytes = 500;
  std::vector<uint8_t> p(sizeof(h) + 4);
  std::memcpy(p.data(), &h, sizeof(h));
  auto o = std::make_shared<Outcome>();
  ASSERT_TRUE(sim.client().session(0).call_async(kCacheGet, 0, p, false, record(o)).ok());
  ASSERT_TRUE(sim.drive(o));
  EXPECT_EQ(o->app_status, kKvMalformed);
  // Too short for a header.
  auto o2 = std::make_shared<Outcome>();
  ASSERT_TRUE(sim.client().session(0).call_async(kCacheAdd, 0, std::span<const uint8_t>(p.data(), 3), false,
                                                 record(o2)).ok());
  ASSERT_TRUE(sim.drive(o2));
  EXPECT_EQ(o2->app_status, kKvMalformed);
  EXPECT_EQ(svc->partition(0).stats().items, 0u);
}

TEST(CacheService, DeferredExecAcknowledgesSetsInSoftwareAndRawRpcReplies) {
  for (const rpc::Mode mode : {rpc::Mode::kDeferredExec, rpc::Mode::kRawRpc}) {
    SCOPED_TRACE(std::string(rpc::mode_name(mode)));
    KvSim sim;
    rpc::ServerOptions so;
    so.mode = mode;
    auto svc = CacheService::attach(sim.make_server(so), sim.clock(), {}).value();
    sim.start();
    auto set = sim.run(kCacheSet, "a", "1");
    EXPECT_EQ(set->commit, mode == rpc::Mode::kDeferredExec ? rpc::Commit::kSoftwareAck : rpc::Commit::kReply);
    EXPECT_EQ(sim.run(kCacheGet, "a")->app_status, st(CacheStatus::kOk));
  }
}

// ---- PmKv, durable ----

// Thirty puts executed, then ten puts and a remove committed with the workers
// stopped; the power fails. `group` is ServerOptions::req_to_execute_group;
// returns how many requests recovery executed.
uint64_t durable_puts_then_power_failure(uint32_t group) {
  pm::PersistenceDomain domain{pm::PlatformConfig{}};
  rpc::ServerOptions so;
  so.req_to_execute_group = group;
  so.req_to_execute_idle_us = 1'000'000'000;  // never idle long enough: only the group commit counts
  so.mode = rpc::Mode::kOrderedQueue;
  so.workers = 2;
  so.buffers = 4;
  so.buffer_bytes = 1024;
  so.max_request_bytes = 512;
  const rpc::DurableLayout layout{so.buffers, so.buffer_bytes, so.stride_bytes};
  const size_t srq_bytes = (so.workers * layout.area_bytes() + 4095) / 4096 * 4096;
  pm::Region* srq = domain.map_pm(temp_path("srq"), srq_bytes, true).value();
  std::vector<pm::Region*> data;
  for (uint32_t w = 0; w < so.workers; ++w) {
    data.push_back(domain.map_pm(temp_path("data" + std::to_string(w)), 1 << 20, true).value());
  }
  so.durable_region = srq;

  constexpr int kKeys = 40;
  {
    KvSim sim(&domain);
    rpc::Server& server = sim.make_server(so);
    auto svc = PmKvService::attach(server, domain, data, /*open_existing=*/false).value();
    sim.start();
    for (int i = 0; i < kKeys; ++i) {
      auto o = std::make_shared<Outcome>();
      EXPECT_TRUE(sim.kv().pm_put_async("key" + std::to_string(i), "value" + std::to_string(i), true, record(o)).ok());
      // The last ten commit with the workers stopped: committed by the
      // READ behind the SEND, executed only by recovery.
      EXPECT_TRUE(sim.drive(o, /*workers=*/i < kKeys - 10));
      EXPECT_EQ(o->commit, rpc::Commit::kPersistentAck);
    }
    auto rm = std::make_shared<Outcome>();
    EXPECT_TRUE(sim.kv().request_async(kPmRemove, "key0", {}, 0, 0, 0, record(rm)).ok());
    EXPECT_TRUE(sim.drive(rm, /*workers=*/false));
    EXPECT_EQ(rm->commit, rpc::Commit::kPersistentAck);
    domain.power_fail(7);
  }
  so.recover = true;
  KvSim sim(&domain);
  rpc::Server& server = sim.make_server(so);
  auto svc = PmKvService::attach(server, domain, data, /*open_existing=*/true).value();
  sim.start();
  const uint64_t recovered = server.counters().recovered;
  for (int i = 0; i < kKeys; ++i) {
    auto o = std::make_shared<Outcome>();
    EXPECT_TRUE(sim.kv().pm_get_async("key" + std::to_string(i), record(o)).ok());
    EXPECT_TRUE(sim.drive(o));
    if (i == 0) {
      EXPECT_EQ(o->app_status, kPmNotFound);
    } else {
      EXPECT_EQ(o->app_status, kPmOk) << "key" << i;
      EXPECT_EQ(o->payload, "value" + std::to_string(i));
    }
  }
  std::filesystem::remove_all(std::filesystem::path(temp_path("x")).parent_path());
  return recovered;
}

TEST(PmKvService, DurablePutsSurviveAPowerFailureAndRecoveryThroughTheService) {
  // ReqToExecute persisted after every batch: recovery executes exactly the
  // eleven requests committed while the workers were stopped.
  EXPECT_EQ(durable_puts_then_power_failure(1), 11u) << "the ten puts and the remove never executed before the failure";
}

TEST(PmKvService, GroupCommitOfReqToExecuteMakesRecoveryRepeatPutsHarmlessly) {
  // Every 64 nilext requests: executed puts since each worker's last
  // retired buffer (which persists ReqToExecute before its reuse) were never
  // passed by a durable ReqToExecute, so recovery executes them again, in
  // order, with the eleven -- and the store still ends as committed
  // (checked inside).
  const uint64_t recovered = durable_puts_then_power_failure(64);
  EXPECT_GT(recovered, 11u) << "no executed put was behind ReqToExecute: the group commit did not defer";
  EXPECT_LE(recovered, 11u + 2 * 64) << "more than a group per worker was executed again";
}

// A nilext put commits at the NIC's ACK, before the worker has run it, so a
// store out of room must not acknowledge a put it then cannot hold (it was
// silently dropped). The worker posts a receive buffer only once the store
// has set aside room for every put that can land in it; a store without
// room leaves the NIC without buffers, and new puts are held back (RNR)
// instead. Both OQ modes; the durable one across a power failure too.
TEST(PmKvService, AFullStoreNeverAcknowledgesAPutItCannotHold) {
  for (const bool durable : {false, true}) {
    SCOPED_TRACE(durable ? "JUNE BERRY-D" : "OQ");
    pm::PersistenceDomain domain{pm::PlatformConfig{}};
    rpc::ServerOptions so;
    so.mode = rpc::Mode::kOrderedQueue;
    so.workers = 1;
    so.buffers = 4;
    so.buffer_bytes = 1024;
    so.max_request_bytes = 512;
    if (durable) {
      const rpc::DurableLayout layout{so.buffers, so.buffer_bytes, so.stride_bytes};
      so.durable_region = domain.map_pm(temp_path("full-srq"), (layout.area_bytes() + 4095) / 4096 * 4096, true).value();
    }
    std::vector<pm::Region*> data{domain.map_pm(temp_path("full-data"), 64 << 10, true).value()};
    std::vector<std::string> committed;
    int refused = 0;
    std::unique_ptr<PmKvService> svc;
    KvSim sim(&domain);
    rpc::Server& server = sim.make_server(so);
    svc = PmKvService::attach(server, domain, data, /*open_existing=*/false).value();
    sim.start({}, /*rnr_retry=*/2);
    for (int i = 0; i < 2000 && refused == 0; ++i) {
      const std::string key = "key" + std::to_string(i);
      auto o = std::make_shared<Outcome>();
      ASSERT_TRUE(sim.kv().pm_put_async(key, std::string(150, static_cast<char>('a' + i % 26)), true, record(o)).ok());
      sim.drive(o);
      const bool acked = o->done && o->status.ok() &&
                         o->commit == (durable ? rpc::Commit::kPersistentAck : rpc::Commit::kHardwareAck);
      if (acked) {
        committed.push_back(key);
      } else {
        ++refused;
      }
    }
    EXPECT_EQ(refused, 1) << "the store never filled";
    EXPECT_GT(committed.size(), 150u) << "the reservations left too little room for data";
    // The worker runs what it took.
    for (int i = 0; i < 1000; ++i) {
      sim.server().poll_worker(0);
      (void)sim.client().session(0).poll();
    }
    EXPECT_GT(sim.server().counters().admission_refusals, 0u);
    auto check = [&](PmKv& kv) {
      size_t missing = 0;
      for (size_t i = 0; i < committed.size(); ++i) {
        auto v = kv.get(committed[i]);
        if (!v.ok()) ++missing;
      }
      EXPECT_EQ(missing, 0u) << "of " << committed.size() << " acknowledged puts";
      EXPECT_TRUE(kv.verify().ok()) << kv.verify().to_string();
    };
    if (!durable) {
      check(svc->partition(0));
      continue;
    }
    domain.power_fail(11);
    svc.reset();
    rpc::ServerOptions again = so;
    again.recover = true;
    KvSim after(&domain);
    rpc::Server& recovered = after.make_server(again);
    auto svc2 = PmKvService::attach(recovered, domain, data, /*open_existing=*/true).value();
    after.start();
    check(svc2->partition(0));
  }
  std::filesystem::remove_all(std::filesystem::path(temp_path("x")).parent_path());
}

// Each put's record goes to its own spot in its buffer's room (3 bytes of
// room per byte of buffer, from where the request starts): for every size a
// request can have, the spot holds the record, padding and 256-byte
// alignment included, so a put never takes room from its neighbours.
TEST(PmKvService, EveryPutFitsItsSpotInItsBuffersRoom) {
  pm::PersistenceDomain domain{pm::PlatformConfig{}};
  rpc::ServerOptions so;
  so.mode = rpc::Mode::kOrderedQueue;
  so.workers = 1;
  so.buffers = 8;
  so.buffer_bytes = 16 << 10;
  so.max_request_bytes = 4096;
  std::vector<pm::Region*> data{domain.map_pm(temp_path("spots"), 8 << 20, true).value()};
  KvSim sim(&domain);
  auto svc = PmKvService::attach(sim.make_server(so), domain, data, /*open_existing=*/false).value();
  sim.start();
  constexpr size_t kHeader = rpc::kRequestHeaderBytes + sizeof(KvHeader);
  uint64_t puts = 0;
  for (size_t value = 0; value + kHeader + 8 <= so.max_request_bytes; value += 7) {
    const std::string key = "k" + std::to_string(value % 1000000);
    auto o = std::make_shared<Outcome>();
    ASSERT_TRUE(sim.kv().pm_put_async(key, std::string(value, 'v'), true, record(o)).ok());
    ASSERT_TRUE(sim.drive(o));
    ++puts;
  }
  for (int i = 0; i < 100; ++i) sim.server().poll_worker(0);
  const PmKvStats stats = svc->partition(0).stats();
  EXPECT_EQ(stats.reserved_misses, 0u) << "of " << puts << " puts";
  EXPECT_EQ(stats.records, puts);
  EXPECT_TRUE(svc->partition(0).verify().ok());
  std::filesystem::remove_all(std::filesystem::path(temp_path("x")).parent_path());
}

}  // namespace
}  // namespace ferry::store
