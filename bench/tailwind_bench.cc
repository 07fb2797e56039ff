// `ferry bench tailwind`: see tailwind_bench.h.
#include "tailwind_bench.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/common/rng.h"
#include "ferry/nic/engine.h"
#include "ferry/rpc/client.h"
#include "ferry/store/logkv.h"
#include "ferry/workload/arrivals.h"
#include "ferry/workload/kv_mix.h"
#include "report.h"
#include "ferry/store/logkv_wire.h"

namespace ferry::bench {
namespace {

namespace logkv = store::logkv;
using workload::KvMix;

uint64_t now_ns() { return timing_clock().now_ns(); }

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Calls in flight per server connection, at most (the client's slots).
constexpr uint32_t kSlotsPerServer = 256;
// Open loop: calls in flight over the client machine, at most; arrivals
// beyond it wait in the backlog (their wait counts in their latency).
constexpr uint32_t kOpenInflight = 256;
// After a window, calls still in flight are waited for this long.
constexpr uint64_t kDrainCapNs = 10'000'000'000ULL;

tailwind::Replication replication_of(const std::string& system) {
  return system == "tailwind" ? tailwind::Replication::kTailwind : tailwind::Replication::kRpc;
}

Result<KvMix> mix_of(const std::string& workload, const TailwindBenchOptions& o) {
  if (workload == "ycsb-a" || workload == "ycsb-b" || workload == "ycsb-c") {
    return workload::ycsb_mix(static_cast<char>(std::toupper(workload.back())), o.keys, o.key_bytes, o.value_bytes);
  }
  if (workload == "write-only") {
    FERRY_ASSIGN_OR_RETURN(KvMix m, workload::ycsb_mix('A', o.keys, o.key_bytes, o.value_bytes));
    m.set_fraction = 1.0;
    return m;
  }
  return invalid_argument("unknown workload '" + workload + "' (ycsb-a, ycsb-b, ycsb-c, write-only)");
}

// ---- the system under test: a LogKv cluster and the benchmark's client ----

struct Sut {
  std::string system;
  std::unique_ptr<logkv::Cluster> cluster;
  nic::Engine* engine = nullptr;
  nic::Nic* client_nic = nullptr;
  std::vector<std::unique_ptr<rpc::Client>> rpcs;  // one per server
  uint64_t table = 0;
  logkv::TableMap map;
  uint32_t workers = 1;

  ~Sut() {
    if (engine != nullptr) engine->release_manual_driver();
    rpcs.clear();
    cluster.reset();
  }

  void step_and_poll() {
    engine->step();
    for (auto& c : rpcs) c->session(0).poll();
  }

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

Result<std::unique_ptr<Sut>> build_sut(const std::string& system, const TailwindBenchOptions& o, const std::string& dir) {
  auto s = std::make_unique<Sut>();
  s->system = system;
  s->workers = o.workers;
  logkv::ClusterOptions co;
  co.servers = o.servers;
  co.dir = dir;
  co.engine.threaded = false;  // stepped by the client thread: see tailwind_bench.h
  // Four tablets per server: a crashed server's tablets then go to several
  // recovery masters, which restore them in parallel.
  co.tablets_per_table = 4 * o.servers;
  co.server.workers = o.workers;
  co.server.replication = replication_of(system);
  co.server.replicas = o.replicas;
  co.server.segment_bytes = o.segment_bytes;
  co.server.media = tailwind::BufferMedia::kDram;
  co.server.flush = false;  // DRAM (battery-backed) buffers: nothing to flush
  co.server.backup_buffers = o.backup_buffers;
  co.server.max_request_bytes = std::max<uint32_t>(1024, o.key_bytes + o.value_bytes + 64);
  if (o.server_cpu >= 0) co.server.worker_cpus = {o.server_cpu};
  FERRY_ASSIGN_OR_RETURN(s->cluster, logkv::Cluster::create(co));
  s->engine = &s->cluster->engine();
  nic::NicOptions no;
  no.name = "bench-client";
  FERRY_ASSIGN_OR_RETURN(s->client_nic, s->engine->add_nic(no));
  for (uint32_t i = 0; i < o.servers; ++i) {
    rpc::ClientOptions rco;
    rco.sessions = 1;
    rco.max_inflight = kSlotsPerServer;
    FERRY_ASSIGN_OR_RETURN(auto c, rpc::Client::create(*s->engine, *s->client_nic, s->cluster->server(i).rpc(), rco));
    s->rpcs.push_back(std::move(c));
  }
  // From here this thread steps the engine while the servers' threads
  // register and deregister segments: their NIC control operations run in
  // its steps, so the NIC's state has one writer.
  s->engine->set_manual_driver();
  FERRY_ASSIGN_OR_RETURN(s->table, s->cluster->create_table("bench"));
  FERRY_ASSIGN_OR_RETURN(s->map, s->cluster->table(s->table));
  return s;
}

// ---- measuring ----

struct Recorder {
  Histogram all, put, get;
  uint64_t window_start = UINT64_MAX;
  uint64_t window_end = UINT64_MAX;
  uint64_t committed_in_window = 0;
  uint64_t puts_in_window = 0;
  uint64_t outstanding = 0;
  uint64_t failed = 0;
  std::string first_failure;
};

struct Tag {
  Recorder* rec;
  uint64_t at;
  bool put;
};

void on_reply(const Tag& tag, const rpc::CallResult& r) {
  Recorder& rec = *tag.rec;
  const uint64_t now = now_ns();
  --rec.outstanding;
  if (!r.status.ok() || r.app_status != logkv::kOk) {
    ++rec.failed;
    if (rec.first_failure.empty()) {
      rec.first_failure = r.status.ok() ? "reply status " + std::to_string(r.app_status) : r.status.to_string();
    }
    return;
  }
  if (now >= rec.window_start && now < rec.window_end) {
    ++rec.committed_in_window;
    rec.puts_in_window += tag.put;
  }
  if (tag.at >= rec.window_start && tag.at < rec.window_end) {
    const uint64_t latency = now > tag.at ? now - tag.at : 0;
    rec.all.record(latency);
    (tag.put ? rec.put : rec.get).record(latency);
  }
}

// Issues requests of a mix, over a subset of the key space (`keys`: the key
// numbers that may be drawn; empty: all of them).
class Issuer {
 public:
  Issuer(Sut& s, const KvMix& mix, const std::vector<uint64_t>* keys, uint64_t seed)
      : s_(s),
        keys_(keys),
        rng_(seed),
        gen_(over(mix, keys)),
        names_(mix),
        key_(mix.key_bytes, ' '),
        value_(mix.value_bytes, 'v') {}
  // kResourceExhausted: that server connection is full (poll and retry).
  Status issue(Recorder& rec, uint64_t at) {
    const workload::KvRequest q = gen_.next(rng_);
    const uint64_t number = keys_ != nullptr ? (*keys_)[q.key_number] : q.key_number;
    return send(rec, number, q.op == workload::OpType::kSet, at);
  }
  Status send(Recorder& rec, uint64_t key_number, bool put, uint64_t at) {
    const std::span<const uint8_t> key = render(key_number);
    const uint64_t hash = logkv::key_hash(s_.table, key);
    const uint32_t server = s_.map.owner_of(hash);
    const std::span<const uint8_t> value(reinterpret_cast<const uint8_t*>(value_.data()), put ? value_.size() : 0);
    const std::vector<uint8_t> payload = logkv::encode_request(s_.table, key, value, std::nullopt);
    const Tag tag{&rec, at, put};
    Status st = s_.rpcs[server]->session(0).call_async(put ? logkv::kLogKvPut : logkv::kLogKvGet,
                                                       hash % s_.workers, payload, /*nilext=*/false,
                                                       [tag](const rpc::CallResult& r) { on_reply(tag, r); });
    if (st.ok()) ++rec.outstanding;
    return st;
  }
  // The server that owns a key number's tablet.
  uint32_t owner(uint64_t key_number) { return s_.map.owner_of(logkv::key_hash(s_.table, render(key_number))); }

 private:
  // The mix drawn from: over the subset's positions when there is one.
  static KvMix over(KvMix mix, const std::vector<uint64_t>* keys) {
    if (keys != nullptr) mix.key_space = keys->size();
    return mix;
  }
  // The key named `key_number` of the whole space, in key_.
  std::span<const uint8_t> render(uint64_t key_number) {
    names_.write_key(key_number, std::span<char>(key_.data(), key_.size()));
    return {reinterpret_cast<const uint8_t*>(key_.data()), key_.size()};
  }

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
  uint64_t t = 0;
  std::vector<rpc::WorkerCounters> client_workers;  // per server, summed
  std::vector<rpc::WorkerCounters> backup_worker;   // per server
  std::vector<tailwind::BackupCounters> backups;
  uint64_t client_cpu_ns = 0;
};

Snapshot snapshot(Sut& s) {
  Snapshot n;
  n.t = now_ns();
  for (uint32_t i = 0; i < s.cluster->servers(); ++i) {
    logkv::Server& srv = s.cluster->server(i);
    rpc::WorkerCounters c;
    for (uint32_t w = 0; w < s.workers; ++w) c += srv.rpc().counters(w);
    n.client_workers.push_back(c);
    n.backup_worker.push_back(srv.rpc().counters(s.workers));
    // The backup's mutex may be held by a worker whose memory
    // (de)registration waits for this thread's next step: keep stepping.
    std::optional<tailwind::BackupCounters> b;
    while (!(b = srv.backup().try_counters())) s.engine->step();
    n.backups.push_back(*b);
  }
  n.client_cpu_ns = thread_cpu_time_ns();
  return n;
}

struct Run {
  Recorder rec;
  Snapshot start, end;
  double offered_per_s = 0;  // open loop
  uint64_t unfinished = 0;
  bool overflowed = false;
  LoopGaps gaps;
};

Status drain(Sut& s, Run& run) {
  const uint64_t stop = now_ns() + kDrainCapNs;
  while (run.rec.outstanding > 0 && now_ns() < stop) s.step_and_poll();
  if (run.rec.outstanding > 0) return internal_error("calls never completed");
  return ok_status();
}

// Closed loop: `clients` requests in flight; a request's latency runs from its send.
Result<Run> run_closed(Sut& s, Issuer& issuer, uint32_t clients, double seconds, double warmup) {
  Run run;
  Recorder& rec = run.rec;
  const uint64_t t0 = now_ns();
  rec.window_start = t0 + static_cast<uint64_t>(warmup * 1e9);
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
    if (ended) break;
    while (rec.outstanding < clients) {
      Status st = issuer.issue(rec, now);
      if (st.code() == Code::kResourceExhausted) break;
      FERRY_RETURN_IF_ERROR(st);
    }
    s.step_and_poll();
    if (rec.failed > 0) return internal_error("a request failed: " + rec.first_failure);
  }
  FERRY_RETURN_IF_ERROR(drain(s, run));
  if (rec.failed > 0) return internal_error("a request failed: " + rec.first_failure);
  return run;
}

// Open loop: Poisson arrivals at `rate_per_s`; a request's latency runs from
// its scheduled arrival, so waiting for a free call slot is charged to it.
Result<Run> run_open(Sut& s, Issuer& issuer, double rate_per_s, const TailwindBenchOptions& o, uint64_t seed) {
  Run run;
  run.offered_per_s = rate_per_s;
  Recorder& rec = run.rec;
  workload::PoissonArrivals arrivals(rate_per_s, seed);
  std::vector<uint64_t> backlog;  // scheduled arrival times not yet sent (FIFO via head)
  backlog.reserve(1 << 16);
  size_t head = 0;
  const double want_seconds = std::clamp(static_cast<double>(o.target_samples) / rate_per_s, o.min_seconds, o.max_seconds);
  const uint64_t t0 = now_ns() + 1000;
  rec.window_start = t0 + static_cast<uint64_t>(o.warmup_seconds * 1e9);
  rec.window_end = rec.window_start + static_cast<uint64_t>(want_seconds * 1e9);
  uint64_t next = t0;
  bool started = false, ended = false;
  for (;;) {
    const uint64_t now = now_ns();
    run.gaps.pass(now, started && !ended);
    while (next <= now && next < rec.window_end) {
      if (backlog.size() - head > 200000) {  // far past capacity: end the window rather than drop arrivals
        rec.window_end = std::max(rec.window_start + 1, now);
        run.overflowed = true;
        break;
      }
      backlog.push_back(next);
      next += arrivals.next_gap_ns();
    }
    while (head < backlog.size() && rec.outstanding < kOpenInflight) {
      Status st = issuer.issue(rec, backlog[head]);
      if (st.code() == Code::kResourceExhausted) break;
      FERRY_RETURN_IF_ERROR(st);
      ++head;
    }
    if (head == backlog.size()) {
      backlog.clear();
      head = 0;
    }
    if (!started && now >= rec.window_start) {
      run.start = snapshot(s);
      started = true;
    }
    if (!ended && now >= rec.window_end) {
      run.end = snapshot(s);
      ended = true;
    }
    if (ended && head == backlog.size()) break;
    if (ended && now - rec.window_end > kDrainCapNs) {
      run.unfinished = backlog.size() - head;
      break;
    }
    s.step_and_poll();
    if (rec.failed > 0) return internal_error("a request failed: " + rec.first_failure);
  }
  FERRY_RETURN_IF_ERROR(drain(s, run));
  if (rec.failed > 0) return internal_error("a request failed: " + rec.first_failure);
  return run;
}

// Writes every key of `numbers` once (closed loop, many in flight), so GETs hit.
Status prefill(Sut& s, Issuer& issuer, const std::vector<uint64_t>& numbers, std::ostream& log, const char* what) {
  Run run;
  Recorder& rec = run.rec;
  size_t next = 0;
  uint64_t last_report = now_ns();
  const uint64_t t0 = last_report;
  while (next < numbers.size() || rec.outstanding > 0) {
    while (next < numbers.size() && rec.outstanding < 128) {
      Status st = issuer.send(rec, numbers[next], /*put=*/true, 0);
      if (st.code() == Code::kResourceExhausted) break;
      FERRY_RETURN_IF_ERROR(st);
      ++next;
    }
    s.step_and_poll();
    if (rec.failed > 0) return internal_error(std::string(what) + ": a PUT failed: " + rec.first_failure);
    const uint64_t now = now_ns();
    if (now - last_report > 2'000'000'000ULL) {
      log << fmt::format("  {}: {} of {} objects written ({:.1f} s)\n", what, next, numbers.size(),
                         static_cast<double>(now - t0) / 1e9);
      last_report = now;
    }
  }
  return ok_status();
}

// ---- points ----

struct Point {
  std::string experiment;
  std::string figure;
  std::string system;
  std::string workload;
  uint32_t clients = 0;                    // closed loop
  std::optional<double> offered_fraction;  // open loop: of the RPC peak
  double peak_mops = 0;
  uint32_t active = 0;                     // primaries receiving requests
  Run run;
};

nlohmann::json null_or(double v, bool ok) { return ok ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json point_json(const Point& p, const TailwindBenchOptions& o) {
  const Run& r = p.run;
  const double window_s = static_cast<double>(r.end.t - r.start.t) / 1e9;
  const double mops = static_cast<double>(r.rec.committed_in_window) / window_s / 1e6;
  uint64_t client_busy = 0, backup_busy = 0, backup_requests = 0, replicated = 0, opens = 0, closes = 0, control = 0,
           flush_ns = 0;
  const uint64_t puts = r.rec.puts_in_window;
  for (size_t i = 0; i < r.end.backups.size(); ++i) {
    client_busy += r.end.client_workers[i].busy_ns - r.start.client_workers[i].busy_ns;
    backup_busy += r.end.backup_worker[i].busy_ns - r.start.backup_worker[i].busy_ns;
    backup_requests += r.end.backup_worker[i].requests - r.start.backup_worker[i].requests;
    replicated += r.end.backups[i].replicated_rpcs - r.start.backups[i].replicated_rpcs;
    opens += r.end.backups[i].opens - r.start.backups[i].opens;
    closes += r.end.backups[i].closes - r.start.backups[i].closes;
    const auto& b0 = r.start.backups[i];
    flush_ns += r.end.backups[i].flush_ns - b0.flush_ns;
    const auto& b1 = r.end.backups[i];
    control += (b1.opens + b1.opens_refused + b1.closes + b1.version_changes + b1.finds + b1.reads + b1.frees) -
               (b0.opens + b0.opens_refused + b0.closes + b0.version_changes + b0.finds + b0.reads + b0.frees);
  }
  const double servers = static_cast<double>(o.servers);
  nlohmann::json j;
  j["bench"] = "tailwind";
  j["experiment"] = p.experiment;
  j["figure"] = p.figure;
  j["system"] = p.system;
  j["workload"] = p.workload;
  j["clients"] = p.clients == 0 ? nlohmann::json(nullptr) : nlohmann::json(p.clients);
  j["offered_fraction"] = p.offered_fraction ? nlohmann::json(*p.offered_fraction) : nlohmann::json(nullptr);
  j["offered_mops"] = p.offered_fraction ? nlohmann::json(r.offered_per_s / 1e6) : nlohmann::json(nullptr);
  j["rpc_peak_mops"] = p.offered_fraction ? nlohmann::json(p.peak_mops) : nlohmann::json(nullptr);
  j["mops"] = mops;
  j["mops_per_server"] = mops / servers;
  j["active_primaries"] = p.active == 0 ? o.servers : p.active;
  j["mops_per_active_primary"] = mops / (p.active == 0 ? servers : static_cast<double>(p.active));
  j["window_s"] = window_s;
  j["samples"] = r.rec.all.count();
  j["p50_us"] = percentile_json(r.rec.all, 0.50, 1e-3);
  j["p99_us"] = percentile_json(r.rec.all, 0.99, 1e-3);
  j["p999_us"] = percentile_json(r.rec.all, 0.999, 1e-3);
  nlohmann::json all, put, get;
  add_percentiles_ns(all, r.rec.all);
  add_percentiles_ns(put, r.rec.put);
  add_percentiles_ns(get, r.rec.get);
  j["latency"] = all;
  j["put_latency"] = put;
  j["get_latency"] = get;
  j["puts_in_window"] = puts;
  j["backup_cpu_ns_per_put"] = null_or(static_cast<double>(backup_busy) / static_cast<double>(puts), puts > 0);
  // The backups' flusher threads (closed segments to storage, re-zeroing):
  // the same work per byte in both systems, off the PUT path.
  j["backup_flush_ns_per_put"] = null_or(static_cast<double>(flush_ns) / static_cast<double>(puts), puts > 0);
  j["backup_requests"] = backup_requests;
  // Requests the backups' workers served that were not segment control
  // (open, close, free, version, find, read): replication itself.
  j["backup_replication_requests"] = backup_requests > control ? backup_requests - control : 0;
  j["backup_control_requests"] = control;
  j["backup_objects_copied"] = replicated;
  j["segment_opens"] = opens;
  j["segment_closes"] = closes;
  j["worker_cores"] = static_cast<double>(client_busy) / (window_s * 1e9) / servers;
  j["backup_worker_cores"] = static_cast<double>(backup_busy) / (window_s * 1e9) / servers;
  j["dispatch_cores"] = nullptr;
  j["client_core_utilization"] = static_cast<double>(r.end.client_cpu_ns - r.start.client_cpu_ns) / (window_s * 1e9);
  j["client_stalls"] = r.gaps.stalls;
  j["client_stalled_ms"] = static_cast<double>(r.gaps.stalled_ns) / 1e6;
  j["client_max_gap_us"] = static_cast<double>(r.gaps.max_ns) / 1e3;
  j["overflowed"] = r.overflowed;
  j["unfinished"] = r.unfinished;
  j["loadavg"] = load_average();
  return j;
}

std::string point_text(const nlohmann::json& j) {
  auto num = [](const nlohmann::json& v, int decimals) {
    return v.is_null() ? std::string("n/a") : fmt::format("{:.{}f}", v.get<double>(), decimals);
  };
  std::string what = j["experiment"] == "latency"
                         ? fmt::format("load {:.0f}% ({:.3f} Mops)", j["offered_fraction"].get<double>() * 100,
                                       j["offered_mops"].get<double>())
                     : j["experiment"] == "active" ? fmt::format("{} active", j["active_primaries"].get<uint32_t>())
                                                   : fmt::format("{} clients", j["clients"].get<uint32_t>());
  return fmt::format(
      "  {:<8} {:<10} {:<26} {:7.3f} Mops ({:.3f}/server) p50 {:>7} p99 {:>7} p99.9 {:>7} us  n={:<7} "
      "workers {:.2f} backup {:.2f} cores, backup {:>6} ns/put\n",
      j["system"].get<std::string>(), j["workload"].get<std::string>(), what, j["mops"].get<double>(),
      j["mops_per_server"].get<double>(), num(j["p50_us"], 1), num(j["p99_us"], 1), num(j["p999_us"], 1),
      j["samples"].get<uint64_t>(), j["worker_cores"].get<double>(), j["backup_worker_cores"].get<double>(),
      num(j["backup_cpu_ns_per_put"], 0));
}

nlohmann::json placement(const TailwindBenchOptions& o, const std::string& dir) {
  nlohmann::json j;
  j["nic_engine"] = fmt::format(
      "manual, stepped by the client thread (cpu {}) -- it stands for the client machine and every host's NIC",
      o.client_cpu);
  j["client_thread_cpu"] = o.client_cpu;
  j["server_workers_cpu"] = o.server_cpu;
  j["server_threads"] = fmt::format(
      "{} servers x ({} client-request workers + 1 backup worker + 1 backup flusher), all pinned to cpu {}", o.servers,
      o.workers, o.server_cpu);
  j["control_thread_cpu"] = o.server_cpu;
  j["cpu_load"] = "none";
  j["backup_buffers"] = "DRAM (stands for battery-backed buffers)";
  j["storage"] = dir + " (write + fdatasync)";
  j["timing_clock"] = timing_clock_name();
  return j;
}

class Emitter {
 public:
  Emitter(const TailwindBenchOptions& o, std::ostream& out, std::ostream& log, nlohmann::json place)
      : o_(o), out_(out), log_(log), place_(std::move(place)) {}
  void emit(nlohmann::json j) {
    j["placement"] = place_;
    add_provenance(j);
    if (o_.json) out_ << j.dump() << "\n" << std::flush;
    (o_.json ? log_ : out_) << point_text(j) << std::flush;
    points_.push_back(std::move(j));
  }
  const std::vector<nlohmann::json>& points() const { return points_; }
  std::ostream& text() { return o_.json ? log_ : out_; }
  void raw(const nlohmann::json& j) {
    if (o_.json) out_ << j.dump() << "\n" << std::flush;
  }

 private:
  const TailwindBenchOptions& o_;
  std::ostream& out_;
  std::ostream& log_;
  nlohmann::json place_;
  std::vector<nlohmann::json> points_;
};

// A point of `system` in `experiment` (the one whose offered fraction is
// nearest `fraction`, for latency), or null.
const nlohmann::json* find_point(const std::vector<nlohmann::json>& points, const std::string& experiment,
                                 const std::string& system, double fraction = 0) {
  const nlohmann::json* best = nullptr;
  double best_d = 1e9;
  for (const auto& j : points) {
    if (j["experiment"] != experiment || j["system"] != system) continue;
    const double d = j["offered_fraction"].is_null() ? 0 : std::abs(j["offered_fraction"].get<double>() - fraction);
    if (d < best_d) {
      best = &j;
      best_d = d;
    }
  }
  return best;
}

double ratio_or_nan(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_null() || b.is_null() || b.get<double>() <= 0) return std::nan("");
  return a.get<double>() / b.get<double>();
}

// The issue's targets, as ratios of the two systems measured in this run.
void summarize(Emitter& em, const TailwindBenchOptions& o) {
  const auto& pts = em.points();
  nlohmann::json j;
  j["bench"] = "tailwind";
  j["experiment"] = "summary";
  const nlohmann::json* tw_peak = find_point(pts, "peak", "tailwind");
  const nlohmann::json* rpc_peak = find_point(pts, "peak", "rpc");
  const nlohmann::json* tw80 = find_point(pts, "latency", "tailwind", 0.8);
  const nlohmann::json* rpc80 = find_point(pts, "latency", "rpc", 0.8);
  if (tw_peak == nullptr || rpc_peak == nullptr || tw80 == nullptr || rpc80 == nullptr) return;
  uint64_t tw_replication_requests = 0;
  for (const auto& p : pts) {
    if (p["system"] == "tailwind") tw_replication_requests += p["backup_replication_requests"].get<uint64_t>();
  }
  const double tput = ratio_or_nan((*tw_peak)["mops"], (*rpc_peak)["mops"]);
  const double p50 = ratio_or_nan((*rpc80)["p50_us"], (*tw80)["p50_us"]);
  const double p99 = ratio_or_nan((*rpc80)["p99_us"], (*tw80)["p99_us"]);
  j["write_only_peak_mops"] = {{"tailwind", (*tw_peak)["mops"]}, {"rpc", (*rpc_peak)["mops"]}};
  j["throughput_ratio"] = tput;
  j["load_point"] = (*rpc80)["offered_fraction"];
  j["put_p50_us"] = {{"tailwind", (*tw80)["p50_us"]}, {"rpc", (*rpc80)["p50_us"]}};
  j["put_p99_us"] = {{"tailwind", (*tw80)["p99_us"]}, {"rpc", (*rpc80)["p99_us"]}};
  j["p50_ratio"] = p50;
  j["p99_ratio"] = p99;
  j["backup_cpu_ns_per_put"] = {{"tailwind", (*tw80)["backup_cpu_ns_per_put"]},
                                {"rpc", (*rpc80)["backup_cpu_ns_per_put"]}};
  j["tailwind_backup_replication_requests"] = tw_replication_requests;
  j["targets"] = {{"throughput_ratio_at_least", 1.7}, {"p50_ratio_at_least", 2.0}, {"p99_ratio_at_least", 3.0}};
  j["meets_targets"] = tput >= 1.7 && p50 >= 2.0 && p99 >= 3.0 && tw_replication_requests == 0;
  add_provenance(j);
  em.raw(j);
  auto num = [](const nlohmann::json& v) {
    return v.is_null() ? std::string("n/a") : fmt::format("{:.1f}", v.get<double>());
  };
  em.text() << fmt::format(
      "summary (targets: throughput >= 1.7x, PUT p50 >= 2x and p99 >= 3x lower at the RPC baseline's {:.0f}% load, "
      "0 backup CPU per replicated PUT):\n"
      "  write-only peak: tailwind {:.3f} Mops, rpc {:.3f} Mops: {:.2f}x\n"
      "  PUT p50: tailwind {} us, rpc {} us: {:.2f}x lower; p99: tailwind {} us, rpc {} us: {:.2f}x lower\n"
      "  backup workers' CPU per PUT at that load (segment opens and closes included): tailwind {} ns, rpc {} ns; "
      "replication requests served by Tailwind "
      "backups in the whole run: {}\n  {}\n",
      (*rpc80)["offered_fraction"].get<double>() * 100, (*tw_peak)["mops"].get<double>(),
      (*rpc_peak)["mops"].get<double>(), tput, num((*tw80)["p50_us"]), num((*rpc80)["p50_us"]), p50,
      num((*tw80)["p99_us"]), num((*rpc80)["p99_us"]), p99, num((*tw80)["backup_cpu_ns_per_put"]),
      num((*rpc80)["backup_cpu_ns_per_put"]), tw_replication_requests,
      j["meets_targets"].get<bool>() ? "targets met" : "targets NOT met");
  (void)o;
}

Status validate(const TailwindBenchOptions& o) {
  for (const auto& e : o.experiments) {
    if (!has({"clients", "latency", "active", "recovery"}, e)) {
      return invalid_argument("unknown experiment '" + e + "' (clients, latency, active, recovery)");
    }
  }
  for (const auto& s : o.systems) {
    if (!has({"tailwind", "rpc"}, s)) return invalid_argument("unknown system '" + s + "' (tailwind, rpc)");
  }
  if (o.systems.empty()) return invalid_argument("no system to run");
  for (const auto& w : o.workloads) FERRY_RETURN_IF_ERROR(mix_of(w, o).status());
  if (o.servers < o.replicas + 1) {
    return invalid_argument(fmt::format("{} servers cannot hold {} replicas of each log besides its primary",
                                        o.servers, o.replicas));
  }
  if (o.workers == 0) return invalid_argument("at least one worker per server");
  if (o.keys < 100) return invalid_argument("at least 100 keys");
  if (o.key_bytes == 0 || o.value_bytes == 0) return invalid_argument("keys and values must not be empty");
  for (uint32_t c : o.clients) {
    if (c == 0 || c > kOpenInflight) return invalid_argument(fmt::format("clients must be 1..{}", kOpenInflight));
  }
  if (o.peak_clients == 0 || o.peak_clients > kOpenInflight) {
    return invalid_argument(fmt::format("--peak-clients must be 1..{}", kOpenInflight));
  }
  for (double l : o.loads) {
    if (!(l > 0 && l <= 2)) return invalid_argument("loads are fractions of the RPC peak in (0, 2]");
  }
  for (uint32_t a : o.active) {
    if (a == 0 || a > o.servers) return invalid_argument(fmt::format("active primaries must be 1..{}", o.servers));
  }
  if (!(o.closed_seconds > 0) || !(o.min_seconds > 0) || o.max_seconds < o.min_seconds) {
    return invalid_argument("point durations must be positive, --max-seconds >= --min-seconds");
  }
  return ok_status();
}

// Keys owned by servers < `active`, in key-number order.
std::vector<uint64_t> keys_of_active(Issuer& issuer, uint64_t keys, uint32_t active) {
  std::vector<uint64_t> out;
  for (uint64_t k = 0; k < keys; ++k) {
    if (issuer.owner(k) < active) out.push_back(k);
  }
  return out;
}

// ---- experiments on one system's cluster ----

Status run_measured(const std::string& system, const TailwindBenchOptions& o, const std::string& dir, Emitter& em,
                    double* rpc_peak_mops) {
  std::ostream& log = em.text();
  log << fmt::format("{}: building {} servers (r = {}, {} worker(s) + 1 backup worker each)\n", system, o.servers,
                     o.replicas, o.workers);
  FERRY_ASSIGN_OR_RETURN(auto sut, build_sut(system, o, dir));
  Sut& s = *sut;
  if (o.client_cpu >= 0) (void)pin_current_thread(o.client_cpu);
  FERRY_ASSIGN_OR_RETURN(const KvMix write_mix, mix_of("write-only", o));
  {
    Issuer filler(s, write_mix, nullptr, 1);
    std::vector<uint64_t> all(o.keys);
    for (uint64_t k = 0; k < o.keys; ++k) all[k] = k;
    FERRY_RETURN_IF_ERROR(prefill(s, filler, all, log, "prefill"));
  }
  auto clean = [&] {
    auto r = s.drive<Result<logkv::CleanResult>>(o.server_cpu, [&] { return s.cluster->clean(); });
    if (r.ok() && r->segments_cleaned > 0) {
      log << fmt::format("  (cleaner: {} segments compacted, {} objects moved, {:.1f} MB freed)\n",
                         r->segments_cleaned, r->objects_relocated, static_cast<double>(r->bytes_freed) / 1e6);
    }
    return r.status();
  };
  uint64_t seed = 100;
  if (has(o.experiments, "clients")) {
    log << system << ": Fig. 7 -- throughput per server vs clients\n";
    for (const auto& w : o.workloads) {
      FERRY_ASSIGN_OR_RETURN(const KvMix mix, mix_of(w, o));
      for (uint32_t c : o.clients) {
        Issuer issuer(s, mix, nullptr, ++seed);
        Point p{"clients", "7", system, w, c, std::nullopt, 0, 0, {}};
        FERRY_ASSIGN_OR_RETURN(p.run, run_closed(s, issuer, c, o.closed_seconds, o.warmup_seconds));
        em.emit(point_json(p, o));
      }
      FERRY_RETURN_IF_ERROR(clean());
    }
  }
  if (has(o.experiments, "active")) {
    log << system << ": Fig. 9 -- write-only throughput per active primary\n";
    for (uint32_t a : o.active) {
      Issuer probe(s, write_mix, nullptr, 1);
      const std::vector<uint64_t> keys = keys_of_active(probe, o.keys, a);
      Issuer issuer(s, write_mix, &keys, ++seed);
      Point p{"active", "9", system, "write-only", o.peak_clients, std::nullopt, 0, a, {}};
      FERRY_ASSIGN_OR_RETURN(p.run, run_closed(s, issuer, o.peak_clients, o.closed_seconds, o.warmup_seconds));
      em.emit(point_json(p, o));
    }
    FERRY_RETURN_IF_ERROR(clean());
  }
  if (has(o.experiments, "latency")) {
    // This system's closed-loop peak (write-only, peak_clients): the RPC
    // baseline's is the reference every load is a fraction of.
    Issuer peak_issuer(s, write_mix, nullptr, ++seed);
    Point peak{"peak", "8", system, "write-only", o.peak_clients, std::nullopt, 0, 0, {}};
    FERRY_ASSIGN_OR_RETURN(peak.run, run_closed(s, peak_issuer, o.peak_clients, o.closed_seconds, o.warmup_seconds));
    nlohmann::json pj = point_json(peak, o);
    em.emit(pj);
    if (system == "rpc" || *rpc_peak_mops <= 0) {
      *rpc_peak_mops = pj["mops"].get<double>();
      if (system != "rpc") log << "  (no RPC baseline in this run: loads are fractions of this system's own peak)\n";
    }
    log << fmt::format("{}: Figs. 8 and 10 -- write-only latency and CPU vs offered load (RPC peak {:.3f} Mops)\n",
                       system, *rpc_peak_mops);
    for (double l : o.loads) {
      Issuer issuer(s, write_mix, nullptr, ++seed);
      Point p{"latency", "8", system, "write-only", 0, l, *rpc_peak_mops, 0, {}};
      FERRY_ASSIGN_OR_RETURN(p.run, run_open(s, issuer, l * *rpc_peak_mops * 1e6, o, ++seed));
      em.emit(point_json(p, o));
    }
  }
  return ok_status();
}

// Fig. 13: one server holding `objects` objects crashes and is recovered.
Status run_recovery(const std::string& system, uint64_t objects, const TailwindBenchOptions& o, const std::string& dir,
                    Emitter& em) {
  std::ostream& log = em.text();
  TailwindBenchOptions ro = o;
  // The crashed server's tablets move to servers that need r backups besides
  // themselves among the survivors.
  ro.servers = std::max(o.servers, o.replicas + 2);
  ro.keys = std::max<uint64_t>(objects * o.servers * 2, 1000);  // a key space wide enough to pick the victim's keys
  FERRY_ASSIGN_OR_RETURN(auto sut, build_sut(system, ro, dir));
  Sut& s = *sut;
  if (o.client_cpu >= 0) (void)pin_current_thread(o.client_cpu);
  FERRY_ASSIGN_OR_RETURN(const KvMix mix, mix_of("write-only", ro));
  Issuer issuer(s, mix, nullptr, 7);
  const uint32_t victim = 0;
  std::vector<uint64_t> keys;
  keys.reserve(objects);
  for (uint64_t k = 0; k < ro.keys && keys.size() < objects; ++k) {
    if (issuer.owner(k) == victim) keys.push_back(k);
  }
  if (keys.size() < objects) return internal_error("recovery: not enough keys hash to the victim's tablets");
  log << fmt::format("{}: Fig. 13 -- writing {} objects to server {}\n", system, objects, victim);
  FERRY_RETURN_IF_ERROR(prefill(s, issuer, keys, log, "fill"));
  FERRY_RETURN_IF_ERROR(s.drive<Status>(o.server_cpu, [&] { return s.cluster->crash_server(victim); }));
  log << fmt::format("{}: server {} crashed; recovering\n", system, victim);
  uint64_t last = now_ns();
  const uint64_t t0 = now_ns();
  auto result = s.drive<Result<logkv::RecoveryResult>>(o.server_cpu, [&] {
    return s.cluster->recover_server(victim, [&](const logkv::RecoveryProgress& p) {
      const uint64_t now = now_ns();
      if (now - last > 1'000'000'000ULL) {
        std::fprintf(stderr, "  recovery: %llu of %llu segments, %llu objects restored\n",
                     static_cast<unsigned long long>(p.segments_done), static_cast<unsigned long long>(p.segments_total),
                     static_cast<unsigned long long>(p.objects_restored));
        last = now;
      }
    });
  });
  const uint64_t wall = now_ns() - t0;
  FERRY_RETURN_IF_ERROR(result.status());
  const logkv::RecoveryResult& r = *result;
  if (r.progress.objects_restored != objects) {
    return internal_error(fmt::format("recovery restored {} objects of {}", r.progress.objects_restored, objects));
  }
  nlohmann::json j;
  j["bench"] = "tailwind";
  j["experiment"] = "recovery";
  j["figure"] = "13";
  j["system"] = system;
  j["workload"] = "write-only";
  j["objects"] = objects;
  j["servers"] = ro.servers;
  j["segments"] = r.progress.segments_total;
  j["bytes"] = r.progress.bytes;
  j["recovery_s"] = static_cast<double>(wall) / 1e9;
  j["objects_per_s"] = static_cast<double>(objects) / (static_cast<double>(wall) / 1e9);
  j["mb_per_s"] = static_cast<double>(r.progress.bytes) / 1e6 / (static_cast<double>(wall) / 1e9);
  j["placement"] = placement(o, dir);
  std::vector<uint32_t> masters = r.new_owners;
  std::sort(masters.begin(), masters.end());
  masters.erase(std::unique(masters.begin(), masters.end()), masters.end());
  j["recovery_masters"] = masters.size();
  j["recovery_threads"] = fmt::format(
      "one control thread replays every segment, then {} recovery masters restore in parallel (one thread each); "
      "all on cpu {}",
      masters.size(), o.server_cpu);
  add_provenance(j);
  em.raw(j);
  em.text() << fmt::format("  {:<8} recovery of {} objects ({} segments, {:.1f} MB): {:.2f} s, {:.0f} objects/s\n",
                           system, objects, r.progress.segments_total, static_cast<double>(r.progress.bytes) / 1e6,
                           j["recovery_s"].get<double>(), j["objects_per_s"].get<double>());
  return ok_status();
}

}  // namespace

TailwindBenchOptions tailwind_quick_options() {
  TailwindBenchOptions o;
  o.workloads = {"ycsb-b", "write-only"};
  o.clients = {1, 8, 64};
  o.loads = {0.2, 0.8};
  o.active = {1, 4};
  o.keys = 20000;
  o.closed_seconds = 0.3;
  o.min_seconds = 0.3;
  o.max_seconds = 1.0;
  o.target_samples = 5000;
  o.recovery_objects = 100000;
  return o;
}

Status run_tailwind_bench(const TailwindBenchOptions& options, std::ostream& out, std::ostream& log) {
  FERRY_RETURN_IF_ERROR(validate(options));
  TailwindBenchOptions o = options;
  o.client_cpu = usable_cpu(o.client_cpu);
  o.server_cpu = usable_cpu(o.server_cpu);
  std::string base = o.dir.empty() ? std::string("/dev/shm") : o.dir;
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  std::string pattern = base + "/ferry-bench-tailwind-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return unavailable("cannot create a directory under " + base + ": " + std::strerror(errno));
  }
  const std::string dir = pattern;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code e;
      std::filesystem::remove_all(dir, e);
    }
  } cleanup{dir};

  Emitter em(o, out, log, placement(o, dir));
  em.text() << fmt::format(
      "ferry bench tailwind: Tailwind vs RPC replication on LogKv, {} servers, r = {}, {} B keys, {} B values, "
      "{} keys\n  NIC engine: manual, stepped by the client thread (cpu {}), standing for the client machine and "
      "every host's NIC; all server workers on cpu {}; no CPU load; storage {}\n",
      o.servers, o.replicas, o.key_bytes, o.value_bytes, o.keys, o.client_cpu, o.server_cpu, dir);
  double rpc_peak = 0;
  const bool measured = has(o.experiments, "clients") || has(o.experiments, "latency") || has(o.experiments, "active");
  // The RPC baseline first: the latency loads are fractions of its peak.
  std::vector<std::string> order;
  if (has(o.systems, "rpc")) order.push_back("rpc");
  if (has(o.systems, "tailwind")) order.push_back("tailwind");
  if (measured) {
    for (const auto& system : order) {
      const std::string fresh = dir + "/" + system;
      std::filesystem::create_directories(fresh, ec);
      FERRY_RETURN_IF_ERROR(run_measured(system, o, fresh, em, &rpc_peak));
      std::filesystem::remove_all(fresh, ec);
    }
  }
  summarize(em, o);
  if (has(o.experiments, "recovery")) {
    std::vector<uint64_t> sizes = {o.recovery_objects};
    if (o.full) sizes.push_back(10'000'000);
    for (uint64_t n : sizes) {
      for (const auto& system : order) {
        const std::string fresh = dir + "/recovery-" + system;
        std::filesystem::create_directories(fresh, ec);
        FERRY_RETURN_IF_ERROR(run_recovery(system, n, o, fresh, em));
        std::filesystem::remove_all(fresh, ec);
      }
    }
  }
  return ok_status();
}

}  // namespace ferry::bench
