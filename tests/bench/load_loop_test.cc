// The load loops (bench/load_loop.h) driven on a FakeClock by model targets
// whose operations take a known time: what each loop starts, what it
// measures and from when, and how a window opens, closes and drains.
#include "load_loop.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "ferry/common/clock.h"

namespace ferry::bench {
namespace {

constexpr uint64_t kUs = 1000;

// An asynchronous target: up to `slots` operations in flight, each ending
// `service_ns` after it started; every step() is `tick_ns` of time.
class ServiceTarget {
 public:
  ServiceTarget(FakeClock& clock, Recorder& rec, uint32_t slots, uint64_t service_ns, uint64_t tick_ns)
      : clock_(clock), rec_(rec), slots_(slots), service_ns_(service_ns), tick_ns_(tick_ns) {}

  Status issue(uint64_t at_ns) {
    if (in_flight_.size() >= slots_) return Status(Code::kResourceExhausted, {});
    in_flight_.push_back({at_ns, clock_.now_ns() + service_ns_});
    latest_start_delay_ns_ = std::max(latest_start_delay_ns_, clock_.now_ns() - at_ns);
    ++issued_;
    rec_.issued();
    return ok_status();
  }
  Status step(uint64_t until_ns) {
    (void)until_ns;
    clock_.advance_ns(tick_ns_);
    while (!in_flight_.empty() && in_flight_.front().due_ns <= clock_.now_ns() && !stalled_) {
      rec_.completed(0, in_flight_.front().at_ns, clock_.now_ns());
      in_flight_.pop_front();
    }
    return ok_status();
  }
  void on_window_open(uint64_t now_ns) { opened_at_.push_back(now_ns); }
  void on_window_close(uint64_t now_ns) { closed_at_.push_back(now_ns); }

  void set_stalled(bool s) { stalled_ = s; }
  uint64_t issued() const { return issued_; }
  uint64_t latest_start_delay_ns() const { return latest_start_delay_ns_; }
  const std::vector<uint64_t>& opened_at() const { return opened_at_; }
  const std::vector<uint64_t>& closed_at() const { return closed_at_; }

 private:
  struct Op {
    uint64_t at_ns, due_ns;
  };
  FakeClock& clock_;
  Recorder& rec_;
  uint32_t slots_;
  uint64_t service_ns_, tick_ns_;
  std::deque<Op> in_flight_;
  bool stalled_ = false;
  uint64_t issued_ = 0;
  uint64_t latest_start_delay_ns_ = 0;
  std::vector<uint64_t> opened_at_, closed_at_;
};

// A synchronous target: issue() runs the operation, `op_ns` long; an idle
// step() sleeps until the next arrival.
class SyncTarget {
 public:
  static constexpr bool kSynchronous = true;
  SyncTarget(FakeClock& clock, Recorder& rec, uint64_t op_ns) : clock_(clock), rec_(rec), op_ns_(op_ns) {}

  Status issue(uint64_t at_ns) {
    clock_.advance_ns(op_ns_);
    ++ran_;
    if (ran_ == fail_at_) {
      rec_.issued();
      rec_.failed("operation " + std::to_string(ran_) + " broke");
    } else {
      rec_.record(0, at_ns, clock_.now_ns());
    }
    steps_since_op_ = 0;
    return ok_status();
  }
  Status step(uint64_t until_ns) {
    ++steps_since_op_;
    max_steps_between_ops_ = std::max(max_steps_between_ops_, steps_since_op_);
    if (until_ns > clock_.now_ns()) {
      clock_.advance_to(until_ns);
      ++sleeps_;
    } else if (until_ns == 0) {
      clock_.advance_ns(100);
    }
    return ok_status();
  }
  bool finished() const { return finish_after_ != 0 && ran_ >= finish_after_; }

  uint64_t ran_ = 0;
  uint64_t fail_at_ = 0;       // this operation fails (0: none)
  uint64_t finish_after_ = 0;  // finished() after this many (0: never)
  uint64_t sleeps_ = 0;
  uint64_t steps_since_op_ = 0;
  uint64_t max_steps_between_ops_ = 0;

 private:
  FakeClock& clock_;
  Recorder& rec_;
  uint64_t op_ns_;
};

TEST(Recorder, MeasuresWhatStartsInTheWindowAndCountsWhatEndsInIt) {
  Recorder rec(2);
  rec.set_window(100, 200);
  rec.record(0, 50, 150);   // started before: not measured, ended inside: counted
  rec.record(1, 150, 170);  // inside: measured and counted
  rec.record(1, 190, 260);  // started inside, ended after: measured, not counted
  EXPECT_EQ(rec.all().count(), 2u);
  EXPECT_EQ(rec.of(0).count(), 0u);
  EXPECT_EQ(rec.of(1).count(), 2u);
  EXPECT_EQ(rec.of(1).max(), 70u);
  EXPECT_EQ(rec.committed_in_window(), 2u);
  EXPECT_EQ(rec.committed_in_window(0), 1u);
  EXPECT_EQ(rec.committed_in_window(1), 1u);
  EXPECT_EQ(rec.outstanding(), 0u);
}

TEST(ClosedLoop, KeepsTheTargetFullAndMeasuresFromEachStart) {
  FakeClock clock;
  Recorder rec;
  ServiceTarget target(clock, rec, /*slots=*/4, /*service_ns=*/10 * kUs, /*tick_ns=*/kUs);
  auto out = run_closed(target, rec, LoopPlan::timed(100e-6, 1e-3), clock);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  // 4 in flight, 10 us each: 400 in 1 ms, every one 10 us from its start.
  EXPECT_NEAR(static_cast<double>(rec.committed_in_window()), 400, 4);
  EXPECT_EQ(rec.all().min(), 10 * kUs);
  EXPECT_EQ(rec.all().max(), 10 * kUs);
  EXPECT_NEAR(out->seconds(), 1e-3, 2e-6);
  EXPECT_EQ(out->unfinished, 0u);
  EXPECT_EQ(rec.outstanding(), 0u);  // drained before returning
  ASSERT_EQ(target.opened_at().size(), 1u);
  ASSERT_EQ(target.closed_at().size(), 1u);
  EXPECT_EQ(target.opened_at()[0], out->opened_ns);
  EXPECT_GE(out->opened_ns, rec.window_start_ns());
}

TEST(OpenLoop, ChargesTheWaitForRoomFromTheScheduledArrival) {
  FakeClock clock;
  Recorder rec;
  // One slot, 10 us per operation, 50,000 arrivals a second (a 20 us mean
  // gap): half loaded, so Poisson bursts queue in the backlog.
  ServiceTarget target(clock, rec, 1, 10 * kUs, kUs);
  Backlog backlog(1 << 12);
  auto out = run_open(target, rec, LoopPlan::timed(0, 20e-3), Arrivals{50'000, 7}, backlog, clock);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_GT(out->backlog_max, 1u);
  EXPECT_GT(target.latest_start_delay_ns(), 10 * kUs);  // some arrival waited for the slot
  // Every measured latency is the service time plus that arrival's wait.
  EXPECT_GE(rec.all().min(), 10 * kUs);
  EXPECT_GE(rec.all().max(), 10 * kUs + target.latest_start_delay_ns() - kUs);
  // All arrivals scheduled in the window were measured (drained after it).
  EXPECT_EQ(rec.all().count(), out->started);
  EXPECT_NEAR(static_cast<double>(out->started), 1000, 150);
  EXPECT_EQ(out->unfinished, 0u);
  EXPECT_FALSE(out->overflowed);
}

TEST(OpenLoop, AFullBacklogClosesTheWindowThereAndTheDrainCapGivesUp) {
  FakeClock clock;
  Recorder rec;
  ServiceTarget target(clock, rec, /*slots=*/0, 10 * kUs, kUs);  // never has room
  Backlog backlog(8);
  LoopPlan plan = LoopPlan::timed(0, 1e-3);
  plan.drain_cap_ns = 50 * kUs;
  auto out = run_open(target, rec, plan, Arrivals{1e6, 3}, backlog, clock);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(out->overflowed);
  EXPECT_LT(rec.window_end_ns() - rec.window_start_ns(), 100 * kUs);  // cut short, not the planned 1 ms
  EXPECT_EQ(out->unfinished, 8u);
  EXPECT_EQ(out->backlog_max, 8u);
  EXPECT_EQ(target.issued(), 0u);
}

TEST(ClosedLoop, CallsStillInFlightAfterTheDrainCapAreWaitedForThenAnError) {
  FakeClock clock;
  Recorder rec;
  ServiceTarget target(clock, rec, 2, 10 * kUs, /*tick_ns=*/1'000 * kUs);
  target.set_stalled(true);  // nothing ever ends
  LoopPlan plan = LoopPlan::timed(0, 5e-3);
  auto out = run_closed(target, rec, plan, clock);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("never ended"), std::string::npos) << out.status().to_string();
}

TEST(ClosedLoop, ACountedWindowWarmsUpThenRunsItsOperationsOneAPass) {
  FakeClock clock;
  Recorder rec;
  SyncTarget target(clock, rec, 3 * kUs);
  auto out = run_closed(target, rec, LoopPlan::counted(/*warmup_ops=*/5, /*ops=*/20), clock);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(target.ran_, 25u);
  EXPECT_EQ(out->started, 20u);
  EXPECT_EQ(rec.all().count(), 20u);  // the warm-up is not measured
  EXPECT_EQ(rec.all().max(), 3 * kUs);
  EXPECT_FALSE(out->capped);
  EXPECT_EQ(target.max_steps_between_ops_, 1u);  // a step after every operation
}

TEST(ClosedLoop, ACountedWindowStopsAtItsTimeCap) {
  FakeClock clock;
  Recorder rec;
  SyncTarget target(clock, rec, 1'000 * kUs);
  auto out = run_closed(target, rec, LoopPlan::counted(0, 100, /*cap_seconds=*/10e-3), clock);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(out->capped);
  EXPECT_NEAR(static_cast<double>(out->started), 10, 1);
  EXPECT_EQ(rec.all().count(), out->started);
}

// A synchronous target of 1 us operations, a counted closed-loop window of 100.
class CountedClosedLoop : public ::testing::Test {
 protected:
  Result<LoopOutcome> run() { return run_closed(target, rec, LoopPlan::counted(0, 100), clock); }
  FakeClock clock;
  Recorder rec;
  SyncTarget target{clock, rec, kUs};
};

TEST_F(CountedClosedLoop, ATargetThatFinishesEndsTheWindow) {
  target.finish_after_ = 7;
  auto out = run();
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->started, 7u);
  EXPECT_FALSE(out->capped);
}

TEST_F(CountedClosedLoop, AFailedOperationEndsTheLoopWithItsError) {
  target.fail_at_ = 3;
  auto out = run();
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("operation 3 broke"), std::string::npos) << out.status().to_string();
  EXPECT_EQ(target.ran_, 3u);
}

TEST(OpenLoop, AnIdleSynchronousTargetSleepsUntilTheNextArrival) {
  FakeClock clock;
  Recorder rec;
  SyncTarget target(clock, rec, 2 * kUs);  // far below the 1 ms mean gap
  Backlog backlog(64);
  auto out = run_open(target, rec, LoopPlan::counted(0, 50, /*cap_seconds=*/10), Arrivals{1000, 11}, backlog, clock);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(target.ran_, 50u);
  EXPECT_EQ(rec.all().count(), 50u);
  EXPECT_GE(target.sleeps_, 40u);
  // An operation starts at its arrival (latency: its own 2 us) unless the one
  // before still ran then.
  EXPECT_EQ(rec.all().min(), 2 * kUs);
  EXPECT_LT(rec.all().max(), 6 * kUs);
  EXPECT_FALSE(out->capped);
}

TEST(OpenLoop, ACountedWindowsCapWithoutDrainDropsWhatIsQueued) {
  FakeClock clock;
  Recorder rec;
  SyncTarget target(clock, rec, 1'000 * kUs);  // 1 ms each against 10,000 arrivals a second
  Backlog backlog(1000);
  LoopPlan plan = LoopPlan::counted(0, 500, /*cap_seconds=*/5e-3);
  plan.drain_cap_ns = 0;
  auto out = run_open(target, rec, plan, Arrivals{10'000, 5}, backlog, clock);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(out->capped);
  EXPECT_NEAR(static_cast<double>(target.ran_), 5, 1);  // nothing runs after the cap
  EXPECT_GT(out->unfinished, 0u);
  EXPECT_EQ(rec.all().count(), target.ran_);
}

TEST(LoopPlan, ASampledWindowIsLongEnoughForItsSamplesWithinItsBounds) {
  // 2,000 samples at 10,000/s: 0.2 s, inside [0.1, 1].
  EXPECT_EQ(LoopPlan::sampled(0.05, 2000, 10'000, 0.1, 1.0).window_ns, 200'000'000u);
  EXPECT_EQ(LoopPlan::sampled(0.05, 2000, 10'000, 0.1, 1.0).warmup_ns, 50'000'000u);
  EXPECT_EQ(LoopPlan::sampled(0, 2000, 1e6, 0.1, 1.0).window_ns, 100'000'000u);    // the min
  EXPECT_EQ(LoopPlan::sampled(0, 2000, 100, 0.1, 1.0).window_ns, 1'000'000'000u);  // the max
  EXPECT_EQ(LoopPlan::sampled(0, 2000, 100, 0.3, 0.2).window_ns, 300'000'000u);    // a max below the min
}

}  // namespace
}  // namespace ferry::bench
