// `ferry bench tailwind` (tailwind_bench.h), its system under test: a LogKv
// cluster on a manual NIC engine the client thread steps, with the
// benchmark's own client (one RPC connection per server); and the load
// targets the loops of load_loop.h drive it with.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine_cost.h"
#include "ferry/common/cpu.h"
#include "ferry/common/rng.h"
#include "ferry/common/status.h"
#include "ferry/nic/engine.h"
#include "ferry/rpc/client.h"
#include "ferry/store/logkv.h"
#include "ferry/workload/kv_mix.h"
#include "load_loop.h"
#include "regime.h"
#include "tailwind_bench.h"

namespace ferry::bench::tailwind_bench {

namespace logkv = store::logkv;
using workload::KvMix;

// Calls in flight per server connection, at most (the client's slots).
inline constexpr uint32_t kSlotsPerServer = 256;
// Open loop: calls in flight over the client machine, at most; arrivals
// beyond it wait in the backlog (their wait counts in their latency).
inline constexpr uint32_t kOpenInflight = 256;
// Open loop: arrivals waiting for room, at most; past that the window ends
// (far past capacity).
inline constexpr size_t kBacklogCapacity = 200'001;

// The mix of a workload name (ycsb-a, ycsb-b, ycsb-c, write-only).
Result<KvMix> mix_of(const std::string& workload, const TailwindBenchOptions& o);

// A LogKv cluster and the benchmark's client.
struct Sut {
  std::string system;
  std::unique_ptr<logkv::Cluster> cluster;
  nic::Engine* engine = nullptr;
  nic::Nic* client_nic = nullptr;
  std::vector<std::unique_ptr<rpc::Client>> rpcs;  // one per server
  uint64_t table = 0;
  logkv::TableMap map;
  uint32_t workers = 1;

  // The client thread's passes that found nothing to do: its idle time, for
  // the client/NIC core's busy fraction.
  IdleSampler idle;

  ~Sut();
  // One pass: the engine, then every connection. Returns whether anything
  // happened (the pass's time counts as idle otherwise).
  bool step_and_poll();

  // Runs `fn` (server-side control work: cleaning, recovery) on a thread
  // pinned to the servers' CPU while this thread steps the engine.
  template <typename T>
  T drive(int cpu, const std::function<T()>& fn) {
    std::atomic<bool> done{false};
    std::optional<T> result;
    std::thread t([&] {
      if (cpu >= 0) (void)pin_current_thread(cpu);
      result.emplace(fn());
      done.store(true, std::memory_order_release);
    });
    while (!done.load(std::memory_order_acquire)) engine->step();
    t.join();
    return std::move(*result);
  }
};

// Builds the cluster of `system` (tailwind or rpc) with its files in `dir`,
// the client's connections and the benchmark's table; from then on this
// thread is the engine's manual driver.
Result<std::unique_ptr<Sut>> build_sut(const std::string& system, const TailwindBenchOptions& o,
                                       const std::string& dir);

// Requests of a mix over a subset of the key space (`keys`: the key numbers
// that may be drawn; null: all of them), each a call to the server that owns
// the key, reported to a Recorder (kinds kPut and kGet).
class Requests {
 public:
  static constexpr size_t kPut = 0;
  static constexpr size_t kGet = 1;

  Requests(Sut& s, const KvMix& mix, const std::vector<uint64_t>* keys, uint64_t seed);
  // One request of the mix; its latency runs from `at_ns`. kResourceExhausted:
  // that server connection is full (poll and retry).
  Status issue(Recorder& rec, uint64_t at_ns);
  // A PUT or GET of key `key_number`.
  Status send(Recorder& rec, uint64_t key_number, bool put, uint64_t at_ns);
  // The server that owns a key number's tablet.
  uint32_t owner(uint64_t key_number);

 private:
  // The mix drawn from: over the subset's positions when there is one.
  static KvMix over(KvMix mix, const std::vector<uint64_t>* keys);
  // The key named `key_number` of the whole space, in key_.
  std::span<const uint8_t> render(uint64_t key_number);

  Sut& s_;
  const std::vector<uint64_t>* keys_;
  Rng rng_;
  workload::KvRequestGenerator gen_;    // draws requests (over the subset)
  workload::KvRequestGenerator names_;  // names keys of the whole space
  std::string key_;
  std::string value_;
};

// Per-server counters at the edges of a window. Only counters that take no
// lock a worker may hold while it waits for replication (which needs this
// thread to step the engine): not logkv::Server::counters().
struct Snapshot {
  std::vector<rpc::WorkerCounters> client_workers;  // per server, summed
  std::vector<rpc::WorkerCounters> backup_worker;   // per server
  std::vector<tailwind::BackupCounters> backups;
  uint64_t client_cpu_ns = 0;
  SchedStat client_thread;   // for its wait (its CPU: client_cpu_ns)
  SchedStat server_threads;  // every other thread of the process: all pinned to server_cpu
  uint64_t client_idle_ns = 0;
};

// One point's run: what the loop measured and the counters around it.
struct Run {
  Recorder rec{2};  // kinds: Requests::kPut, Requests::kGet
  LoopOutcome loop;
  Snapshot start, end;
};

// The load target (load_loop.h): requests of `requests`, at most `limit` in
// flight (closed loop: the clients; open loop: kOpenInflight); snapshots at
// the window's edges.
class LogKvTarget {
 public:
  LogKvTarget(Sut& s, Run& run, Requests& requests, uint32_t limit)
      : s_(s), run_(run), requests_(requests), limit_(limit) {}
  Status issue(uint64_t at_ns);
  Status step(uint64_t until_ns);
  void on_window_open(uint64_t now_ns);
  void on_window_close(uint64_t now_ns);

 private:
  Sut& s_;
  Run& run_;
  Requests& requests_;
  uint32_t limit_;
};

// Server `server`'s backup counters (stepping the engine while its lock is held).
tailwind::BackupCounters backup_counters(Sut& s, uint32_t server);

// Writes every key of `numbers` once (closed loop, many in flight), so GETs
// hit; progress to `log` every 2 s.
Status prefill(Sut& s, Requests& requests, const std::vector<uint64_t>& numbers, std::ostream& log, const char* what);

}  // namespace ferry::bench::tailwind_bench
