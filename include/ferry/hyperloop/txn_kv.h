// A replicated transactional key-value store on HyperLoop's transaction API
// (SIGCOMM'18 §5.2, the MongoDB shape): a client front end turns puts,
// removes, read-modify-writes and multi-key transactions into log records
// (TxnClient::append) that the replicas' NICs apply to the database image
// (execute_and_advance) under group write locks; replicas never run code on
// the write path. Any replica serves reads from its own image under its read
// lock, so reads are linearizable on every replica.
//
// The database image (TxnClient's database area, the same on every replica;
// docs/hyperloop-storage.md "Transactional store"):
//   [0, 64)        header: magic "HLPTXKV2", u32 slots, key_max, value_max,
//                  locks, index_levels (a version-1 image had no index)
//   slots          open addressing (linear probing from hash(key) % slots);
//                  each slot {u64 state (0 empty, 1 live, 2 deleted), u64
//                  checksum, u16 key_bytes, u16 0, u32 value_bytes, key,
//                  value} padded to 64 bytes. The checksum covers the slot
//                  (but itself): a reader probing past a slot another
//                  writer is changing sees it torn and looks again.
//   index          the ordered index, a skip list over the live slots in
//                  key order (bytewise): slots + 1 nodes of index_levels
//                  u32 next pointers (48 bytes); node 0 is the head, node
//                  i + 1 belongs to slot i; a pointer is a node number, 0
//                  ends a level. A key's height is a function of its hash
//                  (1/4 of the keys go up a level), so every front end
//                  builds the same list.
// An insert of a new key or a remove writes its slot, its node and its
// predecessors' nodes in ONE record (absolute writes, applied all or none,
// also across a power failure); an update of an existing key writes its
// slot only, never the index.
// Locks are striped: key k takes lock hash(k) % locks; a transaction takes
// its keys' locks in ascending order. Lock `locks` (one past the stripes) is
// the index lock: a writer that changes the index takes it too, last. A
// scan on a replica read-locks every stripe and the index lock, so it sees
// the image between whole records (see TxnKvReplicaReader::scan).
//
// Threads: TxnKv is used by one thread (its TxnClient's rule); a
// TxnKvReplicaReader by any threads of its replica.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/hyperloop/txn.h"

namespace ferry::hyperloop {

struct TxnKvOptions {
  uint32_t slots = 1024;
  uint32_t key_max = 32;
  uint32_t value_max = 1024;
  uint32_t locks = 64;  // lock stripes; the lock group holds locks + 1 words (the index lock)
};

// Bytes of database the layout needs (TxnOptions::db_bytes at least this).
uint64_t txn_kv_db_bytes(const TxnKvOptions& options);
// Lock words the store uses in the lock group: the stripes and the index
// lock (what TxnClient::release_stale_locks needs after a client crash).
uint32_t txn_kv_lock_words(const TxnKvOptions& options);

// A scan's answer: (key, value) in ascending key order.
using TxnKvEntries = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

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
  // Attaches to the image an earlier front end formatted (TxnClient
  // initialized with resume = true: after a client restart, a power failure
  // of replicas or a chain recovery). Takes every lock of the store over
  // (TxnClient::take_over_locks: one front end per store, so a lock still
  // held, or a writer's intent, is a dead front end's; it is not released
  // first, and must not be by the caller either -- a reader would get in
  // before the dead front end's last record ran again), runs the records the
  // log still holds (appended, not executed), so the mirror and the replicas
  // hold every logged record, and unlocks. Checks the header and walks the
  // whole index (O(slots)). kInvalidArgument: bad options, a database too
  // small for them, or a TxnKv image of other options; kDataLoss: not a
  // TxnKv image (another magic, a version-1 image) or a malformed index;
  // kTimedOut: a reader never left a lock (the locks taken stay held; open
  // again).
  static Result<std::unique_ptr<TxnKv>> open(TxnClient& txn, const TxnKvOptions& options);

  // Each write is one record, applied on every replica under the key's
  // write lock before it returns. kInvalidArgument for a key or value over
  // the limits; kResourceExhausted when the table is full. An error of the
  // chain once the record may be on some replica's log (kUnavailable,
  // kTimedOut, ...) leaves it in doubt: its locks stay held, so that no
  // replica serves what the others may not hold, and every later write is
  // kFailedPrecondition until a resumed front end opens the store (TxnKv::open
  // takes the locks over and runs the record again). So does an unlock that
  // does not get through to every replica after the write was applied (the
  // write succeeded; its stripe stays locked on some replica until the
  // resumed front end takes the locks over and releases them): in_doubt()
  // says when to resume.
  Status put(std::string_view key, std::span<const uint8_t> value);
  // kNotFound if absent.
  Status remove(std::string_view key);
  // The value as the front end knows it (its mirror of the image); kNotFound.
  Result<std::vector<uint8_t>> get(std::string_view key) const;
  // Up to `count` entries with key >= start_key, in key order, from the
  // front end's mirror (what every replica holds: this front end is the
  // only writer). kInvalidArgument for a start key over key_max.
  Result<TxnKvEntries> scan(std::string_view start_key, uint32_t count) const;
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
  // A write left the store in doubt (see put): every later write is
  // kFailedPrecondition, and some replica may refuse reads, until a resumed
  // front end opens the store again. Resume as soon as this is true.
  bool in_doubt() const { return in_doubt_; }
  uint32_t lock_of(std::string_view key) const;

 private:
  TxnKv(TxnClient& txn, const TxnKvOptions& options) : txn_(txn), options_(options) {}
  // The slot a write of `key` goes to, with the chain's state in `planned`
  // (slots this record already claims). kResourceExhausted when full.
  Result<uint32_t> place(std::string_view key, const std::vector<uint32_t>& planned) const;
  Status apply(std::span<const TxnKvOp> ops);
  // Whether `ops` insert a key the mirror lacks or remove one: then the
  // writer takes the index lock too.
  bool changes_index(std::span<const TxnKvOp> ops) const;

  TxnClient& txn_;
  TxnKvOptions options_;
  TxnKvCounters counters_;
  // A write failed after its record was appended (or while appending): its
  // locks stay held and every later write is refused until a resumed front
  // end opens the store again.
  bool in_doubt_ = false;
};

// Reads on one replica: under that replica's read lock, from its image.
class TxnKvReplicaReader {
 public:
  // `db`: the replica's database (TxnClient::replica_db, or its region in
  // its own process); `locks`: its lock words.
  TxnKvReplicaReader(std::span<const uint8_t> db, ReplicaLocks locks, const TxnKvOptions& options)
      : db_(db), locks_(locks), options_(options) {}
  // kNotFound if absent. Waits (spinning) while a writer holds the key's
  // lock. A slot on the probe path that fails its checksum is looked at
  // again under every stripe's read lock; if it still fails, kDataLoss (a
  // damaged image, e.g. after a crash), never an endless retry.
  Result<std::vector<uint8_t>> get(std::string_view key);
  // Up to `count` entries with key >= start_key, in key order, from this
  // replica's image. Read-locks every stripe and the index lock, ascending,
  // all or none (a held one: release those taken, spin, try again; a reader
  // never waits holding a lock, so a writer's gCAS is never blocked by a
  // waiting reader). Linearizable: every record is applied while its writer
  // holds at least one stripe (its keys' stripes), so while the scan holds
  // all of them no record is half-applied and none starts; the image is the
  // state after exactly the records whose writes completed before the last
  // read lock was taken, which is the scan's linearization point.
  // kDataLoss: the image is not a well-formed TxnKv image of these options
  // (a crashed replica's region may hold anything): the walk checks every
  // node number, slot, size, checksum and that keys strictly ascend, so it
  // stays inside `db` and ends (at most slots steps per level).
  // kInvalidArgument: a start key over key_max, `db` too small, or a header
  // of other options.
  Result<TxnKvEntries> scan(std::string_view start_key, uint32_t count);
  // Whether `db` holds a TxnKv image of these options (its header; no
  // lock: the header is written once, by TxnKv::create). kInvalidArgument:
  // `db` too small or other options; kDataLoss: no TxnKv image (a database
  // not formatted yet reads as this).
  Status check_image() const;
  uint64_t retries() const { return retries_; }  // lookups repeated over a torn slot or a held lock

 private:
  std::span<const uint8_t> db_;
  ReplicaLocks locks_;
  TxnKvOptions options_;
  uint64_t retries_ = 0;
};

}  // namespace ferry::hyperloop
