// Key hashing and key names for the workload generators.
//
// fnv1a64() and ycsb_key() reproduce YCSB's hashed key names
// (site.ycsb.Utils.fnvhash64 and CoreWorkload.buildKeyName with
// insertorder=hashed), so a Ferry run touches the same key strings as a YCSB
// run over the same key numbers. fixed_size_key() makes keys of an exact byte
// length for workloads whose key size is part of the specification (Twitter
// clusters: 41-66 B, PMemKV: 8 B).
//
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ferry::workload {

inline constexpr uint64_t kFnvOffsetBasis64 = 0xCBF29CE484222325ULL;
inline constexpr uint64_t kFnvPrime64 = 1099511628211ULL;

// Plain FNV-1a 64 over `bytes` (Fowler, Noll, Vo), with no post-processing.
uint64_t fnv1a64_bytes(std::string_view bytes);

// YCSB's Utils.fnvhash64: FNV-1a 64 over the 8 bytes of `value`, least
// significant byte first, then the absolute value of the result read as a
// signed 64-bit integer. Like Java's Math.abs, a result of INT64_MIN stays
// 0x8000000000000000 (the only output >= 2^63; it occurs with probability
// 2^-64).
uint64_t fnv1a64(uint64_t value);

// YCSB's key name for `keynum` with insertorder=hashed (and the default
// zeropadding=1): "user" followed by the decimal fnv1a64(keynum), 5 to 23
// bytes long, e.g. keynum 0 -> "user6284781860667377211".
std::string ycsb_key(uint64_t keynum);

// How many distinct key numbers fixed-size keys of `key_bytes` bytes can name:
// 64^key_bytes, saturated at UINT64_MAX for key_bytes >= 11 (every uint64_t).
// 0 for key_bytes == 0.
uint64_t fixed_size_key_capacity(uint32_t key_bytes);

// Writes the key of exactly out.size() bytes that names `keynum`.
// Precondition (asserted): 0 < out.size() and keynum <
// fixed_size_key_capacity(out.size()).
//
// Layout: the last min(size, 11) bytes are the base-64 digits of keynum, most
// significant first, so distinct numbers give distinct keys. The digit
// alphabet ("-", "0"-"9", "A"-"Z", "_", "a"-"z") is in ASCII order, so keys of
// at most 11 bytes sort like their numbers. Bytes before the suffix are filler
// from the same alphabet, derived by hashing keynum, so long keys do not share
// a long common prefix (real hashed or namespaced keys do not). Every byte is
// printable and none is a space.
void write_fixed_size_key(uint64_t keynum, std::span<char> out);

// The same key as a string of `key_bytes` bytes (same preconditions).
std::string fixed_size_key(uint64_t keynum, uint32_t key_bytes);

}  // namespace ferry::workload
