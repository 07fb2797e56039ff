// A Tailwind backup (ATC'18 §3.2-3.3): a pool of pre-zeroed I/O buffers that
// primaries fill with one-sided RDMA WRITEs while the backup's CPU does
// nothing, and the control operations around them, served by the RPC layer:
//
//   open      reserve a buffer for (log, segment); register it for that
//             primary's QPs only; reply with its address and rkey
//   close     the buffer is full: record its final offset and checksum in
//             the directory, then write its valid bytes to storage (a real
//             file, write + fdatasync or O_DIRECT), re-zero it, free it --
//             inline, or (flush_in_background) on the backup's flusher
//             thread after close has replied, as the paper's backups do
//             ("close notifies the backup that the buffer ... can be
//             flushed"): the buffer is durable already (PM, or DRAM on
//             backup power), so the storage write is off the PUT path
//   version   a backup elsewhere failed and the primary re-created its
//             replica: the replica version of an open buffer moves on
//   replicate the RPC baseline (RAMCloud): the backup's worker copies the
//             bytes into the buffer and replies
//   find      a primary failed: fence its log for good (§3.3.4), run
//             Algorithm 1 over its open buffers, verify its closed ones on
//             storage, report
//   read      bytes of a replica, for the recovering server
//   free      the replica is no longer needed (segment cleaned, log recovered)
//
// Buffers live in one memory region: persistent memory of the host's
// persistence domain (pm/: RDMA WRITEs reach it through the NIC's volatile
// buffer and are durable after a FLUSH), or DRAM, which stands for the
// paper's battery-backed buffers -- the model does not simulate the
// battery, so a DRAM backup loses its open buffers at a power failure and
// says so. A directory at the start of the region records, per buffer,
// which (log, segment, version) it holds; the backup's CPU persists it at
// open, version and close (the control path), so a restarted backup finds
// its open buffers again.
//
// The number of unflushed buffers (open, or closed and not yet on storage)
// is limited to what the storage can absorb on backup power:
// storage_write_mb_per_s * power_holdup_ms / buffer_bytes (at least 1, at
// most `buffers`); open is refused beyond it. A closed buffer not yet
// flushed is served from memory (find, read) and, after a restart, flushed
// before the backup serves anything.
//
// Threads: every method is thread-safe (one mutex; the data path never
// takes it -- it is the NIC's). The RPC handlers run on the server's
// workers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/common/runtime.h"
#include "ferry/common/status.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/verbs.h"
#include "ferry/pm/domain.h"
#include "ferry/rpc/server.h"
#include "ferry/tailwind/format.h"
#include "ferry/tailwind/storage.h"

namespace ferry::tailwind {

enum class BufferMedia : uint8_t { kPm = 0, kDram };
std::string_view buffer_media_name(BufferMedia media);

// RPC request types of the backup service (on any rpc::Server).
enum BackupRequestType : uint16_t {
  kTwOpen = 60,
  kTwClose = 61,
  kTwVersion = 62,
  kTwReplicate = 63,
  kTwFind = 64,
  kTwRead = 65,
  kTwFree = 66,
};

struct BackupOptions {
  std::string name = "backup";
  size_t buffer_bytes = 8 << 20;  // the paper's 8 MB (= the primaries' segment size)
  uint32_t buffers = 8;           // the pool
  BufferMedia media = BufferMedia::kPm;
  // kPm: the file holding the directory and the buffers (created if
  // missing). Ignored for kDram.
  std::string pm_path;
  std::string storage_dir;  // closed buffers are written here
  StorageMode storage_mode = StorageMode::kFdatasync;
  uint64_t storage_write_mb_per_s = 500;  // the configured speed of that storage
  uint32_t power_holdup_ms = 100;         // how long backup power lasts after a failure
  // Start from what pm_path holds (a restart after a crash or power
  // failure): open buffers are kept for recovery, closed ones not yet on
  // storage are flushed, free ones re-zeroed.
  bool recover = false;
  // close replies once the buffer's close record is persisted; a flusher
  // thread writes it to storage, re-zeroes it and frees it. false: close
  // does all that before it replies.
  bool flush_in_background = false;
  int flusher_cpu = -1;  // pin the flusher thread to this CPU (-1: not pinned)
  // The flusher writes and re-zeroes a buffer in pieces of this size and
  // yields the CPU between them, so on a core shared with RPC workers a
  // flush delays them by one piece, not by a whole buffer (0: in one go).
  size_t flush_chunk_bytes = 256 << 10;
  // What runs the flusher and what its waits and pacing go through: null for
  // a real thread (Runtime::threads()); the simulator's SimRuntime makes it a
  // fiber. The storage writes themselves are real file I/O either way.
  Runtime* runtime = nullptr;
};

// What open() gives the primary: where to WRITE.
struct OpenedBuffer {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t bytes = 0;
};

// One replica a backup holds for a log, as find() reports it.
struct ReplicaInfo {
  uint64_t segment_id = 0;
  uint64_t replica_version = 0;
  bool closed = false;     // on storage (its close recorded offset and checksum)
  bool corrupted = false;  // closed: it does not verify against its close record
  uint64_t valid_bytes = 0;  // open: Algorithm 1's offset; closed: the close's offset
  uint32_t checksum = 0;     // the last valid checksum
  ScanStop stop = ScanStop::kEndOfData;  // open: why the scan stopped
  bool zero_after_valid = true;          // open: nothing (torn or corrupt) after the valid prefix
};

struct BackupCounters {
  uint64_t opens = 0;
  uint64_t opens_refused = 0;   // no free buffer, or the unflushed limit
  uint64_t closes = 0;
  uint64_t version_changes = 0;
  uint64_t replicated_rpcs = 0; // RPC baseline: objects copied by the backup's CPU
  uint64_t replicated_bytes = 0;
  uint64_t finds = 0;
  uint64_t reads = 0;
  uint64_t frees = 0;
  uint64_t flushes = 0;         // closed buffers written to storage
  uint64_t flush_failures = 0;  // ... that failed (the buffer stays closed in memory)
  uint64_t flush_ns = 0;        // CPU time spent writing closed buffers to storage and re-zeroing them
  // find (a primary's recovery): Algorithm 1 over its open buffers, and the
  // verification of its closed replicas (loaded from storage); thread CPU time.
  uint64_t open_buffers_scanned = 0;
  uint64_t scan_ns = 0;
  uint64_t closed_verified = 0;
  uint64_t verify_ns = 0;
  uint32_t open_buffers = 0;    // now
  uint32_t closed_unflushed = 0;  // now: closed, not yet on storage
  uint32_t max_open_buffers = 0;  // the unflushed limit
};

class Backup {
 public:
  // `nic` is this host's NIC; `domain` is its persistence domain (the
  // NIC's NicOptions::memory) and is required for kPm, optional for kDram
  // (DRAM from the domain, so a power failure loses it; else plain memory).
  // Both must outlive the Backup. kInvalidArgument names a bad option;
  // storage and PM errors are passed on.
  static Result<std::unique_ptr<Backup>> create(nic::Nic& nic, pm::PersistenceDomain* domain,
                                                const BackupOptions& options);
  ~Backup();
  Backup(const Backup&) = delete;
  Backup& operator=(const Backup&) = delete;

  // Registers the backup service's handlers (BackupRequestType) on `server`
  // (before it starts). The server's max_request_bytes bounds what one
  // kTwReplicate carries and its max_response_bytes what one kTwRead returns.
  Status register_rpcs(rpc::Server& server);

  // The data path of primary `log_id`: a QP of this backup's NIC, connected
  // to `primary_qp` (RESET, on `primary_nic` of the same Engine), allowed to
  // WRITE and FLUSH only the buffers open for that log. Replaces (moves to
  // ERROR) an earlier connection of the same log; kFailedPrecondition while
  // that one still has buffers registered, kPermissionDenied for a fenced log.
  Status connect(uint64_t log_id, nic::QueuePair& primary_qp, const nic::Nic& primary_nic,
                 const nic::ConnectOptions& options = {});
  // The same across processes: serves the data-path connections of remote
  // primaries as the CM service `service` of `listener` (the REQ names the
  // log, docs/tailwind.md "Deployment"); a new connection of a log replaces
  // its earlier one as connect() does. The listener must outlive the backup
  // or the backup's destruction, which unserves. Errors: Listener::serve's.
  Status serve(cm::Listener& listener, std::string_view service);
  // §3.3.4: moves the log's QPs to ERROR and deregisters its buffers, so a
  // primary that others consider failed can no longer write here. For good:
  // from then on every request of that log but find, read and free (open,
  // close, version, replicate) fails kPermissionDenied, and so does a new
  // connection of it (connect, serve), in both replication modes. The find
  // RPC (recovery's) fences too.
  void fence(uint64_t log_id);

  // The control operations (what the RPCs call). Each fails
  // kPermissionDenied for a fenced log (the caller is an old primary).
  // kResourceExhausted: no free buffer, or the unflushed limit; the message
  // says which. kAlreadyExists: (log, segment) already open here.
  Result<OpenedBuffer> open(uint64_t log_id, uint64_t segment_id, uint64_t replica_version);
  // kNotFound if not open here; kInvalidArgument if offset is past the
  // buffer. Inline flush: storage errors are passed on (the buffer then
  // stays closed in memory, unflushed, and is served from there).
  Status close(uint64_t log_id, uint64_t segment_id, uint64_t offset, uint32_t checksum);
  Status set_version(uint64_t log_id, uint64_t segment_id, uint64_t replica_version);
  // RPC baseline: copies `bytes` at `offset` into the open buffer (and
  // persists them on PM) on the calling thread.
  Status replicate(uint64_t log_id, uint64_t segment_id, uint64_t offset, std::span<const uint8_t> bytes);
  // Scans the log's open buffers, verifies its closed ones; ascending
  // segment_id (an open and a closed replica of the same segment may both
  // appear after a crash during close). Inspection only: the log goes on.
  std::vector<ReplicaInfo> find(uint64_t log_id);
  // What the find RPC does for a recovery: fence(log_id), then find(), in
  // one step, so no WRITE of the old primary lands after the scan.
  std::vector<ReplicaInfo> fence_and_find(uint64_t log_id);
  // Up to max_bytes of a replica from `offset` (open: the buffer, closed:
  // storage, or the buffer until it is flushed). kNotFound if absent.
  Result<std::vector<uint8_t>> read(uint64_t log_id, uint64_t segment_id, bool closed, uint64_t offset,
                                    uint32_t max_bytes);
  // Drops the open or unflushed buffer (re-zeroed, back to the pool) and
  // the stored copy.
  Status free(uint64_t log_id, uint64_t segment_id);

  const BackupOptions& options() const;
  BackupCounters counters() const;
  // The same without waiting: nullopt while another thread holds the
  // backup (for a thread that must not block, e.g. one that steps a manual
  // engine the holder may be waiting for).
  std::optional<BackupCounters> try_counters() const;
  // Waits until no closed buffer awaits its flush (tests).
  void wait_flushed() const;
  // The buffer memory of the replica open for (log, segment), for tests.
  std::span<const uint8_t> buffer(uint64_t log_id, uint64_t segment_id) const;
  pm::Region* region() const;

  struct Impl;

 private:
  explicit Backup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::tailwind
