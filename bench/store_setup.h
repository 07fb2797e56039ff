// `ferry bench store` (store_bench.h), its systems under test: the
// transactional store on HyperLoop or a Naive baseline, Redis with two
// replicas, and replicated RocksDB, each seen by the points as a YcsbTarget
// (one timed operation a call), built and loaded before the points.
#pragma once

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "common.h"
#include "ferry/common/cpu.h"
#include "ferry/common/status.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/txn_kv.h"
#include "ferry/hyperloop/txn_kv_wire.h"
#include "ferry/nic/engine.h"
#include "ferry/rocksdb/replicated_wal.h"
#include "ferry/rocksdb/wal_applier.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"
#include "redis_peer.h"
#include "store_bench.h"

namespace ferry::bench::store_bench {

inline constexpr const char* kRedisSystem = "redis-wait2";

// What a YCSB point drives: one system's store. Each call is one timed
// operation; between_ops() runs untimed after each (a replica's work off
// the critical path).
class YcsbTarget {
 public:
  virtual ~YcsbTarget() = default;
  virtual Status read(const std::string& key) = 0;
  virtual Status write(const std::string& key, std::span<const uint8_t> value) = 0;
  // A key not written before (D's and E's inserts); by default a write.
  virtual Status insert(const std::string& key, std::span<const uint8_t> value) { return write(key, value); }
  virtual Status read_modify_write(const std::string& key, std::span<const uint8_t> value) = 0;
  // CPU time of the replicas' processes or threads so far, ns.
  virtual uint64_t replica_cpu_ns() = 0;
  // Time this (client) thread's engine passes found nothing to do so far,
  // ns, when it steps every NIC (a manual engine); nullopt otherwise.
  virtual std::optional<uint64_t> nic_idle_ns() { return std::nullopt; }
  // Group operations (chain traversals) the writes have submitted so far,
  // locks included; nullopt for a system without a chain (Redis).
  virtual std::optional<uint64_t> traversals() { return std::nullopt; }
  // The thread that serves reads on the replica's CPU (its read service's
  // worker), once it has served one; nullopt when reads run here.
  virtual std::optional<int> read_server_tid() { return std::nullopt; }
  virtual Status between_ops() { return ok_status(); }
  // Open loop: the client has nothing to do until `until_ns` (the next
  // arrival); background work that fits goes here. By default between_ops().
  virtual Status idle(uint64_t until_ns) {
    (void)until_ns;
    return between_ops();
  }
  // YCSB-E: up to `count` records from `key` on; returns how many it read.
  virtual Result<uint64_t> scan(const std::string& key, uint32_t count) {
    (void)key;
    (void)count;
    return unimplemented("this system has no range scans");
  }
};

// One system's engine, client, data group (PM by default), DRAM lock group
// (hint H8) and transaction log: what the store and RocksDB both run on.
struct TxnChainParts {
  std::unique_ptr<nic::Engine> engine;
  std::unique_ptr<hyperloop::GroupClient> client;
  hyperloop::GroupId data = 0, locks = 0;
  std::unique_ptr<hyperloop::TxnClient> txn;
};

// Reads served by the tail replica's CPU, as `ferry store replica` serves
// them: its RPC read service (txn_kv_wire.h; RawRPC, one worker thread on
// replica_cpu, where the load runs; it polls, yielding when idle) answers
// GETs and SCANs from the tail's image under that replica's read locks. The
// client asks through a NIC of its own on the same engine.
struct ReplicaReadService {
  std::unique_ptr<hyperloop::TxnKvReplicaReader> reader;  // the worker thread's
  std::unique_ptr<rpc::Server> server;
  std::unique_ptr<rpc::Client> client;
  std::shared_ptr<std::atomic<int>> tid = std::make_shared<std::atomic<int>>(0);
  uint32_t value_bytes = 0;
  // One GET or SCAN page; kOk/kNotFound/...: the reply's status.
  Result<hyperloop::TxnKvReadReply> ask(const hyperloop::TxnKvReadRequest& request);
  ~ReplicaReadService() {
    client.reset();
    if (server) server->stop();
    server.reset();
  }
};

// One system's client, groups, transaction log and store.
struct StoreUnderTest : YcsbTarget, TxnChainParts {
  std::string name;
  std::unique_ptr<hyperloop::TxnKv> kv;
  hyperloop::TxnKvOptions kv_options;
  std::unique_ptr<hyperloop::TxnKvReplicaReader> reader;  // the tail's image, under its read lock
  std::unique_ptr<ReplicaReadService> remote;             // set: reads go to the tail's CPU instead
  Status read(const std::string& key) override;
  Status write(const std::string& key, std::span<const uint8_t> value) override;
  Status read_modify_write(const std::string& key, std::span<const uint8_t> value) override;
  Result<uint64_t> scan(const std::string& key, uint32_t count) override;
  uint64_t replica_cpu_ns() override;
  std::optional<uint64_t> nic_idle_ns() override { return engine->stats().idle_pass_ns; }
  std::optional<uint64_t> traversals() override { return txn->counters().traversals; }
  std::optional<int> read_server_tid() override {
    if (!remote || remote->tid->load() == 0) return std::nullopt;
    return remote->tid->load();
  }
  ~StoreUnderTest() override {
    remote.reset();
    reader.reset();
    kv.reset();
    txn.reset();
    client.reset();
    engine.reset();
  }
};

// Redis with a primary and two replicas: an update is SET + WAIT 2 0, an
// insert MULTI/SET/ZADD/EXEC (the key into the ordered index) + WAIT 2 0, a
// read a GET from the primary, a read-modify-write GET then SET + WAIT, a
// scan ZRANGEBYLEX on the index then MGET (RedisPeer::scan).
//
// Every scan's answer is checked, untimed, in the between_ops() after it:
// it starts at the start key (every scan starts at a loaded key, and no
// key is ever removed), its keys ascend, every value is there with
// value_bytes bytes, and it holds `count` records unless it ends at the
// largest key written. A mismatch is counted and fails the point.
struct RedisUnderTest : YcsbTarget {
  std::unique_ptr<RedisPeer> peer;
  uint32_t value_bytes = 0;
  std::string largest_key;  // of every key loaded or inserted
  // The last scan's request and answer, for between_ops() to check.
  std::string scan_start;
  uint32_t scan_count = 0;
  std::vector<RedisRecord> scan_records;
  bool scan_pending = false;
  uint64_t scans_checked = 0;
  uint64_t scan_mismatches = 0;

  Status read(const std::string& key) override {
    auto v = peer->get(key);
    if (!v.ok()) return v.status();
    return v->has_value() ? ok_status() : not_found("redis GET " + key + ": absent");
  }
  Status write(const std::string& key, std::span<const uint8_t> value) override {
    return peer->set_replicated(key, value);
  }
  Status read_modify_write(const std::string& key, std::span<const uint8_t> value) override {
    auto cur = peer->get(key);
    if (!cur.ok()) return cur.status();
    std::vector<uint8_t> next = cur->has_value() ? std::vector<uint8_t>((*cur)->begin(), (*cur)->end())
                                                 : std::vector<uint8_t>(value.begin(), value.end());
    if (!next.empty()) next[0] = static_cast<uint8_t>(next[0] + 1);
    return peer->set_replicated(key, next);
  }
  Status insert(const std::string& key, std::span<const uint8_t> value) override {
    FERRY_RETURN_IF_ERROR(peer->insert_replicated(key, value));
    largest_key = std::max(largest_key, key);
    return ok_status();
  }
  Result<uint64_t> scan(const std::string& key, uint32_t count) override {
    FERRY_ASSIGN_OR_RETURN(scan_records, peer->scan(key, count));
    scan_start = key;
    scan_count = count;
    scan_pending = true;
    return scan_records.size();
  }
  uint64_t replica_cpu_ns() override { return peer->replica_cpu_ns(); }
  Status between_ops() override {
    if (!scan_pending) return ok_status();
    scan_pending = false;
    ++scans_checked;
    const std::string wrong = scan_mismatch();
    if (wrong.empty()) return ok_status();
    ++scan_mismatches;
    return internal_error(fmt::format("redis scan of {} from {}: {} ({} of {} scans wrong)", scan_count, scan_start,
                                      wrong, scan_mismatches, scans_checked));
  }
  // What is wrong with the last scan's answer ("" if nothing).
  std::string scan_mismatch() const {
    if (scan_records.empty()) return "no record";
    if (scan_records.size() > scan_count) return fmt::format("{} records", scan_records.size());
    if (scan_records.front().key != scan_start) return "first key " + scan_records.front().key;
    for (size_t i = 0; i < scan_records.size(); ++i) {
      const RedisRecord& rec = scan_records[i];
      if (i > 0 && rec.key <= scan_records[i - 1].key) return "keys out of order at " + rec.key;
      if (!rec.value.has_value()) return "no value for " + rec.key;
      if (rec.value->size() != value_bytes) return fmt::format("{} B value for {}", rec.value->size(), rec.key);
    }
    if (scan_records.size() < scan_count && scan_records.back().key != largest_key) {
      return fmt::format("{} records, ending at {} before the largest key {}", scan_records.size(),
                         scan_records.back().key, largest_key);
    }
    return "";
  }
};

// Replicated RocksDB (§5.1, Figure 11): the real RocksDB with its WAL
// replicated at every Sync through one system's TxnClient. Reads are the
// head's (db->Get); updates are db->Put with sync = true, so that each one
// returns after its WAL bytes are durable on every replica. Each replica
// keeps its own database, brought up to date by its applier off the
// critical path (untimed, between operations).
struct RocksUnderTest : YcsbTarget, TxnChainParts {
  static constexpr uint32_t kReplicas = 3;
  std::string name;
  std::string dir;  // RocksDB's own files (SST, MANIFEST, the head's WAL); the replicas' in dir-replica<r>
  rocks::AppliedPositions positions{kReplicas};        // the head's view of the appliers; outlives the file system
  std::shared_ptr<rocks::ReplicatedWalFileSystem> fs;  // outlives the Env and the DB
  std::unique_ptr<::rocksdb::Env> env;
  std::unique_ptr<::rocksdb::DB> db;
  std::vector<std::unique_ptr<rocks::WalApplier>> appliers;
  uint64_t writes_since_catch_up = 0;
  uint64_t applier_cpu_ns = 0;  // the appliers' CPU (the replicas' off the critical path), on this thread
  uint64_t applied_records = 0;
  std::string get_buffer;

  ~RocksUnderTest() override {
    db.reset();
    env.reset();
    fs.reset();
    for (uint32_t r = 0; r < appliers.size(); ++r) positions.attach(r, nullptr);
    appliers.clear();
    txn.reset();
    client.reset();
    engine.reset();
    std::error_code ec;
    if (!dir.empty()) {
      std::filesystem::remove_all(dir, ec);
      for (uint32_t r = 0; r < kReplicas; ++r) std::filesystem::remove_all(replica_dir(r), ec);
    }
  }
  std::string replica_dir(uint32_t r) const { return dir + "-replica" + std::to_string(r); }
  Status read(const std::string& key) override {
    const ::rocksdb::Status s = db->Get(::rocksdb::ReadOptions(), key, &get_buffer);
    return s.ok() ? ok_status() : internal_error("rocksdb Get: " + s.ToString());
  }
  Status write(const std::string& key, std::span<const uint8_t> value) override {
    ::rocksdb::WriteOptions wo;
    wo.sync = true;  // the WAL's Sync: replicated to every replica before Put returns
    const ::rocksdb::Status s =
        db->Put(wo, key, ::rocksdb::Slice(reinterpret_cast<const char*>(value.data()), value.size()));
    ++writes_since_catch_up;
    return s.ok() ? ok_status() : internal_error("rocksdb Put: " + s.ToString());
  }
  Status read_modify_write(const std::string& key, std::span<const uint8_t> value) override {
    FERRY_RETURN_IF_ERROR(read(key));
    return write(key, value);
  }
  uint64_t replica_cpu_ns() override { return client->replica_cpu_ns(); }
  std::optional<uint64_t> nic_idle_ns() override { return engine->stats().idle_pass_ns; }
  std::optional<uint64_t> traversals() override { return txn->counters().traversals; }
  // Every replica's applier applies at most `records` WAL records.
  Status apply(uint64_t records) {
    const uint64_t t0 = thread_cpu_time_ns();
    for (auto& a : appliers) {
      FERRY_ASSIGN_OR_RETURN(const uint64_t n, a->poll(records));
      applied_records += n;
    }
    applier_cpu_ns += thread_cpu_time_ns() - t0;
    return ok_status();
  }
  // The replicas' streams catch up (ExecuteAndAdvance) and their appliers
  // apply them, off the critical path, every 64 synced writes: the paper's
  // replicas that "wake up periodically"; the 1 MiB log ring and the 16 MiB
  // stream then never fill during a Put.
  Status between_ops() override {
    if (writes_since_catch_up < 64) return ok_status();
    writes_since_catch_up = 0;
    FERRY_RETURN_IF_ERROR(fs->catch_up());
    return apply(~uint64_t{0});
  }
  // Open loop: the same catch-up, a record at a time while the next arrival
  // is further off than one record takes (its running estimate), then the
  // appliers, a few WAL records at a time likewise, so that it stays off the
  // critical path as it is closed loop; a catch-up that never finds room
  // leaves the ring to fill, and Put then executes for room (counted in
  // executes_for_room), or the stream to fill, and Put then waits for the
  // appliers (stream_full_waits).
  Status idle(uint64_t until_ns) override {
    if (writes_since_catch_up < 64 && !catching_up) return ok_status();
    catching_up = true;
    writes_since_catch_up = 0;
    for (;;) {
      const uint64_t t0 = now_ns();
      if (t0 + record_ns > until_ns) return ok_status();
      FERRY_ASSIGN_OR_RETURN(const bool executed, fs->catch_up_one());
      if (!executed) break;
      record_ns = (7 * record_ns + (now_ns() - t0)) / 8;
    }
    for (;;) {
      const uint64_t t0 = now_ns();
      if (t0 + apply_ns > until_ns) return ok_status();
      const uint64_t before = applied_records;
      FERRY_RETURN_IF_ERROR(apply(kApplyBatch));
      if (applied_records == before) {
        catching_up = false;
        return ok_status();
      }
      apply_ns = (7 * apply_ns + (now_ns() - t0)) / 8;
    }
  }
  static constexpr uint64_t kApplyBatch = 8;  // WAL records per applier per step in the open loop's gaps
  bool catching_up = false;
  uint64_t record_ns = 100'000;  // a record's catch-up time, estimated
  uint64_t apply_ns = 200'000;   // an apply step's time (every replica), estimated
};

// YCSB's key of record n, key_bytes long.
std::string key_of(uint64_t n, uint32_t key_bytes);

// Each builds its system and loads o.records records (untimed), logging how.
// capacity: the store's records at most (D's and E's inserts too).
// `reads_at` "client": reads and scans on the client thread over the
// tail's image; "replica": through the tail's read service (ReplicaReadService).
Result<std::unique_ptr<StoreUnderTest>> start_store(const std::string& name, const std::string& reads_at,
                                                    const StoreBenchOptions& o, uint64_t capacity, std::ostream& log);
Result<std::unique_ptr<RedisUnderTest>> start_redis(const StoreBenchOptions& o, int client_cpu, std::ostream& log);
Result<std::unique_ptr<RocksUnderTest>> start_rocks(const std::string& name, const StoreBenchOptions& o,
                                                    std::ostream& log);

}  // namespace ferry::bench::store_bench
