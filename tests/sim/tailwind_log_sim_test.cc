// A Tailwind primary's ReplicatedLog and its backups under SimRuntime: the
// backups' RPC workers and flushers, the appenders and the control calls are
// fibers of one OS thread; the NICs are a manual engine stepped by the
// scheduler on a virtual clock (docs/tailwind-simulation-plan.md, commit 4).
// Each test runs many seeds in both replication modes and checks what every
// acknowledged append must satisfy: on r live replicas, byte for byte.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ferry/common/rng.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/rpc/server.h"
#include "ferry/sim/runtime.h"
#include "ferry/tailwind/backup.h"
#include "ferry/tailwind/format.h"
#include "ferry/tailwind/replicated_log.h"
#include "tailwind/tailwind_test_util.h"

namespace ferry::sim::tailwind_log {
namespace {

using tailwind::Backup;
using tailwind::BackupLink;
using tailwind::ReplicatedLog;
using tailwind::Replication;

constexpr uint64_t kLogId = 7;
constexpr size_t kSegmentBytes = 16 << 10;
constexpr uint64_t kMaxSteps = 50'000'000;

struct WorldOptions {
  Replication mode = Replication::kTailwind;
  uint32_t backups = 4;
  bool flush_in_background = false;
  uint64_t storage_write_mb_per_s = 500;  // with 16 KiB buffers: every buffer may be unflushed
  uint32_t power_holdup_ms = 100;
  double drop = 0.0;  // packet loss on the fabric
};

using tailwind::testing::BackupHost;

// One primary, `backups` backup hosts, one log; everything a fiber or the
// engine of one SimRuntime.
class World {
 public:
  World(uint64_t seed, const WorldOptions& o) : options_(o), runtime_(clock_, seed), rng_(seed ^ 0x7a11) {
    dir_ = tailwind::testing::make_temp_dir("sim-log");
    nic::EngineOptions eo;
    eo.threaded = false;
    eo.clock = &clock_;
    eo.faults.seed = seed;
    eo.faults.drop = o.drop;
    engine_ = std::make_unique<nic::Engine>(eo);
    runtime_.set_step_engine([this] { return engine_->step(); });
    runtime_.set_next_deadline([this] {
      const uint64_t d = engine_->next_deadline_ns();
      return d == UINT64_MAX ? 0 : d;
    });
    primary_nic_ = engine_->add_nic({.name = "primary"}).value();
    for (uint32_t i = 0; i < o.backups; ++i) add_backup(i);
    std::vector<BackupLink*> links;
    for (auto& h : hosts_) {
      auto l = BackupLink::connect(*engine_, *primary_nic_, *h->backup, *h->server, kLogId,
                                   o.mode == Replication::kTailwind);
      EXPECT_TRUE(l.ok()) << l.status().to_string();
      links.push_back(l->get());
      links_.push_back(std::move(l).value());
    }
    tailwind::LogOptions lo;
    lo.log_id = kLogId;
    lo.segment_bytes = kSegmentBytes;
    lo.replicas = 3;
    lo.replication = o.mode;
    lo.seed = seed;
    lo.runtime = &runtime_;
    lo.replication_timeout_ms = 200;
    lo.open_wait_ms = 2000;
    // The coordinator's record of each segment's version, which
    // set_coordinator_down makes unreachable.
    lo.on_version = [this](uint64_t segment_id, uint64_t version) {
      if (coordinator_down_) return unavailable("the coordinator cannot be reached");
      uint64_t& v = versions_[segment_id];
      v = std::max(v, version);
      return ok_status();
    };
    log_ = ReplicatedLog::create(*primary_nic_, links, lo).value();
  }

  ~World() {
    // The log's destructor drains completions through the runtime: a fiber.
    Thread closer = runtime_.spawn("teardown", "primary", [this] { log_.reset(); });
    closer.join();
    for (auto& h : hosts_) h->server->stop();
    links_.clear();
    for (auto& h : hosts_) h->server.reset();
    for (auto& h : hosts_) h->backup.reset();
    engine_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  SimRuntime& runtime() { return runtime_; }
  ReplicatedLog& log() { return *log_; }
  void set_coordinator_down(bool down) { coordinator_down_ = down; }
  bool coordinator_down() const { return coordinator_down_; }
  Backup& backup(size_t i) { return *hosts_[i]->backup; }
  Rng& rng() { return rng_; }

  // Backup i is unreachable (every packet to or from its NIC is lost) until heal().
  void cut_backup(size_t i) {
    const uint32_t address = hosts_[i]->nic->address();
    engine_->fabric().set_tap([address](const nic::Packet& p) { return p.src_nic == address || p.dst_nic == address; });
  }
  void heal() { engine_->fabric().set_tap({}); }

  // Runs fn in a fiber (what blocks on the log's or a backup's locks must) to its end.
  void in_fiber(const std::function<void()>& fn) {
    Thread t = runtime_.spawn("checker", "primary", fn);
    t.join();
  }

  // Runs the fibers to their end; a deadlock fails the test with the report.
  void join_all(std::vector<Thread>& threads) {
    for (Thread& t : threads) t.join();
  }

 private:
  void add_backup(uint32_t i) {
    auto h = std::make_unique<BackupHost>();
    h->domain = std::make_unique<pm::PersistenceDomain>();
    nic::NicOptions no;
    no.name = "backup-" + std::to_string(i);
    no.memory = h->domain.get();
    h->nic = engine_->add_nic(no).value();
    tailwind::BackupOptions bo;
    bo.name = no.name;
    bo.buffer_bytes = kSegmentBytes;
    bo.buffers = 8;
    bo.media = tailwind::BufferMedia::kPm;
    bo.pm_path = dir_ + "/" + no.name + ".pm";
    bo.storage_dir = dir_ + "/" + no.name + "-storage";
    bo.storage_write_mb_per_s = options_.storage_write_mb_per_s;
    bo.power_holdup_ms = options_.power_holdup_ms;
    bo.flush_in_background = options_.flush_in_background;
    bo.flush_chunk_bytes = 4096;  // the flusher yields between pieces
    bo.runtime = &runtime_;
    auto b = Backup::create(*h->nic, h->domain.get(), bo);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    h->backup = std::move(b).value();
    rpc::ServerOptions so;
    so.mode = rpc::Mode::kRawRpc;
    so.workers = 1;
    so.threaded = true;  // a fiber
    so.runtime = &runtime_;
    so.max_request_bytes = 8192;
    so.buffer_bytes = 16 << 10;
    so.buffers = 16;
    so.max_response_bytes = 64 << 10;
    h->server = rpc::Server::create(*engine_, *h->nic, so).value();
    EXPECT_TRUE(h->backup->register_rpcs(*h->server).ok());
    EXPECT_TRUE(h->server->start().ok());
    hosts_.push_back(std::move(h));
  }

  WorldOptions options_;
  FakeClock clock_;
  SimRuntime runtime_;
  Rng rng_;
  std::string dir_;
  std::unique_ptr<nic::Engine> engine_;
  nic::Nic* primary_nic_ = nullptr;
  std::vector<std::unique_ptr<BackupHost>> hosts_;
  std::vector<std::unique_ptr<BackupLink>> links_;
  std::unique_ptr<ReplicatedLog> log_;
  bool coordinator_down_ = false;
  std::map<uint64_t, uint64_t> versions_;
};

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// What the appenders were told: key -> value of every acknowledged append.
struct Acked {
  std::map<std::string, std::string> objects;
  std::vector<std::string> order;  // keys in acknowledgement order (the digest's input)
  int errors = 0;
};

// An appender fiber: `count` objects of 150-600 B, keys unique to it.
Thread spawn_appender(World& w, const std::string& name, int count, Acked& acked) {
  return w.runtime().spawn(name, "primary", [&w, name, count, &acked] {
    for (int i = 0; i < count; ++i) {
      const std::string key = name + "-" + std::to_string(i);
      const std::string value(150 + w.rng().below(450), static_cast<char>('a' + i % 26));
      auto pos = w.log().append_object(1, static_cast<uint64_t>(i + 1), bytes_of(key), bytes_of(value));
      if (!pos.ok()) {
        ADD_FAILURE() << name << " append " << i << ": " << pos.status().to_string();
        ++acked.errors;
        return;
      }
      acked.objects[key] = value;
      acked.order.push_back(key);
    }
  });
}

// Two appender fibers, "a" and "b", of `each` objects.
std::vector<Thread> spawn_appenders(World& w, int each, Acked& acked) {
  std::vector<Thread> fibers;
  fibers.push_back(spawn_appender(w, "a", each, acked));
  fibers.push_back(spawn_appender(w, "b", each, acked));
  return fibers;
}

// Checked in a fiber at the end of a run: every segment has 3 replicas, none
// on an excluded backup, each holding the primary's bytes (the open
// segment's buffer, a closed segment's stored copy), and the log's entries
// are exactly the acknowledged objects.
void check_replicas(World& w, const Acked& acked, int excluded, const std::string& where) {
  std::map<std::string, std::string> found;
  const auto ids = w.log().segment_ids();
  for (uint64_t id : ids) {
    const auto primary = w.log().segment(id);
    const auto replicas = w.log().replicas_of(id);
    EXPECT_EQ(replicas.size(), 3u) << where << " segment " << id;
    for (size_t b : replicas) {
      EXPECT_NE(static_cast<int>(b), excluded) << where << " segment " << id << " still on the failed backup";
      Backup& backup = w.backup(b);
      if (id == w.log().open_segment_id()) {
        const auto buffer = backup.buffer(kLogId, id);
        ASSERT_GE(buffer.size(), primary.size()) << where;
        EXPECT_TRUE(std::equal(primary.begin(), primary.end(), buffer.begin()))
            << where << " open segment " << id << " on " << backup.options().name;
      } else {
        auto stored = backup.read(kLogId, id, /*closed=*/true, 0, kSegmentBytes);
        ASSERT_TRUE(stored.ok()) << where << " " << stored.status().to_string();
        EXPECT_TRUE(std::equal(primary.begin(), primary.end(), stored->begin(), stored->end()))
            << where << " closed segment " << id << " on " << backup.options().name;
      }
    }
    const Status scanned = tailwind::for_each_entry(primary, [&](const tailwind::Entry& e) {
      if (e.type == tailwind::EntryType::kObject) {
        found[std::string(e.key.begin(), e.key.end())] = std::string(e.value.begin(), e.value.end());
      }
    });
    EXPECT_TRUE(scanned.ok()) << where << " " << scanned.to_string();
  }
  EXPECT_EQ(found, acked.objects) << where;
}

uint32_t seeds_to_run() {
  const char* env = std::getenv("FERRY_TAILWIND_SIM_SEEDS");
  return env != nullptr ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : 30;
}

class TailwindLogSim : public ::testing::TestWithParam<Replication> {
 protected:
  WorldOptions options() const {
    WorldOptions o;
    o.mode = GetParam();
    return o;
  }
  std::string label(uint64_t seed) const {
    return std::string(tailwind::replication_name(GetParam())) + " seed " + std::to_string(seed);
  }
};

// W12: two appenders meet at every roll; one waits while the other closes the
// segment (the closer waits for its WRITEs without the log's lock).
TEST_P(TailwindLogSim, TwoAppendersAcrossRollsEveryAckedAppendOnThreeReplicas) {
  for (uint64_t seed = 1; seed <= seeds_to_run(); ++seed) {
    SCOPED_TRACE(label(seed));
    WorldOptions o = options();
    World w(seed, o);
    Acked acked;
    std::vector<Thread> fibers = spawn_appenders(w, 60, acked);
    w.join_all(fibers);
    ASSERT_EQ(acked.errors, 0);
    EXPECT_GE(w.log().counters().segments_closed, 2u) << "the run must roll segments";
    w.in_fiber([&] { check_replicas(w, acked, -1, label(seed)); });
  }
}

// A backup is declared failed in the middle of an append (WRITEs posted, not
// all acknowledged): its replicas are replaced, the version moves on, and
// nothing acknowledged is missing from the new replicas.
TEST_P(TailwindLogSim, ABackupDeclaredFailedMidAppendIsReplaced) {
  int struck_mid_append = 0;
  for (uint64_t seed = 1; seed <= seeds_to_run(); ++seed) {
    SCOPED_TRACE(label(seed));
    WorldOptions o = options();
    World w(seed, o);
    Acked acked;
    std::vector<Thread> fibers = spawn_appenders(w, 50, acked);
    int victim = -1;
    fibers.push_back(w.runtime().spawn("control", "control", [&] {
      const uint64_t after = 10 + w.rng().below(40);
      while (w.log().counters().appends < after) w.runtime().idle();
      const auto replicas = w.log().replicas_of(w.log().open_segment_id());
      if (replicas.empty()) return;
      victim = static_cast<int>(replicas[w.rng().below(replicas.size())]);
      const auto c = w.log().counters();
      if (c.writes_posted + c.rpcs_sent > 0) ++struck_mid_append;
      const Status failed = w.log().backup_failed(static_cast<size_t>(victim));
      EXPECT_TRUE(failed.ok()) << failed.to_string();
    }));
    w.join_all(fibers);
    ASSERT_EQ(acked.errors, 0);
    ASSERT_GE(victim, 0);
    EXPECT_GE(w.log().counters().replicas_recreated, 1u);
    w.in_fiber([&] { check_replicas(w, acked, victim, label(seed)); });
  }
  EXPECT_GT(struck_mid_append, 0);
}

// A backup is declared failed while an append's WRITEs are in flight and the
// coordinator cannot be reached: the repair re-creates the replica at a new
// version it cannot report. That append must not be acknowledged until the
// coordinator knows the version (a recovery that found only the copy left
// on the failed backup would take it for current and lose the append); the
// appends that start later check the report first and fail too. Nothing is
// acknowledged while the coordinator is down; everything after it is back.
TEST_P(TailwindLogSim, NoAppendIsAcknowledgedWhileARepairsVersionIsUnreported) {
  int caught_in_flight = 0;
  for (uint64_t seed = 1; seed <= seeds_to_run(); ++seed) {
    SCOPED_TRACE(label(seed));
    World w(seed, options());
    int acked_while_down = 0, failed_while_down = 0, acked_after = 0;
    bool in_flight = false;
    std::vector<Thread> fibers;
    fibers.push_back(w.runtime().spawn("appender", "primary", [&] {
      for (int i = 0; i < 2000 && acked_after < 5; ++i) {
        const std::string key = "k-" + std::to_string(i);
        auto pos =
            w.log().append_object(1, static_cast<uint64_t>(i + 1), bytes_of(key), bytes_of(std::string(300, 'v')));
        if (pos.ok() && w.coordinator_down()) ++acked_while_down;
        if (!pos.ok() && w.coordinator_down()) ++failed_while_down;
        if (pos.ok() && !w.coordinator_down() && failed_while_down > 0) ++acked_after;
        if (!pos.ok() && !w.coordinator_down()) ADD_FAILURE() << "append " << i << ": " << pos.status().to_string();
        if (!pos.ok()) w.runtime().sleep_for_ns(100'000);  // a client backs off
      }
    }));
    fibers.push_back(w.runtime().spawn("control", "control", [&] {
      const uint64_t start = 5 + w.rng().below(20);
      while (w.log().counters().appends < start) w.runtime().idle();
      // Right after an append posted its WRITEs: it waits for them now.
      const uint64_t posted = w.log().counters().appends;
      while (w.log().counters().appends == posted) w.runtime().idle();
      in_flight = true;
      const auto replicas = w.log().replicas_of(w.log().open_segment_id());
      w.set_coordinator_down(true);
      (void)w.log().backup_failed(replicas[w.rng().below(replicas.size())]);
      w.runtime().sleep_for_ns(2'000'000);
      w.set_coordinator_down(false);
    }));
    w.join_all(fibers);
    caught_in_flight += in_flight;
    EXPECT_EQ(acked_while_down, 0) << "appends acknowledged while the repaired segment's version was unreported";
    EXPECT_GT(failed_while_down, 0) << "the appender never met the outage";
    EXPECT_GT(acked_after, 0) << "nothing was acknowledged once the coordinator was back";
  }
  EXPECT_GT(caught_in_flight, 0);
}

// W16: a backup declared failed comes back while the frees of the replicas
// dropped there are in flight; backup_returned waits for them (polling
// through the runtime, so the engine and the backup's worker run) and the
// backup takes replicas again.
TEST_P(TailwindLogSim, ABackupDeclaredFailedAndBackTakesReplicasAgain) {
  int taken_again = 0;
  uint64_t orphans_freed = 0;
  for (uint64_t seed = 1; seed <= seeds_to_run(); ++seed) {
    SCOPED_TRACE(label(seed));
    WorldOptions o = options();
    World w(seed, o);
    Acked acked;
    std::vector<Thread> fibers;
    fibers.push_back(spawn_appender(w, "a", 120, acked));
    int victim = -1;
    fibers.push_back(w.runtime().spawn("control", "control", [&] {
      while (w.log().counters().appends < 5) w.runtime().idle();
      victim = static_cast<int>(w.log().replicas_of(w.log().open_segment_id()).at(0));
      // It is unreachable, so it is declared failed; the next roll sends the
      // frees of what was dropped there, and they are lost on the way and
      // wait for a retransmission when it is reachable again and declared
      // back: backup_returned must let the engine's timers run meanwhile.
      w.cut_backup(static_cast<size_t>(victim));
      ASSERT_TRUE(w.log().backup_failed(static_cast<size_t>(victim)).ok());
      const uint64_t opened = w.log().counters().segments_opened;
      while (w.log().counters().segments_opened == opened && w.log().counters().appends < 120) w.runtime().idle();
      w.heal();
      const Status back = w.log().backup_returned(static_cast<size_t>(victim));
      EXPECT_TRUE(back.ok()) << back.to_string();
    }));
    w.join_all(fibers);
    ASSERT_EQ(acked.errors, 0);
    ASSERT_GE(victim, 0);
    const std::vector<uint64_t> before = w.log().segment_ids();
    // More appends after the return: with four backups and r = 3 the
    // returned one is a candidate for every new segment again.
    Acked more;
    std::vector<Thread> after;
    after.push_back(spawn_appender(w, "c", 80, more));
    w.join_all(after);
    ASSERT_EQ(more.errors, 0);
    for (auto& [k, v] : more.objects) acked.objects[k] = v;
    w.in_fiber([&] { check_replicas(w, acked, -1, label(seed)); });
    for (uint64_t id : w.log().segment_ids()) {
      if (std::find(before.begin(), before.end(), id) != before.end()) continue;
      const auto replicas = w.log().replicas_of(id);
      if (std::find(replicas.begin(), replicas.end(), static_cast<size_t>(victim)) != replicas.end()) {
        ++taken_again;
        break;
      }
    }
    orphans_freed += w.log().counters().orphans_freed;
  }
  EXPECT_GT(taken_again, 0) << "the returned backup never took a replica again";
  EXPECT_GT(orphans_freed, 0u) << "no replica dropped on the failed backup was freed there";
}

// W5: the backups may hold one unflushed buffer each (slow storage) and their
// flushers run rarely (a slow disk): opening a segment waits for a flush and
// tries again; every append still lands on three replicas.
TEST_P(TailwindLogSim, BackpressureFromSlowFlushersDefersOpensButLosesNothing) {
  uint64_t deferred = 0;
  for (uint64_t seed = 1; seed <= seeds_to_run(); ++seed) {
    SCOPED_TRACE(label(seed));
    WorldOptions o = options();
    o.flush_in_background = true;
    o.storage_write_mb_per_s = 1;  // 1 MB/s x 10 ms holdup < one 16 KiB buffer: one unflushed buffer per backup
    o.power_holdup_ms = 10;
    World w(seed, o);
    for (int b = 0; b < 4; ++b) w.runtime().set_host_weight("backup-" + std::to_string(b) + "/storage", 0.02);
    Acked acked;
    std::vector<Thread> fibers;
    fibers.push_back(spawn_appender(w, "a", 200, acked));
    w.join_all(fibers);
    ASSERT_EQ(acked.errors, 0);
    deferred += w.log().counters().opens_deferred;
    w.in_fiber([&] {
      for (int b = 0; b < 4; ++b) w.backup(static_cast<size_t>(b)).wait_flushed();
      check_replicas(w, acked, -1, label(seed));
    });
  }
  EXPECT_GT(deferred, 0u) << "the unflushed limit never deferred an open";
}

// Packet loss: RC retransmits on the engine's virtual timers; nothing is lost.
TEST_P(TailwindLogSim, ALossyFabricStillReplicatesEveryAppend) {
  for (uint64_t seed = 1; seed <= seeds_to_run() / 2 + 1; ++seed) {
    SCOPED_TRACE(label(seed));
    WorldOptions o = options();
    o.drop = 0.01;
    World w(seed, o);
    Acked acked;
    std::vector<Thread> fibers = spawn_appenders(w, 40, acked);
    w.join_all(fibers);
    ASSERT_EQ(acked.errors, 0);
    w.in_fiber([&] { check_replicas(w, acked, -1, label(seed)); });
  }
}

// Same seed, same run: the schedule's digest and the acknowledgement order.
TEST_P(TailwindLogSim, TheSameSeedReplaysTheSameRun) {
  auto run = [&](uint64_t seed) {
    WorldOptions o = options();
    o.drop = 0.005;
    World w(seed, o);
    Acked acked;
    std::vector<Thread> fibers = spawn_appenders(w, 40, acked);
    w.join_all(fibers);
    return std::make_pair(w.runtime().trace_digest(), acked.order);
  };
  const auto first = run(21);
  const auto second = run(21);
  EXPECT_EQ(first.first, second.first);
  EXPECT_EQ(first.second, second.second);
  EXPECT_NE(first.first, run(22).first);
}

INSTANTIATE_TEST_SUITE_P(Modes, TailwindLogSim, ::testing::Values(Replication::kTailwind, Replication::kRpc),
                         [](const auto& info) { return std::string(tailwind::replication_name(info.param)); });

}  // namespace
}  // namespace ferry::sim::tailwind_log
