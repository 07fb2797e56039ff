// LogKv's internals shared by its .cc files: the wire codec, a server's
// index and ownership, the cluster's coordinator state.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ferry/pm/domain.h"
#include "ferry/store/logkv.h"

namespace ferry::store::logkv {
namespace detail {

// ---- wire (docs/tailwind.md, "LogKv requests") ----

inline constexpr uint8_t kConditional = 1;  // RequestHeader::flags: compare expected_version

struct RequestHeader {
  uint64_t table_id;
  uint64_t expected_version;  // with kConditional; 0 = the key must not exist
  uint8_t flags;
  uint8_t reserved;           // 0
  uint16_t key_bytes;
  uint32_t value_bytes;       // PUT only; 0 otherwise
};
static_assert(sizeof(RequestHeader) == 24);

struct ParsedRequest {
  RequestHeader header{};
  std::span<const uint8_t> key;
  std::span<const uint8_t> value;
};

// The request's bytes are exactly a header, the key and the value.
bool parse_request(std::span<const uint8_t> payload, ParsedRequest* out);
std::vector<uint8_t> encode_request(uint64_t table_id, std::span<const uint8_t> key, std::span<const uint8_t> value,
                                    std::optional<uint64_t> expected_version);

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
  mutable std::mutex mu;
  std::unordered_map<std::string, IndexEntry> map;  // table id (8 bytes) + key
};

std::string index_key(uint64_t table_id, std::span<const uint8_t> key);

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
  std::atomic<bool> alive{true};

  std::vector<std::unique_ptr<detail::Partition>> partitions;
  std::atomic<uint64_t> next_version{1};

  mutable std::mutex live_mu;               // live
  std::map<uint64_t, int64_t> live;         // segment -> live bytes (objects and tombstones)

  // Tablets served here; tablets_of gives each known table's tablet count.
  mutable std::shared_mutex own_mu;
  std::set<std::pair<uint64_t, uint32_t>> owned;
  std::map<uint64_t, uint32_t> tablets_of;

  std::mutex clean_mu;  // one cleaner pass at a time
  // Told when a segment of this log is freed (the coordinator then ignores
  // any replica of it that survives on a backup).
  std::function<void(uint64_t segment_id)> on_freed;

  struct Counters {
    std::atomic<uint64_t> puts{0}, gets{0}, removes{0}, conditional_failures{0}, wrong_server{0},
        replication_failures{0}, segments_cleaned{0}, objects_relocated{0}, tombstones_relocated{0},
        tombstones_dropped{0}, objects_recovered{0};
  } counters;

  uint32_t client_workers() const { return options.workers; }
  uint32_t backup_worker() const { return options.workers; }
  detail::Partition& partition(uint64_t hash) { return *partitions[hash % partitions.size()]; }
  bool owns(uint64_t table_id, uint64_t hash) const;
  void add_live(uint64_t segment_id, int64_t bytes);

  Status register_handlers();
  // Appends (table, key) at `version` with `value` and points the index at
  // it; the partition's lock must be held. Used by PUT and recovery.
  Result<detail::IndexEntry> append_and_index(detail::Partition& p, const std::string& ikey, uint64_t table_id,
                                              uint64_t version, std::span<const uint8_t> key,
                                              std::span<const uint8_t> value);
  Result<CleanResult> clean();
  void bump_version(uint64_t above);
};

// The coordinator's state (in the cluster).
struct Coordinator {
  mutable std::mutex mu;
  std::vector<TableMap> tables;  // table_id = position + 1
  // Per log: the replica version each segment's replicas must have (a
  // freed segment: UINT64_MAX, so no replica of it is ever used again).
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
  std::mutex control_mu;  // crash, recover, clean

  // The background cleaner (ClusterOptions::clean_interval_ms).
  std::thread cleaner;
  std::mutex cleaner_mu;
  std::condition_variable cleaner_cv;
  bool stop_cleaner = false;
  std::atomic<uint64_t> cleaner_passes{0};
  std::atomic<uint64_t> cleaner_failures{0};

  uint32_t tablets_per_table() const;
};

}  // namespace ferry::store::logkv
