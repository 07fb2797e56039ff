// The HyperLoop transactional store under the simulator
// (src/sim/hyperloop_store.cc): a seed replays exactly, a campaign of seeds
// runs clean, and every supported fault kind actually fires in it (so the
// campaign cannot pass by injecting nothing).
//
// FERRY_SIM_SEEDS sizes the campaign (default 150); FERRY_SEED picks its
// first seed. Every failure names its seed and the command that replays it.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "ferry/sim/sim.h"
#include "ferry/sim/systems.h"
#include "test_seed.h"

namespace ferry::sim {
namespace {

const System& store() {
  static const System s = hyperloop_store_system();
  return s;
}

TEST(HyperLoopStoreSim, ASeedRunTwiceGivesTheSameDigestAndResult) {
  RunOptions o;
  o.seed = ferry::testing::env_u64("FERRY_SEED", 11);
  o.faults = FaultRates::defaults();
  o.swarm = false;  // every kind on, so the run has faults to repeat
  const RunResult a = store().run(o);
  const RunResult b = store().run(o);
  EXPECT_TRUE(a.ok) << a.summary() << "\n" << a.invariant << ": " << a.detail;
  EXPECT_EQ(a.digest, b.digest) << "replay: " << replay_command(store(), o);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.summary(), b.summary());
  EXPECT_EQ(a.faults, b.faults);
  EXPECT_GT(a.events, a.ops);  // every operation and its outcome is an event
  EXPECT_GT(a.ops, 0u);
  // Another seed is another run.
  o.seed += 1;
  EXPECT_NE(store().run(o).digest, a.digest);
}

TEST(HyperLoopStoreSim, ACampaignOfSeedsRunsCleanAndEveryFaultKindFires) {
  const ferry::testing::SeedRange range = ferry::testing::seed_range("FERRY_SIM_SEEDS", 1, 150);
  uint64_t failed = 0, ops = 0, acked = 0, pending = 0, reads = 0, sim_ns = 0;
  std::array<uint64_t, kFaultKinds> faults{};
  for (uint64_t i = 0; i < range.count; ++i) {
    RunOptions o;
    o.seed = range.first + i;
    const RunResult r = store().run(o);
    ops += r.ops;
    acked += r.acknowledged;
    pending += r.pending;
    reads += r.reads;
    sim_ns += r.sim_ns;
    for (size_t k = 0; k < kFaultKinds; ++k) faults[k] += r.faults[k];
    if (r.ok) continue;
    ++failed;
    std::string tail;
    for (const auto& line : r.tail) tail += "    " + line + "\n";
    ADD_FAILURE() << "seed " << o.seed << " broke " << r.invariant << ": " << r.detail << "\n  " << r.summary()
                  << "\n  last events:\n"
                  << tail << "  replay: " << replay_command(store(), o);
    if (failed == 3) break;  // enough to go on
  }
  std::string faults_text;
  for (size_t k = 0; k < kFaultKinds; ++k) {
    if (faults[k] != 0) {
      faults_text += " " + std::string(fault_name(static_cast<FaultKind>(k))) + "=" + std::to_string(faults[k]);
    }
  }
  std::printf(
      "hyperloop-store sim: %llu seeds from %llu, %llu failed; %llu ops (%llu acknowledged, %llu pending), "
      "%llu reads, %.1f s virtual; faults:%s\n",
      static_cast<unsigned long long>(range.count), static_cast<unsigned long long>(range.first),
      static_cast<unsigned long long>(failed), static_cast<unsigned long long>(ops),
      static_cast<unsigned long long>(acked), static_cast<unsigned long long>(pending),
      static_cast<unsigned long long>(reads), static_cast<double>(sim_ns) / 1e9, faults_text.c_str());
  EXPECT_EQ(failed, 0u);
  // Every kind the system says it supports struck somewhere in the campaign.
  if (range.count >= 50) {
    for (FaultKind kind : store().faults) {
      EXPECT_GT(faults[static_cast<size_t>(kind)], 0u)
          << fault_name(kind) << " never fired in " << range.count << " seeds";
    }
  }
}

}  // namespace
}  // namespace ferry::sim
