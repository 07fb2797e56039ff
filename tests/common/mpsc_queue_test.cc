// MpscQueue: FIFO order, capacity rounding and full/empty behaviour on one
// thread; exactly-once delivery and per-producer order with several producers.
#include "ferry/common/mpsc_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace ferry {
namespace {

// How many pushes succeed on an empty queue before it reports full.
size_t usable_capacity(size_t requested) {
  MpscQueue<uint32_t> q(requested);
  size_t n = 0;
  while (q.push(static_cast<uint32_t>(n))) {
    ++n;
    if (n > 4 * requested + 16) break;  // never full: fail below instead of looping
  }
  return n;
}

TEST(MpscQueue, CapacityRoundsUpToPowerOfTwoWithMinimumTwo) {
  EXPECT_EQ(usable_capacity(0), 2u);
  EXPECT_EQ(usable_capacity(1), 2u);
  EXPECT_EQ(usable_capacity(2), 2u);
  EXPECT_EQ(usable_capacity(3), 4u);
  EXPECT_EQ(usable_capacity(4), 4u);
  EXPECT_EQ(usable_capacity(5), 8u);
  EXPECT_EQ(usable_capacity(1000), 1024u);
  EXPECT_EQ(usable_capacity(1024), 1024u);
}

TEST(MpscQueue, EmptyQueuePopsNothing) {
  MpscQueue<uint64_t> q(8);
  uint64_t v = 42;
  EXPECT_FALSE(q.maybe_nonempty());
  EXPECT_FALSE(q.pop(&v));
  EXPECT_EQ(v, 42u) << "a failed pop leaves the output alone";
}

TEST(MpscQueue, SingleThreadFifo) {
  MpscQueue<uint64_t> q(8);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(q.push(i * 10));
  EXPECT_TRUE(q.maybe_nonempty());
  for (uint64_t i = 0; i < 8; ++i) {
    uint64_t v = 0;
    ASSERT_TRUE(q.pop(&v));
    EXPECT_EQ(v, i * 10);
  }
  uint64_t v = 0;
  EXPECT_FALSE(q.pop(&v));
  EXPECT_FALSE(q.maybe_nonempty());
}

TEST(MpscQueue, FullRefusesUntilOnePopFreesASlot) {
  MpscQueue<uint32_t> q(4);
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(q.push(i));
  EXPECT_FALSE(q.push(99)) << "full";
  EXPECT_FALSE(q.push(100)) << "still full";
  uint32_t v = 0;
  ASSERT_TRUE(q.pop(&v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(q.push(4));
  EXPECT_FALSE(q.push(5));
  for (uint32_t want = 1; want <= 4; ++want) {
    ASSERT_TRUE(q.pop(&v));
    EXPECT_EQ(v, want) << "the refused values never entered";
  }
  EXPECT_FALSE(q.pop(&v));
}

TEST(MpscQueue, FifoAcrossManyWrapArounds) {
  MpscQueue<uint32_t> q(2);
  uint32_t next_push = 0, next_pop = 0;
  // Alternate bursts of 1 and 2 so head and tail move through every cell.
  for (int round = 0; round < 1000; ++round) {
    const int burst = 1 + round % 2;
    for (int i = 0; i < burst; ++i) ASSERT_TRUE(q.push(next_push++));
    for (int i = 0; i < burst; ++i) {
      uint32_t v = 0;
      ASSERT_TRUE(q.pop(&v));
      ASSERT_EQ(v, next_pop++);
    }
  }
  EXPECT_EQ(next_pop, 1500u);
}

struct Message {
  uint32_t producer;
  uint32_t seq;
  uint64_t check;  // derived from the other fields: detects torn copies
};

TEST(MpscQueue, CarriesTriviallyCopyableStructs) {
  MpscQueue<Message> q(4);
  ASSERT_TRUE(q.push(Message{1, 2, 3}));
  ASSERT_TRUE(q.push(Message{4, 5, 6}));
  Message m{};
  ASSERT_TRUE(q.pop(&m));
  EXPECT_EQ(m.producer, 1u);
  EXPECT_EQ(m.seq, 2u);
  EXPECT_EQ(m.check, 3u);
  ASSERT_TRUE(q.pop(&m));
  EXPECT_EQ(m.producer, 4u);
}

uint64_t check_of(uint32_t producer, uint32_t seq) {
  return (static_cast<uint64_t>(producer) << 32 | seq) * 0x9E3779B97F4A7C15ULL;
}

// Several producers push distinct values into a small queue (so it is often
// full and producers contend for cells); one consumer checks that each value
// arrives exactly once and each producer's values arrive in push order.
void run_producers(int producers, uint32_t per_producer, size_t capacity) {
  MpscQueue<Message> q(capacity);
  std::atomic<bool> go{false};
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (uint32_t s = 0; s < per_producer; ++s) {
        const Message m{static_cast<uint32_t>(p), s, check_of(static_cast<uint32_t>(p), s)};
        while (!q.push(m)) std::this_thread::yield();
      }
      finished.fetch_add(1, std::memory_order_release);
    });
  }
  std::vector<uint32_t> next(producers, 0);
  uint64_t received = 0;
  int errors = 0;
  go.store(true, std::memory_order_release);
  for (;;) {
    // Read before popping: once every producer finished, an empty queue means
    // everything pushed has been received (or lost).
    const bool all_pushed = finished.load(std::memory_order_acquire) == producers;
    Message m{};
    if (!q.pop(&m)) {
      if (all_pushed) break;
      std::this_thread::yield();
      continue;
    }
    ++received;
    const bool known = m.producer < static_cast<uint32_t>(producers);
    if (!known || m.check != check_of(m.producer, m.seq) || m.seq != next[m.producer]) {
      if (++errors <= 5) {
        ADD_FAILURE() << "producer " << m.producer << " seq " << m.seq << " check " << m.check << ": expected seq "
                      << (known ? next[m.producer] : 0);
      }
      if (known) next[m.producer] = m.seq + 1;
      continue;
    }
    ++next[m.producer];
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(received, static_cast<uint64_t>(producers) * per_producer);
  for (int p = 0; p < producers; ++p) EXPECT_EQ(next[p], per_producer) << "producer " << p;
}

TEST(MpscQueue, TwoProducersExactlyOnceInPerProducerOrder) { run_producers(2, 100'000, 16); }

TEST(MpscQueue, FourProducersExactlyOnceInPerProducerOrder) { run_producers(4, 50'000, 8); }

}  // namespace
}  // namespace ferry
