#include "oq_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "ferry/common/clock.h"
#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/common/rng.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"
#include "ferry/store/kv_service.h"
#include "ferry/workload/arrivals.h"
#include "ferry/workload/kv_mix.h"
#include "reference.h"
#include "report.h"

namespace ferry::bench {

using workload::KvMix;

namespace {

uint64_t now_ns() { return timing_clock().now_ns(); }
constexpr double kUs = 1e-3;  // ns -> us

const std::vector<std::string> kSystems = {"oq", "oq-durable", "deferred", "rawrpc"};
const std::vector<std::string> kExperiments = {"threads", "latency", "pmkv"};
const std::vector<std::string> kVariants = {"mp-deleg", "mp", "deleg", "plain"};
// Which systems each experiment compares (in this order, the baseline first
// where there is one).
const std::vector<std::string> kThreadSystems = {"rawrpc", "oq", "oq-durable"};
const std::vector<std::string> kLatencySystems = {"rawrpc", "deferred", "oq"};
const std::vector<std::string> kPmSystems = {"rawrpc", "deferred", "oq-durable"};

// The paper's multi-packet SRQ: 48 receive buffers of 16 KB per worker. An
// ordinary SRQ gets the same bytes as one buffer per request.
constexpr uint32_t kMpBuffers = 48;
constexpr uint32_t kMpBufferBytes = 16 << 10;
// Calls in flight on the whole client machine stay well under the server's
// 256 response slots and send-queue depth per worker (a worker that ran out
// would wait for completions by stepping the engine itself; see the report).
constexpr uint32_t kMaxCallsInFlight = 128;
// After a point's window, requests scheduled in it may still be queued or in
// flight: they are waited for (their latency counts) up to this long.
constexpr uint64_t kDrainCapNs = 10'000'000'000ULL;

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

uint32_t round_up(uint32_t v, uint32_t to) { return (v + to - 1) / to * to; }

enum class Backend { kCache, kPmKv };

rpc::Mode mode_of(const std::string& system) {
  if (system == "rawrpc") return rpc::Mode::kRawRpc;
  if (system == "deferred") return rpc::Mode::kDeferredExec;
  return rpc::Mode::kOrderedQueue;
}

// ---- the server host's persistent memory (JUNE BERRY-D) ----

// One persistence domain for the run (DDIO off: the server NIC's DMA reaches
// PM once drained), with a region for the durable SRQ areas and one PmKv
// region per worker. Files live in pm_dir and are removed at the end.
struct PmHost {
  std::unique_ptr<pm::PersistenceDomain> domain;
  pm::Region* srq = nullptr;
  std::vector<pm::Region*> data;
  std::vector<std::string> files;
  ~PmHost() {
    domain.reset();
    for (const std::string& f : files) {
      std::error_code ec;
      std::filesystem::remove(f, ec);
    }
  }
};

Result<std::unique_ptr<PmHost>> make_pm_host(const OqBenchOptions& o) {
  auto h = std::make_unique<PmHost>();
  h->domain = std::make_unique<pm::PersistenceDomain>(pm::PlatformConfig{});
  const std::string dir = o.pm_dir.empty() ? "/dev/shm" : o.pm_dir;
  const std::string prefix = fmt::format("{}/ferry-oq-bench-{}-", dir, getpid());
  const size_t area = rpc::DurableLayout{kMpBuffers, kMpBufferBytes, 64}.area_bytes();
  const size_t srq_bytes = (o.workers * area + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  h->files.push_back(prefix + "srq");
  FERRY_ASSIGN_OR_RETURN(h->srq, h->domain->map_pm(h->files.back(), srq_bytes, true));
  for (uint32_t w = 0; w < o.workers; ++w) {
    h->files.push_back(prefix + "data" + std::to_string(w));
    FERRY_ASSIGN_OR_RETURN(pm::Region * r, h->domain->map_pm(h->files.back(), o.pm_region_bytes, true));
    h->data.push_back(r);
  }
  return h;
}

// ---- a system under test: one server host and one client machine ----

struct SutConfig {
  std::string system;  // oq, oq-durable, deferred, rawrpc
  Backend backend = Backend::kCache;
  bool multi_packet = true;
  bool delegation = true;
  uint32_t sessions = 1;
  uint32_t max_inflight = 1;
  KvMix mix;  // its keys are prefilled; its sizes size the requests
};

uint32_t request_bytes(const KvMix& mix) {
  return static_cast<uint32_t>(rpc::kRequestHeaderBytes + sizeof(store::KvHeader)) + mix.key_bytes + mix.value_bytes;
}

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
  std::vector<std::unique_ptr<store::KvClient>> kv;
  ~Sut() {
    kv.clear();
    client.reset();
    server.reset();  // joins the workers before their engines' partitions go
    cache.reset();
    pmkv.reset();
    engine.reset();
  }
};

Result<std::unique_ptr<Sut>> build_sut(const SutConfig& c, const OqBenchOptions& o, PmHost* pm_host) {
  auto s = std::make_unique<Sut>();
  s->config = c;
  const bool durable = c.system == "oq-durable";
  FERRY_ASSERT(!durable || c.backend == Backend::kPmKv, "oq-durable serves PmKv");
  FERRY_ASSERT(c.backend == Backend::kCache || pm_host != nullptr, "PmKv needs the PM host");
  nic::EngineOptions eo;
  eo.threaded = false;  // stepped by the client thread: see oq_bench.h
  s->engine = std::make_unique<nic::Engine>(eo);
  nic::NicOptions sno;
  sno.name = "server";
  if (c.backend == Backend::kPmKv) sno.memory = pm_host->domain.get();  // the PM host's DMA path, DDIO off
  sno.resource_model.qp_context_entries = o.qp_context_entries;
  FERRY_ASSIGN_OR_RETURN(s->server_nic, s->engine->add_nic(sno));
  nic::NicOptions cno;
  cno.name = "client";
  FERRY_ASSIGN_OR_RETURN(s->client_nic, s->engine->add_nic(cno));

  rpc::ServerOptions so;
  so.mode = mode_of(c.system);
  so.workers = o.workers;
  so.multi_packet = c.multi_packet;
  so.max_request_bytes = round_up(request_bytes(c.mix), 256);
  so.max_response_bytes = round_up(c.mix.value_bytes + 128, 256);
  so.stride_bytes = 64;
  so.buffer_bytes = kMpBufferBytes;
  so.buffers = c.multi_packet ? kMpBuffers : kMpBuffers * kMpBufferBytes / so.max_request_bytes;
  so.threaded = true;
  if (o.server_cpu >= 0) so.worker_cpus = {o.server_cpu};
  if (durable) so.durable_region = pm_host->srq;
  FERRY_ASSIGN_OR_RETURN(s->server, rpc::Server::create(*s->engine, *s->server_nic, so));

  // The engines, prefilled with every key of the mix (so gets hit), before
  // the workers start.
  const workload::KvRequestGenerator gen(c.mix);
  const std::string value(c.mix.value_bytes, 'v');
  std::string key(c.mix.key_bytes, ' ');
  if (c.backend == Backend::kCache) {
    s->cache_options.memory_limit_bytes = 256ull << 20;
    FERRY_ASSIGN_OR_RETURN(s->cache, store::CacheService::attach(*s->server, timing_clock(), s->cache_options));
    for (uint64_t k = 0; k < c.mix.key_space; ++k) {
      gen.write_key(k, std::span<char>(key.data(), key.size()));
      const auto w = static_cast<uint32_t>(store::key_route(key) % o.workers);
      if (s->cache->partition(w).set(key, value, 0, 0) != store::CacheStatus::kStored) {
        return internal_error("prefill: the cache refused key " + std::to_string(k));
      }
    }
  } else {
    store::PmKvOptions po;
    po.bucket_count = std::max<uint64_t>(1024, c.mix.key_space / o.workers);
    FERRY_ASSIGN_OR_RETURN(s->pmkv, store::PmKvService::attach(*s->server, *pm_host->domain, pm_host->data,
                                                                /*open_existing=*/false, po));
    for (uint64_t k = 0; k < c.mix.key_space; ++k) {
      gen.write_key(k, std::span<char>(key.data(), key.size()));
      const auto w = static_cast<uint32_t>(store::key_route(key) % o.workers);
      FERRY_RETURN_IF_ERROR(s->pmkv->partition(w).put(key, value));
    }
  }
  FERRY_RETURN_IF_ERROR(s->server->start());

  rpc::ClientOptions co;
  co.sessions = c.sessions;
  co.delegation = c.delegation;
  co.max_inflight = c.max_inflight;
  co.timeout_ns = 60'000'000'000ULL;
  FERRY_ASSIGN_OR_RETURN(s->client, rpc::Client::create(*s->engine, *s->client_nic, *s->server, co));
  for (uint32_t i = 0; i < c.sessions; ++i) {
    s->kv.push_back(std::make_unique<store::KvClient>(s->client->session(i), s->cache_options));
  }
  return s;
}

// ---- driving a point ----

struct Recorder;
struct Tally {
  Recorder* recorder = nullptr;
  Histogram hist;  // ns, measured requests of this operation
};

// What the client thread saw during a point. Measured requests: scheduled
// (open loop) or sent (closed loop) inside [window_start, window_end).
struct Recorder {
  Tally set, get;
  Histogram all;
  uint64_t window_start = UINT64_MAX;
  uint64_t window_end = UINT64_MAX;
  uint64_t committed_in_window = 0;  // commits at a time inside the window (throughput)
  uint64_t outstanding = 0;
  uint64_t failed = 0;
  Status first_failure;
  std::array<uint64_t, 5> commits{};  // by rpc::Commit
};

void on_commit(Tally* t, uint64_t at, const rpc::CallResult& r) {
  Recorder& rec = *t->recorder;
  const uint64_t now = now_ns();
  --rec.outstanding;
  if (!r.status.ok()) {
    ++rec.failed;
    if (rec.first_failure.ok()) rec.first_failure = r.status;
    return;
  }
  ++rec.commits[static_cast<size_t>(r.commit)];
  if (now >= rec.window_start && now < rec.window_end) ++rec.committed_in_window;
  if (at >= rec.window_start && at < rec.window_end) {
    const uint64_t latency = now > at ? now - at : 0;
    t->hist.record(latency);
    rec.all.record(latency);
  }
}

// Counters at the edges of the measured window.
struct Snapshot {
  uint64_t t = 0;
  nic::NicCounters server_nic, client_nic;
  rpc::WorkerCounters workers;
  uint64_t process_cpu_ns = 0;
  uint64_t client_cpu_ns = 0;
};
Snapshot snapshot(const Sut& s) {
  Snapshot n;
  n.t = now_ns();
  n.server_nic = s.server_nic->counters();
  n.client_nic = s.client_nic->counters();
  n.workers = s.server->counters();
  n.process_cpu_ns = process_cpu_time_ns();
  n.client_cpu_ns = thread_cpu_time_ns();
  return n;
}

struct Run {
  Recorder rec;
  Snapshot start, end;
  bool closed = false;
  double offered_per_s = 0;  // open loop
  uint64_t unfinished = 0;   // measured requests not committed when the drain cap ran out
  uint64_t backlog_max = 0;  // arrivals waiting for a free call slot, at most
  bool overflowed = false;   // the backlog filled: the window was cut short
  LoopGaps gaps;             // the client/NIC core's stalls inside the window
};

// Issues one request of the mix on session `i`; its latency runs from `at`.
class Issuer {
 public:
  Issuer(Sut& s, Recorder& rec, uint64_t seed)
      : s_(s), gen_(s.config.mix), rng_(seed), key_(s.config.mix.key_bytes, ' '), value_(s.config.mix.value_bytes, 'x') {
    rec.set.recorder = &rec;
    rec.get.recorder = &rec;
    rec_ = &rec;
  }
  bool has_room(uint32_t i) const { return s_.client->session(i).inflight() < s_.config.max_inflight; }
  Status issue(uint32_t i, uint64_t at) {
    const workload::KvRequest q = gen_.next(rng_);
    gen_.write_key(q.key_number, std::span<char>(key_.data(), key_.size()));
    const std::string_view value(value_.data(), q.value_bytes);
    const bool set = q.op == workload::OpType::kSet;
    Tally* t = set ? &rec_->set : &rec_->get;
    // Two words of capture: std::function keeps it inline, no allocation.
    rpc::Callback done = [t, at](const rpc::CallResult& r) { on_commit(t, at, r); };
    store::KvClient& kv = *s_.kv[i];
    Status st;
    if (s_.config.backend == Backend::kCache) {
      st = set ? kv.set_async(key_, value, 0, 0, /*nilext=*/true, std::move(done)) : kv.get_async(key_, std::move(done));
    } else {
      st = set ? kv.pm_put_async(key_, value, /*nilext=*/true, std::move(done)) : kv.pm_get_async(key_, std::move(done));
    }
    if (st.ok()) ++rec_->outstanding;
    return st;
  }

 private:
  Sut& s_;
  Recorder* rec_;
  workload::KvRequestGenerator gen_;
  Rng rng_;
  std::string key_;
  std::string value_;
};

void step_and_poll(Sut& s) {
  s.engine->step();
  for (uint32_t i = 0; i < s.config.sessions; ++i) s.client->session(i).poll();
}

// A fixed-capacity FIFO of scheduled arrival times, allocated and touched
// once for the run (a first touch of fresh pages inside a point costs a page
// fault each: on this kind of VM, milliseconds for a few megabytes).
class Backlog {
 public:
  explicit Backlog(size_t capacity) : ring_(capacity, 1) {}
  void clear() { head_ = tail_ = 0; }
  bool empty() const { return head_ == tail_; }
  size_t size() const { return tail_ - head_; }
  bool push(uint64_t t) {
    if (size() == ring_.size()) return false;
    ring_[tail_++ % ring_.size()] = t;
    return true;
  }
  uint64_t front() const { return ring_[head_ % ring_.size()]; }
  void pop() { ++head_; }

 private:
  std::vector<uint64_t> ring_;
  size_t head_ = 0, tail_ = 0;
};

// Closed loop: every session keeps max_inflight calls in flight; a call's
// latency runs from its send.
Result<Run> run_closed(Sut& s, double seconds, double warmup_seconds, uint64_t seed) {
  Run run;
  run.closed = true;
  Recorder& rec = run.rec;
  Issuer issuer(s, rec, seed);
  const uint64_t t0 = now_ns();
  rec.window_start = t0 + static_cast<uint64_t>(warmup_seconds * 1e9);
  rec.window_end = rec.window_start + static_cast<uint64_t>(seconds * 1e9);
  bool started = false, ended = false;
  for (;;) {
    const uint64_t now = now_ns();
    run.gaps.pass(now, started && !ended);
    if (!started && now >= rec.window_start) {
      run.start = snapshot(s);
      started = true;
    }
    if (!ended && now >= rec.window_end) {
      run.end = snapshot(s);
      ended = true;
    }
    if (!ended) {
      for (uint32_t i = 0; i < s.config.sessions; ++i) {
        while (issuer.has_room(i)) {
          Status st = issuer.issue(i, now);
          if (st.code() == Code::kResourceExhausted) break;
          FERRY_RETURN_IF_ERROR(st);
        }
      }
    } else if (rec.outstanding == 0) {
      break;
    } else if (now - rec.window_end > kDrainCapNs) {
      run.unfinished = rec.outstanding;
      break;
    }
    step_and_poll(s);
    if (rec.failed > 0) return internal_error("a call failed: " + rec.first_failure.to_string());
  }
  return run;
}

// Open loop: Poisson arrivals at `rate_per_s` over the client machine, each
// sent on the next session with a free call slot (waiting, in arrival order,
// when none has one); a call's latency runs from its scheduled arrival.
Result<Run> run_open(Sut& s, double rate_per_s, double seconds, double warmup_seconds, uint64_t seed,
                     Backlog& backlog) {
  Run run;
  run.offered_per_s = rate_per_s;
  Recorder& rec = run.rec;
  Issuer issuer(s, rec, seed);
  workload::PoissonArrivals arrivals(rate_per_s, seed ^ 0xA5A5A5A5ULL);
  backlog.clear();
  const uint64_t t0 = now_ns() + 1000;
  rec.window_start = t0 + static_cast<uint64_t>(warmup_seconds * 1e9);
  rec.window_end = rec.window_start + static_cast<uint64_t>(seconds * 1e9);
  uint64_t next = t0;
  uint32_t rr = 0;
  const uint32_t sessions = s.config.sessions;
  bool started = false, ended = false;
  for (;;) {
    const uint64_t now = now_ns();
    run.gaps.pass(now, started && !ended);
    while (next <= now && next < rec.window_end) {
      if (!backlog.push(next)) {
        // Far past the system's capacity: end the window here rather than
        // drop arrivals (which would lower the offered load unseen).
        rec.window_end = std::max(rec.window_start + 1, now);
        run.overflowed = true;
        break;
      }
      next += arrivals.next_gap_ns();
    }
    run.backlog_max = std::max<uint64_t>(run.backlog_max, backlog.size());
    while (!backlog.empty()) {
      uint32_t tried = 0;
      while (tried < sessions && !issuer.has_room(rr)) {
        rr = (rr + 1) % sessions;
        ++tried;
      }
      if (tried == sessions) break;
      Status st = issuer.issue(rr, backlog.front());
      if (st.code() == Code::kResourceExhausted) break;
      FERRY_RETURN_IF_ERROR(st);
      backlog.pop();
      rr = (rr + 1) % sessions;
    }
    if (!started && now >= rec.window_start) {
      run.start = snapshot(s);
      started = true;
    }
    if (!ended && now >= rec.window_end) {
      run.end = snapshot(s);
      ended = true;
    }
    if (ended) {
      if (backlog.empty() && rec.outstanding == 0) break;
      if (now - rec.window_end > kDrainCapNs) {
        run.unfinished = backlog.size() + rec.outstanding;
        break;
      }
    }
    step_and_poll(s);
    if (rec.failed > 0) return internal_error("a call failed: " + rec.first_failure.to_string());
  }
  if (run.unfinished > 0) {
    // Calls still in flight hold callbacks into `rec`: let them finish
    // before it goes (they are not measured: the window is over).
    const uint64_t stop = now_ns() + kDrainCapNs;
    while (rec.outstanding > 0 && now_ns() < stop) step_and_poll(s);
    if (rec.outstanding > 0) return internal_error("open loop: calls never committed");
  }
  return run;
}

// ---- points ----

struct Point {
  std::string experiment;  // threads, latency, pmkv, pmkv_value_size
  std::string system;
  std::string workload;
  std::string variant;  // mp-deleg, mp, deleg, plain
  Backend backend = Backend::kCache;
  bool multi_packet = true;
  bool delegation = true;
  uint32_t sessions = 1;
  uint32_t max_inflight = 1;
  KvMix mix;
  uint32_t queue_pairs = 0;
  uint32_t workers = 1;
  std::optional<double> offered_fraction;  // of `peak_mops`, open loop only
  double peak_mops = 0;                    // RawRPC's closed-loop peak on this workload
  Run run;
  double own_peak_mops = 0;                // this system's closed-loop peak on this workload
  double load_average = -1;                // the machine's, when the point started
  nlohmann::json ratios;   // filled in once the point's peers ran
  nlohmann::json targets;  // paper targets checked at this point
};

double window_seconds(const Run& r) { return static_cast<double>(r.end.t - r.start.t) / 1e9; }
double achieved_mops(const Run& r) {
  const double s = window_seconds(r);
  return s > 0 ? static_cast<double>(r.rec.committed_in_window) / s / 1e6 : 0.0;
}
std::optional<double> offered_mops(const Point& p) {
  if (p.run.closed) return std::nullopt;
  return p.run.offered_per_s / 1e6;
}
uint64_t executed(const Run& r) { return r.end.workers.requests - r.start.workers.requests; }
double server_cpu_ns_per_op(const Run& r) {
  const uint64_t n = executed(r);
  return n ? static_cast<double>(r.end.workers.busy_ns - r.start.workers.busy_ns) / static_cast<double>(n) : 0.0;
}
// Cores' worth of CPU the worker threads used (busy or polling): the
// process's CPU time less the client thread's, over the window.
double worker_cpu_cores(const Run& r) {
  const double s = window_seconds(r);
  const uint64_t proc = r.end.process_cpu_ns - r.start.process_cpu_ns;
  const uint64_t client = r.end.client_cpu_ns - r.start.client_cpu_ns;
  return s > 0 && proc > client ? static_cast<double>(proc - client) / (s * 1e9) : 0.0;
}
double client_cpu_ns_per_op(const Run& r) {
  const uint64_t n = r.rec.committed_in_window;
  return n ? static_cast<double>(r.end.client_cpu_ns - r.start.client_cpu_ns) / static_cast<double>(n) : 0.0;
}
double per_op(uint64_t a, uint64_t b, uint64_t ops) {
  return ops ? static_cast<double>(b - a) / static_cast<double>(ops) : 0.0;
}

nlohmann::json modeled_json(const Point& p) {
  const Run& r = p.run;
  const uint64_t ops = r.rec.committed_in_window;
  const nic::NicCounters& a = r.start.server_nic;
  const nic::NicCounters& b = r.end.server_nic;
  return {{"qpc_lookups_per_op", per_op(a.modeled_qpc_lookups, b.modeled_qpc_lookups, ops)},
          {"qpc_misses_per_op", per_op(a.modeled_qpc_misses, b.modeled_qpc_misses, ops)},
          {"qpc_miss_ratio", b.modeled_qpc_lookups > a.modeled_qpc_lookups
                                 ? static_cast<double>(b.modeled_qpc_misses - a.modeled_qpc_misses) /
                                       static_cast<double>(b.modeled_qpc_lookups - a.modeled_qpc_lookups)
                                 : 0.0},
          {"recv_wqe_dmas_per_op", per_op(a.modeled_recv_wqe_dmas, b.modeled_recv_wqe_dmas, ops)},
          {"note", "server NIC resource model: counters only, nothing runs slower for a miss"}};
}

nlohmann::json nic_json(const Point& p) {
  const Run& r = p.run;
  const uint64_t ops = r.rec.committed_in_window;
  const nic::NicCounters& a = r.start.server_nic;
  const nic::NicCounters& b = r.end.server_nic;
  const nic::NicCounters& ca = r.start.client_nic;
  const nic::NicCounters& cb = r.end.client_nic;
  return {{"server_rx_packets_per_op", per_op(a.rx_packets, b.rx_packets, ops)},
          {"server_tx_packets_per_op", per_op(a.tx_packets, b.tx_packets, ops)},
          {"server_rnr_naks_per_op", per_op(a.rnr_naks_sent, b.rnr_naks_sent, ops)},
          {"client_rnr_retries_per_op", per_op(ca.rnr_retries, cb.rnr_retries, ops)},
          {"client_retransmitted_packets", cb.retransmitted_packets - ca.retransmitted_packets}};
}

uint32_t o_workers(const Point& p) { return std::max<uint32_t>(1, p.workers); }

// Packets through the server NIC per committed request: on this emulator
// every packet costs the client core (which runs every NIC), so this, not the
// server CPU, is what sets each system's peak here.
double packets_per_op(const Point& p) {
  const uint64_t ops = p.run.rec.committed_in_window;
  const nic::NicCounters& a = p.run.start.server_nic;
  const nic::NicCounters& b = p.run.end.server_nic;
  return per_op(a.rx_packets, b.rx_packets, ops) + per_op(a.tx_packets, b.tx_packets, ops);
}

double server_busy(const Point& p) {
  const Run& r = p.run;
  return window_seconds(r) > 0 ? static_cast<double>(r.end.workers.busy_ns - r.start.workers.busy_ns) /
                                     (window_seconds(r) * 1e9 * o_workers(p))
                               : 0.0;
}

nlohmann::json op_json(const Tally& t) {
  return {{"samples", t.hist.count()},
          {"p50_us", percentile_json(t.hist, 0.50, kUs)},
          {"p99_us", percentile_json(t.hist, 0.99, kUs)},
          {"p999_us", percentile_json(t.hist, 0.999, kUs)}};
}

nlohmann::json commits_json(const Recorder& rec) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t k = 1; k < rec.commits.size(); ++k) {
    if (rec.commits[k] == 0) continue;
    std::string name = rpc::commit_name(static_cast<rpc::Commit>(k));
    std::replace(name.begin(), name.end(), '-', '_');
    j[name] = rec.commits[k];
  }
  return j;
}

std::string variant_name(bool mp, bool deleg) {
  if (mp && deleg) return "mp-deleg";
  if (mp) return "mp";
  if (deleg) return "deleg";
  return "plain";
}

// Where things ran, for every point.
struct Where {
  int client_cpu = -1;
  int server_cpu = -1;
  uint32_t workers = 1;
  nlohmann::json json() const {
    return {{"client_thread_cpu", client_cpu},
            {"client_thread_pinned", client_cpu >= 0},
            {"nic_engine", "manual, stepped by the client thread (it stands for the client machine and every host's "
                           "NIC hardware)"},
            {"server_workers", workers},
            {"server_worker_cpu", server_cpu},
            {"server_workers_pinned", server_cpu >= 0},
            {"cpu_load", "none"}};
  }
  std::string text() const {
    return fmt::format(
        "NIC engine: manual, stepped by the client thread ({}) -- it stands for the client machine and every host's "
        "NIC; server: {} worker thread(s) {}; CPU load: none",
        client_cpu >= 0 ? fmt::format("pinned to CPU {}", client_cpu) : "not pinned", workers,
        server_cpu >= 0 ? fmt::format("pinned to CPU {}", server_cpu) : "not pinned");
  }
};


nlohmann::json point_json(const Point& p, const Where& where, const nlohmann::json& reference) {
  const Run& r = p.run;
  const Histogram& h = r.rec.all;
  nlohmann::json j;
  j["experiment"] = p.experiment;
  j["system"] = p.system;
  j["workload"] = p.workload;
  j["engine"] = p.backend == Backend::kCache ? "cache" : "pmkv";
  j["loop"] = r.closed ? "closed" : "open";
  if (r.closed) {
    j["offered_mops"] = nullptr;
    j["offered_fraction"] = nullptr;
  } else {
    j["offered_mops"] = r.offered_per_s / 1e6;
    j["offered_fraction"] = *p.offered_fraction;
  }
  j["peak"] = p.peak_mops > 0
                  ? nlohmann::json{{"system", "rawrpc"},
                                   {"mops", p.peak_mops},
                                   {"how", "closed-loop saturation throughput of RawRPC on this workload, same run"}}
                  : nlohmann::json(nullptr);
  j["own_peak_mops"] = p.own_peak_mops > 0 ? nlohmann::json(p.own_peak_mops) : nlohmann::json(nullptr);
  j["offered_over_own_peak"] =
      !r.closed && p.own_peak_mops > 0 ? nlohmann::json(r.offered_per_s / 1e6 / p.own_peak_mops) : nlohmann::json(nullptr);
  j["achieved_mops"] = achieved_mops(r);
  j["server_executed_mops"] = window_seconds(r) > 0 ? static_cast<double>(executed(r)) / window_seconds(r) / 1e6 : 0.0;
  j["samples"] = h.count();
  j["avg_us"] = h.mean() * kUs;
  j["p50_us"] = percentile_json(h, 0.50, kUs);
  j["p95_us"] = percentile_json(h, 0.95, kUs);
  j["p99_us"] = percentile_json(h, 0.99, kUs);
  j["p999_us"] = percentile_json(h, 0.999, kUs);
  j["max_us"] = static_cast<double>(h.max()) * kUs;
  j["latency_from"] = r.closed ? "send" : "scheduled arrival";
  j["by_op"] = {{"set", op_json(r.rec.set)}, {"get", op_json(r.rec.get)}};
  j["commits"] = commits_json(r.rec);
  j["server_cpu_ns_per_op"] = server_cpu_ns_per_op(r);
  // Time the workers spent handling completions, as a fraction of the window
  // (1.0 = one worker core saturated): whether the server CPU set the pace.
  j["server_busy_fraction"] = server_busy(p);
  j["server_worker_cpu_cores"] = worker_cpu_cores(r);
  j["client_and_nic_cpu_ns_per_op"] = client_cpu_ns_per_op(r);
  j["threads"] = p.sessions;
  j["max_inflight"] = p.max_inflight;
  j["set_fraction"] = p.mix.set_fraction;
  j["key_bytes"] = p.mix.key_bytes;
  j["value_bytes"] = p.mix.value_bytes;
  j["request_bytes"] = request_bytes(p.mix);
  j["keys"] = p.mix.key_space;
  j["variant"] = p.variant;
  j["multi_packet"] = p.multi_packet;
  j["delegation"] = p.delegation;
  j["queue_pairs"] = p.queue_pairs;
  j["modeled"] = modeled_json(p);
  j["nic"] = nic_json(p);
  j["seconds"] = window_seconds(r);
  j["unfinished"] = r.unfinished;
  j["backlog_max"] = r.backlog_max;
  j["backlog_overflowed"] = r.overflowed;
  j["ratios"] = p.ratios.is_null() ? nlohmann::json::object() : p.ratios;
  if (!p.targets.is_null()) j["targets"] = p.targets;
  j["load_average_1m"] = p.load_average;
  j["client_core"] = {{"max_gap_us", static_cast<double>(r.gaps.max_ns) * kUs},
                      {"stalls_over_20us", r.gaps.stalls},
                      {"stalled_fraction", window_seconds(r) > 0 ? static_cast<double>(r.gaps.stalled_ns) /
                                                                        (window_seconds(r) * 1e9)
                                                                  : 0.0}};
  j["placement"] = where.json();
  j["reference"] = reference;
  j["timing_clock"] = timing_clock_name();
  add_provenance(j);
  return j;
}

std::string opt_text(const std::optional<double>& v, int decimals) {
  return v ? fmt::format("{:.{}f}", *v, decimals) : std::string("-");
}

void print_row(std::ostream& out, const Point& p) {
  const Run& r = p.run;
  const Histogram& h = r.rec.all;
  const std::string load =
      r.closed ? std::string("closed") : fmt::format("{:.0f}%", 100.0 * p.offered_fraction.value_or(0));
  const uint64_t ops = r.rec.committed_in_window;
  out << fmt::format(
      "  {:<10} {:<8} thr {} {:<6} offered {:>6} achieved {:>6.3f} Mops  n {:>6}  p50 {:>7} p99 {:>7} p99.9 {:>7} "
      "max {:>8.1f} us  srv {:>5.0f} ns/op  QPs {:>2}  modeled/op: qpc miss {:.2f} wqe dma {:.3f}  client core max "
      "stall {:.0f} us{}\n",
      p.system, p.variant, p.sessions, load, opt_text(offered_mops(p), 3), achieved_mops(r), h.count(),
      percentile_text(h, 0.5, kUs, 2), percentile_text(h, 0.99, kUs, 2), percentile_text(h, 0.999, kUs, 2),
      static_cast<double>(h.max()) * kUs, server_cpu_ns_per_op(r), p.queue_pairs,
      per_op(r.start.server_nic.modeled_qpc_misses, r.end.server_nic.modeled_qpc_misses, ops),
      per_op(r.start.server_nic.modeled_recv_wqe_dmas, r.end.server_nic.modeled_recv_wqe_dmas, ops),
      static_cast<double>(r.gaps.max_ns) * kUs, r.unfinished ? fmt::format("  UNFINISHED {}", r.unfinished) : std::string());
}

// ---- the benchmark ----

class OqBench {
 public:
  OqBench(OqBenchOptions o, std::ostream& out, std::ostream& text) : o_(std::move(o)), out_(out), text_(text) {}

  Status run();

 private:
  bool selected(const std::string& system) const { return has(o_.systems, system); }
  Result<PmHost*> pm_host() {
    if (!pm_) {
      FERRY_ASSIGN_OR_RETURN(pm_, make_pm_host(o_));
    }
    return pm_.get();
  }
  Backend backend_for(const std::string& experiment, const std::string& system) const {
    if (experiment == "threads") return system == "oq-durable" ? Backend::kPmKv : Backend::kCache;
    return experiment == "latency" ? Backend::kCache : Backend::kPmKv;
  }
  // Builds the system, runs one point (closed when fraction is empty), tears it down.
  Result<Point> measure(const std::string& experiment, const std::string& system, const std::string& workload,
                        const KvMix& mix, bool mp, bool deleg, uint32_t sessions, uint32_t inflight,
                        std::optional<double> fraction, double peak_mops);
  Point& keep(Point p) {
    print_row(text_, p);
    points_.push_back(std::move(p));
    return points_.back();
  }
  Status run_threads();
  Status run_latency_like(const std::string& experiment, const std::string& workload, const KvMix& mix,
                          const std::vector<std::string>& systems, const std::vector<double>& loads);
  Status run_latency();
  Status run_pmkv();
  void fill_ratios();
  void check_targets();
  const Point* find(const std::string& experiment, const std::string& workload, const std::string& system,
                    std::optional<double> fraction) const;
  double nearest_load(const std::vector<double>& loads, double want) const;

  OqBenchOptions o_;  // client_cpu and server_cpu: the placement actually used
  std::ostream& out_;
  std::ostream& text_;
  std::unique_ptr<PmHost> pm_;
  Backlog backlog_{1 << 20};
  std::vector<Point> points_;
  Where where_;
  nlohmann::json reference_;
  uint64_t seed_ = 0x0Bu;
  nlohmann::json targets_summary_ = nlohmann::json::array();
};

Result<Point> OqBench::measure(const std::string& experiment, const std::string& system, const std::string& workload,
                               const KvMix& mix, bool mp, bool deleg, uint32_t sessions, uint32_t inflight,
                               std::optional<double> fraction, double peak_mops) {
  SutConfig c;
  c.system = system;
  c.backend = backend_for(experiment, system);
  c.multi_packet = mp;
  c.delegation = deleg;
  c.sessions = sessions;
  c.max_inflight = inflight;
  c.mix = mix;
  PmHost* pm_host_ptr = nullptr;
  if (c.backend == Backend::kPmKv) {
    FERRY_ASSIGN_OR_RETURN(pm_host_ptr, pm_host());
  }
  FERRY_ASSIGN_OR_RETURN(auto sut, build_sut(c, o_, pm_host_ptr));
  Point p;
  p.experiment = experiment;
  p.system = system;
  p.workload = workload;
  p.variant = variant_name(mp, deleg);
  p.backend = c.backend;
  p.multi_packet = mp;
  p.delegation = deleg;
  p.sessions = sessions;
  p.max_inflight = inflight;
  p.mix = mix;
  p.queue_pairs = sut->client->queue_pairs();
  p.workers = o_.workers;
  p.offered_fraction = fraction;
  p.peak_mops = peak_mops;
  p.load_average = load_average();
  const uint64_t seed = ++seed_ * 0x9E3779B97F4A7C15ULL;
  if (!fraction) {
    FERRY_ASSIGN_OR_RETURN(p.run, run_closed(*sut, o_.closed_seconds, o_.warmup_seconds, seed));
  } else {
    const double rate = *fraction * peak_mops * 1e6;
    if (rate < 1.0) return internal_error("no peak to take a fraction of (RawRPC committed nothing)");
    const double seconds =
        std::clamp(static_cast<double>(o_.target_samples) / rate, o_.min_seconds, std::max(o_.min_seconds, o_.max_seconds));
    FERRY_ASSIGN_OR_RETURN(p.run, run_open(*sut, rate, seconds, o_.warmup_seconds, seed, backlog_));
  }
  return p;
}

const Point* OqBench::find(const std::string& experiment, const std::string& workload, const std::string& system,
                           std::optional<double> fraction) const {
  for (const Point& p : points_) {
    if (p.experiment != experiment || p.workload != workload || p.system != system) continue;
    if (p.offered_fraction.has_value() != fraction.has_value()) continue;
    if (fraction && std::abs(*p.offered_fraction - *fraction) > 1e-9) continue;
    return &p;
  }
  return nullptr;
}

double OqBench::nearest_load(const std::vector<double>& loads, double want) const {
  double best = loads.front();
  for (double l : loads) {
    if (std::abs(l - want) < std::abs(best - want)) best = l;
  }
  return best;
}

Status OqBench::run_threads() {
  text_ << "\nthreads (Fig. 6): closed loop, nilext puts, each session keeps " << o_.thread_inflight
        << " calls in flight; oq = cache set, oq-durable = PmKv put on JUNE BERRY-D, rawrpc = cache set\n";
  for (uint32_t value_bytes : o_.thread_value_bytes) {
    KvMix mix;
    mix.set_fraction = 1.0;
    mix.key_space = o_.keys;
    mix.key_bytes = 8;
    mix.value_bytes = value_bytes;
    mix.distribution = workload::KeyDistribution::kUniform;
    const std::string workload = fmt::format("put-{}B", value_bytes);
    text_ << fmt::format(" {} (request {} B)\n", workload, request_bytes(mix));
    for (uint32_t threads : o_.threads) {
      for (const std::string& system : kThreadSystems) {
        if (!selected(system)) continue;
        for (const std::string& v : o_.variants) {
          // RawRPC keeps the paper's optimizations (same codebase): one variant.
          if (system == "rawrpc" && v != "mp-deleg") continue;
          const bool mp = v == "mp-deleg" || v == "mp";
          const bool deleg = v == "mp-deleg" || v == "deleg";
          FERRY_ASSIGN_OR_RETURN(Point p, measure("threads", system, workload, mix, mp, deleg, threads,
                                                  o_.thread_inflight, std::nullopt, 0.0));
          keep(std::move(p));
        }
      }
    }
  }
  return ok_status();
}

// The peak (RawRPC, closed loop) and then every load for every system,
// interleaved per load (the order of systems rotates from load to load).
Status OqBench::run_latency_like(const std::string& experiment, const std::string& workload, const KvMix& mix,
                                 const std::vector<std::string>& systems, const std::vector<double>& loads) {
  std::vector<std::string> chosen;
  for (const std::string& s : systems) {
    if (selected(s)) chosen.push_back(s);
  }
  // The peak the fractions refer to is RawRPC's even if RawRPC's own points
  // were not asked for; the other systems' closed-loop peaks come along.
  double peak = 0;
  for (const std::string& s : systems) {
    if (s != "rawrpc" && !selected(s)) continue;
    FERRY_ASSIGN_OR_RETURN(Point p, measure(experiment, s, workload, mix, true, true, o_.sessions, o_.max_inflight,
                                            std::nullopt, 0.0));
    if (s == "rawrpc") peak = achieved_mops(p.run);
    keep(std::move(p));
  }
  for (Point& p : points_) {
    if (p.experiment == experiment && p.workload == workload && p.run.closed) p.peak_mops = peak;
  }
  auto own_peak = [&](const std::string& system) {
    const Point* c = find(experiment, workload, system, std::nullopt);
    return c != nullptr ? achieved_mops(c->run) : 0.0;
  };
  for (size_t li = 0; li < loads.size(); ++li) {
    for (size_t k = 0; k < chosen.size(); ++k) {
      const std::string& s = chosen[(k + li) % chosen.size()];
      FERRY_ASSIGN_OR_RETURN(Point p, measure(experiment, s, workload, mix, true, true, o_.sessions,
                                              o_.open_inflight, loads[li], peak));
      p.own_peak_mops = own_peak(s);
      keep(std::move(p));
    }
  }
  return ok_status();
}

Status OqBench::run_latency() {
  text_ << "\nlatency (Figs. 7-8): cache engine, Twitter clusters (Table 1), open-loop Poisson at fractions of "
           "RawRPC's measured peak; latency from the scheduled arrival to the commit\n";
  for (uint32_t id : o_.clusters) {
    FERRY_ASSIGN_OR_RETURN(const workload::TwitterCluster cl, workload::twitter_cluster(static_cast<int>(id)));
    const KvMix mix = workload::twitter_mix(cl, o_.keys);
    const std::string workload = fmt::format("cluster-{}", id);
    text_ << fmt::format(" {}: {:.0f}% set, key {} B, value {} B, Zipf {}\n", workload, cl.set_ratio * 100,
                         cl.key_bytes, cl.value_bytes, cl.zipf_alpha);
    FERRY_RETURN_IF_ERROR(run_latency_like("latency", workload, mix, kLatencySystems, o_.loads));
  }
  return ok_status();
}

Status OqBench::run_pmkv() {
  text_ << "\npmkv (Figs. 9-10): PmKv (durable, in PM), 8 B keys, 91 B values, Zipf 0.99; oq-durable = JUNE BERRY-D; "
           "open-loop Poisson at fractions of RawRPC's measured peak\n";
  for (double put : o_.put_percents) {
    const KvMix mix = workload::pmemkv_mix(put / 100.0, o_.keys);
    const std::string workload = fmt::format("pmemkv-put{:g}", put);
    text_ << fmt::format(" {}: {:g}% put\n", workload, put);
    FERRY_RETURN_IF_ERROR(run_latency_like("pmkv", workload, mix, kPmSystems, o_.pm_loads));
  }
  text_ << fmt::format("\npmkv value-size sweep (Fig. 11): {:g}% put, 8 B keys; peak throughput (closed loop) and "
                       "latency at {:.0f}% of RawRPC's peak for each size\n",
                       o_.sweep_put_percent, o_.sweep_load * 100);
  for (uint32_t size : o_.value_sizes) {
    KvMix mix = workload::pmemkv_mix(o_.sweep_put_percent / 100.0, o_.keys);
    mix.value_bytes = size;
    const std::string workload = fmt::format("pmemkv-put{:g}-value{}B", o_.sweep_put_percent, size);
    text_ << fmt::format(" {}\n", workload);
    FERRY_RETURN_IF_ERROR(run_latency_like("pmkv_value_size", workload, mix, kPmSystems, {o_.sweep_load}));
  }
  return ok_status();
}

nlohmann::json ratio(const Point& p, const Point* base, double q) {
  if (base == nullptr || !percentile_reportable(p.run.rec.all, q) || !percentile_reportable(base->run.rec.all, q)) {
    return nullptr;
  }
  return static_cast<double>(p.run.rec.all.percentile(q)) /
         static_cast<double>(std::max<uint64_t>(1, base->run.rec.all.percentile(q)));
}

void OqBench::fill_ratios() {
  for (Point& p : points_) {
    if (p.experiment == "threads") {
      const Point* raw = nullptr;
      for (const Point& b : points_) {
        if (b.experiment == "threads" && b.workload == p.workload && b.system == "rawrpc" && b.sessions == p.sessions) {
          raw = &b;
        }
      }
      if (raw != nullptr && achieved_mops(raw->run) > 0) {
        p.ratios = {{"mops_over_rawrpc", achieved_mops(p.run) / achieved_mops(raw->run)}};
      }
      continue;
    }
    const Point* raw = find(p.experiment, p.workload, "rawrpc", p.offered_fraction);
    const Point* def = find(p.experiment, p.workload, "deferred", p.offered_fraction);
    nlohmann::json r = nlohmann::json::object();
    for (const auto& [name, base] : {std::pair<const char*, const Point*>{"rawrpc", raw}, {"deferred", def}}) {
      if (base == nullptr || base == &p) continue;
      r[std::string("p50_over_") + name] = ratio(p, base, 0.5);
      r[std::string("p99_over_") + name] = ratio(p, base, 0.99);
      r[std::string("p999_over_") + name] = ratio(p, base, 0.999);
    }
    p.ratios = r;
  }
}

// The paper's claims, checked on this run's numbers: "at least X % below"
// is measured / baseline <= 1 - X.
void OqBench::check_targets() {
  struct Target {
    std::string name, experiment, workload, system, baseline;
    double quantile;
    double required_reduction;  // fraction
    double at_load;
    std::string paper;
  };
  const std::vector<Target> targets = {
      {"cluster-31 OQ median vs RawRPC", "latency", "cluster-31", "oq", "rawrpc", 0.5, 0.85, 0.8,
       "Fig. 7: 90.70% lower median than RawRPC at peak"},
      {"cluster-31 OQ p99 vs DeferredExec", "latency", "cluster-31", "oq", "deferred", 0.99, 0.40, 0.8,
       "Fig. 8: up to 42.86% lower p99 than DeferredExec"},
      {"write-only PmKv JUNE BERRY-D median vs RawRPC", "pmkv", "pmemkv-put100", "oq-durable", "rawrpc", 0.5, 0.50,
       0.8, "Fig. 9: 57.08% lower median than RawRPC"},
  };
  for (const Target& t : targets) {
    const std::vector<double>& loads = t.experiment == "pmkv" ? o_.pm_loads : o_.loads;
    if (loads.empty()) continue;
    const double load = nearest_load(loads, t.at_load);
    Point* p = nullptr;
    for (Point& c : points_) {
      if (c.experiment == t.experiment && c.workload == t.workload && c.system == t.system && c.offered_fraction &&
          std::abs(*c.offered_fraction - load) < 1e-9) {
        p = &c;
      }
    }
    const Point* base = find(t.experiment, t.workload, t.baseline, load);
    if (p == nullptr || base == nullptr) continue;
    nlohmann::json j;
    j["name"] = t.name;
    j["paper"] = t.paper;
    j["offered_fraction"] = load;
    j["quantile"] = t.quantile;
    j["baseline"] = t.baseline;
    j["required_reduction"] = t.required_reduction;
    const nlohmann::json r = ratio(*p, base, t.quantile);
    if (r.is_null()) {
      j["measured_reduction"] = nullptr;
      j["met"] = nullptr;  // too few samples to say
    } else {
      const double reduction = 1.0 - r.get<double>();
      j["measured_reduction"] = reduction;
      j["met"] = reduction >= t.required_reduction;
      j["short_by"] = std::max(0.0, t.required_reduction - reduction);
    }
    j["system_us"] = percentile_json(p->run.rec.all, t.quantile, kUs);
    j["baseline_us"] = percentile_json(base->run.rec.all, t.quantile, kUs);
    if (p->targets.is_null()) p->targets = nlohmann::json::array();
    p->targets.push_back(j);
    targets_summary_.push_back(j);
  }
}

Status OqBench::run() {
  const int client_cpu = usable_cpu(o_.client_cpu);
  const int server_cpu = usable_cpu(o_.server_cpu);
  if (client_cpu >= 0) FERRY_RETURN_IF_ERROR(pin_current_thread(client_cpu));
  where_ = Where{client_cpu, server_cpu, o_.workers};
  o_.client_cpu = client_cpu;
  o_.server_cpu = server_cpu;

  text_ << "ferry bench oq: JUNE BERRY (NSDI'25) §6 -- Ordered Queue vs RawRPC and DeferredExec on the same RPC code, "
           "same run\n"
        << "  " << where_.text() << "\n"
        << "  machine: " << machine_description() << "; timing clock: " << timing_clock_name() << "\n"
        << fmt::format("  latency, pmkv: {} sessions, {} calls in flight each for the peaks (closed loop), up to {} "
                       "each under open-loop load; {} keys prefilled; open-loop points aim for {} samples in {}-{} s "
                       "after {} s warm-up; p99 needs 1,000 samples and p99.9 10,000, else n/a\n",
                       o_.sessions, o_.max_inflight, o_.open_inflight, o_.keys, o_.target_samples, o_.min_seconds,
                       o_.max_seconds, o_.warmup_seconds)
        << fmt::format("  modeled server-NIC QP-context cache: {} entries (counters only)\n", o_.qp_context_entries);

  // The physical references of this run: a cross-core round trip between the
  // client and server CPUs (the floor of any reply that crosses to a worker),
  // and how often the client/NIC core loses its CPU.
  const Histogram rtt = pingpong_rtt(client_cpu, server_cpu, 20000);
  if (client_cpu >= 0) FERRY_RETURN_IF_ERROR(pin_current_thread(client_cpu));
  const CpuStalls stalls = cpu_stalls(0.3);
  reference_ = {{"pingpong_rtt_p50_ns", rtt.percentile(0.5)},
                {"pingpong_rtt_p99_ns", rtt.percentile(0.99)},
                {"cpu_stalls_per_second", stalls.per_second},
                {"cpu_stall_p50_us", static_cast<double>(stalls.gaps.percentile(0.5)) * kUs},
                {"cpu_stall_max_us", static_cast<double>(stalls.gaps.max()) * kUs},
                {"cpu_stolen_fraction", stalls.stolen_fraction}};
  text_ << fmt::format("  reference: client<->server CPU ping-pong p50 {} ns, p99 {} ns; the client/NIC core loses "
                       "the CPU {:.0f} times a second (max {:.0f} us)\n",
                       rtt.percentile(0.5), rtt.percentile(0.99), stalls.per_second,
                       static_cast<double>(stalls.gaps.max()) * kUs);

  if (has(o_.experiments, "threads")) FERRY_RETURN_IF_ERROR(run_threads());
  if (has(o_.experiments, "latency")) FERRY_RETURN_IF_ERROR(run_latency());
  if (has(o_.experiments, "pmkv")) FERRY_RETURN_IF_ERROR(run_pmkv());
  fill_ratios();
  check_targets();

  // The headline: the paper's targets, met or not, from this run.
  text_ << "\nheadline (same run):\n";
  for (uint32_t value_bytes : o_.thread_value_bytes) {
    if (!has(o_.experiments, "threads")) break;
    const std::string workload = fmt::format("put-{}B", value_bytes);
    for (const Point& p : points_) {
      if (p.experiment != "threads" || p.workload != workload || p.variant != "mp-deleg") continue;
      if (p.sessions != o_.threads.front() && p.sessions != o_.threads.back()) continue;
      text_ << fmt::format("  Fig. 6 {:<9} {:<10} {} thread(s): {:.3f} Mops, {} QPs, modeled qpc misses/op {:.2f}\n",
                           workload, p.system, p.sessions, achieved_mops(p.run), p.queue_pairs,
                           modeled_json(p)["qpc_misses_per_op"].get<double>());
    }
  }
  if (targets_summary_.empty() && (has(o_.experiments, "latency") || has(o_.experiments, "pmkv"))) {
    text_ << "  paper targets: not checked (their systems, workloads or loads were not run)\n";
  }
  for (const nlohmann::json& t : targets_summary_) {
    // "84.6% lower", or for a slower system "3.2x higher".
    const auto pct = [](const nlohmann::json& v) {
      if (v.is_null()) return std::string("n/a");
      const double reduction = v.get<double>();
      if (reduction >= 0) return fmt::format("{:.1f}% lower", reduction * 100);
      return fmt::format("{:.1f}x higher", 1.0 - reduction);
    };
    const auto us_text = [](const nlohmann::json& v) {
      return v.is_null() ? std::string("n/a") : fmt::format("{:.2f}", v.get<double>());
    };
    std::string verdict = "NOT CHECKED (too few samples)";
    if (!t["met"].is_null()) {
      const bool slower = !t["measured_reduction"].is_null() && t["measured_reduction"].get<double>() < 0;
      verdict = t["met"].get<bool>() ? "MET"
                : slower             ? std::string("MISSED (slower than the baseline)")
                                     : fmt::format("MISSED (short by {:.1f} points)", t["short_by"].get<double>() * 100);
    }
    text_ << fmt::format("  target: {} at {:.0f}% of peak: {} us vs {} us, {} (needs >= {:.0f}% lower): {}  [{}]\n",
                         t["name"].get<std::string>(), t["offered_fraction"].get<double>() * 100,
                         us_text(t["system_us"]), us_text(t["baseline_us"]), pct(t["measured_reduction"]),
                         t["required_reduction"].get<double>() * 100, verdict, t["paper"].get<std::string>());
  }
  // Write-only PmKv at every load, with JUNE BERRY-D's load against its own
  // closed-loop peak: past it, its latency is queueing, not the protocol.
  for (const Point& raw_peak : points_) {
    if (raw_peak.experiment != "pmkv" || raw_peak.system != "rawrpc" || !raw_peak.run.closed ||
        raw_peak.mix.set_fraction != 1.0) {
      continue;
    }
    const Point* own = find("pmkv", raw_peak.workload, "oq-durable", std::nullopt);
    if (own == nullptr) continue;
    std::string line = fmt::format(
        "  {} peaks: rawrpc {:.3f} Mops ({:.2f} server-NIC packets/op, server worker {:.0f}% busy), oq-durable {:.3f} "
        "Mops ({:.2f} packets/op, {:.0f}% busy); oq-durable p50 / rawrpc p50 by load:",
        raw_peak.workload, achieved_mops(raw_peak.run), packets_per_op(raw_peak), server_busy(raw_peak) * 100,
        achieved_mops(own->run), packets_per_op(*own), server_busy(*own) * 100);
    for (double l : o_.pm_loads) {
      const Point* d = find("pmkv", raw_peak.workload, "oq-durable", l);
      const Point* r = find("pmkv", raw_peak.workload, "rawrpc", l);
      if (d == nullptr || r == nullptr) continue;
      const nlohmann::json q = ratio(*d, r, 0.5);
      line += fmt::format(" {:.0f}%: {}{}", l * 100, q.is_null() ? "n/a" : fmt::format("{:.2f}", q.get<double>()),
                          d->run.offered_per_s / 1e6 > achieved_mops(own->run) ? " (past its peak)" : "");
    }
    text_ << line << "\n";
  }
  if (o_.json) {
    for (const Point& p : points_) out_ << point_json(p, where_, reference_).dump() << "\n";
    out_ << std::flush;
  }
  return ok_status();
}

Status validate(const OqBenchOptions& o) {
  for (const auto& e : o.experiments) {
    if (!has(kExperiments, e)) return invalid_argument("unknown experiment '" + e + "' (threads, latency, pmkv)");
  }
  for (const auto& s : o.systems) {
    if (!has(kSystems, s)) return invalid_argument("unknown system '" + s + "' (oq, oq-durable, deferred, rawrpc)");
  }
  for (const auto& v : o.variants) {
    if (!has(kVariants, v)) return invalid_argument("unknown variant '" + v + "' (mp-deleg, mp, deleg, plain)");
  }
  if (o.experiments.empty() || o.systems.empty()) return invalid_argument("no experiment or no system to run");
  for (uint32_t id : o.clusters) {
    if (!workload::twitter_cluster(static_cast<int>(id)).ok()) {
      return invalid_argument("unknown Twitter cluster " + std::to_string(id) + " (12, 19, 27, 31)");
    }
  }
  for (const auto* loads : {&o.loads, &o.pm_loads}) {
    for (double l : *loads) {
      if (!(l > 0 && l <= 2)) return invalid_argument(fmt::format("load {} is not a fraction of the peak in (0, 2]", l));
    }
    if (loads->empty()) return invalid_argument("--loads and --pm-loads need at least one fraction each");
  }
  for (double p : o.put_percents) {
    if (!(p >= 0 && p <= 100)) return invalid_argument(fmt::format("put ratio {} is not a percentage in 0..100", p));
  }
  if (!(o.sweep_put_percent >= 0 && o.sweep_put_percent <= 100)) {
    return invalid_argument("--sweep-put-ratio must be a percentage in 0..100");
  }
  if (!(o.sweep_load > 0 && o.sweep_load <= 2)) return invalid_argument("--sweep-load must be in (0, 2]");
  for (uint32_t v : o.value_sizes) {
    if (v > 8192) return invalid_argument(fmt::format("value size {} is above 8192 bytes", v));
  }
  for (uint32_t v : o.thread_value_bytes) {
    if (v > 8192) return invalid_argument(fmt::format("value size {} is above 8192 bytes", v));
  }
  if (o.workers < 1 || o.workers > 8) return invalid_argument("--workers must be 1..8");
  if (o.sessions < 1 || o.max_inflight < 1 || o.open_inflight < 1 || o.thread_inflight < 1) {
    return invalid_argument("--sessions, --inflight, --open-inflight and --thread-inflight must be at least 1");
  }
  uint32_t max_threads = 0;
  for (uint32_t t : o.threads) max_threads = std::max(max_threads, t);
  if (uint64_t{o.sessions} * std::max(o.max_inflight, o.open_inflight) > kMaxCallsInFlight ||
      uint64_t{max_threads} * o.thread_inflight > kMaxCallsInFlight) {
    return invalid_argument(fmt::format("at most {} calls in flight on the client machine (sessions x inflight)",
                                        kMaxCallsInFlight));
  }
  if (o.keys < 16) return invalid_argument("--keys must be at least 16");
  if (!(o.closed_seconds > 0) || !(o.min_seconds > 0) || !(o.max_seconds > 0) || !(o.warmup_seconds >= 0)) {
    return invalid_argument("point durations must be positive");
  }
  if (o.target_samples < 1) return invalid_argument("--samples must be at least 1");
  if (o.pm_region_bytes < (4u << 20)) return invalid_argument("--pm-region-mib must be at least 4");
  return ok_status();
}

}  // namespace

OqBenchOptions oq_quick_options() {
  OqBenchOptions q;
  q.threads = {1, 4};
  q.thread_value_bytes = {64};
  q.variants = {"mp-deleg", "plain"};
  q.clusters = {31};
  q.loads = {0.5, 0.8};
  q.pm_loads = {0.2, 0.8};
  q.put_percents = {100, 0};
  q.value_sizes = {64, 1024};
  q.keys = 2000;
  q.closed_seconds = 0.1;
  q.min_seconds = 0.05;
  q.max_seconds = 0.3;
  q.target_samples = 2000;
  q.warmup_seconds = 0.02;
  q.pm_region_bytes = 32ull << 20;
  return q;
}

Status run_oq_bench(const OqBenchOptions& options, std::ostream& out, std::ostream& log) {
  FERRY_RETURN_IF_ERROR(validate(options));
  OqBench bench(options, out, options.json ? log : out);
  return bench.run();
}

}  // namespace ferry::bench
