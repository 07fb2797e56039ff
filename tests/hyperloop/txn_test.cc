// HyperLoop's transaction API (§5) on a deterministic manual engine:
// Append durable on every replica when it returns, ExecuteAndAdvance
// applying every entry identically on every replica, the log ring's wrap,
// group write locks with the undo of a partial gCAS, read locks on one
// replica, and a replica's replay of its log after power failures at random
// points (seeded: FERRY_SEED).
#include "ferry/hyperloop/txn.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/rng.h"
#include "ferry/hyperloop/hyperloop.h"
#include "test_seed.h"
#include "txn_test_util.h"

namespace ferry::hyperloop {
namespace txn_test {

// The chain the tests run on (txn_test_util.h), with the sizes they use.
testing::TxnChainOptions fixture_options(uint64_t log_bytes, uint64_t db_bytes, bool interleaved_flush) {
  testing::TxnChainOptions o = testing::txn_chain_options(64 << 10, log_bytes, db_bytes);
  o.interleaved_flush = interleaved_flush;
  return o;
}

struct TxnFixture : testing::TxnChain {
  explicit TxnFixture(uint64_t log_bytes = 8 << 10, uint64_t db_bytes = 16 << 10, bool interleaved_flush = true)
      : TxnChain(fixture_options(log_bytes, db_bytes, interleaved_flush)) {}
  std::span<uint8_t> replica_region(uint32_t r) { return region(r); }
};

// A random record of 1-4 writes inside the database; applied to `model` too.
std::vector<std::vector<uint8_t>> random_record(Rng& rng, uint64_t db_bytes, std::vector<uint8_t>* model,
                                                std::vector<TxnWrite>* writes) {
  std::vector<std::vector<uint8_t>> data;
  const uint32_t n = 1 + static_cast<uint32_t>(rng.below(4));
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t len = 1 + static_cast<uint32_t>(rng.below(200));
    const uint64_t off = rng.below(db_bytes - len + 1);
    std::vector<uint8_t> d(len);
    for (auto& b : d) b = static_cast<uint8_t>(rng.next());
    data.push_back(std::move(d));
    writes->push_back({off, {}});
  }
  for (uint32_t i = 0; i < n; ++i) {
    (*writes)[i].data = data[i];
    if (model != nullptr) std::memcpy(model->data() + (*writes)[i].offset, data[i].data(), data[i].size());
  }
  return data;
}

// Appends; when the ring is full, executes everything first (what a client
// does when Append says kResourceExhausted).
void append_making_room(TxnClient& txn, std::span<const TxnWrite> w) {
  auto lsn = txn.append(w);
  if (!lsn.ok()) {
    ASSERT_EQ(lsn.status().code(), Code::kResourceExhausted) << lsn.status().to_string();
    ASSERT_TRUE(txn.execute_all().ok());
    ASSERT_TRUE(txn.append(w).ok());
  }
}

TEST(Txn, AppendIsDurableOnEveryReplicaWhenItReturns) {
  TxnFixture f;
  const std::vector<uint8_t> v(100, 0xAB);
  const TxnWrite w[] = {{128, v}};
  auto lsn = f.txn->append(w);
  ASSERT_TRUE(lsn.ok()) << lsn.status().to_string();
  EXPECT_EQ(lsn.value(), 0u);
  for (uint32_t r = 0; r < 3; ++r) {
    // Whatever a power failure keeps, the record is whole on replica r.
    ReplicaView view = f.client->replica(f.data, r).value();
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      auto image = view.domain->image_after_power_fail(*view.region, seed);
      auto rec = decode_txn_record(std::span<const uint8_t>(image).subspan(kTxnControlBytes, 8 << 10), 0, 16 << 10);
      ASSERT_TRUE(rec.ok()) << "replica " << r << ", seed " << seed << ": " << rec.status().to_string();
      ASSERT_EQ(rec->entries.size(), 1u);
      EXPECT_EQ(rec->entries[0].offset, 128u);
    }
    // Not applied yet: Append only logs.
    EXPECT_EQ(f.txn->replica_db(r).value()[128], 0);
  }
}

TEST(Txn, ExecuteAndAdvanceAppliesEveryEntryIdenticallyOnEveryReplica) {
  const uint64_t seed = ferry::testing::test_seed(41);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  TxnFixture f;
  Rng rng(seed);
  std::vector<uint8_t> model(16 << 10, 0);
  for (int i = 0; i < 60; ++i) {
    std::vector<TxnWrite> w;
    auto keep = random_record(rng, model.size(), &model, &w);
    ASSERT_NO_FATAL_FAILURE(append_making_room(*f.txn, w));
    if (rng.below(3) == 0) {
      ASSERT_TRUE(f.txn->execute_and_advance().ok());
    }
  }
  ASSERT_TRUE(f.txn->execute_all().ok());
  EXPECT_EQ(f.txn->execute_and_advance().code(), Code::kNotFound);
  EXPECT_EQ(std::memcmp(f.txn->db().data(), model.data(), model.size()), 0) << "the client's mirror";
  for (uint32_t r = 0; r < 3; ++r) {
    auto db = f.txn->replica_db(r).value();
    EXPECT_EQ(std::memcmp(db.data(), model.data(), model.size()), 0) << "replica " << r;
    // The persistent head says everything was executed.
    uint64_t head = 0;
    std::memcpy(&head, f.replica_region(r).data() + kTxnHeadOffset, 8);
    EXPECT_EQ(head, f.txn->tail()) << "replica " << r;
  }
  EXPECT_EQ(f.txn->counters().executed, 60u);
}

TEST(Txn, TheRingWrapsWithPaddingAndRecordsOfEarlierLapsAreNeverReplayed) {
  TxnFixture f(/*log_bytes=*/2048);
  Rng rng(7);
  std::vector<uint8_t> model(16 << 10, 0);
  for (int i = 0; i < 200; ++i) {
    std::vector<TxnWrite> w;
    auto keep = random_record(rng, model.size(), &model, &w);
    ASSERT_NO_FATAL_FAILURE(append_making_room(*f.txn, w));
  }
  ASSERT_TRUE(f.txn->execute_all().ok());
  EXPECT_GT(f.txn->tail(), 10u * 2048) << "the ring wrapped many times";
  EXPECT_GT(f.txn->counters().padding, 0u);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(std::memcmp(f.txn->replica_db(r).value().data(), model.data(), model.size()), 0) << "replica " << r;
    // The ring is full of old records; from the head none is current.
    EXPECT_TRUE(scan_log(f.txn->replica_log(r).value(), f.txn->tail(), 16 << 10).empty()) << "replica " << r;
    auto replay = replay_txn_log(f.replica_region(r));
    ASSERT_TRUE(replay.ok());
    EXPECT_EQ(replay->records, 0u);
  }
}

TEST(Txn, AFullRingRefusesUntilRecordsAreExecutedAndBadRecordsAreRejected) {
  TxnFixture f(/*log_bytes=*/1024);
  const std::vector<uint8_t> v(200, 1);
  const TxnWrite w[] = {{0, v}};
  int appended = 0;
  while (f.txn->append(w).ok()) ++appended;
  EXPECT_EQ(appended, 1024 / 256);
  EXPECT_EQ(f.txn->append(w).status().code(), Code::kResourceExhausted);
  ASSERT_TRUE(f.txn->execute_and_advance().ok());
  EXPECT_TRUE(f.txn->append(w).ok());

  EXPECT_EQ(f.txn->append({}).status().code(), Code::kInvalidArgument);
  const TxnWrite outside[] = {{(16 << 10) - 10, v}};
  EXPECT_EQ(f.txn->append(outside).status().code(), Code::kInvalidArgument);
  const std::vector<uint8_t> huge(2000, 1);
  const TxnWrite too_big[] = {{0, huge}};
  EXPECT_EQ(f.txn->append(too_big).status().code(), Code::kInvalidArgument);
  const std::vector<uint8_t> none;
  const TxnWrite empty_write[] = {{0, none}};
  EXPECT_EQ(f.txn->append(empty_write).status().code(), Code::kInvalidArgument);
}

TEST(Txn, TheLayoutMustFitAndResumeFindsItAgain) {
  TxnFixture f;
  TxnOptions too_big;
  too_big.log_bytes = 64 << 10;
  EXPECT_EQ(TxnClient::initialize(*f.client, f.data, f.locks, too_big).status().code(), Code::kInvalidArgument);
  Rng rng(3);
  std::vector<uint8_t> model(16 << 10, 0);
  for (int i = 0; i < 5; ++i) {
    std::vector<TxnWrite> w;
    auto keep = random_record(rng, model.size(), &model, &w);
    ASSERT_TRUE(f.txn->append(w).ok());
  }
  ASSERT_TRUE(f.txn->execute_and_advance().ok());
  const uint64_t tail = f.txn->tail();
  f.txn.reset();  // the client restarts: 4 records appended, not executed
  TxnOptions o;
  o.log_bytes = 8 << 10;
  o.db_bytes = 16 << 10;
  o.resume = true;
  auto again = TxnClient::initialize(*f.client, f.data, f.locks, o);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again.value()->tail(), tail);
  ASSERT_TRUE(again.value()->execute_all().ok());
  EXPECT_EQ(again.value()->counters().executed, 4u);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(std::memcmp(again.value()->replica_db(r).value().data(), model.data(), model.size()), 0);
  }
  o.db_bytes = 8 << 10;
  EXPECT_EQ(TxnClient::initialize(*f.client, f.data, f.locks, o).status().code(), Code::kInvalidArgument);
}

// The replicas lose power at random points: between operations (everything
// acknowledged is in every replica's log or database), and in the middle of
// an Append (the record is on a replica whole or not at all). After each
// replica replays its own log, its database is the model of the
// acknowledged records, plus at most the one in flight.
// Append and ExecuteAndAdvance traverse the chain once per operation when
// the flush is interleaved (§4.2), twice with a gFLUSH after each; both
// leave the same durable state.
TEST(TxnFlush, InterleavedFlushesHalveTheChainTraversalsOfAWrite) {
  for (const bool interleaved : {true, false}) {
    SCOPED_TRACE(interleaved ? "interleaved" : "separate");
    TxnFixture f(8 << 10, 16 << 10, interleaved);
    const uint64_t per_op = interleaved ? 1 : 2;
    const std::vector<uint8_t> a(64, 1), b(100, 2), c(8, 3);
    const TxnWrite w[] = {{0, a}, {1000, b}, {5000, c}};
    const uint64_t t0 = f.txn->counters().traversals;
    ASSERT_TRUE(f.txn->append(w).ok());
    EXPECT_EQ(f.txn->counters().traversals - t0, per_op) << "Append";
    const uint64_t t1 = f.txn->counters().traversals;
    ASSERT_TRUE(f.txn->execute_and_advance().ok());
    EXPECT_EQ(f.txn->counters().traversals - t1, 4 * per_op) << "three gMEMCPYs and the head's gWRITE";
    const uint64_t t2 = f.txn->counters().traversals;
    ASSERT_TRUE(f.txn->wr_lock(3).ok());
    ASSERT_TRUE(f.txn->wr_unlock(3).ok());
    EXPECT_EQ(f.txn->counters().traversals - t2, 2u) << "a gCAS each (DRAM lock words: no flush)";
    for (uint32_t r = 0; r < 3; ++r) {
      // Whatever a power failure keeps: the entries applied and the head past them.
      ReplicaView view = f.client->replica(f.data, r).value();
      for (uint64_t seed = 1; seed <= 10; ++seed) {
        auto image = view.domain->image_after_power_fail(*view.region, seed);
        const uint8_t* db = image.data() + f.txn->db_offset();
        EXPECT_EQ(std::memcmp(db, a.data(), a.size()), 0) << "replica " << r << ", seed " << seed;
        EXPECT_EQ(std::memcmp(db + 1000, b.data(), b.size()), 0) << "replica " << r << ", seed " << seed;
        EXPECT_EQ(std::memcmp(db + 5000, c.data(), c.size()), 0) << "replica " << r << ", seed " << seed;
        uint64_t head = 0;
        std::memcpy(&head, image.data() + kTxnHeadOffset, 8);
        EXPECT_EQ(head, f.txn->tail()) << "replica " << r << ", seed " << seed;
      }
    }
  }
}

void power_fail_campaign(bool interleaved_flush, uint64_t default_seeds) {
  const ferry::testing::SeedRange seeds = ferry::testing::seed_range("FERRY_TXN_SEEDS", 1000, default_seeds);
  const uint64_t base = seeds.first;
  uint64_t in_flight_seen = 0, in_flight_lost = 0;
  for (uint64_t k = 0; k < seeds.count; ++k) {
    const uint64_t seed = base + k;
    SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: FERRY_SEED=" + std::to_string(seed) + " FERRY_TXN_SEEDS=1)");
    TxnFixture f(/*log_bytes=*/4096, 16 << 10, interleaved_flush);
    Rng rng(seed);
    std::vector<uint8_t> model(16 << 10, 0);
    const int ops = 5 + static_cast<int>(rng.below(40));
    for (int i = 0; i < ops; ++i) {
      std::vector<TxnWrite> w;
      auto keep = random_record(rng, model.size(), &model, &w);
      ASSERT_NO_FATAL_FAILURE(append_making_room(*f.txn, w));
      if (rng.below(2) == 0) {
        ASSERT_TRUE(f.txn->execute_and_advance().ok());
      }
    }
    // Sometimes one more record is in flight: written by gWRITE, not
    // flushed, the engine stepped a random number of times.
    std::vector<uint8_t> with_in_flight = model;
    bool in_flight = false;
    const uint64_t tail = f.txn->tail();
    const uint64_t pos = tail % 4096;
    std::vector<TxnWrite> w;
    auto keep = random_record(rng, model.size(), &with_in_flight, &w);
    const std::vector<uint8_t> rec = encode_txn_record(tail, w);
    if (rng.below(2) == 0 && pos + rec.size() <= 4096 && tail + rec.size() - f.txn->head() <= 4096) {
      in_flight = true;
      auto mem = f.client->client_memory(f.data).value();
      std::memcpy(mem.data() + kTxnControlBytes + pos, rec.data(), rec.size());
      ASSERT_TRUE(f.client->gwrite_async(f.data, kTxnControlBytes + pos, static_cast<uint32_t>(rec.size()), false,
                                         [](const OpResult&) {}).ok());
      const uint64_t steps = rng.below(40);
      for (uint64_t s = 0; s < steps; ++s) f.engine->step();
    }
    for (uint32_t r = 0; r < 3; ++r) {
      ReplicaView v = f.client->replica(f.data, r).value();
      v.domain->power_fail(seed * 7 + r);
      auto replay = replay_txn_log(f.replica_region(r));
      ASSERT_TRUE(replay.ok()) << replay.status().to_string();
      auto db = f.txn->replica_db(r).value();
      const bool is_model = std::memcmp(db.data(), model.data(), model.size()) == 0;
      const bool is_with = std::memcmp(db.data(), with_in_flight.data(), model.size()) == 0;
      if (in_flight) {
        ++in_flight_seen;
        in_flight_lost += is_model && !is_with;
        EXPECT_TRUE(is_model || is_with) << "replica " << r << " is neither before nor after the record in flight";
      } else {
        EXPECT_TRUE(is_model) << "replica " << r << " lost an acknowledged record";
      }
    }
  }
  std::printf("in-flight replicas: %llu, of which the record was lost on %llu\n",
              static_cast<unsigned long long>(in_flight_seen), static_cast<unsigned long long>(in_flight_lost));
}

TEST(TxnPowerFailure, ReplayedReplicasHoldEveryAcknowledgedRecord) { power_fail_campaign(true, 40); }

TEST(TxnPowerFailure, ReplayedReplicasHoldEveryAcknowledgedRecordWithSeparateGFlushes) {
  power_fail_campaign(false, 20);
}

// ---- a client that crashed resumes ------------------------------------------

TxnOptions resume_options(const TxnFixture& f) {
  TxnOptions o;
  o.log_bytes = f.options.log_bytes;
  o.db_bytes = f.options.db_bytes;
  o.lock_timeout_ns = f.options.lock_timeout_ns;
  o.resume = true;
  return o;
}

// The client's process dies (both of its groups' data paths go down where
// they stand), a new one takes its place and resumes from the region.
void crash_and_resume(TxnFixture& f) {
  f.txn.reset();
  ASSERT_TRUE(f.client->stop_group(f.data).ok());
  ASSERT_TRUE(f.client->stop_group(f.locks).ok());
  ASSERT_TRUE(f.client->restart_group(f.data).ok());
  ASSERT_TRUE(f.client->restart_group(f.locks).ok());
  auto t = TxnClient::initialize(*f.client, f.data, f.locks, resume_options(f));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  f.txn = std::move(t).value();
}

bool log_holds(TxnFixture& f, uint32_t r, uint64_t lsn) {
  return decode_txn_record(f.txn->replica_log(r).value(), lsn, f.options.db_bytes).ok();
}

uint64_t head_word(TxnFixture& f, uint32_t r) {
  uint64_t head = 0;
  std::memcpy(&head, f.replica_region(r).data() + kTxnHeadOffset, 8);
  return head;
}

// The client dies between its WRITE of a record (which landed whole on
// replica 0) and the SEND that would have forwarded it: the record is in
// the head's log only. The client that resumes in its place must put it in
// every member's log before any member copies it into its database, or the
// downstream members copy whatever their rings hold there.
TEST(TxnResume, ARecordThatReachedOnlyTheHeadIsReplicatedToEveryMemberBeforeItRuns) {
  TxnFixture f(/*log_bytes=*/4096);
  Rng rng(11);
  std::vector<uint8_t> model(16 << 10, 0);
  // Two laps of records first, so that the rings hold stale bytes where the
  // next record goes.
  for (int i = 0; i < 40; ++i) {
    std::vector<TxnWrite> w;
    auto keep = random_record(rng, model.size(), &model, &w);
    ASSERT_NO_FATAL_FAILURE(append_making_room(*f.txn, w));
    ASSERT_TRUE(f.txn->execute_all().ok());
  }
  ASSERT_GT(f.txn->tail(), 2u * 4096);
  // The next record, sent as Append sends it, until it is whole on replica 0.
  const uint64_t tail = f.txn->tail();
  std::vector<TxnWrite> w;
  std::vector<uint8_t> with_record = model;
  auto keep = random_record(rng, model.size(), &with_record, &w);
  const std::vector<uint8_t> rec = encode_txn_record(tail, w);
  const uint64_t pos = tail % 4096;
  ASSERT_LE(pos + rec.size(), 4096u);
  auto mem = f.client->client_memory(f.data).value();
  std::memcpy(mem.data() + kTxnControlBytes + pos, rec.data(), rec.size());
  ASSERT_TRUE(f.client->gwrite_async(f.data, kTxnControlBytes + pos, static_cast<uint32_t>(rec.size()), false,
                                     [](const OpResult&) {}).ok());
  for (int steps = 0; !log_holds(f, 0, tail); ++steps) {
    ASSERT_LT(steps, 10000) << "the record never reached replica 0";
    f.engine->step();
  }
  ASSERT_FALSE(log_holds(f, 1, tail));
  ASSERT_FALSE(log_holds(f, 2, tail));
  ASSERT_NO_FATAL_FAILURE(crash_and_resume(f));
  EXPECT_EQ(f.txn->tail(), tail + rec.size()) << "the record on the head's log is not resumed";
  for (uint32_t r = 0; r < 3; ++r) EXPECT_TRUE(log_holds(f, r, tail)) << "replica " << r << "'s log lacks the record";
  ASSERT_TRUE(f.txn->execute_all().ok());
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(std::memcmp(f.txn->replica_db(r).value().data(), with_record.data(), with_record.size()), 0)
        << "replica " << r << "'s database is not the one with the resumed record";
  }
}

// The client dies while the head advance of ExecuteAndAdvance is on its way:
// replica 0's persistent head moved past the record, replica 2's did not.
// The client that resumes starts from the lowest head and writes it to every
// member: a head ahead of what some member holds would let the next records
// overwrite ring space that member's restart still replays from.
TEST(TxnResume, AHeadAdvanceThatReachedOnlyTheHeadIsReconciledToTheLowestHead) {
  TxnFixture f(/*log_bytes=*/4096);
  Rng rng(12);
  std::vector<uint8_t> model(16 << 10, 0);
  for (int i = 0; i < 5; ++i) {
    std::vector<TxnWrite> w;
    auto keep = random_record(rng, model.size(), &model, &w);
    ASSERT_TRUE(f.txn->append(w).ok());
  }
  ASSERT_TRUE(f.txn->execute_all().ok());
  std::vector<TxnWrite> w;
  auto keep = random_record(rng, model.size(), &model, &w);
  ASSERT_TRUE(f.txn->append(w).ok());
  const uint64_t before = f.txn->head();
  const uint64_t after = f.txn->tail();
  // ExecuteAndAdvance by hand up to its head advance: the copies, then the
  // head word sent until replica 0 has it.
  auto mem = f.client->client_memory(f.data).value();
  auto rec = decode_txn_record(mem.subspan(kTxnControlBytes, 4096), before, 16 << 10);
  ASSERT_TRUE(rec.ok());
  for (const auto& e : rec->entries) {
    ASSERT_TRUE(f.client->gmemcpy(f.data, kTxnControlBytes + e.data_at, f.txn->db_offset() + e.offset, e.len).ok());
    std::memmove(mem.data() + f.txn->db_offset() + e.offset, mem.data() + kTxnControlBytes + e.data_at, e.len);
  }
  ASSERT_TRUE(f.client->gflush(f.data).ok());
  std::memcpy(mem.data() + kTxnHeadOffset, &after, 8);
  ASSERT_TRUE(f.client->gwrite_async(f.data, kTxnHeadOffset, 8, false, [](const OpResult&) {}).ok());
  for (int steps = 0; head_word(f, 0) != after; ++steps) {
    ASSERT_LT(steps, 10000);
    f.engine->step();
  }
  ASSERT_EQ(head_word(f, 2), before);
  ASSERT_NO_FATAL_FAILURE(crash_and_resume(f));
  EXPECT_EQ(f.txn->head(), before) << "resume did not start from the lowest head";
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(head_word(f, r), f.txn->head()) << "replica " << r << "'s head";
  ASSERT_TRUE(f.txn->execute_all().ok());
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(std::memcmp(f.txn->replica_db(r).value().data(), model.data(), model.size()), 0) << "replica " << r;
    EXPECT_EQ(head_word(f, r), after) << "replica " << r;
  }
}

// Every replica loses power with a record in flight; each replays its own
// log at restart, so one may have applied the record and another not. The
// client that resumes afterwards must leave every replica's database the
// same: the record applied everywhere if any member's log holds it whole,
// nowhere otherwise. FERRY_SEED picks the first seed.
TEST(TxnPowerFailure, AResumedClientMakesEveryReplayedReplicaIdentical) {
  constexpr uint64_t kSeeds = 30;
  const uint64_t base = ferry::testing::seed_from_env().value_or(3000);
  ferry::testing::print_seed(base, "(the first of " + std::to_string(kSeeds) + ")");
  uint64_t diverged = 0, applied = 0, from_downstream = 0;
  for (uint64_t k = 0; k < kSeeds; ++k) {
    const uint64_t seed = base + k;
    SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
    TxnFixture f(/*log_bytes=*/4096);
    Rng rng(seed);
    std::vector<uint8_t> model(16 << 10, 0);
    const int ops = 3 + static_cast<int>(rng.below(20));
    for (int i = 0; i < ops; ++i) {
      std::vector<TxnWrite> w;
      auto keep = random_record(rng, model.size(), &model, &w);
      ASSERT_NO_FATAL_FAILURE(append_making_room(*f.txn, w));
      if (rng.below(2) == 0) {
        ASSERT_TRUE(f.txn->execute_and_advance().ok());
      }
    }
    // A record in flight (gWRITE, not flushed), the engine stepped until it
    // is on every replica, or a random number of times.
    const uint64_t tail = f.txn->tail();
    const uint64_t pos = tail % 4096;
    std::vector<TxnWrite> w;
    std::vector<uint8_t> with_record = model;
    auto keep = random_record(rng, model.size(), &with_record, &w);
    const std::vector<uint8_t> rec = encode_txn_record(tail, w);
    if (pos + rec.size() > 4096 || tail + rec.size() - f.txn->head() > 4096) continue;
    auto mem = f.client->client_memory(f.data).value();
    std::memcpy(mem.data() + kTxnControlBytes + pos, rec.data(), rec.size());
    ASSERT_TRUE(f.client->gwrite_async(f.data, kTxnControlBytes + pos, static_cast<uint32_t>(rec.size()), false,
                                       [](const OpResult&) {}).ok());
    const uint64_t steps = rng.below(3) == 0 ? rng.below(60) : 100000;
    for (uint64_t s = 0; s < steps && !log_holds(f, 2, tail); ++s) f.engine->step();
    // The power fails everywhere; each replica replays its own log.
    f.txn.reset();
    for (uint32_t r = 0; r < 3; ++r) {
      f.replica(r).domain->power_fail(seed * 7 + r);
      f.client->replica(f.locks, r).value().domain->power_fail(seed * 7 + r + 3);
    }
    ASSERT_TRUE(f.client->stop_group(f.data).ok());
    ASSERT_TRUE(f.client->stop_group(f.locks).ok());
    std::vector<std::vector<uint8_t>> replayed;
    for (uint32_t r = 0; r < 3; ++r) {
      ASSERT_TRUE(replay_txn_log(f.replica_region(r)).ok());
      auto db = f.client->replica(f.data, r).value().region->data() + kTxnControlBytes + 4096;
      replayed.emplace_back(db, db + model.size());
    }
    diverged += replayed[0] != replayed[1] || replayed[1] != replayed[2];
    ASSERT_TRUE(f.client->restart_group(f.data).ok());
    ASSERT_TRUE(f.client->restart_group(f.locks).ok());
    auto t = TxnClient::initialize(*f.client, f.data, f.locks, resume_options(f));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    f.txn = std::move(t).value();
    ASSERT_TRUE(f.txn->execute_all().ok());
    const auto db0 = f.txn->replica_db(0).value();
    const bool is_model = std::memcmp(db0.data(), model.data(), model.size()) == 0;
    const bool is_with = std::memcmp(db0.data(), with_record.data(), model.size()) == 0;
    EXPECT_TRUE(is_model || is_with) << "replica 0 lost an acknowledged record or applied part of one";
    applied += is_with && !is_model;
    // Replica 0 had lost the record; a downstream member's log gave it.
    from_downstream += is_with && !is_model && replayed[0] != with_record;
    for (uint32_t r = 1; r < 3; ++r) {
      EXPECT_EQ(std::memcmp(f.txn->replica_db(r).value().data(), db0.data(), model.size()), 0)
          << "replica " << r << " differs from replica 0 after the resume";
    }
    EXPECT_EQ(std::memcmp(f.txn->db().data(), db0.data(), model.size()), 0) << "the client's mirror";
  }
  std::printf("replays that diverged before the resume: %llu; in-flight record applied: %llu, of which replica 0 "
              "had lost it: %llu\n",
              static_cast<unsigned long long>(diverged), static_cast<unsigned long long>(applied),
              static_cast<unsigned long long>(from_downstream));
  EXPECT_GT(diverged, 0u) << "no power failure left the replicas' replays different: the test proves nothing";
  EXPECT_GT(from_downstream, 0u) << "replica 0 never lost a record a downstream log kept: the extension is untested";
}

// ---- locks --------------------------------------------------------------------

TEST(TxnLocks, AWriteLockExcludesReadersAndAPartialLockIsUndone) {
  TxnFixture f;
  ReplicaLocks r1 = f.reader(1);
  ASSERT_TRUE(f.txn->wr_lock(3).ok());
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(f.reader(r).word(3), ReplicaLocks::kWriter | 1) << "replica " << r;
  EXPECT_FALSE(r1.try_rd_lock(3)) << "a reader got in under a writer";
  EXPECT_TRUE(r1.try_rd_lock(4)) << "another lock is free";
  r1.rd_unlock(4);
  EXPECT_EQ(f.txn->wr_lock(3).code(), Code::kTimedOut) << "a second writer got in";
  ASSERT_TRUE(f.txn->wr_unlock(3).ok());
  EXPECT_EQ(f.txn->wr_unlock(3).code(), Code::kFailedPrecondition) << "unlocking a free lock";

  // A reader on replica 1 only: the writer's gCAS swaps on 0 and 2, fails on
  // 1, and must give 0 and 2 back.
  ASSERT_TRUE(r1.try_rd_lock(3));
  EXPECT_EQ(f.txn->wr_lock(3).code(), Code::kTimedOut);
  EXPECT_GT(f.txn->counters().lock_undos, 0u);
  EXPECT_EQ(f.reader(0).word(3), 0u) << "replica 0 kept a half-taken write lock";
  EXPECT_EQ(f.reader(2).word(3), 0u) << "replica 2 kept a half-taken write lock";
  EXPECT_EQ(r1.word(3), 1u);
  EXPECT_TRUE(f.reader(0).try_rd_lock(3)) << "readers elsewhere are not blocked";
  f.reader(0).rd_unlock(3);
  r1.rd_unlock(3);
  EXPECT_TRUE(f.txn->wr_lock(3).ok());
  EXPECT_TRUE(f.txn->wr_unlock(3).ok());
  EXPECT_EQ(f.txn->wr_lock(1 << 20).code(), Code::kInvalidArgument);
}

// Readers on replica 1 come and go between every two engine steps, each one
// arriving before the one before it leaves, so that lock 5 always has a
// reader while readers are let in. A writer must still get the lock (its
// intent turns new readers away until those inside left), and readers get
// back in once it unlocks.
TEST(TxnLocks, SteadyOverlappingReadersDoNotStarveAWriter) {
  TxnFixture f;
  ReplicaLocks r1 = f.reader(1);
  uint64_t inside = 0, entered = 0, refused = 0;
  bool readers_run = true;
  ASSERT_TRUE(r1.try_rd_lock(5));
  ++inside;
  f.client->set_poll_hook([&] {
    if (!readers_run) return;
    if (r1.try_rd_lock(5)) {  // the next reader arrives
      ++inside;
      ++entered;
    } else {
      ++refused;
    }
    if (inside > 0) {  // the oldest leaves
      r1.rd_unlock(5);
      --inside;
    }
  });
  Status st = f.txn->wr_lock(5);
  readers_run = false;
  f.client->set_poll_hook({});
  ASSERT_TRUE(st.ok()) << st.to_string() << " after " << entered << " readers came and went";
  EXPECT_EQ(inside, 0u);
  EXPECT_GT(entered, 0u) << "readers were never let in: the test proves nothing";
  EXPECT_GT(refused, 0u);
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(f.reader(r).word(5), ReplicaLocks::kWriter | 1) << "replica " << r;
  ASSERT_TRUE(f.txn->wr_unlock(5).ok());
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(f.reader(r).word(5), 0u) << "replica " << r;
    EXPECT_TRUE(f.reader(r).try_rd_lock(5)) << "replica " << r << ": readers stay shut out after the writer";
    f.reader(r).rd_unlock(5);
  }
}

// A writer that gives up clears its intent, and one that dies waiting for
// readers (its intent set on replica 1, its writer word on the others)
// leaves nothing behind its successor's release_stale_locks: readers get in
// everywhere again, and the reader inside keeps its count.
TEST(TxnLocks, AWritersIntentGoesWithItWhenItGivesUpOrDies) {
  TxnFixture f;
  ReplicaLocks r1 = f.reader(1);
  ASSERT_TRUE(r1.try_rd_lock(2));  // a reader that stays
  EXPECT_EQ(f.txn->wr_lock(2).code(), Code::kTimedOut);
  EXPECT_GT(f.txn->counters().lock_intents + f.txn->counters().lock_undos, 0u);
  EXPECT_EQ(r1.word(2), 1u) << "the writer that gave up left its intent";
  ASSERT_TRUE(r1.try_rd_lock(2));
  r1.rd_unlock(2);
  // The writer dies as soon as its intent is on replica 1.
  bool crashed = false;
  f.client->set_poll_hook([&] {
    if (!crashed && (r1.word(2) & ReplicaLocks::kIntent) != 0) {
      crashed = true;
      ASSERT_TRUE(f.client->stop_group(f.data).ok());
      ASSERT_TRUE(f.client->stop_group(f.locks).ok());
    }
  });
  EXPECT_FALSE(f.txn->wr_lock(2).ok());
  ASSERT_TRUE(crashed);
  f.client->set_poll_hook({});
  EXPECT_EQ(r1.word(2), ReplicaLocks::kIntent | 1);
  EXPECT_FALSE(r1.try_rd_lock(2)) << "a reader got in under a writer's intent";
  ASSERT_NO_FATAL_FAILURE(crash_and_resume(f));
  auto released = f.txn->release_stale_locks(8);
  ASSERT_TRUE(released.ok()) << released.status().to_string();
  EXPECT_EQ(released.value(), 3u) << "two writer words and one intent";
  EXPECT_EQ(r1.word(2), 1u) << "the dead writer's intent stayed, or the reader's count was touched";
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(f.reader(r).try_rd_lock(2)) << "replica " << r;
    f.reader(r).rd_unlock(2);
  }
  r1.rd_unlock(2);
  EXPECT_TRUE(f.txn->wr_lock(2).ok());
}

// The front end dies in the middle of ExecuteAndAdvance under its write
// lock: replica 1 has the record's first entry applied and not its second.
// While its successor recovers, readers try every replica between every two
// engine steps: none may get in before the record has run again everywhere
// (recover takes the dead front end's locks over; releasing them first would
// let a reader in between).
TEST(TxnLocks, RecoverLetsNoReaderInBeforeTheDeadFrontEndsRecordRanAgain) {
  TxnFixture f;
  constexpr uint64_t kA = 0, kB = 4096;  // two entries of one record, in separate gMEMCPYs
  auto field = [&](uint32_t r, uint64_t at) {
    uint64_t v = 0;
    std::memcpy(&v, f.txn->replica_db(r).value().data() + at, 8);
    return v;
  };
  auto record = [&](uint64_t v) {
    const TxnWrite w[] = {{kA, {reinterpret_cast<const uint8_t*>(&v), 8}},
                          {kB, {reinterpret_cast<const uint8_t*>(&v), 8}}};
    ASSERT_TRUE(f.txn->wr_lock(0).ok());
    ASSERT_TRUE(f.txn->append(w).ok());
    (void)f.txn->execute_and_advance();
  };
  ASSERT_NO_FATAL_FAILURE(record(1));
  ASSERT_TRUE(f.txn->wr_unlock(0).ok());
  bool crashed = false;
  uint8_t* r1_db = f.replica_region(1).data() + kTxnControlBytes + f.options.log_bytes;
  f.client->set_poll_hook([&] {
    uint64_t a = 0, b = 0;
    std::memcpy(&a, r1_db + kA, 8);
    std::memcpy(&b, r1_db + kB, 8);
    if (!crashed && a == 2 && b == 1) {
      crashed = true;
      ASSERT_TRUE(f.client->stop_group(f.data).ok());
      ASSERT_TRUE(f.client->stop_group(f.locks).ok());
    }
  });
  ASSERT_NO_FATAL_FAILURE(record(2));
  ASSERT_TRUE(crashed);
  f.txn.reset();
  ASSERT_TRUE(f.client->restart_group(f.data).ok());
  ASSERT_TRUE(f.client->restart_group(f.locks).ok());
  uint64_t reads = 0, torn = 0;
  f.client->set_poll_hook([&] {
    for (uint32_t r = 0; r < 3; ++r) {
      ReplicaLocks lk = f.reader(r);
      if (!lk.try_rd_lock(0)) continue;
      uint64_t a = 0, b = 0;
      std::memcpy(&a, f.replica_region(r).data() + kTxnControlBytes + f.options.log_bytes + kA, 8);
      std::memcpy(&b, f.replica_region(r).data() + kTxnControlBytes + f.options.log_bytes + kB, 8);
      lk.rd_unlock(0);
      ++reads;
      torn += a != b;
    }
  });
  TxnRecovery rep;
  auto t = TxnClient::recover(*f.client, f.data, f.locks, resume_options(f), /*lock_words=*/1, &rep);
  f.client->set_poll_hook({});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  f.txn = std::move(t).value();
  EXPECT_EQ(torn, 0u) << "a reader saw the dead front end's record half-applied (" << reads << " reads)";
  EXPECT_EQ(rep.locks_released, 3u);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(field(r, kA), 2u) << "replica " << r;
    EXPECT_EQ(field(r, kB), 2u) << "replica " << r;
    EXPECT_EQ(f.reader(r).word(0), 0u) << "replica " << r;
  }
}

// The client crashes holding a write lock, with a record appended and not
// executed: readers on the replicas are shut out until a client resumes in
// its place, releases the crashed client's locks and executes the record.
TEST(TxnLocks, AWriteLockHeldByACrashedClientIsReleasedByItsSuccessor) {
  TxnFixture f;
  const std::vector<uint8_t> v(16, 0x5A);
  const TxnWrite w[] = {{256, v}};
  ASSERT_TRUE(f.txn->wr_lock(2).ok());
  ASSERT_TRUE(f.txn->append(w).ok());
  f.txn.reset();  // the client crashes: no execute, no unlock
  ReplicaLocks r0 = f.reader(0);
  EXPECT_FALSE(r0.try_rd_lock(2)) << "the crashed writer's lock vanished by itself";
  ASSERT_TRUE(r0.try_rd_lock(3));  // a reader elsewhere is unaffected, and stays
  TxnOptions o;
  o.log_bytes = 8 << 10;
  o.db_bytes = 16 << 10;
  o.resume = true;
  o.lock_timeout_ns = 20'000'000;
  auto next = TxnClient::initialize(*f.client, f.data, f.locks, o);
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  auto released = next.value()->release_stale_locks(64);
  ASSERT_TRUE(released.ok()) << released.status().to_string();
  EXPECT_EQ(released.value(), 3u) << "lock 2 on each of the three replicas";
  EXPECT_EQ(r0.word(3), 1u) << "a reader's count was touched";
  ASSERT_TRUE(next.value()->execute_all().ok());
  ASSERT_TRUE(r0.try_rd_lock(2));
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(next.value()->replica_db(r).value()[256], 0x5A) << "replica " << r;
  r0.rd_unlock(2);
  r0.rd_unlock(3);
  EXPECT_TRUE(next.value()->wr_lock(2).ok());
}

// ---- the decoder on hand-made bytes ----------------------------------------

TEST(TxnFormat, TheDecoderRefusesEveryDamage) {
  std::vector<uint8_t> ring(1024, 0);
  const std::vector<uint8_t> v(40, 9);
  const TxnWrite w[] = {{10, v}, {500, v}};
  const std::vector<uint8_t> rec = encode_txn_record(1024 + 128, w);
  std::memcpy(ring.data() + 128, rec.data(), rec.size());
  auto ok = decode_txn_record(ring, 1024 + 128, 4096);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  ASSERT_EQ(ok->entries.size(), 2u);
  EXPECT_EQ(ok->entries[1].offset, 500u);
  EXPECT_EQ(ok->entries[0].data_at, 128u + kTxnRecordHeaderBytes + kTxnEntryHeaderBytes);
  EXPECT_EQ(decode_txn_record(ring, 128, 4096).status().code(), Code::kNotFound) << "an earlier lap's LSN";
  EXPECT_EQ(decode_txn_record(ring, 1024 + 128, 500).status().code(), Code::kNotFound) << "outside the database";
  // Every bit of the record flipped, one at a time.
  for (size_t bit = 0; bit < rec.size() * 8; ++bit) {
    ring[128 + bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(decode_txn_record(ring, 1024 + 128, 4096).ok()) << "bit " << bit;
    ring[128 + bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  // Torn: any prefix of the record over zeros (that loses a non-zero byte).
  size_t last_nonzero = rec.size();
  while (last_nonzero > 0 && rec[last_nonzero - 1] == 0) --last_nonzero;
  for (size_t cut = 0; cut < last_nonzero; cut += 8) {
    std::vector<uint8_t> torn(1024, 0);
    std::memcpy(torn.data() + 128, rec.data(), cut);
    EXPECT_FALSE(decode_txn_record(torn, 1024 + 128, 4096).ok()) << "cut at " << cut;
  }
}

}  // namespace txn_test
}  // namespace ferry::hyperloop
