// Replicated RocksDB (SIGCOMM'18 §5.1) on the real library, the head's side:
// a rocksdb::FileSystem whose write-ahead-log files are also appended,
// through HyperLoop's transaction API (TxnClient::append: gWRITE + gFLUSH),
// to every replica's persistent memory as one WAL stream (wal_stream.h).
// Everything else in RocksDB is unchanged: the head (the process running
// RocksDB) applies each write to its memtable on the critical path and
// writes its local files as usual; the replicas' NICs hold the stream, and
// each replica's CPU, off the critical path, applies it to the replica's own
// database (WalApplier, wal_applier.h): every replica holds a complete copy
// of the database and never needs the head's files.
//
// When the bytes are replicated: at Sync, not at Append. RocksDB acknowledges
// a write with WriteOptions::sync = true only after its log writer has
// called Append (and Flush) and then Sync (or Fsync) on the WAL file, so
// Sync is exactly RocksDB's durability point: the bytes appended since the
// last Sync go out as TxnClient records, and Sync returns once they are
// durable on every replica, before RocksDB acknowledges. Append and Flush
// run for every write, synced or not: replicating there would make unsynced
// writes pay a replica round trip that RocksDB never promised, and a group
// commit of concurrent synced writers costs one Sync, hence one replication.
// Appended bytes wait in memory until the next Sync; when more than
// `eager_bytes` wait, Append replicates them early, which bounds the memory.
//
// The ordering rule: every byte of a WAL goes into the stream before any
// byte of a WAL with a higher number. When RocksDB opens a new WAL (a
// memtable switch), the bytes still waiting in every older open WAL are
// replicated at once, and whenever a WAL's bytes go out, those of older
// open WALs go first; so a Sync of an older WAL after a switch replicates
// what it still holds (never "OK" without the bytes), and bytes appended to
// an older WAL after a newer one reached the stream fail (IOError: RocksDB
// does not do that). Hence the stream read from its start is RocksDB's WAL in
// order, and a replica that applies a prefix of it holds a prefix of the
// head's history.
//
// What is acknowledged when (RocksDB's own contract, now on every replica):
//   - a write acknowledged with sync = true is durable on every replica,
//     with every write before it;
//   - a write without sync is on the replicas once a later Sync returned (a
//     synced write, DB::SyncWAL, DB::FlushWAL(true), the WAL's Close), or
//     once RocksDB switched to a newer WAL (DB::Flush returns after that),
//     or earlier through eager_bytes; until then a head failure may lose
//     it, as a machine crash may in plain RocksDB.
//
// The stream's room: its ring (TxnClient's database area less 64 bytes)
// holds the chunks from the lowest cursor any replica's applier has
// durably reached to the end. When a chunk does not fit, the head executes
// its pending records (so that the appliers can see them), asks its
// WalStreamProgress how far every replica has durably applied, and moves
// the stream's begin there; if that frees too little it waits
// (WalStreamProgress::wait_for_room), and if that fails the Sync fails with
// NoSpace: the write is not acknowledged. Bytes no replica has durably
// applied are never overwritten.
//
// Limits: one column family (the default); writes with
// WriteOptions::disableWAL never reach the replicas (a replica gets a
// database written so only as a copy: WalApplier::adopt); no WAL
// compression, no two-phase commit; a rewrite of replicated WAL bytes
// (PositionedAppend or Truncate below them) fails; a WAL file reopened for
// writing (ReopenWritableFile) is refused (NotSupported): RocksDB 7.8
// starts a new WAL at every open. One DB per file system.
//
// Threads: RocksDB calls the files from its writer threads and the file
// system from any thread; one mutex serializes them with the TxnClient,
// which must not be used elsewhere while the file system lives (its
// one-thread rule). catch_up() may run on any thread.
//
// The namespace is ferry::rocks, not ferry::rocksdb: inside namespace ferry,
// `rocksdb::Options` would otherwise name this namespace, not RocksDB's.
#pragma once

#include <rocksdb/file_system.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ferry/common/status.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/rocksdb/wal_stream.h"

namespace ferry::rocks {

struct ReplicatedWalOptions {
  // false: a plain pass-through that replicates nothing (the control of the
  // tests: with it, a replica holds nothing).
  bool replicate = true;
  // Bytes appended and not yet synced above which Append replicates them
  // without waiting for Sync. 0: one record's worth (max_chunk_bytes()).
  uint64_t eager_bytes = 0;
  // The directory of the database's WAL files (RocksDB's wal_dir: the
  // database's directory unless set): only WAL files there are replicated,
  // and a file named like a WAL elsewhere (a checkpoint's copy, another
  // database on the same Env) passes through. Empty: every WAL-named file.
  std::string wal_dir;
  // The id of a new stream (a region with no stream yet); 0: a random one.
  // An applier refuses a stream whose id is not the one its database follows.
  uint64_t stream_id = 0;
  // Fault injection (tests): called before each record is appended; an
  // error stops the replication there, as the head's crash between two
  // records of one Sync would, and the Sync fails with it.
  std::function<Status()> fault_before_record;
};

struct ReplicatedWalCounters {
  uint64_t wal_files = 0;           // WAL files opened through the file system
  uint64_t syncs = 0;               // Sync/Fsync calls on WAL files
  uint64_t records = 0;             // TxnClient records appended (the stream's first header included)
  uint64_t bytes = 0;               // WAL bytes replicated
  uint64_t eager_replications = 0;  // started by Append (more than eager_bytes waiting)
  uint64_t executes_for_room = 0;   // ExecuteAndAdvance because the log ring was full
  uint64_t caught_up = 0;           // records executed by catch_up() and the stream's room checks
  uint64_t older_wal_bytes = 0;     // bytes of a WAL replicated after a newer WAL was opened
  uint64_t reclaimed_bytes = 0;     // stream bytes given back behind every replica's applied cursor
  uint64_t stream_full_waits = 0;   // WalStreamProgress::wait_for_room calls
};

// How far the replicas' appliers have durably applied the stream: what the
// head may overwrite. A deployed head reads it from the replicas' control
// path; in process, AppliedPositions (wal_applier.h).
class WalStreamProgress {
 public:
  virtual ~WalStreamProgress() = default;
  // The lowest stream position any member of the data group may still need:
  // the minimum of every replica's durable cursor position. Errors make the
  // Sync that asked fail.
  virtual Result<uint64_t> needed_from() = 0;
  // The stream is full: returns once needed_from() may have moved (the
  // appliers ran, or a wait ended): OK to ask again, an error to give up
  // (the Sync fails with NoSpace). Called with the file system's mutex held.
  virtual Status wait_for_room() = 0;
};

namespace detail {
class Replicator;
}

class ReplicatedWalFileSystem : public ::rocksdb::FileSystemWrapper {
 public:
  // Wraps `base` (usually rocksdb::FileSystem::Default()). `txn` is the
  // head's TxnClient over the replicas' data group; it must outlive this
  // file system and every file it opened (RocksDB's DB and Env hold them),
  // and is used only through it meanwhile. `progress` (may be null: the
  // stream then never reclaims and a full stream fails the Sync) must
  // outlive the file system too. A region with no stream gets a new one (its
  // header, appended at once); a region with one (a resumed TxnClient: the
  // head's process restarted) continues it -- then resume_local_wals() must
  // run before RocksDB opens a WAL. kInvalidArgument: the log ring is under
  // 1 KiB or the database area has no room for a stream; kDataLoss: the
  // region's stream header is damaged; the TxnClient's errors.
  static Result<std::shared_ptr<ReplicatedWalFileSystem>> create(std::shared_ptr<::rocksdb::FileSystem> base,
                                                                 hyperloop::TxnClient& txn,
                                                                 const ReplicatedWalOptions& options = {},
                                                                 WalStreamProgress* progress = nullptr);
  ~ReplicatedWalFileSystem() override;

  static const char* kClassName() { return "FerryReplicatedWalFileSystem"; }
  const char* Name() const override { return kClassName(); }

  // WAL files (NNNNNN.log) come back wrapped: the local file as usual, and
  // their bytes replicated at Sync. Other files are the base's.
  ::rocksdb::IOStatus NewWritableFile(const std::string& fname, const ::rocksdb::FileOptions& file_opts,
                                      std::unique_ptr<::rocksdb::FSWritableFile>* result,
                                      ::rocksdb::IODebugContext* dbg) override;
  ::rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                        const ::rocksdb::FileOptions& file_opts,
                                        std::unique_ptr<::rocksdb::FSWritableFile>* result,
                                        ::rocksdb::IODebugContext* dbg) override;
  ::rocksdb::IOStatus ReopenWritableFile(const std::string& fname, const ::rocksdb::FileOptions& file_opts,
                                         std::unique_ptr<::rocksdb::FSWritableFile>* result,
                                         ::rocksdb::IODebugContext* dbg) override;

  // After the head's process restarted on its own directory `db_dir` (its
  // files as the crash left them), before DB::Open: the bytes of its local
  // WAL files that the stream lacks (appended, never synced) are replicated,
  // in order, so that the replicas hold what RocksDB is about to recover
  // from them. kDataLoss: a local WAL is shorter than the stream says (the
  // head lost synced bytes: rebuild it from a replica instead); the base's
  // and the TxnClient's errors.
  Status resume_local_wals(const std::string& db_dir);

  // Replicates every byte waiting in any open WAL and executes every
  // appended record, then returns the stream's end: a copy of the head's
  // database taken now, with the head quiescent (no write, flush or
  // compaction running), is exactly the stream's state up to it
  // (WalApplier::adopt). Errors as Sync's.
  Result<WalStreamCursor> sync_stream();

  // Executes every appended record on every replica (gMEMCPY + gFLUSH per
  // entry, then the log head): the replicas' streams catch up with their
  // logs, off RocksDB's critical path. Any thread; waits for a Sync in
  // progress. Errors are the TxnClient's.
  Status catch_up();
  // Executes the oldest appended record, if any: true if it did. For a
  // caller that catches up in the gaps between its own work.
  Result<bool> catch_up_one();

  // The newest WAL opened (0: none yet) and how many of its bytes are
  // durable on every replica.
  uint64_t wal_file_number() const;
  uint64_t replicated_bytes() const;
  // The stream header as the head last wrote it.
  WalStreamHeader stream_header() const;
  // WAL bytes one record carries: half the log ring less the record's
  // overhead, and at most a quarter of the stream's ring.
  uint64_t max_chunk_bytes() const;
  ReplicatedWalCounters counters() const;

 private:
  ReplicatedWalFileSystem(std::shared_ptr<::rocksdb::FileSystem> base, std::shared_ptr<detail::Replicator> rep);
  ::rocksdb::IOStatus wrap_wal(uint64_t number, std::unique_ptr<::rocksdb::FSWritableFile>* result);

  std::shared_ptr<detail::Replicator> rep_;  // shared with the open WAL files
};

// RocksDB's WAL file name for `number` ("000042.log"), and the number of a
// WAL file name (a path or a base name: digits then ".log"); nullopt for
// any other file (MANIFEST-*, LOG, *.sst, ...).
std::string wal_file_name(uint64_t number);
std::optional<uint64_t> parse_wal_file_name(std::string_view name);

}  // namespace ferry::rocks
