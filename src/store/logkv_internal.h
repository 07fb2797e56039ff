// LogKv's internals shared by its .cc files: the wire codec, a server's
// index and ownership, the cluster's coordinator state.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ferry/common/runtime.h"
#include "ferry/pm/domain.h"
#include "ferry/store/logkv.h"
#include "ferry/store/logkv_wire.h"
#include "ferry/tailwind/format.h"

namespace ferry::store::logkv {
namespace detail {

// ---- wire: ferry/store/logkv_wire.h ----

using logkv::encode_request;
using logkv::kConditional;
using logkv::parse_request;
using logkv::ParsedRequest;
using logkv::RequestHeader;

// ---- a server ----

// Where a key's newest version lives in the log.
struct IndexEntry {
  uint64_t segment_id = 0;
  uint64_t offset = 0;       // of the entry's header in the segment
  uint64_t bytes = 0;        // entry and its checksum entry (live bytes)
  uint64_t version = 0;
  uint64_t value_offset = 0; // in the segment
  uint32_t value_bytes = 0;
};

// One worker's share of the index (keys with key_hash % workers == w).
// Its mutex is held by the worker for a whole request, by the cleaner to
// move an entry and by recovery to add one.
struct Partition {
  mutable Mutex mu;
  std::unordered_map<std::string, IndexEntry> map;  // table id (8 bytes) + key
  // Keys whose last append failed after its entry was in the log
  // (ReplicatedLog's `written`): the log may hold what the index does not
  // (a failed PUT's object, a failed DELETE's tombstone), which the next
  // appends replicate and a recovery would replay. Settled before the key's
  // next write and by every cleaner pass (Server::Impl::settle_locked).
  struct InDoubt {
    uint64_t table_id = 0;
    std::vector<uint8_t> key;
    uint64_t version = 0;     // the highest version an in-doubt object or tombstone names
    uint64_t segment_id = 0;  // where that entry is
  };
  std::map<std::string, InDoubt> in_doubt;
};

std::string index_key(uint64_t table_id, std::span<const uint8_t> key);

// The RPC server every storage server runs, and what a remote client must
// expect of it (the last worker serves backup requests only).
rpc::ServerOptions rpc_options(const ServerOptions& so);
rpc::ServerInfo rpc_info(const ServerOptions& so);

// ---- control wire (docs/tailwind.md, "LogKv control requests") ----
// Little-endian fields appended in order; the reader takes untrusted bytes:
// a read past the end or a leftover byte makes the message malformed.

class WireWriter {
 public:
  template <typename T>
  void put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof v);
    std::memcpy(out_.data() + at, &v, sizeof v);
  }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  size_t size() const { return out_.size(); }
  std::vector<uint8_t>& out() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

class WireReader {
 public:
  explicit WireReader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  T get() {
    T v{};
    if (!ok_ || in_.size() - at_ < sizeof v) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::span<const uint8_t> bytes(size_t n) {
    if (!ok_ || in_.size() - at_ < n) {
      ok_ = false;
      return {};
    }
    auto b = in_.subspan(at_, n);
    at_ += n;
    return b;
  }
  bool ok() const { return ok_; }
  bool done() const { return ok_ && at_ == in_.size(); }

 private:
  std::span<const uint8_t> in_;
  size_t at_ = 0;
  bool ok_ = true;
};

// Requests a server serves for the coordinator (beside kLogKv*).
enum ControlType : uint16_t {
  kLogKvAssign = 80,        // table, tablets, the tablets now served here
  kLogKvBackupFailed = 81,  // server index: replace the replicas it held
  kLogKvRestore = 82,       // recovery: objects to append and serve
  kLogKvPing = 83,          // heartbeat (on the backup worker)
};
// Requests the coordinator serves.
enum CoordinatorType : uint16_t {
  kCoordEnlist = 90,       // server index -> log id
  kCoordTable = 91,        // by id or name -> TableMap
  kCoordCreateTable = 92,  // name -> TableMap
  kCoordVersion = 93,      // log, segment, replica version
  kCoordFreed = 94,        // log, segment
};

// The coordinator's RPC server (worker 0: enlist and tables; worker 1: the
// logs' version and free reports, so a server's log never waits behind a
// table request that waits for that server), and the service names.
rpc::ServerOptions coordinator_rpc_options();
rpc::ServerInfo coordinator_rpc_info();
inline constexpr uint32_t kCoordTableWorker = 0;
inline constexpr uint32_t kCoordLogWorker = 1;
inline constexpr std::string_view kServerService = "logkv";
inline constexpr std::string_view kBackupDataService = "tailwind";
inline constexpr std::string_view kCoordinatorService = "logkv-coordinator";

// A control reply: app status = Status code (0 ok), payload = the error's message.
void reply_status(rpc::Reply& out, const Status& st);
Status status_of(const rpc::CallReply& reply);
// A synchronous control call whose error reply becomes its Status.
Result<rpc::CallReply> control_call(rpc::Client& client, uint32_t session, uint16_t type, uint64_t route,
                                    std::span<const uint8_t> payload);

struct RestoreObject {
  uint64_t table_id = 0;
  uint64_t version = 0;
  std::span<const uint8_t> key, value;
};
struct RestoreBatch {
  uint64_t max_version = 0;
  std::vector<RestoreObject> objects;  // views into the message
};
// Objects are appended while the batch stays under max_bytes.
void begin_restore(WireWriter& w, uint64_t max_version);
size_t restore_object_bytes(size_t key_bytes, size_t value_bytes);
void add_restore_object(WireWriter& w, uint64_t table_id, uint64_t version, std::span<const uint8_t> key,
                        std::span<const uint8_t> value);
Result<RestoreBatch> parse_restore(std::span<const uint8_t> payload);

std::vector<uint8_t> encode_table_map(const TableMap& map);
Result<TableMap> parse_table_map(std::span<const uint8_t> payload);

struct Assignment {
  uint64_t table_id = 0;
  uint32_t tablets = 0;
  std::vector<uint32_t> owned;
};
std::vector<uint8_t> encode_assignment(const Assignment& a);
Result<Assignment> parse_assignment(std::span<const uint8_t> payload);

// ---- recovery's replay (shared by the in-process and the deployed coordinator) ----

// Per key the newest object, unless a tombstone at or above its version
// says it was removed.
struct Replayed {
  uint64_t table_id = 0;
  uint64_t object_version = 0;
  uint64_t tombstone_version = 0;
  std::vector<uint8_t> key, value;
  bool live() const { return object_version != 0 && object_version > tombstone_version; }
  // Folds one object or tombstone of the key in (the rule every replay and
  // verify_index use); true if `e` is now the key's newest object.
  bool fold(const tailwind::Entry& e) {
    if (e.type == tailwind::EntryType::kTombstone) {
      tombstone_version = std::max(tombstone_version, e.version);
      return false;
    }
    if (e.version <= object_version) return false;
    object_version = e.version;
    return true;
  }
};
// Replays `segments` keeping the entries of tablets in `moves` (tablet_counts
// gives each table's tablet count); calls `progress` after each segment.
// `max_version`, if given, gets the highest version any object, tombstone
// or version floor of the segments names, of every tablet.
Result<std::unordered_map<std::string, Replayed>> replay(
    const std::vector<tailwind::RecoveredSegment>& segments, const std::map<uint64_t, uint32_t>& tablet_counts,
    const std::map<std::pair<uint64_t, uint32_t>, uint32_t>& moves, RecoveryProgress* progress,
    const std::function<void(const RecoveryProgress&)>& on_progress, uint64_t* max_version = nullptr);

// A server's version floor (RAMCloud's safeVersion): a record in its log at
// or above every version the server has assigned whose object or tombstone
// is no longer in the log -- dropped by the cleaner (a deleted key's last
// object and tombstone), or left behind by a recovery (restores bring only
// live objects). A recovery assigns above every version its log names, the
// floors included, so a key deleted and written again never gets a version
// it had before (versions-grow; found by the simulator, seed 8243). It is a
// tombstone in a table no one can create, which nothing indexes.
inline constexpr uint64_t kVersionFloorTable = UINT64_MAX;
inline constexpr std::string_view kVersionFloorKey = "version-floor";

}  // namespace detail

struct Server::Impl {
  uint32_t index = 0;
  std::string name;
  ServerOptions options;
  uint64_t log_id = 0;  // index + 1

  std::unique_ptr<pm::PersistenceDomain> domain;
  nic::Nic* nic = nullptr;
  std::unique_ptr<tailwind::Backup> backup;
  std::unique_ptr<rpc::Server> rpc;  // workers 0..W-1 serve clients, worker W backup requests
  std::vector<std::unique_ptr<tailwind::BackupLink>> links;  // to the other servers' backups
  std::vector<uint32_t> link_server;                          // links[k] is to server link_server[k]
  std::unique_ptr<tailwind::ReplicatedLog> log;
  std::atomic<bool> alive{true};        // a member, in the coordinator's view
  std::atomic<bool> running{true};      // its process runs (it serves whoever reaches it)
  std::atomic<bool> partitioned{false}; // cut off from the coordinator: its reports do not land
  // Its backup answers (find, read, free): a running server's, or one
  // restarted after a crash (Cluster::restart_backup). False while its host
  // is down after a crash or a power failure.
  std::atomic<bool> backup_up{true};
  bool powered_off = false;            // its host lost power (its backup's memory went through the PM model)
  bool restarted = false;              // its backup runs again (backup only: no log, no tablets)
  std::atomic<bool> recovered{false};  // its tablets were rebuilt elsewhere (its log's replicas are garbage)
  std::string dir;                     // the cluster's directory (its backup's PM file and storage)
  // RPC servers of earlier lives (stopped), kept until the cluster goes:
  // other servers' links were made against them.
  std::vector<std::unique_ptr<rpc::Server>> retired_rpcs;

  std::vector<std::unique_ptr<detail::Partition>> partitions;
  std::atomic<uint64_t> next_version{1};

  mutable Mutex live_mu;                    // live
  std::map<uint64_t, int64_t> live;         // segment -> live bytes (objects and tombstones)

  // Tablets served here; tablets_of gives each known table's tablet count.
  mutable SharedMutex own_mu;
  std::set<std::pair<uint64_t, uint32_t>> owned;
  std::map<uint64_t, uint32_t> tablets_of;

  Mutex clean_mu;  // one cleaner pass at a time
  // Told before a segment of this log is freed on its backups (the
  // coordinator then ignores any replica of it that survives on a backup);
  // an error keeps the segment (the cleaner retries at its next pass).
  std::function<Status(uint64_t segment_id)> on_freed;

  struct Counters {
    std::atomic<uint64_t> puts{0}, gets{0}, removes{0}, conditional_failures{0}, wrong_server{0},
        replication_failures{0}, segments_cleaned{0}, objects_relocated{0}, tombstones_relocated{0},
        tombstones_dropped{0}, objects_recovered{0}, keys_settled{0};
  } counters;

  uint32_t client_workers() const { return options.workers; }
  uint32_t backup_worker() const { return options.workers; }
  detail::Partition& partition(uint64_t hash) { return *partitions[hash % partitions.size()]; }
  bool owns(uint64_t table_id, uint64_t hash) const;
  // After a failed append: a fenced log (kPermissionDenied) means this
  // server was declared failed; it stops serving every tablet.
  void note_append_failure(const Status& st);
  void add_live(uint64_t segment_id, int64_t bytes);

  Status register_handlers();
  // The coordinator's requests (ControlType).
  Status register_control_handlers();
  // The log over `candidates` (links[k] is to server link_server[k]).
  Status create_log(std::vector<tailwind::BackupLink*> candidates,
                    std::function<Status(uint64_t segment_id, uint64_t version)> on_version);
  // Appends (table, key) at `version` with `value` and points the index at
  // it; the partition's lock must be held. Used by PUT and recovery. With
  // `tombstone_replaced` (a PUT) a version the index held is killed by a
  // tombstone in the same append (ReplicatedLog::append_object_replacing);
  // never for the cleaner's relocations, which keep the same version.
  // `unsynced` (a recovery master's restore): the append does not wait for
  // its replicas (ReplicatedLog::append_object_unsynced); the caller syncs
  // the log before anything indexed so is served.
  Result<detail::IndexEntry> append_and_index(detail::Partition& p, const std::string& ikey, uint64_t table_id,
                                              uint64_t version, std::span<const uint8_t> key,
                                              std::span<const uint8_t> value, bool tombstone_replaced = false,
                                              bool unsynced = false);
  // After a failed append whose entry is in the log (written.bytes != 0).
  static void note_in_doubt(detail::Partition& p, const std::string& ikey, uint64_t table_id,
                            std::span<const uint8_t> key, uint64_t version, const tailwind::LogPosition& written);
  // Makes the log say what the index says for a key in doubt, with one more
  // append: the indexed object again at a new version (above every version
  // the log names for the key), or, with nothing indexed, a tombstone for the
  // in-doubt version. The partition's lock must be held.
  Status settle_locked(detail::Partition& p, const std::string& ikey);
  Status settle_all();
  Result<CleanResult> clean();
  void bump_version(uint64_t above);
  // Appends a version floor at `floor` to the log (replicated before it
  // returns). Callers: the cleaner before it frees a segment it dropped
  // entries of, a recovery master after it restores.
  Status persist_version_floor(uint64_t floor);
};

// The coordinator's state (in the cluster).
struct Coordinator {
  mutable Mutex mu;
  std::vector<TableMap> tables;  // table_id = position + 1
  // Per log: the replica version each segment's replicas must have (a
  // freed segment: tailwind::kFreedSegment, so no replica of it is ever
  // used again).
  std::map<uint64_t, std::map<uint64_t, uint64_t>> min_versions;
};

struct Cluster::Impl {
  ClusterOptions options;
  std::string dir;
  bool own_dir = false;
  std::unique_ptr<nic::Engine> engine;
  nic::Nic* coordinator_nic = nullptr;
  std::vector<std::unique_ptr<Server>> servers;
  Coordinator coordinator;
  Mutex control_mu;                       // crash, recover, clean
  Runtime* runtime = nullptr;             // options.server.runtime, or Runtime::threads()
  // set_coordinator_down: the servers' reports and the clients' map reads fail.
  std::atomic<bool> coordinator_down{false};
  std::atomic<uint32_t> clients_made{0};  // names the clients' NICs (per cluster: a replay names them alike)

  // The background cleaner (ClusterOptions::clean_interval_ms).
  Thread cleaner;
  Mutex cleaner_mu;
  CondVar cleaner_cv;
  bool stop_cleaner = false;
  std::atomic<uint64_t> cleaner_passes{0};
  std::atomic<uint64_t> cleaner_failures{0};

  uint32_t tablets_per_table() const;
  // Tells every live log but `backup`'s own that backup `backup` failed
  // (its replicas are replaced) or is back (it may take replicas again).
  // Every log is told; the first error is returned.
  Status tell_logs(uint32_t backup, bool failed);
};

namespace detail {
// The options of a server's backup (`recover`: a restart from its PM).
tailwind::BackupOptions backup_options(const Server::Impl& si, bool recover);
// A storage server without its log: NIC, backup, RPC server (started).
Result<std::unique_ptr<Server::Impl>> build_server(nic::Nic& nic, std::unique_ptr<pm::PersistenceDomain> domain,
                                                   uint32_t index, const ServerOptions& so, const std::string& dir);
}  // namespace detail

}  // namespace ferry::store::logkv
