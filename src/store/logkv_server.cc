// A LogKv storage server: the request handlers over the hash index and the
// replicated log, and the log cleaner.
#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <tuple>

#include "ferry/common/checksum.h"
#include "ferry/tailwind/format.h"
#include "logkv_internal.h"

namespace ferry::store::logkv {

uint64_t key_hash(uint64_t table_id, std::span<const uint8_t> key) { return checksum64(key, table_id); }

uint32_t tablet_of(uint64_t hash, uint32_t tablets) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(hash) * tablets) >> 64);
}

namespace detail {

std::string index_key(uint64_t table_id, std::span<const uint8_t> key) {
  std::string k(sizeof table_id + key.size(), '\0');
  std::memcpy(k.data(), &table_id, sizeof table_id);
  if (!key.empty()) std::memcpy(k.data() + sizeof table_id, key.data(), key.size());
  return k;
}

}  // namespace detail

namespace {

void put_u64(rpc::Reply& out, uint64_t v) {
  uint8_t b[8];
  std::memcpy(b, &v, 8);
  out.append(b);
}

}  // namespace

bool Server::Impl::owns(uint64_t table_id, uint64_t hash) const {
  std::shared_lock lk(own_mu);
  auto t = tablets_of.find(table_id);
  if (t == tablets_of.end()) return false;
  return owned.count({table_id, tablet_of(hash, t->second)}) != 0;
}

void Server::Impl::note_append_failure(const Status& st) {
  if (st.code() != Code::kPermissionDenied) return;
  // The log is fenced: the coordinator declared this server failed and its
  // tablets are (being) rebuilt elsewhere. Serving them on from memory would
  // answer with what may no longer be current; clients re-read the map.
  std::unique_lock lk(own_mu);
  owned.clear();
}

void Server::Impl::add_live(uint64_t segment_id, int64_t bytes) {
  std::lock_guard lk(live_mu);
  live[segment_id] += bytes;
}

void Server::Impl::bump_version(uint64_t above) {
  uint64_t cur = next_version.load();
  while (cur <= above && !next_version.compare_exchange_weak(cur, above + 1)) {
  }
}

Result<detail::IndexEntry> Server::Impl::append_and_index(detail::Partition& p, const std::string& ikey,
                                                          uint64_t table_id, uint64_t version,
                                                          std::span<const uint8_t> key, std::span<const uint8_t> value,
                                                          bool tombstone_replaced) {
  auto old = p.map.find(ikey);
  const bool replaces = tombstone_replaced && old != p.map.end();
  FERRY_ASSIGN_OR_RETURN(auto pos, replaces ? log->append_object_replacing(table_id, version, key, value,
                                                                           old->second.version, old->second.segment_id)
                                            : log->append_object(table_id, version, key, value));
  // The tombstone after the object is not counted live: the segment's
  // liveness, which picks the cleaner's victims, is its objects' (and
  // deletes'); a cleaned segment carries the tombstone on while the old
  // version's segment is in the log.
  detail::IndexEntry e;
  e.segment_id = pos.segment_id;
  e.offset = pos.offset;
  e.bytes = pos.bytes;
  e.version = version;
  e.value_offset = pos.offset + tailwind::kEntryHeaderBytes + tailwind::kObjectFixedBytes + key.size();
  e.value_bytes = static_cast<uint32_t>(value.size());
  add_live(e.segment_id, static_cast<int64_t>(e.bytes));
  auto [it, inserted] = p.map.try_emplace(ikey, e);
  if (!inserted) {
    add_live(it->second.segment_id, -static_cast<int64_t>(it->second.bytes));
    it->second = e;
  }
  return e;
}

Status Server::Impl::register_handlers() {
  Impl* s = this;
  FERRY_RETURN_IF_ERROR(rpc->register_handler(kLogKvPut, {"logkv-put", false}, [s](const rpc::Request& r,
                                                                                   rpc::Reply& out) {
    detail::ParsedRequest q;
    if (!detail::parse_request(r.payload, &q)) return out.set_status(kMalformed);
    ++s->counters.puts;
    const uint64_t hash = key_hash(q.header.table_id, q.key);
    if (!s->owns(q.header.table_id, hash)) {
      ++s->counters.wrong_server;
      return out.set_status(kWrongServer);
    }
    detail::Partition& p = s->partition(hash);
    const std::string ikey = detail::index_key(q.header.table_id, q.key);
    std::lock_guard lk(p.mu);
    auto it = p.map.find(ikey);
    const uint64_t current = it == p.map.end() ? 0 : it->second.version;
    if ((q.header.flags & detail::kConditional) != 0 && current != q.header.expected_version) {
      ++s->counters.conditional_failures;
      put_u64(out, current);
      return out.set_status(kVersionMismatch);
    }
    const uint64_t version = s->next_version.fetch_add(1);
    auto e = s->append_and_index(p, ikey, q.header.table_id, version, q.key, q.value, /*tombstone_replaced=*/true);
    if (!e.ok()) {
      ++s->counters.replication_failures;
      s->note_append_failure(e.status());
      return out.set_status(e.status().code() == Code::kInvalidArgument ? kTooLarge : kUnavailable);
    }
    put_u64(out, version);
    out.set_status(kOk);
  }));
  FERRY_RETURN_IF_ERROR(rpc->register_handler(kLogKvGet, {"logkv-get", false}, [s](const rpc::Request& r,
                                                                                   rpc::Reply& out) {
    detail::ParsedRequest q;
    if (!detail::parse_request(r.payload, &q) || q.header.value_bytes != 0) return out.set_status(kMalformed);
    ++s->counters.gets;
    const uint64_t hash = key_hash(q.header.table_id, q.key);
    if (!s->owns(q.header.table_id, hash)) {
      ++s->counters.wrong_server;
      return out.set_status(kWrongServer);
    }
    detail::Partition& p = s->partition(hash);
    std::lock_guard lk(p.mu);
    auto it = p.map.find(detail::index_key(q.header.table_id, q.key));
    if (it == p.map.end()) return out.set_status(kNotFound);
    const detail::IndexEntry& e = it->second;
    if (8 + static_cast<size_t>(e.value_bytes) > out.capacity()) return out.set_status(kTooLarge);
    const std::span<const uint8_t> seg = s->log->segment(e.segment_id);
    if (e.value_offset + e.value_bytes > seg.size()) return out.set_status(kUnavailable);  // never: the index is ahead of the log
    put_u64(out, e.version);
    out.append(seg.subspan(e.value_offset, e.value_bytes));
    out.set_status(kOk);
  }));
  FERRY_RETURN_IF_ERROR(rpc->register_handler(kLogKvRemove, {"logkv-remove", false}, [s](const rpc::Request& r,
                                                                                         rpc::Reply& out) {
    detail::ParsedRequest q;
    if (!detail::parse_request(r.payload, &q) || q.header.value_bytes != 0) return out.set_status(kMalformed);
    ++s->counters.removes;
    const uint64_t hash = key_hash(q.header.table_id, q.key);
    if (!s->owns(q.header.table_id, hash)) {
      ++s->counters.wrong_server;
      return out.set_status(kWrongServer);
    }
    detail::Partition& p = s->partition(hash);
    std::lock_guard lk(p.mu);
    auto it = p.map.find(detail::index_key(q.header.table_id, q.key));
    const uint64_t current = it == p.map.end() ? 0 : it->second.version;
    if ((q.header.flags & detail::kConditional) != 0 && current != q.header.expected_version) {
      ++s->counters.conditional_failures;
      put_u64(out, current);
      return out.set_status(kVersionMismatch);
    }
    if (it == p.map.end()) return out.set_status(kNotFound);
    const detail::IndexEntry old = it->second;
    auto pos = s->log->append_tombstone(q.header.table_id, old.version, old.segment_id, q.key);
    if (!pos.ok()) {
      ++s->counters.replication_failures;
      s->note_append_failure(pos.status());
      return out.set_status(kUnavailable);
    }
    // The tombstone stays live until the cleaner finds its object's segment gone.
    s->add_live(pos->segment_id, static_cast<int64_t>(pos->bytes));
    s->add_live(old.segment_id, -static_cast<int64_t>(old.bytes));
    p.map.erase(it);
    put_u64(out, old.version);
    out.set_status(kOk);
  }));
  return ok_status();
}

// The cleaner (RAMCloud's, one pass): every closed segment whose live bytes
// are below clean_below of the segment size is compacted.
Result<CleanResult> Server::Impl::clean() {
  std::lock_guard cl(clean_mu);
  CleanResult result;
  const uint64_t open = log->open_segment_id();
  std::vector<uint64_t> victims;
  {
    std::lock_guard lk(live_mu);
    for (uint64_t id : log->segment_ids()) {
      if (id == open) continue;
      auto it = live.find(id);
      const int64_t bytes = it == live.end() ? 0 : it->second;
      if (static_cast<double>(bytes) < options.clean_below * static_cast<double>(options.segment_bytes)) {
        victims.push_back(id);
      }
    }
  }
  for (uint64_t id : victims) {
    const std::span<const uint8_t> seg = log->segment(id);
    struct Survivor {
      bool tombstone;
      uint64_t table_id, version, object_segment, offset;
      std::vector<uint8_t> key, value;
    };
    std::vector<Survivor> entries;
    FERRY_RETURN_IF_ERROR(tailwind::for_each_entry(seg, [&](const tailwind::Entry& e) {
      if (e.type == tailwind::EntryType::kObject) {
        entries.push_back({false, e.table_id, e.version, 0, e.offset, {e.key.begin(), e.key.end()},
                           {e.value.begin(), e.value.end()}});
      } else if (e.type == tailwind::EntryType::kTombstone) {
        entries.push_back({true, e.table_id, e.version, e.tombstone_segment_id, e.offset,
                           {e.key.begin(), e.key.end()}, {}});
      }
    }));
    const std::vector<uint64_t> in_log = log->segment_ids();
    for (const Survivor& v : entries) {
      if (v.tombstone) {
        // Needed while the object it kills may still be replayed.
        if (!std::binary_search(in_log.begin(), in_log.end(), v.object_segment) || v.object_segment == id) {
          ++result.tombstones_dropped;
          continue;
        }
        FERRY_ASSIGN_OR_RETURN(auto pos, log->append_tombstone(v.table_id, v.version, v.object_segment, v.key));
        add_live(pos.segment_id, static_cast<int64_t>(pos.bytes));
        ++result.tombstones_relocated;
        continue;
      }
      const uint64_t hash = key_hash(v.table_id, v.key);
      detail::Partition& p = partition(hash);
      const std::string ikey = detail::index_key(v.table_id, v.key);
      std::lock_guard lk(p.mu);
      auto it = p.map.find(ikey);
      if (it == p.map.end() || it->second.segment_id != id || it->second.offset != v.offset) continue;  // dead
      FERRY_RETURN_IF_ERROR(append_and_index(p, ikey, v.table_id, v.version, v.key, v.value).status());
      ++result.objects_relocated;
    }
    result.bytes_freed += seg.size();
    // The coordinator records the segment as freed before any copy goes:
    // a copy left on a backup the log no longer reaches (declared failed,
    // partitioned) must never be replayed by a recovery, or the objects
    // whose tombstones are dropped with it come back (RAMCloud's log digest
    // stops listing a cleaned segment for the same reason).
    if (on_freed) {
      const Status reported = on_freed(id);
      if (!reported.ok()) {
        return Status(reported.code(), name + ": the coordinator did not record segment " + std::to_string(id) +
                                           " as freed: " + reported.message());
      }
    }
    FERRY_RETURN_IF_ERROR(log->free_segment(id));
    {
      std::lock_guard lk(live_mu);
      live.erase(id);
    }
    ++result.segments_cleaned;
  }
  counters.segments_cleaned += result.segments_cleaned;
  counters.objects_relocated += result.objects_relocated;
  counters.tombstones_relocated += result.tombstones_relocated;
  counters.tombstones_dropped += result.tombstones_dropped;
  return result;
}

// ---- Server ----

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

uint32_t Server::index() const { return impl_->index; }
const std::string& Server::name() const { return impl_->name; }
rpc::Server& Server::rpc() { return *impl_->rpc; }
tailwind::Backup& Server::backup() { return *impl_->backup; }
tailwind::ReplicatedLog& Server::log() { return *impl_->log; }
std::vector<uint32_t> Server::backup_servers() const { return impl_->link_server; }

ServerCounters Server::counters() const {
  const auto& c = impl_->counters;
  ServerCounters out;
  out.puts = c.puts;
  out.gets = c.gets;
  out.removes = c.removes;
  out.conditional_failures = c.conditional_failures;
  out.wrong_server = c.wrong_server;
  out.replication_failures = c.replication_failures;
  out.segments_cleaned = c.segments_cleaned;
  out.objects_relocated = c.objects_relocated;
  out.tombstones_relocated = c.tombstones_relocated;
  out.tombstones_dropped = c.tombstones_dropped;
  out.objects_recovered = c.objects_recovered;
  for (const auto& p : impl_->partitions) {
    std::lock_guard lk(p->mu);
    out.objects += p->map.size();
  }
  return out;
}

std::vector<std::pair<uint64_t, uint64_t>> Server::live_bytes() const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  std::lock_guard lk(impl_->live_mu);
  for (const auto& [id, bytes] : impl_->live) out.emplace_back(id, static_cast<uint64_t>(std::max<int64_t>(bytes, 0)));
  return out;
}

Result<std::pair<uint64_t, std::vector<uint8_t>>> Server::lookup(uint64_t table_id,
                                                                 std::span<const uint8_t> key) const {
  if (!impl_->alive) return unavailable(impl_->name + " has crashed");
  detail::Partition& p = impl_->partition(key_hash(table_id, key));
  std::lock_guard lk(p.mu);
  auto it = p.map.find(detail::index_key(table_id, key));
  if (it == p.map.end()) return not_found("no such key on " + impl_->name);
  const std::span<const uint8_t> seg = impl_->log->segment(it->second.segment_id);
  const auto v = seg.subspan(it->second.value_offset, it->second.value_bytes);
  return std::make_pair(it->second.version, std::vector<uint8_t>(v.begin(), v.end()));
}

std::vector<std::tuple<std::vector<uint8_t>, uint64_t, std::vector<uint8_t>>> Server::dump(uint64_t table_id) const {
  std::vector<std::tuple<std::vector<uint8_t>, uint64_t, std::vector<uint8_t>>> out;
  if (!impl_->alive) return out;
  for (const auto& p : impl_->partitions) {
    std::lock_guard lk(p->mu);
    for (const auto& [ikey, e] : p->map) {
      uint64_t t = 0;
      std::memcpy(&t, ikey.data(), sizeof t);
      if (t != table_id) continue;
      const std::span<const uint8_t> seg = impl_->log->segment(e.segment_id);
      const auto v = seg.subspan(e.value_offset, e.value_bytes);
      out.emplace_back(std::vector<uint8_t>(ikey.begin() + 8, ikey.end()), e.version,
                       std::vector<uint8_t>(v.begin(), v.end()));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ferry::store::logkv
