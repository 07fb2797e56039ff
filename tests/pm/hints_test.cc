// H4-H9 as reusable pieces: they do what they claim, and what they claim is
// visible in the model (durability) or its counters.
#include "ferry/pm/hints.h"
#include "pm_test_util.h"

namespace ferry::pm::testing {
namespace {

TEST(PmHints, GranularityIs64BelowAnXplineAnd256FromThereOn) {
  EXPECT_EQ(write_granularity(1), 64u);
  EXPECT_EQ(write_granularity(255), 64u);
  EXPECT_EQ(write_granularity(256), 256u);
  EXPECT_EQ(padded_size(16), 64u);
  EXPECT_EQ(padded_size(65), 128u);
  EXPECT_EQ(padded_size(300), 512u);
}

class HintsTest : public PmTest {};

TEST_F(HintsTest, AllocatorAlignsAndPadsAndReportsExhaustion) {
  build({});
  PmAllocator alloc(*pm_, 0, 4096);
  uint8_t* a = alloc.allocate(16).value();
  uint8_t* b = alloc.allocate(300).value();
  uint8_t* c = alloc.allocate(16).value();
  EXPECT_EQ((a - pm_->data()) % 64, 0);
  EXPECT_EQ((b - pm_->data()) % 256, 0);
  EXPECT_EQ(b - a, 256) << "the 300 B block starts at the next XPLine";
  EXPECT_EQ(c - b, 512) << "300 B were padded to 512";
  EXPECT_EQ(alloc.allocate(8192).status().code(), Code::kResourceExhausted);
}

TEST_F(HintsTest, PersistentCopyIsDurableEitherWayAndTheHintsAvoidReads) {
  build({});
  uint8_t src[40];
  for (int i = 0; i < 40; ++i) src[i] = static_cast<uint8_t>(101 + i * 3);
  pm_->reset_counters();
  persistent_copy(*pm_, pm_->data() + 512 + 8, src, 40, CpuWriteHints{.non_temporal = false, .whole_lines = false});
  const MediaCounters off = pm_->counters();
  pm_->reset_counters();
  persistent_copy(*pm_, pm_->data() + 1024, src, 40, CpuWriteHints{});
  const MediaCounters on = pm_->counters();
  EXPECT_GT(off.read_requests, 0u) << "cached stores read the line first";
  EXPECT_EQ(on.read_requests, 0u) << "whole-line non-temporal stores read nothing";
  for (int s = 0; s < 2000; ++s) {
    const auto image = domain_->image_after_power_fail(*pm_, s);
    ASSERT_EQ(std::memcmp(image.data() + 520, src, 40), 0) << "seed " << s;
    ASSERT_EQ(std::memcmp(image.data() + 1024, src, 40), 0) << "seed " << s;
  }
}

TEST_F(HintsTest, H9PersistentWriteIsDurableWhenItsOnlyCompletionArrives) {
  build({});
  for (PersistPoint point : {PersistPoint::kRead, PersistPoint::kFlush}) {
    for (int i = 0; i < 256; ++i) client_mem_[i] = static_cast<uint8_t>(7 + i * 3);
    const Sge local = cmr_->sge(0, 256);
    const uint64_t off = point == PersistPoint::kRead ? 4096 : 8192;
    ASSERT_TRUE(post_persistent_write(*cqp_[0], local, smr_->iova() + off, smr_->rkey(), 9, point).ok());
    WorkCompletion wc{};
    ASSERT_TRUE(engine_->run_until([&] { return ccq_->poll(std::span<WorkCompletion>(&wc, 1)).value() == 1; }).ok());
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(wc.opcode, point == PersistPoint::kRead ? WcOpcode::kRdmaRead : WcOpcode::kFlush)
        << "only the persistence point is signaled";
    EXPECT_EQ(count_survivals(off, 256, 7, 2000), 2000);
  }
}

TEST_F(HintsTest, H9WithAFlushIsDurableEvenWithDdio) {
  build({.ddio = true});
  for (int i = 0; i < 128; ++i) client_mem_[i] = static_cast<uint8_t>(3 + i * 3);
  const Sge local = cmr_->sge(0, 128);
  ASSERT_TRUE(post_persistent_write(*cqp_[0], local, smr_->iova(), smr_->rkey(), 1, PersistPoint::kFlush).ok());
  WorkCompletion wc{};
  ASSERT_TRUE(engine_->run_until([&] { return ccq_->poll(std::span<WorkCompletion>(&wc, 1)).value() == 1; }).ok());
  EXPECT_EQ(count_survivals(0, 128, 3, 2000), 2000);
}

TEST_F(HintsTest, LockTableSpreadsKeysOverSeparateLinesInDram) {
  LockTable locks(1024);
  EXPECT_EQ(locks.bytes(), 1024u * 64);
  EXPECT_EQ(locks.offset(42) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(locks.word(42)), locks.data() + locks.offset(42));
  size_t distinct = 0;
  std::vector<bool> seen(1024);
  for (uint64_t k = 0; k < 256; ++k) {
    const size_t slot = locks.offset(k) / 64;
    distinct += !seen[slot];
    seen[slot] = true;
  }
  EXPECT_GT(distinct, 200u) << "keys spread over slots";
}

}  // namespace
}  // namespace ferry::pm::testing
