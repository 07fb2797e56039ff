// A LogKv cluster in one process: building the servers, the coordinator's
// tablet map and replica versions, a server's crash and the recovery of its
// tablets on the others.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "ferry/common/cpu.h"
#include "ferry/common/temp_dir.h"
#include "ferry/tailwind/format.h"
#include "logkv_internal.h"

namespace ferry::store::logkv {

uint32_t Cluster::Impl::tablets_per_table() const {
  return options.tablets_per_table != 0 ? options.tablets_per_table : options.servers;
}

namespace {

// Where the servers' helper threads run (backup flushers, the cleaner,
// recovery masters): the first of the workers' CPUs, or unpinned.
int home_cpu(const ServerOptions& so) { return so.worker_cpus.empty() ? -1 : so.worker_cpus.front(); }

Result<std::string> make_dir(const std::string& requested, bool* own) {
  if (!requested.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(requested, ec);
    if (ec) return unavailable("logkv: cannot create " + requested + ": " + ec.message());
    *own = false;
    return requested;
  }
  auto dir = make_temp_dir("ferry-logkv");
  if (!dir.ok()) return Status(dir.status().code(), "logkv: " + dir.status().message());
  *own = true;
  return dir;
}

Status check_options(const ClusterOptions& o) {
  if (o.servers < 2) return invalid_argument("logkv: at least 2 servers");
  if (o.server.replicas == 0 || o.server.replicas >= o.servers) {
    return invalid_argument("logkv: replicas must be in [1, servers - 1] (" + std::to_string(o.servers) +
                            " servers): a server's backups are the other servers");
  }
  if (o.server.workers == 0) return invalid_argument("logkv: at least one worker");
  if (o.server.segment_bytes < 4096 || o.server.segment_bytes > (1u << 30)) {
    return invalid_argument("logkv: segment_bytes in [4 KiB, 1 GiB]");
  }
  if (!(o.server.clean_below > 0.0 && o.server.clean_below <= 1.0)) {
    return invalid_argument("logkv: clean_below in (0, 1]");
  }
  if (o.server.max_request_bytes < 256) return invalid_argument("logkv: max_request_bytes at least 256");
  return ok_status();
}

}  // namespace

Cluster::Cluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

void Cluster::stop_cleaner() {
  Impl& c = *impl_;
  {
    std::lock_guard lk(c.cleaner_mu);
    c.stop_cleaner = true;
  }
  c.cleaner_cv.notify_all();
  if (c.cleaner.joinable()) c.cleaner.join();
}

Cluster::~Cluster() {
  Impl& c = *impl_;
  stop_cleaner();
  for (auto& s : c.servers) {
    if (s->impl().rpc) s->impl().rpc->stop();
  }
  // Logs first (they hold links into the other servers), then links, then
  // the servers' RPC and backups.
  for (auto& s : c.servers) s->impl().log.reset();
  for (auto& s : c.servers) s->impl().links.clear();
  for (auto& s : c.servers) s->impl().rpc.reset();
  for (auto& s : c.servers) s->impl().retired_rpcs.clear();
  for (auto& s : c.servers) s->impl().backup.reset();
  c.engine.reset();
  c.servers.clear();
  if (c.own_dir) {
    std::error_code ec;
    std::filesystem::remove_all(c.dir, ec);
  }
}

Result<std::unique_ptr<Cluster>> Cluster::create(const ClusterOptions& options) {
  FERRY_RETURN_IF_ERROR(check_options(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->runtime = options.server.runtime != nullptr ? options.server.runtime : &Runtime::threads();
  FERRY_ASSIGN_OR_RETURN(impl->dir, make_dir(options.dir, &impl->own_dir));
  std::unique_ptr<Cluster> cluster(new Cluster(std::move(impl)));
  Impl& c = *cluster->impl_;
  c.engine = std::make_unique<nic::Engine>(options.engine);
  FERRY_ASSIGN_OR_RETURN(c.coordinator_nic, c.engine->add_nic({.name = "coordinator"}));
  const ServerOptions& so = options.server;

  for (uint32_t i = 0; i < options.servers; ++i) {
    auto domain = std::make_unique<pm::PersistenceDomain>();
    nic::NicOptions no;
    no.name = "server-" + std::to_string(i);
    no.memory = domain.get();
    FERRY_ASSIGN_OR_RETURN(nic::Nic * nic, c.engine->add_nic(no));
    FERRY_ASSIGN_OR_RETURN(auto si, detail::build_server(*nic, std::move(domain), i, so, c.dir));
    c.servers.push_back(std::unique_ptr<Server>(new Server(std::move(si))));
  }

  for (uint32_t i = 0; i < options.servers; ++i) {
    Server::Impl& si = c.servers[i]->impl();
    std::vector<tailwind::BackupLink*> candidates;
    for (uint32_t j = 0; j < options.servers; ++j) {
      if (j == i) continue;
      Server::Impl& sj = c.servers[j]->impl();
      FERRY_ASSIGN_OR_RETURN(auto link,
                             tailwind::BackupLink::connect(*c.engine, *si.nic, *sj.backup, *sj.rpc, si.log_id,
                                                           so.replication == tailwind::Replication::kTailwind,
                                                           sj.backup_worker()));
      candidates.push_back(link.get());
      si.links.push_back(std::move(link));
      si.link_server.push_back(j);
    }
    Coordinator* coord = &c.coordinator;
    const uint64_t log_id = si.log_id;
    Server::Impl* self = &si;
    const std::atomic<bool>* down = &c.coordinator_down;
    si.on_freed = [coord, log_id, self, down](uint64_t segment_id) {
      if (self->partitioned || *down) return unavailable(self->name + " cannot reach the coordinator");
      std::lock_guard lk(coord->mu);
      coord->min_versions[log_id][segment_id] = tailwind::kFreedSegment;
      return ok_status();
    };
    FERRY_RETURN_IF_ERROR(si.create_log(candidates, [coord, log_id, self, down](uint64_t segment_id, uint64_t version) {
      if (self->partitioned || *down) return unavailable(self->name + " cannot reach the coordinator");
      std::lock_guard lk(coord->mu);
      uint64_t& v = coord->min_versions[log_id][segment_id];
      v = std::max(v, version);
      return ok_status();
    }));
  }
  if (options.clean_interval_ms > 0) {
    Cluster* self = cluster.get();
    const int cpu = home_cpu(options.server);
    self->impl_->cleaner = c.runtime->spawn(
        "cleaner", "coordinator", [self] { self->run_cleaner(); }, cpu);
  }
  return cluster;
}

void Cluster::run_cleaner() {
  Impl& c = *impl_;
  const Clock& clock = c.runtime->clock();
  const uint64_t interval_ns = uint64_t{c.options.clean_interval_ms} * 1'000'000;
  std::unique_lock lk(c.cleaner_mu);
  while (true) {
    const uint64_t due = clock.now_ns() + interval_ns;
    while (!c.stop_cleaner && clock.now_ns() < due) (void)c.cleaner_cv.wait_until(lk, due, clock);
    if (c.stop_cleaner) return;
    lk.unlock();
    for (uint32_t i = 0; i < c.servers.size(); ++i) {
      if (!c.servers[i]->impl().alive) continue;
      auto r = clean(i);
      // A server that crashed since the check is not the cleaner's failure.
      if (!r.ok() && r.status().code() != Code::kFailedPrecondition) c.cleaner_failures.fetch_add(1);
    }
    c.cleaner_passes.fetch_add(1);
    lk.lock();
  }
}

uint64_t Cluster::cleaner_passes() const { return impl_->cleaner_passes.load(); }
uint64_t Cluster::cleaner_failures() const { return impl_->cleaner_failures.load(); }

Result<uint64_t> Cluster::create_table(std::string_view name) {
  Impl& c = *impl_;
  std::lock_guard ctl(c.control_mu);
  std::vector<uint32_t> live;
  for (uint32_t i = 0; i < c.servers.size(); ++i) {
    if (c.servers[i]->impl().alive) live.push_back(i);
  }
  if (live.empty()) return unavailable("logkv: no live server");
  TableMap map;
  {
    std::lock_guard lk(c.coordinator.mu);
    for (const auto& t : c.coordinator.tables) {
      if (t.name == name) return already_exists("logkv: table " + std::string(name) + " exists");
    }
    map.table_id = c.coordinator.tables.size() + 1;
    map.name = std::string(name);
    const uint32_t tablets = c.tablets_per_table();
    for (uint32_t t = 0; t < tablets; ++t) map.owners.push_back(live[(map.table_id + t) % live.size()]);
  }
  // Servers learn their tablets before clients can learn the map.
  for (auto& s : c.servers) {
    Server::Impl& si = s->impl();
    std::unique_lock lk(si.own_mu);
    si.tablets_of[map.table_id] = static_cast<uint32_t>(map.owners.size());
    for (uint32_t t = 0; t < map.owners.size(); ++t) {
      if (map.owners[t] == si.index) si.owned.insert({map.table_id, t});
    }
  }
  std::lock_guard lk(c.coordinator.mu);
  c.coordinator.tables.push_back(map);
  return map.table_id;
}

void Cluster::set_coordinator_down(bool down) { impl_->coordinator_down = down; }

Result<TableMap> Cluster::table(uint64_t table_id) const {
  if (impl_->coordinator_down) return unavailable("logkv: the coordinator cannot be reached");
  std::lock_guard lk(impl_->coordinator.mu);
  if (table_id == 0 || table_id > impl_->coordinator.tables.size()) {
    return not_found("logkv: no table " + std::to_string(table_id));
  }
  return impl_->coordinator.tables[table_id - 1];
}

Result<TableMap> Cluster::table(std::string_view name) const {
  if (impl_->coordinator_down) return unavailable("logkv: the coordinator cannot be reached");
  std::lock_guard lk(impl_->coordinator.mu);
  for (const auto& t : impl_->coordinator.tables) {
    if (t.name == name) return t;
  }
  return not_found("logkv: no table " + std::string(name));
}

Status Cluster::crash_server(uint32_t i) {
  Impl& c = *impl_;
  std::lock_guard ctl(c.control_mu);
  if (i >= c.servers.size()) return invalid_argument("logkv: no server " + std::to_string(i));
  Server::Impl& dead = c.servers[i]->impl();
  if (!dead.running) return failed_precondition(dead.name + " has already crashed");
  const bool member = dead.alive;  // false: partitioned earlier, the others replaced it already
  // The host stops now, mid-protocol. Its CPUs first: from this instant no
  // worker starts a request or sends anything, so a worker whose append
  // meets the fence below cannot tell its client (a crashed host sends
  // nothing). Then every backup cuts its log at once (a fence: the host
  // never comes back), so an append in flight is placed on some backups
  // and not on others, and a WRITE of several packets may stop half placed
  // -- Figure 6's torn cases, which recovery's scan must handle. The
  // appends in flight then fail, their replies dropped. (Joining the
  // workers before the fence would let every append in flight complete
  // everywhere, and no recovery would ever meet a torn replica.)
  dead.rpc->halt();
  for (auto& s : c.servers) {
    // (A host that is off has no backup now; it fences the log at its restart.)
    if (s.get() != c.servers[i].get() && s->impl().backup != nullptr) s->impl().backup->fence(dead.log_id);
  }
  // No request is served from now on, as a backup either.
  dead.alive = false;
  dead.running = false;
  dead.backup_up = false;
  dead.rpc->stop();
  {
    std::unique_lock lk(dead.own_mu);
    dead.owned.clear();
  }
  // Its memory is gone: the primary's log and the index. (The log's QPs go
  // with it; its replicas on the backups stay for recovery.)
  dead.log.reset();
  for (auto& p : dead.partitions) {
    std::lock_guard lk(p->mu);
    p->map.clear();
  }
  if (!member) return ok_status();
  return c.tell_logs(i, /*failed=*/true);
}

Status Cluster::Impl::tell_logs(uint32_t backup, bool failed) {
  Status first = ok_status();
  for (auto& s : servers) {
    Server::Impl& si = s->impl();
    if (!si.alive || si.index == backup) continue;
    for (size_t k = 0; k < si.link_server.size(); ++k) {
      if (si.link_server[k] != backup) continue;
      // Every live log is told, even after one fails; the first error is returned.
      Status st = failed ? si.log->backup_failed(k) : si.log->backup_returned(k);
      if (!st.ok() && first.ok()) {
        first = Status(st.code(), si.name + ": " + (failed ? "replacing the replicas on " : "taking back ") +
                                      servers[backup]->impl().name + ": " + st.message());
      }
    }
  }
  return first;
}

Status Cluster::partition_server(uint32_t i) {
  Impl& c = *impl_;
  std::lock_guard ctl(c.control_mu);
  if (i >= c.servers.size()) return invalid_argument("logkv: no server " + std::to_string(i));
  Server::Impl& s = c.servers[i]->impl();
  if (!s.alive) return failed_precondition(s.name + " is not a live member");
  // The coordinator's view only: the server runs on, serving whoever
  // reaches it, and its log replicates to its backups until they fence it.
  s.partitioned = true;
  s.alive = false;
  return c.tell_logs(i, /*failed=*/true);
}

Status Cluster::declare_backup_failed(uint32_t i) {
  Impl& c = *impl_;
  std::lock_guard ctl(c.control_mu);
  if (i >= c.servers.size()) return invalid_argument("logkv: no server " + std::to_string(i));
  if (!c.servers[i]->impl().alive) return failed_precondition(c.servers[i]->impl().name + " is not a live member");
  return c.tell_logs(i, /*failed=*/true);
}

Status Cluster::declare_backup_back(uint32_t i) {
  Impl& c = *impl_;
  std::lock_guard ctl(c.control_mu);
  if (i >= c.servers.size()) return invalid_argument("logkv: no server " + std::to_string(i));
  if (!c.servers[i]->impl().alive) return failed_precondition(c.servers[i]->impl().name + " is not a live member");
  return c.tell_logs(i, /*failed=*/false);
}

Result<RecoveryResult> Cluster::recover_server(uint32_t i,
                                               const std::function<void(const RecoveryProgress&)>& progress) {
  Impl& c = *impl_;
  std::lock_guard ctl(c.control_mu);
  if (i >= c.servers.size()) return invalid_argument("logkv: no server " + std::to_string(i));
  Server::Impl& dead = c.servers[i]->impl();
  if (dead.alive) return failed_precondition(dead.name + " is alive: crash it first");
  const uint64_t t0 = c.runtime->clock().now_ns();
  RecoveryResult result;
  result.progress.crashed_server = i;

  // The recovery masters are the live servers; the backups read are theirs
  // and the restarted ones. Any other may hold replicas it cannot read now.
  std::vector<uint32_t> live, readable;
  size_t down = 0;
  for (uint32_t j = 0; j < c.servers.size(); ++j) {
    const Server::Impl& sj = c.servers[j]->impl();
    if (sj.alive) live.push_back(j);
    if (sj.alive || sj.restarted) {
      readable.push_back(j);
    } else if (j != i) {
      ++down;
    }
  }
  if (live.empty()) return unavailable("logkv: no live server to recover " + dead.name + " on");

  // The tablets it served, and who takes each (round-robin over the live).
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> moves;
  std::map<uint64_t, uint32_t> tablet_counts;
  std::map<uint64_t, uint64_t> min_versions;
  {
    std::lock_guard lk(c.coordinator.mu);
    size_t next = 0;
    for (const auto& t : c.coordinator.tables) {
      tablet_counts[t.table_id] = static_cast<uint32_t>(t.owners.size());
      for (uint32_t k = 0; k < t.owners.size(); ++k) {
        if (t.owners[k] == i) moves[{t.table_id, k}] = live[next++ % live.size()];
      }
    }
    min_versions = c.coordinator.min_versions[dead.log_id];
  }

  // Read the log back from the surviving backups (they fence it first).
  std::vector<std::unique_ptr<tailwind::BackupLink>> links;
  std::vector<tailwind::BackupLink*> raw;
  for (uint32_t j : readable) {
    Server::Impl& sj = c.servers[j]->impl();
    FERRY_ASSIGN_OR_RETURN(auto link, tailwind::BackupLink::connect(*c.engine, *c.coordinator_nic, *sj.backup,
                                                                    *sj.rpc, dead.log_id, false, sj.backup_worker()));
    raw.push_back(link.get());
    links.push_back(std::move(link));
  }
  FERRY_ASSIGN_OR_RETURN(auto segments, tailwind::recover_log(dead.log_id, raw, min_versions, &result.log, down));
  result.progress.segments_total = segments.size();
  const uint64_t t_read = c.runtime->clock().now_ns();
  result.read_ns = t_read - t0;

  // Partitioned replay, as RAMCloud's recovery masters replay: each master
  // replays every segment for its own tablets only, on its own thread, all
  // in parallel. The shares are disjoint (a key is in one tablet).
  std::map<uint32_t, std::map<std::pair<uint64_t, uint32_t>, uint32_t>> moves_of;
  for (const auto& [tablet, owner] : moves) moves_of[owner].emplace(tablet, owner);
  struct Share {
    uint32_t owner = 0;
    std::unordered_map<std::string, detail::Replayed> objects;
    RecoveryProgress progress;
    Status status;
    uint64_t max_version = 0;  // of the whole log (each share reads every segment)
  };
  std::vector<Share> shares;
  for (const auto& [owner, mine] : moves_of) shares.push_back(Share{owner, {}, {}, ok_status()});
  const int cpu = home_cpu(c.options.server);
  {
    std::vector<Thread> replayers;
    for (Share& sh : shares) {
      Server::Impl& host = c.servers[sh.owner]->impl();
      replayers.push_back(c.runtime->spawn(
          host.name + "/recovery-replay", host.nic->name(),
          [&, sh = &sh] {
            auto objects = detail::replay(segments, tablet_counts, moves_of.at(sh->owner), &sh->progress, nullptr,
                                          &sh->max_version);
            if (objects.ok()) {
              sh->objects = std::move(*objects);
            } else {
              sh->status = objects.status();
            }
          },
          cpu));
    }
    for (auto& t : replayers) t.join();
  }
  for (const Share& sh : shares) FERRY_RETURN_IF_ERROR(sh.status);
  result.progress.segments_done = segments.size();
  for (const auto& seg : segments) result.progress.bytes += seg.bytes.size();
  if (!shares.empty()) result.progress.objects_replayed = shares.front().progress.objects_replayed;  // each saw all
  if (progress) progress(result.progress);
  const uint64_t t_replay = c.runtime->clock().now_ns();
  result.replay_ns = t_replay - t_read;

  // The recovery masters append the survivors to their own logs (replicated
  // before they serve them), then take the tablets.
  // Above every version the dead server's log names, of any tablet, its
  // version floors included (detail::kVersionFloorTable).
  uint64_t max_version = 0;
  for (const Share& sh : shares) max_version = std::max(max_version, sh.max_version);
  for (uint32_t j : live) c.servers[j]->impl().bump_version(max_version);
  // Each recovery master restores its share on its own thread, as
  // RAMCloud's masters do in parallel: while one waits for its replicas,
  // the others append.
  std::atomic<uint64_t> restored{0};
  std::vector<Thread> masters;
  for (Share& sh : shares) {
    Server::Impl& host = c.servers[sh.owner]->impl();
    masters.push_back(c.runtime->spawn(
        host.name + "/recovery-master", host.nic->name(),
        [&, sh = &sh] {
          Server::Impl& m = c.servers[sh->owner]->impl();
          uint64_t appended = 0;
          for (const auto& [ikey, r] : sh->objects) {
            if (!r.live()) continue;
            const uint64_t hash = key_hash(r.table_id, r.key);
            detail::Partition& p = m.partition(hash);
            std::lock_guard lk(p.mu);
            auto e = m.append_and_index(p, ikey, r.table_id, r.object_version, r.key, r.value,
                                        /*tombstone_replaced=*/false, /*unsynced=*/true);
            if (!e.ok()) {
              sh->status = Status(e.status().code(), m.name + ": restoring an object: " + e.status().message());
              return;
            }
            ++appended;
          }
          // In bulk, as RAMCloud's masters replicate their recovery
          // segments: one wait for every object restored, before the
          // tablets move (nothing restored is served until then).
          const Status synced = m.log->sync();
          if (!synced.ok()) {
            sh->status = Status(synced.code(), m.name + ": replicating the restored objects: " + synced.message());
            return;
          }
          // The deleted keys' versions come along as a floor: this master
          // may crash before it assigns anything above them.
          if (const Status floor = m.persist_version_floor(max_version); !floor.ok()) {
            sh->status = Status(floor.code(), m.name + ": recording the version floor: " + floor.message());
            return;
          }
          m.counters.objects_recovered += appended;
          restored.fetch_add(appended, std::memory_order_relaxed);
        },
        cpu));
  }
  for (auto& t : masters) t.join();
  result.progress.objects_restored = restored.load();
  for (const Share& sh : shares) FERRY_RETURN_IF_ERROR(sh.status);
  if (progress) progress(result.progress);
  result.restore_ns = c.runtime->clock().now_ns() - t_replay;

  {
    std::lock_guard lk(c.coordinator.mu);
    for (const auto& [tablet, owner] : moves) {
      c.coordinator.tables[tablet.first - 1].owners[tablet.second] = owner;
      result.tablets_moved.push_back(tablet);
      result.new_owners.push_back(owner);
    }
  }
  for (const auto& [tablet, owner] : moves) {
    Server::Impl& m = c.servers[owner]->impl();
    std::unique_lock lk(m.own_mu);
    m.owned.insert(tablet);
  }
  // The crashed log's replicas are no longer needed -- every one found, the
  // ignored ones too (a segment opened but never reported, a stale copy),
  // or they hold their backups' buffers for good: freed on record first,
  // so a copy a free does not reach is never replayed.
  {
    std::lock_guard lk(c.coordinator.mu);
    for (uint64_t id : result.log.segments_found) c.coordinator.min_versions[dead.log_id][id] = tailwind::kFreedSegment;
  }
  for (uint64_t id : result.log.segments_found) {
    for (auto* l : raw) (void)l->free(id);
  }
  dead.recovered = true;  // a backup restarted later frees what it holds of this log
  result.elapsed_ns = c.runtime->clock().now_ns() - t0;
  return result;
}

Result<pm::PowerFailReport> Cluster::power_fail_server(uint32_t i, uint64_t seed) {
  Impl& c = *impl_;
  if (i >= c.servers.size()) return invalid_argument("logkv: no server " + std::to_string(i));
  if (c.servers[i]->impl().running) FERRY_RETURN_IF_ERROR(crash_server(i));
  std::lock_guard ctl(c.control_mu);
  Server::Impl& s = c.servers[i]->impl();
  if (s.powered_off) return failed_precondition(s.name + "'s host is already off");
  if (s.restarted) {  // a restarted backup stops first
    s.rpc->halt();
    s.rpc->stop();
  }
  s.backup_up = false;
  s.restarted = false;
  s.powered_off = true;
  pm::PowerFailReport report;
  c.engine->run_control([&] { report = s.domain->power_fail(seed); });
  // Its NIC's state goes with the power: the backup's registrations and
  // queue pairs (a WRITE still on the wire finds no buffer), its RPC
  // server's queues.
  s.backup.reset();
  s.retired_rpcs.push_back(std::move(s.rpc));
  return report;
}

Result<RestartReport> Cluster::restart_backup(uint32_t i) {
  Impl& c = *impl_;
  std::lock_guard ctl(c.control_mu);
  if (i >= c.servers.size()) return invalid_argument("logkv: no server " + std::to_string(i));
  Server::Impl& s = c.servers[i]->impl();
  if (s.running) return failed_precondition(s.name + " is running: crash it first");
  if (s.backup_up) return failed_precondition(s.name + "'s backup is up already");
  if (!s.powered_off) {
    // The process died, the machine did not: DRAM lost, PM kept.
    c.engine->run_control([&] { s.domain->process_crash(); });
    s.backup.reset();
    s.retired_rpcs.push_back(std::move(s.rpc));
  }
  FERRY_ASSIGN_OR_RETURN(s.backup, tailwind::Backup::create(*s.nic, s.domain.get(), detail::backup_options(s, true)));
  FERRY_ASSIGN_OR_RETURN(s.rpc, rpc::Server::create(*s.nic, detail::rpc_options(s.options)));
  FERRY_RETURN_IF_ERROR(s.backup->register_rpcs(*s.rpc));
  RestartReport report;
  std::map<uint64_t, std::set<uint64_t>> freed;  // log -> segments the coordinator recorded freed
  {
    std::lock_guard lk(c.coordinator.mu);
    for (const auto& [log_id, versions] : c.coordinator.min_versions) {
      for (const auto& [segment_id, version] : versions) {
        if (version == tailwind::kFreedSegment) freed[log_id].insert(segment_id);
      }
    }
  }
  for (uint32_t k = 0; k < c.servers.size(); ++k) {
    if (k == i) continue;
    Server::Impl& owner = c.servers[k]->impl();
    // Fences live in DRAM: the coordinator says again which logs are dead.
    if (!owner.alive) {
      s.backup->fence(owner.log_id);
      ++report.logs_fenced;
    }
    const size_t b = static_cast<size_t>(std::find(owner.link_server.begin(), owner.link_server.end(), i) -
                                         owner.link_server.begin());
    for (const tailwind::ReplicaInfo& r : s.backup->find(owner.log_id)) {
      // Nobody needs it: a live log that no longer counts it (it replaced
      // it when this host failed), a recovered log, a freed segment. A
      // dead log's replica waits for its recovery.
      bool needed = !owner.recovered && freed[owner.log_id].count(r.segment_id) == 0;
      if (needed && owner.alive) {
        const std::vector<size_t> at = owner.log->replicas_of(r.segment_id);
        needed = std::find(at.begin(), at.end(), b) != at.end();
      }
      if (needed) {
        ++report.replicas_kept;
      } else if (s.backup->free(owner.log_id, r.segment_id).ok()) {
        ++report.replicas_freed;
      }
    }
  }
  FERRY_RETURN_IF_ERROR(s.rpc->start());
  s.restarted = true;
  s.powered_off = false;
  s.backup_up = true;
  return report;
}

bool Cluster::backup_up(uint32_t i) const { return i < impl_->servers.size() && impl_->servers[i]->impl().backup_up; }

Result<CleanResult> Cluster::clean(uint32_t server) {
  Impl& c = *impl_;
  std::lock_guard ctl(c.control_mu);
  if (server >= c.servers.size()) return invalid_argument("logkv: no server " + std::to_string(server));
  Server::Impl& s = c.servers[server]->impl();
  if (!s.alive) return failed_precondition(s.name + " has crashed");
  return s.clean();
}

Result<CleanResult> Cluster::clean() {
  CleanResult total;
  for (uint32_t i = 0; i < impl_->servers.size(); ++i) {
    if (!impl_->servers[i]->impl().alive) continue;
    FERRY_ASSIGN_OR_RETURN(auto r, clean(i));
    total.segments_cleaned += r.segments_cleaned;
    total.objects_relocated += r.objects_relocated;
    total.tombstones_relocated += r.tombstones_relocated;
    total.tombstones_dropped += r.tombstones_dropped;
    total.bytes_freed += r.bytes_freed;
  }
  return total;
}

uint32_t Cluster::servers() const { return static_cast<uint32_t>(impl_->servers.size()); }
bool Cluster::alive(uint32_t i) const { return i < impl_->servers.size() && impl_->servers[i]->impl().alive; }
Server& Cluster::server(uint32_t i) { return *impl_->servers.at(i); }
nic::Engine& Cluster::engine() { return *impl_->engine; }
const ClusterOptions& Cluster::options() const { return impl_->options; }
const std::string& Cluster::dir() const { return impl_->dir; }

}  // namespace ferry::store::logkv
