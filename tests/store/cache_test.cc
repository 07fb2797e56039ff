// The cache engine against memcached's command semantics (docs/cache-engine.md):
// every command's results, cas, incr/decr edge cases, expiry rules, LRU
// eviction and memory accounting, and a randomized comparison with a model.
// Randomized tests print their seed; rerun one with FERRY_SEED=<n>.
#include "ferry/store/cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/rng.h"
#include "test_seed.h"

namespace ferry::store {
namespace {

using S = CacheStatus;

constexpr int64_t kUnixAtZero = 1'700'000'000;  // the Unix time at which the FakeClock reads 0
constexpr uint64_t kNsPerS = 1'000'000'000;
constexpr int64_t kThirtyDaysS = 2'592'000;

CacheOptions test_options(uint64_t memory_limit_bytes = 64ull << 20) {
  CacheOptions options;
  options.memory_limit_bytes = memory_limit_bytes;
  options.unix_seconds_at_clock_zero = kUnixAtZero;
  return options;
}

// The Unix time (s) a FakeClock reading now_ns stands for, rounded down.
int64_t unix_now_s(const FakeClock& clock) {
  return kUnixAtZero + static_cast<int64_t>(clock.now_ns() / kNsPerS);
}

class CacheTest : public ::testing::Test {
 protected:
  // Value of `key`, or nullopt on a miss.
  std::optional<std::string> value_of(std::string_view key) {
    CacheGetResult r = cache_.get(key);
    if (r.status != S::kOk) return std::nullopt;
    return std::string(r.value);
  }
  uint64_t cas_of(std::string_view key) {
    CacheGetResult r = cache_.gets(key);
    EXPECT_EQ(r.status, S::kOk) << "gets " << key;
    return r.cas;
  }

  FakeClock clock_{0};
  Cache cache_{clock_, test_options()};
};

// ---- every command ----

TEST_F(CacheTest, SetThenGetReturnsValueAndFlags) {
  EXPECT_EQ(cache_.set("k", "hello", 0xdeadbeef, 0), S::kStored);
  CacheGetResult r = cache_.get("k");
  ASSERT_EQ(r.status, S::kOk);
  EXPECT_EQ(r.value, "hello");
  EXPECT_EQ(r.flags, 0xdeadbeefu);
  EXPECT_EQ(r.cas, 0u) << "get carries no cas unique";
}

TEST_F(CacheTest, SetOverwritesValueAndFlags) {
  ASSERT_EQ(cache_.set("k", "a long first value", 1, 0), S::kStored);
  ASSERT_EQ(cache_.set("k", "short", 2, 0), S::kStored);
  EXPECT_EQ(value_of("k"), "short");
  EXPECT_EQ(cache_.get("k").flags, 2u);
  ASSERT_EQ(cache_.set("k", std::string(1000, 'x'), 3, 0), S::kStored);
  EXPECT_EQ(value_of("k"), std::string(1000, 'x'));
  EXPECT_EQ(cache_.stats().items, 1u);
}

TEST_F(CacheTest, GetOfAbsentKeyIsNotFound) {
  EXPECT_EQ(cache_.get("nope").status, S::kNotFound);
  EXPECT_EQ(cache_.gets("nope").status, S::kNotFound);
}

TEST_F(CacheTest, AddStoresOnlyWhenAbsent) {
  EXPECT_EQ(cache_.add("k", "first", 1, 0), S::kStored);
  EXPECT_EQ(cache_.add("k", "second", 2, 0), S::kNotStored);
  EXPECT_EQ(value_of("k"), "first");
  EXPECT_EQ(cache_.get("k").flags, 1u);
}

TEST_F(CacheTest, ReplaceStoresOnlyWhenPresent) {
  EXPECT_EQ(cache_.replace("k", "v", 0, 0), S::kNotStored);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
  ASSERT_EQ(cache_.set("k", "old", 1, 0), S::kStored);
  EXPECT_EQ(cache_.replace("k", "new", 2, 0), S::kStored);
  EXPECT_EQ(value_of("k"), "new");
  EXPECT_EQ(cache_.get("k").flags, 2u);
}

TEST_F(CacheTest, AppendAndPrependOfAbsentKeyAreNotStored) {
  EXPECT_EQ(cache_.append("k", "x"), S::kNotStored);
  EXPECT_EQ(cache_.prepend("k", "x"), S::kNotStored);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
}

TEST_F(CacheTest, AppendAndPrependKeepFlagsAndConcatenate) {
  ASSERT_EQ(cache_.set("k", "middle", 77, 0), S::kStored);
  EXPECT_EQ(cache_.append("k", "-end"), S::kStored);
  EXPECT_EQ(cache_.prepend("k", "start-"), S::kStored);
  CacheGetResult r = cache_.get("k");
  ASSERT_EQ(r.status, S::kOk);
  EXPECT_EQ(r.value, "start-middle-end");
  EXPECT_EQ(r.flags, 77u);
  // Many small appends and prepends (in place and reallocating).
  std::string expected(r.value);
  for (int i = 0; i < 200; ++i) {
    const std::string piece(static_cast<size_t>(i % 7), static_cast<char>('a' + i % 26));
    if (i % 2 == 0) {
      ASSERT_EQ(cache_.append("k", piece), S::kStored);
      expected += piece;
    } else {
      ASSERT_EQ(cache_.prepend("k", piece), S::kStored);
      expected = piece + expected;
    }
    ASSERT_EQ(value_of("k"), expected) << "after step " << i;
  }
  EXPECT_EQ(cache_.get("k").flags, 77u);
}

TEST_F(CacheTest, AppendOfEmptyValueAndToEmptyValue) {
  ASSERT_EQ(cache_.set("k", "", 5, 0), S::kStored);
  EXPECT_EQ(cache_.append("k", ""), S::kStored);
  EXPECT_EQ(value_of("k"), "");
  EXPECT_EQ(cache_.prepend("k", "ab"), S::kStored);
  EXPECT_EQ(cache_.append("k", "cd"), S::kStored);
  EXPECT_EQ(value_of("k"), "abcd");
}

TEST_F(CacheTest, CasUniqueChangesOnEveryModificationAndIsUniqueAcrossKeys) {
  ASSERT_EQ(cache_.set("a", "1", 0, 0), S::kStored);
  ASSERT_EQ(cache_.set("b", "1", 0, 0), S::kStored);
  std::vector<uint64_t> seen = {cas_of("a"), cas_of("b")};
  EXPECT_NE(seen[0], seen[1]);
  EXPECT_NE(seen[0], 0u);
  ASSERT_EQ(cache_.set("a", "2", 0, 0), S::kStored);
  seen.push_back(cas_of("a"));
  ASSERT_EQ(cache_.append("a", "0"), S::kStored);
  seen.push_back(cas_of("a"));
  ASSERT_EQ(cache_.prepend("a", "1"), S::kStored);
  seen.push_back(cas_of("a"));
  ASSERT_EQ(cache_.incr("a", 1).status, S::kOk);
  seen.push_back(cas_of("a"));
  ASSERT_EQ(cache_.decr("a", 1).status, S::kOk);
  seen.push_back(cas_of("a"));
  ASSERT_EQ(cache_.replace("a", "3", 0, 0), S::kStored);
  seen.push_back(cas_of("a"));
  ASSERT_EQ(cache_.cas("a", "4", 0, 0, seen.back()), S::kStored);
  seen.push_back(cas_of("a"));
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GT(seen[i], seen[i - 1]) << "modification " << i << " took a fresh cas unique";
  }
  // Reads and touch leave it alone.
  const uint64_t before = cas_of("a");
  ASSERT_EQ(cache_.get("a").status, S::kOk);
  ASSERT_EQ(cache_.touch("a", 100), S::kTouched);
  EXPECT_EQ(cas_of("a"), before);
}

TEST_F(CacheTest, CasStoresWhenUnchanged) {
  ASSERT_EQ(cache_.set("k", "v1", 1, 0), S::kStored);
  const uint64_t unique = cas_of("k");
  EXPECT_EQ(cache_.cas("k", "v2", 9, 0, unique), S::kStored);
  CacheGetResult r = cache_.gets("k");
  EXPECT_EQ(r.value, "v2");
  EXPECT_EQ(r.flags, 9u);
  EXPECT_NE(r.cas, unique);
}

TEST_F(CacheTest, CasAfterAnotherWriterIsExistsAndLeavesTheValue) {
  ASSERT_EQ(cache_.set("k", "v1", 0, 0), S::kStored);
  const uint64_t unique = cas_of("k");
  ASSERT_EQ(cache_.set("k", "other writer", 0, 0), S::kStored);
  EXPECT_EQ(cache_.cas("k", "mine", 0, 0, unique), S::kExists);
  EXPECT_EQ(value_of("k"), "other writer");
  // The second of two cas with the same unique loses.
  const uint64_t fresh = cas_of("k");
  EXPECT_EQ(cache_.cas("k", "first", 0, 0, fresh), S::kStored);
  EXPECT_EQ(cache_.cas("k", "second", 0, 0, fresh), S::kExists);
  EXPECT_EQ(value_of("k"), "first");
  EXPECT_EQ(cache_.cas("k", "zero", 0, 0, 0), S::kExists) << "no item has cas unique 0";
}

TEST_F(CacheTest, CasOfAbsentKeyIsNotFound) {
  EXPECT_EQ(cache_.cas("k", "v", 0, 0, 1), S::kNotFound);
  ASSERT_EQ(cache_.set("k", "v", 0, 0), S::kStored);
  const uint64_t unique = cas_of("k");
  ASSERT_EQ(cache_.remove("k"), S::kDeleted);
  EXPECT_EQ(cache_.cas("k", "v", 0, 0, unique), S::kNotFound);
}

TEST_F(CacheTest, DeleteIsDeletedThenNotFound) {
  ASSERT_EQ(cache_.set("k", "v", 0, 0), S::kStored);
  EXPECT_EQ(cache_.remove("k"), S::kDeleted);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
  EXPECT_EQ(cache_.remove("k"), S::kNotFound);
  EXPECT_EQ(cache_.stats().items, 0u);
  EXPECT_EQ(cache_.stats().bytes_used, 0u);
}

TEST_F(CacheTest, TouchOfAbsentKeyIsNotFound) { EXPECT_EQ(cache_.touch("k", 10), S::kNotFound); }

TEST_F(CacheTest, BadKeysAreRefusedByEveryCommand) {
  const std::string too_long(kCacheMaxKeyBytes + 1, 'k');
  for (const std::string& key : {std::string(), too_long}) {
    SCOPED_TRACE("key of " + std::to_string(key.size()) + " bytes");
    EXPECT_EQ(cache_.set(key, "v", 0, 0), S::kBadKey);
    EXPECT_EQ(cache_.add(key, "v", 0, 0), S::kBadKey);
    EXPECT_EQ(cache_.replace(key, "v", 0, 0), S::kBadKey);
    EXPECT_EQ(cache_.append(key, "v"), S::kBadKey);
    EXPECT_EQ(cache_.prepend(key, "v"), S::kBadKey);
    EXPECT_EQ(cache_.cas(key, "v", 0, 0, 1), S::kBadKey);
    EXPECT_EQ(cache_.get(key).status, S::kBadKey);
    EXPECT_EQ(cache_.gets(key).status, S::kBadKey);
    EXPECT_EQ(cache_.remove(key), S::kBadKey);
    EXPECT_EQ(cache_.incr(key, 1).status, S::kBadKey);
    EXPECT_EQ(cache_.decr(key, 1).status, S::kBadKey);
    EXPECT_EQ(cache_.touch(key, 1), S::kBadKey);
    EXPECT_EQ(check_item(cache_.options(), key.size(), 1), S::kBadKey);
  }
  const std::string longest(kCacheMaxKeyBytes, 'k');
  EXPECT_EQ(cache_.set(longest, "v", 0, 0), S::kStored);
  EXPECT_EQ(value_of(longest), "v");
  EXPECT_EQ(cache_.stats().get_misses, 0u) << "a bad key is not a miss";
}

TEST_F(CacheTest, BinaryKeysAndValuesRoundTrip) {
  const std::string key_a("\0a", 2);
  const std::string key_b("\0b", 2);
  const std::string key_nul(1, '\0');
  std::string value;
  for (int i = 0; i < 256; ++i) value.push_back(static_cast<char>(i));
  ASSERT_EQ(cache_.set(key_a, value, 1, 0), S::kStored);
  ASSERT_EQ(cache_.set(key_b, value + value, 2, 0), S::kStored);
  ASSERT_EQ(cache_.set(key_nul, std::string("\0\0\xff", 3), 3, 0), S::kStored);
  EXPECT_EQ(value_of(key_a), value);
  EXPECT_EQ(value_of(key_b), value + value);
  EXPECT_EQ(value_of(key_nul), std::string("\0\0\xff", 3));
  EXPECT_EQ(cache_.get(std::string_view("\0", 1)).flags, 3u);
  EXPECT_EQ(cache_.get("a").status, S::kNotFound) << "the key's NUL byte is part of it";
  EXPECT_EQ(cache_.append(key_a, std::string("\0", 1)), S::kStored);
  EXPECT_EQ(value_of(key_a), value + std::string("\0", 1));
}

TEST_F(CacheTest, FlushAllRemovesEverythingAndCasContinues) {
  ASSERT_EQ(cache_.set("a", "1", 0, 0), S::kStored);
  ASSERT_EQ(cache_.set("b", "2", 0, 0), S::kStored);
  const uint64_t before = cas_of("b");
  cache_.flush_all();
  EXPECT_EQ(cache_.get("a").status, S::kNotFound);
  EXPECT_EQ(cache_.get("b").status, S::kNotFound);
  EXPECT_EQ(cache_.stats().items, 0u);
  EXPECT_EQ(cache_.stats().bytes_used, 0u);
  ASSERT_EQ(cache_.set("b", "3", 0, 0), S::kStored);
  EXPECT_GT(cas_of("b"), before);
}

TEST_F(CacheTest, ManyKeysSurviveIndexGrowth) {
  for (int i = 0; i < 5000; ++i) {
    ASSERT_EQ(cache_.set("key" + std::to_string(i), std::to_string(i * 7), static_cast<uint32_t>(i), 0),
              S::kStored);
  }
  for (int i = 0; i < 5000; ++i) {
    CacheGetResult r = cache_.get("key" + std::to_string(i));
    ASSERT_EQ(r.status, S::kOk) << i;
    EXPECT_EQ(r.value, std::to_string(i * 7));
    EXPECT_EQ(r.flags, static_cast<uint32_t>(i));
  }
  for (int i = 0; i < 5000; i += 2) ASSERT_EQ(cache_.remove("key" + std::to_string(i)), S::kDeleted);
  EXPECT_EQ(cache_.stats().items, 2500u);
  EXPECT_EQ(cache_.get("key1").status, S::kOk);
  EXPECT_EQ(cache_.get("key2").status, S::kNotFound);
}

// ---- incr / decr ----

TEST_F(CacheTest, IncrAndDecrReturnAndStoreTheNewValue) {
  ASSERT_EQ(cache_.set("n", "10", 42, 0), S::kStored);
  CacheArithResult r = cache_.incr("n", 5);
  ASSERT_EQ(r.status, S::kOk);
  EXPECT_EQ(r.value, 15u);
  EXPECT_EQ(value_of("n"), "15");
  r = cache_.decr("n", 3);
  ASSERT_EQ(r.status, S::kOk);
  EXPECT_EQ(r.value, 12u);
  EXPECT_EQ(value_of("n"), "12");
  EXPECT_EQ(cache_.get("n").flags, 42u) << "incr/decr keep the flags";
  EXPECT_EQ(cache_.incr("n", 0).value, 12u);
}

TEST_F(CacheTest, IncrAndDecrOfAbsentKeyAreNotFound) {
  EXPECT_EQ(cache_.incr("n", 1).status, S::kNotFound);
  EXPECT_EQ(cache_.decr("n", 1).status, S::kNotFound);
  EXPECT_EQ(cache_.get("n").status, S::kNotFound) << "incr does not create the key";
}

TEST_F(CacheTest, IncrAndDecrOfNonNumericValueAreRefusedAndLeaveIt) {
  const std::vector<std::string> bad = {"",
                                        "abc",
                                        "12a",
                                        "-1",
                                        "+1",
                                        " 1",
                                        "1 ",
                                        "1.5",
                                        "0x10",
                                        "18446744073709551616",  // 2^64
                                        "99999999999999999999999",
                                        std::string("1\0", 2)};
  for (const std::string& value : bad) {
    SCOPED_TRACE("value '" + value + "'");
    ASSERT_EQ(cache_.set("n", value, 0, 0), S::kStored);
    EXPECT_EQ(cache_.incr("n", 1).status, S::kNonNumeric);
    EXPECT_EQ(cache_.decr("n", 1).status, S::kNonNumeric);
    EXPECT_EQ(value_of("n"), value);
  }
}

TEST_F(CacheTest, IncrWrapsAt2To64) {
  ASSERT_EQ(cache_.set("n", "18446744073709551615", 0, 0), S::kStored);  // 2^64 - 1
  CacheArithResult r = cache_.incr("n", 1);
  ASSERT_EQ(r.status, S::kOk);
  EXPECT_EQ(r.value, 0u);
  EXPECT_EQ(value_of("n"), "0");
  ASSERT_EQ(cache_.set("n", "18446744073709551610", 0, 0), S::kStored);
  EXPECT_EQ(cache_.incr("n", 10).value, 4u);
  EXPECT_EQ(value_of("n"), "4");
}

TEST_F(CacheTest, DecrStopsAtZero) {
  ASSERT_EQ(cache_.set("n", "5", 0, 0), S::kStored);
  CacheArithResult r = cache_.decr("n", 6);
  ASSERT_EQ(r.status, S::kOk);
  EXPECT_EQ(r.value, 0u);
  EXPECT_EQ(value_of("n"), "0");
  EXPECT_EQ(cache_.decr("n", 1).value, 0u);
  ASSERT_EQ(cache_.set("n", "18446744073709551615", 0, 0), S::kStored);
  EXPECT_EQ(cache_.decr("n", ~0ull).value, 0u);
}

TEST_F(CacheTest, IncrAndDecrChangeTheDecimalLength) {
  ASSERT_EQ(cache_.set("n", "99", 0, 0), S::kStored);
  EXPECT_EQ(cache_.incr("n", 1).value, 100u);
  EXPECT_EQ(value_of("n"), "100");
  EXPECT_EQ(cache_.decr("n", 1).value, 99u);
  EXPECT_EQ(value_of("n"), "99") << "no padding when the number gets shorter";
  EXPECT_EQ(cache_.incr("n", 18446744073709551516ull).value, 18446744073709551615ull);
  EXPECT_EQ(value_of("n"), "18446744073709551615");
  ASSERT_EQ(cache_.set("n", "007", 0, 0), S::kStored);
  EXPECT_EQ(cache_.incr("n", 1).value, 8u) << "leading zeros are decimal too";
  EXPECT_EQ(value_of("n"), "8");
  const CacheStats stats = cache_.stats();
  EXPECT_EQ(stats.bytes_used, cache_item_bytes(1, 1)) << "accounting follows the new length";
}

// ---- expiry ----

TEST_F(CacheTest, ExptimeZeroNeverExpires) {
  ASSERT_EQ(cache_.set("k", "v", 0, 0), S::kStored);
  clock_.advance_ns(10ull * 365 * 24 * 3600 * kNsPerS);
  EXPECT_EQ(value_of("k"), "v");
}

TEST_F(CacheTest, RelativeExptimeExpiresThatManySecondsLater) {
  ASSERT_EQ(cache_.set("k", "v", 0, 10), S::kStored);
  clock_.advance_ns(10 * kNsPerS - 1);
  EXPECT_EQ(value_of("k"), "v");
  clock_.advance_ns(1);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
  EXPECT_EQ(cache_.stats().expired_reclaimed, 1u) << "found expired by get and freed";
  EXPECT_EQ(cache_.stats().items, 0u);
}

TEST_F(CacheTest, ThirtyDaysIsStillRelative) {
  ASSERT_EQ(cache_.set("k", "v", 0, kThirtyDaysS), S::kStored);
  clock_.advance_ns(static_cast<uint64_t>(kThirtyDaysS) * kNsPerS - 1);
  EXPECT_EQ(value_of("k"), "v");
  clock_.advance_ns(1);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
}

TEST_F(CacheTest, OverThirtyDaysIsAnAbsoluteUnixTime) {
  // 2,592,001 read as a Unix time is January 1970: long past, expired at once.
  EXPECT_EQ(cache_.set("k", "v", 0, kThirtyDaysS + 1), S::kStored);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
  // A Unix time 100 s ahead expires 100 s from now.
  clock_.advance_ns(5 * kNsPerS);
  ASSERT_EQ(cache_.set("k", "v", 0, unix_now_s(clock_) + 100), S::kStored);
  clock_.advance_ns(100 * kNsPerS - 1);
  EXPECT_EQ(value_of("k"), "v");
  clock_.advance_ns(1);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
}

TEST_F(CacheTest, AbsoluteTimeInThePastExpiresAtOnce) {
  ASSERT_EQ(cache_.set("k", "old", 0, 0), S::kStored);
  clock_.advance_ns(1000 * kNsPerS);
  EXPECT_EQ(cache_.set("k", "v", 0, unix_now_s(clock_) - 1), S::kStored);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound) << "the old value is gone too";
  EXPECT_EQ(cache_.set("k", "v", 0, unix_now_s(clock_)), S::kStored);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound) << "now is already expired";
}

TEST_F(CacheTest, NegativeExptimeExpiresAtOnce) {
  ASSERT_EQ(cache_.set("k", "old", 0, 0), S::kStored);
  EXPECT_EQ(cache_.set("k", "new", 0, -1), S::kStored);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
  EXPECT_EQ(cache_.add("k", "v", 0, -1), S::kStored);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
  ASSERT_EQ(cache_.set("k", "v", 0, 0), S::kStored);
  EXPECT_EQ(cache_.replace("k", "w", 0, -100), S::kStored);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
  EXPECT_EQ(cache_.stats().items, 0u);
  EXPECT_EQ(cache_.stats().bytes_used, 0u);
}

TEST_F(CacheTest, ExpiredItemIsAbsentForEveryCommand) {
  auto expire_k = [&] {
    ASSERT_EQ(cache_.set("k", "7", 3, 1), S::kStored);
    clock_.advance_ns(kNsPerS);
  };
  expire_k();
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
  expire_k();
  EXPECT_EQ(cache_.gets("k").status, S::kNotFound);
  expire_k();
  EXPECT_EQ(cache_.replace("k", "v", 0, 0), S::kNotStored);
  expire_k();
  EXPECT_EQ(cache_.append("k", "v"), S::kNotStored);
  expire_k();
  EXPECT_EQ(cache_.prepend("k", "v"), S::kNotStored);
  ASSERT_EQ(cache_.set("k", "7", 3, 1), S::kStored);
  const uint64_t unique = cas_of("k");
  clock_.advance_ns(kNsPerS);
  EXPECT_EQ(cache_.cas("k", "v", 0, 0, unique), S::kNotFound);
  expire_k();
  EXPECT_EQ(cache_.remove("k"), S::kNotFound);
  expire_k();
  EXPECT_EQ(cache_.incr("k", 1).status, S::kNotFound);
  expire_k();
  EXPECT_EQ(cache_.decr("k", 1).status, S::kNotFound);
  expire_k();
  EXPECT_EQ(cache_.touch("k", 0), S::kNotFound);
  expire_k();
  EXPECT_EQ(cache_.add("k", "fresh", 4, 0), S::kStored);
  EXPECT_EQ(value_of("k"), "fresh");
  EXPECT_EQ(cache_.get("k").flags, 4u);
  EXPECT_EQ(cache_.stats().expired_reclaimed, 11u);
  EXPECT_EQ(cache_.stats().items, 1u);
}

TEST_F(CacheTest, CasOfUniqueTakenJustBeforeExpiryIsNotFound) {
  ASSERT_EQ(cache_.set("k", "v", 0, 2), S::kStored);
  const uint64_t unique = cas_of("k");
  clock_.advance_ns(2 * kNsPerS);
  EXPECT_EQ(cache_.cas("k", "w", 0, 0, unique), S::kNotFound);
}

TEST_F(CacheTest, TouchSetsANewExpiry) {
  ASSERT_EQ(cache_.set("k", "v", 0, 10), S::kStored);
  clock_.advance_ns(5 * kNsPerS);
  EXPECT_EQ(cache_.touch("k", 100), S::kTouched);
  clock_.advance_ns(50 * kNsPerS);
  EXPECT_EQ(value_of("k"), "v") << "past the old expiry, within the new";
  EXPECT_EQ(cache_.touch("k", 0), S::kTouched);
  clock_.advance_ns(1000 * kNsPerS);
  EXPECT_EQ(value_of("k"), "v") << "touch 0: never";
  EXPECT_EQ(cache_.touch("k", unix_now_s(clock_) + 3), S::kTouched);
  clock_.advance_ns(3 * kNsPerS);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
  ASSERT_EQ(cache_.set("k", "v", 0, 0), S::kStored);
  EXPECT_EQ(cache_.touch("k", -1), S::kTouched);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound) << "touch with a past expiry removes it";
}

TEST_F(CacheTest, AppendPrependAndIncrKeepTheExpiry) {
  ASSERT_EQ(cache_.set("k", "1", 0, 10), S::kStored);
  clock_.advance_ns(4 * kNsPerS);
  ASSERT_EQ(cache_.append("k", "2"), S::kStored);
  ASSERT_EQ(cache_.prepend("k", "3"), S::kStored);
  ASSERT_EQ(cache_.incr("k", 1).value, 313u);
  clock_.advance_ns(6 * kNsPerS - 1);
  EXPECT_EQ(value_of("k"), "313");
  clock_.advance_ns(1);
  EXPECT_EQ(cache_.get("k").status, S::kNotFound);
}

TEST(CacheClockTest, UnixSecondsAtClockZeroMatchesTheSystemClock) {
  SteadyClock& steady = SteadyClock::instance();
  const int64_t zero = unix_seconds_at_clock_zero(steady);
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  const int64_t derived = zero + static_cast<int64_t>(steady.now_ns() / kNsPerS);
  EXPECT_NEAR(static_cast<double>(derived), static_cast<double>(now), 5.0);
  FakeClock at_zero(0);
  EXPECT_NEAR(static_cast<double>(unix_seconds_at_clock_zero(at_zero)), static_cast<double>(now), 5.0);
}

// ---- memory limit, LRU eviction, too-large items ----

// Room for exactly three items of a 1-byte key and a 36-byte value.
constexpr uint64_t kSmallItemBytes = cache_item_bytes(1, 36);
static_assert(kSmallItemBytes == 101);

class CacheLruTest : public ::testing::Test {
 protected:
  static std::string value36(char c) { return std::string(36, c); }
  void set(const char* key) { ASSERT_EQ(cache_.set(key, value36(key[0]), 0, 0), S::kStored) << key; }
  bool present(const char* key) { return cache_.get(key).status == S::kOk; }
  std::optional<std::string> value_of(const char* key) {
    CacheGetResult r = cache_.get(key);
    if (r.status != S::kOk) return std::nullopt;
    return std::string(r.value);
  }

  FakeClock clock_{0};
  Cache cache_{clock_, test_options(3 * kSmallItemBytes)};
};

TEST_F(CacheLruTest, AccountsKeyPlusValuePlusOverhead) {
  set("a");
  set("b");
  EXPECT_EQ(cache_.stats().bytes_used, 2 * kSmallItemBytes);
  ASSERT_EQ(cache_.set("c", "xy", 0, 0), S::kStored);
  EXPECT_EQ(cache_.stats().bytes_used, 2 * kSmallItemBytes + 1 + 2 + kCacheItemOverheadBytes);
  ASSERT_EQ(cache_.append("c", "z"), S::kStored);
  EXPECT_EQ(cache_.stats().bytes_used, 2 * kSmallItemBytes + 1 + 3 + kCacheItemOverheadBytes);
  ASSERT_EQ(cache_.remove("a"), S::kDeleted);
  EXPECT_EQ(cache_.stats().bytes_used, kSmallItemBytes + 1 + 3 + kCacheItemOverheadBytes);
  EXPECT_EQ(cache_.stats().memory_limit_bytes, 3 * kSmallItemBytes);
}

TEST_F(CacheLruTest, FullCacheEvictsTheLeastRecentlyUsed) {
  set("a");
  set("b");
  set("c");
  EXPECT_EQ(cache_.stats().evictions, 0u);
  set("d");
  EXPECT_EQ(cache_.stats().evictions, 1u);
  EXPECT_EQ(cache_.stats().bytes_used, 3 * kSmallItemBytes);
  EXPECT_FALSE(present("a"));
  EXPECT_TRUE(present("b"));
  EXPECT_TRUE(present("c"));
  EXPECT_TRUE(present("d"));
}

TEST_F(CacheLruTest, GetRefreshesRecency) {
  set("a");
  set("b");
  set("c");
  ASSERT_TRUE(present("a"));  // a is now the most recent; b the least
  set("d");
  EXPECT_FALSE(present("b"));
  EXPECT_TRUE(present("a"));
  EXPECT_TRUE(present("c"));
  EXPECT_TRUE(present("d"));
}

TEST_F(CacheLruTest, TouchAndStoresRefreshRecency) {
  set("a");
  set("b");
  set("c");
  ASSERT_EQ(cache_.touch("a", 0), S::kTouched);   // order, oldest first: b c a
  ASSERT_EQ(cache_.append("b", ""), S::kStored);  // c a b
  set("d");
  EXPECT_EQ(cache_.get("c").status, S::kNotFound);
  ASSERT_EQ(cache_.add("a", "ignored", 0, 0), S::kNotStored);  // a failed add refreshes too: b d a
  set("e");
  EXPECT_EQ(cache_.get("b").status, S::kNotFound);
  EXPECT_TRUE(present("a"));
  EXPECT_TRUE(present("d"));
  EXPECT_TRUE(present("e"));
}

TEST_F(CacheLruTest, ABigItemEvictsAsManyAsItNeeds) {
  set("a");
  set("b");
  set("c");
  // 2 * 101 + 1 bytes: needs the room of all three.
  ASSERT_EQ(cache_.set("z", std::string(2 * kSmallItemBytes + 1 - 1 - kCacheItemOverheadBytes, 'z'), 0, 0),
            S::kStored);
  EXPECT_EQ(cache_.stats().evictions, 3u);
  EXPECT_EQ(cache_.stats().items, 1u);
  EXPECT_TRUE(present("z"));
}

TEST_F(CacheLruTest, GrowingTheLeastRecentItemEvictsOthersNotItself) {
  set("a");
  set("b");
  set("c");
  // a is the LRU item; growing it by 36 bytes must evict b, not a.
  ASSERT_EQ(cache_.append("a", value36('+')), S::kStored);
  EXPECT_EQ(cache_.stats().evictions, 1u);
  EXPECT_EQ(value_of("a"), value36('a') + value36('+'));
  EXPECT_FALSE(present("b"));
  EXPECT_TRUE(present("c"));
}

TEST_F(CacheLruTest, ExpiredItemAtTheTailIsReclaimedNotEvicted) {
  ASSERT_EQ(cache_.set("a", value36('a'), 0, 5), S::kStored);
  set("b");
  set("c");
  clock_.advance_ns(5 * kNsPerS);
  set("d");
  EXPECT_EQ(cache_.stats().evictions, 0u);
  EXPECT_EQ(cache_.stats().expired_reclaimed, 1u);
  EXPECT_TRUE(present("b"));
}

TEST_F(CacheLruTest, IncrThatLengthensTheValueEvictsOthersNotItself) {
  ASSERT_EQ(cache_.set("n", "99999", 0, 0), S::kStored);  // 70 bytes, the LRU item
  set("b");                                               // 101
  ASSERT_EQ(
      cache_.set("c", std::string(3 * kSmallItemBytes - 70 - 101 - 1 - kCacheItemOverheadBytes, 'c'), 0, 0),
      S::kStored);
  ASSERT_EQ(cache_.stats().bytes_used, 3 * kSmallItemBytes) << "full to the byte";
  EXPECT_EQ(cache_.incr("n", 1).value, 100000u);  // one byte longer
  EXPECT_EQ(cache_.stats().evictions, 1u);
  EXPECT_EQ(value_of("n"), "100000");
  EXPECT_FALSE(present("b"));
  EXPECT_TRUE(present("c"));
}

TEST(CacheLimitTest, ItemsOverMaxItemBytesAreTooLarge) {
  FakeClock clock(0);
  CacheOptions options = test_options(64ull << 20);
  options.max_item_bytes = 1024;
  Cache cache(clock, options);
  const size_t fits = 1024 - 1 - kCacheItemOverheadBytes;  // key "k"
  EXPECT_EQ(check_item(options, 1, fits), S::kOk);
  EXPECT_EQ(check_item(options, 1, fits + 1), S::kTooLarge);
  EXPECT_EQ(check_item(options, 1, ~size_t{0}), S::kTooLarge);
  EXPECT_EQ(cache.set("k", std::string(fits, 'v'), 0, 0), S::kStored);
  EXPECT_EQ(cache.set("k", std::string(fits + 1, 'v'), 0, 0), S::kTooLarge);
  EXPECT_EQ(cache.get("k").status, S::kNotFound) << "a set refused as too large removes the old value";

  ASSERT_EQ(cache.set("k", "old", 0, 0), S::kStored);
  EXPECT_EQ(cache.add("k", std::string(fits + 1, 'v'), 0, 0), S::kTooLarge);
  EXPECT_EQ(cache.add("absent", std::string(fits + 1, 'v'), 0, 0), S::kTooLarge);
  EXPECT_EQ(cache.replace("k", std::string(fits + 1, 'v'), 0, 0), S::kTooLarge);
  EXPECT_EQ(cache.cas("k", std::string(fits + 1, 'v'), 0, 0, 1), S::kTooLarge);
  EXPECT_EQ(cache.append("k", std::string(fits - 2, 'v')), S::kTooLarge);
  EXPECT_EQ(cache.prepend("k", std::string(fits - 2, 'v')), S::kTooLarge);
  EXPECT_EQ(cache.get("k").value, "old") << "only set drops the old value";
  EXPECT_EQ(cache.append("k", std::string(fits - 3, 'v')), S::kStored);
  EXPECT_EQ(cache.get("k").value.size(), fits);
  EXPECT_EQ(cache.get("absent").status, S::kNotFound);
}

TEST(CacheLimitTest, DefaultMaxItemIsOneMebibyte) {
  FakeClock clock(0);
  Cache cache(clock, test_options(64ull << 20));
  const size_t fits = (1u << 20) - 1 - kCacheItemOverheadBytes;
  EXPECT_EQ(cache.set("k", std::string(fits, 'v'), 0, 0), S::kStored);
  EXPECT_EQ(cache.set("k", std::string(fits + 1, 'v'), 0, 0), S::kTooLarge);
}

TEST(CacheLimitTest, ItemOverTheMemoryLimitIsTooLargeAndEvictsNothing) {
  FakeClock clock(0);
  Cache cache(clock, test_options(500));
  ASSERT_EQ(cache.set("a", "x", 0, 0), S::kStored);
  const size_t fits = 500 - 1 - kCacheItemOverheadBytes;
  EXPECT_EQ(cache.set("b", std::string(fits + 1, 'v'), 0, 0), S::kTooLarge);
  EXPECT_EQ(cache.get("a").status, S::kOk);
  EXPECT_EQ(cache.stats().evictions, 0u);
  EXPECT_EQ(cache.set("b", std::string(fits, 'v'), 0, 0), S::kStored);
  EXPECT_EQ(cache.get("a").status, S::kNotFound);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().bytes_used, 500u);
}

TEST(CacheStatsTest, CountsHitsMissesEvictionsAndExpirations) {
  FakeClock clock(0);
  Cache cache(clock, test_options(2 * cache_item_bytes(1, 1)));
  ASSERT_EQ(cache.set("a", "1", 0, 0), S::kStored);
  ASSERT_EQ(cache.get("a").status, S::kOk);
  ASSERT_EQ(cache.gets("a").status, S::kOk);
  ASSERT_EQ(cache.get("b").status, S::kNotFound);
  ASSERT_EQ(cache.set("b", "2", 0, 1), S::kStored);
  clock.advance_ns(kNsPerS);
  ASSERT_EQ(cache.gets("b").status, S::kNotFound);  // expired: a miss, reclaimed
  ASSERT_EQ(cache.set("c", "3", 0, 0), S::kStored);
  ASSERT_EQ(cache.set("d", "4", 0, 0), S::kStored);  // evicts a
  const CacheStats stats = cache.stats();
  EXPECT_EQ(stats.get_hits, 2u);
  EXPECT_EQ(stats.get_misses, 2u);
  EXPECT_EQ(stats.expired_reclaimed, 1u);
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.items, 2u);
  EXPECT_EQ(stats.bytes_used, 2 * cache_item_bytes(1, 1));
}

// ---- nilext ----

TEST(CacheNilextTest, OnlyCommandsWithoutResultsOrStateFailuresAreNilext) {
  EXPECT_TRUE(is_nilext(Command::kSet));
  EXPECT_TRUE(is_nilext(Command::kDeleteQuiet));
  EXPECT_TRUE(is_nilext(Command::kFlushAll));
  for (Command c :
       {Command::kAdd, Command::kReplace, Command::kAppend, Command::kPrepend, Command::kCas, Command::kGet,
        Command::kGets, Command::kDelete, Command::kIncr, Command::kDecr, Command::kTouch}) {
    EXPECT_FALSE(is_nilext(c)) << cache_command_name(c);
  }
}

TEST(CacheNilextTest, SetResultDependsOnlyOnTheRequest) {
  // What makes set nilext: once check_item() passes, set is STORED whatever
  // the cache holds (present, absent, expired, full).
  FakeClock clock(0);
  const CacheOptions options = test_options(3 * kSmallItemBytes);
  Cache cache(clock, options);
  const std::string value(36, 'v');
  ASSERT_EQ(check_item(options, 1, value.size()), S::kOk);
  for (char key = 'a'; key <= 'z'; ++key) {
    EXPECT_EQ(cache.set(std::string(1, key), value, 0, key % 3), S::kStored);
    EXPECT_EQ(cache.set(std::string(1, key), value, 0, 0), S::kStored);
    clock.advance_ns(kNsPerS);
  }
}

// ---- randomized comparison with a model ----

// The model states the semantics with nothing of the engine's structure: a
// std::map, explicit deadlines, no memory limit, the same cas counter rule
// (every successful store, append/prepend, cas and incr/decr takes the next
// number; touch takes none).
constexpr uint64_t kModelNever = ~0ull;

uint64_t model_deadline_ns(int64_t exptime, uint64_t now_ns) {
  if (exptime == 0) return kModelNever;
  if (exptime < 0) return 0;
  if (exptime <= kThirtyDaysS) return now_ns + static_cast<uint64_t>(exptime) * kNsPerS;
  if (exptime <= kUnixAtZero) return 0;
  return static_cast<uint64_t>(exptime - kUnixAtZero) * kNsPerS;
}

bool model_expired(uint64_t deadline_ns, uint64_t now_ns) {
  return deadline_ns != kModelNever && now_ns >= deadline_ns;
}

// Decimal digits only, value below 2^64.
std::optional<uint64_t> model_parse(const std::string& text) {
  if (text.empty()) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  const std::string digits = text.substr(std::min(text.find_first_not_of('0'), text.size()));
  const std::string max = "18446744073709551615";
  if (digits.size() > max.size() || (digits.size() == max.size() && digits > max)) return std::nullopt;
  uint64_t value = 0;
  for (char c : digits) value = value * 10 + static_cast<uint64_t>(c - '0');
  return value;
}

enum class Op : uint8_t {
  kSet,
  kAdd,
  kReplace,
  kAppend,
  kPrepend,
  kCas,
  kGet,
  kGets,
  kDelete,
  kIncr,
  kDecr,
  kTouch,
  kFlushAll
};
constexpr const char* kOpNames[] = {"set",  "add",    "replace", "append", "prepend", "cas",      "get",
                                    "gets", "delete", "incr",    "decr",   "touch",   "flush_all"};

struct Request {
  Op op = Op::kGet;
  std::string key;
  std::string value;
  uint32_t flags = 0;
  int64_t exptime = 0;
  uint64_t number = 0;  // cas: the cas unique; incr/decr: the delta
};

std::string printable(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out.size() > 60 ? out.substr(0, 60) + "...(" + std::to_string(bytes.size()) + " bytes)" : out;
}

std::string describe(const Request& rq) {
  return std::string(kOpNames[static_cast<int>(rq.op)]) + " key='" + printable(rq.key) + "' value='" +
         printable(rq.value) + "' flags=" + std::to_string(rq.flags) +
         " exptime=" + std::to_string(rq.exptime) + " number=" + std::to_string(rq.number);
}

struct Reply {
  CacheStatus status = S::kOk;
  std::string value;
  uint32_t flags = 0;
  uint64_t cas = 0;
  uint64_t number = 0;
  bool operator==(const Reply&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Reply& r) {
  return os << "{" << r.status << " value='" << printable(r.value) << "' flags=" << r.flags
            << " cas=" << r.cas << " number=" << r.number << "}";
}

class Model {
 public:
  struct Item {
    std::string value;
    uint32_t flags = 0;
    uint64_t cas = 0;
    uint64_t deadline_ns = kModelNever;
  };

  explicit Model(uint64_t max_item_bytes) : max_item_bytes_(max_item_bytes) {}

  Item* live(const std::string& key, uint64_t now_ns) {
    auto it = items_.find(key);
    if (it == items_.end()) return nullptr;
    if (model_expired(it->second.deadline_ns, now_ns)) {
      items_.erase(it);
      return nullptr;
    }
    return &it->second;
  }
  bool too_large(const std::string& key, size_t value_bytes) const {
    return key.size() + value_bytes + kCacheItemOverheadBytes > max_item_bytes_;
  }
  void erase(const std::string& key) { items_.erase(key); }

  Reply apply(const Request& rq, uint64_t now_ns) {
    Reply r;
    switch (rq.op) {
      case Op::kSet:
      case Op::kAdd:
      case Op::kReplace:
      case Op::kCas: {
        if (too_large(rq.key, rq.value.size())) {
          if (rq.op == Op::kSet) items_.erase(rq.key);
          r.status = S::kTooLarge;
          return r;
        }
        Item* item = live(rq.key, now_ns);
        if (rq.op == Op::kAdd && item != nullptr) return status(S::kNotStored);
        if (rq.op == Op::kReplace && item == nullptr) return status(S::kNotStored);
        if (rq.op == Op::kCas && item == nullptr) return status(S::kNotFound);
        if (rq.op == Op::kCas && item->cas != rq.number) return status(S::kExists);
        const uint64_t deadline = model_deadline_ns(rq.exptime, now_ns);
        const uint64_t cas = next_cas_++;
        if (model_expired(deadline, now_ns)) {
          items_.erase(rq.key);
        } else {
          items_[rq.key] = Item{rq.value, rq.flags, cas, deadline};
        }
        return status(S::kStored);
      }
      case Op::kAppend:
      case Op::kPrepend: {
        Item* item = live(rq.key, now_ns);
        if (item == nullptr) return status(S::kNotStored);
        std::string value = rq.op == Op::kAppend ? item->value + rq.value : rq.value + item->value;
        if (too_large(rq.key, value.size())) return status(S::kTooLarge);
        item->value = std::move(value);
        item->cas = next_cas_++;
        return status(S::kStored);
      }
      case Op::kGet:
      case Op::kGets: {
        Item* item = live(rq.key, now_ns);
        if (item == nullptr) {
          ++misses;
          return status(S::kNotFound);
        }
        ++hits;
        r.status = S::kOk;
        r.value = item->value;
        r.flags = item->flags;
        r.cas = rq.op == Op::kGets ? item->cas : 0;
        return r;
      }
      case Op::kDelete:
        if (live(rq.key, now_ns) == nullptr) return status(S::kNotFound);
        items_.erase(rq.key);
        return status(S::kDeleted);
      case Op::kIncr:
      case Op::kDecr: {
        Item* item = live(rq.key, now_ns);
        if (item == nullptr) return status(S::kNotFound);
        const std::optional<uint64_t> number = model_parse(item->value);
        if (!number) return status(S::kNonNumeric);
        r.number = rq.op == Op::kIncr ? *number + rq.number : (rq.number > *number ? 0 : *number - rq.number);
        item->value = std::to_string(r.number);
        item->cas = next_cas_++;
        r.status = S::kOk;
        return r;
      }
      case Op::kTouch: {
        Item* item = live(rq.key, now_ns);
        if (item == nullptr) return status(S::kNotFound);
        item->deadline_ns = model_deadline_ns(rq.exptime, now_ns);
        if (model_expired(item->deadline_ns, now_ns)) items_.erase(rq.key);
        return status(S::kTouched);
      }
      case Op::kFlushAll: items_.clear(); return status(S::kOk);
    }
    return r;
  }

  // Live items and their accounted bytes.
  std::pair<uint64_t, uint64_t> live_totals(uint64_t now_ns) const {
    uint64_t count = 0;
    uint64_t bytes = 0;
    for (const auto& [key, item] : items_) {
      if (model_expired(item.deadline_ns, now_ns)) continue;
      ++count;
      bytes += cache_item_bytes(key.size(), item.value.size());
    }
    return {count, bytes};
  }
  const Item* peek(const std::string& key) const {
    auto it = items_.find(key);
    return it == items_.end() ? nullptr : &it->second;
  }
  uint64_t next_cas() const { return next_cas_; }

  uint64_t hits = 0;
  uint64_t misses = 0;

 private:
  static Reply status(CacheStatus s) {
    Reply r;
    r.status = s;
    return r;
  }

  uint64_t max_item_bytes_;
  std::map<std::string, Item> items_;
  uint64_t next_cas_ = 1;
};

Reply run(Cache& cache, const Request& rq) {
  Reply r;
  auto from_get = [&r](const CacheGetResult& g) {
    r.status = g.status;
    if (g.status == S::kOk) {
      r.value = std::string(g.value);
      r.flags = g.flags;
      r.cas = g.cas;
    }
  };
  auto from_arith = [&r](const CacheArithResult& a) {
    r.status = a.status;
    if (a.status == S::kOk) r.number = a.value;
  };
  switch (rq.op) {
    case Op::kSet: r.status = cache.set(rq.key, rq.value, rq.flags, rq.exptime); break;
    case Op::kAdd: r.status = cache.add(rq.key, rq.value, rq.flags, rq.exptime); break;
    case Op::kReplace: r.status = cache.replace(rq.key, rq.value, rq.flags, rq.exptime); break;
    case Op::kAppend: r.status = cache.append(rq.key, rq.value); break;
    case Op::kPrepend: r.status = cache.prepend(rq.key, rq.value); break;
    case Op::kCas: r.status = cache.cas(rq.key, rq.value, rq.flags, rq.exptime, rq.number); break;
    case Op::kGet: from_get(cache.get(rq.key)); break;
    case Op::kGets: from_get(cache.gets(rq.key)); break;
    case Op::kDelete: r.status = cache.remove(rq.key); break;
    case Op::kIncr: from_arith(cache.incr(rq.key, rq.number)); break;
    case Op::kDecr: from_arith(cache.decr(rq.key, rq.number)); break;
    case Op::kTouch: r.status = cache.touch(rq.key, rq.exptime); break;
    case Op::kFlushAll:
      cache.flush_all();
      r.status = S::kOk;
      break;
  }
  return r;
}

class Generator {
 public:
  Generator(uint64_t seed, size_t key_count) : rng_(seed) {
    keys_ = {
        "a", "b", "c", std::string("\0", 1), std::string("\0k\xff", 3), std::string(kCacheMaxKeyBytes, 'L')};
    for (size_t i = keys_.size(); i < key_count; ++i) keys_.push_back("key:" + std::to_string(i));
  }

  Request next(const Model& model, uint64_t now_ns) {
    Request rq;
    rq.key = keys_[rng_.below(keys_.size())];
    const uint64_t dice = rng_.below(1000);
    // set 18%, add 7, replace 7, append 6, prepend 6, cas 9, get 14, gets 10,
    // delete 6, incr 6, decr 5, touch 5.9, flush_all 0.1
    static constexpr std::pair<uint64_t, Op> kMix[] = {
        {180, Op::kSet},  {250, Op::kAdd},   {320, Op::kReplace},  {380, Op::kAppend}, {440, Op::kPrepend},
        {530, Op::kCas},  {670, Op::kGet},   {770, Op::kGets},     {830, Op::kDelete}, {890, Op::kIncr},
        {940, Op::kDecr}, {999, Op::kTouch}, {1000, Op::kFlushAll}};
    for (const auto& [bound, op] : kMix) {
      if (dice < bound) {
        rq.op = op;
        break;
      }
    }
    rq.value = value();
    rq.flags = static_cast<uint32_t>(rng_.chance(0.5) ? rng_.below(4) : rng_.next());
    rq.exptime = exptime(now_ns);
    if (rq.op == Op::kCas) {
      const Model::Item* item = model.peek(rq.key);
      rq.number = item != nullptr && rng_.chance(0.7) ? item->cas : rng_.below(model.next_cas() + 2);
    } else if (rq.op == Op::kIncr || rq.op == Op::kDecr) {
      static constexpr uint64_t kDeltas[] = {0, 1, 1, 2, 9, 100, ~0ull, ~0ull - 1};
      rq.number = rng_.chance(0.8) ? kDeltas[rng_.below(std::size(kDeltas))] : rng_.next();
    }
    return rq;
  }

  const std::vector<std::string>& keys() const { return keys_; }

  // Time moves on between some requests: up to 0.8 s, so that 1..3 s expiries happen.
  uint64_t pause_ns() { return rng_.chance(0.2) ? rng_.below(800'000'000) : 0; }

 private:
  std::string value() {
    const uint64_t dice = rng_.below(100);
    if (dice < 35) {
      static const char* const kNumbers[] = {"0",
                                             "1",
                                             "9",
                                             "99",
                                             "007",
                                             "18446744073709551615",
                                             "18446744073709551610",
                                             "18446744073709551616",
                                             "-1",
                                             "12a"};
      return rng_.chance(0.7) ? kNumbers[rng_.below(std::size(kNumbers))]
                              : std::to_string(rng_.next() >> rng_.below(64));
    }
    if (dice < 45) return {};
    std::string v(rng_.below(48), '\0');
    for (char& c : v) c = static_cast<char>(rng_.below(256));
    return v;
  }

  int64_t exptime(uint64_t now_ns) {
    const int64_t unix_now = kUnixAtZero + static_cast<int64_t>(now_ns / kNsPerS);
    switch (rng_.below(12)) {
      case 0: return 1;
      case 1: return 2;
      case 2: return 3;
      case 3: return -1;
      case 4: return kThirtyDaysS;
      case 5: return kThirtyDaysS + 1;  // a Unix time in 1970
      case 6: return unix_now + 2;
      case 7: return unix_now - 1;
      default: return 0;
    }
  }

  Rng rng_;
  std::vector<std::string> keys_;
};

std::vector<uint64_t> model_seeds() {
  if (const std::optional<uint64_t> seed = ferry::testing::seed_from_env()) return {*seed};
  std::vector<uint64_t> seeds;
  for (uint64_t s = 1; s <= 32; ++s) seeds.push_back(s * 0x9e3779b1 + 17);
  return seeds;
}

constexpr int kModelOps = 5000;

// How often each (command, result) pair occurred: the randomized tests check
// that they reached the outcomes worth testing, not only the easy ones.
using Tally = std::map<std::pair<Op, CacheStatus>, uint64_t>;

// Without memory pressure the engine must agree with the model on every reply.
void run_against_model(uint64_t seed, Tally& tally) {
  ferry::testing::print_seed(seed);
  FakeClock clock(0);
  Cache cache(clock, test_options());
  Model model(cache.options().max_item_bytes);
  Generator generator(seed, 12);
  for (int i = 0; i < kModelOps; ++i) {
    clock.advance_ns(generator.pause_ns());
    const Request rq = generator.next(model, clock.now_ns());
    const Reply expected = model.apply(rq, clock.now_ns());
    const Reply actual = run(cache, rq);
    ASSERT_EQ(actual, expected) << "seed " << seed << " request #" << i << ": " << describe(rq);
    ++tally[{rq.op, actual.status}];
  }
  // Read every key: the engine frees what has expired, and its accounting must
  // then equal the model's live items exactly.
  for (const std::string& key : generator.keys()) {
    Request rq;
    rq.op = Op::kGet;
    rq.key = key;
    const Reply expected = model.apply(rq, clock.now_ns());
    ASSERT_EQ(run(cache, rq), expected) << "seed " << seed << " final " << describe(rq);
  }
  const auto [live_items, live_bytes] = model.live_totals(clock.now_ns());
  const CacheStats stats = cache.stats();
  EXPECT_EQ(stats.items, live_items) << "seed " << seed;
  EXPECT_EQ(stats.bytes_used, live_bytes) << "seed " << seed;
  EXPECT_EQ(stats.get_hits, model.hits) << "seed " << seed;
  EXPECT_EQ(stats.get_misses, model.misses) << "seed " << seed;
  EXPECT_EQ(stats.evictions, 0u) << "seed " << seed;
}

// Under a small memory limit the engine may lose any item to eviction, and
// nothing else: every reply must be the model's, or the model's once the
// key is taken as absent (evicted). Never a wrong or stale value, and never
// over the limit.
void run_against_model_evicting(uint64_t seed) {
  ferry::testing::print_seed(seed, "(evicting)");
  constexpr uint64_t kLimitBytes = 1200;  // about 10 of 24 keys' items
  FakeClock clock(0);
  Cache cache(clock, test_options(kLimitBytes));
  Model model(kLimitBytes);
  Generator generator(seed, 24);
  uint64_t evicted_replies = 0;
  for (int i = 0; i < kModelOps; ++i) {
    clock.advance_ns(generator.pause_ns());
    const Request rq = generator.next(model, clock.now_ns());
    const Model before = model;
    Reply expected = model.apply(rq, clock.now_ns());
    const Reply actual = run(cache, rq);
    if (actual != expected) {
      ASSERT_GT(cache.stats().evictions, 0u)
          << "seed " << seed << " request #" << i << ": " << describe(rq) << " differs from the model "
          << expected << " with no eviction yet";
      model = before;
      model.erase(rq.key);
      expected = model.apply(rq, clock.now_ns());
      ++evicted_replies;
    }
    ASSERT_EQ(actual, expected) << "seed " << seed << " request #" << i << ": " << describe(rq);
    ASSERT_LE(cache.stats().bytes_used, kLimitBytes) << "seed " << seed << " request #" << i;
  }
  EXPECT_GT(cache.stats().evictions, 0u) << "seed " << seed << ": the limit should have been hit";
  EXPECT_EQ(cache.stats().get_hits, model.hits) << "seed " << seed;
  EXPECT_EQ(cache.stats().get_misses, model.misses) << "seed " << seed;
  std::cout << "[ seed     ] " << cache.stats().evictions << " evictions, " << evicted_replies
            << " replies explained by them\n";
}

TEST(CacheModelTest, RandomCommandsAgreeWithAMapModel) {
  Tally tally;
  for (uint64_t seed : model_seeds()) {
    run_against_model(seed, tally);
    if (::testing::Test::HasFatalFailure()) return;
  }
  if (ferry::testing::seed_from_env()) return;  // one seed alone need not reach everything
  const std::pair<Op, CacheStatus> wanted[] = {
      {Op::kSet, S::kStored},       {Op::kAdd, S::kStored},        {Op::kAdd, S::kNotStored},
      {Op::kReplace, S::kStored},   {Op::kReplace, S::kNotStored}, {Op::kAppend, S::kStored},
      {Op::kAppend, S::kNotStored}, {Op::kPrepend, S::kStored},    {Op::kPrepend, S::kNotStored},
      {Op::kCas, S::kStored},       {Op::kCas, S::kExists},        {Op::kCas, S::kNotFound},
      {Op::kGet, S::kOk},           {Op::kGet, S::kNotFound},      {Op::kGets, S::kOk},
      {Op::kGets, S::kNotFound},    {Op::kDelete, S::kDeleted},    {Op::kDelete, S::kNotFound},
      {Op::kIncr, S::kOk},          {Op::kIncr, S::kNonNumeric},   {Op::kIncr, S::kNotFound},
      {Op::kDecr, S::kOk},          {Op::kDecr, S::kNonNumeric},   {Op::kDecr, S::kNotFound},
      {Op::kTouch, S::kTouched},    {Op::kTouch, S::kNotFound},
  };
  for (const auto& [op, status] : wanted) {
    EXPECT_GT((tally[{op, status}]), 0u)
        << "never reached: " << kOpNames[static_cast<int>(op)] << " -> " << status;
  }
}

TEST(CacheModelTest, RandomCommandsUnderEvictionNeverReturnWrongValues) {
  for (uint64_t seed : model_seeds()) {
    run_against_model_evicting(seed);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace ferry::store
