#include "regime.h"

#include <gtest/gtest.h>

namespace ferry::bench {
namespace {

TEST(BoundBy, TheBusiestResourceAtOrAboveTheThresholdBounds) {
  EXPECT_EQ(bound_by({{"server", 0.99}, {"client-nic", 0.49}}, true), "server");
  EXPECT_EQ(bound_by({{"server", 0.37}, {"client-nic", 0.99}}, true), "client-nic");
  // Both saturated: the busier one.
  EXPECT_EQ(bound_by({{"server", 0.93}, {"client-nic", 0.97}}, false), "client-nic");
  // At the threshold exactly, it counts; a tie goes to the first named.
  EXPECT_EQ(bound_by({{"server", kBoundBusy}, {"client-nic", 0.1}}, true), "server");
  EXPECT_EQ(bound_by({{"server", 0.95}, {"replica", 0.95}}, true), "server");
}

TEST(BoundBy, NothingSaturatedIsTheLoopsOwnLimit) {
  // Just under the threshold is not bound by that resource.
  EXPECT_EQ(bound_by({{"server", 0.899}, {"client-nic", 0.5}}, true), "other");
  EXPECT_EQ(bound_by({{"server", 0.8}, {"client-nic", 0.5}}, false), "offered-load");
  EXPECT_EQ(bound_by({}, false), "offered-load");
}

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
  // Four timed passes of at least 2,000 ticks each, scaled by 16 (or, one
  // that lost the CPU, at least itself).
  EXPECT_GE(static_cast<double>(idle.idle_ns()), 4 * 2000 * Tsc::ns_per_tick() * 0.99);
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
}  // namespace ferry::bench
