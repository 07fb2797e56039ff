// ReplicatedLog's state and protocol (replicated_log.h): placement of
// appends, their replication (RDMA WRITE + FLUSH, or the RPC baseline's
// one replicate RPC in flight per replica), the waits for the replicas,
// segment open/close, and replacing the replicas of a failed backup.
// replicated_log.cc holds the public methods, which take the lock and call
// in here. Internal to src/tailwind/.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "backup_link_impl.h"
#include "ferry/common/rng.h"
#include "ferry/nic/dma_memory.h"
#include "ferry/tailwind/replicated_log.h"
#include "messages.h"

namespace ferry::tailwind {
struct ReplicatedLog::Impl {
  static constexpr size_t kCopyChunkBytes = 1 << 20;    // re-replication WRITEs
  static constexpr uint32_t kOrphanFreesInFlight = 16;  // per backup: the rest of its session's window is the log's
  static uint64_t wr_id_of(uint64_t segment_id, uint64_t end) { return segment_id << 32 | end; }

  struct Replica {
    size_t backup = 0;  // index into links
    OpenedBuffer buffer;
    uint64_t completed = 0;  // bytes [0, completed) acknowledged by this backup
    uint32_t inflight = 0;   // signaled WRs / RPCs not yet completed
    // kRpc: bytes [0, sent) went out in replicate RPCs (at most one in
    // flight; what is written meanwhile waits for the next one).
    uint64_t sent = 0;
    // Names this replica in its RPCs' callbacks: a reply that arrives after
    // the replica was dropped (and perhaps re-created on the same backup)
    // must not count for the new one.
    uint64_t tag = 0;
  };
  struct Segment {
    uint64_t id = 0;
    nic::DmaMemory pages;  // the segment's memory (shared with a daemon-attached NIC)
    uint8_t* memory = nullptr;
    std::vector<std::unique_ptr<nic::MemoryRegion>> mrs;  // per link (its PD), kTailwind
    std::optional<SegmentWriter> writer;
    bool closed = false;
    uint64_t version = 1;
    // The coordinator knows `version` (LogOptions::on_version returned OK).
    // Until it does, nothing appended to the segment is acknowledged.
    bool version_reported = false;
    std::vector<Replica> replicas;
    size_t bytes = 0;
    // Its roll is under way: the closer waits for the last WRITEs without
    // the log's lock, and no one else may append to it or close it again.
    bool closing = false;
    ~Segment() { mrs.clear(); }
    uint64_t written() const { return writer->offset(); }
  };

  nic::Nic* nic = nullptr;
  std::vector<BackupLink*> links;
  LogOptions options;
  Runtime* rt = nullptr;  // options.runtime, or Runtime::threads()
  Rng rng{1};

  mutable Mutex mu;  // everything below, and every link's session, QP and CQ
  std::map<uint64_t, std::unique_ptr<Segment>> segments;
  Segment* open = nullptr;
  uint64_t next_segment_id = 1;
  std::vector<bool> dead;  // per link
  // A backup refused this log with kPermissionDenied: the log was fenced
  // (its primary declared failed, its log recovered elsewhere). For good:
  // nothing more is appended or acknowledged.
  bool fenced = false;
  // Replicas the log dropped from a backup (it failed, or was declared
  // failed) and has not freed there yet: (backup, segment) -> a free is in
  // flight. Left alone they would hold a buffer against that backup's
  // unflushed limit (and a copy on its storage) for good. An asynchronous
  // free goes out at each segment roll and is sent again until the backup
  // answers; a backup that never comes back keeps its entries.
  std::map<std::pair<size_t, uint64_t>, bool> orphans;
  std::vector<uint32_t> orphan_frees;  // per link: frees in flight (its session is polled while > 0)
  // kRpc: segments some replica of which has bytes not yet sent or an RPC
  // in flight; every poll sends their next RPCs (pump_locked).
  std::set<uint64_t> pumping;
  uint64_t next_replica_tag = 1;
  LogCounters counters;

  Segment* segment_of(uint64_t id) {
    auto it = segments.find(id);
    return it == segments.end() ? nullptr : it->second.get();
  }

  Replica* replica_on(Segment& s, size_t backup) {
    for (auto& r : s.replicas) {
      if (r.backup == backup) return &r;
    }
    return nullptr;
  }

  // Notes a fence in a backup's answer (kPermissionDenied).
  void note_fence(const Status& st) {
    if (st.code() == Code::kPermissionDenied) fenced = true;
  }
  Status fenced_error() const {
    return permission_denied("log " + std::to_string(options.log_id) +
                             " is fenced: its primary was declared failed and the log recovered elsewhere");
  }

  void mark_dead(size_t backup) {
    if (!dead[backup]) {
      dead[backup] = true;
      ++counters.backup_failures;
    }
  }

  uint64_t now_ns() const { return rt->clock().now_ns(); }
  uint64_t after_ms(uint32_t ms) const { return now_ns() + uint64_t{ms} * 1'000'000; }
  // A spin that holds mu found nothing to do yet. Threads spin on (the
  // engine and the backups run elsewhere); under the simulator the fiber
  // must let the engine and the backups' fibers run, until `deadline_ns`
  // at the latest (0: until anything else ran).
  void spin_locked(uint64_t deadline_ns) {
    if (rt->simulated()) rt->idle_until(deadline_ns);
  }
  // Polls while pending() holds, at most `spins` times with threads (the
  // caller's bound of old) and, under the simulator, for at most
  // replication_timeout_ms of virtual time.
  template <typename Pending>
  void poll_while_locked(Pending pending, int spins) {
    const uint64_t deadline = after_ms(options.replication_timeout_ms);
    for (int spin = 0; pending() && spin < spins; ++spin) {
      poll_locked();
      if (rt->simulated()) {
        if (!pending() || now_ns() >= deadline) return;
        rt->idle_until(deadline);
      }
    }
  }

  // Some segment has a replica on a failed backup, or fewer than r
  // replicas (an earlier repair found no backup to take one).
  bool needs_repair() const {
    for (const auto& [id, s] : segments) {
      if (s->replicas.size() < options.replicas) return true;
      for (const auto& r : s->replicas) {
        if (dead[r.backup]) return true;
      }
    }
    return false;
  }

  // Drains every link's completions (kTailwind) and RPC replies (kRpc).
  // Callbacks run here, under mu.
  void poll_locked() {
    nic::WorkCompletion wc[32];
    for (size_t b = 0; b < links.size(); ++b) {
      BackupLink::Impl& link = links[b]->impl();
      if (link.cq != nullptr) {
        while (true) {
          auto n = link.cq->poll(wc);
          if (!n.ok()) {
            mark_dead(b);
            break;
          }
          if (*n == 0) break;
          for (uint32_t i = 0; i < *n; ++i) {
            Segment* s = segment_of(wc[i].wr_id >> 32);
            Replica* r = s != nullptr ? replica_on(*s, b) : nullptr;
            if (r != nullptr && r->inflight > 0) --r->inflight;
            if (wc[i].status != nic::WcStatus::kSuccess) {
              mark_dead(b);
            } else if (r != nullptr) {
              r->completed = std::max<uint64_t>(r->completed, wc[i].wr_id & 0xFFFFFFFFu);
            }
          }
        }
      }
      if ((options.replication == Replication::kRpc && !dead[b]) || orphan_frees[b] > 0) link.session().poll();
    }
    if (!pumping.empty()) pump_all_locked();
  }

  // kRpc, as RAMCloud's ReplicatedSegment replicates: one replicate RPC in
  // flight per replica, carrying everything written since the last one (up
  // to rpc_chunk_bytes), so appends that arrive while an RPC is out are
  // merged into the next. Sends replica r's next RPC if it has none in
  // flight and bytes to send.
  void pump_locked(Segment& s, Replica& r) {
    if (dead[r.backup] || r.inflight > 0 || r.sent >= s.written()) return;
    BackupLink::Impl& link = links[r.backup]->impl();
    const uint64_t at = r.sent;
    const uint64_t n = std::min<uint64_t>(options.rpc_chunk_bytes, s.written() - at);
    // The bytes travel in the request (copied out of the segment: that
    // copy, and the backup's into its buffer, are the baseline's).
    std::vector<uint8_t> payload(sizeof(detail::ReplicateHeader) + n);
    const detail::ReplicateHeader h{options.log_id, s.id, at};
    std::memcpy(payload.data(), &h, sizeof h);
    std::memcpy(payload.data() + sizeof h, s.memory + at, n);
    const uint64_t segment_id = s.id;
    const size_t backup = r.backup;
    const uint64_t tag = r.tag;
    const uint64_t chunk_end = at + n;
    const Status sent = link.session().call_async(
        kTwReplicate, link.route, payload, false,
        [this, segment_id, backup, tag, chunk_end](const rpc::CallResult& res) {
          Segment* seg = segment_of(segment_id);
          Replica* rep = seg != nullptr ? replica_on(*seg, backup) : nullptr;
          if (rep != nullptr && rep->tag != tag) rep = nullptr;  // an older replica's reply
          if (rep != nullptr && rep->inflight > 0) --rep->inflight;
          if (res.status.ok() && res.app_status == static_cast<uint8_t>(Code::kPermissionDenied)) fenced = true;
          if (!res.status.ok() || res.app_status != 0) {
            mark_dead(backup);
          } else if (rep != nullptr) {
            rep->completed = std::max(rep->completed, chunk_end);
          }
        });
    if (sent.code() == Code::kResourceExhausted) return;  // the session's window: the next poll sends it
    if (!sent.ok()) {
      mark_dead(r.backup);
      return;
    }
    r.sent = chunk_end;
    ++r.inflight;
    ++counters.rpcs_sent;
  }

  void pump_all_locked() {
    for (auto it = pumping.begin(); it != pumping.end();) {
      Segment* s = segment_of(*it);
      bool busy = false;
      if (s != nullptr) {
        for (Replica& r : s->replicas) {
          pump_locked(*s, r);
          busy = busy || (!dead[r.backup] && (r.inflight > 0 || r.sent < s->written()));
        }
      }
      it = busy ? std::next(it) : pumping.erase(it);
    }
  }

  // kRpc: replica r (of s) is behind; every poll sends it more until it has all.
  void start_pump_locked(Segment& s, Replica& r) {
    pumping.insert(s.id);
    pump_locked(s, r);
  }

  // Replicates bytes [offset, offset+len) of segment s to replica r:
  // kTailwind posts their WRITE (+ FLUSH); kRpc has them sent with what
  // else replica r has not been sent (pump_locked).
  // kResourceExhausted: its queue is full (poll and retry).
  Status post(Segment& s, Replica& r, uint64_t offset, uint64_t len) {
    if (options.replication == Replication::kRpc) {
      start_pump_locked(s, r);
      return ok_status();
    }
    if (r.inflight >= options.max_inflight_per_backup) return resource_exhausted("backup queue full");
    BackupLink::Impl& link = links[r.backup]->impl();
    const uint64_t end = offset + len;
    {
      const nic::Sge sge = s.mrs[r.backup]->sge(offset, static_cast<uint32_t>(len));
      nic::SendWr wrs[2];
      wrs[0].opcode = nic::WrOpcode::kRdmaWrite;
      wrs[0].sg_list = {&sge, 1};
      wrs[0].remote_addr = r.buffer.addr + offset;
      wrs[0].rkey = r.buffer.rkey;
      wrs[0].wr_id = wr_id_of(s.id, end);
      size_t n = 1;
      if (options.flush) {
        wrs[1].opcode = nic::WrOpcode::kFlush;
        wrs[1].remote_addr = r.buffer.addr + offset;
        wrs[1].rkey = r.buffer.rkey;
        wrs[1].flush_length = static_cast<uint32_t>(len);
        wrs[1].flush_persistent = true;
        wrs[1].wr_id = wr_id_of(s.id, end);
        n = 2;
      }
      wrs[n - 1].flags = nic::kSendSignaled;
      const Status posted = link.qp->post_send(std::span<const nic::SendWr>(wrs, n));
      if (posted.code() == Code::kResourceExhausted) return posted;
      if (!posted.ok()) {
        mark_dead(r.backup);
        return ok_status();  // the repair re-replicates these bytes
      }
      ++counters.writes_posted;
      ++r.inflight;
      return ok_status();
    }
  }

  // Sends a free for every dropped replica whose free is not in flight
  // (asynchronous: a backup that does not answer holds nothing up).
  void free_orphans_locked() {
    // A fenced log's replicas are the recovery's now (it frees them).
    if (fenced) return;
    for (auto& [where, in_flight] : orphans) {
      const auto [b, segment_id] = where;
      if (in_flight || orphan_frees[b] >= kOrphanFreesInFlight) continue;
      BackupLink::Impl& link = links[b]->impl();
      const detail::SegmentRef req{options.log_id, segment_id};
      const Status sent = link.session().call_async(
          kTwFree, link.route, detail::encode(req), false, [this, key = where](const rpc::CallResult& res) {
            --orphan_frees[key.first];
            const bool gone =
                res.status.ok() && (res.app_status == 0 || res.app_status == static_cast<uint8_t>(Code::kNotFound));
            if (gone) {
              orphans.erase(key);
              ++counters.orphans_freed;
            } else {
              orphans[key] = false;  // the next roll sends it again
            }
          });
      if (!sent.ok()) continue;  // the link is down or its window full: the next roll
      in_flight = true;
      ++orphan_frees[b];
    }
  }

  // Remembers a replica dropped from backup `b` (not counted any more).
  void orphan(size_t b, uint64_t segment_id) { orphans.emplace(std::make_pair(b, segment_id), false); }

  // post(), polling while the backup's queue is full. A backup whose queue
  // stays full for replication_timeout_ms (it stopped answering) is
  // declared failed.
  void post_blocking(Segment& s, Replica& r, uint64_t offset, uint64_t len) {
    const uint64_t deadline = after_ms(options.replication_timeout_ms);
    while (post(s, r, offset, len).code() == Code::kResourceExhausted) {
      poll_locked();
      if (dead[r.backup]) return;
      if (now_ns() >= deadline) {
        ++counters.replication_timeouts;
        mark_dead(r.backup);
        return;
      }
      spin_locked(deadline);
    }
  }

  bool replicated(const Segment& s, uint64_t end) const {
    return std::all_of(s.replicas.begin(), s.replicas.end(),
                       [&](const Replica& r) { return !dead[r.backup] && r.completed >= end; });
  }

  // Candidates for a new replica of `s`: live, not already holding it.
  std::vector<size_t> candidates(const Segment& s) {
    std::vector<size_t> out;
    for (size_t b = 0; b < links.size(); ++b) {
      if (dead[b]) continue;
      if (std::any_of(s.replicas.begin(), s.replicas.end(), [&](const Replica& r) { return r.backup == b; })) continue;
      out.push_back(b);
    }
    for (size_t i = out.size(); i > 1; --i) std::swap(out[i - 1], out[rng.below(i)]);
    return out;
  }

  Status register_segment(Segment& s) {
    if (options.replication != Replication::kTailwind) return ok_status();
    s.mrs.resize(links.size());
    for (size_t b = 0; b < links.size(); ++b) {
      FERRY_ASSIGN_OR_RETURN(
          s.mrs[b], nic->reg_mr(*links[b]->impl().pd, s.memory, options.segment_bytes, nic::kAccessLocalWrite));
    }
    return ok_status();
  }

  // Opens a replica of `s` on some live backup and copies [0, written)
  // into it, waiting until it is acknowledged. Returns the replica's index.
  Result<size_t> add_replica(Segment& s) {
    const uint64_t deadline = after_ms(options.open_wait_ms);
    while (true) {
      bool busy = false;  // a live backup refused only for its unflushed limit
      auto added = try_add_replica(s, &busy);
      if (added.ok() || !busy || now_ns() >= deadline) return added;
      // Backpressure (§3.2): wait for a backup's flusher, then ask again.
      ++counters.opens_deferred;
      rt->sleep_for_ns(200'000);
    }
  }

  Result<size_t> try_add_replica(Segment& s, bool* busy) {
    for (size_t b : candidates(s)) {
      auto opened = links[b]->open(s.id, s.version);
      note_fence(opened.status());
      if (fenced) return fenced_error();
      if (!opened.ok()) {
        if (opened.status().code() == Code::kUnavailable || opened.status().code() == Code::kTimedOut) mark_dead(b);
        if (opened.status().code() == Code::kResourceExhausted) *busy = true;
        continue;
      }
      if (options.replication == Replication::kTailwind && opened->rkey == 0) {
        return failed_precondition(links[b]->name() + " opened a buffer without a data path");
      }
      Replica r;
      r.backup = b;
      r.tag = next_replica_tag++;
      r.buffer = *opened;
      s.replicas.push_back(r);
      const size_t index = s.replicas.size() - 1;
      const uint64_t n = s.written();
      for (uint64_t off = 0; off < n; off += kCopyChunkBytes) {
        post_blocking(s, s.replicas[index], off, std::min<uint64_t>(kCopyChunkBytes, n - off));
      }
      // The copy has an append's deadline: a backup that answered the
      // open and then acknowledged nothing new for replication_timeout_ms
      // is failed, not waited for with the lock.
      uint64_t deadline = after_ms(options.replication_timeout_ms);
      uint64_t progress = s.replicas[index].completed;
      while (!dead[b] && !fenced && s.replicas[index].completed < n) {
        poll_locked();
        if (s.replicas[index].completed > progress) {
          progress = s.replicas[index].completed;
          deadline = after_ms(options.replication_timeout_ms);
        }
        if (now_ns() >= deadline) {
          ++counters.replication_timeouts;
          mark_dead(b);
          break;
        }
        rt->idle_until(deadline);
      }
      if (fenced) return fenced_error();
      if (dead[b]) {
        s.replicas.erase(s.replicas.begin() + static_cast<ptrdiff_t>(index));
        orphan(b, s.id);
        continue;
      }
      return index;
    }
    return unavailable("no live backup can take a replica of segment " + std::to_string(s.id) + " of log " +
                       std::to_string(options.log_id));
  }

  // §3.3.3: replaces every replica on a dead backup. Appends are suspended
  // (mu is held); the new replica holds the segment's bytes before the
  // version moves on at the primary and every live replica.
  Status repair_locked() {
    if (fenced) return fenced_error();
    while (needs_repair()) {
      for (auto& [id, seg] : segments) {
        Segment& s = *seg;
        std::erase_if(s.replicas, [&](const Replica& r) {
          if (dead[r.backup]) orphan(r.backup, s.id);
          return dead[r.backup];
        });
        // Counted, not remembered: a repair that found no backup last time
        // is tried again, and until it succeeds nothing is acknowledged.
        const size_t lost = options.replicas - std::min<size_t>(options.replicas, s.replicas.size());
        for (size_t i = 0; i < lost; ++i) {
          FERRY_ASSIGN_OR_RETURN(size_t index, add_replica(s));
          ++counters.replicas_recreated;
          if (s.closed) {
            const Replica& r = s.replicas[index];
            const Status closed = links[r.backup]->close(s.id, s.written(), s.writer->checksum());
            note_fence(closed);
            if (!closed.ok()) mark_dead(r.backup);
          }
        }
        if (lost != 0 && !s.closed) {
          const uint64_t version = s.version + 1;
          for (const Replica& r : s.replicas) {
            if (dead[r.backup]) continue;
            const Status changed = links[r.backup]->set_version(s.id, version);
            note_fence(changed);
            if (!changed.ok()) mark_dead(r.backup);
          }
          s.version = version;
          s.version_reported = false;
          ++counters.version_changes;
          if (fenced) return fenced_error();
          (void)report_version_locked(s);  // an error: the next append retries it before acknowledging
        }
      }
    }
    return ok_status();
  }

  // Tells the coordinator the segment's current version, unless it knows.
  Status report_version_locked(Segment& s) {
    if (s.version_reported || !options.on_version) {
      s.version_reported = true;
      return ok_status();
    }
    const Status reported = options.on_version(s.id, s.version);
    if (!reported.ok()) {
      return Status(reported.code(), "log " + std::to_string(options.log_id) + ": the coordinator does not know " +
                                         "segment " + std::to_string(s.id) + " at version " +
                                         std::to_string(s.version) + ": " + reported.message());
    }
    s.version_reported = true;
    return ok_status();
  }

  Status open_segment_locked() {
    free_orphans_locked();  // the roll is when the log does control work anyway
    auto s = std::make_unique<Segment>();
    s->id = next_segment_id++;
    // Fresh anonymous pages read as zero without being touched: the segment
    // is zero from the start at no cost here, and each page is faulted in by
    // the append that first writes it (a memset would fault all 8 MB while
    // the PUT that rolled the segment waits).
    FERRY_ASSIGN_OR_RETURN(s->pages, nic::DmaMemory::allocate(*nic, options.segment_bytes, "ferry-tailwind-segment"));
    s->memory = s->pages.data();
    s->bytes = options.segment_bytes;
    FERRY_ASSIGN_OR_RETURN(auto writer,
                           SegmentWriter::start({s->memory, options.segment_bytes}, options.log_id, s->id));
    s->writer.emplace(writer);
    FERRY_RETURN_IF_ERROR(register_segment(*s));
    Segment& seg = *s;
    segments.emplace(seg.id, std::move(s));
    Status opened = ok_status();
    for (uint32_t i = 0; i < options.replicas && opened.ok(); ++i) opened = add_replica(seg).status();
    // The coordinator lists the segment before anything is appended to it:
    // a recovery then knows to look for it (and waits for its backups
    // rather than finish without it).
    if (opened.ok()) opened = report_version_locked(seg);
    if (!opened.ok()) {
      for (const Replica& r : seg.replicas) (void)links[r.backup]->free(seg.id);
      segments.erase(seg.id);
      return opened;
    }
    open = &seg;
    ++counters.segments_opened;
    return ok_status();
  }

  // Waits until every replica holds [0, end). A backup that acknowledged
  // nothing new for replication_timeout_ms is silent, and a silent backup
  // is a failed one (the repair replaces it); one still working through a
  // long queue (a roll after bulk appends, RPC mode) is not.
  void wait_replicated_locked(Segment& s, uint64_t end, std::unique_lock<Mutex>& lock) {
    const uint64_t timeout_ns = uint64_t{options.replication_timeout_ms} * 1'000'000;
    std::vector<uint64_t> progress, deadlines;
    for (const Replica& r : s.replicas) {
      progress.push_back(r.completed);
      deadlines.push_back(now_ns() + timeout_ns);
    }
    while (true) {
      poll_locked();
      if (fenced || needs_repair()) return;
      if (replicated(s, end)) return;
      const uint64_t now = now_ns();
      uint64_t next = UINT64_MAX;
      bool silent = false;
      for (size_t i = 0; i < s.replicas.size() && i < progress.size(); ++i) {
        const Replica& r = s.replicas[i];
        if (r.completed > progress[i]) {
          progress[i] = r.completed;
          deadlines[i] = now + timeout_ns;
        }
        if (dead[r.backup] || r.completed >= end) continue;
        if (now >= deadlines[i]) {
          ++counters.replication_timeouts;
          mark_dead(r.backup);
          silent = true;
        } else {
          next = std::min(next, deadlines[i]);
        }
      }
      if (silent) return;
      lock.unlock();
      rt->idle_until(next == UINT64_MAX ? 0 : next);
      lock.lock();
    }
  }

  // Waits (without the lock) while the open segment is being rolled by
  // another thread.
  void wait_roll_locked(std::unique_lock<Mutex>& lock) {
    while (open != nullptr && open->closing) {
      lock.unlock();
      rt->idle();
      lock.lock();
    }
  }

  Status close_segment_locked(std::unique_lock<Mutex>& lock) {
    Segment& s = *open;
    s.closing = true;
    const Status closed = close_closing_locked(s, lock);
    if (!closed.ok() && open == &s) s.closing = false;  // the next append tries the roll again
    return closed;
  }

  Status close_closing_locked(Segment& s, std::unique_lock<Mutex>& lock) {
    // The close RPC travels on another queue than the WRITEs: every WRITE
    // must be acknowledged before the backup writes the buffer to storage.
    while (true) {
      wait_replicated_locked(s, s.written(), lock);
      if (!needs_repair()) break;
      FERRY_RETURN_IF_ERROR(repair_locked());
    }
    for (const Replica& r : s.replicas) {
      const Status closed = links[r.backup]->close(s.id, s.written(), s.writer->checksum());
      note_fence(closed);
      if (!closed.ok()) mark_dead(r.backup);
    }
    if (fenced) return fenced_error();
    s.closed = true;
    open = nullptr;
    ++counters.segments_closed;
    return repair_locked();  // a backup that failed its close gets a closed replica elsewhere
  }

  using AppendFn = std::function<Result<SegmentWriter::Appended>(SegmentWriter&)>;

  // With `wait` false the append returns once its bytes are posted (or
  // queued) to every replica, not replicated: sync_locked() waits.
  Result<LogPosition> append(const AppendFn& write_entry, LogPosition* written, bool wait = true) {
    std::unique_lock lock(mu);
    wait_roll_locked(lock);
    if (fenced) return fenced_error();
    FERRY_RETURN_IF_ERROR(repair_locked());
    if (open == nullptr) FERRY_RETURN_IF_ERROR(open_segment_locked());
    FERRY_RETURN_IF_ERROR(report_version_locked(*open));
    auto appended = write_entry(*open->writer);
    if (!appended.ok() && appended.status().code() == Code::kResourceExhausted) {
      FERRY_RETURN_IF_ERROR(close_segment_locked(lock));
      FERRY_RETURN_IF_ERROR(open_segment_locked());
      appended = write_entry(*open->writer);
      if (!appended.ok() && appended.status().code() == Code::kResourceExhausted) {
        return invalid_argument("entry does not fit in a segment of " + std::to_string(options.segment_bytes) +
                                " bytes");
      }
    }
    if (!appended.ok()) return appended.status();
    Segment& s = *open;
    const uint64_t end = appended->offset + appended->bytes;
    for (Replica& r : s.replicas) post_blocking(s, r, appended->offset, appended->bytes);
    ++counters.appends;
    counters.bytes += appended->bytes;
    const LogPosition position{s.id, appended->offset, appended->bytes};
    if (written != nullptr) *written = position;
    if (!wait) return position;
    while (true) {
      wait_replicated_locked(s, end, lock);
      if (fenced) return fenced_error();
      if (!needs_repair()) break;
      FERRY_RETURN_IF_ERROR(repair_locked());  // the new replicas hold [0, written) >= end
    }
    // A repair meanwhile moved the version on: the coordinator must know it
    // before this append counts, or a recovery could prefer a replica left
    // behind at the old version that lacks it.
    FERRY_RETURN_IF_ERROR(report_version_locked(s));
    return position;
  }

  // Every append so far is on every replica (a closed segment's were at its
  // close): the open segment's bytes, repairs and version reports as an
  // append's own wait does them.
  Status sync_locked(std::unique_lock<Mutex>& lock) {
    wait_roll_locked(lock);
    if (fenced) return fenced_error();
    FERRY_RETURN_IF_ERROR(repair_locked());
    if (open == nullptr) return ok_status();
    Segment& s = *open;
    while (true) {
      wait_replicated_locked(s, s.written(), lock);
      if (fenced) return fenced_error();
      if (!needs_repair()) break;
      FERRY_RETURN_IF_ERROR(repair_locked());
    }
    return report_version_locked(s);
  }
};

}  // namespace ferry::tailwind
