// The modeled device counters show the effects the ATC'21 hints target
// (H3, H5-H8). The counters are computed by the model; these tests check the
// model's arithmetic and the direction of each effect.
#include "pm_test_util.h"

namespace ferry::pm::testing {
namespace {

class MediaModelTest : public PmTest {
 protected:
  // DMA-writes `len` bytes at PM offset `off` (one RDMA WRITE) and settles
  // the model so every write has reached the media.
  MediaCounters write_and_settle(const std::vector<std::pair<size_t, size_t>>& writes) {
    pm_->reset_counters();
    for (auto [off, len] : writes) remote_write(off, len, 1);
    pm_->settle_media_model();
    return pm_->counters();
  }
};

TEST_F(MediaModelTest, PartialLineDmaWritesAreReadModifyWritesAndAlignedOnesAreNot) {
  build({});
  MediaCounters c = write_and_settle({{8, 16}});  // 16 B inside a line (H6 off)
  EXPECT_EQ(c.pcie_rmw, 1u);
  EXPECT_EQ(c.read_requests, 1u);
  EXPECT_EQ(c.write_requests, 1u);
  c = write_and_settle({{4096, 64}});  // aligned and padded to 64 B (H6 on)
  EXPECT_EQ(c.pcie_rmw, 0u);
  EXPECT_EQ(c.read_requests, 0u);
  EXPECT_EQ(c.write_requests, 1u);
}

TEST_F(MediaModelTest, WholeXplinesAreWrittenOnceAndScatteredLinesAmplifyFourfold) {
  build({});
  std::vector<std::pair<size_t, size_t>> xplines, scattered;
  for (size_t i = 0; i < 32; ++i) xplines.push_back({i * 256, 256});
  for (size_t i = 0; i < 32; ++i) scattered.push_back({i * 1024 + 128, 64});  // one line per XPLine
  MediaCounters c = write_and_settle(xplines);  // H5
  EXPECT_EQ(c.write_requests, 128u);
  EXPECT_EQ(c.media_bytes_written, 32u * 256);
  EXPECT_DOUBLE_EQ(c.write_amplification(), 1.0);
  EXPECT_EQ(c.xpline_rmw, 0u);
  c = write_and_settle(scattered);
  EXPECT_EQ(c.write_requests, 32u);
  EXPECT_DOUBLE_EQ(c.write_amplification(), 4.0) << "each 64 B write costs a 256 B media write";
  EXPECT_EQ(c.xpline_rmw, 32u) << "and a media read to merge it";
}

TEST_F(MediaModelTest, TheWriteCombiningBufferMergesLinesOfOneXplineArrivingApart) {
  build({});
  // Four separate 64 B writes filling one XPLine, out of order.
  MediaCounters c = write_and_settle({{128, 64}, {0, 64}, {192, 64}, {64, 64}});
  EXPECT_EQ(c.write_requests, 4u);
  EXPECT_EQ(c.media_bytes_written, 256u);
  EXPECT_EQ(c.xpline_rmw, 0u);
}

TEST_F(MediaModelTest, DdioScattersASequentialWriteAndAmplifiesItAboutTwofold) {
  // H3: the NIC writes sequentially, the cache writes back in only roughly
  // that order, so the controller merges some XPLines and not others. The
  // study measured about 2x with DDIO on and 1x with it off (ATC'21 Fig. 11b);
  // the eviction window of the default platform is calibrated to that.
  std::vector<std::pair<size_t, size_t>> bulk;
  for (size_t off = 0; off < 60 * 1024; off += 4096) bulk.push_back({off, 4096});
  build({.ddio = false});
  const double off_amp = write_and_settle(bulk).write_amplification();
  TearDown();
  build({.ddio = true});
  const double on_amp = write_and_settle(bulk).write_amplification();
  TearDown();
  // Steady state: a stream four times the cache, every line evicted by a
  // later insertion rather than by the settle.
  build({.ddio = true, .cache_lines = 256});
  std::vector<std::pair<size_t, size_t>> stream;
  for (int pass = 0; pass < 4; ++pass) {
    for (size_t off = 0; off < kRegionBytes; off += 4096) stream.push_back({off, 4096});
  }
  const double steady_amp = write_and_settle(stream).write_amplification();
  EXPECT_DOUBLE_EQ(off_amp, 1.0);
  EXPECT_GT(on_amp, 1.7);
  EXPECT_LT(on_amp, 2.3);
  EXPECT_GT(steady_amp, 1.7);
  EXPECT_LT(steady_amp, 2.3);
  TearDown();
  // Uniformly random write-back (the whole cache as the window) would
  // amplify far more than the study saw: the window is what keeps it at 2x.
  build({.ddio = true, .cache_eviction_window = 32768});
  EXPECT_GT(write_and_settle(bulk).write_amplification(), 3.0);
}

TEST_F(MediaModelTest, CachedStoresReadEachLineFirstNonTemporalWholeLinesDoNot) {
  build({});
  uint8_t buf[256] = {};
  pm_->reset_counters();
  pm_->store(pm_->data() + 1024, buf, 256);  // H4/H7 off
  pm_->persist(pm_->data() + 1024, 256);
  MediaCounters c = pm_->counters();
  EXPECT_EQ(c.cpu_rfo, 4u);
  EXPECT_EQ(c.read_requests, 4u);
  EXPECT_EQ(c.write_requests, 4u);
  pm_->reset_counters();
  pm_->store_nt(pm_->data() + 2048, buf, 256);  // H4/H7 on
  pm_->drain();
  c = pm_->counters();
  EXPECT_EQ(c.cpu_rfo, 0u);
  EXPECT_EQ(c.read_requests, 0u);
  EXPECT_EQ(c.write_requests, 4u);
  pm_->reset_counters();
  pm_->store_nt(pm_->data() + 4096 + 8, buf, 16);  // non-temporal but not a whole line
  pm_->drain();
  EXPECT_EQ(pm_->counters().nt_partial, 1u);
  EXPECT_EQ(pm_->counters().read_requests, 1u);
}

TEST_F(MediaModelTest, NicAtomicsOnPmAreReadModifyWrites) {
  build({});
  pm_->reset_counters();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(remote_atomic(WrOpcode::kAtomicCmpAndSwp, 64, 0, 0), 0u);
  pm_->settle_media_model();
  const MediaCounters c = pm_->counters();
  EXPECT_EQ(c.atomics, 10u);
  EXPECT_EQ(c.read_requests, 10u + c.pcie_rmw);
  EXPECT_GE(c.write_requests, 10u);
}

}  // namespace
}  // namespace ferry::pm::testing
