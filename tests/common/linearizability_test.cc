// The linearizability checker (tests/support/linearizability.h): hand-built
// histories that are and are not linearizable, an exhaustive-search oracle on
// thousands of tiny random histories, and histories from a simulated register
// (linearizable by construction) before and after corrupting one read.
//
// Randomized tests print their seeds; rerun one with FERRY_SEED=<n>.
#include "linearizability.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ferry/common/rng.h"
#include "test_seed.h"

namespace ferry::testing {
namespace {

constexpr std::optional<uint64_t> kAbsent = std::nullopt;
constexpr std::optional<uint64_t> kPending = std::nullopt;

std::string dump(const std::vector<KvOp>& history) {
  std::string out;
  for (size_t i = 0; i < history.size(); ++i) {
    out += "  #" + std::to_string(i) + " " + describe(history[i]) + "\n";
  }
  return out;
}

void expect_linearizable(const std::vector<KvOp>& history) {
  const LinearizabilityResult r = check_kv_history(history);
  EXPECT_TRUE(r.ok) << verdict_name(r.verdict) << "\n" << r.explanation << "history:\n" << dump(history);
  EXPECT_EQ(r.verdict, Verdict::kLinearizable);
  EXPECT_TRUE(r.explanation.empty());
  EXPECT_EQ(r.ops_checked, history.size());
}

// Checks a violation on `key`, stuck on history[stuck], and returns the result.
LinearizabilityResult expect_violation(const std::vector<KvOp>& history, uint64_t key,
                                       size_t stuck) {
  const LinearizabilityResult r = check_kv_history(history);
  EXPECT_FALSE(r.ok) << "history:\n" << dump(history);
  EXPECT_EQ(r.verdict, Verdict::kViolation) << r.explanation;
  EXPECT_EQ(r.bad_key, key) << r.explanation;
  EXPECT_EQ(r.stuck_op, stuck) << r.explanation;
  EXPECT_NE(r.explanation.find("key " + std::to_string(key)), std::string::npos) << r.explanation;
  EXPECT_NE(r.explanation.find(describe(history[stuck])), std::string::npos) << r.explanation;
  EXPECT_FALSE(r.minimal_ops.empty());
  return r;
}

// ---- hand-built linearizable histories ----

TEST(Linearizability, EmptyHistoryIsLinearizable) {
  const LinearizabilityResult r = check_kv_history({});
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.keys_checked, 0u);
}

TEST(Linearizability, SequentialHistoryIsLinearizable) {
  expect_linearizable({
      KvOp::get(1, 7, kAbsent, 0, 5),
      KvOp::put(1, 7, 1, 10, 20),
      KvOp::get(2, 7, 1, 30, 40),
      KvOp::put(2, 7, 2, 50, 60),
      KvOp::get(1, 7, 2, 70, 80),
      KvOp::remove(3, 7, 90, 100),
      KvOp::get(1, 7, kAbsent, 110, 120),
      KvOp::put(3, 7, 1, 130, 140),  // a value may be written again
      KvOp::get(2, 7, 1, 150, 160),
  });
}

TEST(Linearizability, ConcurrentPutsMayTakeEffectInEitherOrder) {
  // put(1) and put(2) overlap; a later read may see either as the last.
  for (uint64_t seen : {1, 2}) {
    SCOPED_TRACE("final read sees " + std::to_string(seen));
    expect_linearizable({
        KvOp::put(1, 7, 1, 0, 100),
        KvOp::put(2, 7, 2, 10, 90),
        KvOp::get(3, 7, seen, 120, 130),
        KvOp::get(4, 7, seen, 140, 150),
    });
  }
  // Reads during the overlap see 1 then 2, or 2 then 1.
  expect_linearizable({
      KvOp::put(1, 7, 1, 0, 100),
      KvOp::put(2, 7, 2, 10, 90),
      KvOp::get(3, 7, 1, 20, 30),
      KvOp::get(3, 7, 2, 40, 50),
      KvOp::get(3, 7, 2, 120, 130),
  });
  expect_linearizable({
      KvOp::put(1, 7, 1, 0, 100),
      KvOp::put(2, 7, 2, 10, 90),
      KvOp::get(3, 7, 2, 20, 30),
      KvOp::get(3, 7, 1, 40, 50),
      KvOp::get(3, 7, 1, 120, 130),
  });
}

TEST(Linearizability, GetOverlappingPutSeesOldOrNewValue) {
  for (uint64_t seen : {1, 2}) {
    SCOPED_TRACE("overlapping read sees " + std::to_string(seen));
    expect_linearizable({
        KvOp::put(1, 7, 1, 0, 10),
        KvOp::put(1, 7, 2, 20, 60),
        KvOp::get(2, 7, seen, 30, 50),
    });
  }
  // The very first put: the read sees absent or the new value.
  expect_linearizable({KvOp::put(1, 7, 1, 20, 60), KvOp::get(2, 7, kAbsent, 30, 50)});
  expect_linearizable({KvOp::put(1, 7, 1, 20, 60), KvOp::get(2, 7, 1, 30, 50)});
}

TEST(Linearizability, PendingPutSeenByLaterGet) {
  expect_linearizable({
      KvOp::put(1, 7, 5, 0, kPending),  // client 1 crashed
      KvOp::get(2, 7, kAbsent, 50, 60),
      KvOp::get(2, 7, 5, 100, 110),  // took effect late
      KvOp::get(3, 7, 5, 120, 130),
  });
}

TEST(Linearizability, PendingPutNeverSeen) {
  expect_linearizable({
      KvOp::put(1, 7, 1, 0, 10),
      KvOp::put(2, 7, 5, 20, kPending),
      KvOp::get(3, 7, 1, 100, 110),
      KvOp::get(3, 7, 1, 200, 210),
  });
}

TEST(Linearizability, PendingPutOverwrittenBeforeAnyRead) {
  // The pending put took effect, but before put(2), so nobody saw it.
  expect_linearizable({
      KvOp::put(1, 7, 5, 0, kPending),
      KvOp::put(2, 7, 2, 10, 20),
      KvOp::get(3, 7, 2, 30, 40),
  });
}

TEST(Linearizability, RemoveThenGetAbsent) {
  expect_linearizable({
      KvOp::put(1, 7, 1, 0, 10),
      KvOp::remove(2, 7, 20, 30),
      KvOp::get(3, 7, kAbsent, 40, 50),
  });
  // A pending remove may take effect between two reads.
  expect_linearizable({
      KvOp::put(1, 7, 1, 0, 10),
      KvOp::remove(2, 7, 20, kPending),
      KvOp::get(3, 7, 1, 40, 50),
      KvOp::get(3, 7, kAbsent, 60, 70),
  });
}

TEST(Linearizability, PendingGetConstrainsNothing) {
  expect_linearizable({
      KvOp::put(1, 7, 1, 0, 10),
      KvOp::get(2, 7, 99, 20, kPending),  // its result was never delivered
      KvOp::get(3, 7, 1, 40, 50),
  });
}

TEST(Linearizability, EqualTimestampsDoNotForceAnOrder) {
  // put returns at 10 and the get is invoked at 10: concurrent, so the get
  // may be ordered first and see absent.
  expect_linearizable({KvOp::put(1, 7, 1, 0, 10), KvOp::get(2, 7, kAbsent, 10, 20)});
  // One nanosecond later the put precedes the get.
  expect_violation({KvOp::put(1, 7, 1, 0, 10), KvOp::get(2, 7, kAbsent, 11, 20)}, 7, 1);
  // Zero-length ops at the same instant, in either order.
  expect_linearizable({KvOp::put(1, 7, 1, 5, 5), KvOp::get(2, 7, kAbsent, 5, 5)});
  expect_linearizable({KvOp::put(1, 7, 1, 5, 5), KvOp::get(2, 7, 1, 5, 5)});
}

// ---- hand-built violations ----

TEST(Linearizability, StaleReadIsAViolation) {
  const auto r = expect_violation(
      {
          KvOp::put(1, 7, 1, 0, 10),
          KvOp::put(1, 7, 2, 20, 30),
          KvOp::get(2, 7, 1, 40, 50),  // put(2) completed before this began
      },
      7, 2);
  EXPECT_EQ(r.minimal_ops, (std::vector<size_t>{0, 1, 2}));
}

TEST(Linearizability, ReadOfValueNeverWrittenIsAViolation) {
  const auto r = expect_violation(
      {
          KvOp::put(1, 7, 1, 0, 10),
          KvOp::get(2, 7, 3, 5, 50),
      },
      7, 1);
  EXPECT_EQ(r.minimal_ops, (std::vector<size_t>{1}));
}

TEST(Linearizability, NewThenOldReadsAreAViolation) {
  // Both reads follow put(1); the second begins after the first saw 2.
  const auto r = expect_violation(
      {
          KvOp::put(1, 7, 1, 0, 10),
          KvOp::put(1, 7, 2, 20, 100),
          KvOp::get(2, 7, 2, 30, 40),
          KvOp::get(2, 7, 1, 50, 60),
      },
      7, 3);
  EXPECT_EQ(r.minimal_ops, (std::vector<size_t>{0, 1, 2, 3}));
  // The same after put(2) completed: the old value is gone for good.
  expect_violation(
      {
          KvOp::put(1, 7, 1, 0, 10),
          KvOp::put(1, 7, 2, 20, 30),
          KvOp::get(2, 7, 2, 40, 50),
          KvOp::get(2, 7, 1, 60, 70),
      },
      7, 3);
}

TEST(Linearizability, ReadsFlippingBackDuringConcurrentPutsAreAViolation) {
  expect_violation(
      {
          KvOp::put(1, 7, 1, 0, 100),
          KvOp::put(2, 7, 2, 10, 90),
          KvOp::get(3, 7, 1, 20, 30),
          KvOp::get(3, 7, 2, 40, 50),
          KvOp::get(3, 7, 1, 60, 70),
      },
      7, 4);
}

TEST(Linearizability, ReadOfValueWrittenOnlyLaterIsAViolation) {
  const auto r = expect_violation(
      {
          KvOp::get(2, 7, 5, 0, 10),
          KvOp::put(1, 7, 5, 20, 30),
      },
      7, 0);
  EXPECT_EQ(r.minimal_ops, (std::vector<size_t>{0, 1}));
  // Also when the later put is pending: it may only take effect after its call.
  expect_violation({KvOp::get(2, 7, 5, 0, 10), KvOp::put(1, 7, 5, 20, kPending)}, 7, 0);
}

TEST(Linearizability, GetSeeingRemovedValueIsAViolation) {
  const auto r = expect_violation(
      {
          KvOp::put(1, 7, 1, 0, 10),
          KvOp::remove(2, 7, 20, 30),
          KvOp::get(3, 7, 1, 40, 50),
      },
      7, 2);
  EXPECT_EQ(r.minimal_ops, (std::vector<size_t>{0, 1, 2}));
}

TEST(Linearizability, PendingPutSeenThenGoneIsAViolation) {
  // Once a read saw the pending put, nothing removed its value again.
  expect_violation(
      {
          KvOp::put(1, 7, 5, 0, kPending),
          KvOp::get(2, 7, 5, 100, 110),
          KvOp::get(2, 7, kAbsent, 120, 130),
      },
      7, 2);
}

TEST(Linearizability, ManyPendingWritesKeepTheSearchSmall) {
  // 64 removes whose outcome is unknown, then rounds of put(i), get -> i,
  // get -> absent: each absent read needs one of the pending removes to have
  // taken effect after put(i). Any 64 rounds are fine; the 65th is not.
  for (const int rounds : {64, 65}) {
    SCOPED_TRACE(std::to_string(rounds) + " rounds");
    std::vector<KvOp> history;
    for (uint64_t i = 0; i < 64; ++i) history.push_back(KvOp::remove(1, 7, i, kPending));
    uint64_t t = 1'000;
    for (int i = 1; i <= rounds; ++i, t += 100) {
      history.push_back(KvOp::put(2, 7, static_cast<uint64_t>(i), t, t + 10));
      history.push_back(KvOp::get(3, 7, static_cast<uint64_t>(i), t + 20, t + 30));
      history.push_back(KvOp::get(3, 7, kAbsent, t + 40, t + 50));
    }
    const LinearizabilityResult r = check_kv_history(history);
    std::cout << "[ states   ] " << rounds << " rounds: " << verdict_name(r.verdict) << ", "
              << r.states_explored << " states\n";
    if (rounds == 64) {
      EXPECT_TRUE(r.ok) << r.explanation;
    } else {
      EXPECT_EQ(r.verdict, Verdict::kViolation) << r.explanation;
      EXPECT_EQ(r.stuck_op, history.size() - 1) << r.explanation;
    }
    EXPECT_LT(r.states_explored, 10'000u);  // a count, not a time: symmetric pending writes
  }
}

TEST(Linearizability, KeysAreCheckedSeparately) {
  // As one register this would be a stale read (get -> 1 after put(2)); as
  // two keys it is fine.
  std::vector<KvOp> history = {
      KvOp::put(1, 1, 1, 0, 10),
      KvOp::put(2, 2, 2, 20, 30),
      KvOp::get(3, 1, 1, 40, 50),
      KvOp::get(3, 2, 2, 40, 50),
      KvOp::get(4, 3, kAbsent, 40, 50),
  };
  const LinearizabilityResult ok = check_kv_history(history);
  EXPECT_TRUE(ok.ok) << ok.explanation;
  EXPECT_EQ(ok.keys_checked, 3u);
  EXPECT_EQ(ok.ops_checked, 5u);

  // Key 2 alone goes wrong: a later read of key 2 sees key 1's value.
  history.push_back(KvOp::get(4, 2, 1, 60, 70));
  const auto bad = expect_violation(history, 2, 5);
  EXPECT_EQ(bad.minimal_ops, (std::vector<size_t>{5}));
  for (size_t i : bad.minimal_ops) EXPECT_EQ(history[i].key, 2u);
}

TEST(Linearizability, ExplanationNamesKeyStuckOpAndMinimalSet) {
  // A stale read among ops that have nothing to do with it.
  const std::vector<KvOp> history = {
      KvOp::put(1, 7, 9, 0, 5),
      KvOp::get(2, 7, 9, 6, 8),
      KvOp::put(1, 7, 1, 10, 20),
      KvOp::get(2, 7, 1, 21, 25),
      KvOp::put(1, 7, 2, 30, 40),
      KvOp::get(3, 7, 2, 35, 45),
      KvOp::get(2, 7, 1, 50, 60),  // stale
      KvOp::put(1, 7, 3, 70, 80),
      KvOp::get(3, 7, 3, 90, 95),
      KvOp::put(4, 8, 1, 0, 100),  // another key
  };
  const auto r = expect_violation(history, 7, 6);
  EXPECT_EQ(r.minimal_ops, (std::vector<size_t>{2, 4, 6}));
  EXPECT_NE(r.explanation.find("Could not linearize #6 " + describe(history[6])),
            std::string::npos)
      << r.explanation;
  EXPECT_NE(r.explanation.find("minimal set"), std::string::npos) << r.explanation;
  std::cout << r.explanation;
}

// ---- budget and bad input ----

TEST(Linearizability, SearchOverBudgetIsInconclusive) {
  std::vector<KvOp> history;
  for (uint64_t i = 0; i < 6; ++i) history.push_back(KvOp::put(1, 4, i + 1, i * 10, i * 10 + 5));
  const LinearizabilityResult r = check_kv_history(history, /*max_states=*/3);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.verdict, Verdict::kInconclusive);
  EXPECT_EQ(r.bad_key, 4u);
  EXPECT_NE(r.explanation.find("key 4: inconclusive"), std::string::npos) << r.explanation;
  EXPECT_TRUE(check_kv_history(history, /*max_states=*/6).ok);
}

TEST(Linearizability, ViolationTakesPrecedenceOverInconclusive) {
  std::vector<KvOp> history;
  for (uint64_t i = 0; i < 6; ++i) history.push_back(KvOp::put(1, 1, i + 1, i * 10, i * 10 + 5));
  history.push_back(KvOp::put(2, 2, 1, 0, 10));
  history.push_back(KvOp::put(2, 2, 2, 20, 30));
  history.push_back(KvOp::get(2, 2, 1, 40, 50));
  const LinearizabilityResult r = check_kv_history(history, /*max_states=*/4);
  EXPECT_EQ(r.verdict, Verdict::kViolation) << r.explanation;
  EXPECT_EQ(r.bad_key, 2u);
  EXPECT_EQ(r.stuck_op, 8u);
}

TEST(Linearizability, MalformedOpsAreRejected) {
  const std::vector<std::pair<KvOp, std::string>> cases = {
      {KvOp{1, 3, KvOp::kPut, std::nullopt, 0, 10}, "a put without a value"},
      {KvOp{1, 3, KvOp::kRemove, 5, 0, 10}, "a remove carrying a value"},
      {KvOp::get(1, 3, 5, 20, 10), "completes before it is invoked"},
  };
  for (const auto& [op, reason] : cases) {
    const std::vector<KvOp> history = {KvOp::put(1, 9, 1, 0, 10), op};
    const LinearizabilityResult r = check_kv_history(history);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.verdict, Verdict::kMalformed);
    EXPECT_EQ(r.bad_key, 3u);
    EXPECT_NE(r.explanation.find("#1"), std::string::npos) << r.explanation;
    EXPECT_NE(r.explanation.find(reason), std::string::npos) << r.explanation;
  }
}

// ---- an exhaustive oracle on tiny random histories ----

void print_seeds(const std::vector<uint64_t>& seeds) {
  std::cout << "[ seed     ] FERRY_SEED=" << seeds.front();
  if (seeds.size() > 1) std::cout << ".." << seeds.back();
  std::cout << " (rerun one with FERRY_SEED=<n>)\n";
}

// Tries every serial order that respects real time (A before B when
// A.complete_ns < B.invoke_ns), with each pending op placed or left out.
bool linearizable_by_exhaustion(const std::vector<KvOp>& history) {
  std::vector<bool> placed(history.size(), false);
  std::map<uint64_t, std::optional<uint64_t>> registers;
  std::function<bool()> extend = [&]() -> bool {
    bool done = true;
    for (size_t i = 0; i < history.size(); ++i) {
      if (!placed[i] && history[i].complete_ns) done = false;
    }
    if (done) return true;
    for (size_t i = 0; i < history.size(); ++i) {
      if (placed[i]) continue;
      bool can_go_next = true;
      for (size_t j = 0; j < history.size(); ++j) {
        if (j != i && !placed[j] && history[j].complete_ns &&
            *history[j].complete_ns < history[i].invoke_ns) {
          can_go_next = false;
        }
      }
      if (!can_go_next) continue;
      const KvOp& op = history[i];
      std::optional<uint64_t>& reg = registers[op.key];
      const std::optional<uint64_t> before = reg;
      if (op.kind == KvOp::kGet) {
        if (op.complete_ns && reg != op.value) continue;
      } else {
        reg = op.kind == KvOp::kPut ? op.value : std::nullopt;
      }
      placed[i] = true;
      if (extend()) return true;
      placed[i] = false;
      reg = before;
    }
    return false;
  };
  return extend();
}

std::vector<KvOp> tiny_random_history(Rng& rng) {
  std::vector<KvOp> history;
  const size_t ops = rng.between(1, 7);
  const bool two_keys = rng.chance(0.3);
  for (size_t i = 0; i < ops; ++i) {
    KvOp op;
    op.client = static_cast<uint32_t>(i);
    op.key = two_keys ? rng.between(1, 2) : 1;
    const uint64_t roll = rng.below(10);
    op.kind = roll < 4 ? KvOp::kPut : roll < 8 ? KvOp::kGet : KvOp::kRemove;
    if (op.kind == KvOp::kPut) op.value = rng.between(1, 3);
    if (op.kind == KvOp::kGet && rng.below(4) != 0) op.value = rng.between(1, 3);
    // A small time range, so equal timestamps are common.
    op.invoke_ns = rng.between(0, 12);
    if (!rng.chance(0.15)) op.complete_ns = op.invoke_ns + rng.between(0, 6);
    history.push_back(op);
  }
  return history;
}

TEST(Linearizability, AgreesWithExhaustiveSearchOnTinyRandomHistories) {
  const std::vector<uint64_t> seeds = test_seeds(4);
  print_seeds(seeds);
  for (uint64_t seed : seeds) {
    SCOPED_TRACE("FERRY_SEED=" + std::to_string(seed));
    Rng rng(seed);
    size_t linearizable = 0;
    size_t violations = 0;
    for (int n = 0; n < 1500; ++n) {
      const std::vector<KvOp> history = tiny_random_history(rng);
      const bool want = linearizable_by_exhaustion(history);
      const LinearizabilityResult r = check_kv_history(history);
      ASSERT_EQ(r.ok, want) << "history " << n << ":\n" << dump(history) << r.explanation;
      if (want) {
        ++linearizable;
        continue;
      }
      ++violations;
      ASSERT_EQ(r.verdict, Verdict::kViolation);
      ASSERT_TRUE(r.stuck_op.has_value());
      EXPECT_EQ(history[*r.stuck_op].key, r.bad_key);
      EXPECT_TRUE(history[*r.stuck_op].complete_ns.has_value());
      // The minimal set is itself a violation, on the bad key only.
      std::vector<KvOp> minimal;
      for (size_t i : r.minimal_ops) {
        EXPECT_EQ(history[i].key, r.bad_key);
        minimal.push_back(history[i]);
      }
      EXPECT_FALSE(linearizable_by_exhaustion(minimal))
          << "history " << n << ":\n" << dump(history) << r.explanation;
    }
    std::cout << "[ oracle   ] seed " << seed << ": " << linearizable << " linearizable, "
              << violations << " violations\n";
    // Both outcomes must be well represented for the comparison to mean much.
    EXPECT_GT(linearizable, 150u);
    EXPECT_GT(violations, 150u);
  }
}

// ---- histories from a simulated linearizable register ----

struct SimOptions {
  uint32_t clients = 16;
  uint32_t keys = 8;
  size_t ops = 20'000;
  uint64_t min_duration_ns = 1'000;
  uint64_t max_duration_ns = 50'000;
  uint64_t max_think_ns = 2'000;
  double pending = 0.0;  // fraction of ops whose outcome the client never learns
};

// Each client issues ops one after another. Each completed op takes effect at
// a random point inside its interval; a pending op takes effect at a random
// later point or never (the client moves on after a timeout). The reads'
// results come from applying the ops to a register per key in that order, so
// the history is linearizable by construction. Put values are unique.
std::vector<KvOp> simulate(Rng& rng, const SimOptions& options) {
  std::vector<KvOp> history;
  std::vector<uint64_t> client_free_ns(options.clients, 0);
  std::vector<std::pair<uint64_t, size_t>> effects;  // (time it takes effect, op)
  uint64_t next_value = 1;
  for (size_t n = 0; n < options.ops; ++n) {
    const auto client = static_cast<uint32_t>(
        std::min_element(client_free_ns.begin(), client_free_ns.end()) - client_free_ns.begin());
    const uint64_t invoke_ns = client_free_ns[client] + rng.between(0, options.max_think_ns);
    const uint64_t duration_ns = rng.between(options.min_duration_ns, options.max_duration_ns);
    KvOp op;
    op.client = client;
    op.key = rng.below(options.keys);
    const uint64_t roll = rng.below(100);
    op.kind = roll < 45 ? KvOp::kPut : roll < 90 ? KvOp::kGet : KvOp::kRemove;
    if (op.kind == KvOp::kPut) op.value = next_value++;
    op.invoke_ns = invoke_ns;
    if (!rng.chance(options.pending)) {
      op.complete_ns = invoke_ns + duration_ns;
      effects.emplace_back(invoke_ns + rng.between(0, duration_ns), n);
    } else if (rng.chance(0.5)) {
      effects.emplace_back(invoke_ns + rng.between(0, 4 * duration_ns), n);
    }
    client_free_ns[client] = invoke_ns + duration_ns;
    history.push_back(op);
  }
  std::stable_sort(effects.begin(), effects.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::map<uint64_t, std::optional<uint64_t>> registers;
  for (const auto& [at_ns, n] : effects) {
    KvOp& op = history[n];
    std::optional<uint64_t>& reg = registers[op.key];
    switch (op.kind) {
      case KvOp::kPut:
        reg = op.value;
        break;
      case KvOp::kRemove:
        reg.reset();
        break;
      case KvOp::kGet:
        op.value = reg;
        break;
    }
  }
  return history;
}

// A completed get, picked at random.
std::optional<size_t> random_completed_get(Rng& rng, const std::vector<KvOp>& history) {
  const size_t start = rng.below(history.size());
  for (size_t k = 0; k < history.size(); ++k) {
    const size_t i = (start + k) % history.size();
    if (history[i].kind == KvOp::kGet && history[i].complete_ns) return i;
  }
  return std::nullopt;
}

// Makes some completed get return the value of a put W although a put W2
// began after W completed and completed before the get began: a stale read
// that is wrong in every order. Returns the get, if any has such W and W2.
std::optional<size_t> make_stale_read(Rng& rng, std::vector<KvOp>& history) {
  const size_t start = rng.below(history.size());
  for (size_t k = 0; k < history.size(); ++k) {
    const size_t g = (start + k) % history.size();
    const KvOp& get = history[g];
    if (get.kind != KvOp::kGet || !get.complete_ns) continue;
    auto completed_put_of_key = [&](const KvOp& op) {
      return op.key == get.key && op.kind == KvOp::kPut && op.complete_ns;
    };
    // W2: the latest-invoked put that completed before the get began.
    std::optional<size_t> w2;
    for (size_t i = 0; i < history.size(); ++i) {
      const KvOp& op = history[i];
      if (completed_put_of_key(op) && *op.complete_ns < get.invoke_ns &&
          (!w2 || op.invoke_ns > history[*w2].invoke_ns)) {
        w2 = i;
      }
    }
    if (!w2) continue;
    for (size_t i = 0; i < history.size(); ++i) {
      const KvOp& op = history[i];
      if (completed_put_of_key(op) && *op.complete_ns < history[*w2].invoke_ns) {
        history[g].value = op.value;
        return g;
      }
    }
  }
  return std::nullopt;
}

// Checks the simulated history passes, then that two corruptions of one read
// are caught, on the right key and op.
void check_simulated(uint64_t seed, const SimOptions& options) {
  Rng rng(seed);
  std::vector<KvOp> history = simulate(rng, options);
  const LinearizabilityResult r = check_kv_history(history);
  ASSERT_TRUE(r.ok) << verdict_name(r.verdict) << "\n" << r.explanation;
  EXPECT_EQ(r.ops_checked, history.size());

  const std::optional<size_t> g = random_completed_get(rng, history);
  ASSERT_TRUE(g.has_value());
  std::vector<KvOp> impossible = history;
  impossible[*g].value = 0x8000'0000'0000'0000ULL + seed;  // never written
  const LinearizabilityResult bad = check_kv_history(impossible);
  ASSERT_EQ(bad.verdict, Verdict::kViolation) << bad.explanation;
  EXPECT_EQ(bad.bad_key, history[*g].key);
  EXPECT_EQ(bad.stuck_op, *g) << bad.explanation;
  EXPECT_EQ(bad.minimal_ops, (std::vector<size_t>{*g})) << bad.explanation;

  std::vector<KvOp> stale = history;
  if (const std::optional<size_t> s = make_stale_read(rng, stale)) {
    const LinearizabilityResult bad_stale = check_kv_history(stale);
    ASSERT_EQ(bad_stale.verdict, Verdict::kViolation) << bad_stale.explanation;
    EXPECT_EQ(bad_stale.bad_key, stale[*s].key);
    // Any certificate of this violation contains the stale read (the history
    // without it is linearizable). Which op the search blames is a heuristic:
    // usually the stale read, sometimes the write it conflicts with.
    const std::vector<size_t>& minimal = bad_stale.minimal_ops;
    EXPECT_TRUE(std::binary_search(minimal.begin(), minimal.end(), *s)) << bad_stale.explanation;
    ASSERT_TRUE(bad_stale.stuck_op.has_value());
    EXPECT_TRUE(std::binary_search(minimal.begin(), minimal.end(), *bad_stale.stuck_op));
  }
}

TEST(Linearizability, RandomRegisterHistoriesPassAndCorruptedReadsFail) {
  const std::vector<uint64_t> seeds = test_seeds(60);
  print_seeds(seeds);
  for (uint64_t seed : seeds) {
    SCOPED_TRACE("FERRY_SEED=" + std::to_string(seed));
    SimOptions options;
    options.clients = 2 + static_cast<uint32_t>(seed % 7);
    options.keys = 1 + static_cast<uint32_t>(seed % 3);
    options.ops = 400;
    options.pending = (seed % 2 == 0) ? 0.05 : 0.0;
    check_simulated(seed, options);
  }
}

TEST(Linearizability, HotKeyWithSixteenClientsAndPendingOps) {
  const std::vector<uint64_t> seeds = test_seeds(3);
  print_seeds(seeds);
  for (uint64_t seed : seeds) {
    SCOPED_TRACE("FERRY_SEED=" + std::to_string(seed));
    SimOptions options;
    options.keys = 1;
    options.ops = 3'000;
    options.pending = 0.02;
    const auto start = std::chrono::steady_clock::now();
    check_simulated(seed, options);
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    std::cout << "[ timing   ] one hot key, 16 clients, 3000 ops, check + 2 corrupted checks: "
              << took.count() << " ms\n";
  }
}

TEST(Linearizability, TwentyThousandOpsOnEightKeys) {
  const std::vector<uint64_t> seeds = test_seeds(1);
  print_seeds(seeds);
  Rng rng(seeds.front());
  SimOptions options;  // 16 clients, 8 keys, 20,000 ops of 1-50 us
  std::vector<KvOp> history = simulate(rng, options);

  auto start = std::chrono::steady_clock::now();
  const LinearizabilityResult r = check_kv_history(history);
  std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.ok) << r.explanation;
  EXPECT_EQ(r.keys_checked, 8u);
  std::cout << "[ timing   ] 20000 ops, 8 keys, 16 clients: " << took.count() << " ms, "
            << r.states_explored << " states\n";

  const std::optional<size_t> g = random_completed_get(rng, history);
  ASSERT_TRUE(g.has_value());
  history[*g].value = 0x8000'0000'0000'0000ULL;
  start = std::chrono::steady_clock::now();
  const LinearizabilityResult bad = check_kv_history(history);
  took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(bad.verdict, Verdict::kViolation);
  EXPECT_EQ(bad.stuck_op, *g);
  std::cout << "[ timing   ] same with one impossible read (found and minimized): "
            << took.count() << " ms, " << bad.states_explored << " states\n";
}

}  // namespace
}  // namespace ferry::testing
