// The deployed LogKv coordinator's decisions (store/logkv_member.h), driven
// through every transition with a FakeClock: the paths
// tests/cli/logkv_cluster.sh and logkv_deploy_thread_test.cc cover with
// processes and threads (enlistment, the tables, a server that stops
// answering declared crashed and recovered, a recovery that fails and is
// tried again, a crashed server refused when it comes back), and a storage
// server's start (its links, the coordinator, its log, enlisting; waiting
// for members that are not up yet, until the deadline).
#include "ferry/store/logkv_member.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ferry/common/clock.h"

namespace ferry::store::logkv {
namespace {

constexpr uint32_t kHeartbeatMs = 100;
constexpr uint64_t kBeatNs = uint64_t{kHeartbeatMs} * 1'000'000;

class CoordinatorMemberTest : public ::testing::Test {
 protected:
  CoordinatorMemberTest() : member_(options(), [this](const std::string& line) { events_.push_back(line); }) {}

  static CoordinatorMemberOptions options() {
    CoordinatorMemberOptions o;
    o.servers = 3;
    o.heartbeat_ms = kHeartbeatMs;
    o.missed_beats = 3;
    o.recovery_retry_ms = 1000;
    return o;
  }
  void enlist_all() {
    for (uint32_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(member_.admit(i).ok());
      member_.on_enlisted(i);
    }
    member_.on_tables_created();
  }
  // One heartbeat later: pings every server due, `failing` ones fail.
  std::vector<uint32_t> beat(const std::vector<uint32_t>& failing = {}) {
    clock_.advance_ns(kBeatNs);
    const std::vector<uint32_t> due = member_.on_tick(clock_.now_ns());
    for (uint32_t i : due) {
      const bool fails = std::find(failing.begin(), failing.end(), i) != failing.end();
      member_.on_ping(i, fails ? timed_out("no answer") : ok_status());
    }
    return due;
  }

  FakeClock clock_;
  std::vector<std::string> events_;
  CoordinatorMember member_;
};

TEST_F(CoordinatorMemberTest, TheTablesAreDueOnceWhenTheLastServerEnlists) {
  EXPECT_EQ(member_.state(), CoordinatorState::kWaiting);
  EXPECT_EQ(member_.admit(3).code(), Code::kInvalidArgument);
  EXPECT_FALSE(member_.on_enlisted(2));
  EXPECT_FALSE(member_.on_enlisted(0));
  EXPECT_EQ(member_.live(), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(member_.server(1), ServerState::kAbsent);
  EXPECT_TRUE(member_.on_enlisted(1));
  EXPECT_EQ(member_.state(), CoordinatorState::kCreatingTables);
  // A server enlisting again (it restarted before it was missed) is live
  // again; the tables are not due a second time.
  EXPECT_FALSE(member_.on_enlisted(1));
  member_.on_tables_created();
  EXPECT_EQ(member_.state(), CoordinatorState::kReady);
  EXPECT_EQ(member_.live(), (std::vector<uint32_t>{0, 1, 2}));
}

TEST_F(CoordinatorMemberTest, EveryLiveServerIsPingedOncePerHeartbeat) {
  EXPECT_TRUE(member_.on_tick(clock_.now_ns()).empty());  // nobody enlisted yet
  member_.on_enlisted(0);
  clock_.advance_ns(kBeatNs);
  EXPECT_EQ(member_.on_tick(clock_.now_ns()), (std::vector<uint32_t>{0}));
  clock_.advance_ns(kBeatNs / 2);
  EXPECT_TRUE(member_.on_tick(clock_.now_ns()).empty());
  member_.on_enlisted(1);
  member_.on_enlisted(2);
  clock_.advance_ns(kBeatNs / 2);
  EXPECT_EQ(member_.on_tick(clock_.now_ns()), (std::vector<uint32_t>{0, 1, 2}));
}

TEST_F(CoordinatorMemberTest, MissedBeatsMustBeConsecutiveToDeclareACrash) {
  enlist_all();
  beat({1});
  beat({1});
  beat();  // it answered: the count starts again
  beat({1});
  beat({1});
  EXPECT_EQ(member_.server(1), ServerState::kLive);
  EXPECT_TRUE(member_.take_recoveries(clock_.now_ns()).empty());
  EXPECT_TRUE(events_.empty());
}

TEST_F(CoordinatorMemberTest, AServerThatStopsAnsweringIsDeclaredCrashedRecoveredAndNeverRejoins) {
  enlist_all();
  beat({1});
  beat({1});
  EXPECT_EQ(beat({1}), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(member_.server(1), ServerState::kCrashed);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0], "event=server_crashed server=1 missed_beats=3 error=\"no answer\"");
  // Out of the live set (no tablet goes there, it is not pinged) at once.
  EXPECT_EQ(member_.live(), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(member_.crashed(), (std::vector<bool>{false, true, false}));

  EXPECT_EQ(member_.take_recoveries(clock_.now_ns()), (std::vector<uint32_t>{1}));
  EXPECT_EQ(member_.server(1), ServerState::kRecovering);
  EXPECT_TRUE(member_.take_recoveries(clock_.now_ns()).empty());  // one recovery at a time
  EXPECT_EQ(beat(), (std::vector<uint32_t>{0, 2}));               // the others are pinged meanwhile
  member_.on_ping(1, ok_status());                                // a late answer of the crashed one counts for nothing
  EXPECT_EQ(member_.server(1), ServerState::kRecovering);

  member_.on_recovered(1, ok_status(), clock_.now_ns());
  EXPECT_EQ(member_.server(1), ServerState::kRecovered);
  EXPECT_EQ(member_.recoveries(), 1u);
  EXPECT_EQ(member_.recovery_failures(), 0u);
  EXPECT_EQ(member_.crashed(), (std::vector<bool>{false, true, false}));
  // Restarted with its index, it is refused: its log was recovered elsewhere.
  EXPECT_EQ(member_.admit(1).code(), Code::kFailedPrecondition);
  EXPECT_FALSE(member_.on_enlisted(1));
  EXPECT_EQ(member_.server(1), ServerState::kRecovered);
  EXPECT_EQ(member_.live(), (std::vector<uint32_t>{0, 2}));
}

TEST_F(CoordinatorMemberTest, AFailedRecoveryIsTriedAgainASecondLater) {
  enlist_all();
  for (int k = 0; k < 3; ++k) beat({2});
  ASSERT_EQ(member_.take_recoveries(clock_.now_ns()), (std::vector<uint32_t>{2}));
  member_.on_recovered(2, unavailable("a backup did not answer"), clock_.now_ns());
  EXPECT_EQ(member_.server(2), ServerState::kUnrecovered);
  EXPECT_EQ(member_.recovery_failures(), 1u);
  EXPECT_EQ(events_.back(), "event=recovery_failed server=2 error=\"a backup did not answer\" (retried every second)");
  EXPECT_EQ(member_.admit(2).code(), Code::kFailedPrecondition);

  clock_.advance_ns(999'000'000);
  EXPECT_TRUE(member_.take_recoveries(clock_.now_ns()).empty());
  clock_.advance_ns(1'000'000);
  EXPECT_EQ(member_.take_recoveries(clock_.now_ns()), (std::vector<uint32_t>{2}));
  member_.on_recovered(2, ok_status(), clock_.now_ns());
  EXPECT_EQ(member_.server(2), ServerState::kRecovered);
  EXPECT_EQ(member_.recoveries(), 1u);
  EXPECT_EQ(member_.recovery_failures(), 1u);
  // An outcome nobody asked for changes nothing.
  member_.on_recovered(2, unavailable("late"), clock_.now_ns());
  EXPECT_EQ(member_.server(2), ServerState::kRecovered);
}

TEST_F(CoordinatorMemberTest, TwoServersCrashingTogetherAreBothRecoveredOnTheLiveOne) {
  enlist_all();
  for (int k = 0; k < 3; ++k) beat({0, 2});
  EXPECT_EQ(member_.live(), (std::vector<uint32_t>{1}));
  EXPECT_EQ(member_.take_recoveries(clock_.now_ns()), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(events_.size(), 2u);
}

TEST(CoordinatorMemberStateNames, EveryStateHasAName) {
  EXPECT_EQ(server_state_name(ServerState::kAbsent), "absent");
  EXPECT_EQ(server_state_name(ServerState::kUnrecovered), "unrecovered");
  EXPECT_EQ(server_member_state_name(ServerMemberState::kConnectingCoordinator), "connecting_coordinator");
}

// Server `index` of `servers`, started at the clock's now.
ServerMember started_server(uint32_t index, uint32_t servers, const FakeClock& clock) {
  ServerMemberOptions o;
  o.index = index;
  o.servers = servers;
  o.coordinator = "127.0.0.1:7000";
  o.connect_timeout_ms = 1000;
  o.retry_ms = 50;
  ServerMember m(o);
  m.start(clock.now_ns());
  return m;
}

TEST(ServerMember, LinksToEveryOtherServerThenTheCoordinatorThenItsLogThenEnlists) {
  FakeClock clock;
  ServerMember m = started_server(1, 3, clock);
  std::vector<std::string> steps;
  while (!m.finished()) {
    ASSERT_LE(m.retry_at_ns(), clock.now_ns());
    std::string step(server_member_state_name(m.state()));
    if (m.state() == ServerMemberState::kLinking) step += " " + std::to_string(m.peer());
    steps.push_back(step);
    m.on_step(ok_status(), clock.now_ns());
  }
  EXPECT_EQ(m.state(), ServerMemberState::kServing);
  EXPECT_EQ(steps, (std::vector<std::string>{"linking 0", "linking 2", "connecting_coordinator", "creating_log",
                                             "enlisting"}));

  // The last server links to the others only; the first to those after it.
  ServerMember last = started_server(1, 2, clock);
  EXPECT_EQ(last.peer(), 0u);
  last.on_step(ok_status(), clock.now_ns());
  EXPECT_EQ(last.state(), ServerMemberState::kConnectingCoordinator);
  ServerMember first = started_server(0, 2, clock);
  EXPECT_EQ(first.state(), ServerMemberState::kLinking);
  EXPECT_EQ(first.peer(), 1u);
}

TEST(ServerMember, APeerNotUpYetIsTriedAgainUntilTheDeadline) {
  FakeClock clock;
  ServerMember m = started_server(0, 3, clock);
  m.on_step(ok_status(), clock.now_ns());  // server 1 linked
  for (int k = 0; k < 3; ++k) {
    for (const Status& not_yet :
         {unavailable("connection refused"), not_found("no such service"), timed_out("no answer")}) {
      m.on_step(not_yet, clock.now_ns());
      ASSERT_EQ(m.state(), ServerMemberState::kLinking);
      EXPECT_EQ(m.peer(), 2u);
      EXPECT_EQ(m.retry_at_ns(), clock.now_ns() + 50'000'000);
      clock.advance_ns(50'000'000);
    }
  }
  clock.advance_ns(1'000'000'000);  // past connect_timeout_ms since start
  m.on_step(unavailable("connection refused"), clock.now_ns());
  EXPECT_EQ(m.state(), ServerMemberState::kFailed);
  EXPECT_EQ(m.failure().code(), Code::kUnavailable);
  EXPECT_EQ(m.failure().message(), "server 0: no backup link to server-2: connection refused");
}

TEST(ServerMember, TheCoordinatorIsWaitedForTooAndNamedWhenItNeverComes) {
  FakeClock clock;
  ServerMember m = started_server(1, 2, clock);
  m.on_step(ok_status(), clock.now_ns());
  m.on_step(unavailable("connection refused"), clock.now_ns());
  EXPECT_EQ(m.state(), ServerMemberState::kConnectingCoordinator);
  clock.advance_ns(2'000'000'000);
  m.on_step(unavailable("connection refused"), clock.now_ns());
  EXPECT_EQ(m.state(), ServerMemberState::kFailed);
  EXPECT_EQ(m.failure().message(), "server 1: the coordinator (127.0.0.1:7000): connection refused");
}

TEST(ServerMember, AnErrorThatWaitingCannotCureFailsAtOnce) {
  FakeClock clock;
  ServerMember link = started_server(0, 2, clock);
  link.on_step(invalid_argument("the backup has another segment size"), clock.now_ns());
  EXPECT_EQ(link.state(), ServerMemberState::kFailed);
  EXPECT_EQ(link.failure().code(), Code::kInvalidArgument);

  // Creating the log and enlisting are not retried, even for kUnavailable.
  ServerMember log = started_server(0, 2, clock);
  log.on_step(ok_status(), clock.now_ns());
  log.on_step(ok_status(), clock.now_ns());
  ASSERT_EQ(log.state(), ServerMemberState::kCreatingLog);
  log.on_step(unavailable("no replica accepted the head segment"), clock.now_ns());
  EXPECT_EQ(log.state(), ServerMemberState::kFailed);
  EXPECT_EQ(log.failure().message(), "no replica accepted the head segment");

  ServerMember refused = started_server(0, 2, clock);
  for (int k = 0; k < 3; ++k) refused.on_step(ok_status(), clock.now_ns());
  ASSERT_EQ(refused.state(), ServerMemberState::kEnlisting);
  refused.on_step(failed_precondition("server 0 crashed and was recovered; it cannot rejoin this cluster"),
                  clock.now_ns());
  EXPECT_EQ(refused.state(), ServerMemberState::kFailed);
  EXPECT_EQ(refused.failure().message(),
            "server 0: the coordinator refused it: server 0 crashed and was recovered; it cannot rejoin this cluster");
  refused.on_step(ok_status(), clock.now_ns());  // final
  EXPECT_EQ(refused.state(), ServerMemberState::kFailed);
}

}  // namespace
}  // namespace ferry::store::logkv
