// What every simulated system's test asserts (tests/sim/*_sim_test.cc): a
// seed replays exactly, and a campaign of seeds runs clean with every fault
// kind the system supports firing in it (so a campaign cannot pass by
// injecting nothing). Every failure names its seed and its replay command.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <map>
#include <string>

#include "ferry/sim/sim.h"
#include "test_seed.h"

namespace ferry::sim::testing {

// Runs `seed` twice with every fault kind on (no swarm): equal digests,
// events, summaries and fault counts; the next seed is another run.
inline void expect_replays(const System& system, uint64_t seed) {
  RunOptions o;
  o.seed = seed;
  o.faults = FaultRates::defaults();
  o.swarm = false;  // every kind on, so the run has faults to repeat
  const RunResult a = system.run(o);
  const RunResult b = system.run(o);
  EXPECT_TRUE(a.ok) << a.summary() << "\n" << a.invariant << ": " << a.detail;
  EXPECT_EQ(a.digest, b.digest) << "replay: " << replay_command(system, o);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.summary(), b.summary());
  EXPECT_EQ(a.faults, b.faults);
  EXPECT_GT(a.events, a.ops);  // every operation and its outcome is an event
  EXPECT_GT(a.ops, 0u);
  o.seed += 1;
  EXPECT_NE(system.run(o).digest, a.digest);
}

// `count_variable` seeds (default `default_count`) from FERRY_SEED (default
// 1), swarm faults at the default rates: none fails, and with at least
// `fault_check_seeds` seeds every supported kind fired.
inline void expect_clean_campaign(const System& system, const char* count_variable, uint64_t default_count,
                                  uint64_t fault_check_seeds = 50) {
  const ferry::testing::SeedRange range = ferry::testing::seed_range(count_variable, 1, default_count);
  uint64_t failed = 0, ops = 0, acked = 0, pending = 0, reads = 0, sim_ns = 0;
  std::array<uint64_t, kFaultKinds> faults{};
  std::map<std::string, uint64_t> covered;
  for (uint64_t i = 0; i < range.count; ++i) {
    RunOptions o;
    o.seed = range.first + i;
    const RunResult r = system.run(o);
    ops += r.ops;
    acked += r.acknowledged;
    pending += r.pending;
    reads += r.reads;
    sim_ns += r.sim_ns;
    for (size_t k = 0; k < kFaultKinds; ++k) faults[k] += r.faults[k];
    for (const auto& [name, n] : r.coverage) covered[name] += n;
    if (r.ok) continue;
    ++failed;
    std::string tail;
    for (const auto& line : r.tail) tail += "    " + line + "\n";
    ADD_FAILURE() << "seed " << o.seed << " broke " << r.invariant << ": " << r.detail << "\n  " << r.summary()
                  << "\n  last events:\n"
                  << tail << "  replay: " << replay_command(system, o);
    if (failed == 3) break;  // enough to go on
  }
  std::string faults_text;
  for (size_t k = 0; k < kFaultKinds; ++k) {
    if (faults[k] != 0) {
      faults_text += " " + std::string(fault_name(static_cast<FaultKind>(k))) + "=" + std::to_string(faults[k]);
    }
  }
  std::printf(
      "%s sim: %llu seeds from %llu, %llu failed; %llu ops (%llu acknowledged, %llu pending), "
      "%llu reads, %.1f s virtual; faults:%s\n",
      system.name.c_str(), static_cast<unsigned long long>(range.count), static_cast<unsigned long long>(range.first),
      static_cast<unsigned long long>(failed), static_cast<unsigned long long>(ops),
      static_cast<unsigned long long>(acked), static_cast<unsigned long long>(pending),
      static_cast<unsigned long long>(reads), static_cast<double>(sim_ns) / 1e9, faults_text.c_str());
  EXPECT_EQ(failed, 0u);
  // The coverage the system requires of a campaign this large (none below
  // System::cover_within seeds).
  std::string coverage_text;
  for (const auto& [name, n] : covered) coverage_text += " " + name + "=" + std::to_string(n);
  if (!coverage_text.empty()) std::printf("%s sim coverage:%s\n", system.name.c_str(), coverage_text.c_str());
  if (failed == 0) {
    for (const std::string& name : missing_coverage(system, RunOptions{}, range.count, covered)) {
      ADD_FAILURE() << name << " never happened in " << range.count << " seeds (" << system.name
                    << " requires it within " << system.cover_within << ")";
    }
  }
  if (range.count >= fault_check_seeds) {
    for (FaultKind kind : system.faults) {
      EXPECT_GT(faults[static_cast<size_t>(kind)], 0u)
          << fault_name(kind) << " never fired in " << range.count << " seeds";
    }
  }
}

}  // namespace ferry::sim::testing
