// A HyperLoop chain replica deployed as a process, as a state machine
// (hyperloop/replica_member.h): what tests/cli/hyperloop_chain.sh sees of
// it (ready, serving once its upstream connected, a neighbour that never
// comes), driven without a NIC.
#include "ferry/hyperloop/replica_member.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::hyperloop {
namespace replica_member_test {

class FakePath final : public ReplicaMemberDataPath {
 public:
  void start_build() override { ++builds; }
  uint32_t upstream_links() const override { return links; }
  int builds = 0;
  uint32_t links = 0;
};

struct Replica {
  explicit Replica(uint32_t links = 3) : member(options(links), [this](const std::string& l) { lines.push_back(l); }) {}
  static ReplicaMemberOptions options(uint32_t links) {
    ReplicaMemberOptions o;
    o.group = "g7";
    o.index = 1;
    o.links = links;
    return o;
  }
  std::vector<std::string> lines;
  ReplicaMember member;
};

TEST(ReplicaMember, BuildsOnAttachIsReadyOnceBuiltAndServesWhenEveryUpstreamLinkConnected) {
  FakePath path;
  Replica r;
  EXPECT_EQ(r.member.state(), ReplicaMemberState::kStarting);
  r.member.attach(&path);
  EXPECT_EQ(path.builds, 1);
  EXPECT_EQ(r.member.state(), ReplicaMemberState::kConnecting);
  EXPECT_TRUE(r.member.busy());
  r.member.on_built(ok_status());
  EXPECT_EQ(r.member.state(), ReplicaMemberState::kReady);
  path.links = 2;
  r.member.on_tick(1);
  EXPECT_EQ(r.member.state(), ReplicaMemberState::kReady) << "one chain's upstream is still missing";
  EXPECT_TRUE(r.lines.empty());
  path.links = 3;
  r.member.on_tick(2);
  EXPECT_EQ(r.member.state(), ReplicaMemberState::kServing);
  EXPECT_EQ(r.lines, std::vector<std::string>{"event=serving group=g7 index=1"});
  r.member.on_tick(3);
  EXPECT_EQ(r.lines.size(), 1u) << "said once";
}

TEST(ReplicaMember, TheNaiveBaselineServesWithItsOneLink) {
  FakePath path;
  Replica r(/*links=*/1);
  r.member.attach(&path);
  r.member.on_built(ok_status());
  path.links = 1;
  r.member.on_tick(1);
  EXPECT_EQ(r.member.state(), ReplicaMemberState::kServing);
}

TEST(ReplicaMember, ANeighbourThatNeverComesFailsTheReplica) {
  FakePath path;
  Replica r;
  r.member.attach(&path);
  r.member.on_built(timed_out("replica 1 of group g7: connecting downstream to 127.0.0.1:7003: gave up"));
  EXPECT_EQ(r.member.state(), ReplicaMemberState::kFailed);
  EXPECT_TRUE(r.member.finished());
  EXPECT_EQ(r.member.failure().code(), Code::kTimedOut);
  r.member.on_built(ok_status());
  EXPECT_EQ(r.member.state(), ReplicaMemberState::kFailed) << "final";
}

TEST(ReplicaMember, ADataPathThatReportsFromInsideTheCallIsTakenInOrder) {
  struct SyncPath final : ReplicaMemberDataPath {
    ReplicaMember* member = nullptr;
    void start_build() override { member->on_built(ok_status()); }
    uint32_t upstream_links() const override { return 3; }
  } path;
  Replica r;
  path.member = &r.member;
  r.member.attach(&path);
  EXPECT_EQ(r.member.state(), ReplicaMemberState::kReady);
  r.member.on_tick(1);
  EXPECT_EQ(r.member.state(), ReplicaMemberState::kServing);
}

}  // namespace replica_member_test
}  // namespace ferry::hyperloop
