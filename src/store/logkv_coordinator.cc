// A deployment's coordinator: enlistment, tables and their tablet map, the
// logs' replica versions, the heartbeat, and a crashed server's recovery
// driven by RPC (the deployed counterpart of Cluster::recover_server). What
// it decides -- who is live, when a server is declared crashed, when a
// recovery is (re)tried, when the tables are due -- is CoordinatorMember
// (logkv_member.h); here are the RPCs, the threads and the work.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "ferry/common/clock.h"
#include "ferry/store/logkv_deploy.h"
#include "ferry/store/logkv_member.h"
#include "logkv_internal.h"

namespace ferry::store::logkv {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

struct CoordinatorService::Impl {
  Deployment d;
  EventLog log;
  nic::Nic* nic = nullptr;
  std::unique_ptr<rpc::Server> rpc;

  mutable std::mutex mu;  // everything below
  mutable std::condition_variable cv;
  std::vector<TableMap> tables;  // table_id = position + 1
  std::map<uint64_t, std::map<uint64_t, uint64_t>> min_versions;  // per log, per segment
  std::unique_ptr<CoordinatorMember> member;                      // who is live, crashed, recovered; the tables' state
  bool stopping = false;

  // Control clients to the servers: used by the table worker (assignments)
  // and the heartbeat thread (pings, recovery), one call at a time each.
  struct Link {
    std::mutex mu;
    std::unique_ptr<rpc::Client> control;  // timeout: long (restores)
    std::unique_ptr<rpc::Client> pinger;   // timeout: one heartbeat
  };
  std::vector<std::unique_ptr<Link>> links;
  std::thread heartbeat;

  void event(const std::string& line) const {
    if (log) log(line);
  }

  std::vector<uint32_t> live_locked() const { return member->live(); }

  Status assign(uint32_t server, const detail::Assignment& a) {
    Link& l = *links[server];
    std::lock_guard lk(l.mu);
    if (!l.control) return unavailable("server " + std::to_string(server) + " is not connected");
    return detail::control_call(*l.control, 0, detail::kLogKvAssign, 0, detail::encode_assignment(a)).status();
  }

  // Creates a table over the live servers; servers learn their tablets
  // before any client can learn the map. Called without `mu`.
  Result<TableMap> create_table(std::string_view name) {
    TableMap map;
    std::vector<uint32_t> live;
    {
      std::lock_guard lk(mu);
      for (const auto& t : tables) {
        if (t.name == name) return already_exists("logkv: table " + std::string(name) + " exists");
      }
      live = live_locked();
      if (live.empty()) return unavailable("logkv: no live server");
      map.table_id = tables.size() + 1;
      map.name = std::string(name);
      const uint32_t n = d.tablets_per_table != 0 ? d.tablets_per_table : static_cast<uint32_t>(d.servers.size());
      for (uint32_t t = 0; t < n; ++t) map.owners.push_back(live[(map.table_id + t) % live.size()]);
    }
    for (uint32_t server : live) {
      detail::Assignment a{map.table_id, static_cast<uint32_t>(map.owners.size()), {}};
      for (uint32_t t = 0; t < map.owners.size(); ++t) {
        if (map.owners[t] == server) a.owned.push_back(t);
      }
      Status st = assign(server, a);
      if (!st.ok()) return Status(st.code(), "logkv: assigning table " + map.name + " to server " + std::to_string(server) + ": " + st.message());
    }
    std::lock_guard lk(mu);
    if (map.table_id != tables.size() + 1) return internal_error("logkv: tables changed during a create (creates run on one worker)");
    tables.push_back(map);
    event("event=table_created table=" + map.name + " id=" + std::to_string(map.table_id) +
          " tablets=" + std::to_string(map.owners.size()));
    return map;
  }

  Status register_handlers();
  void run_heartbeat();
  Status recover(uint32_t dead);
};

Status CoordinatorService::Impl::register_handlers() {
  Impl* c = this;
  FERRY_RETURN_IF_ERROR(rpc->register_handler(detail::kCoordEnlist, {"coord-enlist", false},
                                              [c](const rpc::Request& r, rpc::Reply& out) {
    detail::WireReader in(r.payload);
    const auto index = in.get<uint32_t>();
    if (!in.done() || index >= c->d.servers.size()) {
      return detail::reply_status(out, invalid_argument("logkv: enlist of an unknown server"));
    }
    {
      std::lock_guard lk(c->mu);
      if (Status admitted = c->member->admit(index); !admitted.ok()) return detail::reply_status(out, admitted);
    }
    // Connect back to it (control and heartbeat) before it counts as live.
    rpc::ClientOptions co;
    co.timeout_ns = 30'000'000'000ULL;
    const rpc::ServerInfo info = detail::rpc_info(c->d.server);
    auto control = rpc::Client::connect(*c->nic, c->d.servers[index].listen, detail::kServerService, co, &info);
    co.timeout_ns = static_cast<uint64_t>(c->d.heartbeat_ms) * 1'000'000ULL;
    auto pinger = control.ok() ? rpc::Client::connect(*c->nic, c->d.servers[index].listen, detail::kServerService, co, &info)
                               : Result<std::unique_ptr<rpc::Client>>(control.status());
    if (!pinger.ok()) return detail::reply_status(out, pinger.status());
    {
      Link& l = *c->links[index];
      std::lock_guard lk(l.mu);
      l.control = std::move(control).value();
      l.pinger = std::move(pinger).value();
    }
    bool all = false;
    {
      std::lock_guard lk(c->mu);
      all = c->member->on_enlisted(index);
    }
    c->event("event=enlisted server=" + std::to_string(index) + " listen=" + c->d.servers[index].listen);
    detail::WireWriter w;
    w.put<uint64_t>(index + 1);
    out.append(w.out());
    if (all) {
      // Every server is here: the deployment's tables. (The servers'
      // assignment handlers run on their workers; the enlisting server's
      // thread waits for this reply, not its workers.)
      for (const auto& name : c->d.tables) {
        auto t = c->create_table(name);
        if (!t.ok() && t.status().code() != Code::kAlreadyExists) {
          c->event("event=table_failed table=" + name + " error=\"" + t.status().message() + "\"");
        }
      }
      std::lock_guard lk(c->mu);
      c->member->on_tables_created();
      c->cv.notify_all();
      c->event("event=ready servers=" + std::to_string(c->d.servers.size()) +
               " tables=" + std::to_string(c->tables.size()));
    }
    out.set_status(0);
  }));
  FERRY_RETURN_IF_ERROR(rpc->register_handler(detail::kCoordTable, {"coord-table", false},
                                              [c](const rpc::Request& r, rpc::Reply& out) {
    detail::WireReader in(r.payload);
    const auto by_name = in.get<uint8_t>();
    std::lock_guard lk(c->mu);
    if (in.ok() && by_name == 0) {
      const auto id = in.get<uint64_t>();
      if (!in.done()) return detail::reply_status(out, invalid_argument("logkv: malformed table request"));
      if (id == 0 || id > c->tables.size()) return detail::reply_status(out, not_found("logkv: no table " + std::to_string(id)));
      out.append(detail::encode_table_map(c->tables[id - 1]));
      return out.set_status(0);
    }
    if (!in.ok() || by_name != 1) return detail::reply_status(out, invalid_argument("logkv: malformed table request"));
    const std::string name(r.payload.begin() + 1, r.payload.end());
    for (const auto& t : c->tables) {
      if (t.name == name) {
        out.append(detail::encode_table_map(t));
        return out.set_status(0);
      }
    }
    detail::reply_status(out, not_found("logkv: no table " + name));
  }));
  FERRY_RETURN_IF_ERROR(rpc->register_handler(detail::kCoordCreateTable, {"coord-create-table", false},
                                              [c](const rpc::Request& r, rpc::Reply& out) {
    const std::string name(r.payload.begin(), r.payload.end());
    if (name.empty() || name.size() > 255) {
      return detail::reply_status(out, invalid_argument("logkv: a table name of 1-255 bytes"));
    }
    auto t = c->create_table(name);
    if (!t.ok()) return detail::reply_status(out, t.status());
    out.append(detail::encode_table_map(t.value()));
    out.set_status(0);
  }));
  FERRY_RETURN_IF_ERROR(rpc->register_handler(detail::kCoordVersion, {"coord-version", false},
                                              [c](const rpc::Request& r, rpc::Reply& out) {
    detail::WireReader in(r.payload);
    const auto log_id = in.get<uint64_t>();
    const auto segment = in.get<uint64_t>();
    const auto version = in.get<uint64_t>();
    if (!in.done()) return detail::reply_status(out, invalid_argument("logkv: malformed version report"));
    std::lock_guard lk(c->mu);
    uint64_t& v = c->min_versions[log_id][segment];
    v = std::max(v, version);
    out.set_status(0);
  }));
  FERRY_RETURN_IF_ERROR(rpc->register_handler(detail::kCoordFreed, {"coord-freed", false},
                                              [c](const rpc::Request& r, rpc::Reply& out) {
    detail::WireReader in(r.payload);
    const auto log_id = in.get<uint64_t>();
    const auto segment = in.get<uint64_t>();
    if (!in.done()) return detail::reply_status(out, invalid_argument("logkv: malformed free report"));
    std::lock_guard lk(c->mu);
    c->min_versions[log_id][segment] = tailwind::kFreedSegment;
    out.set_status(0);
  }));
  return ok_status();
}

void CoordinatorService::Impl::run_heartbeat() {
  const ferry::Clock& clock = SteadyClock::instance();
  std::unique_lock lk(mu);
  while (!cv.wait_for(lk, std::chrono::milliseconds(d.heartbeat_ms), [&] { return stopping; })) {
    const std::vector<uint32_t> due = member->on_tick(clock.now_ns());
    lk.unlock();
    for (uint32_t i : due) {
      Status st;
      {
        Link& l = *links[i];
        std::lock_guard ll(l.mu);
        st = detail::control_call(*l.pinger, 0, detail::kLogKvPing, d.server.workers, {}).status();
      }
      lk.lock();
      member->on_ping(i, st);
      lk.unlock();
    }
    lk.lock();
    const std::vector<uint32_t> recoveries_due = member->take_recoveries(clock.now_ns());
    lk.unlock();
    for (uint32_t i : recoveries_due) {
      Status rs = recover(i);
      lk.lock();
      member->on_recovered(i, rs, clock.now_ns());
      cv.notify_all();
      lk.unlock();
    }
    lk.lock();
  }
}

Status CoordinatorService::Impl::recover(uint32_t dead) {
  const auto t0 = Clock::now();
  const uint64_t dead_log = dead + 1;
  std::vector<uint32_t> live;
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> moves;
  std::map<uint64_t, uint32_t> tablet_counts;
  std::map<uint64_t, uint64_t> versions;
  {
    std::lock_guard lk(mu);
    live = live_locked();  // without `dead`: the member declared it crashed
    if (live.empty()) return unavailable("no live server to recover server " + std::to_string(dead) + " on");
    size_t next = 0;
    for (const auto& t : tables) {
      tablet_counts[t.table_id] = static_cast<uint32_t>(t.owners.size());
      for (uint32_t k = 0; k < t.owners.size(); ++k) {
        if (t.owners[k] == dead) moves[{t.table_id, k}] = live[next++ % live.size()];
      }
    }
  }
  {
    Link& l = *links[dead];
    std::lock_guard ll(l.mu);
    l.pinger.reset();
    l.control.reset();
  }
  // The others stop using its backup (they may have found out already).
  detail::WireWriter failed;
  failed.put<uint32_t>(dead);
  for (uint32_t j : live) {
    Link& l = *links[j];
    std::lock_guard ll(l.mu);
    Status st = detail::control_call(*l.control, 0, detail::kLogKvBackupFailed, 0, failed.out()).status();
    if (!st.ok()) event("event=backup_failed_not_told server=" + std::to_string(j) + " error=\"" + st.message() + "\"");
  }
  {
    // Versions reported while the others replaced its replicas count too.
    std::lock_guard lk(mu);
    versions = min_versions[dead_log];
  }
  // Read the log back from the surviving backups (find fences it there).
  std::vector<std::unique_ptr<tailwind::BackupLink>> backup_links;
  std::vector<tailwind::BackupLink*> raw;
  for (uint32_t j : live) {
    const tailwind::BackupLink::Remote remote = backup_remote(d, j);
    FERRY_ASSIGN_OR_RETURN(auto link, tailwind::BackupLink::connect(*nic, remote, dead_log, false, d.server.workers));
    raw.push_back(link.get());
    backup_links.push_back(std::move(link));
  }
  tailwind::RecoveryReport report;
  FERRY_ASSIGN_OR_RETURN(auto segments, tailwind::recover_log(dead_log, raw, versions, &report));
  RecoveryProgress progress;
  progress.crashed_server = dead;
  progress.segments_total = segments.size();
  auto last_report = Clock::now();
  // Above every version the dead server's log names, of any tablet, its
  // version floors included (detail::kVersionFloorTable).
  uint64_t max_version = 0;
  FERRY_ASSIGN_OR_RETURN(auto objects, detail::replay(
                                           segments, tablet_counts, moves, &progress,
                                           [&](const RecoveryProgress& p) {
                                             if (Clock::now() - last_report < std::chrono::seconds(1)) return;
                                             last_report = Clock::now();
                                             event("event=recovery_progress server=" + std::to_string(dead) +
                                                   " segments=" + std::to_string(p.segments_done) + "/" +
                                                   std::to_string(p.segments_total));
                                           },
                                           &max_version));
  std::map<uint32_t, std::vector<const detail::Replayed*>> shares;
  for (auto& m : live) shares[m];
  for (const auto& [ikey, r] : objects) {
    if (!r.live()) continue;
    const uint64_t hash = key_hash(r.table_id, r.key);
    shares[moves.at({r.table_id, tablet_of(hash, tablet_counts.at(r.table_id))})].push_back(&r);
  }
  // Each recovery master restores its share in batches, masters in parallel.
  const size_t budget = d.server.max_request_bytes - rpc::kRequestHeaderBytes;
  std::vector<Status> outcomes(shares.size());
  std::vector<uint64_t> restored(shares.size(), 0);
  std::vector<std::thread> masters;
  size_t slot = 0;
  for (const auto& [owner, share] : shares) {
    masters.emplace_back([&, owner = owner, share = &share, k = slot++] {
      Link& l = *links[owner];
      std::lock_guard ll(l.mu);
      size_t i = 0;
      // Every master gets at least one batch: it raises its version counter
      // above the crashed log's.
      do {
        detail::WireWriter w;
        detail::begin_restore(w, max_version);
        size_t n = 0;
        while (i < share->size()) {
          const detail::Replayed& r = *(*share)[i];
          const size_t bytes = detail::restore_object_bytes(r.key.size(), r.value.size());
          if (n > 0 && w.size() + bytes > budget) break;
          if (w.size() + bytes > budget) {
            outcomes[k] = invalid_argument("an object too large to restore in one request");
            return;
          }
          detail::add_restore_object(w, r.table_id, r.object_version, r.key, r.value);
          ++i;
          ++n;
        }
        Status st = detail::control_call(*l.control, 0, detail::kLogKvRestore, 0, w.out()).status();
        if (!st.ok()) {
          outcomes[k] = Status(st.code(), "restoring on server " + std::to_string(owner) + ": " + st.message());
          return;
        }
        restored[k] += n;
      } while (i < share->size());
    });
  }
  for (auto& t : masters) t.join();
  for (const Status& st : outcomes) FERRY_RETURN_IF_ERROR(st);
  for (uint64_t n : restored) progress.objects_restored += n;

  // The masters take the tablets; then the map moves them.
  std::map<uint32_t, std::map<uint64_t, std::vector<uint32_t>>> taken;
  for (const auto& [tablet, owner] : moves) taken[owner][tablet.first].push_back(tablet.second);
  for (const auto& [owner, by_table] : taken) {
    for (const auto& [table_id, list] : by_table) {
      FERRY_RETURN_IF_ERROR(assign(owner, detail::Assignment{table_id, tablet_counts.at(table_id), list}));
    }
  }
  {
    std::lock_guard lk(mu);
    for (const auto& [tablet, owner] : moves) tables[tablet.first - 1].owners[tablet.second] = owner;
  }
  // The crashed log's replicas are no longer needed -- every one found, the
  // ignored ones too, or they hold their backups' buffers for good: freed on
  // record first, so a copy a free does not reach is never replayed.
  {
    std::lock_guard lk(mu);
    for (uint64_t id : report.segments_found) min_versions[dead_log][id] = tailwind::kFreedSegment;
  }
  for (uint64_t id : report.segments_found) {
    for (auto* l : raw) (void)l->free(id);
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  event("event=recovered server=" + std::to_string(dead) + " segments=" + std::to_string(segments.size()) +
        " entries=" + std::to_string(progress.objects_replayed) + " restored=" + std::to_string(progress.objects_restored) +
        " tablets=" + std::to_string(moves.size()) + " replicas_seen=" + std::to_string(report.replicas_seen) +
        " stale_ignored=" + std::to_string(report.stale_ignored) + " torn_open=" + std::to_string(report.torn_open) +
        " ms=" + std::to_string(ms));
  return ok_status();
}

CoordinatorService::CoordinatorService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CoordinatorService::~CoordinatorService() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->heartbeat.joinable()) impl_->heartbeat.join();
  impl_->rpc.reset();  // unserves, stops the workers
  for (auto& l : impl_->links) {
    l->pinger.reset();
    l->control.reset();
  }
}

Result<std::unique_ptr<CoordinatorService>> CoordinatorService::start(nic::Nic& nic, cm::Listener& listener,
                                                                      const Deployment& d, EventLog log) {
  FERRY_RETURN_IF_ERROR(check_deployment(d));
  auto impl = std::make_unique<Impl>();
  Impl& c = *impl;
  c.d = d;
  c.log = std::move(log);
  c.nic = &nic;
  CoordinatorMemberOptions mo;
  mo.servers = static_cast<uint32_t>(d.servers.size());
  mo.heartbeat_ms = d.heartbeat_ms;
  mo.missed_beats = d.missed_beats;
  c.member = std::make_unique<CoordinatorMember>(mo, c.log);
  for (size_t i = 0; i < d.servers.size(); ++i) c.links.push_back(std::make_unique<Impl::Link>());
  FERRY_ASSIGN_OR_RETURN(c.rpc, rpc::Server::create(nic, detail::coordinator_rpc_options()));
  FERRY_RETURN_IF_ERROR(c.register_handlers());
  FERRY_RETURN_IF_ERROR(c.rpc->start());
  std::unique_ptr<CoordinatorService> out(new CoordinatorService(std::move(impl)));
  FERRY_RETURN_IF_ERROR(c.rpc->serve(listener, detail::kCoordinatorService));
  c.heartbeat = std::thread([&c] { c.run_heartbeat(); });
  c.event("event=listening coordinator listen=" + listener.address() + " servers=" + std::to_string(d.servers.size()));
  return out;
}

CoordinatorStatus CoordinatorService::status() const {
  std::lock_guard lk(impl_->mu);
  CoordinatorStatus s;
  const CoordinatorMember& m = *impl_->member;
  for (uint32_t i = 0; i < impl_->d.servers.size(); ++i) s.enlisted.push_back(m.server(i) == ServerState::kLive);
  s.crashed = m.crashed();
  s.tables = impl_->tables;
  s.recoveries = m.recoveries();
  s.recovery_failures = m.recovery_failures();
  return s;
}

bool CoordinatorService::wait_ready(uint32_t timeout_ms) const {
  std::unique_lock lk(impl_->mu);
  return impl_->cv.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                            [&] { return impl_->member->state() == CoordinatorState::kReady; });
}

bool CoordinatorService::wait_recoveries(uint64_t recoveries, uint32_t timeout_ms) const {
  std::unique_lock lk(impl_->mu);
  return impl_->cv.wait_for(lk, std::chrono::milliseconds(timeout_ms),
                            [&] { return impl_->member->recoveries() >= recoveries; });
}

}  // namespace ferry::store::logkv
