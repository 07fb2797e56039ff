// A Tailwind primary's log (replicated_log.h): the public methods, each
// taking the log's lock and calling into ReplicatedLog::Impl
// (replicated_log_impl.h), which holds the state and the protocol.
#include "ferry/tailwind/replicated_log.h"

#include <algorithm>
#include <mutex>

#include "replicated_log_impl.h"

namespace ferry::tailwind {

ReplicatedLog::ReplicatedLog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ReplicatedLog::~ReplicatedLog() {
  // Completions still in flight name segments: drain before freeing them.
  std::lock_guard lock(impl_->mu);
  for (auto& [id, s] : impl_->segments) {
    for (auto& r : s->replicas) {
      impl_->poll_while_locked([&] { return r.inflight > 0 && !impl_->dead[r.backup]; }, 100000);
    }
  }
  // Frees in flight call back into the log: wait for them (a backup that
  // does not answer cannot call back either: its session is not polled
  // once the log is gone).
  for (size_t b = 0; b < impl_->orphan_frees.size(); ++b) {
    impl_->poll_while_locked([&] { return impl_->orphan_frees[b] > 0; }, 100000);
  }
}

Result<std::unique_ptr<ReplicatedLog>> ReplicatedLog::create(nic::Nic& nic, std::vector<BackupLink*> backups,
                                                             const LogOptions& options) {
  if (options.replicas == 0) return invalid_argument("log: replicas must be at least 1");
  if (backups.size() < options.replicas) {
    return invalid_argument("log: " + std::to_string(options.replicas) + " replicas need at least as many backups (" +
                            std::to_string(backups.size()) + " given)");
  }
  if (options.segment_bytes < 2 * kSegmentHeaderAppendBytes || options.segment_bytes > UINT32_MAX ||
      options.segment_bytes % 4096 != 0) {
    return invalid_argument("log: segment_bytes must be a multiple of 4096 below 4 GiB");
  }
  if (options.max_inflight_per_backup == 0) return invalid_argument("log: max_inflight_per_backup must be positive");
  for (BackupLink* b : backups) {
    if (b->log_id() != options.log_id) return invalid_argument("log: backup link " + b->name() + " is for another log");
    if (options.replication == Replication::kTailwind && !b->has_data_path()) {
      return invalid_argument("log: Tailwind replication needs a data path to " + b->name());
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->nic = &nic;
  impl->links = std::move(backups);
  impl->options = options;
  impl->rt = options.runtime != nullptr ? options.runtime : &Runtime::threads();
  impl->rng = Rng(options.seed);
  impl->dead.assign(impl->links.size(), false);
  impl->orphan_frees.assign(impl->links.size(), 0);
  return std::unique_ptr<ReplicatedLog>(new ReplicatedLog(std::move(impl)));
}

Result<LogPosition> ReplicatedLog::append_object(uint64_t table_id, uint64_t version, std::span<const uint8_t> key,
                                                 std::span<const uint8_t> value, LogPosition* written) {
  return impl_->append([&](SegmentWriter& w) { return w.append_object(table_id, version, key, value); }, written);
}

Result<LogPosition> ReplicatedLog::append_object_unsynced(uint64_t table_id, uint64_t version,
                                                          std::span<const uint8_t> key,
                                                          std::span<const uint8_t> value) {
  return impl_->append([&](SegmentWriter& w) { return w.append_object(table_id, version, key, value); }, nullptr,
                       /*wait=*/false);
}

Status ReplicatedLog::sync() {
  std::unique_lock lock(impl_->mu);
  return impl_->sync_locked(lock);
}

Result<LogPosition> ReplicatedLog::append_object_replacing(uint64_t table_id, uint64_t version,
                                                           std::span<const uint8_t> key, std::span<const uint8_t> value,
                                                           uint64_t replaced_version, uint64_t replaced_segment,
                                                           LogPosition* written) {
  size_t object_bytes = 0;
  auto position = impl_->append(
      [&](SegmentWriter& w) -> Result<SegmentWriter::Appended> {
        // Both or neither: the object alone in a full segment would be left
        // behind, unacknowledged, when the append moves to the next one.
        const size_t need = 2 * (kEntryHeaderBytes + key.size() + kChecksumEntryBytes) + kObjectFixedBytes +
                            value.size() + kTombstoneFixedBytes;
        if (need > w.capacity() - w.offset()) return resource_exhausted("segment full");
        FERRY_ASSIGN_OR_RETURN(auto object, w.append_object(table_id, version, key, value));
        FERRY_ASSIGN_OR_RETURN(auto tombstone, w.append_tombstone(table_id, replaced_version, replaced_segment, key));
        object_bytes = object.bytes;
        return SegmentWriter::Appended{object.offset, object.bytes + tombstone.bytes, tombstone.checksum};
      },
      written);
  if (position.ok()) position->bytes = object_bytes;
  if (written != nullptr && written->bytes != 0) written->bytes = object_bytes;
  return position;
}

Result<LogPosition> ReplicatedLog::append_tombstone(uint64_t table_id, uint64_t version, uint64_t object_segment_id,
                                                    std::span<const uint8_t> key, LogPosition* written) {
  return impl_->append([&](SegmentWriter& w) { return w.append_tombstone(table_id, version, object_segment_id, key); },
                       written);
}

Status ReplicatedLog::close_open_segment() {
  std::unique_lock lock(impl_->mu);
  impl_->wait_roll_locked(lock);
  if (impl_->open == nullptr) return ok_status();
  return impl_->close_segment_locked(lock);
}

Status ReplicatedLog::backup_failed(size_t index) {
  std::lock_guard lock(impl_->mu);
  if (index >= impl_->links.size()) return invalid_argument("no backup " + std::to_string(index));
  impl_->mark_dead(index);
  return impl_->repair_locked();
}

Status ReplicatedLog::backup_returned(size_t index) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  if (index >= m.links.size()) return invalid_argument("no backup " + std::to_string(index));
  if (!m.dead[index]) return ok_status();
  if (m.fenced) return m.fenced_error();
  // Completions of the old data path and frees in flight first.
  m.poll_locked();
  m.poll_while_locked([&] { return m.orphan_frees[index] > 0; }, 100000);
  if (m.orphan_frees[index] > 0) {
    return unavailable(m.links[index]->name() + " has not answered the frees of the replicas left there");
  }
  // What was left there goes before the backup can be chosen again: a free
  // that arrived later would drop a new replica of the same segment. That
  // includes replicas still counted there (a repair that found no other
  // backup stopped before them): the next append's repair re-creates them.
  for (auto& [id, seg] : m.segments) {
    const uint64_t segment_id = id;
    std::erase_if(seg->replicas, [&](const Impl::Replica& r) {
      if (r.backup == index) m.orphan(index, segment_id);
      return r.backup == index;
    });
  }
  for (auto it = m.orphans.begin(); it != m.orphans.end();) {
    if (it->first.first != index) {
      ++it;
      continue;
    }
    const Status freed = m.links[index]->free(it->first.second);
    if (!freed.ok() && freed.code() != Code::kNotFound) {
      return Status(freed.code(), m.links[index]->name() + " is not back: " + freed.message());
    }
    it = m.orphans.erase(it);
    ++m.counters.orphans_freed;
  }
  FERRY_RETURN_IF_ERROR(m.links[index]->impl().reconnect_data_path());
  m.dead[index] = false;
  return ok_status();
}

Status ReplicatedLog::free_segment(uint64_t segment_id) {
  std::lock_guard lock(impl_->mu);
  Impl::Segment* s = impl_->segment_of(segment_id);
  if (s == nullptr) return not_found("no segment " + std::to_string(segment_id));
  if (!s->closed) return failed_precondition("segment " + std::to_string(segment_id) + " is open");
  for (const auto& r : s->replicas) {
    if (impl_->dead[r.backup]) {
      impl_->orphan(r.backup, segment_id);  // not reachable now: freed once it answers
    } else {
      (void)impl_->links[r.backup]->free(segment_id);
    }
  }
  impl_->segments.erase(segment_id);
  return ok_status();
}

std::vector<std::pair<size_t, uint64_t>> ReplicatedLog::orphans() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::pair<size_t, uint64_t>> out;
  for (const auto& [where, in_flight] : impl_->orphans) out.push_back(where);
  return out;
}

std::span<const uint8_t> ReplicatedLog::segment(uint64_t segment_id) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->segments.find(segment_id);
  if (it == impl_->segments.end()) return {};
  return {it->second->memory, it->second->written()};
}

std::vector<uint64_t> ReplicatedLog::segment_ids() const {
  std::lock_guard lock(impl_->mu);
  std::vector<uint64_t> out;
  for (const auto& [id, s] : impl_->segments) out.push_back(id);
  return out;
}

uint64_t ReplicatedLog::open_segment_id() const {
  std::lock_guard lock(impl_->mu);
  return impl_->open != nullptr ? impl_->open->id : 0;
}

std::vector<size_t> ReplicatedLog::replicas_of(uint64_t segment_id) const {
  std::lock_guard lock(impl_->mu);
  std::vector<size_t> out;
  auto it = impl_->segments.find(segment_id);
  if (it != impl_->segments.end()) {
    for (const auto& r : it->second->replicas) out.push_back(r.backup);
  }
  return out;
}

uint64_t ReplicatedLog::replica_version(uint64_t segment_id) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->segments.find(segment_id);
  return it == impl_->segments.end() ? 0 : it->second->version;
}

bool ReplicatedLog::fenced() const {
  std::lock_guard lock(impl_->mu);
  return impl_->fenced;
}

LogCounters ReplicatedLog::counters() const {
  std::lock_guard lock(impl_->mu);
  return impl_->counters;
}

const LogOptions& ReplicatedLog::options() const { return impl_->options; }

}  // namespace ferry::tailwind
