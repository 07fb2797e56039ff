#include "load_loop.h"

#include <algorithm>

#include "ferry/common/assert.h"

namespace ferry::bench {
namespace {

uint64_t add_saturating(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

uint64_t to_ns(double seconds) { return static_cast<uint64_t>(seconds * 1e9); }

}  // namespace

Recorder::Recorder(size_t kinds) : kinds_(kinds) {
  FERRY_ASSERT(kinds >= 1, "a Recorder needs at least one kind of operation");
  if (kinds > 1) by_kind_.resize(kinds);
}

void Recorder::failed(std::string what) {
  --outstanding_;
  ++failures_;
  if (first_failure_.empty()) first_failure_ = std::move(what);
}

void Recorder::set_window(uint64_t start_ns, uint64_t end_ns) {
  window_start_ns_ = start_ns;
  window_end_ns_ = end_ns;
}

Backlog::Backlog(size_t capacity) : ring_(capacity, 1) { FERRY_ASSERT(capacity >= 1, "an empty backlog"); }

LoopPlan LoopPlan::timed(double warmup_seconds, double window_seconds) {
  LoopPlan p;
  p.warmup_ns = to_ns(warmup_seconds);
  p.window_ns = to_ns(window_seconds);
  return p;
}

LoopPlan LoopPlan::sampled(double warmup_seconds, uint64_t samples, double rate_per_s, double min_seconds,
                           double max_seconds) {
  const double seconds =
      std::clamp(static_cast<double>(samples) / rate_per_s, min_seconds, std::max(min_seconds, max_seconds));
  return timed(warmup_seconds, seconds);
}

LoopPlan LoopPlan::counted(uint64_t warmup_ops, uint64_t ops, double cap_seconds) {
  FERRY_ASSERT(ops != kUnbounded, "a counted window needs a count");
  LoopPlan p;
  p.warmup_ops = warmup_ops;
  p.ops = ops;
  if (cap_seconds > 0) p.window_ns = to_ns(cap_seconds);
  return p;
}

namespace detail {

LoopWindow::LoopWindow(const LoopPlan& plan, Recorder& rec, LoopOutcome& out, uint64_t start_ns)
    : plan_(plan), rec_(rec), out_(out) {
  FERRY_ASSERT(plan.warmup_ops == 0 || plan.warmup_ns == 0, "a warm-up is timed or counted, not both");
  if (plan.warmup_ops == 0) {
    const uint64_t open_at = add_saturating(start_ns, plan.warmup_ns);
    rec_.set_window(open_at, add_saturating(open_at, plan.window_ns));
  } else {
    rec_.set_window(UINT64_MAX, UINT64_MAX);  // set when the warm-up has ended
  }
}

bool LoopWindow::counted_done(uint64_t queued, bool finished) const {
  const bool all_started = (plan_.is_counted() && out_.started >= plan_.ops) || finished;
  return all_started && queued == 0 && rec_.outstanding() == 0;
}

void LoopWindow::open(uint64_t now_ns) {
  if (plan_.warmup_ops != 0) rec_.set_window(now_ns, add_saturating(now_ns, plan_.window_ns));
  out_.opened_ns = now_ns;
  phase_ = Phase::kOpen;
}

void LoopWindow::close(uint64_t now_ns) {
  out_.closed_ns = now_ns;
  phase_ = Phase::kDrain;
}

LoopWindow::Edge LoopWindow::advance(uint64_t now_ns, uint64_t queued, bool finished) {
  finished_ = finished;
  if (phase_ == Phase::kWarmup) {
    const bool warm = plan_.warmup_ops == 0 ? now_ns >= rec_.window_start_ns()
                                            : warmup_started_ >= plan_.warmup_ops && rec_.outstanding() == 0;
    if (!warm) return Edge::kNone;
    open(now_ns);
    return Edge::kOpened;
  }
  Edge edge = Edge::kNone;
  if (phase_ == Phase::kOpen) {
    if ((plan_.is_counted() || finished) && counted_done(queued, finished)) {
      close(now_ns);
      edge = Edge::kClosed;
    } else if (now_ns >= rec_.window_end_ns()) {
      out_.capped = plan_.is_counted();
      close(now_ns);
      edge = Edge::kClosed;
    }
  }
  if (phase_ == Phase::kDrain) {
    if (queued == 0 && rec_.outstanding() == 0) {
      phase_ = Phase::kDone;
    } else if (now_ns - out_.closed_ns >= plan_.drain_cap_ns) {
      out_.unfinished = queued + rec_.outstanding();
      phase_ = Phase::kDone;
    }
  }
  return edge;
}

bool LoopWindow::may_start(uint64_t at_ns) const {
  if (phase_ == Phase::kWarmup) return plan_.warmup_ops == 0 || warmup_started_ < plan_.warmup_ops;
  if (phase_ != Phase::kOpen || finished_ || at_ns >= rec_.window_end_ns()) return false;
  return !plan_.is_counted() || out_.started < plan_.ops;
}

void LoopWindow::started() {
  if (phase_ == Phase::kWarmup) {
    ++warmup_started_;
  } else {
    ++out_.started;
  }
}

bool LoopWindow::may_schedule(uint64_t t_ns) const {
  if (phase_ != Phase::kWarmup && phase_ != Phase::kOpen) return false;
  if (finished_ || t_ns >= rec_.window_end_ns()) return false;
  return !plan_.is_counted() || out_.started < plan_.ops;
}

void LoopWindow::scheduled(uint64_t t_ns) {
  if (t_ns >= rec_.window_start_ns()) ++out_.started;
}

void LoopWindow::overflow(uint64_t now_ns) {
  rec_.set_window(rec_.window_start_ns(), std::max(rec_.window_start_ns() + 1, now_ns));
  out_.overflowed = true;
}

Status LoopWindow::failure() const {
  if (rec_.failures() == 0) return ok_status();
  return internal_error("a call failed: " + rec_.first_failure());
}

}  // namespace detail
}  // namespace ferry::bench
