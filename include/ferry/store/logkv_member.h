// What a deployed LogKv coordinator decides (logkv_deploy.h,
// CoordinatorService), as a state machine: which servers are live, when each
// is pinged, when one that stopped answering is declared crashed and
// recovered, when a failed recovery is tried again, and when the
// deployment's tables are due. Time comes in as `now_ns`; the work itself
// -- the pings, the recovery (reading the crashed log back from the
// backups, replay, restore), the tables' creation -- is done by the caller
// (CoordinatorService's RPC handlers and heartbeat thread), which reports
// each outcome back. It starts no thread, never sleeps and never reads a
// clock, so a process and a simulator step the same decisions.
//
// Per server (ServerState):
//
//   kAbsent   --on_enlisted(i)-----------------------------> kLive
//   kLive     --on_ping(i, error) x missed_beats in a row---> kCrashed      event=server_crashed
//   kCrashed  --take_recoveries()--------------------------> kRecovering   (the caller recovers it)
//   kRecovering --on_recovered(i, ok)----------------------> kRecovered   (final)
//               --on_recovered(i, error)-------------------> kUnrecovered  event=recovery_failed
//   kUnrecovered --take_recoveries(), 1 s after it failed--> kRecovering   (tried again)
//
// A crashed server never rejoins: admit(i) refuses it from kCrashed on.
//
// The deployment (CoordinatorState):
//
//   kWaiting --on_enlisted(last absent server)--> kCreatingTables (the caller creates them)
//   kCreatingTables --on_tables_created()-------> kReady
//
// Threads: not thread-safe; the caller serializes its calls (one mutex).
//
// A storage server's start (StorageServer::start) is ServerMember: the
// steps it takes in order, which failures are worth another attempt, and
// until when (the deployment's connect_timeout_ms from start):
//
//   kLinking(peer j) --ok-------------------> kLinking(next peer) ... --> kConnectingCoordinator
//   kConnectingCoordinator --ok-------------> kCreatingLog
//   kCreatingLog --ok-----------------------> kEnlisting
//   kEnlisting --ok-------------------------> kServing (final)
//   kLinking, kConnectingCoordinator --error the peer may not be up yet, before the deadline-->
//             the same step again retry_ms later
//   any step --any other error, or past the deadline--> kFailed (final; failure() names the step)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::store::logkv {

enum class ServerState : uint8_t { kAbsent, kLive, kCrashed, kRecovering, kRecovered, kUnrecovered };
std::string_view server_state_name(ServerState state);

enum class CoordinatorState : uint8_t { kWaiting, kCreatingTables, kReady };

struct CoordinatorMemberOptions {
  uint32_t servers = 0;
  uint32_t heartbeat_ms = 200;        // how often every live server is pinged
  uint32_t missed_beats = 5;          // consecutive failed pings that declare a server crashed
  uint32_t recovery_retry_ms = 1000;  // a failed recovery is tried again after this long
};

class CoordinatorMember {
 public:
  // `event`: one "event=..." line per transition it logs (may be empty).
  CoordinatorMember(CoordinatorMemberOptions options, std::function<void(const std::string& line)> event);

  // Whether server `index` may enlist (an unknown index, or one that crashed
  // and was recovered, is refused, saying why).
  Status admit(uint32_t index) const;
  // Server `index` enlisted (the coordinator connected back to it). Returns
  // true exactly once: when this made every server enlisted, and the
  // deployment's tables are due (then on_tables_created()).
  bool on_enlisted(uint32_t index);
  void on_tables_created();

  // Which servers to ping now (every live one, once per heartbeat_ms; empty
  // in between). The caller pings them and reports each with on_ping.
  std::vector<uint32_t> on_tick(uint64_t now_ns);
  void on_ping(uint32_t index, const Status& pinged);
  // The crashed servers to recover now (each moves to kRecovering): newly
  // crashed ones, and failed ones whose retry is due. The caller recovers
  // each and reports with on_recovered.
  std::vector<uint32_t> take_recoveries(uint64_t now_ns);
  void on_recovered(uint32_t index, const Status& recovered, uint64_t now_ns);

  CoordinatorState state() const { return state_; }
  ServerState server(uint32_t index) const { return servers_.at(index).state; }
  // Enlisted and not crashed, in index order: where tablets may go.
  std::vector<uint32_t> live() const;
  // Per server: whether it was declared crashed (whatever its recovery did).
  std::vector<bool> crashed() const;
  uint64_t recoveries() const { return recoveries_; }
  uint64_t recovery_failures() const { return recovery_failures_; }

 private:
  struct Server {
    ServerState state = ServerState::kAbsent;
    uint32_t misses = 0;
    uint64_t retry_at_ns = 0;  // kUnrecovered: when it is tried again
  };
  void event(const std::string& line) const;

  const CoordinatorMemberOptions options_;
  const std::function<void(const std::string&)> event_;
  std::vector<Server> servers_;
  CoordinatorState state_ = CoordinatorState::kWaiting;
  bool ticked_ = false;
  uint64_t last_ping_ns_ = 0;
  uint64_t recoveries_ = 0;
  uint64_t recovery_failures_ = 0;
};

enum class ServerMemberState : uint8_t {
  kLinking,                // a backup link to peer() (every other server, in index order)
  kConnectingCoordinator,  // an RPC client to the coordinator
  kCreatingLog,            // the replicated log over the links (its reports go to the coordinator)
  kEnlisting,              // the enlist call
  kServing,
  kFailed,
};
std::string_view server_member_state_name(ServerMemberState state);

struct ServerMemberOptions {
  uint32_t index = 0;
  uint32_t servers = 0;
  std::string coordinator;              // its address (for failure messages)
  uint32_t connect_timeout_ms = 30000;  // how long, from start, the others may take to come up
  uint32_t retry_ms = 50;               // between two attempts of a step
};

class ServerMember {
 public:
  explicit ServerMember(ServerMemberOptions options) : options_(std::move(options)) {}

  void start(uint64_t now_ns);
  // The step to take now is state() (on peer() when kLinking), once
  // now_ns >= retry_at_ns(); the caller takes it and reports on_step.
  ServerMemberState state() const { return state_; }
  uint32_t peer() const { return peer_; }
  uint64_t retry_at_ns() const { return retry_at_ns_; }
  bool finished() const { return state_ == ServerMemberState::kServing || state_ == ServerMemberState::kFailed; }
  void on_step(const Status& outcome, uint64_t now_ns);
  const Status& failure() const { return failure_; }

 private:
  void advance();

  const ServerMemberOptions options_;
  ServerMemberState state_ = ServerMemberState::kLinking;
  uint32_t peer_ = 0;
  uint64_t deadline_ns_ = 0;
  uint64_t retry_at_ns_ = 0;
  Status failure_;
};

}  // namespace ferry::store::logkv
