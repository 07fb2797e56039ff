// Chain failure detection and recovery (SIGCOMM'18 §5, "Recovery"): the
// chain manager's heartbeats and versioned view, the data path rebuilt
// around a replacement member (HyperLoopClient::replace_replica) and the
// transaction log reconciled on it (TxnClient::recover), with members
// killed at random points of random operations.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/rng.h"
#include "ferry/hyperloop/chain_manager.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/membership/in_process_store.h"
#include "test_seed.h"
#include "txn_test_util.h"

namespace ferry::hyperloop {
namespace chain_recovery_test {

membership::InProcessStoreOptions store_on(const Clock* clock) {
  membership::InProcessStoreOptions o;
  o.clock = clock;
  o.expiry_poll_ms = 0;
  return o;
}

ChainManagerOptions beats(uint32_t heartbeat_ms, uint32_t missed) {
  ChainManagerOptions o;
  o.heartbeat_ms = heartbeat_ms;
  o.missed_beats = missed;
  return o;
}

// ---- the chain manager --------------------------------------------------------

TEST(ChainManager, AMemberIsFailedAfterTheConfiguredNumberOfConsecutiveMissingBeats) {
  FakeClock clock;
  membership::InProcessStore store(store_on(&clock));
  auto m = ChainManager::open(&store, &clock, {"r0", "r1", "r2"}, beats(100, 3)).value();
  EXPECT_EQ(m->view().version, 1u);
  // Everyone beats for a while: nobody fails.
  for (int t = 0; t < 10; ++t) {
    clock.advance_ns(100'000'000);
    for (const char* id : {"r0", "r1", "r2"}) ASSERT_TRUE(m->heartbeat(id, 1).ok());
    EXPECT_TRUE(m->failed_members().empty());
  }
  // r1 goes silent: two missing beats are tolerated, the third is not.
  for (int missed = 1; missed <= 3; ++missed) {
    clock.advance_ns(100'000'000);
    ASSERT_TRUE(m->heartbeat("r0", 1).ok());
    ASSERT_TRUE(m->heartbeat("r2", 1).ok());
    if (missed < 3) {
      EXPECT_TRUE(m->failed_members().empty()) << missed << " missing beats";
    } else {
      EXPECT_EQ(m->failed_members(), std::vector<std::string>{"r1"});
    }
  }
  // A beat that comes late (before the manager acted) clears the suspicion.
  ASSERT_TRUE(m->heartbeat("r1", 1).ok());
  EXPECT_TRUE(m->failed_members().empty());
}

TEST(ChainManager, TheViewIsVersionedAndARemovedMemberCannotServeOrRejoin) {
  FakeClock clock;
  membership::InProcessStore store(store_on(&clock));
  auto m = ChainManager::open(&store, &clock, {"r0", "r1", "r2"}, beats(100, 3)).value();
  auto v2 = m->replace("r1", "r3");
  ASSERT_TRUE(v2.ok()) << v2.status().to_string();
  EXPECT_EQ(v2->version, 2u);
  ASSERT_EQ(v2->members.size(), 3u);
  EXPECT_EQ(v2->members[0].id, "r0");
  EXPECT_EQ(v2->members[1].id, "r2");
  EXPECT_EQ(v2->members[2].id, "r3");
  EXPECT_EQ(v2->members[2].incarnation, 2);
  // The removed member wakes up with its old view: refused.
  Status st = m->heartbeat("r1", 1);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.to_string();
  // A survivor still on view 1 must load view 2 first.
  EXPECT_EQ(m->heartbeat("r0", 1).code(), Code::kFailedPrecondition);
  EXPECT_TRUE(m->heartbeat("r0", 2).ok());
  // r1 cannot come back under its name, and ids are not reused.
  EXPECT_EQ(m->replace("r2", "r1").status().code(), Code::kAlreadyExists);
  EXPECT_EQ(m->replace("r2", "r0").status().code(), Code::kAlreadyExists);
  EXPECT_EQ(m->replace("r9", "r4").status().code(), Code::kNotFound);
  // A manager that restarts adopts the stored view, not its arguments.
  auto again = ChainManager::open(&store, &clock, {"x", "y"}, beats(100, 3)).value();
  EXPECT_EQ(again->view(), m->view());
}

TEST(ChainManager, OfTwoManagersHoldingTheSameViewExactlyOneCommitsTheNext) {
  FakeClock clock;
  membership::InProcessStore store(store_on(&clock));
  auto a = ChainManager::open(&store, &clock, {"r0", "r1", "r2"}, beats(100, 3)).value();
  auto b = ChainManager::open(&store, &clock, {"r0", "r1", "r2"}, beats(100, 3)).value();
  ASSERT_TRUE(a->replace("r2", "r3").ok());
  auto lost = b->replace("r2", "r4");
  EXPECT_EQ(lost.status().code(), Code::kFailedPrecondition) << lost.status().to_string();
  ASSERT_TRUE(b->refresh().ok());
  EXPECT_EQ(b->view(), a->view());
  EXPECT_EQ(b->view().version, 2u);
  EXPECT_EQ(ChainManager::open(&store, &clock, {}, beats(0, 3)).status().code(), Code::kInvalidArgument);
}

// ---- recovery of a transaction chain ------------------------------------------

constexpr uint64_t kLog = 4096;
constexpr uint64_t kDb = 16 << 10;
constexpr uint32_t kLockWords = 4;

struct Chain : testing::TxnChain {
  Chain() : TxnChain(testing::txn_chain_options(64 << 10, kLog, kDb)) {
    client->set_poll_hook({});
  }
  TxnOptions txn_options() const {
    TxnOptions o;
    o.log_bytes = kLog;
    o.db_bytes = kDb;
    o.lock_timeout_ns = options.lock_timeout_ns;
    return o;
  }
  // Replica `victim` dies in both groups (its host's process; its PM image
  // stays, or loses what was not persisted when `power` is set).
  void kill(uint32_t victim, bool power, uint64_t seed) {
    ASSERT_TRUE(client->kill_replica(data, victim).ok());
    ASSERT_TRUE(client->kill_replica(locks, victim).ok());
    if (power) {
      client->replica(data, victim)->domain->power_fail(seed);
      client->replica(locks, victim)->domain->power_fail(seed + 1);
    }
  }
  // The manager's part is done by the caller; this is the data path's and
  // the log's.
  Result<TxnRecovery> recover(uint32_t victim) {
    client->set_poll_hook({});
    txn.reset();
    FERRY_ASSIGN_OR_RETURN(const ReplacementReport a, client->replace_replica(data, victim));
    FERRY_ASSIGN_OR_RETURN(const ReplacementReport b, client->replace_replica(locks, victim));
    (void)a;
    (void)b;
    TxnRecovery rep;
    FERRY_ASSIGN_OR_RETURN(txn, TxnClient::recover(*client, data, locks, txn_options(), kLockWords, &rep));
    return rep;
  }
  std::vector<uint8_t> db_of(uint32_t r) {
    auto db = txn->replica_db(r).value();
    return {db.begin(), db.end()};
  }
};

std::vector<TxnWrite> random_writes(Rng& rng, std::vector<std::vector<uint8_t>>* keep, std::vector<uint8_t>* model) {
  std::vector<TxnWrite> w;
  const uint32_t n = 1 + static_cast<uint32_t>(rng.below(3));
  keep->clear();
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t len = 1 + static_cast<uint32_t>(rng.below(300));
    const uint64_t off = rng.below(kDb - len + 1);
    std::vector<uint8_t> d(len);
    for (auto& b : d) b = static_cast<uint8_t>(rng.next());
    keep->push_back(std::move(d));
    w.push_back({off, {}});
  }
  for (uint32_t i = 0; i < n; ++i) {
    w[i].data = (*keep)[i];
    std::memcpy(model->data() + w[i].offset, (*keep)[i].data(), (*keep)[i].size());
  }
  return w;
}

// One locked transaction: lock, Append (making room), ExecuteAndAdvance,
// unlock. `appended` says whether Append returned (then the record is
// acknowledged: it must survive whatever happens next).
Status locked_record(TxnClient& txn, uint32_t lock, std::span<const TxnWrite> w, bool* appended) {
  *appended = false;
  FERRY_RETURN_IF_ERROR(txn.wr_lock(lock));
  auto lsn = txn.append(w);
  if (!lsn.ok() && lsn.status().code() == Code::kResourceExhausted) {
    FERRY_RETURN_IF_ERROR(txn.execute_all());
    lsn = txn.append(w);
  }
  FERRY_RETURN_IF_ERROR(lsn.status());
  *appended = true;
  FERRY_RETURN_IF_ERROR(txn.execute_all());
  return txn.wr_unlock(lock);
}

TEST(ChainRecovery, AKilledMemberIsReplacedAndTheChainServesOnWithNothingLost) {
  for (uint32_t victim = 0; victim < 3; ++victim) {
    SCOPED_TRACE("victim " + std::to_string(victim));
    Chain f;
    Rng rng(victim + 1);
    std::vector<uint8_t> model(kDb, 0);
    std::vector<std::vector<uint8_t>> keep;
    bool appended = false;
    for (int i = 0; i < 20; ++i) {
      auto w = random_writes(rng, &keep, &model);
      ASSERT_TRUE(locked_record(*f.txn, i % kLockWords, w, &appended).ok());
    }
    f.kill(victim, false, 0);
    // The chain stalls: the next operation cannot complete.
    std::vector<uint8_t> attempted = model;
    auto w = random_writes(rng, &keep, &attempted);
    Status st = locked_record(*f.txn, 1, w, &appended);
    EXPECT_FALSE(st.ok());
    auto rep = f.recover(victim);
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    // Every member -- survivors and the new tail -- holds every acknowledged
    // record, and no lock stays taken.
    for (uint32_t r = 0; r < 3; ++r) {
      const auto db = f.db_of(r);
      EXPECT_TRUE(db == model || db == attempted) << "replica " << r;
      EXPECT_EQ(db, f.db_of(0)) << "replica " << r << " differs from the head";
      for (uint32_t l = 0; l < kLockWords; ++l) EXPECT_EQ(f.reader(r).word(l), 0u) << "lock " << l;
    }
    if (f.db_of(0) == attempted) model = attempted;
    // The rebuilt chain takes writes on every member, the new one included.
    for (int i = 0; i < 20; ++i) {
      auto w2 = random_writes(rng, &keep, &model);
      ASSERT_TRUE(locked_record(*f.txn, i % kLockWords, w2, &appended).ok());
    }
    for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(f.db_of(r), model) << "replica " << r;
    EXPECT_EQ(0, std::memcmp(f.txn->db().data(), model.data(), kDb)) << "the front end's mirror";
  }
}

// A member dies at a random point of a random operation (a poll between
// engine steps): mid-Append (the record on some members only), mid-Execute,
// mid-lock. Process-crash and power-failure modes. Every acknowledged record
// is on every member after recovery, the one in flight is all or nothing,
// and the chain serves on. FERRY_CHAIN_SEEDS sizes the campaign
// (default 40; the full campaign is 2000), FERRY_SEED picks the first seed.
TEST(ChainRecovery, MembersKilledAtRandomPointsLoseNoAcknowledgedRecord) {
  const ferry::testing::SeedRange seeds = ferry::testing::seed_range("FERRY_CHAIN_SEEDS", 5000, 40);
  uint64_t in_flight_applied = 0, in_flight_dropped = 0, mid_op = 0;
  for (uint64_t k = 0; k < seeds.count; ++k) {
    const uint64_t seed = seeds.first + k;
    SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: FERRY_SEED=" + std::to_string(seed) +
                 " FERRY_CHAIN_SEEDS=1)");
    Chain f;
    Rng rng(seed);
    const auto victim = static_cast<uint32_t>(rng.below(3));
    const bool power = rng.below(2) == 0;
    const uint64_t kill_at = 1 + rng.below(4000);
    uint64_t polls = 0;
    bool killed = false;
    f.client->set_poll_hook([&] {
      if (!killed && ++polls == kill_at) {
        killed = true;
        f.kill(victim, power, seed);
      }
    });
    std::vector<uint8_t> model(kDb, 0);
    std::vector<uint8_t> attempted;
    std::vector<std::vector<uint8_t>> keep;
    bool failed = false, appended = false;
    for (int i = 0; i < 80 && !failed; ++i) {
      attempted = model;
      auto w = random_writes(rng, &keep, &attempted);
      Status st = locked_record(*f.txn, static_cast<uint32_t>(rng.below(kLockWords)), w, &appended);
      if (st.ok()) {
        model = attempted;
      } else {
        failed = true;
        if (appended) model = attempted;  // acknowledged: it must be there
      }
    }
    if (!killed) {
      killed = true;
      f.kill(victim, power, seed);
    } else {
      ++mid_op;
    }
    auto rep = f.recover(victim);
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    const auto head = f.db_of(0);
    ASSERT_TRUE(head == model || (failed && head == attempted))
        << "victim " << victim << (power ? " (power failure)" : " (process crash)") << ": an acknowledged record "
        << "is missing or a record applied partly";
    if (failed && !appended) (head == attempted && head != model ? in_flight_applied : in_flight_dropped) += 1;
    for (uint32_t r = 1; r < 3; ++r) ASSERT_EQ(f.db_of(r), head) << "replica " << r;
    model = head;
    for (uint32_t r = 0; r < 3; ++r) {
      for (uint32_t l = 0; l < kLockWords; ++l) ASSERT_EQ(f.reader(r).word(l), 0u) << "replica " << r << " lock " << l;
    }
    for (int i = 0; i < 5; ++i) {
      auto w = random_writes(rng, &keep, &model);
      ASSERT_TRUE(locked_record(*f.txn, static_cast<uint32_t>(rng.below(kLockWords)), w, &appended).ok());
    }
    for (uint32_t r = 0; r < 3; ++r) ASSERT_EQ(f.db_of(r), model) << "replica " << r << " after recovery";
  }
  std::printf("chain recovery campaign: %llu seeds from %llu, %llu killed mid-operation; in-flight records "
              "applied %llu, dropped %llu\n",
              static_cast<unsigned long long>(seeds.count), static_cast<unsigned long long>(seeds.first),
              static_cast<unsigned long long>(mid_op), static_cast<unsigned long long>(in_flight_applied),
              static_cast<unsigned long long>(in_flight_dropped));
}

}  // namespace chain_recovery_test
}  // namespace ferry::hyperloop
