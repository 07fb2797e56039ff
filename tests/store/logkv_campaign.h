// The Tailwind/LogKv campaign (issue 26), shared by the threaded run
// (tests/store/logkv_campaign_thread_test.cc: real threads, a threaded
// engine) and the simulated one (tests/sim/logkv_cluster_sim_test.cc: the
// same code as fibers of one SimRuntime on a virtual clock). What it runs and
// checks is described in the threaded test's header.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ferry/common/rng.h"
#include "ferry/common/runtime.h"
#include "ferry/store/logkv.h"
#include "linearizability.h"

namespace ferry::store::logkv {
namespace logkv_campaign {

using ferry::testing::KvOp;

// What the campaign runs on: real threads and the steady clock, or the
// simulator's fibers and virtual clock. Set by run_seed for its seed.
inline Runtime* g_runtime = &Runtime::threads();

inline uint64_t now_ns() { return g_runtime->clock().now_ns(); }
inline void sleep_ms(uint64_t ms) { g_runtime->sleep_for_ns(ms * 1'000'000); }

inline std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

inline constexpr int kClients = 4;
inline constexpr uint64_t kKeys = 10;
inline constexpr uint32_t kServers = 5;
inline constexpr uint32_t kReplicas = 2;

inline std::string key_name(uint64_t k) { return "hot-" + std::to_string(k); }

// A value names the PUT that wrote it: 8 bytes of id, then padding.
inline std::string value_of(uint64_t id, size_t padding) {
  std::string v(8 + padding, static_cast<char>('a' + id % 26));
  std::memcpy(v.data(), &id, 8);
  return v;
}
inline std::optional<uint64_t> id_of(const std::vector<uint8_t>& value) {
  if (value.size() < 8) return std::nullopt;
  uint64_t id = 0;
  std::memcpy(&id, value.data(), 8);
  return id;
}

struct Figures {
  uint64_t ops = 0;      // recorded
  uint64_t pending = 0;  // ... whose outcome the client never learnt
  uint64_t crashes = 0;
  uint64_t partitions = 0;
  uint64_t backups_down = 0;
  uint64_t recoveries = 0;
  uint64_t torn_replicas = 0;  // recoveries' open replicas with a torn tail
  uint64_t segments_cleaned = 0;
  uint64_t states = 0;  // the checker's search states

  Figures& operator+=(const Figures& o) {
    ops += o.ops;
    pending += o.pending;
    crashes += o.crashes;
    partitions += o.partitions;
    backups_down += o.backups_down;
    recoveries += o.recoveries;
    torn_replicas += o.torn_replicas;
    segments_cleaned += o.segments_cleaned;
    states += o.states;
    return *this;
  }
};

// One client thread: random operations on the hot keys until `stop`.
inline void run_client(Client& client, uint64_t table, uint32_t session, uint64_t seed, const std::atomic<bool>& stop,
                       std::vector<KvOp>* history) {
  Rng rng(seed);
  std::map<uint64_t, uint64_t> seen;  // key -> the version this client last saw (0: absent)
  uint64_t next = 1;
  while (!stop.load()) {
    const uint64_t k = rng.below(kKeys);
    const std::string key = key_name(k);
    const uint64_t roll = rng.below(100);
    const uint64_t t0 = now_ns();
    bool unknown = false;
    if (roll < 50) {  // PUT, conditional one time in three
      const uint64_t id = (uint64_t{session + 1} << 40) | next++;
      std::optional<uint64_t> expected;
      if (roll >= 35) expected = seen.count(k) != 0 ? seen[k] : 0;
      // Mostly small values; one in eight of 6-8 packets (a WRITE a crash can tear).
      const size_t padding = rng.below(8) == 0 ? 20000 + rng.below(10000) : rng.below(600);
      auto v = client.put(session, table, as_bytes(key), as_bytes(value_of(id, padding)), expected);
      if (v.ok()) {
        history->push_back(KvOp::put(session, k, id, t0, now_ns()));
        seen[k] = *v;
      } else if (v.status().code() != Code::kFailedPrecondition) {  // a version mismatch changed nothing
        history->push_back(KvOp::put(session, k, id, t0, std::nullopt));
        unknown = true;
      }
    } else if (roll < 60) {  // DELETE, conditional one time in two
      std::optional<uint64_t> expected;
      if (roll >= 55 && seen.count(k) != 0) expected = seen[k];
      const Status st = client.remove(session, table, as_bytes(key), expected);
      if (st.ok()) {
        history->push_back(KvOp::remove(session, k, t0, now_ns()));
        seen[k] = 0;
      } else if (st.code() == Code::kNotFound) {  // it was absent: a read
        history->push_back(KvOp::get(session, k, std::nullopt, t0, now_ns()));
        seen[k] = 0;
      } else if (st.code() != Code::kFailedPrecondition) {
        history->push_back(KvOp::remove(session, k, t0, std::nullopt));
        unknown = true;
      }
    } else {  // GET
      auto got = client.get(session, table, as_bytes(key));
      if (got.ok()) {
        history->push_back(KvOp::get(session, k, id_of(got->value), t0, now_ns()));
        seen[k] = got->version;
      } else if (got.status().code() == Code::kNotFound) {
        history->push_back(KvOp::get(session, k, std::nullopt, t0, now_ns()));
        seen[k] = 0;
      }  // else: a read whose outcome is unknown constrains nothing
    }
    if (unknown) sleep_ms(5);  // a server is down: do not hammer it
  }
}

// The servers the coordinator counts as live.
inline std::vector<uint32_t> live_servers(Cluster& cluster) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < cluster.servers(); ++i) {
    if (cluster.alive(i)) out.push_back(i);
  }
  return out;
}

inline ::testing::AssertionResult recover(Cluster& cluster, uint32_t server, Figures* f) {
  auto rec = cluster.recover_server(server);
  if (!rec.ok()) {
    return ::testing::AssertionFailure() << "recovering server " << server << ": " << rec.status().to_string();
  }
  ++f->recoveries;
  f->torn_replicas += rec->log.torn_open;
  return ::testing::AssertionSuccess();
}

// The faults of one seed, one at a time.
inline ::testing::AssertionResult inject_faults(Cluster& cluster, Rng& rng, Figures* f) {
  const uint64_t faults = 3 + rng.below(3);
  uint32_t lost = 0;  // servers gone for good
  for (uint64_t n = 0; n < faults; ++n) {
    sleep_ms(20 + rng.below(80));
    const std::vector<uint32_t> live = live_servers(cluster);
    const uint32_t victim = live[rng.below(live.size())];
    uint64_t kind = rng.below(4);
    if (kind == 3 && lost != 0) kind = 0;  // a backup down and a crash: only with every server up
    if (kind < 2 && (lost >= kServers - (kReplicas + 1) || live.size() <= kReplicas + 1)) kind = 2;
    if (kind == 3) {  // a backup down; meanwhile a primary crashes; the backup is back; the recovery
      uint32_t down = live[rng.below(live.size())];
      if (down == victim) down = live[(std::find(live.begin(), live.end(), victim) - live.begin() + 1) % live.size()];
      (void)cluster.declare_backup_failed(down);
      ++f->backups_down;
      sleep_ms(10 + rng.below(60));  // the victim's cleaner frees segments it left copies of there
      const Status st = cluster.crash_server(victim);
      if (!st.ok()) return ::testing::AssertionFailure() << "crashing server " << victim << ": " << st.to_string();
      ++f->crashes;
      ++lost;
      const Status back = cluster.declare_backup_back(down);
      if (!back.ok()) {
        return ::testing::AssertionFailure() << "taking back server " << down << "'s backup: " << back.to_string();
      }
      if (auto r = recover(cluster, victim, f); !r) return r;
    } else if (kind == 0) {  // crash mid-WRITE, then recovery
      // Right after one of its appends posted its WRITEs, if it makes one soon.
      const uint64_t before = cluster.server(victim).log().counters().appends;
      for (int spin = 0; spin < 20000 && cluster.server(victim).log().counters().appends == before; ++spin) {
        g_runtime->idle();
      }
      const Status st = cluster.crash_server(victim);
      if (!st.ok()) return ::testing::AssertionFailure() << "crashing server " << victim << ": " << st.to_string();
      ++f->crashes;
      ++lost;
      sleep_ms(rng.below(40));
      if (auto r = recover(cluster, victim, f); !r) return r;
    } else if (kind == 1) {  // an old primary partitioned away, still serving
      const Status st = cluster.partition_server(victim);
      if (!st.ok()) return ::testing::AssertionFailure() << "partitioning server " << victim << ": " << st.to_string();
      ++f->partitions;
      ++lost;
      sleep_ms(10 + rng.below(50));
      if (auto r = recover(cluster, victim, f); !r) return r;
      sleep_ms(10 + rng.below(60));  // it still serves whoever reaches it
      const Status stopped = cluster.crash_server(victim);
      if (!stopped.ok()) {
        return ::testing::AssertionFailure() << "stopping server " << victim << ": " << stopped.to_string();
      }
    } else {                                        // a backup down for a while, then back
      (void)cluster.declare_backup_failed(victim);  // a log that finds no other backup waits for it
      ++f->backups_down;
      sleep_ms(10 + rng.below(60));
      Status back = cluster.declare_backup_back(victim);
      for (int tries = 0; !back.ok() && tries < 20; ++tries) {
        sleep_ms(10);
        back = cluster.declare_backup_back(victim);
      }
      if (!back.ok()) {
        return ::testing::AssertionFailure() << "taking back server " << victim << "'s backup: " << back.to_string();
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// What run_seed runs on. Threads by default; the simulator passes its
// SimRuntime, makes the engine manual on its clock (configure) and hooks the
// cluster's engine to its scheduler (attach).
struct CampaignWorld {
  Runtime* runtime = &Runtime::threads();
  std::function<void(ClusterOptions&)> configure;
  std::function<void(Cluster&)> attach;
  std::string replay_hint = "FERRY_TAILWIND_SEEDS=1";
};

// One seed; records its figures, or fails the test naming the seed.
inline void run_seed(uint64_t seed, Figures* total, const CampaignWorld& world = {}) {
  SCOPED_TRACE("FERRY_SEED=" + std::to_string(seed) + " " + world.replay_hint);
  g_runtime = world.runtime;
  Runtime& rt = *world.runtime;
  Rng rng(seed);
  ClusterOptions o;
  o.servers = kServers;
  o.server.replicas = kReplicas;
  o.server.workers = 2;
  o.server.replication = rng.below(2) == 0 ? tailwind::Replication::kTailwind : tailwind::Replication::kRpc;
  o.server.segment_bytes = 64 << 10;
  o.server.backup_buffers = 32;
  o.server.clean_below = 0.6;
  o.clean_interval_ms = 5;
  o.server.max_request_bytes = 32 << 10;
  o.engine.rx_budget = 1;  // WRITEs placed over several engine passes: a crash can fall inside one
  if (rt.simulated()) o.server.runtime = &rt;
  if (world.configure) world.configure(o);
  auto cluster = Cluster::create(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
  if (world.attach) world.attach(**cluster);
  auto table = (*cluster)->create_table("hot");
  ASSERT_TRUE(table.ok());
  ClientOptions co;
  co.sessions = kClients;
  co.timeout_ns = 300'000'000ULL;
  co.max_attempts = 40;
  co.retry_unknown_writes = false;
  auto client = Client::create(**cluster, co);
  ASSERT_TRUE(client.ok());

  Figures f;
  std::atomic<bool> stop{false};
  std::vector<std::vector<KvOp>> histories(kClients);
  std::vector<Thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.push_back(rt.spawn("client-" + std::to_string(t), "clients", [&, t] {
      run_client(**client, *table, static_cast<uint32_t>(t), seed * 1000 + static_cast<uint64_t>(t), stop,
                 &histories[t]);
    }));
  }
  // The control (a fiber under the simulator: it holds the cluster's locks across waits).
  std::optional<::testing::AssertionResult> faults;
  Thread control = rt.spawn("control", "control", [&] {
    faults = inject_faults(**cluster, rng, &f);
    sleep_ms(50);  // the clients go on after the last fault
    stop = true;
  });
  control.join();
  for (auto& th : threads) th.join();
  EXPECT_TRUE(*faults);

  // A fresh client reads every key: every acknowledged write must be there.
  std::vector<KvOp> history;
  for (auto& h : histories) history.insert(history.end(), h.begin(), h.end());
  auto reader = Client::create(**cluster);
  ASSERT_TRUE(reader.ok());
  Thread reading = rt.spawn("reader", "clients", [&] {
    for (uint64_t k = 0; k < kKeys; ++k) {
      const uint64_t t0 = now_ns();
      auto got = (*reader)->get(0, *table, as_bytes(key_name(k)));
      if (got.ok()) {
        history.push_back(KvOp::get(kClients, k, id_of(got->value), t0, now_ns()));
      } else {
        EXPECT_EQ(got.status().code(), Code::kNotFound) << key_name(k) << ": " << got.status().to_string();
        history.push_back(KvOp::get(kClients, k, std::nullopt, t0, now_ns()));
      }
    }
  });
  reading.join();
  for (uint32_t i = 0; i < (*cluster)->servers(); ++i) {
    if ((*cluster)->alive(i)) f.segments_cleaned += (*cluster)->server(i).counters().segments_cleaned;
  }
  f.ops = history.size();
  for (const KvOp& op : history) f.pending += !op.complete_ns.has_value();
  const auto verdict = ferry::testing::check_kv_history(history);
  f.states = verdict.states_explored;
  EXPECT_TRUE(verdict.ok) << ferry::testing::verdict_name(verdict.verdict) << ": " << verdict.explanation;
  std::printf(
      "seed %llu (%s): %llu ops (%llu pending), %llu crashes, %llu partitions, %llu backups down and back, "
      "%llu recoveries (%llu torn replicas), %llu segments cleaned: %s\n",
      static_cast<unsigned long long>(seed), std::string(tailwind::replication_name(o.server.replication)).c_str(),
      static_cast<unsigned long long>(f.ops), static_cast<unsigned long long>(f.pending),
      static_cast<unsigned long long>(f.crashes), static_cast<unsigned long long>(f.partitions),
      static_cast<unsigned long long>(f.backups_down), static_cast<unsigned long long>(f.recoveries),
      static_cast<unsigned long long>(f.torn_replicas), static_cast<unsigned long long>(f.segments_cleaned),
      ferry::testing::verdict_name(verdict.verdict));
  std::fflush(stdout);  // a long campaign shows its progress
  *total += f;
  g_runtime = &Runtime::threads();
}

}  // namespace logkv_campaign
}  // namespace ferry::store::logkv
