// FNV-1a 64 (YCSB's Utils.fnvhash64), YCSB key names and fixed-size keys.
#include "ferry/workload/keys.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>

namespace ferry::workload {
namespace {

// Published FNV-1a 64 vectors (Fowler/Noll/Vo reference test suite):
// "" -> the offset basis, "a" -> 0xaf63dc4c8601ec8c, "foobar" ->
// 0x85944171f73967e8.
TEST(Fnv1a64, BytesMatchPublishedVectors) {
  EXPECT_EQ(fnv1a64_bytes(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64_bytes("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64_bytes("foobar"), 0x85944171f73967e8ULL);
}

// One step by hand: ("a" is byte 0x61)
//   basis ^ 0x61 = 0xcbf29ce484222344
//   * 1099511628211 mod 2^64 = 0xaf63dc4c8601ec8c.
TEST(Fnv1a64, OneStepByHand) {
  EXPECT_EQ((0xcbf29ce484222325ULL ^ 0x61) * 1099511628211ULL, 0xaf63dc4c8601ec8cULL);
}

// fnv1a64(v) hashes v's 8 bytes, low byte first, then takes |signed result|.
// Vectors (computed from that definition):
//   v = 0: raw hash of 8 zero bytes 0xa8c7f832281a39c5 (sign bit set), so the
//          result is 2^64 - raw = 0x573807cdd7e5c63b = 6284781860667377211;
//   v = 1: raw 0x89cd31291d2aefa4 -> 8517097267634966620;
//   v = 42: raw 0xff3add6b3789daef -> 55488592825689361.
TEST(Fnv1a64, YcsbValueHashVectors) {
  EXPECT_EQ(fnv1a64(0), 6284781860667377211ULL);
  EXPECT_EQ(fnv1a64(1), 8517097267634966620ULL);
  EXPECT_EQ(fnv1a64(42), 55488592825689361ULL);
}

TEST(Fnv1a64, ValueHashIsAbsoluteValueOfByteHashLowByteFirst) {
  for (const uint64_t v : {0ULL, 1ULL, 255ULL, 256ULL, 0x0123456789abcdefULL, ~0ULL}) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    const auto raw = static_cast<int64_t>(fnv1a64_bytes(bytes));
    const uint64_t expected =
        raw < 0 ? uint64_t{0} - static_cast<uint64_t>(raw) : static_cast<uint64_t>(raw);
    EXPECT_EQ(fnv1a64(v), expected) << v;
    EXPECT_LT(fnv1a64(v), uint64_t{1} << 63) << v;
  }
}

// "user6284781860667377211" is the first key every hashed-order YCSB load
// inserts (keynum 0).
TEST(YcsbKey, IsUserFollowedByDecimalHash) {
  EXPECT_EQ(ycsb_key(0), "user6284781860667377211");
  EXPECT_EQ(ycsb_key(1), "user8517097267634966620");
  EXPECT_EQ(ycsb_key(42), "user55488592825689361");
  for (uint64_t k = 0; k < 1000; ++k) {
    const std::string key = ycsb_key(k);
    ASSERT_EQ(key.rfind("user", 0), 0u);
    ASSERT_GE(key.size(), 5u);
    ASSERT_LE(key.size(), 23u);
    ASSERT_TRUE(
        std::all_of(key.begin() + 4, key.end(), [](char c) { return c >= '0' && c <= '9'; }));
  }
}

TEST(FixedSizeKey, CapacityIsSixBitsPerByte) {
  EXPECT_EQ(fixed_size_key_capacity(0), 0u);
  EXPECT_EQ(fixed_size_key_capacity(1), 64u);
  EXPECT_EQ(fixed_size_key_capacity(8), uint64_t{1} << 48);
  EXPECT_EQ(fixed_size_key_capacity(10), uint64_t{1} << 60);
  EXPECT_EQ(fixed_size_key_capacity(11), UINT64_MAX);
  EXPECT_EQ(fixed_size_key_capacity(66), UINT64_MAX);
}

TEST(FixedSizeKey, ExactLengthPrintableAndDeterministic) {
  for (uint32_t bytes = 1; bytes <= 70; ++bytes) {
    for (const uint64_t k : {0ULL, 1ULL, 63ULL, 12345ULL, ~0ULL}) {
      if (bytes < 11 && k >= fixed_size_key_capacity(bytes)) continue;
      const std::string key = fixed_size_key(k, bytes);
      ASSERT_EQ(key.size(), bytes);
      ASSERT_TRUE(std::all_of(key.begin(), key.end(), [](char c) {
        return std::isgraph(static_cast<unsigned char>(c));
      })) << key;
      ASSERT_EQ(key, fixed_size_key(k, bytes));
    }
  }
}

TEST(FixedSizeKey, DistinctNumbersGiveDistinctKeys) {
  for (const uint32_t bytes : {2u, 8u, 41u, 44u, 66u}) {
    std::set<std::string> keys;
    constexpr uint64_t kKeys = 4096;  // == 64^2, the whole 2-byte space
    for (uint64_t k = 0; k < kKeys; ++k) keys.insert(fixed_size_key(k, bytes));
    EXPECT_EQ(keys.size(), kKeys) << bytes << "-byte keys";
  }
  // Numbers differing only in high bits still differ (the suffix holds all 64).
  EXPECT_NE(fixed_size_key(1, 44), fixed_size_key(1 | (uint64_t{1} << 63), 44));
}

TEST(FixedSizeKey, ShortKeysSortLikeTheirNumbers) {
  for (uint64_t k = 1; k < 5000; ++k) {
    ASSERT_LT(fixed_size_key(k - 1, 8), fixed_size_key(k, 8)) << k;
  }
  EXPECT_LT(fixed_size_key((uint64_t{1} << 48) - 2, 8), fixed_size_key((uint64_t{1} << 48) - 1, 8));
}

TEST(FixedSizeKey, LongKeysDoNotShareAPrefix) {
  // Filler comes from a hash of the number, so consecutive numbers differ early.
  const std::string a = fixed_size_key(1000, 44);
  const std::string b = fixed_size_key(1001, 44);
  EXPECT_NE(a.substr(0, 8), b.substr(0, 8));
}

TEST(FixedSizeKey, WriteMatchesString) {
  char buffer[41];
  write_fixed_size_key(777, buffer);
  EXPECT_EQ(std::string(buffer, sizeof buffer), fixed_size_key(777, 41));
}

TEST(FixedSizeKeyDeathTest, NumberTooLargeForLengthAborts) {
  EXPECT_DEATH(fixed_size_key(64, 1), "does not fit");
}

}  // namespace
}  // namespace ferry::workload
