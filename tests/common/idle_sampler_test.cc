#include "ferry/common/idle_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace ferry {
namespace {

TEST(IdleSampler, TimesEverySixteenthPass) {
  IdleSampler s;
  for (uint64_t pass = 1; pass <= 64; ++pass) {
    const bool timed = s.begin();
    EXPECT_EQ(timed, pass % IdleSampler::kEvery == 0) << "pass " << pass;
    s.end(timed, /*busy=*/true);
  }
}

TEST(IdleSampler, OnlyIdlePassesCountAndEachTimedOneStandsForSixteen) {
  IdleSampler busy, idle;
  for (int pass = 0; pass < 64; ++pass) {
    const bool tb = busy.begin();
    const bool ti = idle.begin();
    const uint64_t t0 = Tsc::now();
    while (Tsc::now() - t0 < 2000) {
    }
    idle.end(ti, /*busy=*/false);
    busy.end(tb, /*busy=*/true);
  }
  EXPECT_EQ(busy.idle_ns(), 0u);
  // Four timed passes of at least 2,000 ticks each: one that kept its CPU
  // counts 16 times (at least 32,000 ticks), one that lost it counts once
  // but took at least the stall threshold.
  const double per_pass_ns = std::min(16 * 2000 * Tsc::ns_per_tick(), IdleSampler::kStallNs);
  EXPECT_GE(static_cast<double>(idle.idle_ns()), 4 * per_pass_ns * 0.99);
}

TEST(IdleSampler, APassThatLostItsCpuCountsOnceNotSixteenTimes) {
  IdleSampler s;
  uint64_t outer_ticks = 0;  // the timed pass as seen from outside, at least its own measure
  for (int pass = 1; pass <= 16; ++pass) {
    const uint64_t o0 = Tsc::now();
    const bool timed = s.begin();
    if (timed) {
      const uint64_t t0 = Tsc::now();
      while (static_cast<double>(Tsc::now() - t0) * Tsc::ns_per_tick() < 100'000) {
      }
    }
    s.end(timed, /*busy=*/false);
    if (timed) outer_ticks = Tsc::now() - o0;
  }
  // The one timed pass took at least 100 us; scaled by 16 it would read
  // more than its whole length.
  EXPECT_GE(s.idle_ns(), 100'000u);
  EXPECT_LE(static_cast<double>(s.idle_ns()), static_cast<double>(outer_ticks) * Tsc::ns_per_tick() + 1);
}

}  // namespace
}  // namespace ferry
