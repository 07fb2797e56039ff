#include "oq_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common.h"
#include "report.h"

namespace ferry::bench::oq_bench {
namespace {

constexpr double kUs = 1e-3;  // ns -> us

std::optional<double> offered_mops(const Point& p) {
  if (p.run.closed) return std::nullopt;
  return p.run.loop.offered_per_s / 1e6;
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
  const uint64_t n = r.rec.committed_in_window();
  return n ? static_cast<double>(r.end.client_cpu_ns - r.start.client_cpu_ns) / static_cast<double>(n) : 0.0;
}
double per_op(uint64_t a, uint64_t b, uint64_t ops) {
  return ops ? static_cast<double>(b - a) / static_cast<double>(ops) : 0.0;
}

nlohmann::json modeled_json(const Point& p) {
  const Run& r = p.run;
  const uint64_t ops = r.rec.committed_in_window();
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
  const uint64_t ops = r.rec.committed_in_window();
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
  const uint64_t ops = p.run.rec.committed_in_window();
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

nlohmann::json op_json(const Histogram& h) {
  return {{"samples", h.count()},
          {"p50_us", percentile_json(h, 0.50, kUs)},
          {"p99_us", percentile_json(h, 0.99, kUs)},
          {"p999_us", percentile_json(h, 0.999, kUs)}};
}

nlohmann::json commits_json(const Run& r) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t k = 1; k < r.commits.size(); ++k) {
    if (r.commits[k] == 0) continue;
    std::string name = rpc::commit_name(static_cast<rpc::Commit>(k));
    std::replace(name.begin(), name.end(), '-', '_');
    j[name] = r.commits[k];
  }
  return j;
}

std::string opt_text(const std::optional<double>& v, int decimals) {
  return v ? fmt::format("{:.{}f}", *v, decimals) : std::string("-");
}

// p's latency at quantile q over base's, or null when either has too few
// samples for q.
nlohmann::json ratio(const Point& p, const Point* base, double q) {
  if (base == nullptr || !percentile_reportable(p.run.rec.all(), q) || !percentile_reportable(base->run.rec.all(), q)) {
    return nullptr;
  }
  return static_cast<double>(p.run.rec.all().percentile(q)) /
         static_cast<double>(std::max<uint64_t>(1, base->run.rec.all().percentile(q)));
}

double nearest_load(const std::vector<double>& loads, double want) {
  double best = loads.front();
  for (double l : loads) {
    if (std::abs(l - want) < std::abs(best - want)) best = l;
  }
  return best;
}

}  // namespace

double window_seconds(const Run& r) { return r.loop.seconds(); }

Regime regime_of(const Point& p) {
  const Run& r = p.run;
  Regime g;
  const double window_ns = window_seconds(r) * 1e9;
  if (window_ns <= 0) return g;
  const double workers_ns = window_ns * o_workers(p);
  g.server_busy = server_busy(p);
  g.worker_cpu = static_cast<double>(r.end.worker_threads.run_ns - r.start.worker_threads.run_ns) / workers_ns;
  g.worker_wait = static_cast<double>(r.end.worker_threads.wait_ns - r.start.worker_threads.wait_ns) / workers_ns;
  g.client_busy = busy_fraction(r.end.client_idle_ns - r.start.client_idle_ns, window_ns);
  g.client_cpu = static_cast<double>(r.end.client_cpu_ns - r.start.client_cpu_ns) / window_ns;
  g.client_wait = static_cast<double>(r.end.client_thread.wait_ns - r.start.client_thread.wait_ns) / window_ns;
  g.bound_by = bound_by({{"server", g.server_busy}, {"client-nic", g.client_busy}}, r.closed);
  g.disturbed = std::max(g.worker_wait, g.client_wait) > kDisturbedWait;
  if (p.work_item_first_ns > 0) {
    g.core_slowdown = static_cast<double>(std::max(p.work_item_before_ns, p.work_item_after_ns)) /
                      static_cast<double>(p.work_item_first_ns);
  }
  return g;
}

bool paper_regime(const Regime& r) { return r.server_busy >= kBoundBusy && r.client_busy <= 0.5; }

nlohmann::json Regime::json() const {
  return {{"bound_by", bound_by},
          {"server_busy_fraction", server_busy},
          {"server_worker_cpu_fraction", worker_cpu},
          {"server_worker_wait_fraction", worker_wait},
          {"client_nic_busy_fraction", client_busy},
          {"client_thread_cpu_fraction", client_cpu},
          {"client_thread_wait_fraction", client_wait},
          {"disturbed", disturbed},
          {"core_slowdown", core_slowdown},
          {"how",
           "busy: server = worker time handling completions (TSC) over window x workers; client-nic = 1 - the "
           "client thread's sampled idle passes (it steps every NIC) over the window; the workers' cpu and every "
           "wait fraction from /proc/self/task/*/schedstat (wait: runnable, not running), the client's cpu from "
           "its thread clock"}};
}

double achieved_mops(const Run& r) {
  const double s = window_seconds(r);
  return s > 0 ? static_cast<double>(r.rec.committed_in_window()) / s / 1e6 : 0.0;
}

nlohmann::json Where::json() const {
  return {{"client_thread_cpu", client_cpu},
          {"client_thread_pinned", client_cpu >= 0},
          {"nic_engine",
           "manual, stepped by the client thread (it stands for the client machine and every host's "
           "NIC hardware)"},
          {"server_workers", workers},
          {"server_worker_cpu", server_cpu},
          {"server_workers_pinned", server_cpu >= 0},
          {"cpu_load", "none"}};
}

std::string Where::text() const {
  return fmt::format(
      "NIC engine: manual, stepped by the client thread ({}) -- it stands for the client machine and every host's "
      "NIC; server: {} worker thread(s) {}; CPU load: none",
      client_cpu >= 0 ? fmt::format("pinned to CPU {}", client_cpu) : "not pinned", workers,
      server_cpu >= 0 ? fmt::format("pinned to CPU {}", server_cpu) : "not pinned");
}

nlohmann::json point_json(const Point& p, const Where& where, const nlohmann::json& reference) {
  const Run& r = p.run;
  const Histogram& h = r.rec.all();
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
    j["offered_mops"] = r.loop.offered_per_s / 1e6;
    j["offered_fraction"] = *p.offered_fraction;
  }
  j["peak"] = p.peak_mops > 0
                  ? nlohmann::json{{"system", "rawrpc"},
                                   {"mops", p.peak_mops},
                                   {"how", "closed-loop saturation throughput of RawRPC on this workload, same run"}}
                  : nlohmann::json(nullptr);
  j["own_peak_mops"] = p.own_peak_mops > 0 ? nlohmann::json(p.own_peak_mops) : nlohmann::json(nullptr);
  j["offered_over_own_peak"] = !r.closed && p.own_peak_mops > 0
                                   ? nlohmann::json(r.loop.offered_per_s / 1e6 / p.own_peak_mops)
                                   : nlohmann::json(nullptr);
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
  j["by_op"] = {{"set", op_json(r.rec.of(Run::kSet))}, {"get", op_json(r.rec.of(Run::kGet))}};
  j["commits"] = commits_json(r);
  j["server_cpu_ns_per_op"] = server_cpu_ns_per_op(r);
  // Time the workers spent handling completions, as a fraction of the window
  // (1.0 = one worker core saturated): whether the server CPU set the pace.
  const Regime regime = regime_of(p);
  j["server_busy_fraction"] = regime.server_busy;
  j["client_nic_busy_fraction"] = regime.client_busy;
  j["bound_by"] = regime.bound_by;
  j["regime"] = regime.json();
  j["server_ns_per_request"] = p.server_ns_per_request;
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
  j["unfinished"] = r.loop.unfinished;
  j["backlog_max"] = r.loop.backlog_max;
  j["backlog_overflowed"] = r.loop.overflowed;
  j["ratios"] = p.ratios.is_null() ? nlohmann::json::object() : p.ratios;
  if (!p.targets.is_null()) j["targets"] = p.targets;
  j["load_average_1m"] = p.load_average;
  const LoopGaps& gaps = r.loop.gaps;
  j["client_core"] = {{"max_gap_us", static_cast<double>(gaps.max_ns) * kUs},
                      {"stalls_over_20us", gaps.stalls},
                      {"stalled_fraction",
                       window_seconds(r) > 0 ? static_cast<double>(gaps.stalled_ns) / (window_seconds(r) * 1e9) : 0.0}};
  j["client_core_speed"] = {{"work_item_p50_ns_before", p.work_item_before_ns},
                            {"work_item_p50_ns_after", p.work_item_after_ns},
                            {"work_item_p50_ns_first_point", p.work_item_first_ns}};
  j["placement"] = where.json();
  j["reference"] = reference;
  j["timing_clock"] = timing_clock_name();
  add_provenance(j);
  return j;
}

void print_row(std::ostream& out, const Point& p) {
  const Run& r = p.run;
  const Histogram& h = r.rec.all();
  const std::string load =
      r.closed ? std::string("closed") : fmt::format("{:.0f}%", 100.0 * p.offered_fraction.value_or(0));
  const uint64_t ops = r.rec.committed_in_window();
  const Regime regime = regime_of(p);
  out << fmt::format(
      "  {:<10} {:<8} thr {} {:<6} offered {:>6} achieved {:>6.3f} Mops  n {:>6}  p50 {:>7} p99 {:>7} p99.9 {:>7} "
      "max {:>8.1f} us  srv {:>5.0f} ns/op  QPs {:>2}  modeled/op: qpc miss {:.2f} wqe dma {:.3f}  client core max "
      "stall {:.0f} us  busy: srv {:.0f}% cli {:.0f}% -> {}  core speed {:.2f}x{}{}\n",
      p.system, p.variant, p.sessions, load, opt_text(offered_mops(p), 3), achieved_mops(r), h.count(),
      percentile_text(h, 0.5, kUs, 2), percentile_text(h, 0.99, kUs, 2), percentile_text(h, 0.999, kUs, 2),
      static_cast<double>(h.max()) * kUs, server_cpu_ns_per_op(r), p.queue_pairs,
      per_op(r.start.server_nic.modeled_qpc_misses, r.end.server_nic.modeled_qpc_misses, ops),
      per_op(r.start.server_nic.modeled_recv_wqe_dmas, r.end.server_nic.modeled_recv_wqe_dmas, ops),
      static_cast<double>(r.loop.gaps.max_ns) * kUs, regime.server_busy * 100, regime.client_busy * 100,
      regime.bound_by, 1.0 / regime.core_slowdown,
      regime.disturbed ? fmt::format("  DISTURBED (waited for a CPU: workers {:.0f}%, client {:.0f}%)",
                                     regime.worker_wait * 100, regime.client_wait * 100)
                       : std::string(),
      r.loop.unfinished ? fmt::format("  UNFINISHED {}", r.loop.unfinished) : std::string());
}

void fill_ratios(std::vector<Point>& points) {
  for (Point& p : points) {
    if (p.experiment == "threads") {
      const Point* raw = nullptr;
      for (const Point& b : points) {
        if (b.experiment == "threads" && b.workload == p.workload && b.system == "rawrpc" && b.sessions == p.sessions) {
          raw = &b;
        }
      }
      if (raw != nullptr && achieved_mops(raw->run) > 0) {
        p.ratios = {{"mops_over_rawrpc", achieved_mops(p.run) / achieved_mops(raw->run)}};
      }
      continue;
    }
    const Point* raw = find_point(points, p.experiment, p.workload, "rawrpc", p.offered_fraction);
    const Point* def = find_point(points, p.experiment, p.workload, "deferred", p.offered_fraction);
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

// "at least X % below" is measured / baseline <= 1 - X.
nlohmann::json check_targets(std::vector<Point>& points, const OqBenchOptions& o) {
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
      {"write-only PmKv JUNE BERRY-D median vs RawRPC", "pmkv", "pmemkv-put100", "oq-durable", "rawrpc", 0.5, 0.50, 0.8,
       "Fig. 9: 57.08% lower median than RawRPC"},
  };
  nlohmann::json summary = nlohmann::json::array();
  for (const Target& t : targets) {
    const std::vector<double>& loads = t.experiment == "pmkv" ? o.pm_loads : o.loads;
    if (loads.empty()) continue;
    const double load = nearest_load(loads, t.at_load);
    Point* p = nullptr;
    for (Point& c : points) {
      if (c.experiment == t.experiment && c.workload == t.workload && c.system == t.system && c.offered_fraction &&
          std::abs(*c.offered_fraction - load) < 1e-9) {
        p = &c;
      }
    }
    const Point* base = find_point(points, t.experiment, t.workload, t.baseline, load);
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
    // Judged only in the paper's regime: its peak is the server's.
    const Point* peak = find_point(points, t.experiment, t.workload, "rawrpc", std::nullopt);
    const Regime at_peak = peak != nullptr ? regime_of(*peak) : Regime{};
    j["judged"] = peak != nullptr && paper_regime(at_peak);
    // Either point's threads kept off their CPU for a while: its tail shows that.
    j["disturbed"] = regime_of(*p).disturbed || regime_of(*base).disturbed;
    j["regime"] = {{"rawrpc_peak_bound_by", peak != nullptr ? at_peak.bound_by : "not run"},
                   {"rawrpc_peak_server_busy", at_peak.server_busy},
                   {"rawrpc_peak_client_nic_busy", at_peak.client_busy},
                   {"server_ns_per_request", p->server_ns_per_request},
                   {"paper", "server-bound: at RawRPC's peak the server >= 0.9 busy, the client/NIC core <= 0.5"}};
    j["system_us"] = percentile_json(p->run.rec.all(), t.quantile, kUs);
    j["baseline_us"] = percentile_json(base->run.rec.all(), t.quantile, kUs);
    if (p->targets.is_null()) p->targets = nlohmann::json::array();
    p->targets.push_back(j);
    summary.push_back(j);
  }
  return summary;
}

void print_headline(std::ostream& text, const OqBenchOptions& o, const std::vector<Point>& points,
                    const nlohmann::json& targets) {
  text << "\nheadline (same run):\n";
  for (uint32_t value_bytes : o.thread_value_bytes) {
    if (!has(o.experiments, "threads")) break;
    const std::string workload = fmt::format("put-{}B", value_bytes);
    for (const Point& p : points) {
      if (p.experiment != "threads" || p.workload != workload || p.variant != "mp-deleg") continue;
      if (p.sessions != o.threads.front() && p.sessions != o.threads.back()) continue;
      text << fmt::format("  Fig. 6 {:<9} {:<10} {} thread(s): {:.3f} Mops, {} QPs, modeled qpc misses/op {:.2f}\n",
                          workload, p.system, p.sessions, achieved_mops(p.run), p.queue_pairs,
                          modeled_json(p)["qpc_misses_per_op"].get<double>());
    }
  }
  if (targets.empty() && (has(o.experiments, "latency") || has(o.experiments, "pmkv"))) {
    text << "  paper targets: not checked (their systems, workloads or loads were not run)\n";
  }
  for (const nlohmann::json& t : targets) {
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
    if (!t["judged"].get<bool>()) {
      const nlohmann::json& g = t["regime"];
      verdict = fmt::format(
          "NOT JUDGED, not the paper's regime: RawRPC's peak here is bound by {} (server {:.0f}% busy, client/NIC "
          "{:.0f}%), the paper's by the server (would be {})",
          g["rawrpc_peak_bound_by"].get<std::string>(), g["rawrpc_peak_server_busy"].get<double>() * 100,
          g["rawrpc_peak_client_nic_busy"].get<double>() * 100, verdict);
    }
    if (t["disturbed"].get<bool>()) verdict += " (a point of it DISTURBED: see its row)";
    text << fmt::format("  target: {} at {:.0f}% of peak: {} us vs {} us, {} (needs >= {:.0f}% lower): {}  [{}]\n",
                        t["name"].get<std::string>(), t["offered_fraction"].get<double>() * 100,
                        us_text(t["system_us"]), us_text(t["baseline_us"]), pct(t["measured_reduction"]),
                        t["required_reduction"].get<double>() * 100, verdict, t["paper"].get<std::string>());
  }
  // Write-only PmKv at every load, with JUNE BERRY-D's load against its own
  // closed-loop peak: past it, its latency is queueing, not the protocol.
  for (const Point& raw_peak : points) {
    if (raw_peak.experiment != "pmkv" || raw_peak.system != "rawrpc" || !raw_peak.run.closed ||
        raw_peak.mix.set_fraction != 1.0) {
      continue;
    }
    const Point* own = find_point(points, "pmkv", raw_peak.workload, "oq-durable", std::nullopt);
    if (own == nullptr) continue;
    std::string line = fmt::format(
        "  {} peaks: rawrpc {:.3f} Mops ({:.2f} server-NIC packets/op, server worker {:.0f}% busy), oq-durable {:.3f} "
        "Mops ({:.2f} packets/op, {:.0f}% busy); oq-durable p50 / rawrpc p50 by load:",
        raw_peak.workload, achieved_mops(raw_peak.run), packets_per_op(raw_peak), server_busy(raw_peak) * 100,
        achieved_mops(own->run), packets_per_op(*own), server_busy(*own) * 100);
    for (double l : o.pm_loads) {
      const Point* d = find_point(points, "pmkv", raw_peak.workload, "oq-durable", l);
      const Point* r = find_point(points, "pmkv", raw_peak.workload, "rawrpc", l);
      if (d == nullptr || r == nullptr) continue;
      const nlohmann::json q = ratio(*d, r, 0.5);
      line += fmt::format(" {:.0f}%: {}{}", l * 100, q.is_null() ? "n/a" : fmt::format("{:.2f}", q.get<double>()),
                          d->run.loop.offered_per_s / 1e6 > achieved_mops(own->run) ? " (past its peak)" : "");
    }
    text << line << "\n";
  }
}

}  // namespace ferry::bench::oq_bench
