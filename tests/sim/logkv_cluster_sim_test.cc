// The Tailwind/LogKv campaign (tests/store/logkv_campaign.h: five servers,
// four clients on hot keys, crashes mid-WRITE, partitioned old primaries,
// backups down and back, the background cleaner, every history checked for
// linearizability) run by the simulator: the cluster's RPC workers, backup
// flushers, cleaner and recovery masters, the clients and the fault script
// are fibers of one SimRuntime on one OS thread, and the NICs are a manual
// engine the scheduler steps on a virtual clock
// (docs/tailwind-simulation-plan.md, commit 5).
//
// Size: FERRY_TAILWIND_SIM_SEEDS seeds (default 6) from FERRY_SEED (default 1).
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "ferry/sim/runtime.h"
#include "store/logkv_campaign.h"
#include "test_seed.h"

namespace ferry::store::logkv {
namespace logkv_campaign {
namespace {

size_t os_threads() {
  size_t n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

struct SimOutcome {
  uint64_t digest = 0;
  uint64_t end_ns = 0;
  size_t max_threads = 0;
};

// One seed of the campaign on a SimRuntime seeded with it.
SimOutcome run_simulated(uint64_t seed, Figures* total) {
  FakeClock clock;
  sim::SimRuntime rt(clock, seed);
  SimOutcome out;
  const size_t threads_before = os_threads();
  CampaignWorld world;
  world.runtime = &rt;
  world.replay_hint = "FERRY_TAILWIND_SIM_SEEDS=1 (sim_tests --gtest_filter=LogKvClusterSim.*)";
  world.configure = [&](ClusterOptions& o) {
    o.engine.threaded = false;
    o.engine.clock = &clock;
  };
  world.attach = [&](Cluster& cluster) {
    nic::Engine* engine = &cluster.engine();
    rt.set_step_engine([engine] { return engine->step(); });
    rt.set_next_deadline([engine] {
      const uint64_t d = engine->next_deadline_ns();
      return d == UINT64_MAX ? 0 : d;
    });
    // Sampled at every switch: the run never starts an OS thread.
    rt.set_trace([&](const std::string&) {
      if (rt.switches() % 4096 == 0) out.max_threads = std::max(out.max_threads, os_threads());
    });
  };
  run_seed(seed, total, world);
  out.digest = rt.trace_digest();
  out.end_ns = clock.now_ns();
  out.max_threads = std::max(out.max_threads, os_threads());
  EXPECT_LE(out.max_threads, threads_before) << "the simulated cluster started an OS thread";
  return out;
}

TEST(LogKvClusterSim, TheCampaignOnOneThreadKeepsEveryHistoryLinearizable) {
  const ferry::testing::SeedRange range = ferry::testing::seed_range("FERRY_TAILWIND_SIM_SEEDS", 1, 6);
  Figures total;
  uint64_t ran = 0;
  for (uint64_t s = range.first; s < range.first + range.count && !HasFailure(); ++s, ++ran) {
    const SimOutcome o = run_simulated(s, &total);
    std::printf("  seed %llu: %.1f ms of virtual time, digest %016llx\n", static_cast<unsigned long long>(s),
                static_cast<double>(o.end_ns) / 1e6, static_cast<unsigned long long>(o.digest));
  }
  std::printf(
      "simulated campaign: %llu seeds, %llu operations (%llu pending), %llu crashes, %llu partitions, "
      "%llu backups down and back, %llu recoveries (%llu torn replicas met), %llu segments cleaned\n",
      static_cast<unsigned long long>(ran), static_cast<unsigned long long>(total.ops),
      static_cast<unsigned long long>(total.pending), static_cast<unsigned long long>(total.crashes),
      static_cast<unsigned long long>(total.partitions), static_cast<unsigned long long>(total.backups_down),
      static_cast<unsigned long long>(total.recoveries), static_cast<unsigned long long>(total.torn_replicas),
      static_cast<unsigned long long>(total.segments_cleaned));
  EXPECT_GT(total.crashes + total.partitions, 0u);
  EXPECT_GT(total.ops, 0u);
}

TEST(LogKvClusterSim, TheSameSeedReplaysTheSameRun) {
  Figures a, b, c;
  const SimOutcome first = run_simulated(3, &a);
  const SimOutcome second = run_simulated(3, &b);
  EXPECT_EQ(first.digest, second.digest);
  EXPECT_EQ(first.end_ns, second.end_ns);
  EXPECT_EQ(a.ops, b.ops);
  EXPECT_EQ(a.pending, b.pending);
  EXPECT_NE(first.digest, run_simulated(4, &c).digest);
}

}  // namespace
}  // namespace logkv_campaign
}  // namespace ferry::store::logkv
