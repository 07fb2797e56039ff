// SimRuntime: the Runtime of the simulator. Every spawned thread of control is
// a fiber (ucontext) on the one OS thread that drives the simulation; a seeded
// scheduler picks, each step, a runnable fiber or the owner's engine hook, and
// virtual time (a FakeClock) advances by a drawn amount per busy step and jumps
// to the next deadline when everything is idle. Same seed, same schedule.
// See docs/tailwind-simulation-plan.md, "Scheduler" and "Fibers".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "ferry/common/clock.h"
#include "ferry/common/rng.h"
#include "ferry/common/runtime.h"

namespace ferry::sim {

using FiberId = uint64_t;

struct SimRunResult {
  bool done = false;      // the predicate held
  bool deadlock = false;  // nothing runnable, no timer, engine idle
  uint64_t steps = 0;     // scheduler steps taken by this call
  std::string report;     // when deadlock: every live fiber and what it waits on
};

// Not thread-safe: one OS thread constructs it, drives it and destroys it.
// `clock` must outlive the runtime. Fibers still alive at destruction are
// discarded without unwinding their stacks (their locals are not destroyed).
class SimRuntime final : public Runtime, private detail::FiberScheduler {
 public:
  struct Fiber;

  SimRuntime(FakeClock& clock, uint64_t seed);
  ~SimRuntime() override;
  SimRuntime(const SimRuntime&) = delete;
  SimRuntime& operator=(const SimRuntime&) = delete;

  // Runtime. Called from a fiber they park it; from the base context idle and
  // yield take one scheduler step and sleep_until drives until the deadline.
  const Clock& clock() const override { return clock_; }
  bool simulated() const override { return true; }
  void idle() override;
  void idle_until(uint64_t deadline_ns) override;
  void yield() override;
  void sleep_until(uint64_t deadline_ns) override;
  // Creates a fiber; it first runs when the scheduler picks it. cpu is ignored.
  Thread spawn(std::string name, std::string host, std::function<void()> fn, int cpu = -1) override;
  bool cancelled() const override;

  // Owner hooks. step_engine returns whether it did work; next_deadline
  // returns the engine's next timer (0 for none).
  void set_step_engine(std::function<bool()> step_engine) { step_engine_ = std::move(step_engine); }
  void set_next_deadline(std::function<uint64_t()> next_deadline) { next_deadline_ = std::move(next_deadline); }
  // Called at every switch out of a fiber with "name:reason"; deterministic.
  void set_trace(std::function<void(const std::string&)> trace) { trace_ = std::move(trace); }
  // Relative chance of a host's fibers being picked (default 1.0; > 0).
  void set_host_weight(const std::string& host, double weight) { host_weights_[host] = weight; }

  // Drives the scheduler from the base context until done() holds, max_steps
  // steps passed, or a deadlock is found.
  SimRunResult run_until(const std::function<bool()>& done, uint64_t max_steps);
  // Marks a fiber cancelled: cancelled() turns true inside it. Nothing more.
  void cancel(FiberId id);
  // The id of the most recently spawned live fiber with this name, or 0.
  FiberId find(const std::string& name) const;
  // Hash of every switch event so far (fiber name + reason).
  uint64_t trace_digest() const { return trace_digest_; }
  uint64_t switches() const { return switches_; }

  // Used by the Thread handle: waits for the fiber to end, then frees it. From
  // the base context it drives the scheduler and aborts on a deadlock.
  void join_fiber(FiberId id);

 private:
  // detail::FiberScheduler
  bool in_fiber() const override { return current_ != nullptr; }
  bool block(const void* object, const char* what, uint64_t deadline_ns) override;
  void wake(const void* object, bool all) override;
  void base_wait(const char* what) override;

  bool step(SimRunResult* result);
  void resume(Fiber* f);
  void switch_out(const char* reason);
  void record(const std::string& name, const char* reason);
  void expire_timers();
  uint64_t earliest_deadline() const;
  std::string deadlock_report() const;
  static void entry(unsigned lo, unsigned hi);

  FakeClock& clock_;
  Rng rng_;
  std::map<FiberId, std::unique_ptr<Fiber>> fibers_;  // ordered by id: deterministic scans
  std::map<std::string, double> host_weights_;
  Fiber* current_ = nullptr;
  FiberId next_id_ = 1;
  uint64_t progress_epoch_ = 0;
  uint64_t trace_digest_ = 0;
  uint64_t switches_ = 0;
  std::function<bool()> step_engine_;
  std::function<uint64_t()> next_deadline_;
  std::function<void(const std::string&)> trace_;
  struct BaseContext;
  std::unique_ptr<BaseContext> base_;
  detail::FiberScheduler* previous_scheduler_ = nullptr;  // restored at destruction
};

}  // namespace ferry::sim
