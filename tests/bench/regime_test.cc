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

}  // namespace
}  // namespace ferry::bench
