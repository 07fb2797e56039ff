// Views: the key layout, the value formats, the transition rule, and the
// protocol on the in-process store with fake time (leases lapse exactly when
// the test advances the clock).
#include "ferry/membership/view.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/membership/in_process_store.h"
#include "membership_test_util.h"

namespace ferry::membership::testing {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

ViewMember member(std::string id, Revision incarnation, std::string address = "") {
  return ViewMember{std::move(id), address.empty() ? "addr-" + std::to_string(incarnation) : std::move(address),
                    incarnation};
}

TEST(GroupPath, KeyLayout) {
  GroupPath g{"prod", "chain-7"};
  ASSERT_TRUE(g.validate().ok());
  EXPECT_EQ(g.prefix(), "/ferry/prod/groups/chain-7/");
  EXPECT_EQ(g.members_prefix(), "/ferry/prod/groups/chain-7/members/");
  EXPECT_EQ(g.member_key("host-1:7000"), "/ferry/prod/groups/chain-7/members/host-1:7000");
  EXPECT_EQ(g.view_key(), "/ferry/prod/groups/chain-7/view");
}

TEST(GroupPath, NamesArePathSegments) {
  EXPECT_FALSE((GroupPath{"", "g"}).validate().ok());
  EXPECT_FALSE((GroupPath{"c", "a/b"}).validate().ok()) << "a slash would escape the group's prefix";
  EXPECT_FALSE((GroupPath{"c", std::string(129, 'g')}).validate().ok());
  EXPECT_FALSE(validate_name("member id", "white space").ok());
  EXPECT_TRUE(validate_name("member id", "node-1.rack_2:7000@az1").ok());
}

TEST(ViewFormat, RoundTrips) {
  View v{7, {member("b", 12, "10.0.0.2:7000"), member("a", 3, std::string("\xff\x01", 2))}};
  Result<View> back = decode_view(encode_view(v));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back.value().version, 7u);
  ASSERT_EQ(back.value().members.size(), 2u);
  EXPECT_EQ(back.value().members[0], v.members[0]);
  EXPECT_EQ(back.value().members[1].id, "a");
  EXPECT_EQ(back.value().position("a", 3), 1);
  EXPECT_EQ(back.value().position("a", 4), -1) << "another incarnation is not in the view";
  Result<std::string> address = decode_member_address(encode_member_value("10.0.0.1:7000"));
  ASSERT_TRUE(address.ok());
  EXPECT_EQ(address.value(), "10.0.0.1:7000");
}

TEST(ViewFormat, MalformedViewsAreDataLoss) {
  for (
      const char* bad :
      {"", "{", "[]", R"({"members":[]})", R"({"version":0,"members":[]})", R"({"version":-1,"members":[]})",
       R"({"version":1})", R"({"version":1,"members":{}})", R"({"version":1,"members":[1]})",
       R"({"version":1,"members":[{"id":"a","address":"x"}]})",
       R"({"version":1,"members":[{"id":"a","address":"x","incarnation":0}]})",
       R"({"version":1,"members":[{"id":"a/b","address":"x","incarnation":1}]})",
       R"({"version":1,"members":[{"id":"a","address":"x","incarnation":1},{"id":"a","address":"y","incarnation":2}]})"}) {
    Result<View> v = decode_view(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), Code::kDataLoss) << bad;
  }
}

TEST(PlanNextView, FirstMembersFormViewOneInJoinOrder) {
  View next = plan_next_view(View{}, {member("b", 9), member("a", 5)});
  EXPECT_EQ(next.version, 1u);
  EXPECT_EQ(ids(next), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(plan_next_view(View{}, {}).version, 0u) << "no members, no view";
}

TEST(PlanNextView, DropsTheGoneKeepsTheOrderAppendsNewcomers) {
  const View v3{3, {member("c", 20), member("a", 5), member("b", 9)}};
  const View next = plan_next_view(v3, {member("b", 9), member("c", 20), member("d", 30)});
  EXPECT_EQ(next.version, 4u);
  EXPECT_EQ(ids(next), (std::vector<std::string>{"c", "b", "d"})) << "chain order kept, not re-sorted";
}

TEST(PlanNextView, ARejoinedMemberIsANewIncarnationAtTheTail) {
  const View v{5, {member("a", 5), member("b", 9), member("c", 20)}};
  const View next = plan_next_view(v, {member("a", 40), member("b", 9), member("c", 20)});
  EXPECT_EQ(next.version, 6u);
  EXPECT_EQ(ids(next), (std::vector<std::string>{"b", "c", "a"}));
  EXPECT_EQ(next.members.back().incarnation, 40);
}

TEST(PlanNextView, NothingChangedMeansNoNewVersion) {
  const View v{5, {member("a", 5), member("b", 9)}};
  EXPECT_EQ(plan_next_view(v, {member("b", 9), member("a", 5)}), v);
  const View moved = plan_next_view(v, {member("a", 5, "new-address"), member("b", 9)});
  EXPECT_EQ(moved.version, 6u) << "a new address is a new view";
  EXPECT_EQ(moved.members[0].address, "new-address");
  const View empty = plan_next_view(v, {});
  EXPECT_EQ(empty.version, 6u);
  EXPECT_TRUE(empty.members.empty()) << "everyone left: an empty view, not a stale one";
}

// The protocol on the in-process store with fake time. Heartbeats are ticks,
// the manager has no resync thread; the store thread delivers watch events.
class ViewProtocol : public ::testing::Test {
 protected:
  ViewProtocol() : store_(InProcessStoreOptions{.clock = &clock_, .expiry_poll_ms = 0}) {}

  std::unique_ptr<Member> join(const std::string& id) {
    Result<std::unique_ptr<Member>> m = Member::join(&store_, group_, id, id + ".example:7000",
                                                     MemberOptions{.ttl_seconds = 2, .heartbeat_thread = false});
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  void advance(uint64_t ns) {
    clock_.advance_ns(ns);
    store_.expire_leases();
  }
  static bool members_are(const View& v, std::vector<std::string> want) { return ids(v) == want; }

  FakeClock clock_;
  InProcessStore store_;
  GroupPath group_{"test", "g"};
};

TEST_F(ViewProtocol, JoinsAndALapsedLeaseEachMakeTheNextVersion) {
  Result<std::unique_ptr<ViewManager>> manager = ViewManager::start(&store_, group_, {.resync_interval_ms = 0});
  ASSERT_TRUE(manager.ok()) << manager.status().to_string();
  ViewLog log;
  Result<std::unique_ptr<ViewWatch>> watch = watch_view(&store_, group_, log.callback());
  ASSERT_TRUE(watch.ok());

  std::unique_ptr<Member> a = join("a");
  ASSERT_TRUE(log.await([](const View& v) { return members_are(v, {"a"}); }));
  EXPECT_EQ(log.views().back().version, 1u);
  EXPECT_EQ(log.views().back().members[0].address, "a.example:7000");
  EXPECT_EQ(log.views().back().members[0].incarnation, a->incarnation());

  clock_.advance_ns(1 * kSecond);
  std::unique_ptr<Member> b = join("b");
  ASSERT_TRUE(log.await([](const View& v) { return members_are(v, {"a", "b"}); }));
  EXPECT_EQ(log.views().back().version, 2u);

  // a beats at t=1.5 s (its lease now runs to 3.5 s); b, joined at t=1 s with a
  // 2 s TTL, never beats and lapses at t=3 s.
  advance(kSecond / 2);
  ASSERT_TRUE(a->tick().ok());
  advance(kSecond + kSecond / 2);  // t = 3 s
  ASSERT_TRUE(a->tick().ok()) << "a's lease must survive: it was kept alive";
  ASSERT_TRUE(log.await([](const View& v) { return members_are(v, {"a"}); }));
  EXPECT_EQ(log.views().back().version, 3u);
  EXPECT_EQ(b->tick().code(), Code::kNotFound);
  EXPECT_TRUE(b->expired());

  const std::vector<View> views = log.views();
  ASSERT_EQ(views.size(), 3u);
  EXPECT_TRUE(versions_are_consecutive(views));
  EXPECT_EQ(manager.value()->views_committed(), 3u);
  EXPECT_TRUE(manager.value()->last_error().ok());
}

TEST_F(ViewProtocol, ARejoinAfterExpiryGoesToTheTail) {
  Result<std::unique_ptr<ViewManager>> manager = ViewManager::start(&store_, group_, {.resync_interval_ms = 0});
  ASSERT_TRUE(manager.ok());
  ViewLog log;
  Result<std::unique_ptr<ViewWatch>> watch = watch_view(&store_, group_, log.callback());
  ASSERT_TRUE(watch.ok());
  std::unique_ptr<Member> a = join("a");
  std::unique_ptr<Member> b = join("b");
  ASSERT_TRUE(log.await([](const View& v) { return members_are(v, {"a", "b"}); }));

  // Both lapse... and come back in the other order of joining.
  advance(3 * kSecond);
  ASSERT_TRUE(log.await([](const View& v) { return v.members.empty(); }));
  std::unique_ptr<Member> b2 = join("b");
  ASSERT_TRUE(log.await([](const View& v) { return members_are(v, {"b"}); }));
  std::unique_ptr<Member> a2 = join("a");
  ASSERT_TRUE(log.await([](const View& v) { return members_are(v, {"b", "a"}); }));
  EXPECT_GT(a2->incarnation(), a->incarnation());
  EXPECT_EQ(log.views().back().position("a", a2->incarnation()), 1);
  EXPECT_EQ(log.views().back().position("a", a->incarnation()), -1);
  EXPECT_TRUE(versions_are_consecutive(log.views()));
}

TEST_F(ViewProtocol, LeavingDropsAMemberWithoutWaitingForItsLease) {
  Result<std::unique_ptr<ViewManager>> manager = ViewManager::start(&store_, group_, {.resync_interval_ms = 0});
  ASSERT_TRUE(manager.ok());
  ViewLog log;
  Result<std::unique_ptr<ViewWatch>> watch = watch_view(&store_, group_, log.callback());
  ASSERT_TRUE(watch.ok());
  std::unique_ptr<Member> a = join("a");
  std::unique_ptr<Member> b = join("b");
  std::unique_ptr<Member> c = join("c");
  ASSERT_TRUE(log.await([](const View& v) { return members_are(v, {"a", "b", "c"}); }));
  ASSERT_TRUE(b->leave().ok());
  ASSERT_TRUE(log.await([](const View& v) { return members_are(v, {"a", "c"}); }));
  b.reset();  // leaving twice is fine
}

TEST_F(ViewProtocol, AnIdInUseCannotJoinTwice) {
  std::unique_ptr<Member> a = join("a");
  Result<std::unique_ptr<Member>> again =
      Member::join(&store_, group_, "a", "x", {.ttl_seconds = 2, .heartbeat_thread = false});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists) << again.status().to_string();
  EXPECT_EQ(Member::join(&store_, group_, "bad/id", "x", {.heartbeat_thread = false}).status().code(),
            Code::kInvalidArgument);
}

TEST_F(ViewProtocol, AManagerStartedLateCatchesUp) {
  std::unique_ptr<Member> a = join("a");
  std::unique_ptr<Member> b = join("b");
  Result<std::unique_ptr<ViewManager>> manager = ViewManager::start(&store_, group_, {.resync_interval_ms = 0});
  ASSERT_TRUE(manager.ok());
  ViewLog log;
  Result<std::unique_ptr<ViewWatch>> watch = watch_view(&store_, group_, log.callback());
  ASSERT_TRUE(watch.ok());
  ASSERT_EQ(log.views().size(), 1u) << "watch_view delivers the current view before returning";
  EXPECT_EQ(ids(log.views()[0]), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(log.views()[0].version, 1u) << "both members arrive in one view";
}

TEST_F(ViewProtocol, AMalformedViewIsLeftAloneAndReported) {
  ASSERT_TRUE(store_.put(group_.view_key(), "{not json").ok());
  std::unique_ptr<Member> a = join("a");
  Result<std::unique_ptr<ViewManager>> manager = ViewManager::start(&store_, group_, {.resync_interval_ms = 0});
  ASSERT_TRUE(manager.ok()) << "a corrupt view must not stop the manager from starting";
  const Status s = manager.value()->reconcile();
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find(group_.view_key()), std::string::npos) << s.to_string();
  EXPECT_EQ(store_.get(KeySpan::exactly(group_.view_key())).value().kvs.at(0).value, "{not json");
  EXPECT_EQ(manager.value()->views_committed(), 0u);
}

TEST_F(ViewProtocol, MalformedMemberKeysAreSkippedAndCounted) {
  ASSERT_TRUE(store_.put(group_.member_key("junk"), "not json").ok());
  ASSERT_TRUE(store_.put(group_.members_prefix() + "deeper/path", R"({"address":"x"})").ok());
  std::unique_ptr<Member> a = join("a");
  Result<std::unique_ptr<ViewManager>> manager = ViewManager::start(&store_, group_, {.resync_interval_ms = 0});
  ASSERT_TRUE(manager.ok());
  Result<RangeResult> view = store_.get(KeySpan::exactly(group_.view_key()));
  ASSERT_TRUE(view.ok());
  ASSERT_EQ(view.value().kvs.size(), 1u);
  Result<View> v = decode_view(view.value().kvs[0].value);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(ids(v.value()), (std::vector<std::string>{"a"}));
  EXPECT_GE(manager.value()->malformed_members(), 2u);
}

}  // namespace
}  // namespace ferry::membership::testing
