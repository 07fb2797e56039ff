#include "ferry/sim/runtime.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_SIM_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define FERRY_SIM_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(FERRY_SIM_ASAN)
#define FERRY_SIM_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(FERRY_SIM_TSAN)
#define FERRY_SIM_TSAN 1
#endif

#ifdef FERRY_SIM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef FERRY_SIM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace ferry::sim {

namespace {

#ifdef FERRY_SIM_ASAN
constexpr size_t kFiberStackBytes = 1 << 20;  // ASan's redzones need room
#else
constexpr size_t kFiberStackBytes = 256 << 10;
#endif

enum class FiberState { kRunnable, kIdle, kBlocked, kDone };

uint64_t hash_text(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace

struct SimRuntime::BaseContext {
  ucontext_t ctx;
  // ASan: the base stack's bounds, learnt on the first switch into a fiber.
  const void* stack_bottom = nullptr;
  size_t stack_size = 0;
#ifdef FERRY_SIM_TSAN
  void* tsan_fiber = nullptr;
#endif
};

struct SimRuntime::Fiber {
  FiberId id = 0;
  std::string name;
  std::string host;
  std::function<void()> fn;
  SimRuntime* runtime = nullptr;
  ucontext_t ctx;
  char* mapping = nullptr;  // guard page + stack
  size_t mapping_bytes = 0;
  FiberState state = FiberState::kRunnable;
  bool started = false;
  bool cancelled = false;
  bool woken = false;
  const void* wait_object = nullptr;
  const char* wait_what = "";
  uint64_t deadline_ns = 0;  // 0: none
  uint64_t idle_epoch = 0;
  void* fake_stack = nullptr;  // ASan bookkeeping
#ifdef FERRY_SIM_TSAN
  void* tsan_fiber = nullptr;
#endif

  ~Fiber() {
#ifdef FERRY_SIM_TSAN
    if (tsan_fiber != nullptr) __tsan_destroy_fiber(tsan_fiber);
#endif
    if (mapping != nullptr) munmap(mapping, mapping_bytes);
  }
};

namespace {

class SimThreadImpl final : public detail::ThreadImpl {
 public:
  SimThreadImpl(SimRuntime* runtime, FiberId id) : runtime_(runtime), id_(id) {}
  void join() override { runtime_->join_fiber(id_); }

 private:
  SimRuntime* runtime_;
  FiberId id_;
};

}  // namespace

SimRuntime::SimRuntime(FakeClock& clock, uint64_t seed)
    : clock_(clock), rng_(seed), base_(std::make_unique<BaseContext>()) {
#ifdef FERRY_SIM_TSAN
  base_->tsan_fiber = __tsan_get_current_fiber();
#endif
  // From now on this thread's Mutex/CondVar keep their state here, for the
  // fibers and for the base context (which may lock what fibers lock).
  previous_scheduler_ = detail::set_current_scheduler(this);
}

SimRuntime::~SimRuntime() {
  if (detail::current_scheduler() == this) detail::set_current_scheduler(previous_scheduler_);
}

void SimRuntime::base_wait(const char* what) {
  ++progress_epoch_;  // the base context ran
  SimRunResult r;
  if (!step(&r)) {
    std::fprintf(stderr, "SimRuntime: deadlock while the base context waits on a %s:\n%s", what, r.report.c_str());
    std::abort();
  }
}

Thread SimRuntime::spawn(std::string name, std::string host, std::function<void()> fn, int /*cpu*/) {
  auto f = std::make_unique<Fiber>();
  f->id = next_id_++;
  f->name = std::move(name);
  f->host = std::move(host);
  f->fn = std::move(fn);
  f->runtime = this;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  f->mapping_bytes = kFiberStackBytes + page;
  void* m = mmap(nullptr, f->mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "SimRuntime: mmap of a fiber stack failed\n");
    std::abort();
  }
  f->mapping = static_cast<char*>(m);
  // The stack grows down into the guard page: an overflow faults instead of
  // overwriting another fiber's stack.
  mprotect(f->mapping, page, PROT_NONE);
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->mapping + page;
  f->ctx.uc_stack.ss_size = kFiberStackBytes;
  f->ctx.uc_link = nullptr;
  const auto bits = reinterpret_cast<uintptr_t>(f.get());
  makecontext(&f->ctx, reinterpret_cast<void (*)()>(&SimRuntime::entry), 2, static_cast<unsigned>(bits),
              static_cast<unsigned>(bits >> 32));
#ifdef FERRY_SIM_TSAN
  f->tsan_fiber = __tsan_create_fiber(0);
#endif
  const FiberId id = f->id;
  fibers_.emplace(id, std::move(f));
  return Thread(std::make_unique<SimThreadImpl>(this, id));
}

void SimRuntime::entry(unsigned lo, unsigned hi) {
  auto* f = reinterpret_cast<Fiber*>(static_cast<uintptr_t>(lo) | (static_cast<uintptr_t>(hi) << 32));
  SimRuntime* rt = f->runtime;
#ifdef FERRY_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &rt->base_->stack_bottom, &rt->base_->stack_size);
#endif
  try {
    f->fn();
  } catch (...) {
    std::fprintf(stderr, "SimRuntime: exception escaped fiber %s\n", f->name.c_str());
    std::terminate();
  }
  f->fn = nullptr;
  f->state = FiberState::kDone;
  rt->wake(f, true);  // joiners
  rt->record(f->name, "exit");
  rt->current_ = nullptr;
#ifdef FERRY_SIM_ASAN
  __sanitizer_start_switch_fiber(nullptr, rt->base_->stack_bottom, rt->base_->stack_size);
#endif
#ifdef FERRY_SIM_TSAN
  __tsan_switch_to_fiber(rt->base_->tsan_fiber, 0);
#endif
  setcontext(&rt->base_->ctx);
}

void SimRuntime::resume(Fiber* f) {
  current_ = f;
  f->started = true;
  detail::FiberScheduler* previous = detail::set_current_scheduler(this);
#ifdef FERRY_SIM_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, f->mapping + f->mapping_bytes - kFiberStackBytes, kFiberStackBytes);
#endif
#ifdef FERRY_SIM_TSAN
  __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
  swapcontext(&base_->ctx, &f->ctx);
#ifdef FERRY_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  detail::set_current_scheduler(previous);
  current_ = nullptr;
}

void SimRuntime::switch_out(const char* reason) {
  Fiber* f = current_;
  record(f->name, reason);
#ifdef FERRY_SIM_ASAN
  __sanitizer_start_switch_fiber(&f->fake_stack, base_->stack_bottom, base_->stack_size);
#endif
#ifdef FERRY_SIM_TSAN
  __tsan_switch_to_fiber(base_->tsan_fiber, 0);
#endif
  swapcontext(&f->ctx, &base_->ctx);
#ifdef FERRY_SIM_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, &base_->stack_bottom, &base_->stack_size);
#endif
}

void SimRuntime::record(const std::string& name, const char* reason) {
  ++switches_;
  std::string event = name;
  event += ':';
  event += reason;
  trace_digest_ = mix64(trace_digest_ ^ hash_text(event));
  if (trace_) trace_(event);
}

void SimRuntime::idle() { idle_until(0); }

void SimRuntime::idle_until(uint64_t deadline_ns) {
  if (current_ == nullptr) {
    ++progress_epoch_;  // as in run_until: the base context ran
    step(nullptr);
    return;
  }
  Fiber* f = current_;
  f->state = FiberState::kIdle;
  f->idle_epoch = progress_epoch_;
  f->deadline_ns = deadline_ns;
  switch_out("idle");
  f->deadline_ns = 0;
}

void SimRuntime::yield() {
  if (current_ == nullptr) {
    ++progress_epoch_;  // as in run_until: the base context ran
    step(nullptr);
    return;
  }
  current_->state = FiberState::kRunnable;
  switch_out("yield");
}

void SimRuntime::sleep_until(uint64_t deadline_ns) {
  if (current_ == nullptr) {
    SimRunResult r = run_until([&] { return clock_.now_ns() >= deadline_ns; }, UINT64_MAX);
    if (r.deadlock) {
      std::fprintf(stderr, "SimRuntime: deadlock in sleep_until:\n%s", r.report.c_str());
      std::abort();
    }
    return;
  }
  while (clock_.now_ns() < deadline_ns) block(nullptr, "sleep", deadline_ns);
}

bool SimRuntime::cancelled() const { return current_ != nullptr && current_->cancelled; }

void SimRuntime::cancel(FiberId id) {
  auto it = fibers_.find(id);
  if (it != fibers_.end()) it->second->cancelled = true;
}

FiberId SimRuntime::find(const std::string& name) const {
  FiberId found = 0;
  for (const auto& [id, f] : fibers_) {
    if (f->name == name && f->state != FiberState::kDone) found = id;
  }
  return found;
}

bool SimRuntime::block(const void* object, const char* what, uint64_t deadline_ns) {
  Fiber* f = current_;
  f->state = FiberState::kBlocked;
  f->wait_object = object;
  f->wait_what = what;
  f->deadline_ns = deadline_ns;
  f->woken = false;
  switch_out(what);
  f->wait_object = nullptr;
  f->deadline_ns = 0;
  return f->woken;
}

void SimRuntime::wake(const void* object, bool all) {
  std::vector<Fiber*> waiters;
  for (auto& [id, f] : fibers_) {
    if (f->state == FiberState::kBlocked && f->wait_object == object && object != nullptr) waiters.push_back(f.get());
  }
  if (waiters.empty()) return;
  if (!all) {
    Fiber* chosen = waiters[rng_.below(waiters.size())];
    waiters.assign(1, chosen);
  }
  for (Fiber* f : waiters) {
    f->state = FiberState::kRunnable;
    f->woken = true;
  }
}

void SimRuntime::expire_timers() {
  const uint64_t now = clock_.now_ns();
  for (auto& [id, f] : fibers_) {
    const bool waits = f->state == FiberState::kBlocked || f->state == FiberState::kIdle;
    if (waits && f->deadline_ns != 0 && f->deadline_ns <= now) {
      if (f->state == FiberState::kBlocked) f->woken = false;
      f->state = FiberState::kRunnable;
    }
  }
}

uint64_t SimRuntime::earliest_deadline() const {
  uint64_t earliest = next_deadline_ ? next_deadline_() : 0;
  for (const auto& [id, f] : fibers_) {
    const bool waits = f->state == FiberState::kBlocked || f->state == FiberState::kIdle;
    if (waits && f->deadline_ns != 0 && (earliest == 0 || f->deadline_ns < earliest)) {
      earliest = f->deadline_ns;
    }
  }
  return earliest;
}

// One scheduler step. Returns false (and fills *result) on a deadlock.
bool SimRuntime::step(SimRunResult* result) {
  std::vector<Fiber*> runnable;
  double total = 0;
  for (auto& [id, f] : fibers_) {
    // An idle fiber is runnable again once something made progress.
    if (f->state == FiberState::kIdle && f->idle_epoch != progress_epoch_) f->state = FiberState::kRunnable;
    if (f->state != FiberState::kRunnable) continue;
    auto w = host_weights_.find(f->host);
    total += w == host_weights_.end() ? 1.0 : w->second;
    runnable.push_back(f.get());
  }
  const double engine_weight = step_engine_ ? 1.0 : 0.0;
  if (!runnable.empty()) {
    double pick = rng_.uniform() * (total + engine_weight);
    Fiber* chosen = nullptr;
    for (Fiber* f : runnable) {
      auto w = host_weights_.find(f->host);
      pick -= w == host_weights_.end() ? 1.0 : w->second;
      if (pick < 0) {
        chosen = f;
        break;
      }
    }
    bool busy;
    if (chosen != nullptr || !step_engine_) {
      if (chosen == nullptr) chosen = runnable.back();
      resume(chosen);
      busy = chosen->state != FiberState::kIdle;
    } else {
      busy = step_engine_();
    }
    if (busy) {
      ++progress_epoch_;
      clock_.advance_ns(rng_.below(2000));
      expire_timers();
    }
    return true;
  }
  // Every fiber is idle, blocked or done: the engine, then a time jump.
  if (step_engine_ && step_engine_()) {
    ++progress_epoch_;
    clock_.advance_ns(rng_.below(2000));
    expire_timers();
    return true;
  }
  const uint64_t deadline = earliest_deadline();
  if (deadline != 0) {
    clock_.advance_to(deadline);
    ++progress_epoch_;
    record("clock", "jump");
    expire_timers();
    return true;
  }
  if (result != nullptr) {
    result->deadlock = true;
    result->report = deadlock_report();
  }
  return false;
}

std::string SimRuntime::deadlock_report() const {
  std::string report = "simulation stuck at t=" + std::to_string(clock_.now_ns()) + " ns:\n";
  for (const auto& [id, f] : fibers_) {
    if (f->state == FiberState::kDone) continue;
    report += "  fiber " + f->name + " (host " + f->host + ") ";
    if (f->state == FiberState::kIdle) {
      report += "idle, polling with nothing to do\n";
    } else {
      report += std::string("waits on ") + f->wait_what + "\n";
    }
  }
  return report;
}

SimRunResult SimRuntime::run_until(const std::function<bool()>& done, uint64_t max_steps) {
  // The base context ran code since the scheduler last did (it may have set
  // the flag an idle fiber polls for, e.g. a server's stop()): that is progress.
  ++progress_epoch_;
  SimRunResult result;
  while (!(result.done = done())) {
    if (result.steps >= max_steps) break;
    ++result.steps;
    if (!step(&result)) break;
  }
  return result;
}

void SimRuntime::join_fiber(FiberId id) {
  auto it = fibers_.find(id);
  if (it == fibers_.end()) std::abort();
  Fiber* f = it->second.get();
  if (current_ != nullptr) {
    if (current_ == f) std::abort();  // joining oneself
    while (f->state != FiberState::kDone) block(f, "join", 0);
  } else {
    SimRunResult r = run_until([f] { return f->state == FiberState::kDone; }, UINT64_MAX);
    if (r.deadlock) {
      std::fprintf(stderr, "SimRuntime: deadlock while joining %s:\n%s", f->name.c_str(), r.report.c_str());
      std::abort();
    }
  }
  fibers_.erase(id);
}

}  // namespace ferry::sim
