// Views with real concurrency: managers racing to commit the same view, and
// a real etcd where a lapsed lease (no more heartbeats) changes the view.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "etcd_process.h"
#include "ferry/common/rng.h"
#include "ferry/membership/etcd_store.h"
#include "ferry/membership/in_process_store.h"
#include "ferry/membership/view.h"
#include "membership_test_util.h"
#include "test_seed.h"

namespace ferry::membership::testing {
namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kChurnSteps = 40;
#else
constexpr int kChurnSteps = 150;
#endif

// Forwards to a store, yielding the CPU before every transaction so that
// managers that read the same view overlap in their read-then-commit window
// far more often than they would by chance.
class RacyStore final : public MembershipStore {
 public:
  explicit RacyStore(MembershipStore* inner) : inner_(inner) {}
  Result<Revision> put(const std::string& k, const std::string& v, LeaseId l) override { return inner_->put(k, v, l); }
  Result<RangeResult> get(const KeySpan& s) override { return inner_->get(s); }
  Result<DeleteResult> erase(const KeySpan& s) override { return inner_->erase(s); }
  Result<TxnResult> compare_and_swap(const std::string& k, Revision r, const Mutation& m) override {
    for (int i = 0; i < 3; ++i) std::this_thread::yield();
    return inner_->compare_and_swap(k, r, m);
  }
  Result<Lease> grant_lease(int64_t ttl) override { return inner_->grant_lease(ttl); }
  Result<int64_t> keep_alive(LeaseId l) override { return inner_->keep_alive(l); }
  Status revoke_lease(LeaseId l) override { return inner_->revoke_lease(l); }
  Result<std::unique_ptr<Watch>> watch(const KeySpan& s, Revision r, WatchCallback cb) override {
    return inner_->watch(s, r, std::move(cb));
  }

 private:
  MembershipStore* const inner_;
};

// Two managers (on the store's watch thread) and two threads calling
// reconcile() in a loop race for every view while members join and leave.
// Every version must be committed exactly once: no gaps, no duplicates, and
// the final view must be the live members.
// A watcher can see a view before the manager that wrote it has read its
// transaction's reply and counted the commit: the managers' counts are
// awaited (the deadline only bounds a failing test).
uint64_t await_commits(const ViewManager& m1, const ViewManager& m2, uint64_t want) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (m1.views_committed() + m2.views_committed() < want && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return m1.views_committed() + m2.views_committed();
}

TEST(ViewManagers, RacingManagersCommitOneVersionSequence) {
  InProcessStore inner;
  RacyStore store(&inner);
  const GroupPath group{"race", "g"};
  // FERRY_SEED=<n> replays a run (a fresh seed otherwise, printed).
  const uint64_t seed = ferry::testing::test_seed(std::random_device{}());
  SCOPED_TRACE(ferry::testing::rerun_with(seed));

  Result<std::unique_ptr<ViewManager>> m1 = ViewManager::start(&store, group, {.resync_interval_ms = 0});
  Result<std::unique_ptr<ViewManager>> m2 = ViewManager::start(&store, group, {.resync_interval_ms = 0});
  ASSERT_TRUE(m1.ok() && m2.ok());
  ViewLog log;
  Result<std::unique_ptr<ViewWatch>> watch = watch_view(&store, group, log.callback());
  ASSERT_TRUE(watch.ok());

  std::atomic<bool> stop{false};
  std::atomic<int> reconcile_errors{0};
  std::mutex error_mu;
  Status first_error;
  std::vector<std::thread> racers;
  for (ViewManager* m : {m1.value().get(), m2.value().get()}) {
    racers.emplace_back([&, m] {
      while (!stop.load()) {
        const Status s = m->reconcile();
        // Losing every one of its bounded attempts to the other racers is a
        // retry-later answer (the next event or resync retries), not an error.
        const bool contended = s.code() == Code::kUnavailable && s.message().find("contended") != std::string::npos;
        if (!s.ok() && !contended) {
          reconcile_errors.fetch_add(1);
          std::lock_guard lk(error_mu);
          first_error = first_error.ok() ? s : first_error;
        }
      }
    });
  }

  Rng rng(seed);
  std::vector<std::unique_ptr<Member>> live;
  int next_id = 0;
  for (int step = 0; step < kChurnSteps; ++step) {
    if (live.empty() || rng.below(3) != 0) {
      Result<std::unique_ptr<Member>> m = Member::join(&store, group, "m" + std::to_string(next_id++), "addr",
                                                       {.ttl_seconds = 60, .heartbeat_thread = false});
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      live.push_back(std::move(m).value());
    } else {
      const size_t victim = rng.below(live.size());
      ASSERT_TRUE(live[victim]->leave().ok());
      live.erase(live.begin() + static_cast<ptrdiff_t>(victim));
    }
  }
  std::set<std::string> want;
  for (const auto& m : live) want.insert(m->id());
  ASSERT_TRUE(log.await([&](const View& v) {
    const std::vector<std::string> have = ids(v);
    return std::set<std::string>(have.begin(), have.end()) == want && have.size() == want.size();
  })) << "the view never caught up with the live members";
  stop.store(true);
  for (std::thread& t : racers) t.join();

  const std::vector<View> views = log.views();
  EXPECT_TRUE(versions_are_consecutive(views));
  EXPECT_EQ(views.front().version, 1u);
  // Each committed version was committed by exactly one manager.
  EXPECT_EQ(await_commits(*m1.value(), *m2.value(), views.back().version), views.back().version)
      << "every view was committed by exactly one manager";
  EXPECT_EQ(reconcile_errors.load(), 0) << first_error.to_string();
  // The survivors are in join order: nobody was reordered, only dropped.
  for (size_t i = 1; i < views.back().members.size(); ++i) {
    EXPECT_LT(views.back().members[i - 1].incarnation, views.back().members[i].incarnation);
  }
  watch.value().reset();
  m1.value().reset();
  m2.value().reset();
  live.clear();
}

// The acceptance test of issue 11 item 4: on a real etcd, members heartbeat
// from their threads; when one stops, its lease expires and the managers
// commit a view without it, which a watcher sees.
TEST(ViewManagers, OnEtcdALapsedLeaseDrivesAViewChange) {
  Result<EtcdProcess*> etcd = SharedEtcd::get();
  ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
  Result<std::unique_ptr<MembershipStore>> store = open_store(etcd.value()->endpoint());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  const GroupPath group{"etcd-test", "chain-" + unique_suffix()};

  Result<std::unique_ptr<ViewManager>> m1 = ViewManager::start(store.value().get(), group, {.resync_interval_ms = 500});
  Result<std::unique_ptr<ViewManager>> m2 = ViewManager::start(store.value().get(), group, {.resync_interval_ms = 500});
  ASSERT_TRUE(m1.ok()) << m1.status().to_string();
  ASSERT_TRUE(m2.ok()) << m2.status().to_string();
  ViewLog log;
  Result<std::unique_ptr<ViewWatch>> watch = watch_view(store.value().get(), group, log.callback());
  ASSERT_TRUE(watch.ok()) << watch.status().to_string();

  // a's lease is long enough that no stall of a loaded test machine can
  // lapse it (its heartbeats still run); b's is short, because b will die.
  const MemberOptions survivor{.ttl_seconds = 20, .heartbeat_thread = true};
  const MemberOptions heartbeat{.ttl_seconds = 2, .heartbeat_thread = true};
  Result<std::unique_ptr<Member>> a = Member::join(store.value().get(), group, "a", "10.0.0.1:7000", survivor);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  Result<std::unique_ptr<Member>> b = Member::join(store.value().get(), group, "b", "10.0.0.2:7000", heartbeat);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_TRUE(log.await([](const View& v) {
    return ids(v) == std::vector<std::string>{"a", "b"};
  })) << "no view with both members";

  b.value()->stop_heartbeat();  // b "dies": no keep-alive, no revoke
  ASSERT_TRUE(log.await([](const View& v) { return ids(v) == std::vector<std::string>{"a"}; }))
      << "b's lease expiry did not change the view";
  EXPECT_FALSE(a.value()->expired()) << "a is still a member";
  EXPECT_EQ(b.value()->tick().code(), Code::kNotFound);

  const std::vector<View> views = log.views();
  EXPECT_TRUE(versions_are_consecutive(views));
  EXPECT_EQ(views.back().members[0].address, "10.0.0.1:7000");
  EXPECT_EQ(views.back().members[0].incarnation, a.value()->incarnation());
  EXPECT_EQ(await_commits(*m1.value(), *m2.value(), views.back().version), views.back().version)
      << "every view was committed by exactly one manager";
  EXPECT_TRUE(watch.value()->status().ok()) << watch.value()->status().to_string();

  watch.value().reset();
  m1.value().reset();
  m2.value().reset();
  a.value().reset();
  b.value().reset();
}

}  // namespace
}  // namespace ferry::membership::testing
