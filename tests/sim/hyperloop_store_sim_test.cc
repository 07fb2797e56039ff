// The HyperLoop transactional store under the simulator
// (src/sim/hyperloop_store.cc): a seed replays exactly, a campaign of seeds
// runs clean, and every supported fault kind actually fires in it (so the
// campaign cannot pass by injecting nothing).
//
// FERRY_SIM_SEEDS sizes the campaign (default 150); FERRY_SEED picks its
// first seed. Every failure names its seed and the command that replays it.
#include <gtest/gtest.h>

#include "ferry/sim/sim.h"
#include "ferry/sim/systems.h"
#include "sim/system_campaign.h"
#include "test_seed.h"

namespace ferry::sim {
namespace {

const System& store() {
  static const System s = hyperloop_store_system();
  return s;
}

TEST(HyperLoopStoreSim, ASeedRunTwiceGivesTheSameDigestAndResult) {
  testing::expect_replays(store(), ferry::testing::env_u64("FERRY_SEED", 11));
}

TEST(HyperLoopStoreSim, ACampaignOfSeedsRunsCleanAndEveryFaultKindFires) {
  testing::expect_clean_campaign(store(), "FERRY_SIM_SEEDS", 150);
}

}  // namespace
}  // namespace ferry::sim
