#include "group_bench.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>

#include "cpu_load.h"
#include "ferry/common/clock.h"
#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/naive.h"
#include "report.h"

namespace ferry::bench {

using hyperloop::GroupClient;
using hyperloop::GroupId;
using hyperloop::Primitive;

namespace {

uint64_t now_ns() { return SteadyClock::instance().now_ns(); }

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
  uint64_t replica_cpu_ns = 0;
  uint64_t client_cpu_ns = 0;  // the client thread, which also runs every NIC
  double core_slowdown = 1.0;  // core_reference_ns() under this point's load / just before it
  bool capped = false;  // stopped by max_seconds before its operation count
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
  s->engine = std::make_unique<nic::Engine>(eo);
  hyperloop::ClientOptions co;
  co.op_timeout_ns = 60'000'000'000ULL;
  co.replica_cpu = o.replica_cpu;
  if (name == "hyperloop") {
    FERRY_ASSIGN_OR_RETURN(auto c, hyperloop::HyperLoopClient::create(*s->engine, co));
    s->client = std::move(c);
  } else if (name == "naive-event" || name == "naive-poll") {
    hyperloop::NaiveOptions no;
    no.mode = name == "naive-event" ? hyperloop::NaiveMode::kEvent : hyperloop::NaiveMode::kPoll;
    no.client = co;
    no.replica_cpu = o.replica_cpu;
    FERRY_ASSIGN_OR_RETURN(auto c, hyperloop::NaiveClient::create(*s->engine, no));
    s->client = std::move(c);
  } else {
    return invalid_argument("unknown system '" + name + "' (hyperloop, naive-event, naive-poll)");
  }
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
  Slots(size_t region, uint32_t size) : stride((size + 63) / 64 * 64), count(std::max<size_t>(1, region / 2 / stride)) {}
  uint64_t at(uint64_t i) const { return (i % count) * stride; }
  uint64_t stride;
  uint64_t count;
};

Status one_op(GroupClient& c, GroupId g, Primitive p, uint32_t size, uint64_t i, const Slots& slots, size_t region,
              bool flush) {
  if (p == Primitive::kMemcpy) return c.gmemcpy(g, slots.at(i), region / 2 + slots.at(i), size, flush);
  return c.gwrite(g, slots.at(i), size, flush);
}

Status latency_point(SystemUnderTest& s, GroupId g, Point& pt, const GroupBenchOptions& o, uint64_t* cas_counter) {
  GroupClient& c = *s.client;
  const Slots slots(o.region_bytes, pt.size);
  auto run = [&](uint64_t i) -> Status {
    if (pt.primitive == Primitive::kCas) {
      auto r = c.gcas(g, 0, *cas_counter, *cas_counter + 1, static_cast<uint8_t>((1u << pt.group) - 1), false);
      if (!r.ok()) return r.status();
      if (r->succeeded != static_cast<uint8_t>((1u << pt.group) - 1)) return internal_error("gcas counter lost a race");
      ++*cas_counter;
      return ok_status();
    }
    return one_op(c, g, pt.primitive, pt.size, i, slots, o.region_bytes, o.flush);
  };
  for (uint64_t i = 0; i < 100; ++i) FERRY_RETURN_IF_ERROR(run(i));  // warm-up
  const uint64_t cpu0 = c.replica_cpu_ns();
  const uint64_t client0 = thread_cpu_time_ns();
  const uint64_t start = now_ns();
  const uint64_t cap = static_cast<uint64_t>(o.max_seconds * 1e9);
  uint64_t i = 0;
  for (; i < o.iters; ++i) {
    const uint64_t t0 = now_ns();
    if (t0 - start > cap) {
      pt.capped = true;
      break;
    }
    FERRY_RETURN_IF_ERROR(run(i));
    pt.hist.record(now_ns() - t0);
  }
  pt.seconds = static_cast<double>(now_ns() - start) / 1e9;
  pt.ops = i;
  pt.replica_cpu_ns = c.replica_cpu_ns() - cpu0;
  pt.client_cpu_ns = thread_cpu_time_ns() - client0;
  return ok_status();
}

Status throughput_point(SystemUnderTest& s, GroupId g, Point& pt, const GroupBenchOptions& o) {
  GroupClient& c = *s.client;
  const Slots slots(o.region_bytes, pt.size);
  const uint64_t target_ops = std::max<uint64_t>(1, o.throughput_bytes / pt.size);
  struct Tally {
    Histogram* hist;
    Status failure;
  } tally{&pt.hist, ok_status()};
  // Warm-up, then measure.
  for (uint64_t i = 0; i < 200; ++i) FERRY_RETURN_IF_ERROR(c.gwrite(g, slots.at(i), pt.size, o.flush));
  const uint64_t cpu0 = c.replica_cpu_ns();
  const uint64_t client0 = thread_cpu_time_ns();
  const uint64_t start = now_ns();
  const uint64_t cap = static_cast<uint64_t>(o.max_seconds * 1e9);
  uint64_t i = 0;
  for (; i < target_ops; ++i) {
    const uint64_t t0 = now_ns();
    if ((i & 63) == 0 && t0 - start > cap) {
      pt.capped = true;
      break;
    }
    // Two words of capture: std::function keeps it inline, no allocation.
    Tally* t = &tally;
    FERRY_RETURN_IF_ERROR(c.gwrite_async(g, slots.at(i), pt.size, o.flush, [t, t0](const hyperloop::OpResult& r) {
      if (!r.status.ok() && t->failure.ok()) t->failure = r.status;
      t->hist->record(now_ns() - t0);
    }));
    if (!tally.failure.ok()) return tally.failure;
  }
  FERRY_RETURN_IF_ERROR(c.drain(g));
  FERRY_RETURN_IF_ERROR(tally.failure);
  pt.seconds = static_cast<double>(now_ns() - start) / 1e9;
  pt.ops = i;
  pt.replica_cpu_ns = c.replica_cpu_ns() - cpu0;
  pt.client_cpu_ns = thread_cpu_time_ns() - client0;
  return ok_status();
}

double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

// The physical reference for the load experiments: a fixed CPU-bound
// workload (xorshift over an L2-resident buffer) on the client thread, the
// best of several runs. Run quiet and under load, its ratio says how much the
// replica CPU's load slows the core that emulates every NIC -- on this VM the
// two vCPUs share more than they would with a real NIC.
uint64_t core_reference_ns() {
  static std::vector<uint64_t> buf(32768);
  uint64_t best = UINT64_MAX;
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int run = 0; run < 9; ++run) {
    const uint64_t t0 = now_ns();
    for (int pass = 0; pass < 8; ++pass) {
      for (uint64_t& v : buf) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v += x;
      }
    }
    best = std::min(best, now_ns() - t0);
  }
  volatile uint64_t sink = buf[x % buf.size()];
  (void)sink;
  return best;
}

nlohmann::json point_json(const Point& p, const GroupBenchOptions& o, const std::string& where) {
  nlohmann::json j;
  j["experiment"] = p.experiment;
  j["system"] = p.system;
  j["primitive"] = std::string(hyperloop::primitive_name(p.primitive));
  j["size"] = p.size;
  j["group"] = p.group;
  j["load"] = p.load;
  j["window"] = p.window;
  j["ops"] = p.ops;
  j["seconds"] = p.seconds;
  j["capped"] = p.capped;
  j["avg_us"] = p.hist.mean() / 1000.0;
  j["p50_us"] = us(p.hist.percentile(0.50));
  j["p95_us"] = us(p.hist.percentile(0.95));
  j["p99_us"] = us(p.hist.percentile(0.99));
  j["p999_us"] = us(p.hist.percentile(0.999));
  j["max_us"] = us(p.hist.max());
  j["ops_per_s"] = p.seconds > 0 ? static_cast<double>(p.ops) / p.seconds : 0.0;
  j["gbps"] = p.seconds > 0 ? static_cast<double>(p.ops) * p.size * 8 / p.seconds / 1e9 : 0.0;
  j["replica_cpu_ns_per_op"] = p.ops ? static_cast<double>(p.replica_cpu_ns) / static_cast<double>(p.ops) : 0.0;
  // Cores' worth of replica CPU while the point ran (1.0 = one core busy).
  j["replica_cpu_cores"] = p.seconds > 0 ? static_cast<double>(p.replica_cpu_ns) / (p.seconds * 1e9) : 0.0;
  // The client thread's CPU: the client machine plus every emulated NIC.
  j["client_and_nic_cpu_ns_per_op"] =
      p.ops ? static_cast<double>(p.client_cpu_ns) / static_cast<double>(p.ops) : 0.0;
  j["client_core_slowdown"] = p.core_slowdown;
  j["media"] = o.media == pm::Media::kPm ? "pm" : "dram";
  j["flush"] = o.flush;
  j["placement"] = where;
  return j;
}

void print_row(std::ostream& out, const Point& p) {
  out << fmt::format("  {:<12} {:<8} {:>6} B  group {}  {:<5}  ops {:>6}{}  avg {:>9.1f}  p50 {:>9.1f}  p95 {:>9.1f}  "
                     "p99 {:>9.1f}  p99.9 {:>9.1f}  max {:>9.1f} us  {:>9.0f} op/s  replica CPU {:>8.0f} ns/op\n",
                     p.system, hyperloop::primitive_name(p.primitive), p.size, p.group, p.load ? "load" : "quiet",
                     p.ops, p.capped ? "*" : " ", p.hist.mean() / 1000.0, us(p.hist.percentile(0.5)),
                     us(p.hist.percentile(0.95)), us(p.hist.percentile(0.99)), us(p.hist.percentile(0.999)),
                     us(p.hist.max()), p.seconds > 0 ? static_cast<double>(p.ops) / p.seconds : 0.0,
                     p.ops ? static_cast<double>(p.replica_cpu_ns) / static_cast<double>(p.ops) : 0.0);
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

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
    if (s == 0 || s > o.region_bytes / 4) return invalid_argument("size " + std::to_string(s) + " does not fit the region");
  }
  for (uint32_t g : o.group_sizes) {
    if (g < 1 || g > hyperloop::kMaxReplicas) return invalid_argument("group size " + std::to_string(g) + " not in 1..7");
  }
  if (o.iters == 0) return invalid_argument("--iters must be at least 1");
  if (o.window < 1 || o.window > 32) {
    return invalid_argument("--window must be 1..32, not " + std::to_string(o.window));
  }

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
  text << "ferry bench group: HyperLoop §6.1 against Naive-RDMA (event and poll), same run\n"
      << "  " << where << "\n"
      << fmt::format("  load: {} busy processes pinned to CPU {} when 'load'; replica regions: {} ({}), {} MiB; "
                     "flush: {}\n",
                     o.load_processes, replica_cpu, o.media == pm::Media::kPm ? "PM" : "DRAM",
                     o.media == pm::Media::kPm ? "libpmem2 file, persistence modeled" : "volatile",
                     o.region_bytes >> 20, o.flush ? "interleaved gFLUSH" : "none")
      << "  machine: " << machine_description() << "\n"
      << "  (* = stopped by the " << o.max_seconds << " s cap before its operation count)\n";

  // Every point is measured quiet and then loaded, back to back, so that the
  // pair sees the same machine (this VM's speed drifts over minutes).
  struct Spec {
    std::string experiment;
    Primitive primitive;
    uint32_t size;
    uint32_t group;
  };
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
  double worst_slowdown = 1.0;
  for (const std::string& system : o.systems) {
    FERRY_ASSIGN_OR_RETURN(auto sut, start_system(system, opts));
    uint64_t cas_counter = 0;
    for (const Spec& spec : specs) {
      FERRY_ASSIGN_OR_RETURN(GroupId g, group_of(*sut, spec.group, opts));
      for (const std::string& load_name : o.loads) {
        const bool loaded = load_name == "load";
        std::unique_ptr<CpuLoad> load;
        double slowdown = 1.0;
        if (loaded) {
          // The reference quiet, then under the load: back to back, like the point's pair.
          const uint64_t quiet_reference = core_reference_ns();
          FERRY_ASSIGN_OR_RETURN(load, CpuLoad::start(replica_cpu, static_cast<int>(o.load_processes)));
          usleep(20000);  // let the spinners start
          slowdown = static_cast<double>(core_reference_ns()) /
                     static_cast<double>(std::max<uint64_t>(1, quiet_reference));
          worst_slowdown = std::max(worst_slowdown, slowdown);
        }
        Point p;
        p.experiment = spec.experiment;
        p.system = system;
        p.primitive = spec.primitive;
        p.size = spec.size;
        p.group = spec.group;
        p.load = loaded;
        if (spec.experiment == "throughput") {
          p.window = o.window;
          FERRY_RETURN_IF_ERROR(throughput_point(*sut, g, p, opts));
        } else {
          FERRY_RETURN_IF_ERROR(latency_point(*sut, g, p, opts, &cas_counter));
        }
        p.core_slowdown = slowdown;
        print_row(text, p);
        if (o.json) out << point_json(p, o, where).dump() << "\n" << std::flush;
        points.push_back(std::move(p));
      }
    }
  }
  if (has(o.loads, "load")) {
    text << fmt::format("under load the client/NIC core ran its reference workload up to {:.2f}x slower than quiet "
                       "(resources the VM's two vCPUs share; a real NIC would not slow down)\n",
                       worst_slowdown);
  }

  // Ratios from this run: the paper's claims are about them.
  auto find = [&](const std::string& exp, const std::string& sys, Primitive prim, uint32_t size, uint32_t group,
                  bool loaded) -> const Point* {
    for (const Point& p : points) {
      if (p.experiment == exp && p.system == sys && p.primitive == prim && p.size == size && p.group == group &&
          p.load == loaded) {
        return &p;
      }
    }
    return nullptr;
  };
  text << "\nratios (same run):\n";
  for (uint32_t size : o.sizes) {
    const Point* hq = find("latency", "hyperloop", Primitive::kWrite, size, 3, false);
    const Point* hl = find("latency", "hyperloop", Primitive::kWrite, size, 3, true);
    const Point* el = find("latency", "naive-event", Primitive::kWrite, size, 3, true);
    const Point* pl = find("latency", "naive-poll", Primitive::kWrite, size, 3, true);
    if (hl != nullptr && el != nullptr) {
      text << fmt::format("  gwrite {:>5} B under load: p99 naive-event / hyperloop = {:.1f}x", size,
                         static_cast<double>(el->hist.percentile(0.99)) /
                             static_cast<double>(std::max<uint64_t>(1, hl->hist.percentile(0.99))));
      if (pl != nullptr) {
        text << fmt::format(", naive-poll / hyperloop = {:.2f}x",
                           static_cast<double>(pl->hist.percentile(0.99)) /
                               static_cast<double>(std::max<uint64_t>(1, hl->hist.percentile(0.99))));
      }
      text << "\n";
    }
    if (hq != nullptr && hl != nullptr) {
      text << fmt::format("  gwrite {:>5} B hyperloop p99 load / quiet = {:.2f}\n", size,
                         static_cast<double>(hl->hist.percentile(0.99)) /
                             static_cast<double>(std::max<uint64_t>(1, hq->hist.percentile(0.99))));
    }
    const Point* th = find("throughput", "hyperloop", Primitive::kWrite, size, 3, false);
    const Point* tp = find("throughput", "naive-poll", Primitive::kWrite, size, 3, false);
    if (th != nullptr && tp != nullptr && th->seconds > 0 && tp->seconds > 0 && tp->ops > 0) {
      text << fmt::format("  gwrite {:>5} B quiet throughput hyperloop / naive-poll = {:.2f}\n", size,
                         (static_cast<double>(th->ops) / th->seconds) / (static_cast<double>(tp->ops) / tp->seconds));
    }
  }
  return ok_status();
}

}  // namespace ferry::bench
