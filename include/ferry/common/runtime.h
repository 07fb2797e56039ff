// The seam between Ferry's blocking code and whatever runs it: real threads in
// deployments (ThreadRuntime) or fibers on one OS thread in the simulator
// (ferry::sim::SimRuntime). Code that waits, sleeps, spawns or locks goes
// through a Runtime and the primitives below, so the same binary serves both
// with no build flag (docs/tailwind-simulation-plan.md, design B).
//
// How the simulator is found: a thread_local pointer to a
// detail::FiberScheduler, set on the simulator's OS thread for the lifetime of
// its SimRuntime. Mutex/SharedMutex/CondVar consult it; when it is null (every
// other thread, and every thread of a deployment) they are plain std::mutex /
// std::shared_mutex / std::condition_variable_any. On the simulator's thread
// they keep their state in the simulator, for fibers and for the base
// context alike: a fiber parks on contention, the base context drives the
// scheduler until the holder lets go.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>

#include "ferry/common/clock.h"

namespace ferry {

namespace detail {

// What a fiber scheduler offers the synchronization primitives. Implemented
// by the simulator; all calls come from a fiber running on the thread where
// current_scheduler() returns this object.
class FiberScheduler {
 public:
  virtual ~FiberScheduler() = default;
  // True when the caller runs inside a fiber (not the scheduler's base context).
  virtual bool in_fiber() const = 0;
  // Parks the current fiber on `object` until wake(object) picks it or, when
  // deadline_ns != 0, virtual time reaches deadline_ns. `what` names the wait
  // for the deadlock report ("mutex", "condvar"). Returns false on timeout.
  virtual bool block(const void* object, const char* what, uint64_t deadline_ns) = 0;
  // Makes one (all=false) or every waiter parked on `object` runnable.
  virtual void wake(const void* object, bool all) = 0;
  // The base context (the OS thread outside any fiber, e.g. a test's body
  // or a destructor run there) waits for a primitive: one scheduler step,
  // so the fiber holding it can run. Aborts with a report on a deadlock.
  virtual void base_wait(const char* what) = 0;
  virtual const Clock& clock() const = 0;
};

// The simulator of this OS thread (set for a SimRuntime's lifetime on the
// thread that made it), or null.
FiberScheduler* current_scheduler();
// Installs (or clears, with null) this thread's scheduler; returns the previous one.
FiberScheduler* set_current_scheduler(FiberScheduler* scheduler);

// Non-null only when the caller is a fiber under a simulator.
inline FiberScheduler* fiber_scheduler() {
  FiberScheduler* s = current_scheduler();
  return s != nullptr && s->in_fiber() ? s : nullptr;
}

// The body behind a Thread handle; each Runtime supplies its own.
class ThreadImpl {
 public:
  virtual ~ThreadImpl() = default;
  virtual void join() = 0;
};

}  // namespace detail

// A movable handle on something a Runtime spawned. Like std::thread, a Thread
// must be joined before it is destroyed or reassigned; destroying a joinable
// Thread is a bug and aborts (std::terminate), because silently joining in a
// destructor hides shutdown-order mistakes and detaching leaks a fiber.
class Thread {
 public:
  Thread() = default;
  explicit Thread(std::unique_ptr<detail::ThreadImpl> impl) : impl_(std::move(impl)) {}
  Thread(Thread&&) noexcept = default;
  Thread& operator=(Thread&& other) noexcept;
  ~Thread();

  bool joinable() const { return impl_ != nullptr; }
  // Waits until the function returned, through the runtime that spawned it:
  // a std::thread join, or (simulator) parking the joining fiber / driving the
  // scheduler from its base context. Requires joinable().
  void join();

 private:
  std::unique_ptr<detail::ThreadImpl> impl_;
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  virtual const Clock& clock() const = 0;
  virtual bool simulated() const = 0;
  // A poll found nothing to do: let others run.
  virtual void idle() = 0;
  // The same, from a caller that gives up at deadline_ns (a call's timeout;
  // 0: none): the simulator may then jump virtual time to the deadline when
  // nothing else is left to run, so the timeout fires at its exact time.
  virtual void idle_until(uint64_t deadline_ns) {
    (void)deadline_ns;
    idle();
  }
  // Paced work: let others run, then continue.
  virtual void yield() = 0;
  // Returns once clock().now_ns() >= deadline_ns.
  virtual void sleep_until(uint64_t deadline_ns) = 0;
  // Runs fn concurrently, tagged with a name and a host (the simulator uses the
  // host for per-host pacing). cpu >= 0 pins a real thread; ignored by the sim.
  virtual Thread spawn(std::string name, std::string host, std::function<void()> fn, int cpu = -1) = 0;
  // True once the caller's thread of control was cancelled (a simulated crash).
  virtual bool cancelled() const = 0;

  void sleep_for_ns(uint64_t ns) { sleep_until(clock().now_ns() + ns); }

  // The process's ThreadRuntime.
  static Runtime& threads();
};

// Real threads and the steady clock: exactly what the code did before the seam.
class ThreadRuntime final : public Runtime {
 public:
  const Clock& clock() const override { return SteadyClock::instance(); }
  bool simulated() const override { return false; }
  void idle() override { std::this_thread::yield(); }
  void yield() override { std::this_thread::yield(); }
  void sleep_until(uint64_t deadline_ns) override;
  // The name and host are not used; a failed pin is ignored (the thread runs unpinned).
  Thread spawn(std::string name, std::string host, std::function<void()> fn, int cpu = -1) override;
  bool cancelled() const override { return false; }
};

// std::mutex outside the simulator; in a fiber, contention parks the fiber and
// unlock hands the lock to a parked waiter. Not recursive.
class Mutex {
 public:
  void lock();
  bool try_lock();
  void unlock();

 private:
  std::mutex mu_;
  // Simulator state; touched only on the simulator's thread.
  bool sim_locked_ = false;
  int sim_waiters_ = 0;
};

// std::shared_mutex outside the simulator; fibers park on contention.
class SharedMutex {
 public:
  void lock();
  bool try_lock();
  void unlock();
  void lock_shared();
  bool try_lock_shared();
  void unlock_shared();

 private:
  std::shared_mutex mu_;
  bool sim_writer_ = false;
  int sim_readers_ = 0;
};

// std::condition_variable_any over a ferry::Mutex outside the simulator; in a
// fiber, waits park on the simulator's virtual time. Spurious wakeups allowed.
class CondVar {
 public:
  void notify_one();
  void notify_all();
  void wait(std::unique_lock<Mutex>& lock);
  template <typename Pred>
  void wait(std::unique_lock<Mutex>& lock, Pred pred) {
    while (!pred()) wait(lock);
  }
  // Waits until notified or clock.now_ns() >= deadline_ns. Returns true when it
  // timed out. Under a simulator the clock must be the simulator's clock.
  bool wait_until(std::unique_lock<Mutex>& lock, uint64_t deadline_ns, const Clock& clock);
  // Waits up to `timeout` on the current runtime's clock (the simulator's when
  // called from a fiber, else the steady clock). Returns true when it timed out.
  template <typename Rep, typename Period>
  bool wait_for(std::unique_lock<Mutex>& lock, std::chrono::duration<Rep, Period> timeout) {
    const Clock& clock = current_clock();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
    return wait_until(lock, clock.now_ns() + static_cast<uint64_t>(ns > 0 ? ns : 0), clock);
  }

 private:
  static const Clock& current_clock();
  std::condition_variable_any cv_;
};

}  // namespace ferry
