// A replicated transactional key-value store on HyperLoop's transaction API
// (SIGCOMM'18 §5.2, the MongoDB shape): a client front end turns puts,
// removes, read-modify-writes and multi-key transactions into log records
// (TxnClient::append) that the replicas' NICs apply to the database image
// (execute_and_advance) under group write locks; replicas never run code on
// the write path. Any replica serves reads from its own image under its read
// lock, so reads are linearizable on every replica.
//
// The database image (TxnClient's database area, the same on every replica;
// docs/hyperloop.md "Transactional store"):
//   [0, 64)        header: magic, slots, key_max, value_max
//   slots          open addressing (linear probing from hash(key) % slots);
//                  each slot {u64 state (0 empty, 1 live, 2 deleted), u64
//                  checksum, u16 key_bytes, u16 0, u32 value_bytes, key,
//                  value} padded to 64 bytes. The checksum covers the slot
//                  (but itself): a reader probing past a slot another
//                  writer is changing sees it torn and looks again.
// Locks are striped: key k takes lock hash(k) % locks; a transaction takes
// its keys' locks in ascending order.
//
// Not here yet: the ordered index for range scans (YCSB-E).
//
// Threads: TxnKv is used by one thread (its TxnClient's rule); a
// TxnKvReplicaReader by any threads of its replica.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/hyperloop/txn.h"

namespace ferry::hyperloop {

struct TxnKvOptions {
  uint32_t slots = 1024;
  uint32_t key_max = 32;
  uint32_t value_max = 1024;
  uint32_t locks = 64;  // lock words used in the lock group (stripes)
};

// Bytes of database the layout needs (TxnOptions::db_bytes at least this).
uint64_t txn_kv_db_bytes(const TxnKvOptions& options);

struct TxnKvOp {
  enum Kind : uint8_t { kPut, kRemove };
  Kind kind = kPut;
  std::string_view key;
  std::span<const uint8_t> value;  // kPut
};

struct TxnKvCounters {
  uint64_t puts = 0;
  uint64_t removes = 0;
  uint64_t transactions = 0;  // multi-key
  uint64_t records = 0;
};

class TxnKv {
 public:
  // Formats the database image (one record: the header) on a fresh
  // TxnClient. kInvalidArgument if the layout does not fit its database.
  static Result<std::unique_ptr<TxnKv>> create(TxnClient& txn, const TxnKvOptions& options = {});

  // Each write is one record, applied on every replica under the key's
  // write lock before it returns. kInvalidArgument for a key or value over
  // the limits; kResourceExhausted when the table is full.
  Status put(std::string_view key, std::span<const uint8_t> value);
  // kNotFound if absent.
  Status remove(std::string_view key);
  // The value as the front end knows it (its mirror of the image); kNotFound.
  Result<std::vector<uint8_t>> get(std::string_view key) const;
  // Reads the current value (nullopt: absent) under the write lock and
  // writes what `fn` returns (nullopt: remove), atomically.
  Status read_modify_write(std::string_view key,
                           const std::function<std::optional<std::vector<uint8_t>>(
                               std::optional<std::span<const uint8_t>>)>& fn);
  // All of `ops` in one record under all their keys' locks: every replica
  // applies all or none (also across a power failure: the record replays
  // whole). kNotFound if a remove names an absent key (nothing applied).
  Status transaction(std::span<const TxnKvOp> ops);

  const TxnKvCounters& counters() const { return counters_; }
  const TxnKvOptions& options() const { return options_; }
  uint32_t lock_of(std::string_view key) const;

 private:
  TxnKv(TxnClient& txn, const TxnKvOptions& options) : txn_(txn), options_(options) {}
  // The slot a write of `key` goes to, with the chain's state in `planned`
  // (slots this record already claims). kResourceExhausted when full.
  Result<uint32_t> place(std::string_view key, const std::vector<uint32_t>& planned) const;
  Status apply(std::span<const TxnKvOp> ops);

  TxnClient& txn_;
  TxnKvOptions options_;
  TxnKvCounters counters_;
};

// Reads on one replica: under that replica's read lock, from its image.
class TxnKvReplicaReader {
 public:
  // `db`: the replica's database (TxnClient::replica_db, or its region in
  // its own process); `locks`: its lock words.
  TxnKvReplicaReader(std::span<const uint8_t> db, ReplicaLocks locks, const TxnKvOptions& options)
      : db_(db), locks_(locks), options_(options) {}
  // kNotFound if absent. Waits (spinning) while a writer holds the key's lock.
  Result<std::vector<uint8_t>> get(std::string_view key);
  uint64_t retries() const { return retries_; }  // lookups repeated over a torn slot or a held lock

 private:
  std::span<const uint8_t> db_;
  ReplicaLocks locks_;
  TxnKvOptions options_;
  uint64_t retries_ = 0;
};

}  // namespace ferry::hyperloop
