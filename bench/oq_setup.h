// `ferry bench oq` (oq_bench.h), its system under test: one server host (an
// rpc::Server in one of the three modes, serving the cache engine or PmKv)
// and one client machine, on a manual NIC engine the client thread steps,
// built afresh for every point; and the load target the loops of
// load_loop.h drive it with.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine_cost.h"
#include "ferry/common/rng.h"
#include "ferry/common/status.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"
#include "ferry/store/kv_service.h"
#include "ferry/workload/kv_mix.h"
#include "load_loop.h"
#include "oq_bench.h"
#include "regime.h"

namespace ferry::bench::oq_bench {

using workload::KvMix;

enum class Backend { kCache, kPmKv };

// The RPC mode a system name stands for (oq and oq-durable: Ordered Queue).
rpc::Mode mode_of(const std::string& system);

// The paper's multi-packet SRQ: 48 receive buffers of 16 KB per worker. An
// ordinary SRQ gets the same bytes as one buffer per request.
inline constexpr uint32_t kMpBuffers = 48;
inline constexpr uint32_t kMpBufferBytes = 16 << 10;
// Calls in flight on the whole client machine stay well under the server's
// 256 response slots and send-queue depth per worker (a worker that ran out
// would wait for completions by stepping the engine itself; see the report).
inline constexpr uint32_t kMaxCallsInFlight = 128;

// The server host's persistent memory (JUNE BERRY-D): one persistence domain
// for the run (DDIO off: the server NIC's DMA reaches PM once drained), with
// a region for the durable SRQ areas and one PmKv region per worker. Files
// live in a new directory under pm_dir, removed with the PmHost.
struct PmHost {
  std::unique_ptr<pm::PersistenceDomain> domain;
  pm::Region* srq = nullptr;
  std::vector<pm::Region*> data;
  std::string dir;
  ~PmHost();
};
Result<std::unique_ptr<PmHost>> make_pm_host(const OqBenchOptions& o);

struct SutConfig {
  std::string system;  // oq, oq-durable, deferred, rawrpc
  Backend backend = Backend::kCache;
  bool multi_packet = true;
  bool delegation = true;
  uint32_t sessions = 1;
  uint32_t max_inflight = 1;
  KvMix mix;  // its keys are prefilled; its sizes size the requests
  // Busy work (TSC spin) the worker does before every request's handler, in
  // every system alike: the back-end cost of the paper's servers, which the
  // emulated store does not have (oq_bench.h, server_ns_for).
  uint64_t server_ns_per_request = 0;
};

// A request's bytes on the wire (RPC header, KV header, key, value).
uint32_t request_bytes(const KvMix& mix);

// One server host and one client machine.
struct Sut {
  SutConfig config;
  std::unique_ptr<nic::Engine> engine;
  nic::Nic* server_nic = nullptr;
  nic::Nic* client_nic = nullptr;
  store::CacheOptions cache_options;
  std::unique_ptr<store::CacheService> cache;
  std::unique_ptr<store::PmKvService> pmkv;
  std::unique_ptr<rpc::Server> server;
  std::unique_ptr<rpc::Client> client;
  std::vector<std::unique_ptr<store::KvClient>> kv;  // one per session
  // Each worker thread's kernel id, recorded by the worker at its first
  // request (0 until then), for its schedstat.
  std::shared_ptr<std::vector<std::atomic<int>>> worker_tids;
  ~Sut();
};

// Builds and starts the system: engine, NICs, the server (workers pinned to
// o.server_cpu), its engine partitions prefilled with every key of the mix
// (so gets hit), and the client's sessions. pm_host: for PmKv.
Result<std::unique_ptr<Sut>> build_sut(const SutConfig& c, const OqBenchOptions& o, PmHost* pm_host);

// Counters at the edges of the measured window.
struct Snapshot {
  nic::NicCounters server_nic, client_nic;
  rpc::WorkerCounters workers;
  uint64_t process_cpu_ns = 0;
  uint64_t client_cpu_ns = 0;
  SchedStat worker_threads;  // summed over the workers
  SchedStat client_thread;   // for its wait (its CPU: client_cpu_ns)
  uint64_t client_idle_ns = 0;  // the client thread's passes in which nothing happened
};

// One point's run: what the loop measured and the counters around it.
struct Run {
  static constexpr size_t kSet = 0;  // the Recorder's kinds of operation
  static constexpr size_t kGet = 1;
  Recorder rec{2};
  LoopOutcome loop;
  Snapshot start, end;
  bool closed = false;                // closed loop: latency from the send
  std::array<uint64_t, 5> commits{};  // by rpc::Commit
};

// The load target (load_loop.h): requests of the mix, each on the next
// session with a free call slot (round robin), committed when the system
// commits them (rpc::Commit); snapshots at the window's edges.
class KvTarget {
 public:
  KvTarget(Sut& s, Run& run, uint64_t seed);
  Status issue(uint64_t at_ns);
  Status step(uint64_t until_ns);
  void on_window_open(uint64_t now_ns);
  void on_window_close(uint64_t now_ns);

 private:
  // Where a kind's completions go: a call's callback holds one and the
  // call's start time, two words that std::function keeps inline.
  struct Sink {
    Run* run;
    size_t kind;
    void done(uint64_t at_ns, const rpc::CallResult& r) const;
  };
  Snapshot snapshot() const;

  Sut& s_;
  IdleSampler idle_;  // the passes that found nothing to do
  Run& run_;
  std::array<Sink, 2> sinks_;
  workload::KvRequestGenerator gen_;
  Rng rng_;
  std::string key_;
  std::string value_;
  uint32_t next_session_ = 0;
};

}  // namespace ferry::bench::oq_bench
