// The transactional store's campaign (issue 26): several clients' worth of
// puts, removes, read-modify-writes and multi-key transactions on a few hot
// keys, through the front end (TxnKv over a TxnClient on a 3-replica
// HyperLoop group, a deterministic manual engine), with reads from every
// replica (under their read locks) and from the front end; and random
// faults chosen by the seed, each at a random engine step of a random
// operation:
//   - the front end crashes (its data paths go down where they stand:
//     HyperLoopClient::stop_group) and a new one resumes (restart_group,
//     TxnClient::initialize with resume, TxnKv::open);
//   - some replicas lose power: each replays its log at restart
//     (replay_txn_log) and holds its locks until the front end has
//     reconciled (ReplicaLocks::hold_until_recovered); the chain is rebuilt
//     over the same members and the front end resumes;
//   - a replica dies -- the head more often than the others -- and is
//     replaced (replace_replica on both groups, TxnClient::recover).
// After every recovery: every replica's database is identical (and the front
// end's mirror too), no lock stays taken, every acknowledged write is there,
// and the operation that was in flight is applied whole or not at all. At
// the end of each seed the whole history (writes acknowledged or pending,
// reads from every replica and the front end) must be linearizable
// (tests/support/linearizability.h).
//
// FERRY_TXN_KV_SEEDS sizes it (default 40; 10 in the ASan run; the full
// campaign is 2000), FERRY_SEED picks the first seed; every failure names
// its seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ferry/common/rng.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/hyperloop/txn_kv.h"
#include "linearizability.h"
#include "test_seed.h"
#include "txn_test_util.h"

namespace ferry::hyperloop {
namespace txn_kv_campaign_test {

using ferry::testing::KvOp;

constexpr uint32_t kKeys = 6;          // hot keys, on 4 lock stripes
constexpr uint32_t kClients = 4;       // the front end serves them (history client ids 0..3)
constexpr uint32_t kReplicaReader = 10;  // + r: replica r's reads
constexpr uint32_t kFrontEndReader = 20;

TxnKvOptions kv_options() {
  TxnKvOptions o;
  o.slots = 32;
  o.key_max = 8;
  o.value_max = 8;
  o.locks = 4;
  return o;
}

std::string key_name(uint64_t k) { return "k" + std::to_string(k); }

std::vector<uint8_t> value_bytes(uint64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

std::optional<uint64_t> value_of(const Result<std::vector<uint8_t>>& r) {
  if (!r.ok()) return std::nullopt;
  uint64_t v = 0;
  std::memcpy(&v, r.value().data(), std::min<size_t>(8, r.value().size()));
  return v;
}

enum class Fault : uint8_t { kNone, kFrontEndCrash, kPowerFailure, kReplicaLoss };

struct Totals {
  uint64_t seeds = 0, writes = 0, acknowledged = 0, pending = 0, reads = 0, reads_refused = 0;
  uint64_t history_ops = 0, crashes = 0, power_failures = 0, replicas_powered_off = 0, losses = 0,
           head_losses = 0, pending_applied = 0, violations = 0;
};

class Campaign {
 public:
  Campaign(uint64_t seed, Totals* totals)
      : seed_(seed),
        rng_(seed),
        totals_(totals),
        ko_(kv_options()),
        chain_(testing::txn_chain_options(64 << 10, 4096, txn_kv_db_bytes(ko_))) {}

  void run(uint32_t ops) {
    ASSERT_NE(chain_.txn, nullptr);
    auto kv = TxnKv::create(*chain_.txn, ko_);
    ASSERT_TRUE(kv.ok()) << kv.status().to_string();
    kv_ = std::move(kv).value();
    for (uint64_t k = 0; k < kKeys; ++k) acked_[k] = std::nullopt;
    chain_.client->set_poll_hook([this] { poll_hook(); });
    for (uint32_t i = 0; i < ops; ++i) {
      if (fault_ == Fault::kNone && rng_.below(5) == 0) arm_fault();
      ASSERT_NO_FATAL_FAILURE(one_operation());
      if (fired_) {
        ASSERT_NO_FATAL_FAILURE(recover());
      }
      if (rng_.below(2) == 0) {
        ASSERT_NO_FATAL_FAILURE(read_everywhere(rng_.below(kKeys)));
      }
    }
    fault_ = Fault::kNone;
    chain_.client->set_poll_hook({});
    // Everything acknowledged is on every replica, readable from each.
    ASSERT_NO_FATAL_FAILURE(check_replicas_identical("at the end"));
    for (uint64_t k = 0; k < kKeys; ++k) ASSERT_NO_FATAL_FAILURE(read_everywhere(k));
    for (uint64_t k = 0; k < kKeys; ++k) {
      EXPECT_EQ(value_of(kv_->get(key_name(k))), acked_[k]) << "key " << k << " at the end";
    }
    const auto verdict = ferry::testing::check_kv_history(history_);
    totals_->history_ops += history_.size();
    if (!verdict.ok) ++totals_->violations;
    EXPECT_TRUE(verdict.ok) << ferry::testing::verdict_name(verdict.verdict) << ": " << verdict.explanation;
    kv_.reset();
  }

 private:
  uint64_t tick() { return ++now_; }

  void arm_fault() {
    const uint64_t pick = rng_.below(10);
    fault_ = pick < 4 ? Fault::kFrontEndCrash : pick < 7 ? Fault::kPowerFailure : Fault::kReplicaLoss;
    // Somewhere in this operation or a later one: a put is some hundreds of
    // polls (locks, Append, the copies, the head advance, unlocks).
    fire_at_ = polls_ + 1 + rng_.below(1500);
    powered_off_ = 0;
    if (fault_ == Fault::kPowerFailure) {
      while (powered_off_ == 0) powered_off_ = static_cast<uint8_t>(rng_.below(8));
    }
    victim_ = rng_.below(2) == 0 ? 0 : static_cast<uint32_t>(rng_.below(3));
  }

  // Runs between engine steps while a synchronous call waits.
  void poll_hook() {
    if (fault_ == Fault::kNone || fired_ || ++polls_ != fire_at_) return;
    fired_ = true;
    auto& c = *chain_.client;
    switch (fault_) {
      case Fault::kFrontEndCrash:
        (void)c.stop_group(chain_.data);
        (void)c.stop_group(chain_.locks);
        break;
      case Fault::kPowerFailure:
        for (uint32_t r = 0; r < 3; ++r) {
          if ((powered_off_ >> r & 1) == 0) continue;
          c.replica(chain_.data, r)->domain->power_fail(seed_ * 31 + polls_ + r);
          c.replica(chain_.locks, r)->domain->power_fail(seed_ * 37 + polls_ + r);
        }
        (void)c.stop_group(chain_.data);
        (void)c.stop_group(chain_.locks);
        break;
      case Fault::kReplicaLoss:
        (void)c.kill_replica(chain_.data, victim_);
        (void)c.kill_replica(chain_.locks, victim_);
        break;
      case Fault::kNone:
        break;
    }
  }

  // One operation of a random client; its effects (key -> value or absent)
  // go to the model if it is acknowledged, else they are in flight.
  void one_operation() {
    const auto client = static_cast<uint32_t>(rng_.below(kClients));
    const uint64_t k = rng_.below(kKeys);
    std::vector<std::pair<uint64_t, std::optional<uint64_t>>> effects;
    const uint64_t t0 = tick();
    Status st;
    std::vector<KvOp> ops;
    switch (rng_.below(5)) {
      case 0:
      case 1: {
        const uint64_t v = next_value_++;
        st = kv_->put(key_name(k), value_bytes(v));
        effects.emplace_back(k, v);
        ops.push_back(KvOp::put(client, k, v, t0, std::nullopt));
        break;
      }
      case 2: {
        st = kv_->remove(key_name(k));
        if (st.code() == Code::kNotFound) {
          ops.push_back(KvOp::get(client, k, std::nullopt, t0, std::nullopt));  // observed absent
        } else {
          effects.emplace_back(k, std::nullopt);
          ops.push_back(KvOp::remove(client, k, t0, std::nullopt));
        }
        break;
      }
      case 3: {  // read-modify-write: read under the lock, write a new version
        std::optional<uint64_t> seen;
        const uint64_t v = next_value_++;
        bool called = false;
        st = kv_->read_modify_write(key_name(k), [&](std::optional<std::span<const uint8_t>> cur) {
          called = true;
          if (cur) {
            uint64_t x = 0;
            std::memcpy(&x, cur->data(), std::min<size_t>(8, cur->size()));
            seen = x;
          }
          return std::optional<std::vector<uint8_t>>(value_bytes(v));
        });
        if (called) ops.push_back(KvOp::get(client, k, seen, t0, std::nullopt));
        effects.emplace_back(k, v);
        ops.push_back(KvOp::put(client, k, v, t0, std::nullopt));
        break;
      }
      default: {  // a transaction over 2-3 keys: puts, and a remove of one the front end has
        std::vector<uint64_t> keys = {k};
        while (keys.size() < 2 + rng_.below(2)) {
          const uint64_t c = rng_.below(kKeys);
          if (std::find(keys.begin(), keys.end(), c) == keys.end()) keys.push_back(c);
        }
        std::vector<std::string> names;
        std::vector<std::vector<uint8_t>> values;
        std::vector<TxnKvOp> txn;
        for (uint64_t key : keys) names.push_back(key_name(key));
        for (size_t i = 0; i < keys.size(); ++i) {
          const bool remove = i == 0 && rng_.below(3) == 0 && kv_->get(names[i]).ok();
          if (remove) {
            values.emplace_back();
            effects.emplace_back(keys[i], std::nullopt);
            ops.push_back(KvOp::remove(client, keys[i], t0, std::nullopt));
          } else {
            const uint64_t v = next_value_++;
            values.push_back(value_bytes(v));
            effects.emplace_back(keys[i], v);
            ops.push_back(KvOp::put(client, keys[i], v, t0, std::nullopt));
          }
        }
        for (size_t i = 0; i < keys.size(); ++i) {
          txn.push_back(values[i].empty() ? TxnKvOp{TxnKvOp::kRemove, names[i], {}}
                                          : TxnKvOp{TxnKvOp::kPut, names[i], values[i]});
        }
        st = kv_->transaction(txn);
      }
    }
    const uint64_t t1 = tick();
    const bool done = st.ok() || st.code() == Code::kNotFound;
    ++totals_->writes;
    if (done) {
      ++totals_->acknowledged;
      for (const auto& [key, v] : effects) acked_[key] = v;
      for (KvOp& op : ops) op.complete_ns = t1;
    } else {
      ASSERT_TRUE(fired_) << "an operation failed with no fault: " << st.to_string();
      ++totals_->pending;
      in_flight_ = effects;
    }
    history_.insert(history_.end(), ops.begin(), ops.end());
  }

  // Reads `k` on every replica that lets a reader in (every stripe read-
  // locked without waiting: a reader never waits on a single-threaded
  // engine) and from the front end.
  void read_everywhere(uint64_t k) {
    for (uint32_t r = 0; r < 3; ++r) {
      auto view = chain_.client->replica(chain_.locks, r);
      ASSERT_TRUE(view.ok());
      ReplicaLocks locks(view->region->data(), testing::TxnChain::kLockRegionBytes);
      uint32_t held = 0;
      while (held < ko_.locks && locks.try_rd_lock(held)) ++held;
      if (held == ko_.locks) {
        const uint64_t t0 = tick();
        TxnKvReplicaReader reader(replica_db(r), locks, ko_);
        auto got = reader.get(key_name(k));
        ASSERT_TRUE(got.ok() || got.status().code() == Code::kNotFound)
            << "replica " << r << ": " << got.status().to_string();
        history_.push_back(KvOp::get(kReplicaReader + r, k, value_of(got), t0, tick()));
        ++totals_->reads;
      } else {
        ++totals_->reads_refused;
      }
      for (uint32_t l = 0; l < held; ++l) locks.rd_unlock(l);
    }
    if (kv_ != nullptr) {
      const uint64_t t0 = tick();
      history_.push_back(KvOp::get(kFrontEndReader, k, value_of(kv_->get(key_name(k))), t0, tick()));
      ++totals_->reads;
    }
  }

  void recover() {
    const Fault fault = fault_;
    fault_ = Fault::kNone;  // no second fault during the recovery
    fired_ = false;
    kv_.reset();
    chain_.txn.reset();
    auto& c = *chain_.client;
    const char* names[] = {"none", "front-end crash", "power failure", "replica loss"};
    SCOPED_TRACE(std::string("recovering from a ") + names[static_cast<int>(fault)] + " (replicas powered off: " +
                 std::to_string(powered_off_) + ", victim " + std::to_string(victim_) + ")");
    // Before the front end is back, replicas that let readers in answer (a
    // powered-off one only once it restarted, below).
    if (fault != Fault::kPowerFailure) {
      for (uint64_t k = 0; k < kKeys; ++k) ASSERT_NO_FATAL_FAILURE(read_everywhere(k));
    }
    const uint32_t lock_words = txn_kv_lock_words(ko_);
    TxnOptions to;
    to.log_bytes = chain_.options.log_bytes;
    to.db_bytes = chain_.options.db_bytes;
    to.lock_timeout_ns = chain_.options.lock_timeout_ns;
    to.resume = true;
    if (fault == Fault::kReplicaLoss) {
      ++totals_->losses;
      totals_->head_losses += victim_ == 0;
      ASSERT_TRUE(c.replace_replica(chain_.data, victim_).ok());
      ASSERT_TRUE(c.replace_replica(chain_.locks, victim_).ok());
      auto t = TxnClient::recover(c, chain_.data, chain_.locks, to, lock_words);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      chain_.txn = std::move(t).value();
    } else {
      if (fault == Fault::kPowerFailure) {
        ++totals_->power_failures;
        // Each powered-off replica restarts: it replays its own log and
        // holds its locks until the front end has reconciled the chain.
        for (uint32_t r = 0; r < 3; ++r) {
          if ((powered_off_ >> r & 1) == 0) continue;
          ++totals_->replicas_powered_off;
          ReplicaView data = c.replica(chain_.data, r).value();
          ASSERT_TRUE(replay_txn_log({data.region->data(), data.region->size()}).ok());
          data.region->persist(data.region->data(), data.region->size());
          ReplicaView locks = c.replica(chain_.locks, r).value();
          ReplicaLocks(locks.region->data(), testing::TxnChain::kLockRegionBytes).hold_until_recovered(lock_words);
        }
        for (uint64_t k = 0; k < kKeys; ++k) ASSERT_NO_FATAL_FAILURE(read_everywhere(k));
      } else {
        ++totals_->crashes;
      }
      ASSERT_TRUE(c.restart_group(chain_.data).ok());
      ASSERT_TRUE(c.restart_group(chain_.locks).ok());
      auto t = TxnClient::initialize(c, chain_.data, chain_.locks, to);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      chain_.txn = std::move(t).value();
    }
    auto kv = TxnKv::open(*chain_.txn, ko_);
    ASSERT_TRUE(kv.ok()) << kv.status().to_string();
    kv_ = std::move(kv).value();
    ASSERT_NO_FATAL_FAILURE(check_replicas_identical("after the recovery"));
    for (uint32_t r = 0; r < 3; ++r) {
      ReplicaLocks locks(c.replica(chain_.locks, r)->region->data(), testing::TxnChain::kLockRegionBytes);
      for (uint32_t l = 0; l < lock_words; ++l) {
        ASSERT_EQ(locks.word(l), 0u) << "replica " << r << " lock " << l << " stayed taken";
      }
    }
    // Every acknowledged write is there; the one in flight whole or not at all.
    bool applied = !in_flight_.empty(), absent = true;
    for (const auto& [k, v] : in_flight_) {
      const std::optional<uint64_t> now = value_of(kv_->get(key_name(k)));
      applied = applied && now == v;
      absent = absent && now == acked_[k];
    }
    ASSERT_TRUE(applied || absent) << "the write in flight was applied partly, or an acknowledged write was lost";
    if (applied && !absent) {
      ++totals_->pending_applied;
      for (const auto& [k, v] : in_flight_) acked_[k] = v;
    }
    in_flight_.clear();
    for (uint64_t k = 0; k < kKeys; ++k) {
      ASSERT_EQ(value_of(kv_->get(key_name(k))), acked_[k]) << "key " << k << " after the recovery";
      ASSERT_NO_FATAL_FAILURE(read_everywhere(k));
    }
  }

  // Replica r's database, as its own CPU sees it (no front end needed).
  std::span<const uint8_t> replica_db(uint32_t r) {
    ReplicaView v = chain_.client->replica(chain_.data, r).value();
    return {v.region->data() + kTxnControlBytes + chain_.options.log_bytes, chain_.options.db_bytes};
  }

  void check_replicas_identical(const char* when) {
    const auto mirror = chain_.txn->db();
    for (uint32_t r = 0; r < 3; ++r) {
      const auto db = replica_db(r);
      ASSERT_EQ(std::memcmp(db.data(), mirror.data(), mirror.size()), 0)
          << "replica " << r << "'s database differs from the front end's " << when;
    }
  }

  const uint64_t seed_;
  Rng rng_;
  Totals* totals_;
  TxnKvOptions ko_;
  testing::TxnChain chain_;
  std::unique_ptr<TxnKv> kv_;
  std::map<uint64_t, std::optional<uint64_t>> acked_;  // per key: the acknowledged state
  std::vector<std::pair<uint64_t, std::optional<uint64_t>>> in_flight_;
  std::vector<KvOp> history_;
  uint64_t now_ = 0;
  uint64_t next_value_ = 1;
  Fault fault_ = Fault::kNone;
  bool fired_ = false;
  uint64_t polls_ = 0, fire_at_ = 0;
  uint8_t powered_off_ = 0;
  uint32_t victim_ = 0;
};

TEST(TxnKvCampaign, CrashesPowerFailuresAndReplicaLossLoseNoAcknowledgedWriteAndHistoriesAreLinearizable) {
  const ferry::testing::SeedRange range = ferry::testing::seed_range("FERRY_TXN_KV_SEEDS", 7000, 40);
  const uint64_t base = range.first;
  const uint64_t seeds = range.count;
  Totals totals;
  uint64_t failed_seeds = 0;
  for (uint64_t k = 0; k < seeds; ++k) {
    const uint64_t seed = base + k;
    SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: FERRY_SEED=" + std::to_string(seed) +
                 " FERRY_TXN_KV_SEEDS=1)");
    const int parts_before = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
    Campaign campaign(seed, &totals);
    campaign.run(60);
    ++totals.seeds;
    if (::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count() != parts_before) {
      ++failed_seeds;
      if (failed_seeds == 3) break;  // enough to go on
    }
  }
  std::printf("txn kv campaign: %llu seeds, %llu writes (%llu acknowledged, %llu in flight at a fault, %llu of "
              "those applied), %llu reads from replicas and the front end (%llu refused while locks were held), "
              "%llu history operations checked; faults: %llu front-end crashes, %llu power failures (%llu replicas), "
              "%llu replicas lost (%llu heads); seeds failed: %llu, histories not linearizable: %llu\n",
              static_cast<unsigned long long>(totals.seeds), static_cast<unsigned long long>(totals.writes),
              static_cast<unsigned long long>(totals.acknowledged), static_cast<unsigned long long>(totals.pending),
              static_cast<unsigned long long>(totals.pending_applied), static_cast<unsigned long long>(totals.reads),
              static_cast<unsigned long long>(totals.reads_refused),
              static_cast<unsigned long long>(totals.history_ops),
              static_cast<unsigned long long>(totals.crashes), static_cast<unsigned long long>(totals.power_failures),
              static_cast<unsigned long long>(totals.replicas_powered_off),
              static_cast<unsigned long long>(totals.losses),
              static_cast<unsigned long long>(totals.head_losses), static_cast<unsigned long long>(failed_seeds),
              static_cast<unsigned long long>(totals.violations));
}

}  // namespace txn_kv_campaign_test
}  // namespace ferry::hyperloop
