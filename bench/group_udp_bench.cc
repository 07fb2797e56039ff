#include "group_udp_bench.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "child_process.h"
#include "common.h"
#include "engine_cost.h"
#include "ferry/cm/cm.h"
#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/naive.h"
#include "ferry/nic/engine.h"
#include "ferry/nicd/nicd.h"
#include "load_loop.h"
#include "regime.h"
#include "report.h"

namespace ferry::bench {
namespace {

constexpr size_t kRegionBytes = 1 << 20;
constexpr int kHosts = 4;  // the client's and three replicas' (at most)

struct Point {
  std::string system;
  uint32_t size = 0;
  bool stopped = false;  // replica processes SIGSTOPped for the whole point
  Histogram latency;
  uint64_t ops = 0;
  uint64_t failed = 0;
  double seconds = 0;
  uint64_t replica_cpu_ns = 0;  // all replica processes, during the point
  SchedStat daemons;            // the four nicd processes (every thread), during the point
  bool verified = false;        // every replica's region file holds the client's bytes
  std::string first_error;
};

// A TCP port free right now on 127.0.0.1 (bound, read, closed: another
// process could take it before the replica does, which then fails clearly).
Result<uint16_t> free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return unavailable(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  if (!ok) return unavailable(std::string("bind: ") + std::strerror(errno));
  return ntohs(a.sin_port);
}

char thread_state(const std::string& stat_path) {
  std::ifstream f(stat_path);
  std::string line;
  std::getline(f, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

// Whether every thread of `pid` is stopped (SIGSTOP stops them one by one:
// the main thread may show 'T' while another still runs for a moment).
bool all_threads_stopped(pid_t pid) {
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(task.c_str());
  if (d == nullptr) return false;
  bool stopped = true;
  int threads = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    ++threads;
    const char st = thread_state(task + "/" + e->d_name + "/stat");
    stopped = stopped && (st == 'T' || st == 't');
  }
  ::closedir(d);
  return stopped && threads > 0;
}

// A point's load (load_loop.h): synchronous gWRITEs of `size` bytes at
// rotating offsets, one at a time, each slot's bytes written (untimed) before
// it starts. A failed gWRITE is counted, not measured; one that says the
// group is gone (a replica stopped for good) ends the point.
class GwriteLoad {
 public:
  static constexpr bool kSynchronous = true;
  GwriteLoad(hyperloop::GroupClient& client, hyperloop::GroupId gid, Point& p, Recorder& rec)
      : client_(client),
        gid_(gid),
        p_(p),
        rec_(rec),
        mem_(client.client_memory(gid).value()),
        slots_(kRegionBytes / p.size) {
    fill();
  }
  Status issue(uint64_t at_ns) {
    const Status st = client_.gwrite(gid_, off_, p_.size);
    const uint64_t t1 = timing_clock().now_ns();
    ++p_.ops;
    if (st.ok()) {
      rec_.record(0, at_ns, t1);
    } else {
      if (p_.failed++ == 0) p_.first_error = st.to_string();
      gone_ = st.code() == Code::kFailedPrecondition || st.code() == Code::kTimedOut;
    }
    ++k_;
    fill();
    return ok_status();
  }
  Status step(uint64_t) { return ok_status(); }
  bool finished() const { return gone_; }

 private:
  void fill() {
    off_ = (k_ % slots_) * p_.size;
    std::memset(mem_.data() + off_, static_cast<int>((k_ * 131 + p_.size) & 0xFF), p_.size);
  }

  hyperloop::GroupClient& client_;
  hyperloop::GroupId gid_;
  Point& p_;
  Recorder& rec_;
  std::span<uint8_t> mem_;
  const uint64_t slots_;
  uint64_t k_ = 0;
  uint64_t off_ = 0;
  bool gone_ = false;
};

// `iters` gWRITEs (fewer if max_seconds ran out or the group is gone).
Status run_point(hyperloop::GroupClient& client, hyperloop::GroupId gid, Point& p, uint64_t iters, double max_seconds) {
  Recorder rec;
  GwriteLoad load(client, gid, p, rec);
  FERRY_ASSIGN_OR_RETURN(const LoopOutcome out,
                         run_closed(load, rec, LoopPlan::counted(0, iters, max_seconds), timing_clock()));
  p.latency = rec.all();
  p.seconds = out.seconds();
  return ok_status();
}

bool regions_match(const std::string& dir, uint32_t replicas, std::span<const uint8_t> client) {
  std::vector<uint8_t> buf(client.size());
  for (uint32_t i = 0; i < replicas; ++i) {
    const int fd = ::open((dir + "/r" + std::to_string(i) + ".pm").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
    ::close(fd);
    if (n != static_cast<ssize_t>(buf.size()) || std::memcmp(buf.data(), client.data(), buf.size()) != 0) return false;
  }
  return true;
}

// The in-process reference: the same group and operations with every host a
// NIC of one Engine in this process, stepped by the client thread as in
// `bench group` (a threaded engine sharing two cores with a spinning client
// parks and waits for the scheduler: a bimodal, ~200 us reference).
Result<Histogram> inproc_reference(const std::string& system, uint32_t replicas, uint32_t size, uint64_t iters,
                                   double max_seconds) {
  nic::EngineOptions eo;
  eo.threaded = false;
  nic::Engine engine(eo);
  hyperloop::GroupOptions go;
  go.replicas = replicas;
  go.region_bytes = kRegionBytes;
  go.media = pm::Media::kDram;
  std::unique_ptr<hyperloop::GroupClient> client;
  if (system == "hyperloop") {
    FERRY_ASSIGN_OR_RETURN(auto c, hyperloop::HyperLoopClient::create(engine));
    client = std::move(c);
  } else {
    hyperloop::NaiveOptions no;
    no.mode = system == "naive-poll" ? hyperloop::NaiveMode::kPoll : hyperloop::NaiveMode::kEvent;
    FERRY_ASSIGN_OR_RETURN(auto c, hyperloop::NaiveClient::create(engine, no));
    client = std::move(c);
  }
  FERRY_ASSIGN_OR_RETURN(hyperloop::GroupId gid, client->create_group(go));
  Point p;
  p.size = size;
  FERRY_RETURN_IF_ERROR(run_point(*client, gid, p, iters, max_seconds));
  if (p.failed != 0) return internal_error("in-process reference: " + p.first_error);
  return p.latency;
}

nlohmann::json point_json(const Point& p, const Histogram* ref, uint32_t replicas, uint32_t daemon_spin_us,
                          int client_cpu, int daemon_cpu) {
  nlohmann::json j;
  j["experiment"] = "latency";
  j["transport"] = "udp";
  j["system"] = p.system;
  j["primitive"] = "gwrite";
  j["size"] = p.size;
  j["group"] = replicas;
  j["load"] = false;
  j["replicas_stopped"] = p.stopped;
  j["ops"] = p.ops;
  j["failed"] = p.failed;
  j["samples"] = p.latency.count();
  j["avg_us"] = p.latency.mean() / 1000.0;
  j["p50_us"] = percentile_json(p.latency, 0.50, 1e-3);
  j["p95_us"] = percentile_json(p.latency, 0.95, 1e-3);
  j["p99_us"] = percentile_json(p.latency, 0.99, 1e-3);
  j["p999_us"] = percentile_json(p.latency, 0.999, 1e-3);
  j["max_us"] = static_cast<double>(p.latency.max()) / 1000.0;
  j["seconds"] = p.seconds;
  j["ops_per_s"] = p.seconds > 0 ? static_cast<double>(p.latency.count()) / p.seconds : 0.0;
  j["replica_cpu_ns_per_op"] = p.ops ? static_cast<double>(p.replica_cpu_ns) / static_cast<double>(p.ops) : 0.0;
  j["replica_cpu_source"] = "/proc/PID/task/*/schedstat of the replica processes";
  // What bounded the point (regime.h): the CPU the four daemons' engines
  // share (pinned: one core; else every CPU) or the replicas' CPU; a
  // naive-poll replica polls, so its CPU says nothing of its work.
  {
    const double window_ns = p.seconds * 1e9;
    const double daemon_cores =
        daemon_cpu >= 0 ? 1.0 : static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
    const double daemons_busy = window_ns > 0 ? static_cast<double>(p.daemons.run_ns) / window_ns / daemon_cores : 0.0;
    const double replica = window_ns > 0 ? static_cast<double>(p.replica_cpu_ns) / window_ns : 0.0;
    const double daemons_wait = window_ns > 0 ? static_cast<double>(p.daemons.wait_ns) / window_ns : 0.0;
    const std::string bound = bound_by(
        {{"nic-daemons", daemons_busy}, {"replica", p.system == "naive-poll" || p.stopped ? kNotMeasured : replica}},
        /*closed_loop=*/true);
    j["regime"] = {{"nic_daemons_cpu_fraction", daemons_busy},
                   {"nic_daemons_wait_fraction", daemons_wait},
                   {"replica_cpu_fraction", replica},
                   // The daemons waited for their CPU (each other, or another process) more than regime.h allows.
                   {"nic_daemons_contend", daemons_wait > kDisturbedWait},
                   {"bound_by", bound},
                   {"how",
                    "nic-daemons = the four ferry nicd processes' CPU time (schedstat, every thread) over the window, "
                    "per core they share (pinned to one: 1); their wait = time runnable but off the CPU, summed; "
                    "replica = the replica processes' CPU time over the window (naive-poll's poll: left out); at "
                    "0.9 or more a resource bounds the point, else the round trips do (other)"}};
    j["bound_by"] = bound;
  }
  j["regions_verified"] = p.verified;
  if (!p.first_error.empty()) j["first_error"] = p.first_error;
  if (ref != nullptr) {
    nlohmann::json r;
    r["samples"] = ref->count();
    r["p50_us"] = percentile_json(*ref, 0.50, 1e-3);
    r["p99_us"] = percentile_json(*ref, 0.99, 1e-3);
    j["inproc"] = r;
    if (ref->count() > 0 && p.latency.count() > 0) {
      j["p50_over_inproc"] = static_cast<double>(p.latency.percentile(0.5)) / static_cast<double>(ref->percentile(0.5));
    }
  }
  auto cpu_text = [](int c) { return c >= 0 ? "CPU " + std::to_string(c) : std::string("not pinned"); };
  j["placement"] = {{"client", "this process (polling), " + cpu_text(client_cpu)},
                    {"inproc_reference", "every host a NIC of one engine stepped by the client thread"},
                    {"nic_engines", "four ferry nicd processes, engines " + cpu_text(daemon_cpu)},
                    {"daemon_spin_us", daemon_spin_us},
                    {"daemon_spin_policy", "shared (sched_yield between passes)"},
                    {"replicas", "three ferry hyperloop replica processes, not pinned"},
                    {"cpu_load", "none"}};
  add_provenance(j);
  return j;
}

}  // namespace

Status run_group_udp_bench(const GroupUdpBenchOptions& o, std::ostream& out, std::ostream& log) {
  if (o.replicas < 1 || o.replicas > kHosts - 1)
    return invalid_argument("--group-sizes: 1..3 replicas with --transport udp");
  for (const std::string& s : o.systems) {
    if (s != "hyperloop" && s != "naive-event" && s != "naive-poll")
      return invalid_argument("unknown system '" + s + "'");
  }
  for (uint32_t size : o.sizes) {
    if (size == 0 || size > kRegionBytes) return invalid_argument("size " + std::to_string(size) + " outside 1..1 MiB");
  }
  char tmpl[] = "/dev/shm/ferry-bench-group-XXXXXX";
  char tmpl2[] = "/tmp/ferry-bench-group-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  if (d == nullptr) d = ::mkdtemp(tmpl2);
  if (d == nullptr) return unavailable(std::string("mkdtemp: ") + std::strerror(errno));
  const std::string dir = d;
  set_cleanup_dir(dir);
  auto cleanup = [&] {
    for (int h = 0; h < kHosts; ++h) ::unlink((dir + "/n" + std::to_string(h) + ".sock").c_str());
    for (uint32_t i = 0; i < o.replicas; ++i) ::unlink((dir + "/r" + std::to_string(i) + ".pm").c_str());
    ::unlink((dir + "/chain.toml").c_str());
    ::rmdir(dir.c_str());
    set_cleanup_dir("");
  };

  const int client_cpu = usable_cpu(o.client_cpu);
  const int daemon_cpu = usable_cpu(o.daemon_engine_cpu);
  std::vector<nlohmann::json> rows;
  Status result = [&]() -> Status {
    // The reference first, before any helper process exists.
    std::map<std::pair<std::string, uint32_t>, Histogram> refs;
    for (const std::string& system : o.systems) {
      for (uint32_t size : o.sizes) {
        log << fmt::format("in-process reference: {} gwrite {} B ...\n", system, size) << std::flush;
        FERRY_ASSIGN_OR_RETURN(Histogram h, inproc_reference(system, o.replicas, size, o.iters, o.max_seconds));
        refs[std::make_pair(system, size)] = h;
      }
    }
    std::vector<std::unique_ptr<ChildProcess>> daemons;
    for (int h = 0; h < kHosts; ++h) {
      FERRY_ASSIGN_OR_RETURN(
          auto c,
          ChildProcess::spawn_self("nicd host" + std::to_string(h),
                                   {"nicd", "--socket", dir + "/n" + std::to_string(h) + ".sock", "--bind",
                                    "127.0.0.1:0", "--name", "host" + std::to_string(h), "--spin-us",
                                    std::to_string(o.daemon_spin_us), "--engine-cpu", std::to_string(daemon_cpu)}));
      FERRY_RETURN_IF_ERROR(c->wait_for_line("event=ready", 10000).status());
      daemons.push_back(std::move(c));
    }
    if (client_cpu >= 0) FERRY_RETURN_IF_ERROR(pin_current_thread(client_cpu));
    nicd::OpenOptions oo;
    oo.socket_path = dir + "/n0.sock";
    oo.client_name = "bench-group";
    FERRY_ASSIGN_OR_RETURN(auto device, nicd::Device::open(oo));

    for (const std::string& system : o.systems) {
      std::vector<uint16_t> ports;
      for (uint32_t i = 0; i <= o.replicas; ++i) {
        FERRY_ASSIGN_OR_RETURN(uint16_t port, free_port());
        ports.push_back(port);
      }
      {
        std::ofstream cfg(dir + "/chain.toml", std::ios::trunc);
        cfg << fmt::format(
            "[group]\nsystem = \"{}\"\nname = \"bench\"\nreplicas = {}\nregion_bytes = {}\n"
            "ring_ops = 128\nwindow = 16\nconnect_timeout_ms = 20000\n\n[client]\nnicd = \"{}\"\n"
            "listen = \"127.0.0.1:{}\"\n",
            system, o.replicas, kRegionBytes, dir + "/n0.sock", ports[0]);
        for (uint32_t i = 0; i < o.replicas; ++i) {
          cfg << fmt::format(
              "\n[[replica]]\nnicd = \"{}/n{}.sock\"\nlisten = \"127.0.0.1:{}\"\nregion = \"{}/r{}.pm\"\n", dir, 1 + i,
              ports[1 + i], dir, i);
        }
        if (!cfg) return unavailable("cannot write " + dir + "/chain.toml");
      }
      std::vector<std::unique_ptr<ChildProcess>> replicas;
      for (uint32_t i = 0; i < o.replicas; ++i) {
        FERRY_ASSIGN_OR_RETURN(auto c, ChildProcess::spawn_self(system + " replica " + std::to_string(i),
                                                                {"hyperloop", "replica", "--config",
                                                                 dir + "/chain.toml", "--index", std::to_string(i)}));
        FERRY_RETURN_IF_ERROR(c->wait_for_line("event=listening", 10000).status());
        replicas.push_back(std::move(c));
      }
      FERRY_ASSIGN_OR_RETURN(auto listener, cm::Listener::start("127.0.0.1:" + std::to_string(ports[0])));
      hyperloop::RemoteGroupOptions ro;
      ro.group = "bench";
      ro.options.replicas = o.replicas;
      ro.options.region_bytes = kRegionBytes;
      ro.head = "127.0.0.1:" + std::to_string(ports[1]);
      ro.listener = listener.get();
      ro.timeout_ms = 20000;
      hyperloop::ClientOptions co;
      co.op_timeout_ns = 10'000'000'000ULL;
      std::unique_ptr<hyperloop::GroupClient> client;
      Result<hyperloop::GroupId> gid = invalid_argument("unset");
      if (system == "hyperloop") {
        FERRY_ASSIGN_OR_RETURN(auto c, hyperloop::HyperLoopClient::create(device->nic(), co));
        gid = c->connect_group(ro);
        client = std::move(c);
      } else {
        hyperloop::NaiveOptions no;
        no.client = co;
        FERRY_ASSIGN_OR_RETURN(auto c, hyperloop::NaiveClient::create(device->nic(), no));
        gid = c->connect_group(ro);
        client = std::move(c);
      }
      FERRY_RETURN_IF_ERROR(gid.status());
      for (auto& r : replicas) FERRY_RETURN_IF_ERROR(r->wait_for_line("event=serving", 10000).status());
      log << fmt::format("{}: chain of {} replica processes connected over UDP\n", system, o.replicas) << std::flush;

      for (uint32_t size : o.sizes) {
        for (bool stopped : {false, true}) {
          if (stopped && (system != "hyperloop" || !o.stop_replicas)) continue;
          Point p;
          p.system = system;
          p.size = size;
          p.stopped = stopped;
          if (stopped) {
            for (auto& r : replicas) ::kill(r->pid(), SIGSTOP);
            for (auto& r : replicas) {
              for (int t = 0; t < 1000 && !all_threads_stopped(r->pid()); ++t) usleep(1000);
              if (!all_threads_stopped(r->pid())) return internal_error(r->name() + " did not stop");
            }
          }
          uint64_t cpu0 = 0, cpu1 = 0;
          SchedStat d0, d1;
          for (auto& d : daemons) d0 += read_schedstat_except(d->pid(), -1);
          for (auto& r : replicas) cpu0 += r->cpu_time_ns();
          log << fmt::format("{} gwrite {} B{}: {} operations ...\n", system, size,
                             stopped ? " (replica processes stopped)" : "", o.iters)
              << std::flush;
          FERRY_RETURN_IF_ERROR(run_point(*client, gid.value(), p, o.iters, o.max_seconds));
          for (auto& r : replicas) cpu1 += r->cpu_time_ns();
          for (auto& d : daemons) d1 += read_schedstat_except(d->pid(), -1);
          p.replica_cpu_ns = cpu1 - cpu0;
          p.daemons = SchedStat{d1.run_ns - d0.run_ns, d1.wait_ns - d0.wait_ns};
          const uint64_t written = std::min<uint64_t>(p.ops, kRegionBytes / size) * size;
          p.verified = p.failed == 0 &&
                       regions_match(dir, o.replicas, client->client_memory(gid.value()).value().first(written));
          if (stopped) {
            for (auto& r : replicas) {
              if (!all_threads_stopped(r->pid())) p.first_error = r->name() + " was not stopped throughout";
              ::kill(r->pid(), SIGCONT);
            }
          }
          auto it = refs.find(std::make_pair(system, size));
          rows.push_back(point_json(p, it == refs.end() ? nullptr : &it->second, o.replicas, o.daemon_spin_us,
                                    client_cpu, daemon_cpu));
        }
      }
      client.reset();
      listener.reset();
      for (auto& r : replicas) FERRY_RETURN_IF_ERROR(r->stop());
    }
    device.reset();
    for (auto& dmn : daemons) FERRY_RETURN_IF_ERROR(dmn->stop());
    return ok_status();
  }();
  cleanup();
  FERRY_RETURN_IF_ERROR(result);

  // The issue's target: HyperLoop with the replica processes stopped, 0 failed.
  for (auto& j : rows) {
    if (j["system"] == "hyperloop" && j["replicas_stopped"] == true) {
      j["targets"] = {{{"name", "0 failed operations with the replica processes SIGSTOPped"},
                       {"met", j["failed"] == 0 && j["ops"] == o.iters && j["regions_verified"] == true},
                       {"measured_failed", j["failed"]},
                       {"ops", j["ops"]}}};
    }
  }
  if (o.json) {
    for (const auto& j : rows) out << j.dump() << "\n";
  } else {
    out << fmt::format("{:<12} {:>6} {:>8} {:>7} {:>7} {:>9} {:>9} {:>9} {:>10} {:>12} {:>10}  {}\n", "system", "size",
                       "stopped", "ops", "failed", "p50_us", "p99_us", "inproc50", "p50/inproc", "replica_ns/op",
                       "verified", "bound (daemons' CPU, their wait)");
    for (const auto& j : rows) {
      auto num = [](const nlohmann::json& v) {
        return v.is_null() ? std::string("n/a") : fmt::format("{:.1f}", v.get<double>());
      };
      out << fmt::format(
          "{:<12} {:>6} {:>8} {:>7} {:>7} {:>9} {:>9} {:>9} {:>10} {:>12.0f} {:>10}  {} ({:.2f}, {:.2f})\n",
          j["system"].get<std::string>(), j["size"].get<uint32_t>(), j["replicas_stopped"].get<bool>() ? "yes" : "no",
          j["ops"].get<uint64_t>(), j["failed"].get<uint64_t>(), num(j["p50_us"]), num(j["p99_us"]),
          j.contains("inproc") ? num(j["inproc"]["p50_us"]) : "-",
          j.contains("p50_over_inproc") ? fmt::format("{:.2f}", j["p50_over_inproc"].get<double>()) : "-",
          j["replica_cpu_ns_per_op"].get<double>(), j["regions_verified"].get<bool>() ? "yes" : "NO",
          j["bound_by"].get<std::string>(), j["regime"]["nic_daemons_cpu_fraction"].get<double>(),
          j["regime"]["nic_daemons_wait_fraction"].get<double>());
    }
    out << fmt::format(
        "NIC engines: four `ferry nicd` processes on loopback UDP, engines {}, each polling {} us after its last work "
        "(shared spin policy); client polling on {}; replicas: separate processes, not pinned; no CPU load. Latencies "
        "are the software RNIC's, not RNIC hardware's.\n",
        daemon_cpu >= 0 ? "on CPU " + std::to_string(daemon_cpu) : std::string("not pinned"), o.daemon_spin_us,
        client_cpu >= 0 ? "CPU " + std::to_string(client_cpu) : std::string("no pinned CPU"));
  }
  return ok_status();
}

}  // namespace ferry::bench
