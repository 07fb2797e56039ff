// A LogKv storage server: the request handlers over the hash index and the
// replicated log, and the log cleaner.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <tuple>
#include <unordered_map>

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

Status Server::Impl::persist_version_floor(uint64_t floor) {
  if (floor == 0) return ok_status();
  const std::string_view k = detail::kVersionFloorKey;
  const std::vector<uint8_t> key(k.begin(), k.end());
  // Object segment 0 (none): the cleaner drops it with any segment it
  // cleans, and writes the floor again.
  return log->append_tombstone(detail::kVersionFloorTable, floor, 0, key).status();
}

Result<detail::IndexEntry> Server::Impl::append_and_index(detail::Partition& p, const std::string& ikey,
                                                          uint64_t table_id, uint64_t version,
                                                          std::span<const uint8_t> key, std::span<const uint8_t> value,
                                                          bool tombstone_replaced, bool unsynced) {
  auto old = p.map.find(ikey);
  const bool replaces = tombstone_replaced && old != p.map.end();
  tailwind::LogPosition written;
  auto appended = unsynced   ? log->append_object_unsynced(table_id, version, key, value)
                  : replaces ? log->append_object_replacing(table_id, version, key, value, old->second.version,
                                                            old->second.segment_id, &written)
                             : log->append_object(table_id, version, key, value, &written);
  if (!appended.ok()) {
    note_in_doubt(p, ikey, table_id, key, version, written);
    return appended.status();
  }
  const tailwind::LogPosition pos = *appended;
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

void Server::Impl::note_in_doubt(detail::Partition& p, const std::string& ikey, uint64_t table_id,
                                 std::span<const uint8_t> key, uint64_t version, const tailwind::LogPosition& written) {
  if (written.bytes == 0) return;  // nothing reached the log
  detail::Partition::InDoubt& d = p.in_doubt[ikey];
  d.table_id = table_id;
  d.key.assign(key.begin(), key.end());
  if (version >= d.version) {
    d.version = version;
    d.segment_id = written.segment_id;
  }
}

Status Server::Impl::settle_locked(detail::Partition& p, const std::string& ikey) {
  auto doubt = p.in_doubt.find(ikey);
  if (doubt == p.in_doubt.end()) return ok_status();
  const detail::Partition::InDoubt d = doubt->second;
  auto it = p.map.find(ikey);
  if (it != p.map.end()) {
    // The newest version wins a replay: the indexed value again, above
    // whatever the failed append wrote (its tombstone for the old version
    // rides along, as a PUT's does).
    const detail::IndexEntry e = it->second;
    const std::span<const uint8_t> seg = log->segment(e.segment_id);
    const std::vector<uint8_t> value(seg.begin() + e.value_offset, seg.begin() + e.value_offset + e.value_bytes);
    const uint64_t version = next_version.fetch_add(1);
    FERRY_RETURN_IF_ERROR(
        append_and_index(p, ikey, d.table_id, version, d.key, value, /*tombstone_replaced=*/true).status());
  } else {
    tailwind::LogPosition written;
    auto pos = log->append_tombstone(d.table_id, d.version, d.segment_id, d.key, &written);
    if (!pos.ok()) {
      note_in_doubt(p, ikey, d.table_id, d.key, d.version, written);
      return pos.status();
    }
    add_live(pos->segment_id, static_cast<int64_t>(pos->bytes));  // as a DELETE's tombstone
  }
  p.in_doubt.erase(ikey);
  ++counters.keys_settled;
  return ok_status();
}

Status Server::Impl::settle_all() {
  for (const auto& part : partitions) {
    std::lock_guard lk(part->mu);
    while (!part->in_doubt.empty()) {
      const std::string ikey = part->in_doubt.begin()->first;
      FERRY_RETURN_IF_ERROR(settle_locked(*part, ikey));
    }
  }
  return ok_status();
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
    if (const Status settled = s->settle_locked(p, ikey); !settled.ok()) {
      ++s->counters.replication_failures;
      s->note_append_failure(settled);
      return out.set_status(kUnavailable);
    }
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
    const std::string ikey = detail::index_key(q.header.table_id, q.key);
    std::lock_guard lk(p.mu);
    if (const Status settled = s->settle_locked(p, ikey); !settled.ok()) {
      ++s->counters.replication_failures;
      s->note_append_failure(settled);
      return out.set_status(kUnavailable);
    }
    auto it = p.map.find(ikey);
    const uint64_t current = it == p.map.end() ? 0 : it->second.version;
    if ((q.header.flags & detail::kConditional) != 0 && current != q.header.expected_version) {
      ++s->counters.conditional_failures;
      put_u64(out, current);
      return out.set_status(kVersionMismatch);
    }
    if (it == p.map.end()) return out.set_status(kNotFound);
    const detail::IndexEntry old = it->second;
    tailwind::LogPosition written;
    auto pos = s->log->append_tombstone(q.header.table_id, old.version, old.segment_id, q.key, &written);
    if (!pos.ok()) {
      // The tombstone may be in the log while the index keeps the object.
      note_in_doubt(p, ikey, q.header.table_id, q.key, old.version, written);
      ++s->counters.replication_failures;
      s->note_append_failure(pos.status());
      return out.set_status(kUnavailable);
    }
    // The tombstone stays live until the cleaner finds its object's segment gone.
    s->add_live(pos->segment_id, static_cast<int64_t>(pos->bytes));
    s->add_live(old.segment_id, -static_cast<int64_t>(old.bytes));
    p.map.erase(ikey);
    put_u64(out, old.version);
    out.set_status(kOk);
  }));
  return ok_status();
}

// The cleaner (RAMCloud's, one pass): every closed segment whose live bytes
// are below clean_below of the segment size is compacted.
Result<CleanResult> Server::Impl::clean() {
  std::lock_guard cl(clean_mu);
  // Keys in doubt are settled first: the log then says what the index says,
  // so what the pass drops as dead is dead for a recovery too.
  FERRY_RETURN_IF_ERROR(settle_all());
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
  uint64_t floor_written = 0;  // this pass's floor, in the open segment (never a victim)
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
    uint64_t dropped_max = 0;  // the highest version that leaves the log with this segment
    for (const Survivor& v : entries) {
      if (v.tombstone) {
        // Needed while the object it kills may still be replayed.
        if (!std::binary_search(in_log.begin(), in_log.end(), v.object_segment) || v.object_segment == id) {
          ++result.tombstones_dropped;
          dropped_max = std::max(dropped_max, v.version);
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
      if (it == p.map.end() || it->second.segment_id != id || it->second.offset != v.offset) {  // dead
        dropped_max = std::max(dropped_max, v.version);
        continue;
      }
      FERRY_RETURN_IF_ERROR(append_and_index(p, ikey, v.table_id, v.version, v.key, v.value).status());
      ++result.objects_relocated;
    }
    // What leaves the log leaves its version behind as a floor, replicated
    // before the segment goes (a deleted key's last object and tombstone).
    if (dropped_max > floor_written) {
      FERRY_RETURN_IF_ERROR(persist_version_floor(dropped_max));
      floor_written = dropped_max;
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
uint32_t Server::nic_address() const { return impl_->nic->address(); }

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
  out.keys_settled = c.keys_settled;
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

Status Server::settle() {
  if (!impl_->alive) return unavailable(impl_->name + " has crashed");
  return impl_->settle_all();
}

size_t Server::in_doubt() const {
  size_t n = 0;
  for (const auto& p : impl_->partitions) {
    std::lock_guard lk(p->mu);
    n += p->in_doubt.size();
  }
  return n;
}

Status Server::verify_index() const {
  if (!impl_->alive) return unavailable(impl_->name + " has crashed");
  Impl& s = *impl_;
  std::lock_guard cl(s.clean_mu);
  std::vector<std::unique_lock<Mutex>> held;
  for (const auto& p : s.partitions) held.emplace_back(p->mu);
  const std::string who = s.name + ": ";
  auto key_text = [](std::string_view ikey) {
    uint64_t t = 0;
    std::memcpy(&t, ikey.data(), sizeof t);
    std::string key(ikey.substr(8));
    for (char& c : key) c = std::isprint(static_cast<unsigned char>(c)) ? c : '?';
    return "table " + std::to_string(t) + " key '" + key + "'";
  };

  // What a recovery would rebuild from this log, and each segment's bytes.
  const std::vector<uint64_t> ids = s.log->segment_ids();
  std::unordered_map<std::string, detail::Replayed> replayed;
  std::map<uint64_t, uint64_t> tombstone_bytes;
  struct Object {
    std::string ikey;
    uint64_t version, value_offset, value_bytes, bytes;
  };
  std::map<std::pair<uint64_t, uint64_t>, Object> objects;  // (segment, offset) -> the object there
  for (uint64_t id : ids) {
    const std::span<const uint8_t> seg = s.log->segment(id);
    const Status st = tailwind::for_each_entry(seg, [&](const tailwind::Entry& e) {
      if (e.type != tailwind::EntryType::kObject && e.type != tailwind::EntryType::kTombstone) return;
      const std::string ikey = detail::index_key(e.table_id, e.key);
      replayed[ikey].fold(e);
      if (e.type == tailwind::EntryType::kTombstone) {
        tombstone_bytes[id] += tailwind::tombstone_append_bytes(e.key.size());
      } else {
        objects[{id, e.offset}] = {ikey, e.version, static_cast<uint64_t>(e.value.data() - seg.data()), e.value.size(),
                                   tailwind::object_append_bytes(e.key.size(), e.value.size())};
      }
    });
    if (!st.ok()) return internal_error(who + "segment " + std::to_string(id) + " does not parse: " + st.message());
  }

  // The partition an index key belongs to (table id, then the key).
  auto partition_of = [&](std::string_view ikey) -> const detail::Partition& {
    uint64_t t = 0;
    std::memcpy(&t, ikey.data(), sizeof t);
    const auto key = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(ikey.data()) + 8, ikey.size() - 8);
    return s.partition(key_hash(t, key));
  };
  // A key in doubt (a failed append's entry in the log) is compared once
  // settled: at its next write or the next cleaner pass (settle()).
  auto in_doubt = [&](const std::string& ikey) { return partition_of(ikey).in_doubt.count(ikey) != 0; };
  std::map<uint64_t, uint64_t> index_bytes;
  for (const auto& p : s.partitions) {
    for (const auto& [ikey, e] : p->map) {
      const std::string what = who + key_text(ikey) + " v" + std::to_string(e.version) + " at segment " +
                               std::to_string(e.segment_id) + " offset " + std::to_string(e.offset);
      if (!std::binary_search(ids.begin(), ids.end(), e.segment_id)) return internal_error(what + ": no such segment");
      const std::span<const uint8_t> seg = s.log->segment(e.segment_id);
      if (e.offset + e.bytes > seg.size()) return internal_error(what + ": past the segment's valid bytes");
      auto at = objects.find({e.segment_id, e.offset});
      if (at == objects.end() || at->second.ikey != ikey || at->second.version != e.version ||
          at->second.value_offset != e.value_offset || at->second.value_bytes != e.value_bytes ||
          at->second.bytes != e.bytes) {
        return internal_error(what + ": the log holds no such object there");
      }
      auto r = replayed.find(ikey);
      if (in_doubt(ikey)) {
        // compared once settled
      } else if (r == replayed.end() || !r->second.live() || r->second.object_version != e.version) {
        return internal_error(what + ": a recovery from this log would " +
                              (r == replayed.end() || !r->second.live()
                                   ? std::string("not have the key")
                                   : "give v" + std::to_string(r->second.object_version)));
      }
      if (e.version >= s.next_version.load()) return internal_error(what + ": above the next version to assign");
      index_bytes[e.segment_id] += e.bytes;
    }
  }
  for (const auto& [ikey, r] : replayed) {
    if (!r.live() || in_doubt(ikey)) continue;
    if (partition_of(ikey).map.count(ikey) == 0) {
      return internal_error(who + key_text(ikey) + ": a recovery from this log would bring back v" +
                            std::to_string(r.object_version) + ", which the index does not hold");
    }
  }

  std::lock_guard lk(s.live_mu);
  for (const auto& [id, bytes] : s.live) {
    if (!std::binary_search(ids.begin(), ids.end(), id)) {
      return internal_error(who + "live bytes counted for segment " + std::to_string(id) + ", not in the log");
    }
  }
  for (uint64_t id : ids) {
    auto it = s.live.find(id);
    const int64_t counted = it == s.live.end() ? 0 : it->second;
    const int64_t objects = static_cast<int64_t>(index_bytes[id]);
    if (counted < objects || counted > objects + static_cast<int64_t>(tombstone_bytes[id])) {
      return internal_error(who + "segment " + std::to_string(id) + " counts " + std::to_string(counted) +
                            " live bytes; its index entries take " + std::to_string(objects) + " and its tombstones " +
                            std::to_string(tombstone_bytes[id]));
    }
  }
  return ok_status();
}

}  // namespace ferry::store::logkv
