// A Tailwind primary (ATC'18 §3.2): a log in the primary's memory, sliced
// into fixed segments (Figure 5), whose one open segment is replicated to r
// backups. Every append writes its entry and a checksum entry into the
// segment and replicates exactly those bytes:
//
//   kTailwind  one RDMA WRITE per backup, gathered straight from the
//              segment (zero-copy), followed on PM backups by a FLUSH on the
//              same QP; the append returns when every backup's completion
//              is in. The backups' CPUs do nothing.
//   kRpc       RAMCloud's baseline, as its ReplicatedSegment replicates:
//              one replicate RPC in flight per backup, carrying the bytes;
//              appends written while it is out wait and go together in
//              the next one (up to rpc_chunk_bytes). The backup's worker
//              copies them into the buffer and replies.
//
// open and close go over the RPC layer in both modes (open carries logID,
// segmentID and the replica version; close the last offset and checksum).
//
// A backup that fails (a completion in error, or backup_failed() from the
// coordinator) is replaced (§3.3.3): appends are suspended (the log's lock
// is held), a new replica of every segment it held is created on another
// backup -- the segment's bytes so far written to it and flushed --, and
// then the replica version of the open segment moves on at the primary and
// every live replica by RPC, so a stale replica that comes back is ignored
// by recovery. Appends then resume. The replicas left on the failed backup
// are freed there (asynchronously, at segment rolls) once it answers again.
//
// Threads: every method is thread-safe; appends from many threads are
// serialized on the log's lock for their placement and wait for their
// completions without it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ferry/common/runtime.h"
#include "ferry/common/status.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"
#include "ferry/tailwind/backup.h"
#include "ferry/tailwind/format.h"

namespace ferry::tailwind {

enum class Replication : uint8_t { kTailwind = 0, kRpc };
std::string_view replication_name(Replication r);
Result<Replication> parse_replication(std::string_view name);  // "tailwind", "rpc"

// The primary's (or a recovering server's) connection to one backup: an RPC
// client of one session to the backup's server, and with `data_path` a QP
// connected to the backup for the log's WRITEs. Used under the owning log's
// lock (one thread at a time).
class BackupLink {
 public:
  // In process: `backup` serves on `server` (started) through a NIC of
  // `engine`, as does `nic`. All must outlive the link. Every call goes to
  // the server worker `route` % workers (default: log_id), so a server can
  // keep a worker for backup requests apart from its other work.
  static Result<std::unique_ptr<BackupLink>> connect(nic::Engine& engine, nic::Nic& nic, Backup& backup,
                                                     rpc::Server& server, uint64_t log_id, bool data_path,
                                                     std::optional<uint64_t> route = std::nullopt);
  // Across processes: the backup's host serves its RPC server as CM service
  // `rpc_service` (rpc::Server::serve) and its data path as `data_service`
  // (Backup::serve) on the listener at `address`; `server` is what the
  // configuration says of that RPC server (checked at the handshake).
  // `nic` (in-process or daemon-attached) must outlive the link. Errors:
  // those of rpc::Client::connect and cm::connect, naming the address.
  struct Remote {
    std::string name;     // for messages ("server-2")
    std::string address;  // "host:port" of the backup host's CM listener
    std::string rpc_service;
    std::string data_service;
    rpc::ServerInfo server;
    uint32_t connect_timeout_ms = 5000;
  };
  static Result<std::unique_ptr<BackupLink>> connect(nic::Nic& nic, const Remote& backup, uint64_t log_id,
                                                     bool data_path, std::optional<uint64_t> route = std::nullopt);
  ~BackupLink();
  BackupLink(const BackupLink&) = delete;
  BackupLink& operator=(const BackupLink&) = delete;

  const std::string& name() const;
  uint64_t log_id() const;
  bool has_data_path() const;

  // Synchronous control RPCs; a reply's error status comes back as that Status.
  Result<OpenedBuffer> open(uint64_t segment_id, uint64_t replica_version);
  Status close(uint64_t segment_id, uint64_t offset, uint32_t checksum);
  Status set_version(uint64_t segment_id, uint64_t replica_version);
  Status free(uint64_t segment_id);
  Result<std::vector<ReplicaInfo>> find();
  // Reads [0, bytes) of a replica in chunks of what one reply carries.
  Result<std::vector<uint8_t>> read_all(uint64_t segment_id, bool closed, uint64_t bytes);

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit BackupLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct LogOptions {
  uint64_t log_id = 1;
  size_t segment_bytes = 8 << 20;  // = the backups' buffer_bytes
  uint32_t replicas = 3;           // r
  Replication replication = Replication::kTailwind;
  // kTailwind: follow each WRITE with a FLUSH (persistence) so the append
  // returns only once the bytes are durable on PM backups. Off for backups
  // with battery-backed DRAM buffers (the WRITE's ACK is then enough).
  bool flush = true;
  uint32_t max_inflight_per_backup = 64;  // kTailwind: WRITEs posted to one backup and not yet completed
  // kRpc: bytes per replicate RPC, at most (what queued while the last one
  // was out, merged; an append or a re-replication larger than this is
  // split); at most the backups' max_request_bytes - 56.
  uint32_t rpc_chunk_bytes = 4096 - 64;
  uint64_t seed = 1;  // backup placement
  // When every live candidate refuses to open a buffer because it is at its
  // unflushed limit (its flushes lag), the primary waits for one to flush
  // and retries for up to this long before the append fails kUnavailable.
  uint32_t open_wait_ms = 10000;
  // A backup that an append (or sync, or a new replica's copy) waits for
  // and that acknowledged nothing new for this long is declared failed and
  // replaced (§3.3.3); one still working through a long queue is not. What catches a backup whose process died after
  // its NIC acknowledged a replication request (RPC mode): nothing is outstanding on the wire, so its QP never errors.
  uint32_t replication_timeout_ms = 3000;
  // Tells the coordinator (under the log's lock) that a segment exists at a
  // replica version: when the segment is opened (its replicas hold its
  // header; nothing is appended to it before this returns OK), and each
  // time its version moves on. The coordinator's record is then the list of
  // the log's segments that recovery must find, and tells it stale replicas.
  // An error (the coordinator cannot be reached) fails the open, or the
  // append that needs the new version known: no append is acknowledged
  // until the report lands (it is retried at the next append).
  std::function<Status(uint64_t segment_id, uint64_t replica_version)> on_version;
  // What the log's waits go through and whose clock its timeouts read: null
  // for real threads and the steady clock (Runtime::threads()); the
  // simulator's SimRuntime parks the appending fiber and uses virtual time.
  Runtime* runtime = nullptr;
};

// Where an appended entry lives in the log.
struct LogPosition {
  uint64_t segment_id = 0;
  uint64_t offset = 0;  // of the entry's header in the segment
  uint64_t bytes = 0;   // entry + checksum entry
};

struct LogCounters {
  uint64_t appends = 0;
  uint64_t bytes = 0;           // appended (entries and checksums)
  uint64_t segments_opened = 0;
  uint64_t segments_closed = 0;
  uint64_t backup_failures = 0;
  uint64_t replicas_recreated = 0;
  uint64_t version_changes = 0;
  uint64_t writes_posted = 0;   // RDMA WRITEs (kTailwind)
  uint64_t rpcs_sent = 0;       // replicate RPCs (kRpc): appends merge, so fewer than appends x r under load
  uint64_t opens_deferred = 0;  // times every candidate was at its unflushed limit and the primary waited
  uint64_t replication_timeouts = 0;  // backups declared failed for not acknowledging within replication_timeout_ms
  uint64_t orphans_freed = 0;   // replicas dropped from a failed backup, freed there once it answered
};

class ReplicatedLog {
 public:
  // `nic` is the primary's NIC; `backups` the candidates for replicas (at
  // least `replicas` of them, each linked with a data path for kTailwind).
  // The links must outlive the log. kInvalidArgument names a bad option.
  static Result<std::unique_ptr<ReplicatedLog>> create(nic::Nic& nic, std::vector<BackupLink*> backups,
                                                       const LogOptions& options);
  ~ReplicatedLog();
  ReplicatedLog(const ReplicatedLog&) = delete;
  ReplicatedLog& operator=(const ReplicatedLog&) = delete;

  // Appends an object (or tombstone) and returns once every replica has it.
  // kInvalidArgument: it cannot fit in a segment. kUnavailable: too few
  // live backups to keep r replicas (the entry is then in the primary's log
  // but not acknowledged). kPermissionDenied: the log is fenced (a backup
  // refused it: its primary was declared failed and the log recovered
  // elsewhere); every later append fails so too, and the caller must stop
  // serving what the log holds.
  //
  // `written`, when given, is set (bytes != 0) once the entry is in the open
  // segment, before it is replicated: an append that fails after that point
  // (a repair or a version report that failed) leaves the entry in the log,
  // where the next appends replicate it and a recovery replays it. The
  // caller must then treat the entry as in doubt, neither applied nor not.
  Result<LogPosition> append_object(uint64_t table_id, uint64_t version, std::span<const uint8_t> key,
                                    std::span<const uint8_t> value, LogPosition* written = nullptr);
  Result<LogPosition> append_tombstone(uint64_t table_id, uint64_t version, uint64_t object_segment_id,
                                       std::span<const uint8_t> key, LogPosition* written = nullptr);
  // An overwrite, as RAMCloud writes one: the new object and, right after it
  // in the same append (one replication), a tombstone for the version it
  // replaces (`replaced_version`, which lives in `replaced_segment`). The
  // cleaner keeps that tombstone while the old version's segment is in the
  // log, so the old version can never be replayed again -- not even once the
  // new version's segment is cleaned away after a delete and the delete's
  // tombstone, whose object segment is then gone, is dropped. The position
  // (and its bytes) is the object's.
  Result<LogPosition> append_object_replacing(uint64_t table_id, uint64_t version, std::span<const uint8_t> key,
                                              std::span<const uint8_t> value, uint64_t replaced_version,
                                              uint64_t replaced_segment, LogPosition* written = nullptr);

  // Bulk appends (a recovery master restoring objects, as RAMCloud's
  // replicate their recovery segments): appends the object and returns once
  // its bytes are posted to every replica, without waiting for them; sync()
  // then waits until every append so far is on every replica (repairing,
  // and reporting the version, as append_object does). Nothing appended
  // this way may be acknowledged or served before sync() returns OK; after
  // an error every unsynced append is in doubt (in the log, perhaps
  // replicated, not acknowledged).
  Result<LogPosition> append_object_unsynced(uint64_t table_id, uint64_t version, std::span<const uint8_t> key,
                                             std::span<const uint8_t> value);
  Status sync();

  // Closes the open segment on its backups (the next append opens another).
  Status close_open_segment();
  // The coordinator says backup `index` (of the create() list) failed:
  // every segment it held gets a new replica elsewhere.
  Status backup_failed(size_t index);
  // The coordinator says backup `index`, declared failed earlier, answers
  // again (it was only unreachable): the replicas the log left there are
  // freed now, its data path is connected anew, and it may take replicas
  // again. kUnavailable (it stays failed) if it does not answer the frees;
  // kPermissionDenied if the log is fenced.
  Status backup_returned(size_t index);
  // Frees a closed segment on its backups and in the log (the cleaner).
  Status free_segment(uint64_t segment_id);

  // The bytes of a segment as the primary holds them (valid while the
  // segment is not freed), and the ids of the live segments.
  std::span<const uint8_t> segment(uint64_t segment_id) const;
  std::vector<uint64_t> segment_ids() const;
  uint64_t open_segment_id() const;  // 0: none
  // Backups (indices into the create() list) holding replicas of a segment.
  std::vector<size_t> replicas_of(uint64_t segment_id) const;
  uint64_t replica_version(uint64_t segment_id) const;
  // Replicas dropped from a backup that could not be freed then (it was
  // declared failed, or a free did not get through), as (backup index,
  // segment): each roll sends their frees again until they land.
  std::vector<std::pair<size_t, uint64_t>> orphans() const;
  // A backup fenced this log (see append); for good.
  bool fenced() const;
  LogCounters counters() const;
  const LogOptions& options() const;

  struct Impl;

 private:
  explicit ReplicatedLog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What the coordinator records of a segment that was freed (cleaned, or its
// log recovered): no replica of it may ever be used again.
inline constexpr uint64_t kFreedSegment = UINT64_MAX;

// Recovery of a failed primary's log from its backups (§3.3.1): every
// backup fences the log and reports its replicas (Algorithm 1 over open
// buffers, closed ones verified on storage); per segment the recovery takes
// a closed replica that verifies, else the open replica with the longest
// valid prefix, among those whose replica version is at least what
// `record` (from the coordinator; absent: 0) requires and at least
// the newest any backup reports. A segment recorded as kFreedSegment is
// never used, whatever state its replicas are found in. Reads go over the
// backups' RPCs and are scanned again on arrival.
//
// Completeness: `record` is the coordinator's record of the log, segment ->
// the replica version its replicas must have (LogOptions::on_version lists
// every segment before its first append).
// Every segment it lists and that is not freed must be recovered: one that
// no answering backup holds makes the recovery fail kUnavailable, naming it
// (a backup that did not answer, or is not in `backups`, may hold it: retry
// when it is back); one whose replicas are all unusable fails kDataLoss (or
// kUnavailable while some backup did not answer). A segment it does not
// list was never appended to (its primary failed while opening it) and is
// ignored -- also when the record is empty: a primary that never reached the
// coordinator (partitioned from the start) acknowledged nothing, and the
// segments it is still opening and freeing are not the recovery's.
// std::nullopt (no coordinator: tests) uses every segment found and checks
// nothing.
struct RecoveredSegment {
  uint64_t segment_id = 0;
  bool closed = false;
  uint64_t replica_version = 0;
  std::string from;            // the backup it was read from
  std::vector<uint8_t> bytes;  // the valid prefix
};
struct RecoveryReport {
  uint64_t replicas_seen = 0;
  uint64_t stale_ignored = 0;      // below the required version, or of a freed segment
  uint64_t corrupted_ignored = 0;  // closed replicas that failed verification
  uint64_t torn_open = 0;          // open replicas with bytes after their valid prefix
  // Open replicas shorter than the one used: an append that reached only
  // some backups when the primary died (torn across its replicas).
  uint64_t lagging_open = 0;
  uint64_t segments = 0;
  uint64_t bytes = 0;
  uint64_t backups_unreachable = 0;  // links that did not answer, plus `backups_down`
  uint64_t unlisted_ignored = 0;   // replicas of segments the coordinator never heard of (nothing appended)
  // Every segment a replica was found of, used or ignored: once the
  // recovery is done, all of them are garbage and must be freed, or the
  // ignored ones hold their backups' buffers for good.
  std::vector<uint64_t> segments_found;
};
// `backups_down`: backups the caller knows are down but may come back (a
// host powered off, to be restarted) and so may hold replicas it cannot
// read now: with any, a segment without a usable replica makes the
// recovery wait (kUnavailable), not lose data (kDataLoss).
Result<std::vector<RecoveredSegment>> recover_log(uint64_t log_id, std::span<BackupLink* const> backups,
                                                  const std::optional<std::map<uint64_t, uint64_t>>& record,
                                                  RecoveryReport* report = nullptr, size_t backups_down = 0);

}  // namespace ferry::tailwind
