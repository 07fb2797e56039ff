// `ferry bench oq`: see oq_bench.h. The system under test is oq_setup.h's,
// the points oq_points.h's, the report oq_report.h's; this file checks the
// options, measures the run's references and runs the experiments in order.
#include "oq_bench.h"

#include <fmt/format.h>

#include <algorithm>

#include "common.h"
#include "ferry/common/cpu.h"
#include "ferry/workload/kv_mix.h"
#include "oq_points.h"
#include "oq_report.h"
#include "reference.h"
#include "report.h"

namespace ferry::bench {
namespace {

using oq_bench::kMaxCallsInFlight;

constexpr double kUs = 1e-3;  // ns -> us

const std::vector<std::string> kSystems = {"oq", "oq-durable", "deferred", "rawrpc"};
const std::vector<std::string> kExperiments = {"threads", "latency", "pmkv"};
const std::vector<std::string> kVariants = {"mp-deleg", "mp", "deleg", "plain"};

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
      if (!(l > 0 && l <= 2))
        return invalid_argument(fmt::format("load {} is not a fraction of the peak in (0, 2]", l));
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
  if (o.server_ns_per_request < -1 || o.server_ns_per_request > 1'000'000) {
    return invalid_argument("--server-ns-per-request must be 0..1000000 ns, or -1 for the paper's figures");
  }
  if (o.sessions < 1 || o.max_inflight < 1 || o.open_inflight < 1 || o.thread_inflight < 1) {
    return invalid_argument("--sessions, --inflight, --open-inflight and --thread-inflight must be at least 1");
  }
  uint32_t max_threads = 0;
  for (uint32_t t : o.threads) max_threads = std::max(max_threads, t);
  if (uint64_t{o.sessions} * std::max(o.max_inflight, o.open_inflight) > kMaxCallsInFlight ||
      uint64_t{max_threads} * o.thread_inflight > kMaxCallsInFlight) {
    return invalid_argument(
        fmt::format("at most {} calls in flight on the client machine (sessions x inflight)", kMaxCallsInFlight));
  }
  if (o.keys < 16) return invalid_argument("--keys must be at least 16");
  if (!(o.closed_seconds > 0) || !(o.min_seconds > 0) || !(o.max_seconds > 0) || !(o.warmup_seconds >= 0)) {
    return invalid_argument("point durations must be positive");
  }
  if (o.target_samples < 1) return invalid_argument("--samples must be at least 1");
  if (o.pm_region_bytes < (4u << 20)) return invalid_argument("--pm-region-mib must be at least 4");
  return ok_status();
}

// The physical references of this run: a cross-core round trip between the
// client and server CPUs (the floor of any reply that crosses to a worker),
// and how often the client/NIC core loses its CPU.
Result<nlohmann::json> measure_references(int client_cpu, int server_cpu, std::ostream& text) {
  const Histogram rtt = pingpong_rtt(client_cpu, server_cpu, 20000);
  if (client_cpu >= 0) FERRY_RETURN_IF_ERROR(pin_current_thread(client_cpu));
  const CpuStalls stalls = cpu_stalls(0.3);
  text << fmt::format(
      "  reference: client<->server CPU ping-pong p50 {} ns, p99 {} ns; the client/NIC core loses "
      "the CPU {:.0f} times a second (max {:.0f} us)\n",
      rtt.percentile(0.5), rtt.percentile(0.99), stalls.per_second, static_cast<double>(stalls.gaps.max()) * kUs);
  return nlohmann::json{{"pingpong_rtt_p50_ns", rtt.percentile(0.5)},
                        {"pingpong_rtt_p99_ns", rtt.percentile(0.99)},
                        {"cpu_stalls_per_second", stalls.per_second},
                        {"cpu_stall_p50_us", static_cast<double>(stalls.gaps.percentile(0.5)) * kUs},
                        {"cpu_stall_max_us", static_cast<double>(stalls.gaps.max()) * kUs},
                        {"cpu_stolen_fraction", stalls.stolen_fraction}};
}

}  // namespace

uint64_t server_ns_for(const OqBenchOptions& o, const std::string& experiment) {
  if (o.server_ns_per_request >= 0) return static_cast<uint64_t>(o.server_ns_per_request);
  if (experiment == "latency") return kPaperCacheNsPerRequest;
  if (experiment == "pmkv" || experiment == "pmkv_value_size") return kPaperPmKvNsPerRequest;
  return 0;  // threads: Fig. 6's echo server
}

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
  std::ostream& text = options.json ? log : out;
  OqBenchOptions o = options;  // client_cpu and server_cpu: the placement actually used
  o.client_cpu = usable_cpu(options.client_cpu);
  o.server_cpu = usable_cpu(options.server_cpu);
  if (o.client_cpu >= 0) FERRY_RETURN_IF_ERROR(pin_current_thread(o.client_cpu));
  const oq_bench::Where where{o.client_cpu, o.server_cpu, o.workers};

  text << "ferry bench oq: JUNE BERRY (NSDI'25) §6 -- Ordered Queue vs RawRPC and DeferredExec on the same RPC code, "
          "same run\n"
       << "  " << where.text() << "\n"
       << "  machine: " << machine_description() << "; timing clock: " << timing_clock_name() << "\n"
       << fmt::format(
              "  latency, pmkv: {} sessions, {} calls in flight each for the peaks (closed loop), up to {} "
              "each under open-loop load; {} keys prefilled; open-loop points aim for {} samples in {}-{} s "
              "after {} s warm-up; p99 needs 1,000 samples and p99.9 10,000, else n/a\n",
              o.sessions, o.max_inflight, o.open_inflight, o.keys, o.target_samples, o.min_seconds, o.max_seconds,
              o.warmup_seconds)
       << fmt::format("  modeled server-NIC QP-context cache: {} entries (counters only)\n", o.qp_context_entries)
       << fmt::format(
              "  server cost per request (busy work before every handler, every system alike): threads {} ns, "
              "latency {} ns, pmkv {} ns{}\n",
              server_ns_for(o, "threads"), server_ns_for(o, "latency"), server_ns_for(o, "pmkv"),
              o.server_ns_per_request < 0
                  ? " -- the paper's: memcached 16 workers / 4.1 Mops, PMemKV 18 workers / 2.0 Mops (calibrated)"
                  : " (set by --server-ns-per-request)");
  FERRY_ASSIGN_OR_RETURN(const nlohmann::json reference, measure_references(o.client_cpu, o.server_cpu, text));

  oq_bench::PointRunner runner(o, text);
  if (has(o.experiments, "threads")) FERRY_RETURN_IF_ERROR(runner.run_threads());
  if (has(o.experiments, "latency")) FERRY_RETURN_IF_ERROR(runner.run_latency());
  if (has(o.experiments, "pmkv")) FERRY_RETURN_IF_ERROR(runner.run_pmkv());
  std::vector<oq_bench::Point>& points = runner.points();
  oq_bench::fill_ratios(points);
  const nlohmann::json targets = oq_bench::check_targets(points, o);
  // The headline: the paper's targets, met or not, from this run.
  oq_bench::print_headline(text, o, points, targets);
  if (o.json) {
    for (const oq_bench::Point& p : points) out << oq_bench::point_json(p, where, reference).dump() << "\n";
    out << std::flush;
  }
  return ok_status();
}

}  // namespace ferry::bench
