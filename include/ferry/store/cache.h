// Cache: a memcached-compatible in-memory cache engine -- the back end one
// JUNE BERRY server worker owns (NSDI'25 uses Memcached behind its RPC layer).
// It has memcached's command semantics (protocol.txt: set, add, replace,
// append, prepend, cas, get, gets, delete, incr, decr, touch, flush_all) as a
// library API; no text protocol and no network code. Spec and the differences
// from memcached: docs/cache-engine.md.
//
//  - Items: key (binary, 1..kCacheMaxKeyBytes), value (binary), 32-bit client
//    flags, an expiry and a 64-bit cas unique taken from a per-engine counter
//    by every successful store, append/prepend, cas and incr/decr.
//  - Memory: each item is accounted as key + value + kCacheItemOverheadBytes.
//    A store that would exceed the limit evicts least-recently-used items
//    until it fits. Recency is refreshed by get/gets/touch and every store.
//  - Time comes from the Clock given at construction (sans-IO): tests use a
//    FakeClock. Expired items behave as absent for every command and are
//    freed when a command finds them or when they reach the LRU tail.
//
// Thread rules: a Cache belongs to one thread (one server worker) and takes
// no locks; distinct Cache objects are independent. The Clock must outlive
// the Cache. No exceptions: every outcome is a CacheStatus.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>
#include <vector>

#include "ferry/common/clock.h"

namespace ferry::store {

inline constexpr size_t kCacheMaxKeyBytes = 250;  // memcached's KEY_MAX_LENGTH
// Accounted per item on top of key and value bytes: the 56-byte item header
// (links for the hash chain and the LRU list, cas, expiry, flags, sizes) and
// one 8-byte hash index slot. Not counted: allocator overhead, buffer
// rounding and reuse slack, and the index's second slot per item right after
// it doubles (it holds 1..2 slots per item).
inline constexpr size_t kCacheItemOverheadBytes = 64;
// Expiry values up to this are relative seconds; larger ones are Unix times.
inline constexpr int64_t kCacheMaxRelativeExptimeS = 60 * 60 * 24 * 30;

// The outcome of a command. Success codes first; the last three are client
// errors the caller can detect before sending (key size, item size) or that
// depend on the stored value (incr/decr of a non-number).
enum class CacheStatus : uint8_t {
  kOk,          // get/gets hit; incr/decr applied; check_item: acceptable
  kStored,      // set/add/replace/append/prepend/cas stored the item
  kNotStored,   // add: key present; replace/append/prepend: key absent
  kExists,      // cas: the item changed since the caller's gets
  kNotFound,    // key absent (get/gets miss, cas, delete, incr/decr, touch)
  kDeleted,     // delete removed the item
  kTouched,     // touch updated the expiry
  kTooLarge,    // the item would exceed max_item_bytes or the memory limit
  kNonNumeric,  // incr/decr: the value is not a decimal uint64
  kBadKey,      // key empty or longer than kCacheMaxKeyBytes
};
std::string_view cache_status_name(CacheStatus status);
std::ostream& operator<<(std::ostream& os, CacheStatus status);

// The commands, for the RPC layer's dispatch and for is_nilext.
enum class Command : uint8_t {
  kSet,
  kAdd,
  kReplace,
  kAppend,
  kPrepend,
  kCas,
  kGet,
  kGets,
  kDelete,       // the caller wants DELETED / NOT_FOUND
  kDeleteQuiet,  // the caller discards the reply (memcached binary DELETEQ, text "noreply")
  kIncr,
  kDecr,
  kTouch,
  kFlushAll,
};
std::string_view cache_command_name(Command command);

// JUNE BERRY's nil-externalizing test: true exactly for commands that return
// nothing a client needs and cannot fail because of the store's state --
// kSet (always STORED), kDeleteQuiet (the key is absent afterwards either
// way) and kFlushAll. set can still fail by its request alone (kBadKey,
// kTooLarge): the RPC layer must run check_item() on a set, with the server's
// options, and reject a failing one before treating it as nilext. Every
// command that returns state or can fail by state (get/gets, add, replace,
// append, prepend, cas, incr, decr, touch, kDelete) is not nilext.
bool is_nilext(Command command);

struct CacheOptions {
  // Accounted bytes (see kCacheItemOverheadBytes) the items may use.
  uint64_t memory_limit_bytes = 64ull << 20;  // memcached's -m 64
  // The largest accounted item (key + value + overhead), memcached's -I.
  // The effective limit is also capped by memory_limit_bytes and 4 GiB - 1.
  uint64_t max_item_bytes = 1ull << 20;
  // The Unix time, in seconds, at which the Clock read 0: absolute expiry
  // times (> kCacheMaxRelativeExptimeS) are converted with it. For a real
  // clock use unix_seconds_at_clock_zero(clock).
  int64_t unix_seconds_at_clock_zero = 0;
};

// Accounted size of an item.
constexpr uint64_t cache_item_bytes(size_t key_bytes, size_t value_bytes) {
  return uint64_t{key_bytes} + value_bytes + kCacheItemOverheadBytes;
}
// Whether a set/add/replace/cas of this size is accepted by a Cache with
// `options`, independent of its contents: kOk, kBadKey or kTooLarge. The RPC
// layer calls it before treating a set as nilext.
CacheStatus check_item(const CacheOptions& options, size_t key_bytes, size_t value_bytes);
// Reads the system clock once: the Unix time (s) at which `clock` read 0.
int64_t unix_seconds_at_clock_zero(const Clock& clock);

// get/gets. `value` points into the Cache and is valid until the next
// non-const call on it. cas is 0 for get (the memcached get reply has none).
struct CacheGetResult {
  CacheStatus status = CacheStatus::kNotFound;  // kOk, kNotFound or kBadKey
  std::string_view value;
  uint32_t flags = 0;
  uint64_t cas = 0;
};

// incr/decr: the new value when status is kOk.
struct CacheArithResult {
  CacheStatus status = CacheStatus::kNotFound;  // kOk, kNotFound, kNonNumeric, kBadKey, kTooLarge
  uint64_t value = 0;
};

struct CacheStats {
  uint64_t get_hits = 0;           // get/gets that found a live item
  uint64_t get_misses = 0;         // get/gets that did not
  uint64_t evictions = 0;          // live items removed to make room
  uint64_t expired_reclaimed = 0;  // expired items freed (found by a command, at the LRU tail,
                                   // or stored/touched with an expiry already past)
  uint64_t items = 0;              // items held, including expired ones not yet freed
  uint64_t bytes_used = 0;         // accounted bytes of those items
  uint64_t memory_limit_bytes = 0;
};

// Commands take the key and value as views; they must not point into this
// Cache's own storage (a view from get/gets). Exptime: 0 never expires; 1 ..
// kCacheMaxRelativeExptimeS is seconds from now; larger is a Unix time (in
// the past: expired at once); negative is expired at once. A store whose
// expiry is already past returns its normal result but leaves the key absent.
class Cache {
 public:
  explicit Cache(const Clock& clock, CacheOptions options = {});
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // set: stores unconditionally (kStored). A set refused as kTooLarge also
  // removes the key's old value, as memcached does: no stale value outlives
  // a failed write.
  CacheStatus set(std::string_view key, std::string_view value, uint32_t flags, int64_t exptime);
  // add: kStored if the key is absent, else kNotStored (and the existing
  // item's recency is refreshed, as memcached does).
  CacheStatus add(std::string_view key, std::string_view value, uint32_t flags, int64_t exptime);
  // replace: kStored if the key is present, else kNotStored.
  CacheStatus replace(std::string_view key, std::string_view value, uint32_t flags, int64_t exptime);
  // append/prepend: add bytes after/before the existing value, keeping its
  // flags and expiry. kNotStored if absent; kTooLarge (item unchanged) if the
  // result would be too large.
  CacheStatus append(std::string_view key, std::string_view value);
  CacheStatus prepend(std::string_view key, std::string_view value);
  // cas: stores if the item's cas unique is still `cas_unique` (kStored),
  // kExists if it differs, kNotFound if the key is absent.
  CacheStatus cas(std::string_view key, std::string_view value, uint32_t flags, int64_t exptime,
                  uint64_t cas_unique);

  // get/gets: kOk with value and flags (gets: and the cas unique) or
  // kNotFound. A hit refreshes the item's recency.
  CacheGetResult get(std::string_view key);
  CacheGetResult gets(std::string_view key);
  // delete: kDeleted or kNotFound.
  CacheStatus remove(std::string_view key);
  // incr/decr: the value must be decimal digits only (leading zeros allowed,
  // no sign or spaces) of a number below 2^64, else kNonNumeric.
  // incr wraps at 2^64; decr stops at 0. The result is stored as decimal
  // text (its length may change) with the item's flags and expiry and a new
  // cas unique.
  CacheArithResult incr(std::string_view key, uint64_t delta);
  CacheArithResult decr(std::string_view key, uint64_t delta);
  // touch: sets a new expiry (cas unique unchanged): kTouched or kNotFound.
  CacheStatus touch(std::string_view key, int64_t exptime);
  // flush_all: frees every item at once (the cas counter continues).
  void flush_all();

  CacheStats stats() const;
  const CacheOptions& options() const { return options_; }

  struct Item;  // internal (src/store/cache.cc)

 private:
  enum class StoreMode : uint8_t { kSet, kAdd, kReplace, kAppend, kPrepend, kCas };
  CacheStatus store(StoreMode mode, std::string_view key, std::string_view value, uint32_t flags,
                    int64_t exptime, uint64_t cas_unique);
  CacheGetResult lookup(std::string_view key, bool with_cas);
  CacheArithResult arith(std::string_view key, uint64_t delta, bool increment);

  // The clock time (ns) an item stored now with `exptime` expires at.
  uint64_t deadline_ns(int64_t exptime, uint64_t now_ns) const;
  // The item of `key` if present and live; an expired one is freed.
  Item* find_live(std::string_view key, uint64_t hash, uint64_t now_ns);
  Item** find_link(std::string_view key, uint64_t hash);
  // Replaces `existing` (or inserts when null) with an item of `key` whose
  // value is `value_bytes` long, evicting LRU items first if needed. Returns
  // the item to fill: `existing` itself when its buffer is reused (value
  // bytes untouched), else a new, unlinked one; commit() links it.
  Item* prepare(Item* existing, std::string_view key, size_t value_bytes, uint64_t now_ns);
  void commit(Item* existing, Item* item, uint64_t hash, size_t value_bytes, uint32_t flags,
              uint64_t deadline_ns);
  void make_room(uint64_t need_bytes, const Item* keep, uint64_t now_ns);
  void unlink_and_free(Item* item);
  void grow_index();
  void lru_push_front(Item* item);
  void lru_unlink(Item* item);
  void lru_refresh(Item* item);

  const Clock& clock_;
  CacheOptions options_;
  uint64_t max_item_bytes_;     // effective: min of the limits
  std::vector<Item*> buckets_;  // chained hash index; size a power of two
  Item* lru_head_ = nullptr;    // most recently used
  Item* lru_tail_ = nullptr;    // least recently used: evicted first
  uint64_t next_cas_ = 1;
  CacheStats stats_;
};

}  // namespace ferry::store
