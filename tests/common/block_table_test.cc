#include "ferry/common/block_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "ferry/common/align.h"

namespace ferry {
namespace {

struct Entry {
  uint64_t value = 0;
  bool used = false;
};

TEST(BlockTable, AnUnwrittenBlockHasNoEntriesAndAWrittenOneIsValueInitialized) {
  BlockTable<Entry, 4> t(10);  // blocks 0-3, 4-7, 8-9
  EXPECT_EQ(t.capacity(), 10u);
  EXPECT_EQ(t.find(0), nullptr);
  EXPECT_EQ(t.find(9), nullptr);
  t.at(5).value = 55;
  ASSERT_NE(t.find(5), nullptr);
  EXPECT_EQ(t.find(5)->value, 55u);
  // The rest of 5's block exists, zeroed; the other blocks do not.
  ASSERT_NE(t.find(4), nullptr);
  EXPECT_EQ(t.find(4)->value, 0u);
  EXPECT_FALSE(t.find(7)->used);
  EXPECT_EQ(t.find(3), nullptr);
  EXPECT_EQ(t.find(8), nullptr);
  // Past the capacity there is nothing, even inside the last block.
  EXPECT_EQ(t.find(10), nullptr);
  EXPECT_EQ(t.find(11), nullptr);
}

TEST(BlockTable, EntriesNeverMoveAsOtherBlocksAreAllocated) {
  BlockTable<Entry, 2> t(64);
  Entry* first = &t.at(1);
  first->value = 1;
  for (uint32_t i = 2; i < 64; ++i) t.at(i).value = i;
  EXPECT_EQ(&t.at(1), first);
  EXPECT_EQ(t.find(1)->value, 1u);
  EXPECT_EQ(t.find(63)->value, 63u);
}

TEST(BlockTable, ForEachAllocatedVisitsAllocatedBlocksInOrderWithinTheCapacity) {
  BlockTable<Entry, 4> t(10);
  t.at(9).used = true;
  t.at(1).used = true;
  std::vector<std::pair<uint32_t, bool>> seen;
  t.for_each_allocated([&](uint32_t i, const Entry& e) { seen.emplace_back(i, e.used); });
  // Blocks 0-3 and 8-9 (not 10 or 11, past the capacity); block 4-7 never written.
  const std::vector<std::pair<uint32_t, bool>> want = {{0, false}, {1, true},  {2, false},
                                                       {3, false}, {8, false}, {9, true}};
  EXPECT_EQ(seen, want);
}

TEST(BlockTableDeathTest, WritingPastTheCapacityIsRefused) {
  BlockTable<Entry, 4> t(10);
  EXPECT_DEATH(t.at(10), "past capacity");
}

TEST(RoundUp, RoundsToTheNextMultipleOfAnyStep) {
  EXPECT_EQ(round_up(uint64_t{0}, 64), 0u);
  EXPECT_EQ(round_up(uint64_t{1}, 64), 64u);
  EXPECT_EQ(round_up(uint64_t{64}, 64), 64u);
  EXPECT_EQ(round_up(uint64_t{65}, 64), 128u);
  EXPECT_EQ(round_up(uint32_t{10}, 3), 12u);  // not only powers of two
  EXPECT_EQ(round_up(uint32_t{12}, 3), 12u);
}

}  // namespace
}  // namespace ferry
