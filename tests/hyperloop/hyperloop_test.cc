// HyperLoop group primitives on a deterministic manual engine.
#include "ferry/hyperloop/hyperloop.h"

#include <gtest/gtest.h>

#include <cstring>

#include "ferry/common/clock.h"

namespace ferry::hyperloop {
namespace {

class HyperLoopTest : public ::testing::Test {
 protected:
  HyperLoopTest() {
    nic::EngineOptions eo;
    eo.threaded = false;
    eo.clock = &clock_;
    engine_ = std::make_unique<nic::Engine>(eo);
    client_ = HyperLoopClient::create(*engine_).value();
  }
  ~HyperLoopTest() override { client_.reset(); }

  GroupId make_group(uint32_t replicas, pm::Media media = pm::Media::kDram) {
    GroupOptions o;
    o.replicas = replicas;
    o.region_bytes = 64 << 10;
    o.media = media;
    o.ring_ops = 16;
    o.window = 4;
    auto gid = client_->create_group(o);
    EXPECT_TRUE(gid.ok()) << gid.status().to_string();
    return gid.value();
  }

  FakeClock clock_;
  std::unique_ptr<nic::Engine> engine_;
  std::unique_ptr<HyperLoopClient> client_;
};

TEST_F(HyperLoopTest, GwriteReachesEveryReplica) {
  const GroupId g = make_group(3);
  auto mem = client_->client_memory(g).value();
  for (int i = 0; i < 100; ++i) mem[1000 + i] = static_cast<uint8_t>(i + 1);
  ASSERT_TRUE(client_->gwrite(g, 1000, 100).ok());
  for (uint32_t r = 0; r < 3; ++r) {
    auto view = client_->replica(g, r).value();
    EXPECT_EQ(std::memcmp(view.region->data() + 1000, mem.data() + 1000, 100), 0) << "replica " << r;
  }
}

}  // namespace
}  // namespace ferry::hyperloop
