// The cache engine (include/ferry/store/cache.h, docs/cache-engine.md).
//
// Items are one allocation each: the header below followed by the key and
// then the value bytes. The index is a chained hash table whose chains run
// through the items themselves (no node allocation per key); the LRU list is
// intrusive too. An overwrite reuses the item's buffer when the new key+value
// fits and fills at least half of it, so a steady-state set of same-sized
// values allocates nothing.
#include "ferry/store/cache.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <ostream>
#include <type_traits>

#include "ferry/common/assert.h"
#include "ferry/common/rng.h"

namespace ferry::store {

namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();  // deadline of exptime 0
constexpr uint64_t kNsPerS = 1'000'000'000;
constexpr size_t kInitialBuckets = 64;
constexpr size_t kCapacityRoundBytes = 16;

// The largest accounted item a Cache with `options` accepts. Item sizes are
// 32-bit inside (Cache::Item), hence the last bound.
uint64_t effective_max_item_bytes(const CacheOptions& options) {
  return std::min(
      {options.max_item_bytes, options.memory_limit_bytes, uint64_t{std::numeric_limits<uint32_t>::max()}});
}

bool valid_key(std::string_view key) { return !key.empty() && key.size() <= kCacheMaxKeyBytes; }

uint64_t hash_key(std::string_view key) { return mix64(std::hash<std::string_view>{}(key)); }

bool expired_at(uint64_t deadline_ns, uint64_t now_ns) {
  return deadline_ns != kNever && now_ns >= deadline_ns;
}

// memcpy that accepts (nullptr, 0), as an empty string_view may be.
void copy_bytes(char* dst, const char* src, size_t n) {
  if (n != 0) std::memcpy(dst, src, n);
}

}  // namespace

struct Cache::Item {
  Item* hash_next;
  Item* lru_prev;  // toward the most recently used
  Item* lru_next;  // toward the least recently used
  uint64_t cas;
  uint64_t deadline_ns;  // expired once the clock reaches it; kNever for exptime 0
  uint32_t value_bytes;
  uint32_t capacity_bytes;  // room for key + value after the header
  uint32_t flags;
  uint8_t key_bytes;

  char* data() { return reinterpret_cast<char*>(this + 1); }
  const char* data() const { return reinterpret_cast<const char*>(this + 1); }
  std::string_view key() const { return {data(), key_bytes}; }
  char* value() { return data() + key_bytes; }
  std::string_view value_view() const { return {data() + key_bytes, value_bytes}; }
  uint64_t accounted_bytes() const { return cache_item_bytes(key_bytes, value_bytes); }
};

static_assert(kCacheMaxKeyBytes <= std::numeric_limits<uint8_t>::max(), "key length is a uint8_t");
// The accounted overhead covers the header and one index slot (the bucket
// array holds one to two slots per item: it doubles when items outnumber buckets).
static_assert(sizeof(Cache::Item) + sizeof(Cache::Item*) <= kCacheItemOverheadBytes,
              "kCacheItemOverheadBytes must cover the item header and its index slot");
static_assert(alignof(Cache::Item) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);

namespace {

Cache::Item* allocate_item(std::string_view key, size_t value_bytes) {
  size_t capacity = key.size() + value_bytes;
  capacity = (capacity + kCapacityRoundBytes - 1) / kCapacityRoundBytes * kCapacityRoundBytes;
  void* memory = ::operator new(sizeof(Cache::Item) + capacity);
  auto* item = new (memory) Cache::Item{};
  item->capacity_bytes = static_cast<uint32_t>(capacity);
  item->key_bytes = static_cast<uint8_t>(key.size());
  std::memcpy(item->data(), key.data(), key.size());
  return item;
}

void free_item(Cache::Item* item) {
  static_assert(std::is_trivially_destructible_v<Cache::Item>);
  ::operator delete(static_cast<void*>(item));
}

}  // namespace

// ---- names, nilext, options ----

std::string_view cache_status_name(CacheStatus status) {
  switch (status) {
    case CacheStatus::kOk: return "OK";
    case CacheStatus::kStored: return "STORED";
    case CacheStatus::kNotStored: return "NOT_STORED";
    case CacheStatus::kExists: return "EXISTS";
    case CacheStatus::kNotFound: return "NOT_FOUND";
    case CacheStatus::kDeleted: return "DELETED";
    case CacheStatus::kTouched: return "TOUCHED";
    case CacheStatus::kTooLarge: return "TOO_LARGE";
    case CacheStatus::kNonNumeric: return "NON_NUMERIC";
    case CacheStatus::kBadKey: return "BAD_KEY";
  }
  return "UNKNOWN";
}

std::ostream& operator<<(std::ostream& os, CacheStatus status) { return os << cache_status_name(status); }

std::string_view cache_command_name(Command command) {
  switch (command) {
    case Command::kSet: return "set";
    case Command::kAdd: return "add";
    case Command::kReplace: return "replace";
    case Command::kAppend: return "append";
    case Command::kPrepend: return "prepend";
    case Command::kCas: return "cas";
    case Command::kGet: return "get";
    case Command::kGets: return "gets";
    case Command::kDelete: return "delete";
    case Command::kDeleteQuiet: return "delete (quiet)";
    case Command::kIncr: return "incr";
    case Command::kDecr: return "decr";
    case Command::kTouch: return "touch";
    case Command::kFlushAll: return "flush_all";
  }
  return "unknown";
}

bool is_nilext(Command command) {
  switch (command) {
    case Command::kSet:
    case Command::kDeleteQuiet:
    case Command::kFlushAll: return true;
    case Command::kAdd:
    case Command::kReplace:
    case Command::kAppend:
    case Command::kPrepend:
    case Command::kCas:
    case Command::kGet:
    case Command::kGets:
    case Command::kDelete:
    case Command::kIncr:
    case Command::kDecr:
    case Command::kTouch: return false;
  }
  return false;
}

CacheStatus check_item(const CacheOptions& options, size_t key_bytes, size_t value_bytes) {
  if (key_bytes == 0 || key_bytes > kCacheMaxKeyBytes) return CacheStatus::kBadKey;
  // Compare without forming key + value + overhead, which could wrap for an absurd value size.
  const uint64_t max_bytes = effective_max_item_bytes(options);
  if (max_bytes < cache_item_bytes(key_bytes, 0) ||
      value_bytes > max_bytes - cache_item_bytes(key_bytes, 0)) {
    return CacheStatus::kTooLarge;
  }
  return CacheStatus::kOk;
}

int64_t unix_seconds_at_clock_zero(const Clock& clock) {
  const int64_t unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  const int64_t since_zero_ns = unix_ns - static_cast<int64_t>(clock.now_ns());
  // Floor division, so that a clock zero before 1970 still rounds down.
  int64_t seconds = since_zero_ns / static_cast<int64_t>(kNsPerS);
  if (since_zero_ns % static_cast<int64_t>(kNsPerS) < 0) --seconds;
  return seconds;
}

// ---- construction ----

Cache::Cache(const Clock& clock, CacheOptions options)
    : clock_(clock),
      options_(options),
      max_item_bytes_(effective_max_item_bytes(options)),
      buckets_(kInitialBuckets, nullptr) {
  stats_.memory_limit_bytes = options.memory_limit_bytes;
}

Cache::~Cache() { flush_all(); }

CacheStats Cache::stats() const { return stats_; }

// ---- commands ----

CacheStatus Cache::set(std::string_view key, std::string_view value, uint32_t flags, int64_t exptime) {
  return store(StoreMode::kSet, key, value, flags, exptime, 0);
}

CacheStatus Cache::add(std::string_view key, std::string_view value, uint32_t flags, int64_t exptime) {
  return store(StoreMode::kAdd, key, value, flags, exptime, 0);
}

CacheStatus Cache::replace(std::string_view key, std::string_view value, uint32_t flags, int64_t exptime) {
  return store(StoreMode::kReplace, key, value, flags, exptime, 0);
}

CacheStatus Cache::append(std::string_view key, std::string_view value) {
  return store(StoreMode::kAppend, key, value, 0, 0, 0);
}

CacheStatus Cache::prepend(std::string_view key, std::string_view value) {
  return store(StoreMode::kPrepend, key, value, 0, 0, 0);
}

CacheStatus Cache::cas(std::string_view key, std::string_view value, uint32_t flags, int64_t exptime,
                       uint64_t cas_unique) {
  return store(StoreMode::kCas, key, value, flags, exptime, cas_unique);
}

CacheStatus Cache::store(StoreMode mode, std::string_view key, std::string_view value, uint32_t flags,
                         int64_t exptime, uint64_t cas_unique) {
  if (!valid_key(key)) return CacheStatus::kBadKey;
  const uint64_t now_ns = clock_.now_ns();
  const uint64_t hash = hash_key(key);
  const bool concatenate = mode == StoreMode::kAppend || mode == StoreMode::kPrepend;

  // The size check comes before any state is consulted: a too-large item is
  // refused whatever the cache holds (what lets the RPC layer check a set up front).
  if (!concatenate && check_item(options_, key.size(), value.size()) != CacheStatus::kOk) {
    if (mode == StoreMode::kSet) {
      if (Item* old = *find_link(key, hash)) unlink_and_free(old);
    }
    return CacheStatus::kTooLarge;
  }

  Item* existing = find_live(key, hash, now_ns);
  switch (mode) {
    case StoreMode::kSet: break;
    case StoreMode::kAdd:
      if (existing != nullptr) {
        lru_refresh(existing);
        return CacheStatus::kNotStored;
      }
      break;
    case StoreMode::kReplace:
    case StoreMode::kAppend:
    case StoreMode::kPrepend:
      if (existing == nullptr) return CacheStatus::kNotStored;
      break;
    case StoreMode::kCas:
      if (existing == nullptr) return CacheStatus::kNotFound;
      if (existing->cas != cas_unique) return CacheStatus::kExists;
      break;
  }

  const size_t old_value_bytes = existing != nullptr ? existing->value_bytes : 0;
  size_t value_bytes = value.size();
  uint64_t deadline = 0;
  if (concatenate) {
    if (value.size() > max_item_bytes_ ||
        cache_item_bytes(key.size(), old_value_bytes + value.size()) > max_item_bytes_) {
      return CacheStatus::kTooLarge;
    }
    value_bytes += old_value_bytes;
    flags = existing->flags;
    deadline = existing->deadline_ns;
  } else {
    deadline = deadline_ns(exptime, now_ns);
    if (expired_at(deadline, now_ns)) {
      // Stored and expired in the same instant: the key is absent afterwards.
      if (existing != nullptr) unlink_and_free(existing);
      ++next_cas_;
      ++stats_.expired_reclaimed;
      return CacheStatus::kStored;
    }
  }

  Item* item = prepare(existing, key, value_bytes, now_ns);
  char* dst = item->value();
  if (mode == StoreMode::kAppend) {
    if (item != existing) copy_bytes(dst, existing->value(), old_value_bytes);
    copy_bytes(dst + old_value_bytes, value.data(), value.size());
  } else if (mode == StoreMode::kPrepend) {
    if (item == existing) {
      if (old_value_bytes != 0) std::memmove(dst + value.size(), dst, old_value_bytes);
    } else {
      copy_bytes(dst + value.size(), existing->value(), old_value_bytes);
    }
    copy_bytes(dst, value.data(), value.size());
  } else {
    copy_bytes(dst, value.data(), value.size());
  }
  commit(existing, item, hash, value_bytes, flags, deadline);
  return CacheStatus::kStored;
}

CacheGetResult Cache::get(std::string_view key) { return lookup(key, false); }

CacheGetResult Cache::gets(std::string_view key) { return lookup(key, true); }

CacheGetResult Cache::lookup(std::string_view key, bool with_cas) {
  CacheGetResult result;
  if (!valid_key(key)) {
    result.status = CacheStatus::kBadKey;
    return result;
  }
  Item* item = find_live(key, hash_key(key), clock_.now_ns());
  if (item == nullptr) {
    ++stats_.get_misses;
    result.status = CacheStatus::kNotFound;
    return result;
  }
  ++stats_.get_hits;
  lru_refresh(item);
  result.status = CacheStatus::kOk;
  result.value = item->value_view();
  result.flags = item->flags;
  result.cas = with_cas ? item->cas : 0;
  return result;
}

CacheStatus Cache::remove(std::string_view key) {
  if (!valid_key(key)) return CacheStatus::kBadKey;
  Item* item = find_live(key, hash_key(key), clock_.now_ns());
  if (item == nullptr) return CacheStatus::kNotFound;
  unlink_and_free(item);
  return CacheStatus::kDeleted;
}

CacheArithResult Cache::incr(std::string_view key, uint64_t delta) { return arith(key, delta, true); }

CacheArithResult Cache::decr(std::string_view key, uint64_t delta) { return arith(key, delta, false); }

CacheArithResult Cache::arith(std::string_view key, uint64_t delta, bool increment) {
  CacheArithResult result;
  if (!valid_key(key)) {
    result.status = CacheStatus::kBadKey;
    return result;
  }
  const uint64_t now_ns = clock_.now_ns();
  const uint64_t hash = hash_key(key);
  Item* existing = find_live(key, hash, now_ns);
  if (existing == nullptr) {
    result.status = CacheStatus::kNotFound;
    return result;
  }

  // Digits only: no sign, no spaces; any number of leading zeros.
  const std::string_view text = existing->value_view();
  uint64_t number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number, 10);
  const bool digits_only =
      !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits_only || error != std::errc() || end != text.data() + text.size()) {
    result.status = CacheStatus::kNonNumeric;
    return result;
  }

  if (increment) {
    number += delta;  // wraps at 2^64, as memcached
  } else {
    number = delta > number ? 0 : number - delta;
  }
  char digits[std::numeric_limits<uint64_t>::digits10 + 1];
  const auto [digits_end, format_error] = std::to_chars(digits, digits + sizeof(digits), number);
  FERRY_ASSERT(format_error == std::errc(), "uint64 does not fit its decimal buffer");
  const size_t length = static_cast<size_t>(digits_end - digits);
  if (cache_item_bytes(key.size(), length) > max_item_bytes_) {
    result.status = CacheStatus::kTooLarge;
    return result;
  }

  const uint32_t flags = existing->flags;
  const uint64_t deadline = existing->deadline_ns;
  Item* item = prepare(existing, key, length, now_ns);
  std::memcpy(item->value(), digits, length);
  commit(existing, item, hash, length, flags, deadline);
  result.status = CacheStatus::kOk;
  result.value = number;
  return result;
}

CacheStatus Cache::touch(std::string_view key, int64_t exptime) {
  if (!valid_key(key)) return CacheStatus::kBadKey;
  const uint64_t now_ns = clock_.now_ns();
  Item* item = find_live(key, hash_key(key), now_ns);
  if (item == nullptr) return CacheStatus::kNotFound;
  const uint64_t deadline = deadline_ns(exptime, now_ns);
  if (expired_at(deadline, now_ns)) {
    unlink_and_free(item);
    ++stats_.expired_reclaimed;
    return CacheStatus::kTouched;
  }
  item->deadline_ns = deadline;
  lru_refresh(item);
  return CacheStatus::kTouched;
}

void Cache::flush_all() {
  for (Item* item = lru_head_; item != nullptr;) {
    Item* next = item->lru_next;
    free_item(item);
    item = next;
  }
  std::fill(buckets_.begin(), buckets_.end(), nullptr);
  lru_head_ = nullptr;
  lru_tail_ = nullptr;
  stats_.items = 0;
  stats_.bytes_used = 0;
}

// ---- expiry ----

uint64_t Cache::deadline_ns(int64_t exptime, uint64_t now_ns) const {
  if (exptime == 0) return kNever;
  if (exptime < 0) return 0;  // already past
  if (exptime <= kCacheMaxRelativeExptimeS) {
    const uint64_t delta_ns = static_cast<uint64_t>(exptime) * kNsPerS;
    return now_ns > kNever - delta_ns ? kNever : now_ns + delta_ns;
  }
  // A Unix time: seconds since the clock's zero, in clock nanoseconds. 128-bit
  // arithmetic because both terms are arbitrary int64 values.
  const __int128 since_zero_s = static_cast<__int128>(exptime) - options_.unix_seconds_at_clock_zero;
  if (since_zero_s <= 0) return 0;
  const __int128 since_zero_ns = since_zero_s * kNsPerS;
  return since_zero_ns >= static_cast<__int128>(kNever) ? kNever : static_cast<uint64_t>(since_zero_ns);
}

// ---- index ----

Cache::Item** Cache::find_link(std::string_view key, uint64_t hash) {
  Item** link = &buckets_[hash & (buckets_.size() - 1)];
  while (*link != nullptr && (*link)->key() != key) link = &(*link)->hash_next;
  return link;
}

Cache::Item* Cache::find_live(std::string_view key, uint64_t hash, uint64_t now_ns) {
  Item* item = *find_link(key, hash);
  if (item == nullptr) return nullptr;
  if (expired_at(item->deadline_ns, now_ns)) {
    unlink_and_free(item);
    ++stats_.expired_reclaimed;
    return nullptr;
  }
  return item;
}

void Cache::grow_index() {
  std::vector<Item*> buckets(buckets_.size() * 2, nullptr);
  const uint64_t mask = buckets.size() - 1;
  for (Item* item = lru_head_; item != nullptr; item = item->lru_next) {
    Item*& bucket = buckets[hash_key(item->key()) & mask];
    item->hash_next = bucket;
    bucket = item;
  }
  buckets_.swap(buckets);
}

void Cache::unlink_and_free(Item* item) {
  Item** link = find_link(item->key(), hash_key(item->key()));
  FERRY_ASSERT(*link == item, "item not in its hash chain");
  *link = item->hash_next;
  lru_unlink(item);
  stats_.bytes_used -= item->accounted_bytes();
  --stats_.items;
  free_item(item);
}

// ---- storing ----

Cache::Item* Cache::prepare(Item* existing, std::string_view key, size_t value_bytes, uint64_t now_ns) {
  const uint64_t new_bytes = cache_item_bytes(key.size(), value_bytes);
  FERRY_ASSERT(new_bytes <= max_item_bytes_, "prepare() of an item over the limit");
  uint64_t old_bytes = 0;
  if (existing != nullptr) {
    // At the head it cannot be the victim of make_room().
    lru_refresh(existing);
    old_bytes = existing->accounted_bytes();
  }
  if (stats_.bytes_used - old_bytes + new_bytes > options_.memory_limit_bytes) {
    make_room(stats_.bytes_used - old_bytes + new_bytes - options_.memory_limit_bytes, existing, now_ns);
  }
  const size_t needed = key.size() + value_bytes;
  if (existing != nullptr && needed <= existing->capacity_bytes && 2 * needed >= existing->capacity_bytes) {
    return existing;
  }
  return allocate_item(key, value_bytes);
}

void Cache::make_room(uint64_t need_bytes, const Item* keep, uint64_t now_ns) {
  uint64_t freed = 0;
  while (freed < need_bytes) {
    Item* victim = lru_tail_;
    // Cannot fail: the new item fits the limit on its own, and `keep` is at the head.
    FERRY_ASSERT(victim != nullptr && victim != keep, "make_room() ran out of items");
    if (expired_at(victim->deadline_ns, now_ns)) {
      ++stats_.expired_reclaimed;
    } else {
      ++stats_.evictions;
    }
    freed += victim->accounted_bytes();
    unlink_and_free(victim);
  }
}

void Cache::commit(Item* existing, Item* item, uint64_t hash, size_t value_bytes, uint32_t flags,
                   uint64_t deadline_ns) {
  const uint64_t old_bytes = existing != nullptr ? existing->accounted_bytes() : 0;
  bool inserted = false;
  if (item != existing) {
    Item** link = find_link(item->key(), hash);
    FERRY_ASSERT(*link == existing, "the item to replace is not where its key is");
    if (existing != nullptr) {
      item->hash_next = existing->hash_next;
      lru_unlink(existing);
      free_item(existing);
    } else {
      item->hash_next = nullptr;
      ++stats_.items;
      inserted = true;
    }
    *link = item;
    lru_push_front(item);
  }
  item->value_bytes = static_cast<uint32_t>(value_bytes);
  item->flags = flags;
  item->deadline_ns = deadline_ns;
  item->cas = next_cas_++;
  stats_.bytes_used = stats_.bytes_used - old_bytes + item->accounted_bytes();
  FERRY_DASSERT(stats_.bytes_used <= options_.memory_limit_bytes, "over the memory limit");
  if (inserted && stats_.items > buckets_.size()) grow_index();
}

// ---- LRU list ----

void Cache::lru_push_front(Item* item) {
  item->lru_prev = nullptr;
  item->lru_next = lru_head_;
  if (lru_head_ != nullptr) lru_head_->lru_prev = item;
  lru_head_ = item;
  if (lru_tail_ == nullptr) lru_tail_ = item;
}

void Cache::lru_unlink(Item* item) {
  if (item->lru_prev != nullptr) {
    item->lru_prev->lru_next = item->lru_next;
  } else {
    lru_head_ = item->lru_next;
  }
  if (item->lru_next != nullptr) {
    item->lru_next->lru_prev = item->lru_prev;
  } else {
    lru_tail_ = item->lru_prev;
  }
  item->lru_prev = nullptr;
  item->lru_next = nullptr;
}

void Cache::lru_refresh(Item* item) {
  if (lru_head_ == item) return;
  lru_unlink(item);
  lru_push_front(item);
}

}  // namespace ferry::store
