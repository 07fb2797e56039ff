// Replicated RocksDB, a replica's side (SIGCOMM'18 §5.1: replicas "wake up
// periodically off the critical path to bring the in-memory snapshot in sync
// with NVM"): the applier. Each replica keeps its own RocksDB database in
// its own directory; its CPU, off the critical path, reads the WAL stream
// the NICs keep in its PM (wal_stream.h), parses RocksDB's WAL records from
// it and applies each write batch to its database, together with its
// cursor (how far it applied) in the same batch, then syncs its database's
// WAL and only then reports the cursor as durable: the head overwrites
// stream bytes only behind every replica's durable cursor
// (WalStreamProgress). So a replica's directory plus its region always hold
// every acknowledged write, whatever happens to the head.
//
// A replica that restarts (its database as its disk kept it: what it synced)
// first replays its PM log (hyperloop::replay_txn_log, recover_replica
// below), then reopens its applier: the cursor comes back with the
// database, and the stream still holds everything from it on.
//
// A new member copies the database from a neighbour (copy_to: a RocksDB
// checkpoint, cursor included) and the neighbour's region (log and stream),
// then opens its applier on both (§5 "RocksDB Recovery"). A database made
// outside the stream (the head's, after a load with the WAL off) becomes a
// replica's with adopt().
//
// The replica's database holds the head's keys in its default column family
// and the cursor in the column family "ferry.wal_stream"; open it with both
// (wal_applier_column_families). Reads there are eventually consistent: a
// prefix of the head's history.
//
// Threads: every method may be called from any thread; one mutex serializes
// them (poll holds it while it applies).
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/rocksdb/replicated_wal.h"
#include "ferry/rocksdb/wal_stream.h"

namespace ferry::rocks {

inline constexpr const char* kWalCursorColumnFamily = "ferry.wal_stream";

// The column families of a replica's database (default, cursor): what
// rocksdb::DB::Open needs to open its directory.
std::vector<::rocksdb::ColumnFamilyDescriptor> wal_applier_column_families(const ::rocksdb::Options& options);

struct WalApplierCounters {
  uint64_t chunks = 0;           // stream chunks read
  uint64_t wal_records = 0;      // RocksDB WAL records (write batches) applied
  uint64_t operations = 0;       // puts, deletes, ... in them
  uint64_t torn_tail_bytes = 0;  // a WAL's incomplete last record, dropped when a newer WAL began
  uint64_t syncs = 0;            // the database's WAL synced (a durable cursor)
};

class WalApplier {
 public:
  // Opens (creating it if missing) the replica's database in `dir` with
  // `options` (its env says where its files go; create_if_missing and
  // create_missing_column_families are set here), over `region`, the
  // replica's region of the data group, which must outlive the applier.
  // A new database follows the stream from its first chunk (poll).
  // kFailedPrecondition: the database follows another stream than the
  // region's; kDataLoss: its cursor is malformed, or the region holds no
  // transaction layout; RocksDB's errors as kUnavailable.
  static Result<std::unique_ptr<WalApplier>> open(std::span<const uint8_t> region, const std::string& dir,
                                                  const ::rocksdb::Options& options);
  // Makes the database in `dir` (a consistent copy, e.g. a checkpoint of the
  // head's, taken when the stream stood at `at`: sync_stream()) a replica's
  // database following the stream from `at`. Then open() it.
  static Status adopt(const std::string& dir, const WalStreamCursor& at, const ::rocksdb::Options& options);
  ~WalApplier();

  // Applies every complete WAL record the stream holds past the cursor (at
  // most `max_records`), then syncs the database's WAL and makes the cursor
  // durable. Returns the records applied. No stream yet: 0.
  // kFailedPrecondition: a new database and a stream that no longer begins
  // at position 0 (copy a neighbour's database instead), or a stream with
  // another id than the database follows. kDataLoss: the
  // stream breaks (a chunk that does not verify or does not follow, a WAL
  // record that fails its CRC, the stream's begin past the cursor);
  // kUnimplemented: a WAL record this applier cannot apply (another column
  // family, a merge without a merge operator, two-phase commit, WAL
  // compression); RocksDB's errors as kUnavailable. After an error the
  // applier stays where its last durable cursor was and may be polled again.
  Result<uint64_t> poll(uint64_t max_records = ~uint64_t{0});

  // A consistent copy of this replica's database (cursor included) in
  // `dir`, which must not exist: a joining member's. kUnavailable on
  // RocksDB's errors.
  Status copy_to(const std::string& dir);

  // The cursor as the database durably holds it, and as applied (ahead
  // until the next sync).
  WalStreamCursor durable_cursor() const;
  WalStreamCursor applied_cursor() const;
  WalApplierCounters counters() const;
  // The replica's database (reads: a prefix of the head's history). Valid
  // while the applier lives.
  ::rocksdb::DB* db() const { return db_.get(); }

 private:
  WalApplier(std::span<const uint8_t> region, const WalStreamReader& reader);
  Status restart_from_cursor_locked();
  Status consume_chunk_locked(const WalChunk& chunk);
  Result<bool> parse_one_locked(uint64_t* applied);
  Status apply_locked(std::string_view payload, uint64_t record_end);
  Status sync_locked();

  mutable std::mutex mu_;
  std::span<const uint8_t> region_;
  WalStreamReader reader_;
  std::unique_ptr<::rocksdb::DB> db_;
  std::vector<::rocksdb::ColumnFamilyHandle*> handles_;  // default, cursor
  WalStreamCursor durable_;                              // synced in the database
  WalStreamCursor applied_;                              // written to the database
  // What the parser holds of the current WAL: its bytes from `window_at_`
  // (a physical record's start) to `received_`, the chunks they came in,
  // and the fragments of a logical record being assembled.
  uint64_t next_chunk_ = 0;  // stream position of the next chunk to read
  uint64_t file_ = 0;
  uint64_t window_at_ = 0;
  uint64_t received_ = 0;
  std::string window_;        // from window_used_ on: bytes [window_at_, received_)
  uint64_t window_used_ = 0;  // parsed bytes at its front, dropped at the next chunk
  struct ChunkSpan {
    uint64_t position, offset, bytes;
  };
  std::vector<ChunkSpan> chunks_;  // those holding [the cursor's offset, received_)
  std::string fragments_;
  bool in_fragments_ = false;
  WalApplierCounters counters_;
};

// In process: every replica's applier in one table, as the head's
// WalStreamProgress (a deployed head reads the same from the replicas'
// control path). A replica with no applier attached (crashed, not yet
// reopened) keeps the last durable position it reported.
class AppliedPositions final : public WalStreamProgress {
 public:
  explicit AppliedPositions(uint32_t replicas) : last_(replicas, 0), appliers_(replicas, nullptr) {}
  // Replica r's applier (nullptr: none running). Not owned; detach it before
  // it is destroyed.
  void attach(uint32_t replica, WalApplier* applier);
  // needed_from: the lowest durable cursor position of any replica.
  Result<uint64_t> needed_from() override;
  // wait_for_room: polls every attached applier once (the replicas' CPUs,
  // here on the caller's thread); kResourceExhausted if none moved.
  Status wait_for_room() override;

 private:
  std::mutex mu_;
  std::vector<uint64_t> last_;
  std::vector<WalApplier*> appliers_;
};

// What a replica does at restart, before it serves: replays its PM log into
// its region (hyperloop::replay_txn_log; the caller persists the region
// afterwards), opens its applier on its database in `dir` and applies
// everything the stream holds. `replay`, when not null, receives the
// replay's report. Errors: replay_txn_log's, open's, poll's.
Result<std::unique_ptr<WalApplier>> recover_replica(std::span<uint8_t> region, const std::string& dir,
                                                    const ::rocksdb::Options& options,
                                                    hyperloop::TxnReplay* replay = nullptr);

}  // namespace ferry::rocks
