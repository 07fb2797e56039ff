// A deployed storage server: its RPC server and backup served through the
// connection manager, backup links to the other servers' processes, its log
// reporting replica versions and freed segments to the coordinator by RPC.
// The order of its start, and what it retries until when, is ServerMember
// (logkv_member.h); here are the connections it makes.
#include "ferry/store/logkv_deploy.h"

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "ferry/common/clock.h"
#include "ferry/common/cpu.h"
#include "ferry/store/logkv_member.h"
#include "logkv_internal.h"

namespace ferry::store::logkv {

Status check_deployment(const Deployment& d) {
  const uint32_t n = static_cast<uint32_t>(d.servers.size());
  if (n < 2) return invalid_argument("logkv deployment: at least 2 servers");
  if (d.server.replicas == 0 || d.server.replicas >= n) {
    return invalid_argument("logkv deployment: replicas must be in [1, servers - 1] (" + std::to_string(n) +
                            " servers): a server's backups are the other servers");
  }
  if (d.server.media != tailwind::BufferMedia::kDram) {
    return invalid_argument("logkv deployment: backup buffers must be dram (battery-backed): the persistence model "
                            "does not cross the NIC daemon's process boundary (docs/nicd.md)");
  }
  if (d.server.workers == 0) return invalid_argument("logkv deployment: at least one worker");
  if (d.server.segment_bytes < 4096 || d.server.segment_bytes > (1u << 30)) {
    return invalid_argument("logkv deployment: segment_bytes in [4 KiB, 1 GiB]");
  }
  if (d.server.max_request_bytes < 256) return invalid_argument("logkv deployment: max_request_bytes at least 256");
  if (d.heartbeat_ms == 0 || d.missed_beats == 0) {
    return invalid_argument("logkv deployment: heartbeat_ms and missed_beats at least 1");
  }
  std::set<std::string> listens{d.coordinator.listen};
  if (d.coordinator.listen.empty()) return invalid_argument("logkv deployment: the coordinator has no listen address");
  for (uint32_t i = 0; i < n; ++i) {
    const auto& m = d.servers[i];
    if (m.listen.empty()) return invalid_argument("logkv deployment: server " + std::to_string(i) + " has no listen address");
    if (m.dir.empty()) return invalid_argument("logkv deployment: server " + std::to_string(i) + " has no dir");
    if (!listens.insert(m.listen).second) {
      return invalid_argument("logkv deployment: listen address " + m.listen + " is used twice");
    }
  }
  std::set<std::string> names;
  for (const auto& t : d.tables) {
    if (t.empty() || t.size() > 255) return invalid_argument("logkv deployment: a table name of 1-255 bytes");
    if (!names.insert(t).second) return invalid_argument("logkv deployment: table " + t + " is listed twice");
  }
  return ok_status();
}

tailwind::BackupLink::Remote backup_remote(const Deployment& d, uint32_t j) {
  tailwind::BackupLink::Remote remote;
  remote.name = "server-" + std::to_string(j);
  remote.address = d.servers[j].listen;
  remote.rpc_service = detail::kServerService;
  remote.data_service = detail::kBackupDataService;
  remote.server = detail::rpc_info(d.server);
  return remote;
}

struct StorageServer::Impl {
  Deployment d;
  uint32_t index = 0;
  EventLog log;
  nic::Nic* nic = nullptr;
  cm::Listener* listener = nullptr;
  std::unique_ptr<Server> server;
  std::unique_ptr<rpc::Client> coordinator;  // session 0, under coord_mu
  std::mutex coord_mu;
  bool crashed = false;

  std::thread cleaner;
  std::mutex cleaner_mu;
  std::condition_variable cleaner_cv;
  bool stop_cleaner = false;

  void event(const std::string& line) const {
    if (log) log(line);
  }

  // A report to the coordinator that recovery depends on (a replica
  // version, a freed segment): retried for about 10 s; an error then (the
  // coordinator is unreachable) stops what waited on it -- an append is not
  // acknowledged, a segment not freed -- so a stale replica is never
  // mistaken for a current one.
  Status report(uint16_t type, std::span<const uint8_t> payload) {
    for (int attempt = 0;; ++attempt) {
      Status st;
      {
        std::lock_guard lk(coord_mu);
        st = detail::control_call(*coordinator, 0, type, detail::kCoordLogWorker, payload).status();
      }
      if (st.ok()) return st;
      if (attempt % 20 == 0) event("event=report_retry type=" + std::to_string(type) + " error=\"" + st.message() + "\"");
      if (attempt >= 200) return Status(st.code(), "the coordinator did not take a report: " + st.message());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  void teardown() {
    Server::Impl& s = server->impl();
    s.alive = false;
    {
      std::lock_guard lk(cleaner_mu);
      stop_cleaner = true;
    }
    cleaner_cv.notify_all();
    if (cleaner.joinable()) cleaner.join();
    if (s.rpc) s.rpc->stop();
    // The log first (it holds links into the other servers), then the
    // links, then the RPC server and the backup (they unserve).
    s.log.reset();
    s.links.clear();
    s.rpc.reset();
    s.backup.reset();
    coordinator.reset();
  }

  void run_cleaner() {
    if (!d.server.worker_cpus.empty()) (void)pin_current_thread(d.server.worker_cpus.front());
    const auto interval = std::chrono::milliseconds(d.clean_interval_ms);
    std::unique_lock lk(cleaner_mu);
    while (!cleaner_cv.wait_for(lk, interval, [&] { return stop_cleaner; })) {
      lk.unlock();
      auto r = server->impl().clean();
      if (!r.ok()) event("event=clean_failed error=\"" + r.status().message() + "\"");
      lk.lock();
    }
  }
};

StorageServer::StorageServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StorageServer::~StorageServer() {
  if (!impl_->crashed) impl_->teardown();
}

Server& StorageServer::server() { return *impl_->server; }
uint64_t StorageServer::log_id() const { return impl_->server->impl().log_id; }

void StorageServer::crash() {
  if (impl_->crashed) return;
  impl_->crashed = true;
  impl_->teardown();
}

Result<std::unique_ptr<StorageServer>> StorageServer::start(nic::Nic& nic, cm::Listener& listener, const Deployment& d,
                                                            uint32_t index, EventLog log) {
  FERRY_RETURN_IF_ERROR(check_deployment(d));
  if (index >= d.servers.size()) {
    return invalid_argument("logkv: server " + std::to_string(index) + " is not in the deployment (it has " +
                            std::to_string(d.servers.size()) + ")");
  }
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.d = d;
  m.index = index;
  m.log = std::move(log);
  m.nic = &nic;
  m.listener = &listener;
  const std::string& dir = d.servers[index].dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return unavailable("logkv: cannot create " + dir + ": " + ec.message());
  FERRY_ASSIGN_OR_RETURN(auto si, detail::build_server(nic, nullptr, index, d.server, dir));
  m.server = std::unique_ptr<Server>(new Server(std::move(si)));
  std::unique_ptr<StorageServer> out(new StorageServer(std::move(impl)));
  Server::Impl& s = m.server->impl();
  FERRY_RETURN_IF_ERROR(s.rpc->serve(listener, detail::kServerService));
  FERRY_RETURN_IF_ERROR(s.backup->serve(listener, detail::kBackupDataService));
  m.event("event=listening server=" + std::to_string(index) + " listen=" + listener.address() +
          " replication=" + std::string(tailwind::replication_name(d.server.replication)));

  // Backup links to every other server as they come up, the coordinator,
  // then the log (its reports go there), then enlist: ServerMember's steps.
  const bool data_path = d.server.replication == tailwind::Replication::kTailwind;
  std::vector<tailwind::BackupLink*> candidates;
  const uint64_t log_id = s.log_id;
  Impl* mp = &m;
  auto create_log = [&] {
    s.on_freed = [mp, log_id](uint64_t segment_id) {
      detail::WireWriter w;
      w.put<uint64_t>(log_id);
      w.put<uint64_t>(segment_id);
      return mp->report(detail::kCoordFreed, w.out());
    };
    return s.create_log(candidates, [mp, log_id](uint64_t segment_id, uint64_t version) {
      detail::WireWriter w;
      w.put<uint64_t>(log_id);
      w.put<uint64_t>(segment_id);
      w.put<uint64_t>(version);
      return mp->report(detail::kCoordVersion, w.out());
    });
  };
  auto enlist = [&] {
    detail::WireWriter w;
    w.put<uint32_t>(index);
    std::lock_guard lk(m.coord_mu);
    return detail::control_call(*m.coordinator, 0, detail::kCoordEnlist, detail::kCoordTableWorker, w.out()).status();
  };
  const ferry::Clock& clock = SteadyClock::instance();
  ServerMemberOptions so;
  so.index = index;
  so.servers = static_cast<uint32_t>(d.servers.size());
  so.coordinator = d.coordinator.listen;
  so.connect_timeout_ms = d.connect_timeout_ms;
  ServerMember member(so);
  member.start(clock.now_ns());
  while (!member.finished()) {
    const uint64_t now = clock.now_ns();
    if (now < member.retry_at_ns()) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(member.retry_at_ns() - now));
      continue;
    }
    Status step;
    switch (member.state()) {
      case ServerMemberState::kLinking: {
        auto link =
            tailwind::BackupLink::connect(nic, backup_remote(d, member.peer()), s.log_id, data_path, d.server.workers);
        step = link.status();
        if (link.ok()) {
          candidates.push_back(link.value().get());
          s.links.push_back(std::move(link).value());
          s.link_server.push_back(member.peer());
        }
        break;
      }
      case ServerMemberState::kConnectingCoordinator: {
        rpc::ClientOptions co;
        co.timeout_ns = 5'000'000'000ULL;
        const rpc::ServerInfo coord_info = detail::coordinator_rpc_info();
        auto coord = rpc::Client::connect(nic, d.coordinator.listen, detail::kCoordinatorService, co, &coord_info);
        step = coord.status();
        if (coord.ok()) m.coordinator = std::move(coord).value();
        break;
      }
      case ServerMemberState::kCreatingLog:
        step = create_log();
        break;
      case ServerMemberState::kEnlisting:
        step = enlist();
        break;
      case ServerMemberState::kServing:
      case ServerMemberState::kFailed:
        break;
    }
    member.on_step(step, clock.now_ns());
  }
  if (member.state() == ServerMemberState::kFailed) return member.failure();
  m.event("event=enlisted server=" + std::to_string(index) + " log=" + std::to_string(log_id) +
          " backups=" + std::to_string(candidates.size()));
  if (d.clean_interval_ms > 0) m.cleaner = std::thread([mp] { mp->run_cleaner(); });
  return out;
}

}  // namespace ferry::store::logkv
