// Key-value services on Ferry's RPC layer: the memcached-compatible cache
// engine (cache.h) and the persistent PmKv engine (pmkv.h) behind an
// rpc::Server, one engine partition per server worker (JUNE BERRY §5.1:
// clients route a key to worker hash(key) % workers), and the client side
// that encodes the requests.
//
// Which requests are nilext (committed by the NIC's ACK in OQ mode): cache
// set and quiet delete, PmKv put and remove -- they return nothing, cannot
// fail by state and are idempotent. A set can still fail by its request alone
// (key or item too large); KvClient checks that before sending, so a nilext
// set never fails at the server. Everything else is answered by the worker.
//
// Payload (docs/rpc-format.md): a 24-byte KvHeader, the key, the value.
// Reply status: the engine's CacheStatus (cache) or kPm* codes (PmKv);
// kKvMalformed for a payload that does not parse.
//
// Thread rules: a service's handlers run on the server's workers, each on
// its own partition; partition(w) may be used by worker w's thread or while
// the server is stopped. A KvClient is used by its session's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/status.h"
#include "ferry/pm/domain.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"
#include "ferry/store/cache.h"
#include "ferry/store/pmkv.h"

namespace ferry::store {

// RPC request types.
enum KvRequestType : uint16_t {
  kCacheSet = 20,  // nilext
  kCacheAdd = 21,
  kCacheReplace = 22,
  kCacheAppend = 23,
  kCachePrepend = 24,
  kCacheCas = 25,
  kCacheGet = 26,
  kCacheGets = 27,
  kCacheDelete = 28,
  kCacheDeleteQuiet = 29,  // nilext: delete without a result
  kCacheIncr = 30,
  kCacheDecr = 31,
  kCacheTouch = 32,
  kPmPut = 40,     // nilext
  kPmGet = 41,
  kPmRemove = 42,  // nilext
};

// Reply status bytes of the PmKv service (the cache service uses CacheStatus).
inline constexpr uint8_t kPmOk = 0;
inline constexpr uint8_t kPmNotFound = 1;
inline constexpr uint8_t kPmError = 2;  // the engine refused (full, too large, corrupt)
inline constexpr uint8_t kKvMalformed = 0xFF;

struct KvHeader {
  uint16_t key_bytes;
  uint16_t reserved;  // 0
  uint32_t flags;     // cache: client flags
  int64_t exptime;    // cache: memcached expiry
  uint64_t arg;       // cache: cas unique (cas) or delta (incr/decr)
};
static_assert(sizeof(KvHeader) == 24);

// The route of a key: XXH3-64 of its bytes (the worker is route % workers).
uint64_t key_route(std::string_view key);

// ---- server side ----

class CacheService {
 public:
  // Registers the cache request types on `server` (before start()), with one
  // Cache per worker of `per_worker` options each. `clock` must outlive it.
  static Result<std::unique_ptr<CacheService>> attach(rpc::Server& server, const Clock& clock,
                                                      const CacheOptions& per_worker);
  Cache& partition(uint32_t worker) { return *caches_[worker]; }
  uint32_t partitions() const { return static_cast<uint32_t>(caches_.size()); }

 private:
  CacheService() = default;
  std::vector<std::unique_ptr<Cache>> caches_;
};

// Room for puts (JUNE BERRY: a nilext put commits at the NIC's ACK, before
// the worker runs it, so it must not be able to fail for lack of room).
// PmKvService is the server's Admission: before worker w posts a receive
// buffer, its store reserves room the size of the buffer, contiguous
// (PmKv::reserve); the put whose request lay at bytes [b, b + n) of the
// buffer places its record in [b, b + n) of that room -- a spot no other
// request of the buffer can use, and always large enough: a request is its
// record plus 32 bytes (RPC header 32 + KvHeader 24 - record header 24).
// The record is padded and aligned to 256 B (H5/H6) where that fits the
// spot, else laid in whole 64 B lines. When the buffer has executed, the
// room its puts did not use goes back. The server persists the room's
// offset with the buffer, so recovery re-runs puts into the same spots
// (PmKv::adopt).
// When a store cannot reserve a buffer's room, the buffer stays unposted and
// the NIC holds new requests back (RNR; clients with a finite rnr_retry get
// kUnavailable) until room is freed -- which only deletes already admitted
// can do. So size a store for its data plus `buffers` x reservation_bytes per
// worker, or a full store stops serving. Room must be contiguous: a heap
// fragmented by overwrites at high occupancy can refuse a buffer's room while
// holding more free bytes (PmKv has no compaction).
class PmKvService {
 public:
  // What one receive buffer reserves in a worker's store.
  static uint64_t reservation_bytes(const rpc::ServerOptions& options);
  // Registers the PmKv request types on `server`, worker w's partition in
  // regions[w] (PM regions of `domain`, the server host's persistence domain).
  // `open_existing`: recover the stores they hold (after a failure), else
  // format them. Attach before the server's start(): a durable server's
  // recovery re-executes puts through these handlers.
  static Result<std::unique_ptr<PmKvService>> attach(rpc::Server& server, pm::PersistenceDomain& domain,
                                                     std::span<pm::Region* const> regions, bool open_existing,
                                                     const PmKvOptions& options = {});
  PmKv& partition(uint32_t worker) { return *stores_[worker]; }
  uint32_t partitions() const { return static_cast<uint32_t>(stores_.size()); }

 private:
  PmKvService() = default;
  std::vector<std::unique_ptr<PmKv>> stores_;
  uint64_t reservation_bytes_ = 0;
  uint64_t stride_bytes_ = 0;
  uint64_t strides_ = 1;
};

// ---- client side ----

// Encodes a KvHeader + key + value payload into `out`; returns its size, or
// 0 if it does not fit.
size_t encode_kv(std::span<uint8_t> out, std::string_view key, std::string_view value, uint32_t flags = 0,
                 int64_t exptime = 0, uint64_t arg = 0);

// What a cache get/gets reply carries (parse_cache_value).
struct CacheValue {
  uint32_t flags = 0;
  uint64_t cas = 0;
  std::string_view value;  // into the reply
};
bool parse_cache_value(std::span<const uint8_t> reply, CacheValue* out);

class KvClient {
 public:
  // `item_limits`: the server's per-worker cache options, for the check that
  // keeps a nilext set from failing at the server.
  explicit KvClient(rpc::Session& session, const CacheOptions& item_limits = {});

  // Cache. set and delete_quiet are sent nilext when `nilext`.
  Status set_async(std::string_view key, std::string_view value, uint32_t flags, int64_t exptime, bool nilext,
                   rpc::Callback done);
  Status get_async(std::string_view key, rpc::Callback done);
  Status request_async(KvRequestType type, std::string_view key, std::string_view value, uint32_t flags,
                       int64_t exptime, uint64_t arg, rpc::Callback done);
  Result<rpc::CallReply> request(KvRequestType type, std::string_view key, std::string_view value = {},
                                 uint32_t flags = 0, int64_t exptime = 0, uint64_t arg = 0);
  // PmKv. put and remove are sent nilext when `nilext`.
  Status pm_put_async(std::string_view key, std::string_view value, bool nilext, rpc::Callback done);
  Status pm_get_async(std::string_view key, rpc::Callback done);

  rpc::Session& session() { return session_; }

 private:
  Status send(KvRequestType type, std::string_view key, std::string_view value, uint32_t flags, int64_t exptime,
              uint64_t arg, bool nilext, rpc::Callback done);
  rpc::Session& session_;
  CacheOptions limits_;
  std::vector<uint8_t> scratch_;
};

}  // namespace ferry::store
