// LogKv on Tailwind under the simulator (src/sim/tailwind.cc, `ferry sim
// tailwind`): a seed replays exactly, and a campaign of seeds runs clean with
// every supported fault kind firing in it.
//
// FERRY_TAILWIND_SIM_SEEDS sizes the campaign (default 60); FERRY_SEED picks
// its first seed. Every failure names its seed and the command that replays it.
#include <gtest/gtest.h>

#include "ferry/sim/sim.h"
#include "ferry/sim/systems.h"
#include "sim/system_campaign.h"
#include "test_seed.h"

namespace ferry::sim {
namespace {

const System& tailwind() {
  static const System s = tailwind_system();
  return s;
}

TEST(TailwindSim, ASeedRunTwiceGivesTheSameDigestAndResult) {
  testing::expect_replays(tailwind(), ferry::testing::env_u64("FERRY_SEED", 7));
}

TEST(TailwindSim, ACampaignOfSeedsRunsCleanAndEveryFaultKindFires) {
  testing::expect_clean_campaign(tailwind(), "FERRY_TAILWIND_SIM_SEEDS", 60);
}

// The finale's recovery check runs: where r + 2 servers are still live, one
// crashes after a full cleaner pass and every key is read again after its
// recovery (src/sim/tailwind.cc, Run::finale).
TEST(TailwindSim, TheFinaleCrashesAServerAfterACleanerPassAndReadsEveryKeyAgain) {
  uint64_t with_finale_crash = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    RunOptions o;
    o.seed = seed;
    const RunResult r = tailwind().run(o);
    EXPECT_TRUE(r.ok) << r.summary() << "\n" << r.invariant << ": " << r.detail;
    bool crashed = false, recovered = false;
    for (const std::string& line : r.tail) {
      crashed |= line.find("finale: crash server") != std::string::npos;
      recovered |= crashed && line.find("recovered:") != std::string::npos;
    }
    EXPECT_EQ(crashed, recovered) << "seed " << seed << ": a finale crash is followed by its recovery";
    with_finale_crash += crashed;
  }
  EXPECT_GE(with_finale_crash, 3u) << "half the seeds keep r + 2 servers live to the end";
}

}  // namespace
}  // namespace ferry::sim
