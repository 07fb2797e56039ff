// LogKv on Tailwind as a simulated system (src/sim/tailwind.cc, which
// describes it): the run's state and steps, shared by tailwind.cc (the
// cluster, the workload, the faults) and tailwind_checks.cc (the finale and
// the invariants).
#pragma once

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ferry/sim/linearizability.h"
#include "ferry/sim/runtime.h"
#include "ferry/sim/systems.h"
#include "ferry/store/logkv.h"

namespace ferry::sim::tailwind_sim {

namespace logkv = store::logkv;

constexpr uint32_t kServers = 5;
constexpr uint32_t kClients = 4;
constexpr uint64_t kKeys = 10;
constexpr uint64_t kDelayMaxNs = 200'000;
constexpr uint64_t kMaxSteps = 400'000'000;  // scheduler steps before a run is declared stuck
constexpr uint64_t kMs = 1'000'000;


inline std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
// Keys below kKeys are the hot ones; above, cold keys each written once.
inline std::string key_name(uint64_t k) {
  return k < kKeys ? "hot-" + std::to_string(k) : "cold-" + std::to_string(k - kKeys);
}

// A value names the PUT that wrote it: 8 bytes of id, then padding.
inline std::string value_of(uint64_t id, size_t padding) {
  std::string v(8 + padding, static_cast<char>('a' + id % 26));
  std::memcpy(v.data(), &id, 8);
  return v;
}
inline std::optional<uint64_t> id_of(const std::vector<uint8_t>& value) {
  if (value.size() < 8) return std::nullopt;
  uint64_t id = 0;
  std::memcpy(&id, value.data(), 8);
  return id;
}

class Run {
 public:
  explicit Run(const RunOptions& options) : world_(options), rt_(world_.clock(), options.seed ^ 0x7a11c0de) {
    result_.seed = options.seed;
  }
  ~Run() {
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  RunResult run(uint64_t ops);

 private:
  bool ok() const { return result_.invariant.empty(); }
  void fail(const std::string& invariant, const std::string& detail) {
    if (!ok()) return;
    result_.invariant = invariant;
    result_.detail = detail;
    world_.event("VIOLATION " + invariant + ": " + detail.substr(0, detail.find('\n')));
  }
  bool build();
  void client(uint32_t c, uint32_t generation);
  void spawn_client(uint32_t c, uint32_t generation);
  void control();
  void fault_crash(uint32_t victim);
  void fault_partition(uint32_t victim);
  void fault_backup(uint32_t victim, bool crash_meanwhile, bool power_meanwhile);
  // With `deferred`, the hosts are not recovered here: they are added to
  // it for the caller to recover later.
  void fault_power(uint32_t victim, bool correlated, std::optional<uint32_t> out,
                   std::vector<uint32_t>* deferred = nullptr);
  bool restart(uint32_t server);
  // Servers but `except` whose backup is down (crashed or powered off, not restarted).
  std::vector<uint32_t> down(uint32_t except) const;
  // Recovers a lost server's tablets, restarting powered-off hosts while it
  // must wait. `cause` ("crash", "power", "partition") names the coverage
  // counts of what the recovery met (torn-after-crash, ...).
  bool recover(uint32_t server, const char* cause);
  bool finale();
  void check_history();
  void check_replicas();
  void check_index(const char* when);
  void check_buffers();
  void coordinator_outage(uint64_t ms);
  void wait_for_coordinator();
  void check_versions();
  // Drives the scheduler until `done`; a deadlock or the step budget fails "live".
  bool drive(const std::function<bool()>& done, const std::string& what);
  std::vector<uint32_t> live() const;

  World world_;
  SimRuntime rt_;
  std::string dir_;
  std::unique_ptr<logkv::Cluster> cluster_;
  std::unique_ptr<logkv::Client> client_;
  uint64_t table_ = 0;
  tailwind::Replication mode_ = tailwind::Replication::kTailwind;
  uint32_t replicas_ = 2;  // r, by seed: 2, or 1 (a correlated power failure then takes every current copy)
  RunResult result_;
  std::vector<KvOp> history_;
  std::vector<Thread> threads_;
  uint64_t ops_ = 0;       // the workload's size
  uint64_t next_op_ = 0;   // the next operation a client takes
  uint64_t done_ops_ = 0;  // operations finished (or abandoned by a crashed client)
  uint32_t clients_running_ = 0;
  bool control_done_ = false;
  uint32_t lost_ = 0;                 // servers gone for good
  // How many the workload's faults may lose for good: servers - (r + 1)
  // keeps r + 1 live; one fewer, in half the seeds, leaves the finale a
  // server to crash and recover (it needs r + 2 live).
  uint32_t max_lost_ = 0;
  std::vector<uint64_t> slow_until_;  // per server: its cores run rarely until then (0: normal)
  uint64_t coordinator_back_at_ = 0;  // the coordinator is unreachable until then (0: reachable)
  uint32_t restarts_ = 0;             // backups restarted
  uint32_t power_failures_ = 0;       // hosts powered off
  uint32_t outages_ = 0;              // outage fibers spawned (names them)
  uint64_t next_value_id_ = 1;
  uint64_t cold_percent_ = 0;  // of operations: a PUT of a new cold key (by seed: 0, 25 or 50)
  uint64_t next_cold_ = 0;
  std::vector<FiberId> client_fiber_ = std::vector<FiberId>(kClients, 0);  // each client's current fiber
  struct AckedPut {
    uint64_t key, version, invoke_ns, complete_ns;
  };
  std::vector<AckedPut> acked_puts_;  // for versions-grow
};

}  // namespace ferry::sim::tailwind_sim
