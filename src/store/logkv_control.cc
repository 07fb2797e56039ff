// What the in-process cluster and a deployment share: building a storage
// server, its log, the coordinator's control requests and their wire
// format, and recovery's replay of a crashed log.
#include <algorithm>
#include <limits>

#include "ferry/common/cpu.h"
#include "logkv_internal.h"

namespace ferry::store::logkv {

namespace detail {

rpc::ServerOptions rpc_options(const ServerOptions& so) {
  rpc::ServerOptions ro;
  ro.mode = rpc::Mode::kRawRpc;
  ro.workers = so.workers + 1;  // the last one serves the backup's requests only
  ro.max_request_bytes = so.max_request_bytes;
  ro.max_response_bytes = std::max<uint32_t>(16 << 10, so.max_request_bytes);  // GET values, backup read chunks
  // A receive buffer holds at least one request of the largest size.
  while (ro.buffer_bytes < so.max_request_bytes) ro.buffer_bytes *= 2;
  ro.worker_cpus = so.worker_cpus;
  ro.runtime = so.runtime;
  return ro;
}

rpc::ServerInfo rpc_info(const ServerOptions& so) {
  const rpc::ServerOptions ro = rpc_options(so);
  rpc::ServerInfo i;
  i.mode = ro.mode;
  i.workers = ro.workers;
  i.max_request_bytes = ro.max_request_bytes;
  i.max_response_bytes = ro.max_response_bytes;
  return i;
}

rpc::ServerOptions coordinator_rpc_options() {
  rpc::ServerOptions ro;
  ro.mode = rpc::Mode::kRawRpc;
  ro.workers = 2;
  ro.max_request_bytes = 4096;
  ro.max_response_bytes = 64 << 10;  // a table map of 16 K tablets
  return ro;
}

rpc::ServerInfo coordinator_rpc_info() {
  const rpc::ServerOptions ro = coordinator_rpc_options();
  rpc::ServerInfo i;
  i.mode = ro.mode;
  i.workers = ro.workers;
  i.max_request_bytes = ro.max_request_bytes;
  i.max_response_bytes = ro.max_response_bytes;
  return i;
}

void reply_status(rpc::Reply& out, const Status& st) {
  if (!st.ok()) {
    const std::string& m = st.message();
    out.append({reinterpret_cast<const uint8_t*>(m.data()), std::min<size_t>(m.size(), out.capacity())});
  }
  out.set_status(static_cast<uint8_t>(st.code()));
}

Status status_of(const rpc::CallReply& reply) {
  if (reply.app_status == 0) return ok_status();
  if (reply.app_status > static_cast<uint8_t>(Code::kUnimplemented)) {
    return internal_error("logkv: reply status " + std::to_string(reply.app_status));
  }
  return Status(static_cast<Code>(reply.app_status), std::string(reply.payload.begin(), reply.payload.end()));
}

Result<rpc::CallReply> control_call(rpc::Client& client, uint32_t session, uint16_t type, uint64_t route,
                                    std::span<const uint8_t> payload) {
  FERRY_ASSIGN_OR_RETURN(auto reply, client.session(session).call(type, route, payload, /*nilext=*/false));
  FERRY_RETURN_IF_ERROR(status_of(reply));
  return reply;
}

void begin_restore(WireWriter& w, uint64_t max_version) {
  w.put<uint64_t>(max_version);
}

size_t restore_object_bytes(size_t key_bytes, size_t value_bytes) { return 8 + 8 + 2 + 4 + key_bytes + value_bytes; }

void add_restore_object(WireWriter& w, uint64_t table_id, uint64_t version, std::span<const uint8_t> key,
                        std::span<const uint8_t> value) {
  w.put<uint64_t>(table_id);
  w.put<uint64_t>(version);
  w.put<uint16_t>(static_cast<uint16_t>(key.size()));
  w.put<uint32_t>(static_cast<uint32_t>(value.size()));
  w.bytes(key);
  w.bytes(value);
}

Result<RestoreBatch> parse_restore(std::span<const uint8_t> payload) {
  WireReader r(payload);
  RestoreBatch b;
  b.max_version = r.get<uint64_t>();
  while (r.ok() && !r.done()) {
    RestoreObject o;
    o.table_id = r.get<uint64_t>();
    o.version = r.get<uint64_t>();
    const auto key_bytes = r.get<uint16_t>();
    const auto value_bytes = r.get<uint32_t>();
    o.key = r.bytes(key_bytes);
    o.value = r.bytes(value_bytes);
    if (!r.ok()) break;
    if (o.version == 0 || o.version > b.max_version) return invalid_argument("logkv: restore of a bad version");
    b.objects.push_back(o);
  }
  if (!r.done()) return invalid_argument("logkv: malformed restore batch");
  return b;
}

std::vector<uint8_t> encode_table_map(const TableMap& map) {
  WireWriter w;
  w.put<uint64_t>(map.table_id);
  w.put<uint16_t>(static_cast<uint16_t>(map.name.size()));
  w.bytes({reinterpret_cast<const uint8_t*>(map.name.data()), map.name.size()});
  w.put<uint32_t>(static_cast<uint32_t>(map.owners.size()));
  for (uint32_t o : map.owners) w.put<uint32_t>(o);
  return std::move(w.out());
}

Result<TableMap> parse_table_map(std::span<const uint8_t> payload) {
  WireReader r(payload);
  TableMap m;
  m.table_id = r.get<uint64_t>();
  const auto name_bytes = r.get<uint16_t>();
  const auto name = r.bytes(name_bytes);
  m.name.assign(name.begin(), name.end());
  const auto n = r.get<uint32_t>();
  if (!r.ok() || n == 0 || n > 65536) return invalid_argument("logkv: malformed table map");
  for (uint32_t i = 0; i < n && r.ok(); ++i) m.owners.push_back(r.get<uint32_t>());
  if (!r.done() || m.table_id == 0) return invalid_argument("logkv: malformed table map");
  return m;
}

std::vector<uint8_t> encode_assignment(const Assignment& a) {
  WireWriter w;
  w.put<uint64_t>(a.table_id);
  w.put<uint32_t>(a.tablets);
  w.put<uint32_t>(static_cast<uint32_t>(a.owned.size()));
  for (uint32_t t : a.owned) w.put<uint32_t>(t);
  return std::move(w.out());
}

Result<Assignment> parse_assignment(std::span<const uint8_t> payload) {
  WireReader r(payload);
  Assignment a;
  a.table_id = r.get<uint64_t>();
  a.tablets = r.get<uint32_t>();
  const auto n = r.get<uint32_t>();
  if (!r.ok() || a.table_id == 0 || a.tablets == 0 || a.tablets > 65536 || n > a.tablets) {
    return invalid_argument("logkv: malformed tablet assignment");
  }
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    a.owned.push_back(r.get<uint32_t>());
    if (a.owned.back() >= a.tablets) return invalid_argument("logkv: assignment of a tablet out of range");
  }
  if (!r.done()) return invalid_argument("logkv: malformed tablet assignment");
  return a;
}

Result<std::unordered_map<std::string, Replayed>> replay(
    const std::vector<tailwind::RecoveredSegment>& segments, const std::map<uint64_t, uint32_t>& tablet_counts,
    const std::map<std::pair<uint64_t, uint32_t>, uint32_t>& moves, RecoveryProgress* progress,
    const std::function<void(const RecoveryProgress&)>& on_progress, uint64_t* max_version) {
  std::unordered_map<std::string, Replayed> objects;
  for (const auto& seg : segments) {
    Status st = tailwind::for_each_entry(seg.bytes, [&](const tailwind::Entry& e) {
      if (e.type != tailwind::EntryType::kObject && e.type != tailwind::EntryType::kTombstone) return;
      if (max_version != nullptr) *max_version = std::max(*max_version, e.version);
      if (e.table_id == kVersionFloorTable) return;
      ++progress->objects_replayed;
      auto tc = tablet_counts.find(e.table_id);
      if (tc == tablet_counts.end()) return;
      if (moves.count({e.table_id, tablet_of(key_hash(e.table_id, e.key), tc->second)}) == 0) return;
      Replayed& r = objects[index_key(e.table_id, e.key)];
      r.table_id = e.table_id;
      if (r.key.empty() && !e.key.empty()) r.key.assign(e.key.begin(), e.key.end());
      if (r.fold(e)) r.value.assign(e.value.begin(), e.value.end());
    });
    if (!st.ok()) {
      return Status(st.code(), "logkv: replaying segment " + std::to_string(seg.segment_id) + ": " + st.message());
    }
    ++progress->segments_done;
    progress->bytes += seg.bytes.size();
    if (on_progress) on_progress(*progress);
  }
  return objects;
}

}  // namespace detail

Status Server::Impl::create_log(std::vector<tailwind::BackupLink*> candidates,
                                std::function<Status(uint64_t segment_id, uint64_t version)> on_version) {
  tailwind::LogOptions lo;
  lo.log_id = log_id;
  lo.segment_bytes = options.segment_bytes;
  lo.replicas = options.replicas;
  lo.replication = options.replication;
  lo.flush = options.flush && options.media == tailwind::BufferMedia::kPm;
  lo.rpc_chunk_bytes = options.max_request_bytes - 64;
  lo.seed = 0x10c4 + index;
  lo.on_version = std::move(on_version);
  lo.runtime = options.runtime;
  FERRY_ASSIGN_OR_RETURN(log, tailwind::ReplicatedLog::create(*nic, std::move(candidates), lo));
  return ok_status();
}

Status Server::Impl::register_control_handlers() {
  Impl* s = this;
  auto reply_error = [](rpc::Reply& out, const Status& st) { detail::reply_status(out, st); };
  FERRY_RETURN_IF_ERROR(rpc->register_handler(
      detail::kLogKvAssign, {"logkv-assign", false}, [s, reply_error](const rpc::Request& r, rpc::Reply& out) {
        auto a = detail::parse_assignment(r.payload);
        if (!a.ok()) return reply_error(out, a.status());
        std::unique_lock lk(s->own_mu);
        s->tablets_of[a->table_id] = a->tablets;
        for (uint32_t t : a->owned) s->owned.insert({a->table_id, t});
        out.set_status(0);
      }));
  FERRY_RETURN_IF_ERROR(rpc->register_handler(
      detail::kLogKvBackupFailed, {"logkv-backup-failed", false},
      [s, reply_error](const rpc::Request& r, rpc::Reply& out) {
        detail::WireReader in(r.payload);
        const auto failed = in.get<uint32_t>();
        if (!in.done()) return reply_error(out, invalid_argument("logkv: malformed backup-failed"));
        if (!s->log) return reply_error(out, unavailable(s->name + " has no log yet"));
        for (size_t k = 0; k < s->link_server.size(); ++k) {
          if (s->link_server[k] != failed) continue;
          Status st = s->log->backup_failed(k);
          if (!st.ok()) return reply_error(out, st);
        }
        out.set_status(0);
      }));
  FERRY_RETURN_IF_ERROR(rpc->register_handler(
      detail::kLogKvRestore, {"logkv-restore", false}, [s, reply_error](const rpc::Request& r, rpc::Reply& out) {
        auto batch = detail::parse_restore(r.payload);
        if (!batch.ok()) return reply_error(out, batch.status());
        if (!s->log) return reply_error(out, unavailable(s->name + " has no log yet"));
        s->bump_version(batch->max_version);
        if (const Status floor = s->persist_version_floor(batch->max_version); !floor.ok()) {
          return reply_error(out, floor);
        }
        for (const auto& o : batch->objects) {
          const uint64_t hash = key_hash(o.table_id, o.key);
          detail::Partition& p = s->partition(hash);
          std::lock_guard lk(p.mu);
          auto e = s->append_and_index(p, detail::index_key(o.table_id, o.key), o.table_id, o.version, o.key, o.value);
          if (!e.ok()) return reply_error(out, e.status());
          ++s->counters.objects_recovered;
        }
        out.set_status(0);
      }));
  FERRY_RETURN_IF_ERROR(rpc->register_handler(detail::kLogKvPing, {"logkv-ping", false},
                                              [](const rpc::Request&, rpc::Reply& out) { out.set_status(0); }));
  return ok_status();
}

namespace detail {

tailwind::BackupOptions backup_options(const Server::Impl& si, bool recover) {
  const ServerOptions& so = si.options;
  tailwind::BackupOptions bo;
  bo.name = si.name;
  bo.buffer_bytes = so.segment_bytes;
  bo.buffers = so.backup_buffers;
  bo.media = so.media;
  bo.pm_path = si.dir + "/" + si.name + ".pm";
  bo.storage_dir = si.dir + "/" + si.name + "-storage";
  bo.storage_mode = so.storage_mode;
  bo.flush_in_background = so.flush_in_background;
  bo.flusher_cpu = so.worker_cpus.empty() ? -1 : so.worker_cpus.front();
  bo.runtime = so.runtime;
  bo.recover = recover;
  return bo;
}

// A storage server without its log: NIC, backup, RPC server (started).
Result<std::unique_ptr<Server::Impl>> build_server(nic::Nic& nic, std::unique_ptr<pm::PersistenceDomain> domain,
                                                   uint32_t index, const ServerOptions& so, const std::string& dir) {
  auto si = std::make_unique<Server::Impl>();
  si->index = index;
  si->name = "server-" + std::to_string(index);
  si->options = so;
  si->log_id = index + 1;
  si->domain = std::move(domain);
  si->nic = &nic;
  si->dir = dir;
  FERRY_ASSIGN_OR_RETURN(si->backup, tailwind::Backup::create(nic, si->domain.get(), backup_options(*si, false)));
  FERRY_ASSIGN_OR_RETURN(si->rpc, rpc::Server::create(nic, rpc_options(so)));
  FERRY_RETURN_IF_ERROR(si->backup->register_rpcs(*si->rpc));
  FERRY_RETURN_IF_ERROR(si->register_handlers());
  FERRY_RETURN_IF_ERROR(si->register_control_handlers());
  for (uint32_t w = 0; w < so.workers; ++w) si->partitions.push_back(std::make_unique<Partition>());
  FERRY_RETURN_IF_ERROR(si->rpc->start());
  return si;
}

}  // namespace detail

}  // namespace ferry::store::logkv
