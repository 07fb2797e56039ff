// LogKv deployed as processes (docs/tailwind.md, "Deployment"): a
// coordinator and storage servers, each its own process on its host's NIC
// (a `ferry nicd` daemon, or any nic::Nic), wired by the connection manager
// over TCP, and clients that route by the coordinator's tablet map. One
// Deployment (read from one TOML file by `ferry logkv`) describes them all.
//
//   coordinator   tables and their tablet map; the replica versions and
//                 freed segments every log reports (so recovery can tell a
//                 stale replica); a heartbeat to every server; when a
//                 server misses `missed_beats` beats it is declared crashed:
//                 the others replace the replicas it held, its log is read
//                 back from their backups (Algorithm 1 over open buffers),
//                 replayed, and its tablets restored on live servers by
//                 RPC, then the map moves them.
//   server        primary of its tablets, backup of the others' logs: one
//                 rpc::Server (CM service "logkv"), its backup's data path
//                 (CM service "tailwind"), links to every other server's
//                 backup, the replicated log. Enlists with the coordinator
//                 once its log can replicate.
//   client        Client::connect: an rpc::Client to each server and to
//                 the coordinator.
//
// The same code runs in one process for tests (every member on its own NIC
// of one Engine, listeners on loopback).
//
// Limits: the coordinator keeps its state in memory (RAMCloud keeps it in
// an external store); a crashed server does not rejoin (a process started
// again with its index is refused until the cluster restarts); buffers are
// DRAM standing for battery-backed memory (the persistence model does not
// cross the daemon boundary, docs/nicd.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/common/status.h"
#include "ferry/nic/verbs.h"
#include "ferry/store/logkv.h"

namespace ferry::store::logkv {

// Where one member runs.
struct MemberAddress {
  std::string nicd;    // its host's NIC daemon socket (the `ferry logkv` tools attach there)
  std::string listen;  // "a.b.c.d:port" of its CM listener
  std::string dir;     // servers: backup storage (closed segments are written here)
};

struct Deployment {
  ServerOptions server;                // every server's (media must be kDram)
  std::vector<MemberAddress> servers;  // server i is servers[i]
  MemberAddress coordinator;
  uint32_t tablets_per_table = 0;      // 0: one per server
  std::vector<std::string> tables;     // created by the coordinator once every server enlisted
  uint32_t heartbeat_ms = 200;
  uint32_t missed_beats = 5;           // consecutive missed beats that declare a server crashed
  uint32_t connect_timeout_ms = 30000; // how long members wait for each other at start
  uint32_t clean_interval_ms = 0;      // each server's cleaner (0: none)
};

// kInvalidArgument naming what is wrong (fewer than replicas + 1 servers,
// PM media, duplicate listen addresses, ...).
Status check_deployment(const Deployment& d);

// How a primary (or the coordinator) reaches server j's backup.
tailwind::BackupLink::Remote backup_remote(const Deployment& d, uint32_t j);

// What a member tells its operator as it goes (one line, "key=value ...").
using EventLog = std::function<void(const std::string& line)>;

// A storage server of a deployment.
class StorageServer {
 public:
  // Builds server `index` on `nic` and serves it on `listener` (bound to
  // the deployment's address for it, or anywhere in tests), then waits (up
  // to connect_timeout_ms) for every other server's listener to connect
  // its log's backup links, and enlists with the coordinator. `nic` and
  // `listener` must outlive the server. Errors name the member that could
  // not be reached.
  static Result<std::unique_ptr<StorageServer>> start(nic::Nic& nic, cm::Listener& listener, const Deployment& d,
                                                      uint32_t index, EventLog log = {});
  ~StorageServer();
  StorageServer(const StorageServer&) = delete;
  StorageServer& operator=(const StorageServer&) = delete;

  Server& server();
  uint64_t log_id() const;
  // Stops serving at once, as a crashed process would (its workers stop;
  // its peers see it go silent). Tests only: a real crash is SIGKILL.
  void crash();

  struct Impl;

 private:
  explicit StorageServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The coordinator of a deployment.
struct CoordinatorStatus {
  std::vector<bool> enlisted;   // per server: enlisted and not crashed
  std::vector<bool> crashed;    // declared crashed
  std::vector<TableMap> tables;
  uint64_t recoveries = 0;      // completed
  uint64_t recovery_failures = 0;
};

class CoordinatorService {
 public:
  // Serves the coordinator on `nic` and `listener` and starts its heartbeat
  // thread. Servers enlist as they come; the deployment's tables are created
  // once all have. Both must outlive it.
  static Result<std::unique_ptr<CoordinatorService>> start(nic::Nic& nic, cm::Listener& listener,
                                                           const Deployment& d, EventLog log = {});
  ~CoordinatorService();
  CoordinatorService(const CoordinatorService&) = delete;
  CoordinatorService& operator=(const CoordinatorService&) = delete;

  CoordinatorStatus status() const;
  // Waits until the deployment's tables exist (every server enlisted);
  // false after timeout_ms.
  bool wait_ready(uint32_t timeout_ms) const;
  // Waits until `recoveries` recoveries have completed; false after timeout_ms.
  bool wait_recoveries(uint64_t recoveries, uint32_t timeout_ms) const;

  struct Impl;

 private:
  explicit CoordinatorService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A deployment's clients: Client::connect (logkv.h).

}  // namespace ferry::store::logkv
