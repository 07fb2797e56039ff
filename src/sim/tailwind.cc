// `ferry sim tailwind`: a LogKv cluster on Tailwind replication (five
// servers, r = 2 or 1, 64 KiB segments, PM backups, the background cleaner) run
// as fibers of one SimRuntime: every server's RPC workers, backup flusher
// and recovery masters, the cleaner, four clients on ten hot keys and the
// fault script, on one OS thread and the World's virtual clock, with the
// NICs on a manual engine the scheduler steps (docs/simulation.md,
// "Tailwind / LogKv"). The seed picks the replication mode (Tailwind's
// one-sided WRITEs or the RPC baseline), the workload, the interleaving and
// the faults (crashes, power failures -- correlated with a segment's
// replicas, right after a repair -- with hosts restarted as backups from
// their PM, partitions, backups declared failed -- some first cut off from
// a primary by the network, some recovered from only once back --
// coordinator outages, slow hosts, client crashes, packet faults); every
// client history is checked for linearizability, with a fresh reader of
// every key after the faults. Each run counts what its recoveries met
// (RunResult::coverage); a campaign of 2,000 seeds must meet the three the
// system requires (System::must_cover).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/common/temp_dir.h"
#include "tailwind_run.h"

namespace ferry::sim {
namespace tailwind_sim {

// The cluster's files: on tmpfs when there is one (the runs fdatasync).
std::string make_run_dir() {
  const std::filesystem::path base =
      std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
  auto dir = make_temp_dir(base, "ferry-sim-tailwind");
  return dir.ok() ? std::move(dir).value() : std::string();
}

std::vector<uint32_t> Run::live() const {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < cluster_->servers(); ++i) {
    if (cluster_->alive(i)) out.push_back(i);
  }
  return out;
}

bool Run::drive(const std::function<bool()>& done, const std::string& what) {
  const SimRunResult r = rt_.run_until(done, kMaxSteps);
  if (r.done) return true;
  fail("live", (r.deadlock ? "the cluster deadlocked " : "no end within the step budget ") + what + "\n" + r.report);
  return false;
}

bool Run::build() {
  dir_ = make_run_dir();
  if (dir_.empty()) {
    fail("setup", "cannot create a run directory");
    return false;
  }
  logkv::ClusterOptions o;
  o.servers = kServers;
  o.dir = dir_;
  replicas_ = world_.rng().below(2) == 0 ? 1 : 2;
  o.server.replicas = replicas_;
  o.server.workers = 2;
  mode_ = world_.rng().below(2) == 0 ? tailwind::Replication::kTailwind : tailwind::Replication::kRpc;
  o.server.replication = mode_;
  o.server.segment_bytes = 64 << 10;
  o.server.backup_buffers = 32;
  o.server.clean_below = 0.6;
  o.server.max_request_bytes = 32 << 10;
  o.server.runtime = &rt_;
  o.clean_interval_ms = 5;
  o.engine.threaded = false;
  o.engine.clock = &world_.clock();
  o.engine.rx_budget = 1;  // WRITEs placed over several engine passes: a crash can fall inside one
  o.engine.tx_burst = 1 + world_.rng().below(2) * 15;
  const FaultRates& rates = world_.rates();
  o.engine.faults.seed = world_.fault_below(uint64_t{1} << 62) + 1;
  o.engine.faults.drop = rates[FaultKind::kPacketLoss];
  o.engine.faults.duplicate = rates[FaultKind::kPacketDuplicate];
  o.engine.faults.delay = rates[FaultKind::kPacketDelay];
  o.engine.faults.delay_max_ns = kDelayMaxNs;
  auto cluster = logkv::Cluster::create(o);
  if (!cluster.ok()) {
    fail("setup", "create the cluster: " + cluster.status().to_string());
    return false;
  }
  cluster_ = std::move(cluster).value();
  nic::Engine* engine = &cluster_->engine();
  rt_.set_step_engine([engine] { return engine->step(); });
  rt_.set_next_deadline([engine] {
    const uint64_t d = engine->next_deadline_ns();
    return d == UINT64_MAX ? 0 : d;
  });
  auto table = cluster_->create_table("hot");
  if (!table.ok()) {
    fail("setup", "create the table: " + table.status().to_string());
    return false;
  }
  table_ = *table;
  logkv::ClientOptions co;
  co.sessions = kClients;
  co.timeout_ns = 300 * kMs;
  co.max_attempts = 40;
  co.retry_unknown_writes = false;  // a write is applied at most once, so the checker can place it
  auto client = logkv::Client::create(*cluster_, co);
  if (!client.ok()) {
    fail("setup", "create the client: " + client.status().to_string());
    return false;
  }
  client_ = std::move(client).value();
  slow_until_.assign(kServers, 0);
  max_lost_ = kServers - (replicas_ + 1);
  if (world_.rng().below(2) == 0) max_lost_ = kServers - (replicas_ + 2);
  cold_percent_ = 25 * world_.rng().below(3);
  world_.event(std::string("cluster up: ") + std::to_string(kServers) + " servers, r=" + std::to_string(replicas_) +
               ", " + std::string(tailwind::replication_name(mode_)) + " replication, tx_burst " +
               std::to_string(o.engine.tx_burst) + ", " + std::to_string(cold_percent_) + "% cold writes, at most " +
               std::to_string(max_lost_) + " servers lost, faults " + world_.rates().to_string());
  return true;
}

void Run::spawn_client(uint32_t c, uint32_t generation) {
  ++clients_running_;
  const std::string name = "client-" + std::to_string(c) + "." + std::to_string(generation);
  threads_.push_back(rt_.spawn(name, "clients", [this, c, generation] { client(c, generation); }));
  client_fiber_[c] = rt_.find(name);
}

// One client fiber: takes operations until the workload is done. A crashed
// one (cancelled) records its operation in flight as pending and hands its
// session to a successor.
void Run::client(uint32_t c, uint32_t generation) {
  std::map<uint64_t, uint64_t> seen;  // key -> the version this client last saw (0: absent)
  while (next_op_ < ops_ && ok()) {
    ++next_op_;
    Rng& rng = world_.rng();
    // A cold key is written once, unconditionally, with 1-4 KB: it keeps
    // segments live, so the cleaner leaves some that hold a hot key's old
    // version while it cleans the ones around them.
    const bool cold = cold_percent_ != 0 && rng.below(100) < cold_percent_;
    const uint64_t k = cold ? kKeys + next_cold_++ : rng.below(kKeys);
    const std::string key = key_name(k);
    const uint64_t roll = cold ? 0 : rng.below(100);
    const uint64_t t0 = world_.now();
    std::string what;
    std::optional<KvOp> op;  // recorded unless the outcome says nothing
    bool unknown = false;
    if (roll < 50) {  // PUT, conditional one time in three
      const uint64_t id = next_value_id_++;
      std::optional<uint64_t> expected;
      if (roll >= 35) expected = seen.count(k) != 0 ? seen[k] : 0;
      // Mostly small values; one in eight of 20-30 KB (a WRITE of many packets a crash can tear).
      const size_t padding = cold                ? 1000 + rng.below(3000)
                             : rng.below(8) == 0 ? 20000 + rng.below(10000)
                                                 : rng.below(600);
      auto v = client_->put(c, table_, as_bytes(key), as_bytes(value_of(id, padding)), expected);
      if (rt_.cancelled()) {
        op = KvOp::put(c, k, id, t0, std::nullopt);
      } else if (v.ok()) {
        op = KvOp::put(c, k, id, t0, world_.now());
        acked_puts_.push_back({k, *v, t0, world_.now()});
        seen[k] = *v;
        ++result_.acknowledged;
      } else if (v.status().code() != Code::kFailedPrecondition) {  // a version mismatch changed nothing
        op = KvOp::put(c, k, id, t0, std::nullopt);
        unknown = true;
      }
      what = "put " + key + " #" + std::to_string(id) + (expected ? " if v" + std::to_string(*expected) : "") + " -> " +
             (v.ok() ? "v" + std::to_string(*v) : std::string(code_name(v.status().code())));
    } else if (roll < 60) {  // DELETE, conditional one time in two
      std::optional<uint64_t> expected;
      if (roll >= 55 && seen.count(k) != 0) expected = seen[k];
      const Status st = client_->remove(c, table_, as_bytes(key), expected);
      if (rt_.cancelled()) {
        op = KvOp::remove(c, k, t0, std::nullopt);
      } else if (st.ok()) {
        op = KvOp::remove(c, k, t0, world_.now());
        seen[k] = 0;
        ++result_.acknowledged;
      } else if (st.code() == Code::kNotFound) {  // it was absent: a read
        op = KvOp::get(c, k, std::nullopt, t0, world_.now());
        seen[k] = 0;
      } else if (st.code() != Code::kFailedPrecondition) {
        op = KvOp::remove(c, k, t0, std::nullopt);
        unknown = true;
      }
      what = "delete " + key + " -> " + std::string(code_name(st.code()));
    } else {  // GET
      auto got = client_->get(c, table_, as_bytes(key));
      if (rt_.cancelled()) {
        // A read whose answer nobody saw constrains nothing.
      } else if (got.ok()) {
        op = KvOp::get(c, k, id_of(got->value), t0, world_.now());
        seen[k] = got->version;
        ++result_.reads;
      } else if (got.status().code() == Code::kNotFound) {
        op = KvOp::get(c, k, std::nullopt, t0, world_.now());
        seen[k] = 0;
        ++result_.reads;
      }
      what = "get " + key + " -> " +
             (got.ok() ? "#" + std::to_string(id_of(got->value).value_or(0)) + " v" + std::to_string(got->version)
                       : std::string(code_name(got.status().code())));
    }
    if (op) history_.push_back(*op);
    ++done_ops_;
    if (rt_.cancelled()) {
      world_.event("c" + std::to_string(c) + " crashed during: " + what);
      spawn_client(c, generation + 1);
      break;
    }
    world_.event("c" + std::to_string(c) + " " + what);
    if (unknown) rt_.sleep_for_ns(5 * kMs);  // a server is down: do not hammer it
  }
  --clients_running_;
}

// Recovers a lost server's tablets. A recovery may wait (kUnavailable)
// only while a backup that may hold what it needs is down: that host then
// restarts (its backup only, from its PM) and the recovery runs again.
bool Run::recover(uint32_t server, const char* cause) {
  wait_for_coordinator();
  while (ok()) {
    auto rec = cluster_->recover_server(server);
    if (rec.ok()) {
      result_.coverage[std::string("torn-after-") + cause] += rec->log.torn_open;
      result_.coverage[std::string("lagging-after-") + cause] += rec->log.lagging_open;
      result_.coverage["stale-replicas-ignored"] += rec->log.stale_ignored;
      world_.event("server " + std::to_string(server) + " recovered: " + std::to_string(rec->log.segments) +
                   " segments, " + std::to_string(rec->progress.objects_restored) + " objects, " +
                   std::to_string(rec->log.torn_open) + " torn replicas, " + std::to_string(rec->log.stale_ignored) +
                   " stale ignored");
      return true;
    }
    const std::vector<uint32_t> off = down(server);
    if (rec.status().code() != Code::kUnavailable || off.empty()) {
      fail("recovers", "recovering server " + std::to_string(server) + ": " + rec.status().to_string());
      return false;
    }
    ++result_.coverage["recoveries-waited"];
    world_.event("recovery of server " + std::to_string(server) + " waits: " + rec.status().message());
    rt_.sleep_for_ns((1 + world_.fault_below(20)) * kMs);
    if (!restart(off[world_.fault_below(off.size())])) return false;
    wait_for_coordinator();
  }
  return false;
}

std::vector<uint32_t> Run::down(uint32_t except) const {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < kServers; ++s) {
    if (s != except && !cluster_->backup_up(s)) out.push_back(s);
  }
  return out;
}

// A crashed or powered-off host comes back, its backup only.
bool Run::restart(uint32_t server) {
  auto r = cluster_->restart_backup(server);
  if (!r.ok()) {
    fail("restarts", "restarting server " + std::to_string(server) + "'s backup: " + r.status().to_string());
    return false;
  }
  ++restarts_;
  world_.event("server " + std::to_string(server) +
               "'s backup restarted from its PM: " + std::to_string(r->replicas_kept) + " replicas kept, " +
               std::to_string(r->replicas_freed) + " freed, " + std::to_string(r->logs_fenced) + " logs fenced");
  return true;
}

// Power fails on `victim`'s host right after one of its appends posted its
// WRITEs (if one comes soon; at once while a backup is out). Correlated (one rack, one power feed): the
// hosts of its open segment's replicas fail with it, as far as the cluster
// may lose them (`out`: a server whose backup is declared failed meanwhile,
// which the live logs cannot use). Then the newest appends' only current
// copies are on powered-off hosts, and what a recovery can reach of that
// segment is at most a replica a repair left behind (the replica version
// must make it wait, not rebuild from it); and PM keeps only what was
// flushed. The victims are recovered (here, or by the caller if it
// `deferred` them), their hosts restarted as needed.
void Run::fault_power(uint32_t victim, bool correlated, std::optional<uint32_t> out, std::vector<uint32_t>* deferred) {
  if (!out) {  // (while a backup is out, at once: the appends since its repair are what matters)
    const uint64_t before = cluster_->server(victim).log().counters().appends;
    for (int i = 0; i < 2000 && cluster_->server(victim).log().counters().appends == before; ++i) rt_.idle();
  }
  if (!cluster_->alive(victim)) return;  // lost meanwhile (a partition)
  std::vector<uint32_t> hosts{victim};
  const size_t live_now = live().size();
  if (correlated) {
    logkv::Server& s = cluster_->server(victim);
    const std::vector<uint32_t> to = s.backup_servers();
    for (size_t b : s.log().replicas_of(s.log().open_segment_id())) {
      const bool room = lost_ + hosts.size() < max_lost_ && live_now - hosts.size() > replicas_ + 1 + (out ? 1 : 0);
      if (b < to.size() && to[b] != out && cluster_->alive(to[b]) && room) hosts.push_back(to[b]);
    }
  }
  std::string names;
  for (uint32_t h : hosts) names += (names.empty() ? "" : ", ") + std::to_string(h);
  world_.event("power fails on server" + std::string(hosts.size() > 1 ? "s " : " ") + names +
               (hosts.size() > 1 ? " (the victim and its open segment's replicas)" : ""));
  for (uint32_t h : hosts) {
    auto report = cluster_->power_fail_server(h, world_.fault_below(UINT64_MAX));
    if (!report.ok()) {
      return fail("crashes", "power failure of server " + std::to_string(h) + ": " + report.status().to_string());
    }
    ++lost_;
    ++power_failures_;
    world_.event("server " + std::to_string(h) + " off: " + std::to_string(report->nic_writes_pending) +
                 " NIC writes pending, " + std::to_string(report->nic_writes_kept) + " kept, " +
                 std::to_string(report->nic_write_torn) + " torn");
  }
  if (deferred != nullptr) {
    deferred->insert(deferred->end(), hosts.begin(), hosts.end());
    return;
  }
  rt_.sleep_for_ns(world_.fault_below(20) * kMs);
  for (uint32_t h : hosts) {
    if (!recover(h, "power")) return;
  }
  // Some hosts come back soon (their backups serve later recoveries).
  for (uint32_t h : down(kServers)) {
    if (world_.fault_below(2) == 0 && !restart(h)) return;
  }
}

// A server dies right after one of its appends posted its WRITEs (if one
// comes soon), then its tablets are recovered on the others.
void Run::fault_crash(uint32_t victim) {
  const uint64_t before = cluster_->server(victim).log().counters().appends;
  for (int i = 0; i < 2000 && cluster_->server(victim).log().counters().appends == before; ++i) rt_.idle();
  world_.event("crash server " + std::to_string(victim));
  const Status st = cluster_->crash_server(victim);
  if (!st.ok()) return fail("crashes", "crashing server " + std::to_string(victim) + ": " + st.to_string());
  ++lost_;
  rt_.sleep_for_ns(world_.fault_below(40) * kMs);
  (void)recover(victim, "crash");
}

// The coordinator loses a server that runs on and serves clients with an
// old map; its tablets are recovered elsewhere; later it is stopped.
void Run::fault_partition(uint32_t victim) {
  world_.event("partition server " + std::to_string(victim) + " from the coordinator");
  const Status st = cluster_->partition_server(victim);
  if (!st.ok()) return fail("crashes", "partitioning server " + std::to_string(victim) + ": " + st.to_string());
  ++lost_;
  rt_.sleep_for_ns((10 + world_.fault_below(50)) * kMs);
  if (!recover(victim, "partition")) return;
  rt_.sleep_for_ns((10 + world_.fault_below(60)) * kMs);  // it still serves whoever reaches it
  world_.event("stop the partitioned server " + std::to_string(victim));
  const Status stopped = cluster_->crash_server(victim);
  if (!stopped.ok()) fail("crashes", "stopping server " + std::to_string(victim) + ": " + stopped.to_string());
}

// A server's backup is declared failed (its replicas are replaced on every
// other log) while the server serves on; later it is declared back. With
// `crash_meanwhile`, another server crashes while that backup is out, and is
// recovered only once the backup is back: its recovery then meets the
// replicas it left there, behind the versions its log moved on to.
// With `power_meanwhile`, the power fails on another server and its open
// segment's replicas while that backup is out: a recovery then reaches the
// copy the repair left there, and nothing newer -- at once (the backup still
// out), or half the time only once the backup is back and the coordinator
// reachable, the powered-off hosts still off: then the copy left behind is
// all a recovery finds, and the version the coordinator holds is what says
// whether it may be used.
void Run::fault_backup(uint32_t victim, bool crash_meanwhile, bool power_meanwhile) {
  // The power failure strikes a log whose open segment has a replica on the
  // victim: the repair moves that replica, and the copy left behind is what
  // a recovery finds next.
  std::vector<uint32_t> targets;
  // Only where the cluster may lose a log and all its replicas' hosts at once.
  if (power_meanwhile && lost_ + 1 + replicas_ <= max_lost_ && live().size() > 2 * replicas_ + 2) {
    for (uint32_t s : live()) {
      if (s == victim) continue;
      logkv::Server& server = cluster_->server(s);
      const std::vector<uint32_t> to = server.backup_servers();
      for (size_t b : server.log().replicas_of(server.log().open_segment_id())) {
        if (b < to.size() && to[b] == victim) targets.push_back(s);
      }
    }
  }
  // Sometimes the coordinator is unreachable as the repair runs: the new
  // replica's version cannot be reported, and no append may be acknowledged
  // on it until it is -- in particular not one whose WRITEs were in flight
  // when the repair ran under it, which is when the declaration comes here.
  // Half the time the network is why: the link from the target to the
  // victim drops every packet first, so the append in flight at the repair
  // never reaches the copy left behind (declared while reachable, that copy
  // gets it, and is current). The cut heals when the target's power fails:
  // its NIC, retransmitting, goes with it.
  std::optional<uint32_t> target;
  std::vector<uint32_t> deferred;  // powered-off logs recovered once the backup is back
  bool cut = false;
  if (!targets.empty()) {
    target = targets[world_.fault_below(targets.size())];
    if (world_.strike(FaultKind::kMembershipDown, 40.0)) coordinator_outage(10 + world_.fault_below(20));
    cut = world_.fault_below(2) == 0;
    if (cut) {
      world_.event("the network drops every packet from server " + std::to_string(*target) + " to server " +
                   std::to_string(victim));
      const uint32_t from = cluster_->server(*target).nic_address(), to = cluster_->server(victim).nic_address();
      cluster_->engine().fabric().set_tap(
          [from, to](const nic::Packet& p) { return p.src_nic == from && p.dst_nic == to; });
    }
    const uint64_t before = cluster_->server(*target).log().counters().appends;
    for (int i = 0;
         i < 2000 && cluster_->alive(*target) && cluster_->server(*target).log().counters().appends == before; ++i) {
      rt_.idle();
    }
  }
  world_.event("backup of server " + std::to_string(victim) + " declared failed");
  (void)cluster_->declare_backup_failed(victim);  // a log that finds no other backup waits for it
  if (target) {
    rt_.sleep_for_ns((1 + world_.fault_below(8)) * kMs);  // a few appends on the new replicas
    if (cluster_->alive(*target)) {
      const bool defer = world_.fault_below(2) == 0;
      world_.event("while that backup is out, power fails on server " + std::to_string(*target) +
                   " and its open segment's replicas" + (defer ? " (recovered once the backup is back)" : ""));
      fault_power(*target, /*correlated=*/true, victim, defer ? &deferred : nullptr);
      if (!ok()) return;
    }
    if (cut) {
      cluster_->engine().fabric().set_tap({});
      world_.event("the link from server " + std::to_string(*target) + " to server " + std::to_string(victim) +
                   " heals");
    }
  }
  rt_.sleep_for_ns((10 + world_.fault_below(60)) * kMs);
  std::optional<uint32_t> crashed;
  if (crash_meanwhile) {
    std::vector<uint32_t> others;
    for (uint32_t s : live()) {
      if (s != victim) others.push_back(s);
    }
    const uint32_t primary = others[world_.fault_below(others.size())];
    world_.event("crash server " + std::to_string(primary) + " while that backup is out");
    const Status st = cluster_->crash_server(primary);
    if (!st.ok()) return fail("crashes", "crashing server " + std::to_string(primary) + ": " + st.to_string());
    ++lost_;
    crashed = primary;
  }
  Status back = cluster_->declare_backup_back(victim);
  for (int tries = 0; !back.ok() && tries < 20 && cluster_->alive(victim); ++tries) {
    rt_.sleep_for_ns(10 * kMs);
    back = cluster_->declare_backup_back(victim);
  }
  if (!back.ok() && cluster_->alive(victim)) {
    return fail("backup-back", "server " + std::to_string(victim) + "'s backup: " + back.to_string());
  }
  world_.event("backup of server " + std::to_string(victim) + " back");
  if (!deferred.empty()) {
    for (uint32_t h : deferred) {
      if (!recover(h, "power")) return;
    }
    for (uint32_t h : down(kServers)) {
      if (world_.fault_below(2) == 0 && !restart(h)) return;
    }
  }
  if (crashed) (void)recover(*crashed, "crash");
}

// The fault script: at each finished operation, each kind may strike.
void Run::control() {
  uint64_t seen_ops = 0;
  while (ok() && done_ops_ < ops_) {
    while (done_ops_ == seen_ops && done_ops_ < ops_) rt_.idle();
    for (; seen_ops < done_ops_ && ok(); ++seen_ops) {
      const uint64_t now = world_.now();
      for (uint32_t s = 0; s < kServers; ++s) {
        if (slow_until_[s] != 0 && now >= slow_until_[s]) {
          rt_.set_host_weight("server-" + std::to_string(s), 1.0);
          slow_until_[s] = 0;
          world_.event("server " + std::to_string(s) + " runs at full speed again");
        }
      }
      const std::vector<uint32_t> up = live();
      const uint32_t victim = up[world_.fault_below(up.size())];
      // At most max_lost_ servers are lost for good: every log keeps r + 1 live servers.
      const bool may_lose = lost_ < max_lost_ && up.size() > replicas_ + 1;
      if (may_lose && world_.strike(FaultKind::kProcessCrash)) fault_crash(victim);
      if (!ok()) return;
      if (may_lose && cluster_->alive(victim) && world_.strike(FaultKind::kPartition)) fault_partition(victim);
      if (!ok()) return;
      if (cluster_->alive(victim) && world_.strike(FaultKind::kMemberReplace)) {
        // A crash meanwhile only with every server up: the logs left need r
        // backups among the live servers but the one out.
        const bool crash = lost_ == 0 && world_.fault_below(3) == 0;
        fault_backup(victim, crash, !crash && world_.strike(FaultKind::kPowerFailure, 100.0));
      }
      if (!ok()) return;
      if (may_lose && cluster_->alive(victim) && world_.strike(FaultKind::kPowerFailure)) {
        // Half the time the power failure follows a repair: a backup of the
        // victim's open segment is declared failed first (fault_backup).
        logkv::Server& v = cluster_->server(victim);
        const std::vector<size_t> at = v.log().replicas_of(v.log().open_segment_id());
        if (world_.fault_below(2) == 0 && !at.empty() && at.front() < v.backup_servers().size()) {
          fault_backup(v.backup_servers()[at.front()], false, true);
        } else {
          fault_power(victim, world_.fault_below(2) == 0, std::nullopt);
        }
      }
      if (!ok()) return;
      if (world_.strike(FaultKind::kSlowHost)) {
        const uint32_t slow = up[world_.fault_below(up.size())];
        slow_until_[slow] = world_.now() + (5 + world_.fault_below(50)) * kMs;
        rt_.set_host_weight("server-" + std::to_string(slow), 0.05);
        world_.event("server " + std::to_string(slow) + " slow");
      }
      if (world_.strike(FaultKind::kMembershipDown)) coordinator_outage(5 + world_.fault_below(50));
      if (world_.strike(FaultKind::kClientCrash)) {
        const uint32_t c = static_cast<uint32_t>(world_.fault_below(kClients));
        rt_.cancel(client_fiber_[c]);  // it notices at its next wait, mid-call
        world_.event("client " + std::to_string(c) + " crashes");
      }
    }
  }
  wait_for_coordinator();
  for (uint32_t s = 0; s < kServers; ++s) rt_.set_host_weight("server-" + std::to_string(s), 1.0);
  control_done_ = true;
}

// The coordinator is unreachable for `ms` (longer if an outage is on). The
// control fiber goes on meanwhile, so the faults that follow overlap it: a
// backup declared failed, whose repairs cannot report their versions, a
// crash, a partition. Only recoveries wait for it (a recovery is the
// coordinator's own work).
void Run::coordinator_outage(uint64_t ms) {
  const uint64_t until = world_.now() + ms * kMs;
  world_.event("the coordinator is unreachable for " + std::to_string(ms) + " ms" +
               (coordinator_back_at_ != 0 ? " (an outage is on)" : ""));
  coordinator_back_at_ = std::max(coordinator_back_at_, until);
  cluster_->set_coordinator_down(true);
  threads_.push_back(rt_.spawn("outage-" + std::to_string(outages_++), "control", [this, until] {
    if (world_.now() < until) rt_.sleep_for_ns(until - world_.now());
    if (coordinator_back_at_ != until) return;  // a later outage ends later
    cluster_->set_coordinator_down(false);
    coordinator_back_at_ = 0;
    world_.event("the coordinator is back");
  }));
}

void Run::wait_for_coordinator() {
  while (coordinator_back_at_ != 0 && ok()) {
    const uint64_t now = world_.now();
    if (now < coordinator_back_at_) {
      rt_.sleep_for_ns(coordinator_back_at_ - now);
    } else {
      rt_.idle();  // the outage's fiber is due: let it run
    }
  }
}
RunResult Run::run(uint64_t ops) {
  ops_ = ops;
  for (const char* name :
       {"torn-after-crash", "torn-after-power", "torn-after-partition", "lagging-after-crash", "lagging-after-power",
        "lagging-after-partition", "stale-replicas-ignored", "recoveries-waited"}) {
    result_.coverage[name] = 0;
  }
  bool healthy = build();
  if (healthy) {
    for (uint32_t c = 0; c < kClients; ++c) spawn_client(c, 0);
    threads_.push_back(rt_.spawn("control", "control", [this] { control(); }));
    healthy = drive([this] { return (control_done_ || !ok()) && clients_running_ == 0; }, "in the workload");
  }
  if (healthy && ok()) healthy = finale();
  if (ok()) check_history();
  if (ok()) check_versions();
  if (healthy && ok()) check_replicas();
  result_.ops = next_op_;
  for (const KvOp& op : history_) result_.pending += !op.complete_ns.has_value();
  if (cluster_ != nullptr) {
    const auto& c = cluster_->engine().fabric().counters();
    world_.count(FaultKind::kPacketLoss, c.dropped_fault.get());
    world_.count(FaultKind::kPacketDuplicate, c.duplicated_fault.get());
    world_.count(FaultKind::kPacketDelay, c.delayed_fault.get());
  }
  if (cluster_ != nullptr) {
    uint64_t settled = 0;
    for (uint32_t i = 0; i < cluster_->servers(); ++i) settled += cluster_->server(i).counters().keys_settled;
    world_.event("keys in doubt settled: " + std::to_string(settled) + "; " + std::to_string(power_failures_) +
                 " hosts powered off, " + std::to_string(restarts_) + " backups restarted");
  }
  world_.event("schedule digest " + std::to_string(rt_.trace_digest()));
  result_.ok = ok();
  world_.event(result_.ok ? "verdict: ok" : "verdict: " + result_.invariant);
  world_.finish(&result_);
  if (healthy) {
    // Everything ended: the fibers are joined and the cluster comes down.
    for (Thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    client_.reset();
    cluster_.reset();
  } else {
    // A stuck run cannot be torn down (its fibers wait forever): its
    // memory is left behind, and the run directory removed.
    (void)client_.release();
    (void)cluster_.release();
    (void)new std::vector<Thread>(std::move(threads_));
  }
  return result_;
}

}  // namespace tailwind_sim

System tailwind_system() {
  System s;
  s.name = "tailwind";
  s.description =
      "LogKv on Tailwind (or the RPC baseline, by seed): five servers, r=2 or 1, PM backups, the cleaner on, four "
      "clients on ten hot keys, all as fibers of one SimRuntime; crashes mid-WRITE with recovery, power failures "
      "(some taking a segment's every current replica) with backups restarted from PM, partitioned old primaries, "
      "backups declared failed and back (some cut off by the network first), the coordinator unreachable, slow hosts, "
      "client crashes and packet faults";
  s.faults = {FaultKind::kPacketLoss,    FaultKind::kPacketDuplicate, FaultKind::kPacketDelay, FaultKind::kPartition,
              FaultKind::kProcessCrash,  FaultKind::kPowerFailure,    FaultKind::kSlowHost,    FaultKind::kClientCrash,
              FaultKind::kMemberReplace, FaultKind::kMembershipDown};
  s.default_ops = 300;
  // What the faults are there for, met in any 2,000 seeds (docs/simulation.md,
  // "Coverage"): a crash that tears an append across replicas, a replica
  // a repair left behind that a recovery must not use, a recovery that
  // waits for a powered-off host.
  s.must_cover = {"lagging-after-crash", "stale-replicas-ignored", "recoveries-waited"};
  s.cover_within = 2000;
  s.run = [default_ops = s.default_ops](const RunOptions& options) {
    tailwind_sim::Run run(options);
    return run.run(options.ops == 0 ? default_ops : options.ops);
  };
  return s;
}

}  // namespace ferry::sim