// The load loops every benchmark drives its system with: one closed loop, one
// open loop (Poisson arrivals, latency from the scheduled arrival), one
// Recorder and one drain cap (design brief: the load drivers exist once and
// are shared by every benchmark).
//
// A loop drives a *target*: the benchmark's system under test seen as
// operations it can start and make progress on. A target type T has
//
//   Status issue(uint64_t at_ns);
//       Starts one operation whose latency runs from at_ns (closed loop: the
//       time it is started; open loop: its scheduled arrival) and reports it
//       to the loop's Recorder: issued() now, then completed() or failed()
//       when it ends, from a completion callback or before issue() returns
//       (Recorder::record() does both for an operation that is already
//       over). kResourceExhausted: no room now (the loop steps and tries
//       again); any other error ends the loop with it.
//   Status step(uint64_t until_ns);
//       Progress: step the NIC engine, poll completions, a replica's work
//       between operations. A target waiting for nothing but the next
//       arrival may sleep until until_ns (0: do not wait). An error ends the
//       loop with it.
//
// and may have
//   static constexpr bool kSynchronous = true;
//       issue() runs the whole operation: the loop starts one per pass, with
//       a step() after each.
//   void on_window_open(uint64_t now_ns);  void on_window_close(uint64_t now_ns);
//       the edges of the measured window (counter snapshots).
//   bool finished() const;
//       nothing more to run: ends a counted window as its count would.
//
// The measured window. Timed (LoopPlan::timed): after warmup_ns, window_ns
// long; operations started (closed loop) or scheduled (open loop) inside it
// are measured, and the loop then waits up to drain_cap_ns for those still
// queued or in flight (their latency counts; any left are `unfinished`).
// Counted (LoopPlan::counted): after warmup_ops operations have run to
// completion, the next `ops` operations, closing when the last one ends; its
// time bound is a cap (`capped`: it closed the window first).
//
// Both loops run on the calling thread, read time only from the Clock they
// are given (a FakeClock in tests), and return only when no operation is in
// flight any more (completion callbacks hold the Recorder): after a drain cap
// ran out, they wait as long again for the calls still in flight, unmeasured,
// and fail if any never ends.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/histogram.h"
#include "ferry/common/status.h"
#include "ferry/workload/arrivals.h"

namespace ferry::bench {

// After a timed window, the operations it measures may still be queued or in
// flight: a loop waits for them this long.
inline constexpr uint64_t kDrainCapNs = 10'000'000'000ULL;

// Stalls of the loop's thread (which, in most benchmarks, steps every NIC): a
// gap between two passes longer than kStallNs means the core was taken away
// (a timer tick, an interrupt, the hypervisor) and every NIC stood still
// meanwhile. Only gaps that end inside the measured window count.
struct LoopGaps {
  static constexpr uint64_t kStallNs = 20'000;
  uint64_t last = 0;
  uint64_t max_ns = 0;
  uint64_t stalls = 0;  // gaps over kStallNs
  uint64_t stalled_ns = 0;
  void pass(uint64_t now, bool in_window) {
    const uint64_t gap = last != 0 && now > last ? now - last : 0;
    last = now;
    if (!in_window) return;
    max_ns = gap > max_ns ? gap : max_ns;
    if (gap > kStallNs) {
      ++stalls;
      stalled_ns += gap;
    }
  }
};

// What the loop's thread saw of a point's operations: latency histograms
// (all operations, and by kind: a set or a get, a put, ...), throughput
// inside the window, operations in flight and failures. The loops set the
// window; targets report each operation. Single-threaded: targets report
// from the loop's thread (completion callbacks run inside step()). It must
// stay in place while operations are in flight: their callbacks hold its
// address.
class Recorder {
 public:
  // `kinds`: how many kinds of operation the target reports.
  explicit Recorder(size_t kinds = 1);

  // An operation started.
  void issued() { ++outstanding_; }
  // An operation of `kind` that started at `at_ns` ended at `now_ns`. Its
  // latency is measured if it started inside the window; it counts toward
  // the window's throughput if it ended inside it.
  void completed(size_t kind, uint64_t at_ns, uint64_t now_ns) {
    FERRY_DASSERT(kind < kinds_, "operation kind ", kind, " of ", kinds_);
    --outstanding_;
    if (now_ns >= window_start_ns_ && now_ns < window_end_ns_) {
      ++committed_in_window_;
      if (!by_kind_.empty()) ++by_kind_[kind].committed_in_window;
    }
    if (at_ns >= window_start_ns_ && at_ns < window_end_ns_) {
      const uint64_t latency = now_ns > at_ns ? now_ns - at_ns : 0;
      all_.record(latency);
      if (!by_kind_.empty()) by_kind_[kind].latency.record(latency);
    }
  }
  // An operation ended in failure (`what` says how): the loop ends with an
  // error once it sees one.
  void failed(std::string what);
  // An operation that already ended: issued() and completed() at once.
  void record(size_t kind, uint64_t at_ns, uint64_t now_ns) {
    issued();
    completed(kind, at_ns, now_ns);
  }

  // Measured latencies (ns) of every kind, and of one.
  const Histogram& all() const { return all_; }
  const Histogram& of(size_t kind) const { return by_kind_.empty() ? all_ : by_kind_[kind].latency; }
  // Operations that ended inside the window, of every kind and of one.
  uint64_t committed_in_window() const { return committed_in_window_; }
  uint64_t committed_in_window(size_t kind) const {
    return by_kind_.empty() ? committed_in_window_ : by_kind_[kind].committed_in_window;
  }
  uint64_t outstanding() const { return outstanding_; }
  uint64_t failures() const { return failures_; }
  const std::string& first_failure() const { return first_failure_; }

  // [start, end) in the loop's clock; set by the loops.
  uint64_t window_start_ns() const { return window_start_ns_; }
  uint64_t window_end_ns() const { return window_end_ns_; }
  void set_window(uint64_t start_ns, uint64_t end_ns);

 private:
  struct Kind {
    Histogram latency;
    uint64_t committed_in_window = 0;
  };
  [[maybe_unused]] size_t kinds_;  // read only by a debug build's checks
  Histogram all_;
  std::vector<Kind> by_kind_;  // empty for a single kind: all_ is that kind's
  uint64_t window_start_ns_ = UINT64_MAX;
  uint64_t window_end_ns_ = UINT64_MAX;
  uint64_t committed_in_window_ = 0;
  uint64_t outstanding_ = 0;
  uint64_t failures_ = 0;
  std::string first_failure_;
};

// The open loop's arrivals that are due and not yet started: a fixed-capacity
// FIFO of scheduled times, allocated and touched once (a first touch of fresh
// pages inside a point costs a page fault each: on this kind of VM,
// milliseconds for a few megabytes). Keep one for a whole run.
class Backlog {
 public:
  explicit Backlog(size_t capacity);
  void clear() { head_ = tail_ = 0; }
  bool empty() const { return head_ == tail_; }
  size_t size() const { return tail_ - head_; }
  size_t capacity() const { return ring_.size(); }
  // False when full.
  bool push(uint64_t t) {
    if (size() == ring_.size()) return false;
    ring_[tail_++ % ring_.size()] = t;
    return true;
  }
  uint64_t front() const { return ring_[head_ % ring_.size()]; }
  void pop() { ++head_; }

 private:
  std::vector<uint64_t> ring_;
  size_t head_ = 0, tail_ = 0;
};

// How long a point runs (see the top of this file). Build one with timed()
// or counted().
struct LoopPlan {
  static constexpr uint64_t kUnbounded = UINT64_MAX;
  uint64_t warmup_ns = 0;   // timed warm-up
  uint64_t warmup_ops = 0;  // counted warm-up, run to completion (closed loop only)
  uint64_t window_ns = kUnbounded;
  uint64_t ops = kUnbounded;  // a counted window's operations
  uint64_t drain_cap_ns = kDrainCapNs;

  static LoopPlan timed(double warmup_seconds, double window_seconds);
  // An open loop's timed window, long enough for `samples` arrivals at
  // rate_per_s, within [min_seconds, max_seconds] (a max below the min
  // counts as the min).
  static LoopPlan sampled(double warmup_seconds, uint64_t samples, double rate_per_s, double min_seconds,
                          double max_seconds);
  // cap_seconds <= 0: no time bound.
  static LoopPlan counted(uint64_t warmup_ops, uint64_t ops, double cap_seconds = 0);
  bool is_counted() const { return ops != kUnbounded; }
};

// The open loop's arrival process.
struct Arrivals {
  double rate_per_s = 0;
  uint64_t seed = 0;
};

// What happened to the window, besides what the Recorder measured.
struct LoopOutcome {
  uint64_t opened_ns = 0;  // the window's edges, in the loop's clock
  uint64_t closed_ns = 0;
  uint64_t started = 0;      // operations started (closed) or arrivals scheduled (open) in the window
  bool capped = false;       // a counted window's time bound closed it before its operations ended
  uint64_t unfinished = 0;   // measured operations not ended when the drain cap ran out
  double offered_per_s = 0;  // open loop
  uint64_t backlog_max = 0;  // open loop: arrivals waiting to start, at most
  bool overflowed = false;   // open loop: the backlog filled, and the window closed there
  LoopGaps gaps;             // the loop thread's stalls inside the window
  double seconds() const { return closed_ns > opened_ns ? static_cast<double>(closed_ns - opened_ns) / 1e9 : 0.0; }
};

namespace detail {

// The window's state machine, shared by both loops: warming up -> open ->
// draining -> done. Its calls are the loops' steps, in order.
class LoopWindow {
 public:
  enum class Edge { kNone, kOpened, kClosed };

  // Sets the Recorder's window (a counted warm-up sets it when it opens).
  LoopWindow(const LoopPlan& plan, Recorder& rec, LoopOutcome& out, uint64_t start_ns);

  // Once a pass, before anything starts: opens, closes, ends the drain.
  // `queued`: operations due but not started; `finished`: the target's say.
  Edge advance(uint64_t now_ns, uint64_t queued, bool finished);
  bool is_open() const { return phase_ == Phase::kOpen; }
  bool done() const { return phase_ == Phase::kDone; }

  // Closed loop: whether an operation may start at `at_ns`; started() counts it.
  bool may_start(uint64_t at_ns) const;
  void started();
  // Open loop: whether an arrival at `t_ns` is scheduled; scheduled() counts it.
  bool may_schedule(uint64_t t_ns) const;
  void scheduled(uint64_t t_ns);
  // Open loop: the backlog is full at now_ns; the window closes there.
  void overflow(uint64_t now_ns);

  // The loop's error when the Recorder saw a failure, else ok.
  Status failure() const;

 private:
  enum class Phase { kWarmup, kOpen, kDrain, kDone };
  bool counted_done(uint64_t queued, bool finished) const;
  void open(uint64_t now_ns);
  void close(uint64_t now_ns);

  LoopPlan plan_;
  Recorder& rec_;
  LoopOutcome& out_;
  Phase phase_ = Phase::kWarmup;
  uint64_t warmup_started_ = 0;
  bool finished_ = false;  // the target's say at the last advance()
};

template <typename T>
constexpr bool synchronous() {
  if constexpr (requires { T::kSynchronous; }) {
    return T::kSynchronous;
  } else {
    return false;
  }
}

template <typename T>
bool finished(const T& target) {
  if constexpr (requires {
                  { target.finished() } -> std::convertible_to<bool>;
                }) {
    return target.finished();
  } else {
    return false;
  }
}

template <typename T>
void notify(T& target, LoopWindow::Edge edge, uint64_t now_ns) {
  if (edge == LoopWindow::Edge::kOpened) {
    if constexpr (requires { target.on_window_open(now_ns); }) target.on_window_open(now_ns);
  } else if (edge == LoopWindow::Edge::kClosed) {
    if constexpr (requires { target.on_window_close(now_ns); }) target.on_window_close(now_ns);
  }
}

// After the drain cap ran out: waits (unmeasured) for the calls still in
// flight, which hold the Recorder.
template <typename T>
Status wait_in_flight(T& target, const Recorder& rec, const Clock& clock) {
  if (rec.outstanding() == 0) return ok_status();
  const uint64_t stop = clock.now_ns() + kDrainCapNs;
  while (rec.outstanding() > 0 && clock.now_ns() < stop) FERRY_RETURN_IF_ERROR(target.step(0));
  if (rec.outstanding() > 0) return internal_error("load loop: calls never ended");
  return ok_status();
}

}  // namespace detail

// Closed loop: keeps the target full -- it starts operations until issue()
// says kResourceExhausted (a synchronous target: one per pass), each at the
// time it starts, then steps.
template <typename Target>
Result<LoopOutcome> run_closed(Target& target, Recorder& rec, const LoopPlan& plan, const Clock& clock) {
  LoopOutcome out;
  detail::LoopWindow window(plan, rec, out, clock.now_ns());
  for (;;) {
    const uint64_t now = clock.now_ns();
    out.gaps.pass(now, window.is_open());
    detail::notify(target, window.advance(now, 0, detail::finished(target)), now);
    if (window.done()) break;
    for (uint64_t at = now; window.may_start(at); at = clock.now_ns()) {
      const Status st = target.issue(at);
      if (st.code() == Code::kResourceExhausted) break;
      FERRY_RETURN_IF_ERROR(st);
      window.started();
      if constexpr (detail::synchronous<Target>()) break;
    }
    FERRY_RETURN_IF_ERROR(target.step(0));
    FERRY_RETURN_IF_ERROR(window.failure());
  }
  FERRY_RETURN_IF_ERROR(detail::wait_in_flight(target, rec, clock));
  FERRY_RETURN_IF_ERROR(window.failure());
  return out;
}

// Open loop: Poisson arrivals over the target (no coordinated omission: each
// arrival's time is fixed by the schedule, not by when the target had room,
// and its latency runs from it). Arrivals that find the target full wait in
// `backlog`, in order; a backlog that fills ends the window there (rather
// than dropping arrivals, which would lower the offered load unseen).
template <typename Target>
Result<LoopOutcome> run_open(Target& target, Recorder& rec, const LoopPlan& plan, const Arrivals& arrivals,
                             Backlog& backlog, const Clock& clock) {
  FERRY_ASSERT(plan.warmup_ops == 0, "an open loop warms up for a time");
  LoopOutcome out;
  out.offered_per_s = arrivals.rate_per_s;
  workload::PoissonArrivals schedule(arrivals.rate_per_s, arrivals.seed);
  backlog.clear();
  const uint64_t t0 = clock.now_ns() + 1000;
  detail::LoopWindow window(plan, rec, out, t0);
  uint64_t next = t0;
  for (;;) {
    const uint64_t now = clock.now_ns();
    out.gaps.pass(now, window.is_open());
    while (next <= now && window.may_schedule(next)) {
      if (!backlog.push(next)) {
        window.overflow(now);
        break;
      }
      window.scheduled(next);
      next += schedule.next_gap_ns();
    }
    out.backlog_max = std::max<uint64_t>(out.backlog_max, backlog.size());
    detail::notify(target, window.advance(now, backlog.size(), detail::finished(target)), now);
    if (window.done()) break;  // what is left in the backlog was counted unfinished
    while (!backlog.empty()) {
      const Status st = target.issue(backlog.front());
      if (st.code() == Code::kResourceExhausted) break;
      FERRY_RETURN_IF_ERROR(st);
      backlog.pop();
      if constexpr (detail::synchronous<Target>()) break;
    }
    FERRY_RETURN_IF_ERROR(target.step(backlog.empty() && window.may_schedule(next) ? next : 0));
    FERRY_RETURN_IF_ERROR(window.failure());
  }
  FERRY_RETURN_IF_ERROR(detail::wait_in_flight(target, rec, clock));
  FERRY_RETURN_IF_ERROR(window.failure());
  return out;
}

}  // namespace ferry::bench
