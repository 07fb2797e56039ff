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

}  // namespace
}  // namespace ferry::sim
