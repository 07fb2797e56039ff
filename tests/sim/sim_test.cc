// The simulator's core (include/ferry/sim/sim.h): fault specs, the seed's
// swarm choice, the event digest, skipping faults, the shrinker; and the
// JUNE BERRY system's seeds: the same seed gives the same run, a campaign
// runs clean with every fault kind striking, and a bug put back is found.
#include "ferry/sim/sim.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "ferry/sim/systems.h"
#include "test_seed.h"

namespace ferry::sim {
namespace {

TEST(FaultRates, ParsesNamesRatesAndTheShorthands) {
  EXPECT_FALSE(FaultRates::parse("none").value().any());
  EXPECT_EQ(FaultRates::parse("default").value().to_string(), FaultRates::defaults().to_string());
  const FaultRates f = FaultRates::parse("loss=0.5,crash,power=0").value();
  EXPECT_EQ(f[FaultKind::kPacketLoss], 0.5);
  EXPECT_EQ(f[FaultKind::kProcessCrash], FaultRates::defaults()[FaultKind::kProcessCrash]);
  EXPECT_EQ(f[FaultKind::kPowerFailure], 0.0);
  EXPECT_EQ(f.to_string().rfind("loss=0.5,crash=", 0), 0u) << f.to_string();
  EXPECT_EQ(f.to_string().find("power"), std::string::npos);
  // The text a replay command carries parses back to the same rates.
  EXPECT_EQ(FaultRates::parse(FaultRates::defaults().to_string()).value().to_string(),
            FaultRates::defaults().to_string());
}

TEST(FaultRates, ABadItemIsRefusedByName) {
  auto unknown = FaultRates::parse("loss=0.1,meteor");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("meteor"), std::string::npos);
  EXPECT_FALSE(FaultRates::parse("loss=2").ok());
  EXPECT_FALSE(FaultRates::parse("loss=abc").ok());
  EXPECT_FALSE(FaultRates::parse("loss=").ok());
}

TEST(World, TheSameSeedGivesTheSameEventsAndDigestAndAnotherSeedDoesNot) {
  auto run = [](uint64_t seed) {
    RunOptions o;
    o.seed = seed;
    o.faults = FaultRates::parse("crash=0.5,power=0.5").value();
    World w(o);
    for (int i = 0; i < 100; ++i) {
      w.clock().advance_ns(w.rng().below(1000));
      if (w.strike(FaultKind::kProcessCrash)) w.event("crash " + std::to_string(w.fault_below(3)));
      w.event("op " + std::to_string(w.rng().below(10)));
    }
    RunResult r;
    w.finish(&r);
    return r;
  };
  const RunResult a = run(7), b = run(7), c = run(8);
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_EQ(a.tail, b.tail);
  EXPECT_EQ(a.events, b.events);
  EXPECT_NE(a.digest, c.digest);
}

TEST(World, SwarmTurnsKindsOffOrScalesThemAndNoSwarmKeepsTheRates) {
  RunOptions o;
  o.faults = FaultRates::defaults();
  o.swarm = false;
  EXPECT_EQ(World(o).rates().to_string(), FaultRates::defaults().to_string());
  o.swarm = true;
  size_t off = 0, differs = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    o.seed = seed;
    const World w(o);
    for (size_t k = 0; k < kFaultKinds; ++k) {
      const double r = w.rates().rate[k], given = FaultRates::defaults().rate[k];
      EXPECT_TRUE(r == 0 || (r >= 0.25 * given && r < 2 * given)) << "seed " << seed << " kind " << k;
      off += r == 0;
      differs += r != given;
    }
  }
  EXPECT_GT(off, 50u);  // about a quarter of 500
  EXPECT_LT(off, 250u);
  EXPECT_GT(differs, 400u);
}

TEST(World, ASkippedFaultDoesNotStrikeButKeepsItsIndexAndTheWorkloadsDraws) {
  auto run = [](std::set<uint64_t> skip) {
    RunOptions o;
    o.faults = FaultRates::parse("crash=0.3").value();
    o.swarm = false;
    o.skip_faults = std::move(skip);
    World w(o);
    std::vector<uint64_t> struck, draws;
    for (uint64_t i = 0; i < 100; ++i) {
      if (w.strike(FaultKind::kProcessCrash)) struck.push_back(i);
      draws.push_back(w.rng().below(1000));
    }
    RunResult r;
    w.finish(&r);
    return std::make_tuple(struck, draws, r);
  };
  const auto [all, draws_all, r_all] = run({});
  ASSERT_GE(all.size(), 3u);
  const auto [some, draws_some, r_some] = run({1});
  EXPECT_EQ(r_all.faults_injected, r_some.faults_injected);
  ASSERT_EQ(some.size() + 1, all.size());
  EXPECT_EQ(some[0], all[0]);
  EXPECT_EQ(some[1], all[2]);  // fault #1 skipped, #2 struck where it did
  EXPECT_EQ(draws_all, draws_some);
  EXPECT_EQ(r_some.faults[static_cast<size_t>(FaultKind::kProcessCrash)] + 1,
            r_all.faults[static_cast<size_t>(FaultKind::kProcessCrash)]);
}

// A system that breaks an invariant once it has run 37 operations, whatever
// faults struck: the shrinker must find 37 operations and skip every fault.
TEST(Shrink, FindsTheFewestOperationsAndDropsTheFaultsTheFailureDoesNotNeed) {
  System s;
  s.name = "toy";
  s.default_ops = 300;
  s.run = [](const RunOptions& o) {
    World w(o);
    for (uint64_t i = 0; i < o.ops; ++i) {
      (void)w.strike(FaultKind::kPowerFailure);
      w.event("op " + std::to_string(i));
    }
    RunResult r;
    r.ops = o.ops;
    r.ok = o.ops < 37;
    if (!r.ok) r.invariant = "toy";
    w.finish(&r);
    return r;
  };
  RunOptions o;
  o.seed = 3;
  o.ops = 300;
  o.faults = FaultRates::parse("power=0.2").value();
  o.swarm = false;
  const RunResult first = s.run(o);
  ASSERT_FALSE(first.ok);
  ASSERT_GT(first.faults_injected, 5u);
  const ShrinkResult shrunk = shrink(s, o, first);
  EXPECT_EQ(shrunk.options.ops, 37u);
  EXPECT_FALSE(shrunk.result.ok);
  // The failure needs no fault: every fault the shortened run fires is skipped.
  EXPECT_EQ(shrunk.options.skip_faults.size(), shrunk.result.faults_injected);
  EXPECT_NE(replay_command(s, shrunk.options).find("--ops 37"), std::string::npos);
  EXPECT_NE(replay_command(s, shrunk.options).find("--skip-faults"), std::string::npos);
}

// A system's coverage requirement applies to a campaign as large as it
// names, at the default rates with swarm, and names what it never met.
TEST(Coverage, ACampaignLargeEnoughAtTheDefaultRatesMustMeetEveryRequiredCount) {
  System s;
  s.must_cover = {"torn", "waited"};
  s.cover_within = 10;
  const RunOptions defaults;
  EXPECT_EQ(missing_coverage(s, defaults, 10, {{"torn", 3}, {"waited", 0}}), std::vector<std::string>{"waited"});
  EXPECT_EQ(missing_coverage(s, defaults, 20, {}), (std::vector<std::string>{"torn", "waited"}));
  EXPECT_TRUE(missing_coverage(s, defaults, 10, {{"torn", 1}, {"waited", 1}}).empty());
  EXPECT_TRUE(missing_coverage(s, defaults, 9, {}).empty()) << "a smaller campaign";
  RunOptions other = defaults;
  other.faults = FaultRates::none();
  EXPECT_TRUE(missing_coverage(s, other, 10, {}).empty()) << "other rates";
  other = defaults;
  other.swarm = false;
  EXPECT_TRUE(missing_coverage(s, other, 10, {}).empty()) << "no swarm";
  other = defaults;
  other.ops = 5;
  EXPECT_TRUE(missing_coverage(s, other, 10, {}).empty()) << "another size";
  System none;
  EXPECT_TRUE(missing_coverage(none, defaults, 1000, {}).empty()) << "a system that requires nothing";
}

TEST(Systems, EveryOneIsFoundByNameAndAnUnknownNameListsThem) {
  ASSERT_TRUE(find_system("juneberry").ok());
  auto missing = find_system("zookeeper");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("juneberry"), std::string::npos);
}

// ---- JUNE BERRY ----

TEST(JuneBerrySim, ASeedRunTwiceIsTheSameRun) {
  const System& s = *find_system("juneberry").value();
  for (uint64_t seed : {1, 2, 3, 75}) {
    RunOptions o;
    o.seed = seed;
    const RunResult a = s.run(o), b = s.run(o);
    EXPECT_EQ(a.digest, b.digest) << "seed " << seed;
    EXPECT_EQ(a.events, b.events) << "seed " << seed;
    EXPECT_EQ(a.summary(), b.summary()) << "seed " << seed;
    EXPECT_GT(a.events, 100u);
  }
}

// FERRY_SIM_SEEDS seeds (default 600; 60 under ASan; the documented full
// campaign is 100000), from FERRY_SEED (default 1).
TEST(JuneBerrySim, EverySeedRunsCleanAndEveryFaultKindStrikes) {
  const System& s = *find_system("juneberry").value();
  const ferry::testing::SeedRange range = ferry::testing::seed_range("FERRY_SIM_SEEDS", 1, 600);
  const uint64_t first = range.first;
  const uint64_t seeds = range.count;
  std::array<uint64_t, kFaultKinds> faults{};
  uint64_t failed = 0, ops = 0, acked = 0, pending = 0, reads = 0;
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    RunOptions o;
    o.seed = seed;
    const RunResult r = s.run(o);
    for (size_t k = 0; k < kFaultKinds; ++k) faults[k] += r.faults[k];
    ops += r.ops;
    acked += r.acknowledged;
    pending += r.pending;
    reads += r.reads;
    if (!r.ok && ++failed <= 3) {
      ADD_FAILURE() << r.summary() << "\n  " << r.invariant << ": " << r.detail
                    << "\n  replay: " << replay_command(s, o);
    }
  }
  EXPECT_EQ(failed, 0u);
  std::printf("%llu seeds: %llu ops, %llu acknowledged writes, %llu reads, %llu pending\n",
              static_cast<unsigned long long>(seeds), static_cast<unsigned long long>(ops),
              static_cast<unsigned long long>(acked), static_cast<unsigned long long>(reads),
              static_cast<unsigned long long>(pending));
  for (FaultKind k : s.faults) {
    std::printf("  %s: %llu\n", std::string(fault_name(k)).c_str(),
                static_cast<unsigned long long>(faults[static_cast<size_t>(k)]));
    if (seeds >= 50) {
      EXPECT_GT(faults[static_cast<size_t>(k)], 0u) << fault_name(k) << " never struck";
    }
  }
  EXPECT_GT(acked, seeds * 10);
  EXPECT_GT(reads, seeds * 10);
}

}  // namespace
}  // namespace ferry::sim
