// Replicated RocksDB (SIGCOMM'18 §5.1) on the real library: a
// rocksdb::FileSystem whose write-ahead-log files are also appended, through
// HyperLoop's transaction API (TxnClient::append: gWRITE + gFLUSH), to every
// replica's persistent memory. Everything else in RocksDB is unchanged: the
// head (the process running RocksDB) applies each write to its memtable on
// the critical path and writes its local files as usual; the replicas' NICs
// hold the log, and the replicas' WAL images catch up off the critical path
// (ExecuteAndAdvance: catch_up(), or when the log ring is short of room).
// After a crash or power failure a replica rebuilds the WAL file from its
// region (recover_wal) and RocksDB reopens from it (build_recovery_dir).
//
// When the bytes are replicated: at Sync, not at Append. RocksDB acknowledges
// a write with WriteOptions::sync = true only after its log writer has
// called Append (and Flush) and then Sync (or Fsync) on the WAL file, so
// Sync is exactly RocksDB's durability point: the bytes appended since the
// last Sync go out as TxnClient records, and Sync returns once they are
// durable on every replica, before RocksDB acknowledges. Append and Flush
// run for every write, synced or not (the log writer flushes after each
// record): replicating there would make unsynced writes pay a replica round
// trip that RocksDB never promised, and a group commit of concurrent synced
// writers costs one Sync, hence one replication. Appended bytes wait in
// memory until the next Sync; when more than `eager_bytes` wait (a stream
// of unsynced writes), Append replicates them early, which bounds the memory
// and is more than RocksDB promises, never less.
//
// What is acknowledged when (RocksDB's own contract, now on every replica):
//   - a write acknowledged with sync = true is durable on every replica,
//     with every byte written to the same WAL before it;
//   - a write without sync is on the replicas once a later Sync of the same
//     WAL returned (a later synced write, DB::SyncWAL, DB::FlushWAL(true),
//     the WAL's Close) -- or earlier through eager_bytes; until then a head
//     failure may lose it, as a machine crash may in plain RocksDB.
//
// The image, in TxnClient's database area (the same offsets on every
// replica; docs/hyperloop-storage.md "Replicated RocksDB"), little-endian:
//   [0, 32)          header: u64 magic "FRWALIM1", u64 WAL file number,
//                    u64 length (bytes of that WAL the image holds), u64
//                    checksum (XXH3-64 of the first 24 bytes)
//   [32, 64)         zero
//   [64, db_bytes)   the WAL file: its byte i at 64 + i
// Each replication is one or more records (each carries at most
// max_chunk_bytes() of WAL: half the log ring less the record's overhead),
// each with two entries: the new bytes at 64 + their file offset, then the
// header with the new length. A record is
// durable on a replica whole or not at all, and replay applies whole
// records, so a recovered image is always a prefix of the head's WAL that
// covers every acknowledged byte. A new WAL file (a new log number, from
// NewWritableFile or ReuseWritableFile) restarts the image: one record of
// the header alone, {number, 0}. The image holds one WAL, the newest.
//
// Limits: SST files, the MANIFEST, CURRENT and OPTIONS are the head's local
// files; a replica reopened from its WAL needs them copied from the head
// (build_recovery_dir; the paper's recovery copies them from a neighbour).
// When RocksDB switches to a new WAL, bytes of the older one synced after
// the switch stay local (counted: stale_syncs); its data is in the memtable
// being flushed to an SST, the head's file. The WAL must fit the image
// (db_bytes - 64): size it for write_buffer_size / max_total_wal_size, or
// Sync fails with NoSpace and RocksDB stops taking writes. A WAL file
// reopened for writing (ReopenWritableFile) is refused (NotSupported):
// RocksDB 7.8 starts a new WAL at every open. One DB per file system.
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
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/hyperloop/txn.h"

namespace ferry::rocks {

inline constexpr uint64_t kWalImageMagic = 0x314D494C41575246ULL;  // "FRWALIM1"
inline constexpr uint64_t kWalImageHeaderBytes = 64;               // the WAL starts here in the image

struct ReplicatedWalOptions {
  // false: a plain pass-through that replicates nothing (the control of the
  // tests: with it, a power-failed replica holds no WAL).
  bool replicate = true;
  // Bytes appended and not yet synced above which Append replicates them
  // without waiting for Sync. 0: one record's worth (max_chunk_bytes()).
  uint64_t eager_bytes = 0;
};

struct ReplicatedWalCounters {
  uint64_t wal_files = 0;          // WAL files created (each restarted the image)
  uint64_t syncs = 0;              // Sync/Fsync calls on WAL files
  uint64_t records = 0;            // TxnClient records appended (headers of new WALs included)
  uint64_t bytes = 0;              // WAL bytes replicated
  uint64_t eager_replications = 0; // started by Append (more than eager_bytes waiting)
  uint64_t executes_for_room = 0;  // ExecuteAndAdvance because the log ring was full
  uint64_t caught_up = 0;          // records executed by catch_up() (ring padding included)
  uint64_t stale_syncs = 0;        // bytes of a WAL older than the image's, kept local only
};

namespace detail {
class Replicator;
}

class ReplicatedWalFileSystem : public ::rocksdb::FileSystemWrapper {
 public:
  // Wraps `base` (usually rocksdb::FileSystem::Default()). `txn` is the
  // head's TxnClient over the replicas' data group; it must outlive this
  // file system and every file it opened (RocksDB's DB and Env hold them),
  // and is used only through it meanwhile. kInvalidArgument: the log ring is
  // under 1 KiB or the database area cannot hold the header.
  static Result<std::shared_ptr<ReplicatedWalFileSystem>> create(std::shared_ptr<::rocksdb::FileSystem> base,
                                                                 hyperloop::TxnClient& txn,
                                                                 const ReplicatedWalOptions& options = {});
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

  // Executes every appended record on every replica (gMEMCPY + gFLUSH per
  // entry, then the log head): the replicas' WAL images catch up with their
  // logs, off RocksDB's critical path. Any thread; waits for a Sync in
  // progress. Errors are the TxnClient's.
  Status catch_up();
  // Executes the oldest appended record, if any: true if it did. For a
  // caller that catches up in the gaps between its own work.
  Result<bool> catch_up_one();

  // The WAL the image holds (0: none yet) and how many of its bytes are
  // durable on every replica (acknowledged: everything up to the last Sync).
  uint64_t wal_file_number() const;
  uint64_t replicated_bytes() const;
  // WAL bytes one record carries: half the log ring less the record's
  // overhead, so that a drained ring always takes a record.
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

// A WAL file as a replica's image holds it.
struct WalImage {
  uint64_t file_number = 0;
  std::vector<uint8_t> bytes;  // the WAL file's first `length` bytes
};

// The WAL in `region` (a replica's region of the data group, TxnClient's
// layout) as its database area holds it now: after catch_up(), or after
// replay. Never reads outside `region`. kNotFound: no WAL was ever
// replicated there (the header is zero); kDataLoss: the control block is not
// a transaction layout, or the header fails its magic, checksum or bounds.
Result<WalImage> read_wal_image(std::span<const uint8_t> region);

// What a restarted replica does with its own region (its CPU, before it
// serves): hyperloop::replay_txn_log (every durable record from the log head
// on applied again; the caller persists the region afterwards), then
// read_wal_image. `replay`, when not null, receives the replay's report.
// Errors: replay_txn_log's, then read_wal_image's.
Result<WalImage> recover_wal(std::span<uint8_t> region, hyperloop::TxnReplay* replay = nullptr);

// Builds a directory RocksDB can open (without the replicated file system):
// every regular file of `head_dir` except WAL files, LOCK and info logs
// (LOG, LOG.old.*) -- the MANIFEST, CURRENT, OPTIONS, IDENTITY and SST files,
// which must be copied while the head is quiescent (no flush or compaction
// running) -- plus `wal` written as its WAL file. `wal` null: no WAL (the
// replica holds none). `out_dir` is created and must not hold files.
// kNotFound: head_dir is not a directory; kAlreadyExists: out_dir has files;
// kUnavailable: a file could not be read or written.
Status build_recovery_dir(const std::string& head_dir, const WalImage* wal, const std::string& out_dir);

}  // namespace ferry::rocks
