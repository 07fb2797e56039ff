// HyperLoop's transaction API (SIGCOMM'18 §5): a replicated write-ahead log
// and database image on every replica's region, appended to and applied by
// the replicas' NICs through the group primitives, and group locks.
//
//   Initialize          TxnClient::initialize: lays out the group's region
//                       (control block, log ring, database) on every
//                       replica, or resumes from what a replica holds.
//   Append(record)      the record (a list of (data, len, offset)) is
//                       written into the log ring with one gWRITE whose
//                       flush is interleaved (each replica's NIC makes it
//                       durable before forwarding it): when it returns, the
//                       record is durable on every replica.
//   ExecuteAndAdvance   the record at the log head is applied on every
//                       replica: per entry a gMEMCPY (flush interleaved)
//                       from the record's data in the log to its offset in
//                       the database; then the persistent log head moves
//                       past it (a gWRITE, flush interleaved, of one aligned
//                       8-byte word). One chain traversal each; with
//                       TxnOptions::interleaved_flush off, each is followed
//                       by its own gFLUSH instead.
//   wrLock/wrUnlock     a group lock: gCAS 0 -> writer on every replica's
//                       lock word; a partial success is undone with the
//                       inverse gCAS on the replicas that swapped (§4.2).
//   rdLock/rdUnlock     on one replica only (ReplicaLocks), by that
//                       replica's CPU: a reader count in the same word,
//                       taken only while no writer holds it or waits for
//                       it, so a writer's gCAS (which expects 0) fails
//                       where readers are; the writer then sets its intent
//                       bit there (gCAS count -> count | intent), which
//                       turns new readers away, and takes the word when
//                       the count has drained: readers cannot starve it.
//
// Layout of the data group's region (the same offsets on every replica and
// in the client's memory, which mirrors them):
//   [0, 64)                        control block: magic, log_bytes, db_bytes,
//                                  then the log head at offset 24 (a u64
//                                  LSN: bytes of log executed since the log
//                                  began; never wraps, position = LSN mod
//                                  log_bytes)
//   [64, 64 + log_bytes)           the log ring (records, docs/hyperloop-storage.md
//                                  "Transaction log")
//   [64 + log_bytes, +db_bytes)    the database image
// Lock words live in a second group whose regions are DRAM (hint H8 of the
// RDMA+NVM study: keep atomics off NVM; a lock need not survive a power
// failure, since a crash ends every transaction holding one). The emulator
// builds each group's replica hosts separately: replica i of the lock group
// stands for the DRAM of replica i of the data group.
//
// Recovery after a power failure of replicas: the log head says which
// records were applied; every record from the head on that verifies (its
// checksum and its own LSN) was appended and acknowledged or is a complete
// copy of one in flight; applying them again is harmless (a redo log of
// absolute writes). scan_log finds them.
//
// Every restart of the front end reconciles the members before anything
// executes (TxnClient::initialize with resume, and recover): the log from
// the LOWEST head of any member, replica 0's valid records extended by a
// downstream member's where replica 0's log ends, is written to every
// member with the control block (that lowest head), then flushed. A client
// that died between the WRITE of a record and the SEND that forwards it
// leaves the record on replica 0 only; a power failure may leave a record in
// flight on one replica's log (and replayed into its database) and not on
// another's; without the reconciliation the members' gMEMCPYs would copy
// different bytes and their databases diverge for good.
//
// Threads: a TxnClient is used by one thread at a time (its GroupClient's
// rule). ReplicaLocks may be used by any thread of the replica.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/hyperloop/group.h"

namespace ferry::hyperloop {

inline constexpr uint64_t kTxnControlBytes = 64;
inline constexpr uint64_t kTxnHeadOffset = 24;  // the log head word in the control block
inline constexpr uint32_t kTxnRecordAlign = 64;
inline constexpr uint32_t kTxnRecordHeaderBytes = 32;
inline constexpr uint32_t kTxnEntryHeaderBytes = 16;

struct TxnOptions {
  uint64_t log_bytes = 64 << 10;   // the log ring (a multiple of 64)
  uint64_t db_bytes = 256 << 10;   // the database image
  // Resume from the region (after a restart of the client, or of replicas
  // after a power failure): the control block must hold this layout; the
  // log from the lowest head of any member is reconciled on every member
  // (written again and flushed) and its records queued to run.
  bool resume = false;
  // wrLock gives up after this long (kTimedOut) when the lock stays taken.
  uint64_t lock_timeout_ns = 1'000'000'000ULL;
  // Append's gWRITE, ExecuteAndAdvance's gMEMCPYs and its head gWRITE carry
  // their flush (the primitives' `flush`: each replica makes the operation
  // durable before forwarding it), one chain traversal each. false: each is
  // followed by its own gFLUSH, two traversals (how this store ran before
  // 2026-11-29; kept for the benchmarks' comparison).
  bool interleaved_flush = true;
};

// One modification of a log record: `data` goes to database offset `offset`.
struct TxnWrite {
  uint64_t offset = 0;
  std::span<const uint8_t> data;
};

// A record found in a log (scan_log, or the client's own view).
struct TxnRecord {
  uint64_t lsn = 0;        // where it starts in the log (bytes since the log began)
  uint32_t bytes = 0;      // header, entries and padding (a multiple of 64)
  bool padding = false;    // fills the ring's end; applies nothing
  struct Entry {
    uint64_t offset = 0;   // in the database
    uint32_t len = 0;
    uint64_t data_at = 0;  // the data's offset in the log ring
  };
  std::vector<Entry> entries;
};

// The bytes of a record (header and entries) for `lsn`, padded to 64 B.
std::vector<uint8_t> encode_txn_record(uint64_t lsn, std::span<const TxnWrite> writes);
// A padding record of `bytes` (a multiple of 64): it fills the ring's end
// when the next record does not fit there, and applies nothing.
std::vector<uint8_t> encode_txn_padding(uint64_t lsn, uint32_t bytes);
// The record at ring position `lsn % ring.size()` if it is a valid record
// of exactly that LSN (its own LSN, sizes inside the ring and the database,
// its checksum over every byte); kNotFound otherwise (never written, stale
// from an earlier lap, torn, corrupt). Never reads outside `ring`.
Result<TxnRecord> decode_txn_record(std::span<const uint8_t> ring, uint64_t lsn, uint64_t db_bytes);
// The valid records from `head` on, in order, up to the first that does not
// verify (what recovery re-applies).
std::vector<TxnRecord> scan_log(std::span<const uint8_t> ring, uint64_t head, uint64_t db_bytes);

// What a replica does at restart after a crash or power failure, on its own
// region (its CPU, before it serves): reads the layout from the control
// block, applies every valid record from the log head on to the database
// and moves the head past them. The caller persists the region afterwards.
// kDataLoss when the control block is not a transaction layout.
struct TxnReplay {
  uint64_t head_before = 0;
  uint64_t head_after = 0;
  uint64_t records = 0;  // applied (padding included)
  uint64_t bytes_applied = 0;
};
Result<TxnReplay> replay_txn_log(std::span<uint8_t> region);

struct TxnCounters {
  uint64_t appended = 0;
  uint64_t executed = 0;         // records applied (padding records not counted)
  uint64_t padding = 0;          // padding records written at the ring's end
  uint64_t lock_conflicts = 0;   // wrLock rounds that found the lock taken on some replica
  uint64_t lock_undos = 0;       // partial gCAS results undone
  uint64_t lock_intents = 0;     // wrLocks that set their intent and waited for readers to leave
  uint64_t traversals = 0;       // group operations submitted (each one pass down a chain), locks included
};

// What TxnClient::recover found and did.
struct TxnRecovery {
  uint64_t head_source = 0;      // the log head on replica 0 (the upstream-most survivor)
  uint64_t head = 0;             // the lowest head of any member: replay started here
  uint64_t tail = 0;             // the end of the valid log (replica 0's, extended by downstream members')
  uint64_t records = 0;          // records executed again (padding included)
  uint64_t records_from_downstream = 0;  // of those, records replica 0's log lacked (after a power failure)
  uint64_t bytes_rereplicated = 0;
  uint64_t locks_released = 0;   // write-lock words the failed front end held
};

// Where TxnClient::recover reads the members' state (their data regions:
// control block, log, database), so that recovery works the same whether the
// members are in this process or in others. Members are numbered in chain
// order of the rebuilt group (0: the head, the upstream-most survivor).
class TxnRecoverySource {
 public:
  virtual ~TxnRecoverySource() = default;
  virtual uint32_t members() const = 0;
  // Fills `out` with the bytes at `offset` of member `member`'s data region.
  // Errors as the transport returns them; kOutOfRange past the region.
  virtual Status read(uint32_t member, uint64_t offset, std::span<uint8_t> out) = 0;
};

// The members of an in-process group, through GroupClient::replica (what
// recover reads when given no source). `client` must outlive it.
class GroupRecoverySource final : public TxnRecoverySource {
 public:
  GroupRecoverySource(GroupClient& client, GroupId data_gid) : client_(client), data_(data_gid) {}
  uint32_t members() const override;
  Status read(uint32_t member, uint64_t offset, std::span<uint8_t> out) override;

 private:
  GroupClient& client_;
  GroupId data_;
};

class TxnClient {
 public:
  // Lays out (or, with resume, reads back) the data group's region, and
  // uses lock group `lock_gid` (DRAM, 8 bytes per lock) for group locks.
  // Both groups are the client's; they must outlive the TxnClient.
  // kInvalidArgument: the layout does not fit the region, or resume finds
  // another layout.
  static Result<std::unique_ptr<TxnClient>> initialize(GroupClient& client, GroupId data_gid, GroupId lock_gid,
                                                       const TxnOptions& options = {});

  // Chain recovery, the application's half (§5: "the entire chain flushes
  // the log of all valid entries, rejects invalid entries, blocks reads
  // temporarily"), once the data path was rebuilt (replace_replica on both
  // groups, with the same index). The log is reconciled as resume does:
  // from the lowest log head of any member, replica 0's valid records (the
  // upstream-most survivor, which holds every record a survivor holds)
  // extended by any member's, written with the control block to every
  // member (gWRITE + gFLUSH: a member that missed a record gets it; a torn
  // record beyond the tail is left to be overwritten). Then the failed
  // front end's write locks are released and all `lock_words` locks are
  // taken (reads wait on every replica); every valid record is executed;
  // the locks are given back. Returns the front end's TxnClient; a record
  // that had been appended completely on some member before the failure is
  // applied, one that had not is not.
  // Errors: those of initialize (resume) and of the primitives; kDataLoss if
  // the log breaks between the lowest and the highest head of the members,
  // or a member holds no transaction layout;
  // kFailedPrecondition for groups connected across processes (the members'
  // heads are read from their regions, which only an in-process group has):
  // give those the second form.
  static Result<std::unique_ptr<TxnClient>> recover(GroupClient& client, GroupId data_gid, GroupId lock_gid,
                                                    const TxnOptions& options, uint32_t lock_words,
                                                    TxnRecovery* report = nullptr);
  // The same, reading replica 0's region and every member's log head through
  // `source` (e.g. the replicas' read services across processes), which must
  // name as many members as the data group has replicas (else
  // kInvalidArgument). Only used during the call.
  static Result<std::unique_ptr<TxnClient>> recover(GroupClient& client, GroupId data_gid, GroupId lock_gid,
                                                    const TxnOptions& options, uint32_t lock_words,
                                                    TxnRecoverySource& source, TxnRecovery* report = nullptr);

  // Appends a record (a flushing gWRITE); returns its LSN once it is durable
  // on every replica. kResourceExhausted when the ring has no room until
  // records are executed; kInvalidArgument for an empty record, a write
  // outside the database or a record larger than the ring.
  Result<uint64_t> append(std::span<const TxnWrite> record);
  // Applies the record at the log head on every replica (a flushing gMEMCPY
  // per entry) and advances the persistent head (a flushing gWRITE). kNotFound
  // when every appended record is executed.
  Status execute_and_advance();
  // Executes every appended record.
  Status execute_all();

  // Group write lock `lock` (an index into the lock group's region): gCAS
  // 0 -> writer on every replica; where readers are inside, a gCAS sets the
  // writer's intent (ReplicaLocks::kIntent), which turns new readers away,
  // and the writer takes the word once they have left -- steady readers
  // cannot starve it. Another writer's word or intent on some replica: what
  // was taken is given back and the lock is tried again. kTimedOut after
  // lock_timeout_ns, with everything given back (intent included).
  Status wr_lock(uint32_t lock);
  Status wr_unlock(uint32_t lock);
  // After a crash of the front end (this client resumed in its place, one
  // front end per chain): takes every write lock in [0, locks) on every
  // replica, a writer word or intent that stands in the way counting as the
  // dead front end's and becoming this client's (never released first, so
  // that no reader gets in before the records it left ran again); readers
  // inside are waited for as wr_lock does. Returns how many replica words
  // it took over. The locks stay held: execute what the log holds, then
  // wr_unlock each. On an error (kTimedOut: a reader never left) what it
  // holds stays held; a retry takes it over again.
  Result<uint64_t> take_over_locks(uint32_t locks);
  // After a client crash (this client resumed in its place): releases every
  // write lock in [0, locks) that the crashed client held, on every replica
  // (gCAS writer -> 0), and clears the intent it left where it was waiting
  // for readers (their count is left alone). Returns how many replica words
  // were released.
  Result<uint64_t> release_stale_locks(uint32_t locks);
  // Note: between this and the next wr_lock readers may get in; where the
  // crashed client left records to run again, take_over_locks instead.

  uint64_t head() const { return head_; }  // LSN of the next record to execute
  uint64_t tail() const { return tail_; }  // LSN the next append starts at
  uint64_t db_offset() const { return kTxnControlBytes + options_.log_bytes; }
  // The client's mirror of the database (what every replica holds once
  // the appended records are executed and flushed).
  std::span<const uint8_t> db() const;
  const TxnCounters& counters() const { return counters_; }

  // Replica r's database and log as its region holds them now.
  Result<std::span<const uint8_t>> replica_db(uint32_t r) const;
  Result<std::span<const uint8_t>> replica_log(uint32_t r) const;

 private:
  TxnClient(GroupClient& client, GroupId data_gid, GroupId lock_gid, const TxnOptions& options);
  // initialize's resume: the layout from replica 0's region, read through
  // `source`, then reconcile.
  static Result<std::unique_ptr<TxnClient>> resume(GroupClient& client, GroupId data_gid, GroupId lock_gid,
                                                   const TxnOptions& options, TxnRecoverySource& source,
                                                   TxnRecovery* report);
  // With replica 0's region in mem_: the log from the members' lowest head
  // (see the file comment) written to every member with the control block
  // and flushed; head_, tail_ and pending_ from it.
  Status reconcile(TxnRecoverySource& source, TxnRecovery& report);
  // Copies member `member`'s bytes of a record at `lsn` into mem_'s ring if
  // its header's size could be one of this lap above `head`; false if not.
  Result<bool> copy_member_record(TxnRecoverySource& source, uint32_t member, uint64_t lsn, uint64_t head);
  // The group primitives this client submits, each counted in
  // counters_.traversals.
  Status write(uint64_t offset, uint32_t size, bool flush);
  Status copy(uint64_t src, uint64_t dst, uint32_t size, bool flush);
  Status flush();
  Result<CasResult> cas(uint64_t offset, uint64_t old_value, uint64_t new_value, uint8_t execute_map);
  // A gWRITE or gMEMCPY durable on every replica when it returns
  // (options_.interleaved_flush says how).
  Status write_and_flush(uint64_t offset, uint32_t size);
  Status copy_and_flush(uint64_t src, uint64_t dst, uint32_t size);
  // wr_lock's protocol; with `take_over`, another writer's word or intent is
  // the dead front end's (one front end per chain): it becomes this
  // client's (counted in *stale) instead of being waited for, and a
  // timeout keeps what is held.
  Status acquire(uint32_t lock, bool take_over, uint64_t* stale);
  // Gives back the writer word on `held` and clears the intent on `intent`
  // (whose words were last seen as `seen`).
  Status give_back(uint32_t lock, uint8_t held, uint8_t intent, const std::array<uint64_t, kMaxReplicas>& seen);
  Status append_padding();

  GroupClient& client_;
  GroupId data_;
  GroupId locks_;
  TxnOptions options_;
  std::span<uint8_t> mem_;  // the client's memory of the data group
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
  std::vector<TxnRecord> pending_;  // appended, not executed, in order
  TxnCounters counters_;
};

// Read locks on one replica, by its CPU, over the lock group's region there.
class ReplicaLocks {
 public:
  // `lock_region`: replica r's region of the lock group (ReplicaView::region->data()).
  explicit ReplicaLocks(uint8_t* lock_region, size_t bytes) : words_(lock_region), bytes_(bytes) {}
  // Takes a read lock unless a writer holds `lock` or waits for it (its
  // intent is set): then false; retry.
  bool try_rd_lock(uint32_t lock);
  // At the replica's restart after a power failure, before it serves reads
  // (its DRAM lock words are gone): every lock in [0, locks) reads as held
  // by a writer -- the dead front end's, for all anyone knows -- so that no
  // read is served from a replayed image the front end has not reconciled
  // with the other members yet (a record in flight may be applied here and
  // not there). The resuming front end takes them over (take_over_locks,
  // TxnKv::open, recover) and unlocks once the log has run.
  void hold_until_recovered(uint32_t locks);
  void rd_unlock(uint32_t lock);
  // The word: writer bit and reader count (tests, monitoring).
  uint64_t word(uint32_t lock) const;

  static constexpr uint64_t kWriter = uint64_t{1} << 63;
  // A writer waits for the readers inside to leave; no new one enters.
  static constexpr uint64_t kIntent = uint64_t{1} << 62;

 private:
  std::atomic_ref<uint64_t> at(uint32_t lock) const;
  uint8_t* words_;
  size_t bytes_;
};

}  // namespace ferry::hyperloop
