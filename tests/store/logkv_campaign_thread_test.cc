// The Tailwind/LogKv campaign (issue 26): "Tailwind with crashes
// mid-WRITE, backups down and back, partitions of an old primary, cleaning
// on", on LogKv in one process (threaded engine), with every client
// history checked for linearizability.
//
// Each seed builds a cluster of five servers (r = 2, 64 KB segments, PM
// backups, the background cleaner every 5 ms) in the replication mode the
// seed picks, and runs four client threads on ten hot keys: PUTs,
// conditional PUTs (at the version the client last saw), DELETEs (some
// conditional) and GETs. Meanwhile a control thread injects three to five
// faults chosen by the seed, one at a time, at random moments:
//
//   crash      a server stops at once, its appends in flight half done
//              (Cluster::crash_server), then its tablets are recovered;
//   partition  the coordinator loses a server (Cluster::partition_server)
//              and recovers its tablets elsewhere while it runs on and
//              keeps serving clients with an old map; then it is stopped;
//   backup     a server's backup is declared failed (every other log
//              replaces its replicas there) and, a while later, back;
//   both       a backup down, a primary crashed meanwhile (the copies it
//              left on the backup are never freed), the backup back, then
//              the recovery, which meets those copies.
//
// At most two servers are lost for good, so every log keeps r + 1 live
// servers. After the faults the clients stop, a fresh client reads every
// key, and the whole history -- operations whose outcome a client never
// learnt recorded as pending (tests/support/linearizability.h) -- must be
// linearizable: no acknowledged write lost, no deleted or overwritten value
// back, no stale read. Clients never resend a write whose outcome is
// unknown (ClientOptions::retry_unknown_writes = false).
//
// Size: FERRY_TAILWIND_SEEDS seeds (default 4: about 10 s in the release
// build; scripts/run-tests.sh runs 1 under ASan; the full campaign is 200),
// from FERRY_SEED (default 1; base 0, so hex works). A failure names its
// seed: rerun with FERRY_SEED=<seed> FERRY_TAILWIND_SEEDS=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ferry/common/rng.h"
#include "ferry/store/logkv.h"
#include "linearizability.h"
#include "test_seed.h"

namespace ferry::store::logkv {
namespace logkv_campaign_test {

using ferry::testing::KvOp;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void sleep_ms(uint64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

constexpr int kClients = 4;
constexpr uint64_t kKeys = 10;
constexpr uint32_t kServers = 5;
constexpr uint32_t kReplicas = 2;

std::string key_name(uint64_t k) { return "hot-" + std::to_string(k); }

// A value names the PUT that wrote it: 8 bytes of id, then padding.
std::string value_of(uint64_t id, size_t padding) {
  std::string v(8 + padding, static_cast<char>('a' + id % 26));
  std::memcpy(v.data(), &id, 8);
  return v;
}
std::optional<uint64_t> id_of(const std::vector<uint8_t>& value) {
  if (value.size() < 8) return std::nullopt;
  uint64_t id = 0;
  std::memcpy(&id, value.data(), 8);
  return id;
}

struct Figures {
  uint64_t ops = 0;        // recorded
  uint64_t pending = 0;    // ... whose outcome the client never learnt
  uint64_t crashes = 0;
  uint64_t partitions = 0;
  uint64_t backups_down = 0;
  uint64_t recoveries = 0;
  uint64_t torn_replicas = 0;  // recoveries' open replicas with a torn tail
  uint64_t segments_cleaned = 0;
  uint64_t states = 0;     // the checker's search states

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
void run_client(Client& client, uint64_t table, uint32_t session, uint64_t seed, const std::atomic<bool>& stop,
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
std::vector<uint32_t> live_servers(Cluster& cluster) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < cluster.servers(); ++i) {
    if (cluster.alive(i)) out.push_back(i);
  }
  return out;
}

::testing::AssertionResult recover(Cluster& cluster, uint32_t server, Figures* f) {
  auto rec = cluster.recover_server(server);
  if (!rec.ok()) {
    return ::testing::AssertionFailure() << "recovering server " << server << ": " << rec.status().to_string();
  }
  ++f->recoveries;
  f->torn_replicas += rec->log.torn_open;
  return ::testing::AssertionSuccess();
}

// The faults of one seed, one at a time.
::testing::AssertionResult inject_faults(Cluster& cluster, Rng& rng, Figures* f) {
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
        std::this_thread::yield();
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
    } else {  // a backup down for a while, then back
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

// One seed; records its figures, or fails the test naming the seed.
void run_seed(uint64_t seed, Figures* total) {
  SCOPED_TRACE("FERRY_SEED=" + std::to_string(seed) + " FERRY_TAILWIND_SEEDS=1");
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
  auto cluster = Cluster::create(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
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
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      run_client(**client, *table, static_cast<uint32_t>(t), seed * 1000 + static_cast<uint64_t>(t), stop,
                 &histories[t]);
    });
  }
  const auto faults = inject_faults(**cluster, rng, &f);
  sleep_ms(50);  // the clients go on after the last fault
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_TRUE(faults);

  // A fresh client reads every key: every acknowledged write must be there.
  std::vector<KvOp> history;
  for (auto& h : histories) history.insert(history.end(), h.begin(), h.end());
  auto reader = Client::create(**cluster);
  ASSERT_TRUE(reader.ok());
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
  for (uint32_t i = 0; i < (*cluster)->servers(); ++i) {
    if ((*cluster)->alive(i)) f.segments_cleaned += (*cluster)->server(i).counters().segments_cleaned;
  }
  f.ops = history.size();
  for (const KvOp& op : history) f.pending += !op.complete_ns.has_value();
  const auto verdict = ferry::testing::check_kv_history(history);
  f.states = verdict.states_explored;
  EXPECT_TRUE(verdict.ok) << ferry::testing::verdict_name(verdict.verdict) << ": " << verdict.explanation;
  std::printf("seed %llu (%s): %llu ops (%llu pending), %llu crashes, %llu partitions, %llu backups down and back, "
              "%llu recoveries (%llu torn replicas), %llu segments cleaned: %s\n",
              static_cast<unsigned long long>(seed),
              std::string(tailwind::replication_name(o.server.replication)).c_str(),
              static_cast<unsigned long long>(f.ops), static_cast<unsigned long long>(f.pending),
              static_cast<unsigned long long>(f.crashes), static_cast<unsigned long long>(f.partitions),
              static_cast<unsigned long long>(f.backups_down), static_cast<unsigned long long>(f.recoveries),
              static_cast<unsigned long long>(f.torn_replicas), static_cast<unsigned long long>(f.segments_cleaned),
              ferry::testing::verdict_name(verdict.verdict));
  std::fflush(stdout);  // a long campaign shows its progress
  *total += f;
}

TEST(TailwindCampaign, CrashesPartitionsBackupsDownAndCleaningKeepEveryHistoryLinearizable) {
  const ferry::testing::SeedRange range = ferry::testing::seed_range("FERRY_TAILWIND_SEEDS", 1, 4);
  const uint64_t first = range.first;
  const uint64_t seeds = range.count;
  Figures total;
  uint64_t ran = 0;
  for (uint64_t s = first; s < first + seeds && !HasFailure(); ++s, ++ran) run_seed(s, &total);
  std::printf("campaign: %llu seeds, %llu operations checked (%llu pending), %llu crashes, %llu partitions, "
              "%llu backups down and back, %llu recoveries (%llu torn replicas met), %llu segments cleaned, "
              "%llu checker states; violations: %s\n",
              static_cast<unsigned long long>(ran), static_cast<unsigned long long>(total.ops),
              static_cast<unsigned long long>(total.pending), static_cast<unsigned long long>(total.crashes),
              static_cast<unsigned long long>(total.partitions), static_cast<unsigned long long>(total.backups_down),
              static_cast<unsigned long long>(total.recoveries), static_cast<unsigned long long>(total.torn_replicas),
              static_cast<unsigned long long>(total.segments_cleaned), static_cast<unsigned long long>(total.states),
              HasFailure() ? "see above" : "none");
}

}  // namespace logkv_campaign_test
}  // namespace ferry::store::logkv
