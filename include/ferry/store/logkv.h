// LogKv: a RAMCloud-like key-value store on Tailwind (ATC'18 §4), the
// storage service Tailwind's replication is measured in.
//
//   Tables of keys to values. A table is split into tablets by key hash;
//   the coordinator assigns each tablet to one storage server (its
//   primary). A server keeps its objects in log-structured memory (a
//   tailwind::ReplicatedLog whose segments are replicated to r other
//   servers' backups) and a hash index from (table, key) to where the
//   object's newest version lives in the log. Every server is primary for
//   its own tablets and backup for other servers' logs, on one rpc::Server
//   whose workers serve both client requests and (RPC baseline) replication
//   requests, as RAMCloud's cores do.
//
//   PUT appends the object to the log (replicated before the reply), then
//   points the index at it; DELETE appends a tombstone naming the segment
//   of the object it kills; GET reads the value out of the log. Versions
//   come from one counter per server, so a key's versions only grow, across
//   deletes and recoveries too (conditional PUT compares them).
//
//   Log cleaning: a closed segment whose live bytes fall below a fraction
//   of its size is compacted: its live objects (and the tombstones whose
//   object's segment may still exist on a backup) are appended again, the
//   index moved to the new copies, and the segment freed on its backups.
//
//   Crash recovery: the coordinator fences the crashed server's log on
//   every backup, recovers the log's segments (Algorithm 1 over open
//   replicas, verified closed ones, stale versions and freed segments
//   ignored), and gives each of its tablets to a live server, which replays
//   the segments (newest version wins, tombstones apply), appends the
//   surviving objects to its own replicated log and starts serving them.
//
// In process (tests, benchmarks, the demo) a Cluster builds the servers on
// one nic::Engine; each server has its own NIC and persistence domain.
//
// Thread rules: Client is used by one thread per session index; Cluster's
// control methods (crash, recover, clean) from one control thread at a
// time, concurrently with clients.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/runtime.h"
#include "ferry/common/status.h"
#include "ferry/nic/engine.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"
#include "ferry/tailwind/backup.h"
#include "ferry/tailwind/replicated_log.h"

namespace ferry::store::logkv {

// RPC request types (beside the backups' 60-66 on the same server).
enum RequestType : uint16_t {
  kLogKvPut = 70,
  kLogKvGet = 71,
  kLogKvRemove = 72,
};

// Reply status bytes.
inline constexpr uint8_t kOk = 0;
inline constexpr uint8_t kNotFound = 1;
inline constexpr uint8_t kVersionMismatch = 2;  // a conditional PUT/DELETE lost
inline constexpr uint8_t kWrongServer = 3;      // the tablet is not (or no longer) here
inline constexpr uint8_t kMalformed = 4;
inline constexpr uint8_t kUnavailable = 5;      // replication failed: not acknowledged
inline constexpr uint8_t kTooLarge = 6;         // the object does not fit a segment or a request

struct ServerOptions {
  uint32_t workers = 2;  // rpc workers: client and replication requests
  tailwind::Replication replication = tailwind::Replication::kTailwind;
  size_t segment_bytes = 8 << 20;  // = every backup's buffer size
  uint32_t replicas = 3;
  // kTailwind: FLUSH after each WRITE (PM backups). Off for DRAM buffers.
  bool flush = true;
  tailwind::BufferMedia media = tailwind::BufferMedia::kPm;
  uint32_t backup_buffers = 8;
  tailwind::StorageMode storage_mode = tailwind::StorageMode::kFdatasync;
  // Backups write closed segments to storage on a flusher thread after the
  // close has replied (the paper's design); false: inside the close.
  bool flush_in_background = true;
  uint32_t max_request_bytes = 8192;  // bounds key + value of one PUT
  // A closed segment is cleaned when live bytes < clean_below * its bytes.
  double clean_below = 0.5;
  // Pin worker w (the backup worker is the last) to worker_cpus[w % size];
  // empty: not pinned. Every server of a cluster gets the same list.
  std::vector<int> worker_cpus;
  // What runs the server's workers, flusher, log waits and (in a Cluster)
  // the cleaner, the recovery masters and the clients' waits: null for real
  // threads (Runtime::threads()); the simulator's SimRuntime makes every one
  // a fiber on virtual time (docs/simulation.md). The Cluster's engine must
  // then be manual on the runtime's clock, stepped by the simulator.
  Runtime* runtime = nullptr;
};

struct ClusterOptions {
  uint32_t servers = 4;
  ServerOptions server;
  std::string dir;  // PM files and backup storage; a fresh temp dir if empty
  uint32_t tablets_per_table = 0;  // 0: one per server
  // A cleaner thread (pinned like the servers' workers) runs a cleaning
  // pass over every live server this often, concurrently with clients
  // (0: the cleaner runs only when clean() is called).
  uint32_t clean_interval_ms = 0;
  nic::EngineOptions engine;
};

// A table's placement: tablet t (of key hashes [t * 2^64/T, (t+1) * 2^64/T))
// is served by server owners[t].
uint64_t key_hash(uint64_t table_id, std::span<const uint8_t> key);
uint32_t tablet_of(uint64_t hash, uint32_t tablets);
struct TableMap {
  uint64_t table_id = 0;
  std::string name;
  std::vector<uint32_t> owners;
  // The server whose tablet holds a key of this hash (key_hash).
  uint32_t owner_of(uint64_t hash) const { return owners[tablet_of(hash, static_cast<uint32_t>(owners.size()))]; }
};

struct ServerCounters {
  uint64_t puts = 0;
  uint64_t gets = 0;
  uint64_t removes = 0;
  uint64_t conditional_failures = 0;
  uint64_t wrong_server = 0;
  uint64_t replication_failures = 0;
  uint64_t objects = 0;        // live objects in the index now
  uint64_t segments_cleaned = 0;
  uint64_t objects_relocated = 0;    // by the cleaner
  uint64_t tombstones_relocated = 0;
  uint64_t tombstones_dropped = 0;   // their object's segment was freed
  uint64_t objects_recovered = 0;    // replayed into this server by recovery
  uint64_t keys_settled = 0;         // keys a failed append left in doubt, settled (Server::in_doubt)
};

// What recovery reports as it goes (segments replayed of those found).
struct RecoveryProgress {
  uint32_t crashed_server = 0;
  uint64_t segments_done = 0;
  uint64_t segments_total = 0;
  uint64_t objects_replayed = 0;  // entries seen
  uint64_t objects_restored = 0;  // live objects written to recovery masters
  uint64_t bytes = 0;
};
struct RecoveryResult {
  tailwind::RecoveryReport log;
  RecoveryProgress progress;
  std::vector<std::pair<uint64_t, uint32_t>> tablets_moved;  // (table, tablet) -> new owner below
  std::vector<uint32_t> new_owners;
  uint64_t elapsed_ns = 0;
  // Its phases (the runtime's clock): locating the replicas (every backup
  // fences the log and runs Algorithm 1 over its open buffers) and reading
  // them; the recovery masters' partitioned replay, in parallel; their
  // restore (appends replicated in the cluster's mode), in parallel.
  uint64_t read_ns = 0;
  uint64_t replay_ns = 0;
  uint64_t restore_ns = 0;
};

// What restart_backup found on the restarted backup.
struct RestartReport {
  uint64_t replicas_kept = 0;   // of logs not yet recovered: their recovery will read them
  uint64_t replicas_freed = 0;  // of live logs (they replaced them) and of recovered ones
  uint64_t logs_fenced = 0;     // logs of servers that are not members
};

struct CleanResult {
  uint64_t segments_cleaned = 0;
  uint64_t objects_relocated = 0;
  uint64_t tombstones_relocated = 0;
  uint64_t tombstones_dropped = 0;
  uint64_t bytes_freed = 0;
};

class Server;
class StorageServer;
struct Deployment;  // logkv_deploy.h

// The in-process cluster: one engine, `servers` storage servers (each a
// NIC, a persistence domain, a backup, an rpc::Server and a replicated
// log) and the coordinator.
class Cluster {
 public:
  static Result<std::unique_ptr<Cluster>> create(const ClusterOptions& options);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Creates a table whose tablets go round-robin over the live servers.
  // kAlreadyExists for a name in use.
  Result<uint64_t> create_table(std::string_view name);
  Result<TableMap> table(uint64_t table_id) const;
  Result<TableMap> table(std::string_view name) const;

  // Crashes server i at once: every backup fences its log first (its
  // appends in flight stay where they got to: on some replicas, partly
  // placed), then its workers stop, its log (the primary's memory) and its
  // backup's buffers are gone to the others (its replicas are replaced on
  // the surviving logs, §3.3.3). Its tablets are unavailable until
  // recover_server(i). A partitioned server is stopped the same way.
  Status crash_server(uint32_t i);
  // The coordinator loses server i (a partition): it is declared crashed --
  // every other log replaces its replicas there, and recover_server(i)
  // rebuilds its tablets elsewhere -- but its process runs on: it serves
  // whoever still reaches it (clients with an old map), its log keeps
  // replicating to its backups until they fence it, and its reports no
  // longer reach the coordinator. crash_server(i) stops it.
  Status partition_server(uint32_t i);
  // The coordinator declares server i's backup failed (its failure
  // detector lost it for a while) while the server runs on and serves its
  // tablets: every other live log replaces the replicas it had there.
  // kUnavailable (after telling every log) when a log finds no backup to
  // take them: that log acknowledges nothing until one comes back.
  Status declare_backup_failed(uint32_t i);
  // Server i's backup answers again: every other live log frees the
  // replicas it left there and may place new ones on it.
  Status declare_backup_back(uint32_t i);
  // Rebuilds a crashed server's tablets on the live servers from the
  // backups' replicas. `progress` (optional) is called after each segment.
  // Reads only backups that are up (live servers' and restarted ones);
  // while any other server's backup is down, a segment no reachable backup
  // holds a usable replica of fails the recovery kUnavailable (restart that
  // backup and retry), not kDataLoss.
  Result<RecoveryResult> recover_server(uint32_t i,
                                        const std::function<void(const RecoveryProgress&)>& progress = {});

  // Power fails on server i's host: crash_server(i) if it runs, then its
  // persistence domain loses what the PM model says a power failure loses
  // (DRAM, and the PM writes not yet durable; `seed` picks what of those
  // survives). Its backup is down, its memory and queues gone, until
  // restart_backup(i). kFailedPrecondition if its backup is already down.
  Result<pm::PowerFailReport> power_fail_server(uint32_t i, uint64_t seed);
  // A crashed or powered-off server's host comes back, as a backup only
  // (a server's new life would have a new log and no tablets; that is not
  // modelled): its backup restarts from its PM file and storage
  // (BackupOptions::recover: open buffers kept, closed ones flushed), is
  // told by the coordinator which logs are dead and fences them (its fences
  // lived in DRAM), frees the replicas nobody needs -- of live logs, which
  // replaced them when it failed, and of recovered ones -- and serves the
  // recoveries of the logs still to recover. It takes no new replicas.
  // kFailedPrecondition for a running server or a backup already up.
  Result<RestartReport> restart_backup(uint32_t i);
  // Whether server i's backup answers: a live, partitioned or restarted one.
  bool backup_up(uint32_t i) const;

  // The coordinator's store is unavailable (true) or back (false): until it
  // is back, the servers' reports (a segment's version, a freed segment)
  // and the clients' map reads fail kUnavailable, so no append that needs a
  // report is acknowledged and no segment is freed. The control operations
  // above are the coordinator's own and still run.
  void set_coordinator_down(bool down);

  // Runs the cleaner once on every live server.
  Result<CleanResult> clean();
  // Passes the background cleaner (clean_interval_ms) completed, and the
  // ones that failed (a failed pass is retried at the next interval).
  uint64_t cleaner_passes() const;
  // Stops the background cleaner once its pass under way (and its appends)
  // ended; it does not start again. Idempotent.
  void stop_cleaner();
  uint64_t cleaner_failures() const;
  Result<CleanResult> clean(uint32_t server);

  uint32_t servers() const;
  bool alive(uint32_t i) const;
  Server& server(uint32_t i);
  nic::Engine& engine();
  const ClusterOptions& options() const;
  const std::string& dir() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit Cluster(std::unique_ptr<Impl> impl);
  void run_cleaner();  // the background cleaner (a thread, or a fiber of the runtime)
  std::unique_ptr<Impl> impl_;
};

// One storage server (owned by a Cluster).
class Server {
 public:
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint32_t index() const;
  const std::string& name() const;
  rpc::Server& rpc();
  tailwind::Backup& backup();
  tailwind::ReplicatedLog& log();  // valid while alive
  // The server whose backup each of the log's backup links reaches: the
  // log's replica on backup index b (ReplicatedLog::replicas_of) is on
  // server backup_servers()[b].
  std::vector<uint32_t> backup_servers() const;
  // Its NIC's address on the fabric (what a network fault between two
  // servers names: the simulator's cuts).
  uint32_t nic_address() const;
  ServerCounters counters() const;
  // Live bytes the index points at in each live segment of the log.
  std::vector<std::pair<uint64_t, uint64_t>> live_bytes() const;
  // The current (version, value) of a key, read locally (tests, the demo).
  Result<std::pair<uint64_t, std::vector<uint8_t>>> lookup(uint64_t table_id, std::span<const uint8_t> key) const;
  // Every live object of a table here, as (key, version, value).
  std::vector<std::tuple<std::vector<uint8_t>, uint64_t, std::vector<uint8_t>>> dump(uint64_t table_id) const;
  // Keys whose last append failed after its entry reached the log (a
  // failed PUT's object, a failed DELETE's tombstone: replicated by the next
  // appends, replayed by a recovery, yet not in the index). Each is settled
  // before its key's next write and by every cleaner pass: one more append
  // makes the log say what the index says (the indexed object again at a new
  // version, or a tombstone for the failed one). settle() does it now.
  size_t in_doubt() const;
  Status settle();
  // Checks the index against the log, as a quiescent server must pass it
  // (the simulator calls it; it takes every lock, so it never sees an append
  // half done): every index entry names an object of its table, key and
  // version within the valid bytes of a segment still in the log; what a
  // recovery would rebuild from this log (per key the newest object unless
  // a tombstone at or above its version kills it) is exactly the index, so
  // nothing the index dropped can come back and nothing it holds is missing;
  // and each segment's live-byte count is its index entries' bytes plus at
  // most its tombstones', for segments in the log only. Keys in doubt are
  // left out until settled. kInternal naming the first mismatch;
  // kUnavailable on a crashed server.
  Status verify_index() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  friend class Cluster;
  friend class StorageServer;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct ClientOptions {
  uint32_t sessions = 1;  // one per client thread
  uint64_t timeout_ns = 2'000'000'000ULL;  // per call, then the map is refreshed and the call retried
  uint32_t max_attempts = 8;
  // When not 0, a call also keeps retrying (backing off 50 ms) until this
  // long has passed since its first attempt, however many attempts that
  // takes: a tablet whose server crashed moves only when the coordinator
  // has detected the crash and recovered the log, which takes longer on a
  // loaded machine than any fixed number of attempts covers.
  uint32_t retry_for_ms = 0;
  // A PUT or DELETE whose call failed after it was sent (no reply: the
  // server may have executed it) is sent again to the tablet's owner, so
  // it may apply twice (its version tells). false: it fails kUnavailable,
  // "outcome unknown", and the session's next call re-reads the map (a
  // checker of histories needs each write applied at most once). "Wrong
  // server" replies and GETs are retried either way.
  bool retry_unknown_writes = true;
};

struct GetResult {
  uint64_t version = 0;
  std::vector<uint8_t> value;
};

// A client machine: one NIC, an rpc::Client to every server. It routes by
// the coordinator's tablet map, refreshing it on kWrongServer or a failed
// call and retrying (a PUT may then apply twice; its version tells).
class Client {
 public:
  static Result<std::unique_ptr<Client>> create(Cluster& cluster, const ClientOptions& options = {});
  // A client machine of a deployment (logkv_deploy.h) on `nic` (which must
  // outlive it): RPC clients connected through the CM to the coordinator and
  // to every server. A server that cannot be reached now is skipped (its
  // tablets fail until they are recovered elsewhere). Errors: the
  // coordinator cannot be reached (kUnavailable, naming its address).
  static Result<std::unique_ptr<Client>> connect(nic::Nic& nic, const Deployment& deployment,
                                                 const ClientOptions& options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // PUT: returns the new version. With expected_version, only if the
  // object's version is that (0: the key must not exist); else
  // kFailedPrecondition.
  Result<uint64_t> put(uint32_t session, uint64_t table_id, std::span<const uint8_t> key,
                       std::span<const uint8_t> value, std::optional<uint64_t> expected_version = std::nullopt);
  // kNotFound if absent.
  Result<GetResult> get(uint32_t session, uint64_t table_id, std::span<const uint8_t> key);
  // kNotFound if absent; expected_version as for put.
  Status remove(uint32_t session, uint64_t table_id, std::span<const uint8_t> key,
                std::optional<uint64_t> expected_version = std::nullopt);

  // The coordinator's table named `name` (kNotFound), or a new one
  // (kAlreadyExists if the name is taken).
  Result<TableMap> table(uint32_t session, std::string_view name);
  Result<TableMap> create_table(uint32_t session, std::string_view name);

  uint64_t map_refreshes() const;

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::store::logkv
