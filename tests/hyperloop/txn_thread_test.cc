// HyperLoop's transactions with concurrent readers on the replicas (§5
// "Locking and Isolation"), on a threaded engine: a writer moves two fields
// of the database together (one record, two entries, applied entry by entry
// by the replicas' NICs) under a group write lock; a reader thread on every
// replica reads both under that replica's read lock and must never see them
// differ. The control: without the locks, readers do see a half-applied
// record, so the check can fail. The store's scans from replica threads see
// each multi-key transaction whole and never go back in time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/hyperloop/txn_kv.h"
#include "group_test_util.h"
#include "linearizability.h"

namespace ferry::hyperloop {
namespace txn_thread_test {

constexpr uint64_t kFieldA = 0;
constexpr uint64_t kFieldB = 4096;  // apart: separate gMEMCPYs, separate lines

// Under TSan these run ~10x slower and three reader threads share 2 cores
// with the writer and the engine: a third of the writes still overlaps
// thousands of replica reads, which is what TSan needs to see the races.
#if defined(__SANITIZE_THREAD__)
constexpr uint64_t kWriteDivisor = 3;
#else
constexpr uint64_t kWriteDivisor = 1;
#endif

struct Outcome {
  uint64_t reads = 0;
  uint64_t torn = 0;  // reads that saw A != B
  uint64_t transactions = 0;
};

Outcome run(bool locked, uint64_t max_transactions, std::chrono::milliseconds budget) {
  nic::EngineOptions eo;
  eo.spin_ns = 20'000;
  nic::Engine engine(eo);
  auto client = HyperLoopClient::create(engine).value();
  const GroupId data = testing::make_group(*client, 3, pm::Media::kDram, 64 << 10, 64, 8, false);
  const GroupId locks = testing::make_group(*client, 3, pm::Media::kDram, 4096, 64, 8, false);
  TxnOptions o;
  o.log_bytes = 16 << 10;
  o.db_bytes = 8 << 10;
  auto txn = TxnClient::initialize(*client, data, locks, o);
  EXPECT_TRUE(txn.ok()) << txn.status().to_string();
  if (!txn.ok()) return {};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, torn_reads{0};
  std::vector<std::thread> readers;
  for (uint32_t r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      const uint8_t* db = txn.value()->replica_db(r).value().data();
      ReplicaLocks lk(client->replica(locks, r).value().region->data(), 4096);
      while (!stop.load(std::memory_order_acquire)) {
        if (locked && !lk.try_rd_lock(0)) continue;
        uint64_t a, b;
        std::memcpy(&a, db + kFieldA, 8);
        std::memcpy(&b, db + kFieldB, 8);
        if (locked) lk.rd_unlock(0);
        reads.fetch_add(1, std::memory_order_relaxed);
        if (a != b) torn_reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  Outcome out;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (uint64_t v = 1; v <= max_transactions && std::chrono::steady_clock::now() < deadline; ++v) {
    uint64_t value = v;
    const TxnWrite w[] = {{kFieldA, {reinterpret_cast<const uint8_t*>(&value), 8}},
                          {kFieldB, {reinterpret_cast<const uint8_t*>(&value), 8}}};
    if (locked) {
      Status st = txn.value()->wr_lock(0);
      while (st.code() == Code::kTimedOut) st = txn.value()->wr_lock(0);  // readers held it throughout
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
    EXPECT_TRUE(txn.value()->append(w).ok());
    EXPECT_TRUE(txn.value()->execute_and_advance().ok());
    if (locked) {
      EXPECT_TRUE(txn.value()->wr_unlock(0).ok());
    }
    ++out.transactions;
    if (!locked) {
      // The control stops as soon as a reader caught a half-applied record.
      if (torn_reads.load(std::memory_order_relaxed) > 0) break;
    }
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  out.reads = reads.load();
  out.torn = torn_reads.load();
  txn.value().reset();
  client.reset();
  return out;
}

TEST(TxnIsolation, ReadersUnderReadLocksNeverSeeAHalfAppliedRecord) {
  const Outcome o = run(/*locked=*/true, 400 / kWriteDivisor, std::chrono::seconds(20));
  std::printf("locked: %llu transactions, %llu reads, %llu torn\n", static_cast<unsigned long long>(o.transactions),
              static_cast<unsigned long long>(o.reads), static_cast<unsigned long long>(o.torn));
  EXPECT_GT(o.transactions, 50u);
  EXPECT_GT(o.reads, 0u);
  EXPECT_EQ(o.torn, 0u) << "a reader under a read lock saw field A and B of different transactions";
}

TEST(TxnIsolation, WithoutLocksReadersDoSeeAHalfAppliedRecord) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the control races readers against the NIC's DMA on purpose; TSan would report exactly that";
#endif
  const Outcome o = run(/*locked=*/false, 20000, std::chrono::seconds(30));
  std::printf("unlocked: %llu transactions, %llu reads, %llu torn\n", static_cast<unsigned long long>(o.transactions),
              static_cast<unsigned long long>(o.reads), static_cast<unsigned long long>(o.torn));
  EXPECT_GT(o.torn, 0u) << "no reader ever caught a record between its two gMEMCPYs: the locked test proves nothing";
}

// A store on a threaded engine (DRAM groups of three replicas, 64 slots of
// 8-byte keys and values, `stripes` lock stripes): the front end on the test's
// thread, readers on threads of their own.
struct ThreadedStore {
  explicit ThreadedStore(uint32_t stripes) : engine(engine_options()) {
    client = HyperLoopClient::create(engine).value();
    data = testing::make_group(*client, 3, pm::Media::kDram, 128 << 10, 64, 8, false);
    locks = testing::make_group(*client, 3, pm::Media::kDram, 4096, 64, 8, false);
    ko.slots = 64;
    ko.key_max = 8;
    ko.value_max = 8;
    ko.locks = stripes;
    TxnOptions o;
    o.log_bytes = 16 << 10;
    o.db_bytes = txn_kv_db_bytes(ko);
    txn = TxnClient::initialize(*client, data, locks, o);
    if (txn.ok()) kv = TxnKv::create(*txn.value(), ko);
  }
  static nic::EngineOptions engine_options() {
    nic::EngineOptions eo;
    eo.spin_ns = 20'000;
    return eo;
  }
  nic::Engine engine;
  std::unique_ptr<HyperLoopClient> client;
  GroupId data = 0, locks = 0;
  TxnKvOptions ko;
  Result<std::unique_ptr<TxnClient>> txn = failed_precondition("not built");
  Result<std::unique_ptr<TxnKv>> kv = failed_precondition("not built");
};

// The transactional store with a reader thread on every replica: the
// history of the front end's puts and the replicas' locked gets must be
// linearizable (tests/support/linearizability). One lock stripe: every
// read is ordered against every write by its replica's lock word (with
// stripes, a reader probing past another stripe's slot relies on the slot
// checksum instead, which TSan would report as the race it is).
TEST(TxnKvLinearizability, PutsByTheFrontEndAndGetsFromEveryReplica) {
  ThreadedStore st(1);
  ASSERT_TRUE(st.txn.ok()) << st.txn.status().to_string();
  ASSERT_TRUE(st.kv.ok()) << st.kv.status().to_string();
  auto& client = st.client;
  auto& txn = st.txn;
  auto& kv = st.kv;
  const GroupId locks = st.locks;
  const TxnKvOptions& ko = st.ko;
  const auto now = [] {
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  };
  constexpr uint64_t kKeys = 4;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> gets{0};
  std::vector<std::vector<ferry::testing::KvOp>> histories(4);
  std::vector<std::thread> readers;
  for (uint32_t r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      TxnKvReplicaReader rd(txn.value()->replica_db(r).value(),
                            ReplicaLocks(client->replica(locks, r).value().region->data(), 4096), ko);
      uint64_t i = 0;
      while (!stop.load(std::memory_order_acquire)) {
        const uint64_t key = i++ % kKeys;
        const uint64_t t0 = now();
        auto got = rd.get("k" + std::to_string(key));
        const uint64_t t1 = now();
        std::optional<uint64_t> value;
        if (got.ok()) {
          uint64_t v = 0;
          std::memcpy(&v, got.value().data(), std::min<size_t>(8, got.value().size()));
          value = v;
        } else {
          EXPECT_EQ(got.status().code(), Code::kNotFound);
        }
        histories[r + 1].push_back(ferry::testing::KvOp::get(r + 1, key, value, t0, t1));
        gets.fetch_add(1, std::memory_order_relaxed);
        if (histories[r + 1].size() >= 3000) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }
  // The readers get going before the writes start, and the writes go on
  // (up to 3000) until the readers have overlapped them with 300 gets: on a
  // loaded machine reader threads may be scheduled late.
  while (gets.load(std::memory_order_relaxed) < 3) std::this_thread::yield();
  const uint64_t gets_before = gets.load(std::memory_order_relaxed);
  for (uint64_t v = 1; v <= 300 / kWriteDivisor || (v <= 3000 && gets.load(std::memory_order_relaxed) - gets_before < 300);
       ++v) {
    const uint64_t key = v % kKeys;
    const uint64_t t0 = now();
    ASSERT_TRUE(kv.value()->put("k" + std::to_string(key), {reinterpret_cast<const uint8_t*>(&v), 8}).ok());
    histories[0].push_back(ferry::testing::KvOp::put(0, key, v, t0, now()));
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  std::vector<ferry::testing::KvOp> all;
  for (const auto& h : histories) all.insert(all.end(), h.begin(), h.end());
  const auto verdict = ferry::testing::check_kv_history(all);
  std::printf("%zu operations (%zu gets from replicas)\n", all.size(), all.size() - histories[0].size());
  EXPECT_GT(all.size() - histories[0].size(), 100u);
  EXPECT_TRUE(verdict.ok) << verdict.explanation;
  kv.value().reset();
  txn.value().reset();
  client.reset();
}

// Range scans on replicas against a front end whose every transaction
// writes version v to "a" and "m" and inserts (odd v) or removes (even v)
// "f" with it: keys on several stripes, the index changing. Every scan must
// show one state between whole transactions (a == m, "f" present with value
// v iff v is odd), and -- one writer, so states are totally ordered --
// never a version older than one acknowledged before the scan began, nor
// older than its previous scan saw (linearizable).
TEST(TxnKvLinearizability, ScansFromEveryReplicaSeeTransactionsWholeAndInOrder) {
  ThreadedStore st(4);
  ASSERT_TRUE(st.txn.ok()) << st.txn.status().to_string();
  ASSERT_TRUE(st.kv.ok()) << st.kv.status().to_string();
  auto& client = st.client;
  auto& txn = st.txn;
  auto& kv = st.kv;
  const GroupId locks = st.locks;
  const TxnKvOptions& ko = st.ko;
  const auto version_of = [](const std::vector<uint8_t>& v) {
    uint64_t x = 0;
    std::memcpy(&x, v.data(), std::min<size_t>(8, v.size()));
    return x;
  };
  std::atomic<uint64_t> acknowledged{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> scans{0}, bad{0};
  std::vector<std::thread> readers;
  for (uint32_t r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      TxnKvReplicaReader rd(txn.value()->replica_db(r).value(),
                            ReplicaLocks(client->replica(locks, r).value().region->data(), 4096), ko);
      uint64_t previous = 0;
      while (!stop.load(std::memory_order_acquire)) {
        const uint64_t floor = acknowledged.load(std::memory_order_acquire);
        auto got = rd.scan("", 10);
        if (!got.ok()) {
          bad.fetch_add(1);
          continue;
        }
        std::map<std::string, uint64_t> seen;
        for (const auto& [k, v] : got.value()) seen[k] = version_of(v);
        const uint64_t a = seen.count("a") != 0 ? seen["a"] : 0;
        const uint64_t m = seen.count("m") != 0 ? seen["m"] : 0;
        const bool f_ok = a % 2 == 1 ? (seen.count("f") == 1 && seen["f"] == a) : seen.count("f") == 0;
        if (a != m || !f_ok || a < floor || a < previous) bad.fetch_add(1);
        previous = a;
        scans.fetch_add(1, std::memory_order_relaxed);
        if (scans.load(std::memory_order_relaxed) >= 20'000) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }
  for (uint64_t v = 1; v <= 200 / kWriteDivisor; ++v) {
    const std::span<const uint8_t> value(reinterpret_cast<const uint8_t*>(&v), 8);
    std::vector<TxnKvOp> ops = {{TxnKvOp::kPut, "a", value}, {TxnKvOp::kPut, "m", value}};
    ops.push_back(v % 2 == 1 ? TxnKvOp{TxnKvOp::kPut, "f", value} : TxnKvOp{TxnKvOp::kRemove, "f", {}});
    ASSERT_TRUE(kv.value()->transaction(ops).ok()) << "version " << v;
    acknowledged.store(v, std::memory_order_release);
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  std::printf("%llu scans from replicas, %llu inconsistent\n", static_cast<unsigned long long>(scans.load()),
              static_cast<unsigned long long>(bad.load()));
  EXPECT_GT(scans.load(), 100u);
  EXPECT_EQ(bad.load(), 0u);
  kv.value().reset();
  txn.value().reset();
  client.reset();
}

}  // namespace txn_thread_test
}  // namespace ferry::hyperloop
