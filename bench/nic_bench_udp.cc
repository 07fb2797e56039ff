// `ferry bench nic --transport udp`: the two NICs are two NIC daemons
// (nic_bench.h), with the in-process figure and a plain UDP ping-pong
// measured in the same run.
#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "child_process.h"
#include "engine_cost.h"
#include "ferry/common/cpu.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/verbs.h"
#include "ferry/nicd/nicd.h"
#include "nic_bench_point.h"
#include "reference.h"
#include "report.h"
#include "udp_pingpong.h"

namespace ferry::bench::nic_point {
namespace {

// ---- --transport udp ----

// Pins the calling thread to `cpu`, or lets it run anywhere (-1).
void place_current_thread(int cpu) {
  if (cpu >= 0) {
    (void)pin_current_thread(cpu);
    return;
  }
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < available_cpus(); ++c) CPU_SET(c, &all);
  (void)pthread_setaffinity_np(pthread_self(), sizeof(all), &all);
}

// Moves another (single-threaded) process to `cpu`, or lets it run anywhere (-1).
void place_process(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpu >= 0) {
    CPU_SET(cpu, &set);
  } else {
    for (int c = 0; c < available_cpus(); ++c) CPU_SET(c, &set);
  }
  (void)sched_setaffinity(pid, sizeof(set), &set);
}

// A directory for the daemons' sockets, removed with what is left in it.
class TempDir {
 public:
  static Result<TempDir> create() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/ferry-bench-nic-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return unavailable("cannot create " + tmpl + ": " + std::strerror(errno));
    TempDir d;
    d.path_ = tmpl;
    set_cleanup_dir(tmpl);
    return d;
  }
  TempDir() = default;
  TempDir(TempDir&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  TempDir& operator=(TempDir&& o) noexcept {
    std::swap(path_, o.path_);
    return *this;
  }
  ~TempDir() {
    if (path_.empty()) return;
    set_cleanup_dir("");
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One of the two NIC daemons and what the benchmark attached to it.
struct DaemonSide {
  std::string name;  // "a" (client side) or "b" (server side)
  int engine_cpu = -1;
  uint64_t spin_us = 0;
  std::unique_ptr<ChildProcess> process;
  std::string ready_line;
  int engine_tid = 0;  // its engine thread (by name); 0 if not found
  std::unique_ptr<nicd::Device> device;
  nicd::SharedMemory memory;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<CompletionChannel> channel;  // client side with --client-wait block
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<QueuePair> qp;
  UdpEndpoint udp;

  // Destroys the verbs objects, then the attachment (the daemon keeps running).
  void detach() {
    qp.reset();
    cq.reset();
    channel.reset();
    mr.reset();
    pd.reset();
    device.reset();
    memory = nicd::SharedMemory();
  }
  ~DaemonSide() { detach(); }  // then `process` stops the daemon (SIGTERM, SIGKILL after 2 s)
};

// The benchmark's two hosts as two NIC daemons (separate processes,
// posix_spawned from this executable) talking RoCEv2 over loopback UDP: the
// client side attached to daemon A, the server side to daemon B.
class UdpTestbed {
 public:
  static Result<std::unique_ptr<UdpTestbed>> start(const NicBenchOptions& o, uint32_t max_size, std::ostream& log) {
    std::unique_ptr<UdpTestbed> t(new UdpTestbed());
    FERRY_ASSIGN_OR_RETURN(t->dir_, TempDir::create());
    t->slot_bytes_ = std::max<uint32_t>(max_size, 64);
    const char* names[2] = {"a", "b"};
    for (int i = 0; i < 2; ++i) {
      DaemonSide& d = t->side_[i];
      d.name = names[i];
      d.engine_cpu = usable_cpu(o.daemon_engine_cpus[i]);
      d.spin_us = o.daemon_spin_us[i];
      const std::string socket = t->dir_.path() + "/" + d.name + ".sock";
      FERRY_ASSIGN_OR_RETURN(
          d.process,
          ChildProcess::spawn_self("nicd " + d.name, {"nicd", "--socket", socket, "--bind", "127.0.0.1:0", "--name",
                                                      "bench-" + d.name, "--engine-cpu", std::to_string(d.engine_cpu),
                                                      "--spin-us", std::to_string(d.spin_us), "--arena-mib", "64"}));
      FERRY_ASSIGN_OR_RETURN(d.ready_line, d.process->wait_for_line("event=ready", 10'000));
      log << "  daemon " << d.name << " (pid " << d.process->pid() << "): " << d.ready_line << "\n";
      d.engine_tid = find_engine_thread(d.process->pid());
      auto dev = nicd::Device::open({.socket_path = socket, .client_name = "ferry-bench-nic-" + d.name});
      if (!dev.ok()) return unavailable("cannot attach to daemon " + d.name + ": " + dev.status().message());
      d.device = std::move(dev).value();
      Nic& nic = d.device->nic();
      const auto ep = nic.udp_endpoint();
      if (!ep) return internal_error("daemon " + d.name + " reports no UDP endpoint");
      d.udp = *ep;
      FERRY_ASSIGN_OR_RETURN(
          d.memory, nicd::SharedMemory::create(static_cast<size_t>(t->slot_bytes_) * kMaxWindow, "ferry-bench-nic"));
      FERRY_ASSIGN_OR_RETURN(d.pd, nic.alloc_pd());
      FERRY_ASSIGN_OR_RETURN(d.mr, nic.reg_mr(*d.pd, d.memory.data(), d.memory.size(), kAccessAll));
      CqInitAttr cq_attr;
      cq_attr.cqe = 8192;
      if (i == 0 && o.client_wait == "block") {
        FERRY_ASSIGN_OR_RETURN(d.channel, nic.create_comp_channel());
        cq_attr.channel = d.channel.get();
      }
      FERRY_ASSIGN_OR_RETURN(d.cq, nic.create_cq(cq_attr));
      QpInitAttr qa;
      qa.send_cq = d.cq.get();
      qa.recv_cq = d.cq.get();
      if (i == 0) {
        qa.cap.max_send_wr = 2 * kMaxWindow;
      } else {
        qa.cap.max_recv_wr = kServerRecvs;
      }
      FERRY_ASSIGN_OR_RETURN(d.qp, nic.create_qp(*d.pd, qa));
    }
    DaemonSide& a = t->side_[0];
    DaemonSide& b = t->side_[1];
    // As a connection manager would: each side resolves the other's UDP
    // endpoint into a dest_nic address of its own daemon.
    FERRY_ASSIGN_OR_RETURN(const uint32_t to_b, a.device->nic().resolve(b.udp));
    FERRY_ASSIGN_OR_RETURN(const uint32_t to_a, b.device->nic().resolve(a.udp));
    t->path_mtu_ = std::min({o.mtu, a.device->nic().max_path_mtu(), b.device->nic().max_path_mtu()});
    ConnectOptions co;
    co.path_mtu = t->path_mtu_;
    FERRY_RETURN_IF_ERROR(connect_qp(*a.qp, to_b, b.qp->qp_num(), co.b_psn, co.a_psn, co));
    FERRY_RETURN_IF_ERROR(connect_qp(*b.qp, to_a, a.qp->qp_num(), co.a_psn, co.b_psn, co));
    UdpTestbed* self = t.get();
    t->link_ = Link{a.qp.get(),
                    b.qp.get(),
                    a.cq.get(),
                    b.cq.get(),
                    a.mr.get(),
                    b.mr.get(),
                    t->slot_bytes_,
                    nullptr,
                    a.channel.get(),
                    [self] { return self->daemons_cpu_ns(); },
                    {},
                    {}};
    t->link_.engine_work = [self] { return std::vector<EngineWork>{self->engine_work(0), self->engine_work(1)}; };
    for (uint32_t i = 0; i < kServerRecvs; ++i) FERRY_RETURN_IF_ERROR(repost_server_recv(t->link_, i));
    return t;
  }

  const Link& link() const { return link_; }
  const DaemonSide& side(int i) const { return side_[i]; }
  const std::string& dir() const { return dir_.path(); }
  uint32_t path_mtu() const { return path_mtu_; }
  uint64_t daemon_cpu_ns(int i) const { return side_[i].process ? side_[i].process->cpu_time_ns() : 0; }
  uint64_t daemons_cpu_ns() const { return daemon_cpu_ns(0) + daemon_cpu_ns(1); }
  // Daemon i's engine thread CPU (its schedstat; the whole daemon if it did
  // not name the thread) and its NIC's packet counters (asked of the daemon).
  EngineWork engine_work(int i) const {
    const DaemonSide& d = side_[i];
    EngineWork w;
    if (!d.process || !d.device) return w;
    w.cpu_ns = d.engine_tid > 0 ? schedstat_cpu_ns(d.process->pid(), d.engine_tid) : d.process->cpu_time_ns();
    const NicCounters c = d.device->nic().counters();
    w.tx_packets = c.tx_packets;
    w.rx_packets = c.rx_packets;
    return w;
  }
  std::string cpu_measured(int i) const {
    return side_[i].engine_tid > 0
               ? fmt::format("/proc/{}/task/{}/schedstat: daemon {}'s engine thread", side_[i].process->pid(),
                             side_[i].engine_tid, side_[i].name)
               : fmt::format("daemon {}'s whole process (no thread named {})", side_[i].name, kEngineThreadName);
  }

  // The daemons' engines are asleep once they have been idle past their
  // spin time (the benchmark cannot see their park flag): wait that long.
  void let_engines_sleep() const {
    const uint64_t spin = std::max(side_[0].spin_us, side_[1].spin_us);
    std::this_thread::sleep_for(std::chrono::microseconds(spin + 1000));
  }

  // `s`, plus which daemon is gone if one is (the likely cause of a failed point).
  Status explain(const Status& s) {
    if (s.ok()) return s;
    std::string gone;
    for (DaemonSide& d : side_) {
      if (d.process && !d.process->running()) {
        gone += fmt::format("; daemon {} (pid {}) is gone: {}", d.name, d.process->pid(), d.process->exit_text());
      }
    }
    return gone.empty() ? s : Status(s.code(), s.message() + gone);
  }

  // The orderly end: detach, SIGTERM both daemons and wait for them (each
  // must exit 0). The first error is returned; both are stopped regardless.
  Status stop(std::ostream& log) {
    Status first = ok_status();
    for (DaemonSide& d : side_) d.detach();
    for (DaemonSide& d : side_) {
      if (!d.process) continue;
      const Status s = d.process->stop(5000);
      const std::string out = d.process->output();
      const size_t stop_line = out.find("event=stop");
      if (stop_line != std::string::npos) {
        log << "  daemon " << d.name << ": " << out.substr(stop_line, out.find('\n', stop_line) - stop_line) << "\n";
      }
      if (!s.ok() && first.ok()) first = s;
      d.process.reset();
    }
    return first;
  }

 private:
  UdpTestbed() = default;
  TempDir dir_;  // declared first: removed after the daemons are gone
  uint32_t slot_bytes_ = 0;
  uint32_t path_mtu_ = 0;
  DaemonSide side_[2];
  Link link_;
};

}  // namespace

// The target for this transport (issue 11, item 8).
constexpr double kUdpTargetRatio = 2.0;
constexpr uint32_t kUdpTargetSize = 64;

Status run_udp_transport(const NicBenchOptions& o, std::ostream& out, std::ostream& log) {
  if (o.inline_engine) return invalid_argument("--inline runs the engine in this process: not with --transport udp");
  if (o.daemon_engine_cpus.size() != 2) return invalid_argument("--daemon-engine-cpus takes two CPUs (daemon A,B)");
  if (o.daemon_spin_us.size() != 2) return invalid_argument("--daemon-spin-us takes two values (daemon A,B)");
  if (o.client_wait != "poll" && o.client_wait != "block") {
    return invalid_argument("--client-wait must be poll or block");
  }

  // The in-process reference runs with the same placement as `--transport inproc`.
  Placement inproc_placement;
  inproc_placement.client_cpu = usable_cpu(o.client_cpu);
  inproc_placement.engine_cpu = usable_cpu(o.engine_cpu);
  inproc_placement.engine_pinned = inproc_placement.engine_cpu >= 0;
  inproc_placement.engine_fifo = o.engine_fifo;
  const int client_cpu = inproc_placement.client_cpu;
  const int cpu_a = usable_cpu(o.daemon_engine_cpus[0]);
  const int cpu_b = usable_cpu(o.daemon_engine_cpus[1]);
  const int poll_echo_cpu = inproc_placement.engine_cpu;
  auto cpu_text = [](int c) { return c >= 0 ? fmt::format("CPU {}", c) : std::string("not pinned"); };
  const std::string placement_line = fmt::format(
      "NIC daemons (separate processes, RoCEv2 over loopback UDP): A (client side) engine {}, spin {} us; B (server "
      "side) engine {}, spin {} us (shared spin policy); client thread {} ({} its CQ); CPU load: none added; machine: "
      "{}",
      cpu_text(cpu_a), o.daemon_spin_us[0], cpu_text(cpu_b), o.daemon_spin_us[1], cpu_text(client_cpu),
      o.client_wait == "block" ? "blocks on a completion channel for" : "polls", machine_description());
  log << "ferry bench nic --transport udp: " << placement_line << "; timing clock: " << timing_clock_name() << "\n";

  if (client_cpu >= 0) (void)pin_current_thread(client_cpu);
  const uint32_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
  // The helpers first, while this process has few mappings; then the
  // in-process testbed (its engine thread parks when idle).
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<UdpTestbed> udp, UdpTestbed::start(o, max_size, log));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> echo,
                         ChildProcess::spawn_self("udp-echo", {"bench", "udp-echo", "--cpu", std::to_string(cpu_b)}));
  FERRY_ASSIGN_OR_RETURN(const std::string echo_line, echo->wait_for_line("event=ready", 10'000));
  log << "  udp-echo (pid " << echo->pid() << "): " << echo_line << "\n";
  FERRY_ASSIGN_OR_RETURN(const UdpEndpoint echo_ep, UdpEndpoint::parse(line_field(echo_line, "udp")));
  Testbed inproc(o, inproc_placement, max_size);

  if (!o.json) {
    out << placement_line << "\n";
    out << "Latency = post to completion (a full round trip: doorbell to daemon A, datagram to B, ACK datagram back,\n"
        << "completion). Measured right before each point: udp_pp = plain UDP ping-pong of the same payload between\n"
        << "this process (on daemon A's CPU) and an echo process (on daemon B's CPU), both blocking in recv;\n"
        << "udp_poll = the same with both sides busy-polling on two CPUs (client and --engine-cpu), the floor;\n"
        << "inproc = the same point on an in-process Engine (--engine-cpu).\n"
        << "x_pp, x_poll, x_inpr = p50 over those p50s. dmn_cpu = both daemons' CPU time over the point's wall time.\n"
        << "ns_pkt, cyc_pkt = both daemons' engine threads' CPU time (schedstat) over the packets on the wire, in ns\n"
        << fmt::format("and in cycles at the TSC rate ({:.3f} GHz; 0 = unknown); per daemon in --json.\n", tsc_ghz());
    out << fmt::format(
        "{:<7}{:>7}{:>5}{:>8}{:>9}{:>9}{:>9}{:>10}{:>8}{:>8}{:>9}{:>9}{:>9}{:>8}{:>9}{:>8}{:>8}{:>8}{:>8}\n", "op",
        "size", "out", "iters", "p50_ns", "p99_ns", "p999_ns", "max_ns", "Mops", "Gbps", "udp_pp", "udp_poll", "inproc",
        "x_pp", "x_poll", "x_inpr", "dmn_cpu", "ns_pkt", "cyc_pkt");
  }
  nlohmann::json targets = nlohmann::json::array();
  for (const std::string& op : o.ops) {
    std::vector<uint32_t> sizes = op == "atomic" ? std::vector<uint32_t>{8} : o.sizes;
    for (uint32_t size : sizes) {
      for (uint32_t window : o.outstanding) {
        auto sized = size_point(o, udp->link(), op, size, window);
        if (!sized.ok()) return udp->explain(sized.status());
        const uint64_t iters = sized.value();
        FERRY_ASSIGN_OR_RETURN(const uint64_t inproc_iters, size_point(o, inproc.link(), op, size, window));
        // References first, with every engine parked: the cross-thread
        // ping-pong and memcpy as in-process, then the UDP ping-pongs on the
        // daemons' CPUs (this thread stands for daemon A, the echo for B).
        inproc.let_engine_sleep();
        udp->let_engines_sleep();
        const Histogram pingpong = pingpong_rtt(client_cpu, inproc_placement.engine_cpu, 20'000);
        const double ref_gbps = memcpy_bytes_per_second(size, window, 0.02) * 8 / 1e9;
        const uint64_t ref_p50 = pingpong.percentile(0.5);
        // The plain ping-pong runs where the wire's two ends run (this thread
        // on daemon A's engine CPU, the echo on B's); the polling one, a floor,
        // needs two CPUs of its own: the pair of the cross-thread ping-pong.
        const double pp_seconds = std::max(0.05, std::min(o.seconds_per_point, 1.0));
        place_current_thread(cpu_a);
        place_process(echo->pid(), cpu_b);
        auto pp_block = udp_pingpong_rtt(echo_ep, size, udp->path_mtu(), UdpWait::kBlock, 20'000, pp_seconds);
        place_current_thread(client_cpu);
        place_process(echo->pid(), poll_echo_cpu);
        auto pp_poll = pp_block.ok()
                           ? udp_pingpong_rtt(echo_ep, size, udp->path_mtu(), UdpWait::kPoll, 20'000, pp_seconds)
                           : Result<UdpPingPong>(pp_block.status());
        place_process(echo->pid(), cpu_b);
        if (!pp_block.ok()) return pp_block.status();
        if (!pp_poll.ok()) return pp_poll.status();
        // The in-process figure, then (its engine parked again) the point itself.
        FERRY_ASSIGN_OR_RETURN(const Point in, run_point(inproc.link(), op, size, window,
                                                         std::min<uint64_t>(inproc_iters / 10, 5000), inproc_iters));
        inproc.let_engine_sleep();
        const std::vector<double> loadavg = load_averages();
        const uint64_t cpu_a_start = udp->daemon_cpu_ns(0), cpu_b_start = udp->daemon_cpu_ns(1);
        log << fmt::format("  {} {} B x{} ({} ops; udp ping-pong p50 {} ns, in-process p50 {} ns) ...\n", op, size,
                           window, iters, pp_block.value().rtt.percentile(0.5), in.latency.percentile(0.5));
        auto measured = run_point(udp->link(), op, size, window, std::min<uint64_t>(iters / 10, 5000), iters);
        if (!measured.ok()) return udp->explain(measured.status());
        const Point& p = measured.value();
        const double busy_a = static_cast<double>(udp->daemon_cpu_ns(0) - cpu_a_start) / 1e9;
        const double busy_b = static_cast<double>(udp->daemon_cpu_ns(1) - cpu_b_start) / 1e9;

        const double mops = static_cast<double>(p.iters) / p.seconds / 1e6;
        const double gbps = static_cast<double>(p.iters) * size * 8 / p.seconds / 1e9;
        const double in_mops = static_cast<double>(in.iters) / in.seconds / 1e6;
        const double in_gbps = static_cast<double>(in.iters) * size * 8 / in.seconds / 1e9;
        const uint64_t p50 = p.latency.percentile(0.5);
        const UdpPingPong& ppb = pp_block.value();
        const UdpPingPong& ppp = pp_poll.value();
        const double over_pp = ratio(p50, ppb.rtt.percentile(0.5));
        const double over_pp_poll = ratio(p50, ppp.rtt.percentile(0.5));
        const double over_inproc = ratio(p50, in.latency.percentile(0.5));
        // Both engines together over the packets on the wire (each sent by
        // one daemon, received by the other): comparable with in-process.
        PacketCost wire_cost;
        if (p.engines.size() == 2) {
          wire_cost =
              packet_cost(p.engines[0].cpu_ns + p.engines[1].cpu_ns, p.engines[0].tx_packets + p.engines[1].tx_packets);
        }
        nlohmann::json target;
        if (op == "write" && size == kUdpTargetSize && window == 1) {
          target = {{"name", "64 B WRITE round trip p50 <= 2x the same-run plain UDP ping-pong p50"},
                    {"op", op},
                    {"size", size},
                    {"outstanding", window},
                    {"limit_ratio", kUdpTargetRatio},
                    {"measured_ratio", over_pp},
                    {"met", over_pp <= kUdpTargetRatio},
                    {"p50_ns", p50},
                    {"udp_pingpong_p50_ns", ppb.rtt.percentile(0.5)},
                    {"ratio_to_polling_pingpong", over_pp_poll}};
          targets.push_back(target);
        }
        if (o.json) {
          nlohmann::json j = row_json(op, size, window, p, mops, gbps, ref_p50, ref_gbps);
          j["transport"] = "udp";
          j["path_mtu"] = udp->path_mtu();
          auto pp_json = [&](const UdpPingPong& r, UdpWait w, int sender_cpu, int echo_cpu) {
            nlohmann::json u = percentiles_json(r.rtt);
            u["wait"] = udp_wait_name(w);
            u["round_trips_per_s"] = r.seconds > 0 ? static_cast<double>(r.rtt.count()) / r.seconds : 0.0;
            u["lost"] = r.lost;
            u["datagrams_each_way"] = r.datagrams;
            u["datagram_bytes"] = r.datagram_bytes;
            u["sender_cpu"] = sender_cpu;
            u["echo_cpu"] = echo_cpu;
            return u;
          };
          j["udp_pingpong"] = pp_json(ppb, UdpWait::kBlock, cpu_a, cpu_b);
          j["udp_pingpong_poll"] = pp_json(ppp, UdpWait::kPoll, client_cpu, poll_echo_cpu);
          j["inproc"] = percentiles_json(in.latency);
          j["inproc"]["iters"] = in.iters;
          j["inproc"]["mops"] = in_mops;
          j["inproc"]["gbps"] = in_gbps;
          j["inproc"]["engine"] = placement_json(inproc_placement);
          j["inproc"]["engine"]["cpu_busy_fraction"] = in.engine_cpu_fraction;
          if (!in.engines.empty()) {
            j["inproc"]["engine_packets"] =
                engine_packets_json(inproc_packet_cost(in), inproc.cpu_measured(), in.engines[0]);
          }
          if (p.engines.size() == 2) {
            j["engine_packets"] = engine_packets_json(
                wire_cost, "both daemons' engine threads (schedstat); packets on the wire, each counted once",
                EngineWork{0, p.engines[0].tx_packets + p.engines[1].tx_packets,
                           p.engines[0].rx_packets + p.engines[1].rx_packets});
          }
          j["p50_over_udp_pingpong"] = over_pp;
          j["p50_over_udp_pingpong_poll"] = over_pp_poll;
          j["p50_over_inproc"] = over_inproc;
          j["mops_over_inproc"] = in_mops > 0 ? mops / in_mops : 0.0;
          j["engine"] = {{"threads", 2},      {"pinned", cpu_a >= 0 && cpu_b >= 0},
                         {"cpu", cpu_a},      {"cpus", {cpu_a, cpu_b}},
                         {"mode", "daemons"}, {"cpu_busy_fraction", p.engine_cpu_fraction}};
          nlohmann::json daemons = nlohmann::json::array();
          const double busy[2] = {busy_a, busy_b};
          for (int i = 0; i < 2; ++i) {
            const DaemonSide& d = udp->side(i);
            daemons.push_back({{"name", d.name},
                               {"role", i == 0 ? "client" : "server"},
                               {"pid", d.process ? d.process->pid() : -1},
                               {"engine_cpu", d.engine_cpu},
                               {"spin_us", d.spin_us},
                               {"udp", d.udp.to_string()},
                               {"cpu_busy_fraction", p.seconds > 0 ? busy[i] / p.seconds : 0.0}});
            if (p.engines.size() == 2) {
              // One end of each packet: those it sent plus those it received.
              const EngineWork& w = p.engines[i];
              daemons.back()["engine_packets"] =
                  engine_packets_json(packet_cost(w.cpu_ns, w.tx_packets + w.rx_packets), udp->cpu_measured(i), w);
            }
          }
          j["daemons"] = daemons;
          j["client_cpu"] = client_cpu;
          j["client_wait"] = o.client_wait;
          j["load"] = "none";
          j["loadavg"] = loadavg;
          if (!target.is_null()) j["targets"] = nlohmann::json::array({target});
          add_provenance(j);
          out << j.dump() << std::endl;
        } else {
          out << fmt::format(
              "{:<7}{:>7}{:>5}{:>8}{:>9}{:>9}{:>9}{:>10}{:>8.3f}{:>8.2f}{:>9}{:>9}{:>9}{:>8.2f}{:>9.2f}{:>8.2f}{:>8.2f}"
              "{:>8.0f}{:>8.0f}\n",
              op, size, window, p.iters, percentile_text(p.latency, 0.5, 1, 0), percentile_text(p.latency, 0.99, 1, 0),
              percentile_text(p.latency, 0.999, 1, 0), p.latency.max(), mops, gbps, ppb.rtt.percentile(0.5),
              ppp.rtt.percentile(0.5), in.latency.percentile(0.5), over_pp, over_pp_poll, over_inproc,
              p.engine_cpu_fraction, wire_cost.ns_per_packet, wire_cost.cycles_per_packet);
          out.flush();
        }
      }
    }
  }
  if (!o.json) {
    for (const auto& t : targets) {
      out << fmt::format(
          "target: {}: {} (p50 {} ns vs ping-pong {} ns = {:.2f}x; against the polling ping-pong "
          "{:.2f}x)\n",
          t["name"].get<std::string>(), t["met"].get<bool>() ? "MET" : "MISSED", t["p50_ns"].get<uint64_t>(),
          t["udp_pingpong_p50_ns"].get<uint64_t>(), t["measured_ratio"].get<double>(),
          t["ratio_to_polling_pingpong"].get<double>());
    }
    if (targets.empty()) out << "target: not measured (it needs --ops write --sizes 64 --outstanding 1)\n";
  }
  const Status echo_stopped = echo->stop(5000);
  const Status daemons_stopped = udp->stop(log);
  FERRY_RETURN_IF_ERROR(daemons_stopped);
  return echo_stopped;
}

}  // namespace ferry::bench::nic_point
