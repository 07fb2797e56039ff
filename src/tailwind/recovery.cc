// Recovery of a failed primary's log from its backups (§3.3.1-3.3.2).
#include <algorithm>
#include <map>

#include "ferry/tailwind/replicated_log.h"

namespace ferry::tailwind {

Result<std::vector<RecoveredSegment>> recover_log(uint64_t log_id, std::span<BackupLink* const> backups,
                                                  const std::optional<std::map<uint64_t, uint64_t>>& record,
                                                  RecoveryReport* report, size_t backups_down) {
  static const std::map<uint64_t, uint64_t> kNoRecord;
  const std::map<uint64_t, uint64_t>& min_versions = record.has_value() ? *record : kNoRecord;
  RecoveryReport local;
  RecoveryReport& rep = report != nullptr ? *report : local;
  rep = {};
  rep.backups_unreachable = backups_down;
  struct Candidate {
    size_t backup;
    ReplicaInfo info;
  };
  // Locating the replicas: every backup fences the log and scans its buffers.
  std::map<uint64_t, std::vector<Candidate>> by_segment;
  for (size_t b = 0; b < backups.size(); ++b) {
    if (backups[b]->log_id() != log_id) return invalid_argument("backup link " + backups[b]->name() + " is for another log");
    auto found = backups[b]->find();
    if (!found.ok()) {
      ++rep.backups_unreachable;
      continue;
    }
    for (const ReplicaInfo& r : *found) {
      ++rep.replicas_seen;
      by_segment[r.segment_id].push_back({b, r});
    }
  }
  for (const auto& [segment_id, candidates] : by_segment) rep.segments_found.push_back(segment_id);
  // Completeness: every segment the coordinator lists (the log reported it
  // before its first append) and that is not freed must be found. A backup
  // that did not answer may hold the only replicas of one: recovery waits
  // for it (the caller retries) rather than finish without those objects.
  std::vector<uint64_t> missing;
  for (const auto& [segment_id, version] : min_versions) {
    if (version != kFreedSegment && by_segment.count(segment_id) == 0) missing.push_back(segment_id);
  }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 8; ++i) list += (i == 0 ? "" : ", ") + std::to_string(missing[i]);
    if (missing.size() > 8) list += ", ... (" + std::to_string(missing.size()) + " in all)";
    return unavailable("log " + std::to_string(log_id) + ": no reachable backup holds a replica of segment" +
                       (missing.size() > 1 ? "s " : " ") + list + " (" +
                       std::to_string(backups.size() + backups_down - rep.backups_unreachable) + " backups answered, " +
                       std::to_string(rep.backups_unreachable) +
                       " did not): recovery must wait until a backup holding it answers");
  }
  std::vector<RecoveredSegment> out;
  for (auto& [segment_id, candidates] : by_segment) {
    auto required = min_versions.find(segment_id);
    if (required == min_versions.end() && record.has_value()) {
      // Never reported: the primary failed while opening it (or could not
      // reach the coordinator), before anything was appended to it. Its
      // replicas hold at most its header, and may be freed under our feet
      // by an old primary giving up on the open. That holds for an empty
      // record too (found by `ferry sim`'s LogKv campaign, seed 40: a
      // primary partitioned before its first report kept opening segments
      // and freeing them while its recovery read them: kDataLoss).
      rep.unlisted_ignored += candidates.size();
      continue;
    }
    uint64_t need = required == min_versions.end() ? 0 : required->second;
    if (need == kFreedSegment) {
      // The cleaner freed it (or a recovery consumed it): a copy that
      // survived anywhere -- open or closed, on a backup declared dead
      // before the free -- would bring back objects whose tombstones were
      // dropped with it.
      rep.stale_ignored += candidates.size();
      continue;
    }
    // A replica below the newest version any backup reports for this
    // segment was left behind by a re-replication (§3.3.3). The rule holds
    // for closed replicas too: a replica's state says nothing of whether the
    // primary still counted it.
    for (const Candidate& c : candidates) {
      if (!c.info.corrupted) need = std::max(need, c.info.replica_version);
    }
    std::vector<Candidate> usable;
    for (const Candidate& c : candidates) {
      if (c.info.corrupted) {
        ++rep.corrupted_ignored;
      } else if (c.info.replica_version < need) {
        ++rep.stale_ignored;
      } else {
        if (!c.info.closed && !c.info.zero_after_valid) ++rep.torn_open;
        usable.push_back(c);
      }
    }
    // A closed replica is complete; else the longest valid prefix (every
    // valid prefix is a prefix of the same segment, and an acknowledged
    // append is in all of them).
    std::stable_sort(usable.begin(), usable.end(), [](const Candidate& a, const Candidate& b) {
      if (a.info.closed != b.info.closed) return a.info.closed;
      return a.info.valid_bytes > b.info.valid_bytes;
    });
    bool recovered = false;
    std::string why;  // what went wrong with each usable replica
    for (const Candidate& c : usable) {
      auto bytes = backups[c.backup]->read_all(segment_id, c.info.closed, c.info.valid_bytes);
      if (!bytes.ok()) {
        why += "; " + backups[c.backup]->name() + ": " + bytes.status().to_string();
        continue;
      }
      // The bytes crossed the network: they must still be the valid prefix
      // the backup reported.
      const ScanResult scan = scan_buffer(*bytes);
      if (scan.valid_bytes != bytes->size() || scan.checksum != c.info.checksum) {
        why += "; " + backups[c.backup]->name() + ": read back " + std::to_string(bytes->size()) + " bytes, valid " +
               std::to_string(scan.valid_bytes) + " (" + std::string(scan_stop_name(scan.stop)) + ")";
        continue;
      }
      RecoveredSegment seg;
      seg.segment_id = segment_id;
      seg.closed = c.info.closed;
      seg.replica_version = c.info.replica_version;
      seg.from = backups[c.backup]->name();
      seg.bytes = std::move(*bytes);
      rep.bytes += seg.bytes.size();
      ++rep.segments;
      if (!c.info.closed) {
        for (const Candidate& other : usable) rep.lagging_open += other.info.valid_bytes < c.info.valid_bytes;
      }
      out.push_back(std::move(seg));
      recovered = true;
      break;
    }
    if (!recovered) {
      // A backup that did not answer may hold a usable replica: wait for it.
      const std::string what = "no usable replica of segment " + std::to_string(segment_id) + " of log " +
                               std::to_string(log_id) + " (" + std::to_string(candidates.size()) + " found, " +
                               std::to_string(usable.size()) + " usable, " +
                               std::to_string(rep.backups_unreachable) + " backups did not answer" + why + ")";
      return rep.backups_unreachable > 0 ? unavailable(what) : data_loss(what);
    }
  }
  return out;
}

}  // namespace ferry::tailwind
