// `ferry bench ...`: the benchmarks' command lines (bench/*.h runs them).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "command.h"
#include "ferry/common/status.h"
#include "group_bench.h"
#include "group_udp_bench.h"
#include "nic_bench.h"
#include "oq_bench.h"
#include "pm_bench.h"
#include "store_bench.h"
#include "tailwind_bench.h"
#include "udp_pingpong.h"

namespace ferry::apps {

namespace {

// One whole decimal number in 1..UINT32_MAX ("64x", "", "-1" and
// 4294967296 are rejected, not truncated or wrapped).
Result<uint32_t> parse_count(std::string_view token) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (token.empty()) return invalid_argument("empty entry");
  if (error != std::errc() || end != token.data() + token.size()) {
    return invalid_argument("'" + std::string(token) + "' is not a whole number");
  }
  if (value == 0 || value > std::numeric_limits<uint32_t>::max()) {
    return invalid_argument("'" + std::string(token) + "' is outside 1..4294967295");
  }
  return static_cast<uint32_t>(value);
}

// "8,64,4096" (a list) or "8-65536" (every power of two from 8 to 65536; both
// ends must be powers of two). Never returns an empty list.
Result<std::vector<uint32_t>> parse_sizes(std::string_view spec) {
  std::vector<uint32_t> sizes;
  const size_t dash = spec.find('-');
  if (dash != std::string_view::npos && dash != 0 && spec.find(',') == std::string_view::npos) {
    FERRY_ASSIGN_OR_RETURN(const uint32_t lo, parse_count(spec.substr(0, dash)));
    FERRY_ASSIGN_OR_RETURN(const uint32_t hi, parse_count(spec.substr(dash + 1)));
    if ((lo & (lo - 1)) != 0 || (hi & (hi - 1)) != 0) {
      return invalid_argument("both ends of a range must be powers of two");
    }
    if (lo > hi) return invalid_argument("empty range: its start is above its end");
    for (uint64_t s = lo; s <= hi; s *= 2) sizes.push_back(static_cast<uint32_t>(s));
    return sizes;
  }
  size_t start = 0;
  for (;;) {
    const size_t comma = spec.find(',', start);
    FERRY_ASSIGN_OR_RETURN(const uint32_t size, parse_count(spec.substr(start, comma - start)));
    sizes.push_back(size);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return sizes;
}

// Parses a --sizes-style option into `*out`; on bad input says which option
// and why on stderr and returns false.
bool parse_list_option(const std::string& command, const std::string& option, const std::string& spec,
                       std::vector<uint32_t>* out) {
  auto parsed = parse_sizes(spec);
  if (!parsed.ok()) {
    std::cerr << command << ": " << option << " '" << spec << "': " << parsed.status().message() << "\n";
    return false;
  }
  *out = std::move(parsed).value();
  return true;
}

// The options every throughput benchmark shares: run length and placement.
void add_run_options(CLI::App* app, uint64_t& iters, double& seconds_per_point, int& client_cpu, int& engine_cpu) {
  app->add_option("--iters", iters, "measured operations per point (0: sized by --seconds)")->capture_default_str();
  app->add_option("--seconds", seconds_per_point, "target duration per point when --iters is 0")->capture_default_str();
  app->add_option("--client-cpu", client_cpu, "CPU for the measuring thread (-1: no pinning)")->capture_default_str();
  app->add_option("--engine-cpu", engine_cpu, "CPU for the NIC engine thread (-1: no pinning)")->capture_default_str();
}

// "1,4,16": a list as parse_sizes() reads it.
std::string join(const std::vector<uint32_t>& values) {
  std::string s;
  for (uint32_t v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

// The exit code for a benchmark's result, saying why on stderr if it failed.
int exit_code(const std::string& command, const Status& s) {
  if (s.ok()) return 0;
  std::cerr << command << ": " << s.to_string() << "\n";
  return 2;
}

void add_nic_bench(CLI::App* parent, Commands& commands) {
  struct Options {
    bench::NicBenchOptions nic_opts;
    std::string sizes = "8-65536";
    std::string outstanding = "1,16";
    std::string qps;
  };
  auto o = std::make_shared<Options>();
  CLI::App* nic = parent->add_subcommand("nic", "perftest-style latency and bandwidth of the software RNIC");
  nic->add_option("--ops", o->nic_opts.ops, "operations: write, read, send, atomic")
      ->delimiter(',')
      ->capture_default_str();
  nic->add_option("--sizes", o->sizes, "message sizes: list (8,64,4096) or power-of-two range (8-65536)")
      ->capture_default_str();
  nic->add_option("--outstanding", o->outstanding, "operations in flight: 1 = latency test, >1 = rate test (list)")
      ->capture_default_str();
  add_run_options(nic, o->nic_opts.iters, o->nic_opts.seconds_per_point, o->nic_opts.client_cpu,
                  o->nic_opts.engine_cpu);
  nic->add_option("--engine-fifo", o->nic_opts.engine_fifo, "SCHED_FIFO priority for the engine (0: normal)")
      ->capture_default_str();
  nic->add_option("--mtu", o->nic_opts.mtu, "path MTU (256..4096)")->capture_default_str();
  nic->add_flag("--json", o->nic_opts.json, "print one JSON object per (op, size, outstanding)");
  nic->add_flag("--inline", o->nic_opts.inline_engine,
                "run the engine on the measuring thread: the NIC's processing cost per op, no cross-core traffic");
  nic->add_option("--transport", o->nic_opts.transport,
                  "inproc: both NICs on one in-process engine; udp: two NIC daemons (`ferry nicd`, separate "
                  "processes) over loopback UDP, with the in-process figure and a plain UDP ping-pong measured "
                  "in the same run")
      ->check(CLI::IsMember({"inproc", "udp"}))
      ->capture_default_str();
  nic->add_option("--daemon-engine-cpus", o->nic_opts.daemon_engine_cpus,
                  "udp: engine CPUs of daemon A (client side) and daemon B (server side); -1: not pinned")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();
  nic->add_option("--daemon-spin-us", o->nic_opts.daemon_spin_us,
                  "udp: how long daemon A's and B's engines poll after their last work before sleeping")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();

  nic->add_option("--client-wait", o->nic_opts.client_wait,
                  "udp: the measuring thread polls its CQ, or blocks on a completion channel")
      ->check(CLI::IsMember({"poll", "block"}))
      ->capture_default_str();
  nic->add_option("--qps", o->qps,
                  "per-QP cost at scale, instead of the sweep: for each N (list: 1000,4000), N RC QP pairs on two "
                  "in-process NICs with one message outstanding on each: memory and setup time per pair, latency "
                  "and rate; ops and sizes from --ops/--sizes (default write, 64)");
  nic->add_option("--qp-depth", o->nic_opts.qp_depth, "--qps: send and receive queue depth of each QP")
      ->capture_default_str();
  commands.add(nic, [o, nic] {
    if (!parse_list_option("ferry bench nic", "--sizes", o->sizes, &o->nic_opts.sizes) ||
        !parse_list_option("ferry bench nic", "--outstanding", o->outstanding, &o->nic_opts.outstanding)) {
      return 2;
    }
    if (!o->qps.empty()) {
      if (!parse_list_option("ferry bench nic", "--qps", o->qps, &o->nic_opts.qp_pairs)) return 2;
      if (nic->count("--ops") == 0) o->nic_opts.ops = {"write"};
      if (nic->count("--sizes") == 0) o->nic_opts.sizes = {64};
    }
    return exit_code("ferry bench nic", bench::run_nic_bench(o->nic_opts, std::cout, std::cerr));
  });
}

void add_udp_echo(CLI::App* parent, Commands& commands) {
  struct Options {
    bench::UdpEchoOptions echo_opts;
  };
  auto o = std::make_shared<Options>();
  CLI::App* udp_echo = parent->add_subcommand(
      "udp-echo",
      "Helper of `bench nic --transport udp` (started by it): echo every UDP datagram to its sender, for the "
      "plain UDP ping-pong reference. Prints `event=ready udp=IP:PORT` when bound; stops on SIGINT/SIGTERM or "
      "when its parent exits");
  udp_echo->add_option("--bind", o->echo_opts.bind, "IPv4 address and UDP port (port 0: ephemeral)")
      ->capture_default_str();
  udp_echo->add_option("--port-file", o->echo_opts.port_file, "write the bound port to this file");
  udp_echo->add_option("--cpu", o->echo_opts.cpu, "pin the echo process to this CPU (-1: no pinning)")
      ->capture_default_str();
  commands.add(udp_echo, [o] { return bench::run_udp_echo(o->echo_opts, std::cout, std::cerr); });
}

void add_pm_bench(CLI::App* parent, Commands& commands) {
  struct Options {
    bench::PmBenchOptions pm_opts;
    std::string pm_sizes = "16,64,256,1024,4096";
    size_t region_mib = 64;
  };
  auto o = std::make_shared<Options>();
  CLI::App* pm = parent->add_subcommand(
      "pm", "remote writes to persistent memory (ATC'21 §3-4): hints H3-H9, modeled media counters, H9 latency");
  pm->add_option("--experiments", o->pm_opts.experiments, "one_sided, two_sided, atomic, persist")
      ->delimiter(',')
      ->capture_default_str();
  pm->add_option("--sizes", o->pm_sizes, "write sizes in bytes (list or power-of-two range), at most 4096")
      ->capture_default_str();
  add_run_options(pm, o->pm_opts.iters, o->pm_opts.seconds_per_point, o->pm_opts.client_cpu, o->pm_opts.engine_cpu);
  pm->add_option("--outstanding", o->pm_opts.outstanding, "operations in flight for throughput experiments")
      ->capture_default_str();
  pm->add_option("--region-mib", o->region_mib, "size of the PM (or DRAM) target region")->capture_default_str();
  pm->add_option("--pm-dir", o->pm_opts.pm_dir,
                 "directory for the PM file (default $TMPDIR or /tmp; a DAX mount "
                 "for real PM)");
  pm->add_option("--modeled-wire-ns", o->pm_opts.modeled_wire_delay_ns,
                 "persist experiment: also report ratios with this modeled one-way wire delay (0: skip)")
      ->capture_default_str();
  pm->add_flag("--json", o->pm_opts.json, "print one JSON object per configuration");
  commands.add(pm, [o] {
    if (!parse_list_option("ferry bench pm", "--sizes", o->pm_sizes, &o->pm_opts.sizes)) return 2;
    o->pm_opts.region_bytes = o->region_mib << 20;
    return exit_code("ferry bench pm", bench::run_pm_bench(o->pm_opts, std::cout, std::cerr));
  });
}

void add_group_bench(CLI::App* parent, Commands& commands) {
  struct Options {
    bench::GroupBenchOptions group_opts;
    std::string group_sizes_spec = "64-8192";
    std::string group_groups_spec = "3,5,7";
    size_t group_region_mib = 16;
    std::string group_media = "pm";
    std::string group_transport = "inproc";
    uint32_t group_daemon_spin_us = bench::GroupUdpBenchOptions{}.daemon_spin_us;
    int group_daemon_engine_cpu = bench::GroupUdpBenchOptions{}.daemon_engine_cpu;
  };
  auto o = std::make_shared<Options>();
  CLI::App* group = parent->add_subcommand(
      "group",
      "HyperLoop §6.1: gWRITE/gMEMCPY/gCAS latency, gWRITE throughput and group-size scaling against Naive-RDMA "
      "(event and poll), quiet and with the replica CPU loaded");
  group
      ->add_option("--experiments", o->group_opts.experiments,
                   "latency (Fig. 8), cas (Table 2), throughput (Fig. 9), "
                   "group_size (Fig. 10)")
      ->delimiter(',')
      ->capture_default_str();
  group->add_option("--systems", o->group_opts.systems, "hyperloop, naive-event, naive-poll")
      ->delimiter(',')
      ->capture_default_str();
  group->add_option("--sizes", o->group_sizes_spec, "message sizes: list or power-of-two range")->capture_default_str();
  group->add_option("--group-sizes", o->group_groups_spec, "chain lengths for the group_size experiment (1..7)")
      ->capture_default_str();
  group->add_option("--group-size-bytes", o->group_opts.group_size_bytes, "message size of the group_size experiment")
      ->capture_default_str();
  group->add_option("--loads", o->group_opts.loads, "quiet, load (ten busy processes on the replica CPU), or both")
      ->delimiter(',')
      ->capture_default_str();
  group->add_option("--iters", o->group_opts.iters, "operations per latency point (the paper: 10,000)")
      ->capture_default_str();
  group
      ->add_option("--max-seconds", o->group_opts.max_seconds,
                   "cap on a quiet latency point and on any throughput point")
      ->capture_default_str();
  group
      ->add_option("--max-seconds-loaded", o->group_opts.max_seconds_loaded,
                   "cap on a loaded latency point (long enough for 1,000+ samples of naive-event)")
      ->capture_default_str();
  group->add_option("--throughput-bytes", o->group_opts.throughput_bytes, "bytes written per throughput point (1 GiB)")
      ->capture_default_str();
  group->add_option("--window", o->group_opts.window, "operations outstanding in the throughput experiment (1..32)")
      ->capture_default_str();
  group
      ->add_option("--load-processes", o->group_opts.load_processes,
                   "busy processes (stress-ng workers) pinned to the replica CPU")
      ->capture_default_str();
  group->add_option("--client-cpu", o->group_opts.client_cpu, "CPU of the client thread, which also steps the NICs")
      ->capture_default_str();
  group->add_option("--replica-cpu", o->group_opts.replica_cpu, "CPU of the replicas' application threads and the load")
      ->capture_default_str();
  group->add_option("--region-mib", o->group_region_mib, "region size on each replica")->capture_default_str();
  group->add_option("--media", o->group_media, "replica regions: pm (libpmem2 file, modeled persistence) or dram")
      ->check(CLI::IsMember({"pm", "dram"}))
      ->capture_default_str();
  group->add_option("--pm-dir", o->group_opts.pm_dir, "directory for PM files (default /dev/shm)");
  group->add_flag("--flush", o->group_opts.flush, "interleave gFLUSH with every gWRITE and gMEMCPY");
  group->add_flag("--json", o->group_opts.json, "print one JSON object per run");
  group
      ->add_option("--transport", o->group_transport,
                   "inproc: every host a NIC of this process; udp: four `ferry nicd` daemons and three `ferry "
                   "hyperloop replica` processes over loopback UDP, this process the client (gWRITE latency, replica "
                   "processes' CPU per op, HyperLoop again with the replicas SIGSTOPped, the in-process point as "
                   "reference; default sizes 64,1024, systems hyperloop,naive-event, max-seconds 30)")
      ->check(CLI::IsMember({"inproc", "udp"}))
      ->capture_default_str();
  group
      ->add_option("--daemon-spin-us", o->group_daemon_spin_us,
                   "udp: how long each daemon's engine polls after its last work before sleeping")
      ->capture_default_str();
  group
      ->add_option("--daemon-engine-cpu", o->group_daemon_engine_cpu,
                   "udp: the CPU all four daemons' engines are pinned to (-1: not pinned); the client polls on CPU 0 "
                   "unless --client-cpu is given")
      ->capture_default_str();
  commands.add(group, [o, cmd = group] {
    if (!parse_list_option("ferry bench group", "--sizes", o->group_sizes_spec, &o->group_opts.sizes) ||
        !parse_list_option("ferry bench group", "--group-sizes", o->group_groups_spec, &o->group_opts.group_sizes)) {
      return 2;
    }
    o->group_opts.region_bytes = o->group_region_mib << 20;
    o->group_opts.media = o->group_media == "dram" ? pm::Media::kDram : pm::Media::kPm;
    if (o->group_transport == "udp") {
      bench::GroupUdpBenchOptions u;
      u.json = o->group_opts.json;
      u.iters = o->group_opts.iters;
      if (cmd->count("--max-seconds") > 0) u.max_seconds = o->group_opts.max_seconds;
      if (cmd->count("--sizes") > 0) u.sizes = o->group_opts.sizes;
      if (cmd->count("--systems") > 0) u.systems = o->group_opts.systems;
      if (cmd->count("--group-sizes") > 0) u.replicas = o->group_opts.group_sizes.front();
      u.daemon_spin_us = o->group_daemon_spin_us;
      u.daemon_engine_cpu = o->group_daemon_engine_cpu;
      if (cmd->count("--client-cpu") > 0) u.client_cpu = o->group_opts.client_cpu;
      return exit_code("ferry bench group", bench::run_group_udp_bench(u, std::cout, std::cerr));
    }
    return exit_code("ferry bench group", bench::run_group_bench(o->group_opts, std::cout, std::cerr));
  });
}

void add_oq_bench(CLI::App* parent, Commands& commands) {
  struct Options {
    bench::OqBenchOptions oq_opts;
    bench::OqBenchOptions oq_quick = bench::oq_quick_options();
    std::string oq_threads = "1,2,4,8";
    std::string oq_thread_sizes = "64,1024";
    std::string oq_clusters = "12,19,27,31";
    std::string oq_value_sizes = "64,256,1024,4096";
    size_t oq_region_mib = oq_opts.pm_region_bytes >> 20;
    QuickSettings quick;
  };
  auto o = std::make_shared<Options>();
  CLI::App* oq = parent->add_subcommand(
      "oq",
      "JUNE BERRY §6 (Figs. 6-11): Ordered Queue and JUNE BERRY-D against RawRPC and DeferredExec on the same RPC "
      "code -- throughput vs client threads, cache latency under the Twitter clusters, PmKv latency and value sizes");
  oq->add_option("--experiments", o->oq_opts.experiments,
                 "threads (Fig. 6), latency (Figs. 7-8, cache), pmkv (Figs. 9-11, PmKv)")
      ->delimiter(',')
      ->capture_default_str();
  oq->add_option("--systems", o->oq_opts.systems,
                 "oq, oq-durable (JUNE BERRY-D), deferred (DeferredExec), rawrpc; each experiment runs the ones it "
                 "compares")
      ->delimiter(',')
      ->capture_default_str();
  o->quick(
      oq->add_option("--threads", o->oq_threads, "threads: client threads (sessions), a list")->capture_default_str(),
      [o = o.get()] { o->oq_threads = join(o->oq_quick.threads); });
  o->quick(oq->add_option("--thread-sizes", o->oq_thread_sizes, "threads: value sizes of the puts (bytes), a list")
               ->capture_default_str(),
           [o = o.get()] { o->oq_thread_sizes = join(o->oq_quick.thread_value_bytes); });
  o->quick(oq->add_option("--variants", o->oq_opts.variants,
                          "threads: oq and oq-durable with multi-packet SRQ and delegation: mp-deleg, mp, deleg, plain")
               ->delimiter(',')
               ->capture_default_str(),
           [o = o.get()] { o->oq_opts.variants = o->oq_quick.variants; });
  oq->add_option("--thread-inflight", o->oq_opts.thread_inflight, "threads: calls each session keeps in flight")
      ->capture_default_str();
  o->quick(oq->add_option("--clusters", o->oq_clusters, "latency: Twitter clusters of Table 1 (12, 19, 27, 31)")
               ->capture_default_str(),
           [o = o.get()] { o->oq_clusters = join(o->oq_quick.clusters); });
  o->quick(oq->add_option("--loads", o->oq_opts.loads, "latency: offered loads as fractions of RawRPC's measured peak")
               ->delimiter(',')
               ->capture_default_str(),
           [o = o.get()] { o->oq_opts.loads = o->oq_quick.loads; });
  o->quick(
      oq->add_option("--pm-loads", o->oq_opts.pm_loads, "pmkv: offered loads as fractions of RawRPC's measured peak")
          ->delimiter(',')
          ->capture_default_str(),
      [o = o.get()] { o->oq_opts.pm_loads = o->oq_quick.pm_loads; });
  o->quick(oq->add_option("--put-ratios", o->oq_opts.put_percents, "pmkv: put percentages (100, 50, 5, 0)")
               ->delimiter(',')
               ->capture_default_str(),
           [o = o.get()] { o->oq_opts.put_percents = o->oq_quick.put_percents; });
  o->quick(
      oq->add_option("--value-sizes", o->oq_value_sizes, "pmkv: value sizes of the value-size sweep (bytes, <= 8192)")
          ->capture_default_str(),
      [o = o.get()] { o->oq_value_sizes = join(o->oq_quick.value_sizes); });
  oq->add_option("--sweep-put-ratio", o->oq_opts.sweep_put_percent, "pmkv: put percentage of the value-size sweep")
      ->capture_default_str();
  oq->add_option("--sweep-load", o->oq_opts.sweep_load,
                 "pmkv: the value-size sweep's latency points, as a fraction of RawRPC's peak at each size")
      ->capture_default_str();
  oq->add_option("--workers", o->oq_opts.workers, "server worker threads (each with its SRQ and data partition)")
      ->capture_default_str();
  oq->add_option("--sessions", o->oq_opts.sessions, "latency, pmkv: client sessions (client threads)")
      ->capture_default_str();
  oq->add_option("--inflight", o->oq_opts.max_inflight, "latency, pmkv: calls in flight per session for the peaks")
      ->capture_default_str();
  oq->add_option("--open-inflight", o->oq_opts.open_inflight,
                 "latency, pmkv: calls in flight per session under open-loop load, at most")
      ->capture_default_str();
  o->quick(oq->add_option("--keys", o->oq_opts.keys, "key space, prefilled before every point")->capture_default_str(),
           [o = o.get()] { o->oq_opts.keys = o->oq_quick.keys; });
  o->quick(
      oq->add_option("--closed-seconds", o->oq_opts.closed_seconds, "length of a closed-loop point (peaks, threads)")
          ->capture_default_str(),
      [o = o.get()] { o->oq_opts.closed_seconds = o->oq_quick.closed_seconds; });
  o->quick(oq->add_option("--min-seconds", o->oq_opts.min_seconds, "an open-loop point runs at least this long")
               ->capture_default_str(),
           [o = o.get()] { o->oq_opts.min_seconds = o->oq_quick.min_seconds; });
  o->quick(oq->add_option("--max-seconds", o->oq_opts.max_seconds, "... and at most this long")->capture_default_str(),
           [o = o.get()] { o->oq_opts.max_seconds = o->oq_quick.max_seconds; });
  o->quick(oq->add_option("--samples", o->oq_opts.target_samples,
                          "measured requests an open-loop point aims for (p99.9 needs 10,000)")
               ->capture_default_str(),
           [o = o.get()] { o->oq_opts.target_samples = o->oq_quick.target_samples; });
  o->quick(oq->add_option("--warmup-seconds", o->oq_opts.warmup_seconds, "unmeasured run-in before every point")
               ->capture_default_str(),
           [o = o.get()] { o->oq_opts.warmup_seconds = o->oq_quick.warmup_seconds; });
  oq->add_option("--qpc-entries", o->oq_opts.qp_context_entries,
                 "modeled QP-context cache entries of the server NIC (counters only)")
      ->capture_default_str();
  oq->add_option("--client-cpu", o->oq_opts.client_cpu, "CPU of the client thread, which also steps every NIC")
      ->capture_default_str();
  oq->add_option("--server-cpu", o->oq_opts.server_cpu, "CPU of the server's worker threads")->capture_default_str();
  oq->add_option("--server-ns-per-request", o->oq_opts.server_ns_per_request,
                 "busy work (ns) each request costs the server worker before its handler, in every system: -1 for "
                 "the paper's figures (latency 3900, pmkv 9000, threads 0), 0 for the emulator's own regime")
      ->capture_default_str();
  oq->add_option("--pm-dir", o->oq_opts.pm_dir, "directory for the PM files (default /dev/shm)");
  o->quick(oq->add_option("--pm-region-mib", o->oq_region_mib, "PmKv region per worker")->capture_default_str(),
           [o = o.get()] { o->oq_region_mib = o->oq_quick.pm_region_bytes >> 20; });
  o->quick.add_flag(oq,
                    "a small configuration of every experiment and system (seconds, for tests); explicit "
                    "options win");
  oq->add_flag("--json", o->oq_opts.json, "print one JSON object per point");
  commands.add(oq, [o] {
    o->quick.apply();
    if (!parse_list_option("ferry bench oq", "--threads", o->oq_threads, &o->oq_opts.threads) ||
        !parse_list_option("ferry bench oq", "--thread-sizes", o->oq_thread_sizes, &o->oq_opts.thread_value_bytes) ||
        !parse_list_option("ferry bench oq", "--clusters", o->oq_clusters, &o->oq_opts.clusters) ||
        !parse_list_option("ferry bench oq", "--value-sizes", o->oq_value_sizes, &o->oq_opts.value_sizes)) {
      return 2;
    }
    o->oq_opts.pm_region_bytes = o->oq_region_mib << 20;
    return exit_code("ferry bench oq", bench::run_oq_bench(o->oq_opts, std::cout, std::cerr));
  });
}

void add_store_bench(CLI::App* parent, Commands& commands) {
  struct Options {
    bench::StoreBenchOptions store_opts;
    std::string store_media = "pm";
    std::string store_txn_flush = "interleaved";
    bool full = false;
    QuickSettings quick;
  };
  auto o = std::make_shared<Options>();
  CLI::App* store = parent->add_subcommand(
      "store",
      "HyperLoop §6.2: Fig. 12, the replicated transactional store (YCSB A, B, D, E, F) on HyperLoop, on the "
      "Naive-RDMA baselines and, as a real peer, on Redis (a primary and two replicas, SET + WAIT 2 0; E's scans "
      "by ZRANGEBYLEX on a sorted set of the keys, then MGET); "
      "Fig. 11, replicated RocksDB (its WAL replicated at every Sync) under YCSB-A; quiet and with the replica CPU "
      "loaded");
  store
      ->add_option("--experiments", o->store_opts.experiments,
                   "ycsb (Fig. 12: the transactional store, and Redis), rocksdb (Fig. 11: replicated RocksDB, "
                   "YCSB-A)")
      ->delimiter(',')
      ->capture_default_str();
  store
      ->add_option("--systems", o->store_opts.systems,
                   "hyperloop, naive-event, naive-poll, redis-wait2 (ycsb only; skipped with a message when "
                   "redis-server is not installed)")
      ->delimiter(',')
      ->capture_default_str();
  store->add_option("--workloads", o->store_opts.workloads, "YCSB workloads A, B, D, E (scans), F")
      ->delimiter(',')
      ->capture_default_str();
  store->add_option("--loads", o->store_opts.loads, "quiet, load (busy processes on the replica CPU), or both")
      ->delimiter(',')
      ->capture_default_str();
  store
      ->add_option("--reads-at", o->store_opts.reads_at,
                   "ycsb, chain systems: where reads and scans run -- client (the client thread over the tail's "
                   "image), replica (the tail's CPU, through its RPC read service), or both")
      ->delimiter(',')
      ->check(CLI::IsMember({"client", "replica"}))
      ->capture_default_str();
  o->quick(store->add_option("--records", o->store_opts.records, "records loaded before the points (the paper: 100 K)")
               ->capture_default_str(),
           [o = o.get()] { o->store_opts.records = std::min<uint64_t>(o->store_opts.records, 2000); });
  o->quick(store->add_option("--ops", o->store_opts.ops, "operations per point")->capture_default_str(),
           [o = o.get()] { o->store_opts.ops = std::min<uint64_t>(o->store_opts.ops, 2000); });
  o->quick(store->add_option("--max-seconds", o->store_opts.max_seconds, "cap on a point")->capture_default_str(),
           [o = o.get()] { o->store_opts.max_seconds = std::min(o->store_opts.max_seconds, 5.0); });
  store
      ->add_option("--rocksdb-rate", o->store_opts.rocksdb_rate,
                   "rocksdb experiment: also run each system open loop, Poisson arrivals at this many ops/s with "
                   "latency from each op's scheduled arrival (0: closed loop only)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  store
      ->add_option("--rocksdb-open-ops", o->store_opts.rocksdb_open_ops,
                   "operations per open-loop point (at most --ops)")
      ->capture_default_str();
  store->add_option("--key-bytes", o->store_opts.key_bytes, "key size")->capture_default_str();
  store->add_option("--value-bytes", o->store_opts.value_bytes, "value size")->capture_default_str();
  store->add_option("--load-processes", o->store_opts.load_processes, "stress-ng workers on the replica CPU")
      ->capture_default_str();
  store->add_option("--media", o->store_media, "the replicas' regions: pm or dram")
      ->check(CLI::IsMember({"pm", "dram"}))
      ->capture_default_str();
  store
      ->add_option("--txn-flush", o->store_txn_flush,
                   "interleaved: each gWRITE/gMEMCPY of a write carries its flush (one chain traversal); "
                   "separate: a gFLUSH after each (two)")
      ->check(CLI::IsMember({"interleaved", "separate"}))
      ->capture_default_str();
  store->add_option("--seed", o->store_opts.seed, "seed of keys and values")->capture_default_str();
  o->quick.add_flag(store, "a short run: 2,000 records, 2,000 ops per point; explicit options win");
  store->add_flag("--full", o->full, "the paper's larger table: 1 M records");
  store->add_flag("--json", o->store_opts.json, "one JSON object per point");
  commands.add(store, [o] {
    o->quick.apply();
    if (o->full) o->store_opts.records = 1'000'000;
    o->store_opts.media = o->store_media == "dram" ? pm::Media::kDram : pm::Media::kPm;
    o->store_opts.interleaved_flush = o->store_txn_flush == "interleaved";
    return exit_code("ferry bench store", bench::run_store_bench(o->store_opts, std::cout, std::cerr));
  });
}

void add_tailwind_bench(CLI::App* parent, Commands& commands) {
  struct Options {
    bench::TailwindBenchOptions tw_opts;
    bench::TailwindBenchOptions tw_quick = bench::tailwind_quick_options();
    QuickSettings quick;
  };
  auto o = std::make_shared<Options>();
  CLI::App* tw = parent->add_subcommand(
      "tailwind",
      "Tailwind §5 (Figs. 7-10, 13) on LogKv: one-sided replication against RAMCloud's RPC replication on the same "
      "code -- throughput vs clients, PUT latency and server CPU vs load, throughput per active primary, recovery "
      "time");
  tw->add_option("--experiments", o->tw_opts.experiments,
                 "clients (Fig. 7), latency (Figs. 8, 10), active (Fig. 9), recovery (Fig. 13)")
      ->delimiter(',')
      ->capture_default_str();
  tw->add_option("--systems", o->tw_opts.systems, "tailwind, rpc (the RPC-replication baseline)")
      ->delimiter(',')
      ->capture_default_str();
  o->quick(tw->add_option("--workloads", o->tw_opts.workloads, "clients: ycsb-b, ycsb-a, ycsb-c, write-only")
               ->delimiter(',')
               ->capture_default_str(),
           [o = o.get()] { o->tw_opts.workloads = o->tw_quick.workloads; });
  o->quick(tw->add_option("--clients", o->tw_opts.clients, "clients: closed-loop clients (requests in flight), a list")
               ->delimiter(',')
               ->capture_default_str(),
           [o = o.get()] { o->tw_opts.clients = o->tw_quick.clients; });
  o->quick(tw->add_option("--loads", o->tw_opts.loads, "latency: offered loads as fractions of the RPC baseline's peak")
               ->delimiter(',')
               ->capture_default_str(),
           [o = o.get()] { o->tw_opts.loads = o->tw_quick.loads; });
  o->quick(tw->add_option("--active", o->tw_opts.active, "active: primaries receiving requests, a list")
               ->delimiter(',')
               ->capture_default_str(),
           [o = o.get()] { o->tw_opts.active = o->tw_quick.active; });
  tw->add_option("--peak-clients", o->tw_opts.peak_clients, "closed-loop clients of the peaks (latency)")
      ->capture_default_str();
  tw->add_option("--active-clients", o->tw_opts.active_clients,
                 "closed-loop clients of the active experiment (the paper's Fig. 9: 30)")
      ->capture_default_str();
  tw->add_option("--backup-media", o->tw_opts.backup_media,
                 "backup buffers: dram (battery-backed, the paper's) or pm (persistent memory: Tailwind WRITE + FLUSH)")
      ->capture_default_str();
  tw->add_option("--servers", o->tw_opts.servers, "storage servers (each a primary and a backup)")
      ->capture_default_str();
  tw->add_option("--replicas", o->tw_opts.replicas, "backups of each segment (r)")->capture_default_str();
  tw->add_option("--workers", o->tw_opts.workers, "client-request workers per server (plus one backup worker)")
      ->capture_default_str();
  o->quick(tw->add_option("--keys", o->tw_opts.keys, "key space, prefilled")->capture_default_str(),
           [o = o.get()] { o->tw_opts.keys = o->tw_quick.keys; });
  tw->add_option("--key-bytes", o->tw_opts.key_bytes, "key size")->capture_default_str();
  tw->add_option("--value-bytes", o->tw_opts.value_bytes, "value size")->capture_default_str();
  tw->add_option("--segment-bytes", o->tw_opts.segment_bytes, "log segment (and backup buffer) size")
      ->capture_default_str();
  o->quick(tw->add_option("--closed-seconds", o->tw_opts.closed_seconds, "length of a closed-loop point")
               ->capture_default_str(),
           [o = o.get()] { o->tw_opts.closed_seconds = o->tw_quick.closed_seconds; });
  o->quick(tw->add_option("--min-seconds", o->tw_opts.min_seconds, "an open-loop point runs at least this long")
               ->capture_default_str(),
           [o = o.get()] { o->tw_opts.min_seconds = o->tw_quick.min_seconds; });
  o->quick(tw->add_option("--max-seconds", o->tw_opts.max_seconds, "... and at most this long")->capture_default_str(),
           [o = o.get()] { o->tw_opts.max_seconds = o->tw_quick.max_seconds; });
  o->quick(tw->add_option("--samples", o->tw_opts.target_samples,
                          "measured requests an open-loop point aims for (p99.9 needs 10,000)")
               ->capture_default_str(),
           [o = o.get()] { o->tw_opts.target_samples = o->tw_quick.target_samples; });
  tw->add_option("--warmup-seconds", o->tw_opts.warmup_seconds, "unmeasured run-in before every point")
      ->capture_default_str();
  o->quick(tw->add_option("--recovery-objects", o->tw_opts.recovery_objects, "recovery: objects on the crashed server")
               ->capture_default_str(),
           [o = o.get()] { o->tw_opts.recovery_objects = o->tw_quick.recovery_objects; });
  tw->add_option("--recovery-backups", o->tw_opts.recovery_backups,
                 "recovery: servers besides the crashed one, its backups and recovery masters (the paper's: 10)")
      ->capture_default_str();
  tw->add_flag("--full", o->tw_opts.full, "recovery: also 10 M objects (about 2 GB of log; minutes)");
  tw->add_option("--client-cpu", o->tw_opts.client_cpu, "CPU of the client thread, which also steps every NIC")
      ->capture_default_str();
  tw->add_option("--server-cpu", o->tw_opts.server_cpu, "CPU of every server's worker threads and the control thread")
      ->capture_default_str();
  tw->add_option("--dir", o->tw_opts.dir,
                 "backups' storage and PM files: a temporary directory under this one (default: the working "
                 "directory, so fdatasync reaches a real file system; removed at the end)");
  o->quick.add_flag(tw, "a small configuration of every experiment (under a minute, for tests); explicit options win");
  tw->add_flag("--json", o->tw_opts.json, "print one JSON object per point");
  commands.add(tw, [o] {
    o->quick.apply();
    return exit_code("ferry bench tailwind", bench::run_tailwind_bench(o->tw_opts, std::cout, std::cerr));
  });
}

}  // namespace

void add_bench_commands(CLI::App& app, Commands& commands) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (each measures its physical reference in the same run)");
  bench->require_subcommand(1);
  add_nic_bench(bench, commands);
  add_udp_echo(bench, commands);
  add_pm_bench(bench, commands);
  add_group_bench(bench, commands);
  add_oq_bench(bench, commands);
  add_store_bench(bench, commands);
  add_tailwind_bench(bench, commands);
}

}  // namespace ferry::apps
