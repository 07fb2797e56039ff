#include "ferry/workload/keys.h"

#include <string>

#include "ferry/common/assert.h"
#include "ferry/common/rng.h"

namespace ferry::workload {
namespace {

// In ASCII order, so the numeric suffix of equal-length keys sorts like the
// numbers it encodes.
constexpr std::string_view kDigits =
    "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";
static_assert(kDigits.size() == 64);

// ceil(64 / 6): base-64 digits needed for any uint64_t.
constexpr uint32_t kDigitsForAnyKey = 11;

}  // namespace

uint64_t fnv1a64_bytes(std::string_view bytes) {
  uint64_t hash = kFnvOffsetBasis64;
  for (const char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= kFnvPrime64;
  }
  return hash;
}

uint64_t fnv1a64(uint64_t value) {
  uint64_t hash = kFnvOffsetBasis64;
  for (int i = 0; i < 8; ++i) {
    hash ^= value & 0xff;
    hash *= kFnvPrime64;
    value >>= 8;
  }
  // Java's Math.abs on the signed result: negate in two's complement when the
  // sign bit is set (INT64_MIN maps to itself, as in Java).
  return (hash >> 63) != 0 ? ~hash + 1 : hash;
}

std::string ycsb_key(uint64_t keynum) { return "user" + std::to_string(fnv1a64(keynum)); }

uint64_t fixed_size_key_capacity(uint32_t key_bytes) {
  if (key_bytes == 0) return 0;
  if (key_bytes >= kDigitsForAnyKey) return UINT64_MAX;
  return uint64_t{1} << (6 * key_bytes);  // key_bytes <= 10: at most 2^60
}

void write_fixed_size_key(uint64_t keynum, std::span<char> out) {
  FERRY_ASSERT(!out.empty(), "a key needs at least one byte");
  FERRY_ASSERT(out.size() >= kDigitsForAnyKey ||
                   keynum < fixed_size_key_capacity(static_cast<uint32_t>(out.size())),
               "key number ", keynum, " does not fit a ", out.size(), "-byte key");
  const size_t suffix = out.size() < kDigitsForAnyKey ? out.size() : kDigitsForAnyKey;
  const size_t filler = out.size() - suffix;
  uint64_t digits = keynum;
  for (size_t i = 0; i < suffix; ++i) {
    out[out.size() - 1 - i] = kDigits[digits & 63];
    digits >>= 6;
  }
  // Ten 6-bit characters per 64-bit hash word.
  uint64_t word = 0;
  for (size_t i = 0; i < filler; ++i) {
    if (i % 10 == 0) word = mix64(keynum ^ mix64(i / 10));
    out[i] = kDigits[word & 63];
    word >>= 6;
  }
}

std::string fixed_size_key(uint64_t keynum, uint32_t key_bytes) {
  std::string key(key_bytes, '\0');
  write_fixed_size_key(keynum, key);
  return key;
}

}  // namespace ferry::workload
