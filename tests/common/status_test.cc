#include "ferry/common/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace ferry {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("not positive: " + std::to_string(v));
  return v;
}

Status chain(int v, int* out) {
  FERRY_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = x * 2;
  return ok_status();
}

TEST(Status, OkAndErrorCarryCodeAndMessage) {
  EXPECT_TRUE(ok_status().ok());
  Status s = not_found("group 7");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.to_string(), "NOT_FOUND: group 7");
}

TEST(Status, ResultHoldsValueOrStatusAndMacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(chain(4, &out).ok());
  EXPECT_EQ(out, 8);
  Status s = chain(-1, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(out, 8);
}

TEST(Status, ResultSupportsMoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  Result<int> r = internal_error("boom");
  EXPECT_DEATH((void)r.value(), "value\\(\\) of an error Result");
}

}  // namespace
}  // namespace ferry
