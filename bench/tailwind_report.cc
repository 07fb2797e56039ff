#include "tailwind_report.h"

#include <fmt/format.h>
#include <sys/vfs.h>

#include <cmath>

#include "common.h"
#include "regime.h"
#include "report.h"

namespace ferry::bench::tailwind_bench {
namespace {

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

nlohmann::json null_or(double v, bool ok) { return ok ? nlohmann::json(v) : nlohmann::json(nullptr); }

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
      "workers {:.2f} backup {:.2f} cores, backup {:>6} ns/put, {:>5} appends/rpc  srv occupancy {:.2f} cli busy "
      "{:.0f}% -> {}\n",
      j["system"].get<std::string>(), j["workload"].get<std::string>(), what, j["mops"].get<double>(),
      j["mops_per_server"].get<double>(), num(j["p50_us"], 1), num(j["p99_us"], 1), num(j["p999_us"], 1),
      j["samples"].get<uint64_t>(), j["worker_cores"].get<double>(), j["backup_worker_cores"].get<double>(),
      num(j["backup_cpu_ns_per_put"], 0), num(j["appends_per_replicate_rpc"], 1),
      j["regime"]["server_handler_occupancy"].get<double>(),
      j["regime"]["client_nic_busy_fraction"].get<double>() * 100, j["bound_by"].get<std::string>());
}

}  // namespace

nlohmann::json point_json(const Point& p, const TailwindBenchOptions& o) {
  const Run& r = p.run;
  const double window_s = r.loop.seconds();
  const double mops = static_cast<double>(r.rec.committed_in_window()) / window_s / 1e6;
  uint64_t client_busy = 0, backup_busy = 0, backup_requests = 0, replicated = 0, opens = 0, closes = 0, control = 0,
           flush_ns = 0;
  const uint64_t puts = r.rec.committed_in_window(Requests::kPut);
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
  j["offered_mops"] = p.offered_fraction ? nlohmann::json(r.loop.offered_per_s / 1e6) : nlohmann::json(nullptr);
  j["rpc_peak_mops"] = p.offered_fraction ? nlohmann::json(p.peak_mops) : nlohmann::json(nullptr);
  j["mops"] = mops;
  j["mops_per_server"] = mops / servers;
  j["active_primaries"] = p.active == 0 ? o.servers : p.active;
  j["mops_per_active_primary"] = mops / (p.active == 0 ? servers : static_cast<double>(p.active));
  j["window_s"] = window_s;
  j["samples"] = r.rec.all().count();
  j["p50_us"] = percentile_json(r.rec.all(), 0.50, 1e-3);
  j["p99_us"] = percentile_json(r.rec.all(), 0.99, 1e-3);
  j["p999_us"] = percentile_json(r.rec.all(), 0.999, 1e-3);
  nlohmann::json all, put, get;
  add_percentiles_ns(all, r.rec.all());
  add_percentiles_ns(put, r.rec.of(Requests::kPut));
  add_percentiles_ns(get, r.rec.of(Requests::kGet));
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
  // Replicate RPCs the backups served (the RPC baseline; 0 for Tailwind),
  // and how many appends each carried: RAMCloud's merging of the appends
  // queued behind the RPC in flight.
  j["backup_replicate_rpcs"] = replicated;
  j["appends_per_replicate_rpc"] =
      null_or(static_cast<double>(puts) * o.replicas / static_cast<double>(replicated), replicated > 0);
  j["segment_opens"] = opens;
  j["segment_closes"] = closes;
  j["worker_cores"] = static_cast<double>(client_busy) / (window_s * 1e9) / servers;
  j["backup_worker_cores"] = static_cast<double>(backup_busy) / (window_s * 1e9) / servers;
  j["dispatch_cores"] = nullptr;
  j["client_core_utilization"] = static_cast<double>(r.end.client_cpu_ns - r.start.client_cpu_ns) / (window_s * 1e9);
  // What bounded the point (regime.h). Every server thread shares server_cpu
  // and polls, so the kernel sees that CPU always in use, and a per-thread
  // CPU clock around each batch costs 1.3 us a read on this VM (more than a
  // backup's work on a replicated object). What is measured instead is the
  // servers' occupancy: their workers' time inside handlers (TSC), summed
  // over workers, over the window. It counts a worker taken off the CPU in
  // the middle of a request, and in the RPC baseline a PUT waiting for its
  // backups, so it exceeds 1 when requests queue at the servers; at or above
  // kBoundBusy a request is in the servers' hands all the time: they set the
  // pace.
  const double window_ns = window_s * 1e9;
  const double occupancy = static_cast<double>(client_busy + backup_busy) / window_ns;
  const double client_nic_busy = busy_fraction(r.end.client_idle_ns - r.start.client_idle_ns, window_ns);
  auto fraction = [&](uint64_t a, uint64_t b) { return b > a ? static_cast<double>(b - a) / window_ns : 0.0; };
  const std::string bound =
      bound_by({{"server", occupancy}, {"client-nic", client_nic_busy}}, !p.offered_fraction.has_value());
  j["bound_by"] = bound;
  const double server_wait = fraction(r.start.server_threads.wait_ns, r.end.server_threads.wait_ns);
  const double client_wait = fraction(r.start.client_thread.wait_ns, r.end.client_thread.wait_ns);
  j["regime"] = {
      {"bound_by", bound},
      {"server_handler_occupancy", occupancy},
      {"backup_handler_occupancy", static_cast<double>(backup_busy) / window_ns},
      {"client_nic_busy_fraction", client_nic_busy},
      {"server_threads_cpu_fraction", fraction(r.start.server_threads.run_ns, r.end.server_threads.run_ns)},
      {"server_threads_wait_fraction", server_wait},
      {"client_thread_cpu_fraction", j["client_core_utilization"]},
      {"client_thread_wait_fraction", client_wait},
      // Only the client's wait says so: the server threads wait for each
      // other on their one CPU by design.
      {"disturbed", client_wait > kDisturbedWait},
      {"how",
       "server occupancy = every server's workers' time inside handlers (TSC; client-request and backup "
       "workers, all sharing server_cpu, so it can exceed 1 and is not CPU time), summed, over the window; "
       "backup occupancy = the backup workers' part; client-nic busy = 1 - the client thread's idle passes (it "
       "steps every NIC) over the window; cpu and wait fractions from /proc/self/task/*/schedstat, summed over "
       "threads (wait: runnable, not running)"}};
  j["client_stalls"] = r.loop.gaps.stalls;
  j["client_stalled_ms"] = static_cast<double>(r.loop.gaps.stalled_ns) / 1e6;
  j["client_max_gap_us"] = static_cast<double>(r.loop.gaps.max_ns) / 1e3;
  j["overflowed"] = r.loop.overflowed;
  j["unfinished"] = r.loop.unfinished;
  j["loadavg"] = load_average();
  return j;
}

nlohmann::json placement(const TailwindBenchOptions& o, const std::string& dir) {
  nlohmann::json j;
  j["nic_engine"] = fmt::format(
      "manual, stepped by the client thread (cpu {}) -- it stands for the client machine and every host's NIC",
      o.client_cpu);
  j["client_thread_cpu"] = o.client_cpu;
  j["server_workers_cpu"] = o.server_cpu;
  j["server_threads"] = fmt::format(
      "{} servers x ({} client-request workers + 1 backup worker + 1 backup flusher), all pinned to cpu {}; no "
      "dispatch thread: the NIC dispatches to each worker's receive queue (RAMCloud's dispatch core is the NIC's "
      "work here, on the client thread's cpu)",
      o.servers, o.workers, o.server_cpu);
  j["control_thread_cpu"] = o.server_cpu;
  j["cpu_load"] = "none";
  j["backup_buffers"] = o.backup_media == "pm"
                            ? "persistent memory (pm/ model): Tailwind WRITE + FLUSH, RPC backups persist their copy"
                            : "DRAM (stands for battery-backed buffers)";
  // tmpfs makes fdatasync free: say which kind of file system took it.
  struct statfs fs {};
  const bool tmpfs = ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == 0x01021994;
  j["storage"] = dir + (tmpfs ? " (tmpfs: write + fdatasync cost no device time)"
                              : " (a disk file system: write + fdatasync, on the backups' flushers)");
  j["timing_clock"] = timing_clock_name();
  return j;
}

void Emitter::emit(nlohmann::json j) {
  j["placement"] = place_;
  add_provenance(j);
  if (o_.json) out_ << j.dump() << "\n" << std::flush;
  (o_.json ? log_ : out_) << point_text(j) << std::flush;
  points_.push_back(std::move(j));
}

void Emitter::raw(const nlohmann::json& j) {
  if (o_.json) out_ << j.dump() << "\n" << std::flush;
}

void summarize(Emitter& em) {
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
}

}  // namespace ferry::bench::tailwind_bench
