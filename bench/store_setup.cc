#include "store_setup.h"

#include <fmt/format.h>
#include <rocksdb/options.h>
#include <rocksdb/utilities/checkpoint.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "common.h"
#include "ferry/common/align.h"
#include "ferry/common/cpu.h"
#include "ferry/common/rng.h"
#include "ferry/hyperloop/naive.h"
#include "ferry/hyperloop/txn_kv_wire.h"
#include "group_bench.h"

namespace ferry::bench::store_bench {

using hyperloop::GroupClient;
using hyperloop::GroupId;

namespace {

// Builds `parts` for `system` with a log of 1 MB and a database of `db_bytes`.
Status start_txn_chain(const std::string& system, const StoreBenchOptions& o, uint64_t db_bytes, TxnChainParts* parts,
                       hyperloop::GroupOptions* data_options) {
  nic::EngineOptions eo;
  eo.threaded = false;  // stepped by the client thread
  eo.account_idle = true;  // how busy that thread is (the regime of every point)
  parts->engine = std::make_unique<nic::Engine>(eo);
  FERRY_ASSIGN_OR_RETURN(parts->client, make_group_client(system, *parts->engine, o.replica_cpu));
  hyperloop::TxnOptions to;
  to.log_bytes = 1 << 20;
  to.db_bytes = db_bytes;
  to.interleaved_flush = o.interleaved_flush;
  hyperloop::GroupOptions g;
  g.replicas = 3;
  g.region_bytes = (hyperloop::kTxnControlBytes + to.log_bytes + to.db_bytes + 4095) / 4096 * 4096;
  g.media = o.media;
  g.ring_ops = 128;
  g.window = 16;
  FERRY_ASSIGN_OR_RETURN(parts->data, parts->client->create_group(g));
  hyperloop::GroupOptions lg = g;
  lg.region_bytes = 4096;
  lg.media = pm::Media::kDram;  // lock words (hint H8)
  FERRY_ASSIGN_OR_RETURN(parts->locks, parts->client->create_group(lg));
  FERRY_ASSIGN_OR_RETURN(parts->txn, hyperloop::TxnClient::initialize(*parts->client, parts->data, parts->locks, to));
  *data_options = g;
  return ok_status();
}

}  // namespace

Result<hyperloop::TxnKvReadReply> ReplicaReadService::ask(const hyperloop::TxnKvReadRequest& request) {
  const std::vector<uint8_t> payload = hyperloop::encode_txn_kv_read(request);
  FERRY_ASSIGN_OR_RETURN(const rpc::CallReply reply,
                         client->session(0).call(request.type, 0, payload, /*nilext=*/false));
  FERRY_ASSIGN_OR_RETURN(hyperloop::TxnKvReadReply r, hyperloop::parse_txn_kv_reply(reply.payload));
  if (r.status != hyperloop::TxnKvReadStatus::kOk && r.status != hyperloop::TxnKvReadStatus::kNotFound) {
    return internal_error(fmt::format("the tail's read service answered status {}", static_cast<int>(r.status)));
  }
  return r;
}

Status StoreUnderTest::read(const std::string& key) {
  if (!remote) return reader->get(key).status();
  hyperloop::TxnKvReadRequest q;
  q.type = hyperloop::kTxnKvReadGet;
  q.key = key;
  FERRY_ASSIGN_OR_RETURN(const hyperloop::TxnKvReadReply r, remote->ask(q));
  if (r.status == hyperloop::TxnKvReadStatus::kNotFound) return not_found("GET " + key + ": absent on the tail");
  if (r.entries.size() != 1 || r.entries[0].second.size() != remote->value_bytes) {
    return internal_error("GET " + key + ": the tail's read service answered a malformed entry");
  }
  return ok_status();
}

Result<uint64_t> StoreUnderTest::scan(const std::string& key, uint32_t count) {
  if (!remote) {
    FERRY_ASSIGN_OR_RETURN(const auto entries, reader->scan(key, count));
    return entries.size();
  }
  // Pages of what one reply holds, each after the last key of the one before.
  uint64_t got = 0;
  std::string from = key;
  bool after = false;
  while (got < count) {
    hyperloop::TxnKvReadRequest q;
    q.type = hyperloop::kTxnKvReadScan;
    q.key = from;
    q.count = static_cast<uint32_t>(count - got);
    q.after = after;
    FERRY_ASSIGN_OR_RETURN(const hyperloop::TxnKvReadReply r, remote->ask(q));
    got += r.entries.size();
    if (!r.more || r.entries.empty()) break;
    from = r.entries.back().first;
    after = true;
  }
  return got;
}
Status StoreUnderTest::write(const std::string& key, std::span<const uint8_t> value) { return kv->put(key, value); }
Status StoreUnderTest::read_modify_write(const std::string& key, std::span<const uint8_t> value) {
  return kv->read_modify_write(key, [&](std::optional<std::span<const uint8_t>> cur) {
    std::vector<uint8_t> next =
        cur ? std::vector<uint8_t>(cur->begin(), cur->end()) : std::vector<uint8_t>(value.begin(), value.end());
    if (!next.empty()) next[0] = static_cast<uint8_t>(next[0] + 1);
    return std::optional<std::vector<uint8_t>>(std::move(next));
  });
}
uint64_t StoreUnderTest::replica_cpu_ns() { return client->replica_cpu_ns(); }

std::string key_of(uint64_t n, uint32_t key_bytes) {
  std::string k = fmt::format("user{:0{}}", n, key_bytes > 4 ? key_bytes - 4 : 1);
  k.resize(key_bytes, '0');
  return k;
}

namespace {

// The tail's read service and a client of it (ReplicaReadService).
Result<std::unique_ptr<ReplicaReadService>> start_read_service(StoreUnderTest& s, const StoreBenchOptions& o) {
  auto r = std::make_unique<ReplicaReadService>();
  r->value_bytes = o.value_bytes;
  r->reader = std::make_unique<hyperloop::TxnKvReplicaReader>(
      s.txn->replica_db(2).value(), hyperloop::ReplicaLocks(s.client->replica(s.locks, 2).value().region->data(), 4096),
      s.kv_options);
  nic::NicOptions sno;
  sno.name = "tail-reads";
  FERRY_ASSIGN_OR_RETURN(nic::Nic * server_nic, s.engine->add_nic(sno));
  nic::NicOptions cno;
  cno.name = "store-client";
  FERRY_ASSIGN_OR_RETURN(nic::Nic * client_nic, s.engine->add_nic(cno));
  rpc::ServerOptions so;  // as `ferry store replica`'s read service (apps/ferry/store_config.cc)
  so.mode = rpc::Mode::kRawRpc;
  so.workers = 1;
  so.threaded = true;
  if (o.replica_cpu >= 0) so.worker_cpus = {o.replica_cpu};
  so.multi_packet = false;
  so.buffers = 16;
  so.max_request_bytes = static_cast<uint32_t>(std::max<size_t>(
      256, round_up(rpc::kRequestHeaderBytes + hyperloop::kTxnKvReadRequestHeaderBytes + o.key_bytes, 64)));
  // A scan page holds about 16 entries (the rest in further pages).
  so.max_response_bytes = static_cast<uint32_t>(
      round_up(rpc::kResponseHeaderBytes + 16 * hyperloop::txn_kv_reply_bytes(o.key_bytes, o.value_bytes), 64));
  so.on_execute = [tid = r->tid](const rpc::Request&) {
    if (tid->load(std::memory_order_relaxed) == 0) tid->store(static_cast<int>(gettid()), std::memory_order_relaxed);
  };
  FERRY_ASSIGN_OR_RETURN(r->server, rpc::Server::create(*s.engine, *server_nic, so));
  auto handler = [reader = r->reader.get()](const rpc::Request& req, rpc::Reply& reply) {
    const std::vector<uint8_t> answer = hyperloop::answer_txn_kv_read(*reader, req.type, req.payload, reply.capacity());
    std::memcpy(reply.space().data(), answer.data(), answer.size());
    reply.set_size(answer.size());
  };
  for (const auto& [type, name] : {std::pair<uint16_t, const char*>{hyperloop::kTxnKvReadGet, "txnkv.get"},
                                   {hyperloop::kTxnKvReadScan, "txnkv.scan"}}) {
    rpc::HandlerInfo info;
    info.name = name;
    FERRY_RETURN_IF_ERROR(r->server->register_handler(type, info, handler));
  }
  FERRY_RETURN_IF_ERROR(r->server->start());
  rpc::ClientOptions co;
  co.timeout_ns = 60'000'000'000ULL;
  FERRY_ASSIGN_OR_RETURN(r->client, rpc::Client::create(*s.engine, *client_nic, *r->server, co));
  // One GET before the points, so that the worker's thread is known (its
  // schedstat is every point's read-server CPU).
  hyperloop::TxnKvReadRequest q;
  q.type = hyperloop::kTxnKvReadGet;
  q.key = "warm-up";
  FERRY_RETURN_IF_ERROR(r->ask(q).status());
  return r;
}

}  // namespace

Result<std::unique_ptr<StoreUnderTest>> start_store(const std::string& name, const std::string& reads_at,
                                                    const StoreBenchOptions& o, uint64_t capacity, std::ostream& log) {
  auto s = std::make_unique<StoreUnderTest>();
  s->name = name;
  s->kv_options.slots = static_cast<uint32_t>(std::max<uint64_t>(64, capacity * 2));  // load factor <= 0.5
  s->kv_options.key_max = o.key_bytes;
  s->kv_options.value_max = o.value_bytes;
  s->kv_options.locks = 64;
  hyperloop::GroupOptions g;
  FERRY_RETURN_IF_ERROR(start_txn_chain(name, o, hyperloop::txn_kv_db_bytes(s->kv_options), s.get(), &g));
  FERRY_ASSIGN_OR_RETURN(s->kv, hyperloop::TxnKv::create(*s->txn, s->kv_options));
  // Load the records (quiet, untimed).
  const auto t0 = now_ns();
  Rng rng(o.seed);
  std::vector<uint8_t> value(o.value_bytes);
  for (uint64_t n = 0; n < o.records; ++n) {
    for (auto& b : value) b = static_cast<uint8_t>(rng.next());
    FERRY_RETURN_IF_ERROR(s->kv->put(key_of(n, o.key_bytes), value));
    if ((n + 1) % 20000 == 0) log << fmt::format("  {}: loaded {} of {} records\n", name, n + 1, o.records);
  }
  log << fmt::format("  {}: {} records loaded in {:.1f} s ({} slots, {} MB region per replica, {})\n", name, o.records,
                     static_cast<double>(now_ns() - t0) / 1e9, s->kv_options.slots, g.region_bytes >> 20,
                     o.media == pm::Media::kPm ? "PM" : "DRAM");
  s->reader = std::make_unique<hyperloop::TxnKvReplicaReader>(
      s->txn->replica_db(2).value(),
      hyperloop::ReplicaLocks(s->client->replica(s->locks, 2).value().region->data(), 4096), s->kv_options);
  if (reads_at == "replica") {
    FERRY_ASSIGN_OR_RETURN(s->remote, start_read_service(*s, o));
  }
  return s;
}

Result<std::unique_ptr<RedisUnderTest>> start_redis(const StoreBenchOptions& o, int client_cpu, std::ostream& log) {
  auto r = std::make_unique<RedisUnderTest>();
  r->value_bytes = o.value_bytes;
  RedisPeerOptions ro;
  ro.primary_cpu = client_cpu;
  ro.replica_cpu = o.replica_cpu;
  FERRY_ASSIGN_OR_RETURN(r->peer, RedisPeer::start(ro, log));
  const auto t0 = now_ns();
  Rng rng(o.seed);
  std::vector<std::string> keys;
  keys.reserve(o.records);
  for (uint64_t n = 0; n < o.records; ++n) keys.push_back(key_of(n, o.key_bytes));
  // A few distinct random values, reused: loading is untimed and only the
  // sizes matter to Redis.
  std::vector<std::vector<uint8_t>> values(64, std::vector<uint8_t>(o.value_bytes));
  for (auto& v : values) {
    for (auto& b : v) b = static_cast<uint8_t>(rng.next());
  }
  FERRY_RETURN_IF_ERROR(r->peer->load(keys, values));
  r->largest_key = *std::max_element(keys.begin(), keys.end());
  log << fmt::format(
      "  redis-wait2: {} records loaded in {:.1f} s (pipelined SETs and ZADDs to the key index, then "
      "WAIT 2 0)\n",
      o.records, static_cast<double>(now_ns() - t0) / 1e9);
  return r;
}

namespace {
constexpr uint64_t kRocksWriteBufferBytes = 4 << 20;
}  // namespace

Result<std::unique_ptr<RocksUnderTest>> start_rocks(const std::string& name, const StoreBenchOptions& o,
                                                    std::ostream& log) {
  auto s = std::make_unique<RocksUnderTest>();
  s->name = name;
  // On tmpfs when there is one, as the paper's testbed (battery-backed DRAM
  // emulated with tmpfs): the head's own WAL fsync costs no disk.
  std::error_code ec;
  const auto base = std::filesystem::is_directory("/dev/shm", ec) ? std::filesystem::path("/dev/shm")
                                                                  : std::filesystem::temp_directory_path();
  std::string tmpl = (base / "ferry-bench-rocksdb-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return internal_error("rocksdb: mkdtemp " + tmpl + " failed");
  s->dir = tmpl;
  // The stream holds what some replica has not applied yet: its appliers
  // run every 64 updates, so a few MB at most; 16 MiB as before.
  hyperloop::GroupOptions g;
  FERRY_RETURN_IF_ERROR(
      start_txn_chain(name, o, rocks::kWalStreamHeaderBytes + 4 * kRocksWriteBufferBytes, s.get(), &g));
  rocks::ReplicatedWalOptions wal_options;
  wal_options.wal_dir = s->dir;  // not the replicas' copies
  FERRY_ASSIGN_OR_RETURN(s->fs, rocks::ReplicatedWalFileSystem::create(::rocksdb::FileSystem::Default(), *s->txn,
                                                                       wal_options, &s->positions));
  s->env = ::rocksdb::NewCompositeEnv(s->fs);
  ::rocksdb::Options ro;
  ro.create_if_missing = true;
  ro.env = s->env.get();
  ro.write_buffer_size = kRocksWriteBufferBytes;
  ro.info_log_level = ::rocksdb::InfoLogLevel::WARN_LEVEL;
  ::rocksdb::DB* raw = nullptr;
  const ::rocksdb::Status st = ::rocksdb::DB::Open(ro, s->dir, &raw);
  if (!st.ok()) return internal_error("rocksdb: open " + s->dir + ": " + st.ToString());
  s->db.reset(raw);
  // Load without the WAL (untimed): the records land in SST files, the
  // head's local files, as after a bulk load; only the timed writes go
  // through the replicated WAL.
  const auto t0 = now_ns();
  Rng rng(o.seed);
  std::vector<uint8_t> value(o.value_bytes);
  ::rocksdb::WriteOptions bulk;
  bulk.disableWAL = true;
  for (uint64_t n = 0; n < o.records; ++n) {
    for (auto& b : value) b = static_cast<uint8_t>(rng.next());
    const ::rocksdb::Slice v(reinterpret_cast<const char*>(value.data()), value.size());
    const ::rocksdb::Status p = s->db->Put(bulk, key_of(n, o.key_bytes), v);
    if (!p.ok()) return internal_error("rocksdb: load: " + p.ToString());
  }
  const ::rocksdb::Status f = s->db->Flush(::rocksdb::FlushOptions());
  if (!f.ok()) return internal_error("rocksdb: flush after load: " + f.ToString());
  // The loaded records never went through the WAL: each replica's database
  // starts as a copy of the head's (a checkpoint: hard links on tmpfs),
  // following the stream from where it stands now.
  FERRY_ASSIGN_OR_RETURN(const rocks::WalStreamCursor at, s->fs->sync_stream());
  ::rocksdb::Options replica_options;
  replica_options.write_buffer_size = kRocksWriteBufferBytes;
  replica_options.info_log_level = ::rocksdb::InfoLogLevel::WARN_LEVEL;
  for (uint32_t r = 0; r < RocksUnderTest::kReplicas; ++r) {
    ::rocksdb::Checkpoint* raw_checkpoint = nullptr;
    ::rocksdb::Status c = ::rocksdb::Checkpoint::Create(s->db.get(), &raw_checkpoint);
    std::unique_ptr<::rocksdb::Checkpoint> checkpoint(raw_checkpoint);
    if (c.ok()) c = checkpoint->CreateCheckpoint(s->replica_dir(r));
    if (!c.ok())
      return internal_error("rocksdb: copying the head's database for replica " + std::to_string(r) + ": " +
                            c.ToString());
    FERRY_RETURN_IF_ERROR(rocks::WalApplier::adopt(s->replica_dir(r), at, replica_options));
    FERRY_ASSIGN_OR_RETURN(const hyperloop::ReplicaView v, s->client->replica(s->data, r));
    FERRY_ASSIGN_OR_RETURN(auto applier,
                           rocks::WalApplier::open(std::span<const uint8_t>(v.region->data(), v.region->size()),
                                                   s->replica_dir(r), replica_options));
    s->positions.attach(r, applier.get());
    s->appliers.push_back(std::move(applier));
  }
  log << fmt::format(
      "  {}: RocksDB {} records loaded in {:.1f} s (WAL off, flushed to SST, copied to each "
      "replica's database); RocksDB's files in {}; WAL replicated at every Sync to {} replicas ({} MB "
      "region each, {}), applied to their databases off the critical path\n",
      name, o.records, static_cast<double>(now_ns() - t0) / 1e9, s->dir, g.replicas, g.region_bytes >> 20,
      o.media == pm::Media::kPm ? "PM" : "DRAM");
  return s;
}

}  // namespace ferry::bench::store_bench
