#include "ferry/common/runtime.h"

#include <exception>
#include <utility>

#include "ferry/common/cpu.h"

namespace ferry {

namespace detail {

namespace {
thread_local FiberScheduler* g_scheduler = nullptr;
}  // namespace

FiberScheduler* current_scheduler() { return g_scheduler; }

FiberScheduler* set_current_scheduler(FiberScheduler* scheduler) { return std::exchange(g_scheduler, scheduler); }

}  // namespace detail

Thread& Thread::operator=(Thread&& other) noexcept {
  if (joinable()) std::terminate();
  impl_ = std::move(other.impl_);
  return *this;
}

Thread::~Thread() {
  if (joinable()) std::terminate();
}

void Thread::join() {
  if (!joinable()) std::terminate();
  impl_->join();
  impl_.reset();
}

Runtime& Runtime::threads() {
  static ThreadRuntime runtime;
  return runtime;
}

void ThreadRuntime::sleep_until(uint64_t deadline_ns) {
  const Clock& c = clock();
  for (uint64_t now = c.now_ns(); now < deadline_ns; now = c.now_ns()) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(deadline_ns - now));
  }
}

namespace {

class StdThreadImpl final : public detail::ThreadImpl {
 public:
  StdThreadImpl(std::function<void()> fn, int cpu)
      : thread_([fn = std::move(fn), cpu] {
          if (cpu >= 0) (void)pin_current_thread(cpu);
          fn();
        }) {}
  void join() override { thread_.join(); }

 private:
  std::thread thread_;
};

}  // namespace

Thread ThreadRuntime::spawn(std::string /*name*/, std::string /*host*/, std::function<void()> fn, int cpu) {
  return Thread(std::make_unique<StdThreadImpl>(std::move(fn), cpu));
}

// ---- Mutex ----

void Mutex::lock() {
  detail::FiberScheduler* s = detail::current_scheduler();
  if (s == nullptr) {
    mu_.lock();
    return;
  }
  while (sim_locked_) {
    if (!s->in_fiber()) {
      s->base_wait("mutex");
      continue;
    }
    ++sim_waiters_;
    s->block(this, "mutex", 0);
    --sim_waiters_;
  }
  sim_locked_ = true;
}

bool Mutex::try_lock() {
  if (detail::current_scheduler() == nullptr) return mu_.try_lock();
  if (sim_locked_) return false;
  sim_locked_ = true;
  return true;
}

void Mutex::unlock() {
  detail::FiberScheduler* s = detail::current_scheduler();
  if (s == nullptr) {
    mu_.unlock();
    return;
  }
  sim_locked_ = false;
  if (sim_waiters_ > 0) s->wake(this, false);
}

// ---- SharedMutex ----

void SharedMutex::lock() {
  detail::FiberScheduler* s = detail::current_scheduler();
  if (s == nullptr) {
    mu_.lock();
    return;
  }
  while (sim_writer_ || sim_readers_ > 0) {
    if (s->in_fiber()) {
      s->block(this, "shared_mutex", 0);
    } else {
      s->base_wait("shared_mutex");
    }
  }
  sim_writer_ = true;
}

bool SharedMutex::try_lock() {
  if (detail::current_scheduler() == nullptr) return mu_.try_lock();
  if (sim_writer_ || sim_readers_ > 0) return false;
  sim_writer_ = true;
  return true;
}

void SharedMutex::unlock() {
  detail::FiberScheduler* s = detail::current_scheduler();
  if (s == nullptr) {
    mu_.unlock();
    return;
  }
  sim_writer_ = false;
  s->wake(this, true);
}

void SharedMutex::lock_shared() {
  detail::FiberScheduler* s = detail::current_scheduler();
  if (s == nullptr) {
    mu_.lock_shared();
    return;
  }
  while (sim_writer_) {
    if (s->in_fiber()) {
      s->block(this, "shared_mutex", 0);
    } else {
      s->base_wait("shared_mutex");
    }
  }
  ++sim_readers_;
}

bool SharedMutex::try_lock_shared() {
  if (detail::current_scheduler() == nullptr) return mu_.try_lock_shared();
  if (sim_writer_) return false;
  ++sim_readers_;
  return true;
}

void SharedMutex::unlock_shared() {
  detail::FiberScheduler* s = detail::current_scheduler();
  if (s == nullptr) {
    mu_.unlock_shared();
    return;
  }
  if (--sim_readers_ == 0) s->wake(this, true);
}

// ---- CondVar ----

void CondVar::notify_one() {
  if (detail::FiberScheduler* s = detail::current_scheduler()) {
    s->wake(this, false);
    return;
  }
  cv_.notify_one();
}

void CondVar::notify_all() {
  if (detail::FiberScheduler* s = detail::current_scheduler()) {
    s->wake(this, true);
    return;
  }
  cv_.notify_all();
}

void CondVar::wait(std::unique_lock<Mutex>& lock) {
  if (detail::FiberScheduler* s = detail::current_scheduler()) {
    // One thread: nothing can notify between the unlock and the park. The
    // base context cannot park: it lets the scheduler take a step and
    // returns (a spurious wakeup; callers loop on their predicate).
    lock.unlock();
    if (s->in_fiber()) {
      s->block(this, "condvar", 0);
    } else {
      s->base_wait("condvar");
    }
    lock.lock();
    return;
  }
  cv_.wait(lock);
}

bool CondVar::wait_until(std::unique_lock<Mutex>& lock, uint64_t deadline_ns, const Clock& clock) {
  if (detail::FiberScheduler* s = detail::current_scheduler()) {
    if (clock.now_ns() >= deadline_ns) return true;
    lock.unlock();
    if (!s->in_fiber()) {
      s->base_wait("condvar");
      lock.lock();
      return clock.now_ns() >= deadline_ns;
    }
    const bool woken = s->block(this, "condvar", deadline_ns);
    lock.lock();
    return !woken;
  }
  // The caller's clock may not be steady_clock: convert the remaining time.
  for (;;) {
    const uint64_t now = clock.now_ns();
    if (now >= deadline_ns) return true;
    if (cv_.wait_for(lock, std::chrono::nanoseconds(deadline_ns - now)) == std::cv_status::no_timeout) return false;
  }
}

const Clock& CondVar::current_clock() {
  if (detail::FiberScheduler* s = detail::current_scheduler()) return s->clock();
  return SteadyClock::instance();
}

}  // namespace ferry
