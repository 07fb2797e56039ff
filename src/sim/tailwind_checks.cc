// `ferry sim tailwind`'s finale and invariants (tailwind.cc describes the
// run): the fresh reader, the cleaner pass and the last crash, and the
// checks of the history, the versions, the replicas, the index and the
// backups' buffers.
#include <algorithm>
#include <string>
#include <vector>

#include "tailwind_run.h"

namespace ferry::sim::tailwind_sim {

// After the faults: a fresh client reads every key; these reads come last,
// so an acknowledged write lost or a deleted value back breaks linearizability.
// Then, where the cluster can lose one more server (r + 2 live), the
// cleaner runs a full pass on every server, one live server crashes and is
// recovered, and every key is read again: what its log held must come back
// from the backups exactly (nothing acknowledged lost, nothing deleted or
// overwritten back), which the second reads put in the history.
bool Run::finale() {
  world_.event("finale: a fresh client reads every key");
  logkv::ClientOptions co;
  co.retry_for_ms = 5000;
  auto reader = logkv::Client::create(*cluster_, co);
  if (!reader.ok()) {
    fail("live", "create the reader: " + reader.status().to_string());
    return true;
  }
  bool done = false;
  Thread t = rt_.spawn("reader", "clients", [&] {
    auto read_all = [&](bool every_cold) {
      // Every hot key, and every cold one (written once: an acknowledged PUT
      // a recovery lost shows as absent) or 16 spread over those written.
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < kKeys; ++k) keys.push_back(k);
      const uint64_t stride = every_cold ? 1 : std::max<uint64_t>(1, (next_cold_ + 15) / 16);
      for (uint64_t n = 0; n < next_cold_; n += stride) keys.push_back(kKeys + n);
      for (uint64_t k : keys) {
        if (!ok()) break;
        const uint64_t t0 = world_.now();
        auto got = (*reader)->get(0, table_, as_bytes(key_name(k)));
        if (got.ok()) {
          history_.push_back(KvOp::get(kClients, k, id_of(got->value), t0, world_.now()));
        } else if (got.status().code() == Code::kNotFound) {
          history_.push_back(KvOp::get(kClients, k, std::nullopt, t0, world_.now()));
        } else {
          fail("live", "the final read of " + key_name(k) + ": " + got.status().to_string());
        }
      }
    };
    // Quiescence for the state checks: the cleaner's appends are the last
    // writes that could still be in flight.
    cluster_->stop_cleaner();
    // Some hosts still down come back (their backups free what no log needs).
    for (uint32_t h : down(kServers)) {
      if (world_.fault_below(2) == 0 && !restart(h)) break;
    }
    read_all(true);
    check_index("after the workload");
    check_buffers();
    const std::vector<uint32_t> up = live();
    if (ok() && up.size() >= replicas_ + 2) {
      auto cleaned = cluster_->clean();
      world_.event("finale: a cleaner pass on every server: " +
                   (cleaned.ok() ? std::to_string(cleaned->segments_cleaned) + " segments cleaned, " +
                                       std::to_string(cleaned->tombstones_dropped) + " tombstones dropped"
                                 : cleaned.status().to_string()));
      check_index("after the cleaner pass");
      const uint32_t victim = up[world_.fault_below(up.size())];
      const bool power = world_.strike(FaultKind::kPowerFailure, 50.0);
      world_.event("finale: " + std::string(power ? "power fails on" : "crash") + " server " + std::to_string(victim) +
                   ", recover it, read every key again");
      const Status st = power ? cluster_->power_fail_server(victim, world_.fault_below(UINT64_MAX)).status()
                              : cluster_->crash_server(victim);
      if (!st.ok()) {
        fail("crashes", "crashing server " + std::to_string(victim) + ": " + st.to_string());
      } else {
        ++lost_;
        if (recover(victim, power ? "power" : "crash")) {
          read_all(false);
          check_index("after the finale's recovery");
          check_buffers();
        }
      }
    }
    done = true;
  });
  const bool ended = drive([&] { return done; }, "in the final reads");
  if (ended) t.join();
  threads_.push_back(std::move(t));
  return ended;
}

// At quiescence, every replica a live log counts on a live server's backup
// holds the primary's bytes of that segment: the open one in the backup's
// buffer, a closed one in its buffer or on its storage. (A replica on a
// crashed server is replaced at the log's next append; it is not checked.)
void Run::check_replicas() {
  uint64_t checked = 0;
  for (uint32_t i : live()) {
    logkv::Server& server = cluster_->server(i);
    tailwind::ReplicatedLog& log = server.log();
    const std::vector<uint32_t> to = server.backup_servers();
    const uint64_t log_id = i + 1;
    for (uint64_t id : log.segment_ids()) {
      const auto primary = log.segment(id);
      for (size_t b : log.replicas_of(id)) {
        if (b >= to.size() || !cluster_->alive(to[b])) continue;
        tailwind::Backup& backup = cluster_->server(to[b]).backup();
        std::vector<uint8_t> held;
        if (id == log.open_segment_id()) {
          const auto buffer = backup.buffer(log_id, id);
          held.assign(buffer.begin(), buffer.begin() + std::min(buffer.size(), primary.size()));
        } else {
          auto stored = backup.read(log_id, id, /*closed=*/true, 0, static_cast<uint32_t>(primary.size()));
          if (stored.ok()) held = std::move(stored).value();
        }
        ++checked;
        if (held.size() != primary.size() || !std::equal(primary.begin(), primary.end(), held.begin())) {
          return fail("replicas-agree", "server " + std::to_string(i) + "'s segment " + std::to_string(id) + " (" +
                                            std::to_string(primary.size()) + " bytes) on server " +
                                            std::to_string(to[b]) + "'s backup: " + std::to_string(held.size()) +
                                            " bytes held, not the primary's");
        }
      }
    }
  }
  world_.event("replicas agree: " + std::to_string(checked) + " replicas checked");
}

// At quiescence, each live server's index is what its log holds
// (logkv::Server::verify_index): a key the cleaner or a recovery left
// killable only in the index would come back at the next recovery.
void Run::check_index(const char* when) {
  if (!ok()) return;
  size_t servers = 0, settled = 0;
  for (uint32_t i : live()) {
    logkv::Server& server = cluster_->server(i);
    // Keys a failed append left in doubt are settled at their next write or
    // cleaner pass; at quiescence, now.
    settled += server.in_doubt();
    Status st = server.settle();
    if (st.ok()) st = server.verify_index();
    if (!st.ok()) return fail("index-matches-log", std::string(when) + ": " + st.message());
    ++servers;
  }
  world_.event(std::string("index matches log ") + when + " on " + std::to_string(servers) + " servers (" +
               std::to_string(settled) + " keys in doubt settled)");
}

// At quiescence, every replica a live backup holds is accounted for: a
// segment its live log counts on that backup, or one the log still means to
// free there (an orphan). A crashed log's replicas were freed by its
// recovery. Anything else is a backup buffer (or stored segment) leaked for
// good. And no backup holds more closed-but-unflushed buffers than its
// limit.
void Run::check_buffers() {
  if (!ok()) return;
  size_t held = 0;
  for (uint32_t j = 0; j < kServers; ++j) {
    if (!cluster_->backup_up(j)) continue;  // live, or restarted (a partitioned server is stopped by now)
    tailwind::Backup& backup = cluster_->server(j).backup();
    const tailwind::BackupCounters bc = backup.counters();
    if (bc.closed_unflushed > bc.max_open_buffers) {
      return fail("buffers-accounted", "server " + std::to_string(j) + "'s backup holds " +
                                           std::to_string(bc.closed_unflushed) + " closed unflushed buffers, above " +
                                           std::to_string(bc.max_open_buffers));
    }
    for (uint32_t i = 0; i < cluster_->servers(); ++i) {
      if (i == j) continue;
      const std::vector<tailwind::ReplicaInfo> replicas = backup.find(i + 1);
      held += replicas.size();
      if (replicas.empty()) continue;
      std::string why;
      if (!cluster_->alive(i)) {
        why = "server " + std::to_string(i) + " crashed and its log was recovered (segments";
        for (const tailwind::ReplicaInfo& r : replicas) {
          why += " " + std::to_string(r.segment_id) + (r.closed ? " closed" : " open");
        }
        why += ")";
      } else {
        logkv::Server& owner = cluster_->server(i);
        const std::vector<uint32_t> to = owner.backup_servers();
        const size_t b = static_cast<size_t>(std::find(to.begin(), to.end(), j) - to.begin());
        const std::vector<uint64_t> ids = owner.log().segment_ids();
        const auto orphans = owner.log().orphans();
        for (const tailwind::ReplicaInfo& r : replicas) {
          const bool counted = std::binary_search(ids.begin(), ids.end(), r.segment_id) && [&] {
            const auto at = owner.log().replicas_of(r.segment_id);
            return std::find(at.begin(), at.end(), b) != at.end();
          }();
          const bool orphan =
              std::find(orphans.begin(), orphans.end(), std::make_pair(b, r.segment_id)) != orphans.end();
          if (!counted && !orphan) {
            why = "server " + std::to_string(i) + "'s log neither counts segment " + std::to_string(r.segment_id) +
                  " there nor will free it";
            break;
          }
        }
        if (why.empty()) continue;
      }
      return fail("buffers-accounted", "server " + std::to_string(j) + "'s backup holds " +
                                           std::to_string(replicas.size()) + " replica(s) of log " +
                                           std::to_string(i + 1) + ": " + why);
    }
  }
  world_.event("buffers accounted: " + std::to_string(held) + " replicas held on live backups");
}

// Per key, an acknowledged PUT that began after another ended got a higher
// version (logkv.h: versions grow across deletes and recoveries).
void Run::check_versions() {
  for (const AckedPut& a : acked_puts_) {
    for (const AckedPut& b : acked_puts_) {
      if (a.key == b.key && a.complete_ns < b.invoke_ns && a.version >= b.version) {
        return fail("versions-grow", key_name(a.key) + ": a PUT acknowledged at v" + std::to_string(a.version) +
                                         " (done at " + std::to_string(a.complete_ns) + " ns) and a later one at v" +
                                         std::to_string(b.version) + " (begun at " + std::to_string(b.invoke_ns) +
                                         " ns)");
      }
    }
  }
}

void Run::check_history() {
  const LinearizabilityResult v = check_kv_history(history_);
  world_.event(std::string("history: ") + std::to_string(history_.size()) + " ops, " + verdict_name(v.verdict));
  if (v.verdict == Verdict::kLinearizable) return;
  std::string detail = std::string(verdict_name(v.verdict)) + ": " + v.explanation;
  for (size_t i : v.minimal_ops) detail += "\n  " + describe(history_[i]);
  fail("linearizable", detail);
}

}  // namespace ferry::sim::tailwind_sim
