#include "group_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core_guard.h"
#include "cpu_load.h"
#include "ferry/common/clock.h"
#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/naive.h"
#include "load_loop.h"
#include "reference.h"
#include "regime.h"
#include "report.h"

namespace ferry::bench {

using hyperloop::GroupClient;
using hyperloop::GroupId;
using hyperloop::Primitive;
using hyperloop::WireBytes;

namespace {

struct Point {
  std::string experiment;
  std::string system;
  Primitive primitive = Primitive::kWrite;
  uint32_t size = 0;
  uint32_t group = 3;
  bool load = false;
  uint32_t window = 1;
  Histogram hist;
  uint64_t ops = 0;
  double seconds = 0;
  double cap_seconds = 0;
  bool capped = false;  // stopped by the time cap before its operation count
  uint64_t replica_cpu_ns = 0;
  uint64_t client_cpu_ns = 0;  // the client thread, which also runs every NIC
  uint64_t client_idle_ns = 0;  // ... its engine passes that found nothing (sampled)
  WireBytes wire;              // what the hosts sent each other during the measured operations
  CoreGuard guard;
};

// One system's client, engine and groups, alive for the points that use it.
struct SystemUnderTest {
  std::string name;
  std::unique_ptr<nic::Engine> engine;
  std::unique_ptr<GroupClient> client;
  std::map<uint32_t, GroupId> groups;  // by group size
};

Result<std::unique_ptr<SystemUnderTest>> start_system(const std::string& name, const GroupBenchOptions& o) {
  auto s = std::make_unique<SystemUnderTest>();
  s->name = name;
  nic::EngineOptions eo;
  eo.threaded = false;  // stepped by the client thread: see group_bench.h
  eo.account_idle = true;  // how busy that thread is (every point's regime)
  s->engine = std::make_unique<nic::Engine>(eo);
  FERRY_ASSIGN_OR_RETURN(s->client, make_group_client(name, *s->engine, o.replica_cpu));
  return s;
}

Result<GroupId> group_of(SystemUnderTest& s, uint32_t replicas, const GroupBenchOptions& o) {
  auto it = s.groups.find(replicas);
  if (it != s.groups.end()) return it->second;
  hyperloop::GroupOptions g;
  g.replicas = replicas;
  g.region_bytes = o.region_bytes;
  g.media = o.media;
  g.pm_dir = o.pm_dir;
  g.ring_ops = 128;
  g.window = o.window;
  FERRY_ASSIGN_OR_RETURN(GroupId gid, s.client->create_group(g));
  s.groups[replicas] = gid;
  return gid;
}

// Offsets: distinct slots cycling through the first half of the region
// (gMEMCPY copies to the second half).
struct Slots {
  Slots(size_t region, uint32_t size)
      : stride((size + 63) / 64 * 64), count(std::max<size_t>(1, region / 2 / stride)) {}
  uint64_t at(uint64_t i) const { return (i % count) * stride; }
  uint64_t stride;
  uint64_t count;
};

// The counters a point's figures are differences of, read at the edges of
// its measured window (load_loop.h's on_window_open/on_window_close): the
// replicas' and the client thread's CPU, the wire bytes.
class PointEdges {
 public:
  PointEdges(SystemUnderTest& s, GroupId g, Point& pt) : s_(s), g_(g), pt_(pt) {}
  void on_window_open(uint64_t) {
    replica_cpu_ns_ = s_.client->replica_cpu_ns();
    client_cpu_ns_ = thread_cpu_time_ns();
    client_idle_ns_ = s_.engine->stats().idle_pass_ns;
    auto w = s_.client->wire_bytes(g_);
    if (w.ok()) wire_ = *w;
    if (!w.ok()) status_ = w.status();
  }
  void on_window_close(uint64_t) {
    pt_.replica_cpu_ns = s_.client->replica_cpu_ns() - replica_cpu_ns_;
    pt_.client_cpu_ns = thread_cpu_time_ns() - client_cpu_ns_;
    pt_.client_idle_ns = s_.engine->stats().idle_pass_ns - client_idle_ns_;
    auto w = s_.client->wire_bytes(g_);
    if (w.ok()) pt_.wire = *w - wire_;
    if (!w.ok() && status_.ok()) status_ = w.status();
  }
  // What the loop measured, into the point.
  Status finish(const Result<LoopOutcome>& out, const Recorder& rec) {
    FERRY_RETURN_IF_ERROR(out.status());
    FERRY_RETURN_IF_ERROR(status_);
    pt_.seconds = out->seconds();
    pt_.ops = out->started;
    pt_.capped = out->capped;
    pt_.hist = rec.all();
    return ok_status();
  }

 protected:
  SystemUnderTest& s_;
  GroupId g_;
  Point& pt_;

 private:
  uint64_t replica_cpu_ns_ = 0, client_cpu_ns_ = 0, client_idle_ns_ = 0;
  WireBytes wire_;
  Status status_ = ok_status();
};

// A latency point's load (load_loop.h): one synchronous call at a time, a
// counted window of o.iters after 100 to warm up.
class LatencyLoad : public PointEdges {
 public:
  static constexpr bool kSynchronous = true;
  LatencyLoad(SystemUnderTest& s, GroupId g, Point& pt, const GroupBenchOptions& o, uint64_t* cas_counter,
              Recorder& rec)
      : PointEdges(s, g, pt), o_(o), slots_(o.region_bytes, pt.size), cas_counter_(cas_counter), rec_(rec) {}
  Status issue(uint64_t at_ns) {
    FERRY_RETURN_IF_ERROR(run(i_++));
    rec_.record(0, at_ns, now_ns());
    return ok_status();
  }
  Status step(uint64_t) { return ok_status(); }
  void on_window_open(uint64_t now) {
    i_ = 0;  // the measured operations' slots start over
    PointEdges::on_window_open(now);
  }

 private:
  Status run(uint64_t i) {
    GroupClient& c = *s_.client;
    if (pt_.primitive == Primitive::kCas) {
      const auto all = static_cast<uint8_t>((1u << pt_.group) - 1);
      auto r = c.gcas(g_, 0, *cas_counter_, *cas_counter_ + 1, all, false);
      if (!r.ok()) return r.status();
      if (r->succeeded != all) return internal_error("gcas counter lost a race");
      ++*cas_counter_;
      return ok_status();
    }
    if (pt_.primitive == Primitive::kMemcpy) {
      return c.gmemcpy(g_, slots_.at(i), o_.region_bytes / 2 + slots_.at(i), pt_.size, o_.flush);
    }
    return c.gwrite(g_, slots_.at(i), pt_.size, o_.flush);
  }

  const GroupBenchOptions& o_;
  const Slots slots_;
  uint64_t* cas_counter_;
  Recorder& rec_;
  uint64_t i_ = 0;
};

// A throughput point's load: asynchronous gWRITEs, as many in flight as the
// group's window holds (gwrite_async waits for room), a counted window of
// o.throughput_bytes after 200 synchronous ones to warm up.
class ThroughputLoad : public PointEdges {
 public:
  ThroughputLoad(SystemUnderTest& s, GroupId g, Point& pt, const GroupBenchOptions& o, Recorder& rec)
      : PointEdges(s, g, pt), o_(o), slots_(o.region_bytes, pt.size), rec_(rec) {}
  Status warm_up() {
    for (uint64_t i = 0; i < 200; ++i) FERRY_RETURN_IF_ERROR(s_.client->gwrite(g_, slots_.at(i), pt_.size, o_.flush));
    return ok_status();
  }
  Status issue(uint64_t at_ns) {
    // Two words of capture: std::function keeps it inline, no allocation.
    Recorder* rec = &rec_;
    rec_.issued();
    return s_.client->gwrite_async(g_, slots_.at(i_++), pt_.size, o_.flush, [rec, at_ns](const hyperloop::OpResult& r) {
      if (r.status.ok()) {
        rec->completed(0, at_ns, now_ns());
      } else {
        rec->failed(r.status.to_string());
      }
    });
  }
  Status step(uint64_t) {
    s_.client->poll();
    return ok_status();
  }

 private:
  const GroupBenchOptions& o_;
  const Slots slots_;
  Recorder& rec_;
  uint64_t i_ = 0;
};

Status latency_point(SystemUnderTest& s, GroupId g, Point& pt, const GroupBenchOptions& o, uint64_t* cas_counter) {
  Recorder rec;
  LatencyLoad load(s, g, pt, o, cas_counter, rec);
  return load.finish(run_closed(load, rec, LoopPlan::counted(100, o.iters, pt.cap_seconds), timing_clock()), rec);
}

Status throughput_point(SystemUnderTest& s, GroupId g, Point& pt, const GroupBenchOptions& o) {
  Recorder rec;
  ThroughputLoad load(s, g, pt, o, rec);
  FERRY_RETURN_IF_ERROR(load.warm_up());
  const uint64_t ops = std::max<uint64_t>(1, o.throughput_bytes / pt.size);
  return load.finish(run_closed(load, rec, LoopPlan::counted(0, ops, pt.cap_seconds), timing_clock()), rec);
}

double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }
constexpr double kUs = 1e-3;  // ns -> us

// The spec of one point pair (quiet, then loaded).
struct Spec {
  std::string experiment;
  Primitive primitive;
  uint32_t size;
  uint32_t group;
};
bool same_spec(const Point& p, const Spec& s) {
  return p.experiment == s.experiment && p.primitive == s.primitive && p.size == s.size && p.group == s.group;
}

const Point* find(const std::vector<Point>& points, const Spec& s, const std::string& system, bool loaded) {
  for (const Point& p : points) {
    if (same_spec(p, s) && p.system == system && p.load == loaded) return &p;
  }
  return nullptr;
}

// baseline / hyperloop at quantile q, or null when either side has too few
// samples for q.
nlohmann::json ratio_json(const Point* base, const Point* hl, double q) {
  if (base == nullptr || hl == nullptr || !percentile_reportable(base->hist, q) ||
      !percentile_reportable(hl->hist, q)) {
    return nullptr;
  }
  return static_cast<double>(base->hist.percentile(q)) /
         static_cast<double>(std::max<uint64_t>(1, hl->hist.percentile(q)));
}
nlohmann::json ratios_json(const Point* base, const Point* hl) {
  return {
      {"p50", ratio_json(base, hl, 0.5)}, {"p99", ratio_json(base, hl, 0.99)}, {"p999", ratio_json(base, hl, 0.999)}};
}
std::string ratio_text(const nlohmann::json& r) {
  return r.is_null() ? "n/a" : fmt::format("{:.1f}x", r.get<double>());
}

nlohmann::json wire_json(const Point& p) {
  const double d = p.ops && p.group ? static_cast<double>(p.ops) * p.group : 1.0;
  const WireBytes& w = p.wire;
  return {{"payload", static_cast<double>(w.payload) / d},
          {"metadata", static_cast<double>(w.metadata) / d},
          {"rearm", static_cast<double>(w.rearm) / d},
          {"headers", static_cast<double>(w.headers) / d},
          {"total", static_cast<double>(w.total()) / d},
          {"packets", static_cast<double>(w.packets) / d},
          {"loopback_packets", static_cast<double>(w.loopback_packets) / d}};
}

nlohmann::json point_json(const Point& p, const std::vector<Point>& all, const GroupBenchOptions& o,
                          const std::string& where, const std::string& load_command, const nlohmann::json& stalls) {
  nlohmann::json j;
  j["experiment"] = p.experiment;
  j["system"] = p.system;
  j["primitive"] = std::string(hyperloop::primitive_name(p.primitive));
  j["size"] = p.size;
  j["group"] = p.group;
  j["load"] = p.load;
  j["window"] = p.window;
  j["samples"] = p.hist.count();
  j["ops"] = p.ops;
  j["seconds"] = p.seconds;
  j["cap_seconds"] = p.cap_seconds;
  j["capped"] = p.capped;
  j["stopped_by"] = p.capped ? "time cap" : p.experiment == "throughput" ? "bytes" : "iters";
  j["avg_us"] = p.hist.mean() * kUs;
  j["p50_us"] = percentile_json(p.hist, 0.50, kUs);
  j["p95_us"] = percentile_json(p.hist, 0.95, kUs);
  j["p99_us"] = percentile_json(p.hist, 0.99, kUs);
  j["p999_us"] = percentile_json(p.hist, 0.999, kUs);
  j["max_us"] = us(p.hist.max());
  j["ops_per_s"] = p.seconds > 0 ? static_cast<double>(p.ops) / p.seconds : 0.0;
  j["gbps"] = p.seconds > 0 ? static_cast<double>(p.ops) * p.size * 8 / p.seconds / 1e9 : 0.0;
  j["replica_cpu_ns_per_op"] = p.ops ? static_cast<double>(p.replica_cpu_ns) / static_cast<double>(p.ops) : 0.0;
  // Cores' worth of replica CPU while the point ran (1.0 = one core busy).
  j["replica_cpu_cores"] = p.seconds > 0 ? static_cast<double>(p.replica_cpu_ns) / (p.seconds * 1e9) : 0.0;
  // The client thread's CPU: the client machine plus every emulated NIC.
  j["client_and_nic_cpu_ns_per_op"] = p.ops ? static_cast<double>(p.client_cpu_ns) / static_cast<double>(p.ops) : 0.0;
  {
    // What bounded the point (regime.h): the client/NIC core (1 - its engine's
    // idle passes over the window) or the replicas (their CPU; naive-poll's
    // thread polls, so its CPU says nothing of its work: left out).
    const double window_ns = p.seconds * 1e9;
    const double client = busy_fraction(p.client_idle_ns, window_ns);
    const double replica = window_ns > 0 ? static_cast<double>(p.replica_cpu_ns) / window_ns : 0.0;
    const bool replicas_poll = p.system == "naive-poll";
    const std::string bound =
        bound_by({{"client-nic", client}, {"replica", replicas_poll ? kNotMeasured : replica}}, true);
    j["bound_by"] = bound;
    j["regime"] = {{"bound_by", bound},
                   {"client_nic_busy_fraction", client},
                   {"replica_cpu_fraction", replica},
                   {"replicas_poll", replicas_poll}};
  }
  p.guard.add_to(j);
  j["wire_bytes_per_op"] = wire_json(p);  // per replica
  if (p.experiment != "throughput") {
    const Spec s{p.experiment, p.primitive, p.size, p.group};
    const Point* hl = find(all, s, "hyperloop", p.load);
    j["ratios"] = {{"naive_event_over_hyperloop", ratios_json(find(all, s, "naive-event", p.load), hl)},
                   {"naive_poll_over_hyperloop", ratios_json(find(all, s, "naive-poll", p.load), hl)}};
  }
  j["media"] = o.media == pm::Media::kPm ? "pm" : "dram";
  j["flush"] = o.flush;
  j["placement"] = where;
  j["load_command"] = p.load ? load_command : "";
  j["cpu_stalls"] = stalls;
  add_provenance(j);
  return j;
}

void print_row(std::ostream& out, const Point& p) {
  out << fmt::format(
      "  {:<12} {:<8} {:>6} B  group {}  {:<5}  n {:>6}{}  avg {:>9.1f}  p50 {:>8}  p99 {:>8}  p99.9 {:>8}  max "
      "{:>9.1f} us  "
      "{:>8.0f} op/s  replica CPU {:>7.0f} ns/op  wire {:>6.0f} B/op/replica  core p99 x{:.2f}{}\n",
      p.system, hyperloop::primitive_name(p.primitive), p.size, p.group, p.load ? "load" : "quiet", p.hist.count(),
      p.capped ? "*" : " ", p.hist.mean() / 1000.0, percentile_text(p.hist, 0.5, kUs, 1),
      percentile_text(p.hist, 0.99, kUs, 1), percentile_text(p.hist, 0.999, kUs, 1), us(p.hist.max()),
      p.seconds > 0 ? static_cast<double>(p.ops) / p.seconds : 0.0,
      p.ops ? static_cast<double>(p.replica_cpu_ns) / static_cast<double>(p.ops) : 0.0,
      p.ops && p.group ? static_cast<double>(p.wire.total()) / static_cast<double>(p.ops * p.group) : 0.0,
      p.guard.p99_ratio(), p.guard.disturbed() ? " DISTURBED" : "");
}

}  // namespace

Result<std::unique_ptr<GroupClient>> make_group_client(const std::string& system, nic::Engine& engine,
                                                       int replica_cpu) {
  hyperloop::ClientOptions co;
  co.op_timeout_ns = 120'000'000'000ULL;
  co.replica_cpu = replica_cpu;
  if (system == "hyperloop") {
    FERRY_ASSIGN_OR_RETURN(auto c, hyperloop::HyperLoopClient::create(engine, co));
    return std::unique_ptr<GroupClient>(std::move(c));
  }
  if (system == "naive-event" || system == "naive-poll") {
    hyperloop::NaiveOptions no;
    no.mode = system == "naive-event" ? hyperloop::NaiveMode::kEvent : hyperloop::NaiveMode::kPoll;
    no.client = co;
    no.replica_cpu = replica_cpu;
    FERRY_ASSIGN_OR_RETURN(auto c, hyperloop::NaiveClient::create(engine, no));
    return std::unique_ptr<GroupClient>(std::move(c));
  }
  return invalid_argument("unknown system '" + system + "' (hyperloop, naive-event, naive-poll)");
}

Status run_group_bench(const GroupBenchOptions& o, std::ostream& out, std::ostream& log) {
  for (const auto& e : o.experiments) {
    if (!has({"latency", "cas", "throughput", "group_size"}, e)) {
      return invalid_argument("unknown experiment '" + e + "' (latency, cas, throughput, group_size)");
    }
  }
  for (const auto& s : o.systems) {
    if (!has({"hyperloop", "naive-event", "naive-poll"}, s)) {
      return invalid_argument("unknown system '" + s + "' (hyperloop, naive-event, naive-poll)");
    }
  }
  for (const auto& l : o.loads) {
    if (l != "quiet" && l != "load") return invalid_argument("unknown load '" + l + "' (quiet, load)");
  }
  for (uint32_t s : o.sizes) {
    if (s == 0 || s > o.region_bytes / 4)
      return invalid_argument("size " + std::to_string(s) + " does not fit the region");
  }
  for (uint32_t g : o.group_sizes) {
    if (g < 1 || g > hyperloop::kMaxReplicas)
      return invalid_argument("group size " + std::to_string(g) + " not in 1..7");
  }
  if (o.iters == 0) return invalid_argument("--iters must be at least 1");
  if (o.window < 1 || o.window > 32) {
    return invalid_argument("--window must be 1..32, not " + std::to_string(o.window));
  }
  if (o.max_seconds <= 0 || o.max_seconds_loaded <= 0) return invalid_argument("time caps must be positive");
  if (o.load_processes < 1) return invalid_argument("--load-processes must be at least 1");

  // The report: stdout, or stderr when stdout carries the JSON.
  std::ostream& text = o.json ? log : out;
  const int client_cpu = usable_cpu(o.client_cpu);
  const int replica_cpu = usable_cpu(o.replica_cpu);
  if (client_cpu >= 0) FERRY_RETURN_IF_ERROR(pin_current_thread(client_cpu));
  GroupBenchOptions opts = o;
  opts.replica_cpu = replica_cpu;
  const std::string where = fmt::format(
      "NIC engine: manual, stepped by the client thread ({}) -- it stands for every host's NIC and for the unloaded "
      "client machine; replica application threads {}",
      client_cpu >= 0 ? fmt::format("pinned to CPU {}", client_cpu) : "not pinned",
      replica_cpu >= 0 ? fmt::format("pinned to CPU {}", replica_cpu) : "not pinned");
  const std::string load_command =
      fmt::format("stress-ng --cpu {} --cpu-method loop{}", o.load_processes,
                  replica_cpu >= 0 ? fmt::format(" --taskset {}", replica_cpu) : std::string());
  text << "ferry bench group: HyperLoop §6.1 against Naive-RDMA (event and poll), same run\n"
       << "  " << where << "\n"
       << fmt::format(
              "  load: {} busy processes on CPU {} for 'load' points, started as a separate executable "
              "({}); replica regions: {} ({}), {} MiB; flush: {}\n",
              o.load_processes, replica_cpu, load_command, o.media == pm::Media::kPm ? "PM" : "DRAM",
              o.media == pm::Media::kPm ? "libpmem2 file, persistence modeled" : "volatile", o.region_bytes >> 20,
              o.flush ? "interleaved gFLUSH" : "none")
       << "  machine: " << machine_description() << "; timing clock: " << timing_clock_name() << "\n"
       << fmt::format(
              "  latency points: {} operations or {} s quiet / {} s loaded (* = stopped by the cap); "
              "percentiles need 10/(1-q) samples (p99: 1,000, p99.9: 10,000), else n/a\n",
              o.iters, o.max_seconds, o.max_seconds_loaded)
       << fmt::format(
              "  core p99 = p99 of a fixed ~1 us work item on the client/NIC core during the point over "
              "quiet; above {:.1f} the point is DISTURBED\n",
              kDisturbedP99Ratio);

  // The physical floor of every tail: how often, and for how long, the
  // machine takes the client/NIC core away (quiet, before anything runs).
  const CpuStalls stalls = cpu_stalls(0.5);
  const nlohmann::json stalls_json = {{"per_second", stalls.per_second},
                                      {"p50_us", stalls.gaps.percentile(0.5) * kUs},
                                      {"max_us", stalls.gaps.max() * kUs},
                                      {"stolen_fraction", stalls.stolen_fraction}};
  text << fmt::format(
      "  the client/NIC core loses the CPU {:.0f} times a second for {:.0f} us (median; max {:.0f} us, "
      "{:.1f}% of its time) -- a floor for the p99 of any operation of a few microseconds or more\n",
      stalls.per_second, stalls.gaps.percentile(0.5) * kUs, stalls.gaps.max() * kUs, stalls.stolen_fraction * 100);

  // Every point is measured quiet and then loaded, back to back, so that the
  // pair sees the same machine (this VM's speed drifts over minutes).
  std::vector<Spec> specs;
  if (has(o.experiments, "latency")) {
    for (Primitive prim : {Primitive::kWrite, Primitive::kMemcpy}) {
      for (uint32_t size : o.sizes) specs.push_back({"latency", prim, size, 3});
    }
  }
  if (has(o.experiments, "cas")) specs.push_back({"cas", Primitive::kCas, 8, 3});
  if (has(o.experiments, "throughput")) {
    for (uint32_t size : o.sizes) specs.push_back({"throughput", Primitive::kWrite, size, 3});
  }
  if (has(o.experiments, "group_size")) {
    for (uint32_t n : o.group_sizes) specs.push_back({"group_size", Primitive::kWrite, o.group_size_bytes, n});
  }

  std::vector<Point> points;
  for (const std::string& system : o.systems) {
    FERRY_ASSIGN_OR_RETURN(auto sut, start_system(system, opts));
    uint64_t cas_counter = 0;
    for (const Spec& spec : specs) {
      FERRY_ASSIGN_OR_RETURN(GroupId g, group_of(*sut, spec.group, opts));
      const Histogram quiet_before = time_work_item(kGuardSamples);
      Histogram quiet_base = quiet_before;
      for (const std::string& load_name : o.loads) {
        const bool loaded = load_name == "load";
        Point p;
        p.experiment = spec.experiment;
        p.system = system;
        p.primitive = spec.primitive;
        p.size = spec.size;
        p.group = spec.group;
        p.load = loaded;
        p.cap_seconds = loaded && spec.experiment != "throughput" ? o.max_seconds_loaded : o.max_seconds;
        std::unique_ptr<CpuLoad> load;
        Histogram during;
        if (loaded) {
          // Separate processes, pinned to the replica CPU; they end by
          // themselves if this process dies.
          FERRY_ASSIGN_OR_RETURN(load,
                                 CpuLoad::start(replica_cpu, static_cast<int>(o.load_processes), p.cap_seconds + 120));
          during = time_work_item(kGuardSamples);
        }
        if (spec.experiment == "throughput") {
          p.window = o.window;
          FERRY_RETURN_IF_ERROR(throughput_point(*sut, g, p, opts));
        } else {
          FERRY_RETURN_IF_ERROR(latency_point(*sut, g, p, opts, &cas_counter));
        }
        const Histogram after = time_work_item(kGuardSamples);
        load.reset();
        during.merge(after);
        p.guard.base = quiet_base;
        p.guard.during = during;
        // A quiet point's after-measurement is quiet too: the loaded twin's
        // reference uses both quiet measurements.
        if (!loaded) quiet_base.merge(after);
        print_row(text, p);
        points.push_back(std::move(p));
      }
    }
  }

  // The headline: both baselines against HyperLoop at p50, p99 and p99.9,
  // quiet and loaded, from this run.
  text << "\nheadline (same run): baseline / hyperloop latency\n";
  for (const Spec& spec : specs) {
    if (spec.experiment == "throughput") continue;
    for (const std::string& load_name : o.loads) {
      const bool loaded = load_name == "load";
      const Point* hl = find(points, spec, "hyperloop", loaded);
      if (hl == nullptr) continue;
      std::string line = fmt::format("  {:<10} {:<7} {:>5} B group {} {:<5}", spec.experiment,
                                     hyperloop::primitive_name(spec.primitive), spec.size, spec.group, load_name);
      for (const char* base : {"naive-event", "naive-poll"}) {
        const Point* b = find(points, spec, base, loaded);
        if (b == nullptr) continue;
        const nlohmann::json r = ratios_json(b, hl);
        line += fmt::format("  {}: p50 {} p99 {} p99.9 {}", base, ratio_text(r["p50"]), ratio_text(r["p99"]),
                            ratio_text(r["p999"]));
      }
      text << line << "\n";
    }
    const Point* hq = find(points, spec, "hyperloop", false);
    const Point* hl = find(points, spec, "hyperloop", true);
    if (hq != nullptr && hl != nullptr && percentile_reportable(hq->hist, 0.99) &&
        percentile_reportable(hl->hist, 0.99)) {
      text << fmt::format("  {:<10} {:<7} {:>5} B group {} hyperloop p99 loaded / quiet = {:.2f}{}\n", spec.experiment,
                          hyperloop::primitive_name(spec.primitive), spec.size, spec.group,
                          static_cast<double>(hl->hist.percentile(0.99)) /
                              static_cast<double>(std::max<uint64_t>(1, hq->hist.percentile(0.99))),
                          hl->guard.disturbed() ? " (core DISTURBED: the load reached the NIC core)" : "");
    }
  }
  for (uint32_t size : o.sizes) {
    const Spec spec{"throughput", Primitive::kWrite, size, 3};
    const Point* th = find(points, spec, "hyperloop", false);
    const Point* tp = find(points, spec, "naive-poll", false);
    if (th != nullptr && tp != nullptr && th->seconds > 0 && tp->seconds > 0 && tp->ops > 0) {
      text << fmt::format("  throughput gwrite {:>5} B quiet: hyperloop / naive-poll = {:.2f}\n", size,
                          (static_cast<double>(th->ops) / th->seconds) / (static_cast<double>(tp->ops) / tp->seconds));
    }
  }
  if (o.json) {
    for (const Point& p : points) out << point_json(p, points, o, where, load_command, stalls_json).dump() << "\n";
    out << std::flush;
  }
  return ok_status();
}

}  // namespace ferry::bench
