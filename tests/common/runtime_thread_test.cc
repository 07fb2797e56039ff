// ThreadRuntime and the seam's primitives with no simulator current: they must
// behave like the std types they wrap. Real threads, so also run under TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "ferry/common/runtime.h"

namespace ferry {
namespace {

TEST(RuntimeThreads, MutexExcludesFourThreads) {
  Mutex mu;
  uint64_t counter = 0;  // deliberately not atomic: only the mutex protects it
  constexpr int kThreads = 4;
  constexpr int kIncrements = 100'000;
  std::vector<Thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.push_back(Runtime::threads().spawn("inc", "local", [&] {
      for (int i = 0; i < kIncrements; ++i) {
        std::lock_guard<Mutex> guard(mu);
        ++counter;
      }
    }));
  }
  for (Thread& t : threads) t.join();
  EXPECT_EQ(counter, uint64_t{kThreads} * kIncrements);
}

TEST(RuntimeThreads, MutexTryLockFailsWhileHeld) {
  Mutex mu;
  std::unique_lock<Mutex> held(mu);
  bool got = true;
  Thread t = Runtime::threads().spawn("try", "local", [&] { got = mu.try_lock(); });
  t.join();
  EXPECT_FALSE(got);
}

TEST(RuntimeThreads, SharedMutexReadersShareWriterExcludes) {
  SharedMutex mu;
  std::atomic<int> readers_inside{0};
  std::atomic<int> max_readers{0};
  std::atomic<bool> release{false};
  std::vector<Thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.push_back(Runtime::threads().spawn("reader", "local", [&] {
      std::shared_lock<SharedMutex> guard(mu);
      const int inside = readers_inside.fetch_add(1) + 1;
      int seen = max_readers.load();
      while (inside > seen && !max_readers.compare_exchange_weak(seen, inside)) {
      }
      // Hold the shared lock until both readers have been in at once (or
      // give up). Not "while fewer than two are inside": the reader that
      // leaves second would then wait out every yield once the first left.
      for (int i = 0; i < 10'000'000 && !release.load() && max_readers.load() < 2; ++i) std::this_thread::yield();
      readers_inside.fetch_sub(1);
    }));
  }
  for (Thread& t : readers) t.join();
  EXPECT_EQ(max_readers.load(), 2) << "two shared holders never overlapped";

  std::shared_lock<SharedMutex> reader(mu);
  bool writer_got = true;
  Thread w = Runtime::threads().spawn("writer", "local", [&] { writer_got = mu.try_lock(); });
  w.join();
  EXPECT_FALSE(writer_got) << "a writer got in beside a reader";
  EXPECT_TRUE(mu.try_lock_shared());
  mu.unlock_shared();
}

TEST(RuntimeThreads, CondVarNotifyWakesWaiter) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  bool woke = false;
  Thread waiter = Runtime::threads().spawn("waiter", "local", [&] {
    std::unique_lock<Mutex> lock(mu);
    cv.wait(lock, [&] { return ready; });
    woke = true;
  });
  {
    std::lock_guard<Mutex> guard(mu);
    ready = true;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_TRUE(woke);
}

TEST(RuntimeThreads, CondVarWaitForTimesOutWithoutNotify) {
  Mutex mu;
  CondVar cv;
  std::unique_lock<Mutex> lock(mu);
  const uint64_t start = SteadyClock::instance().now_ns();
  const bool timed_out = cv.wait_for(lock, std::chrono::milliseconds(20));
  // A spurious wakeup may return early with false; only a real timeout counts.
  if (timed_out) {
    EXPECT_GE(SteadyClock::instance().now_ns() - start, uint64_t{20'000'000});
  }
  // Retry to the deadline: with no notifier it must end in a timeout.
  const uint64_t deadline = start + 20'000'000;
  bool final_timeout = timed_out;
  while (!final_timeout) final_timeout = cv.wait_until(lock, deadline, SteadyClock::instance());
  EXPECT_TRUE(final_timeout);
  EXPECT_TRUE(lock.owns_lock());
}

TEST(RuntimeThreads, SpawnRunsFunctionAndJoinWaits) {
  std::atomic<int> ran{0};
  Thread t = Runtime::threads().spawn("fn", "local", [&] { ran.store(42); });
  EXPECT_TRUE(t.joinable());
  t.join();
  EXPECT_FALSE(t.joinable());
  EXPECT_EQ(ran.load(), 42);
}

TEST(RuntimeThreads, SleepUntilReturnsNoEarlierThanDeadline) {
  Runtime& rt = Runtime::threads();
  EXPECT_FALSE(rt.simulated());
  EXPECT_FALSE(rt.cancelled());
  const uint64_t deadline = rt.clock().now_ns() + 5'000'000;
  rt.sleep_until(deadline);
  EXPECT_GE(rt.clock().now_ns(), deadline);
}

TEST(RuntimeThreads, NoSchedulerOnPlainThreads) { EXPECT_EQ(detail::current_scheduler(), nullptr); }

}  // namespace
}  // namespace ferry
