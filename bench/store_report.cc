#include "store_report.h"

#include <fmt/format.h>

#include "regime.h"

namespace ferry::bench::store_bench {
namespace {

// What bounded the point (regime.h): the client/NIC core (the client thread
// steps every NIC, so its idle passes and its waits for the next arrival are
// its idle time) and the replicas (their threads' or processes' CPU time:
// hyperloop's are 0, the NIC does their work; naive-poll's poll, so its CPU
// says nothing about its work and it is left out of bound_by).
void add_regime(const PointContext& c, const PointResult& r, nlohmann::json& j) {
  const double window_ns = r.seconds * 1e9;
  if (window_ns <= 0) return;
  const double replica_cpu = static_cast<double>(r.replica_cpu_ns) / window_ns;
  const bool replicas_poll = c.system == "naive-poll";
  nlohmann::json g;
  g["replica_cpu_fraction"] = replica_cpu;
  g["replicas_poll"] = replicas_poll;
  const double client = r.client_idle_ns ? busy_fraction(*r.client_idle_ns, window_ns) : kNotMeasured;
  g["client_nic_busy_fraction"] = r.client_idle_ns ? nlohmann::json(client) : nlohmann::json(nullptr);  // Redis
  const std::string bound =
      bound_by({{"client-nic", client}, {"replica", replicas_poll ? kNotMeasured : replica_cpu}}, c.rate == 0);
  g["bound_by"] = bound;
  if (r.read_server) {
    // The tail's read service polls (yielding when idle), so its CPU time
    // says how much of its core it got, not how busy it was: it is left out
    // of bound_by. Its wait says how much the load kept it from running.
    g["read_server_cpu_fraction"] = static_cast<double>(r.read_server->run_ns) / window_ns;
    g["read_server_wait_fraction"] = static_cast<double>(r.read_server->wait_ns) / window_ns;
  }
  g["how"] =
      "client-nic busy = 1 - (the client thread's engine passes that found nothing + its waits for the next "
      "arrival) over the window; replica = the replicas' threads' or processes' CPU time over the window (one "
      "CPU: 1.0); a system whose replicas poll is left out of bound_by, as is the tail's polling read service "
      "(reads_at replica: read_server_cpu/wait_fraction, its thread's schedstat)";
  j["bound_by"] = bound;
  j["regime"] = g;
}

}  // namespace

void emit_point(const PointContext& c, const std::string& wl, const std::string& load_name, const PointResult& r,
                const StoreBenchOptions& o, const Placement& placement, const std::string& load_text, std::ostream& out,
                UpdateTails* tails) {
  // Open loop: a system that cannot keep up queues, and its tail then grows
  // with the length of the point.
  const double achieved = static_cast<double>(r.total) / r.seconds;
  const bool overloaded = c.rate > 0 && (r.capped || achieved < 0.95 * c.rate);
  for (const auto& [op, st] : r.ops) {
    nlohmann::json j;
    j["experiment"] = c.experiment;
    j["system"] = c.system;
    j["workload"] = wl;
    j["op"] = op;
    j["load"] = load_name;
    j["records"] = o.records;
    j["samples"] = st.hist.count();
    j["p50_us"] = percentile_json(st.hist, 0.50, 1e-3);
    j["p95_us"] = percentile_json(st.hist, 0.95, 1e-3);
    j["p99_us"] = percentile_json(st.hist, 0.99, 1e-3);
    j["p999_us"] = percentile_json(st.hist, 0.999, 1e-3);
    j["max_us"] = static_cast<double>(st.hist.max()) / 1e3;
    j["mops"] = static_cast<double>(r.total) / r.seconds / 1e6;
    j["replica_cpu_ns_per_op"] =
        r.writes > 0 ? nlohmann::json(static_cast<double>(r.replica_cpu_ns) / static_cast<double>(r.writes))
                     : nlohmann::json(nullptr);
    // Every write's chain traversals, with the reads' (none) left out.
    const bool counted = r.traversals && r.writes > 0;
    const double traversals_per_write =
        counted ? static_cast<double>(*r.traversals) / static_cast<double>(r.writes) : 0.0;
    j["traversals_per_write"] = counted ? nlohmann::json(traversals_per_write) : nlohmann::json(nullptr);
    j["txn_flush"] =
        r.traversals ? nlohmann::json(o.interleaved_flush ? "interleaved" : "separate") : nlohmann::json(nullptr);
    j["capped"] = r.capped;
    add_regime(c, r, j);
    j["arrivals"] = c.rate > 0 ? "poisson" : "closed";
    if (c.rate > 0) {
      j["offered_ops_per_s"] = c.rate;
      j["achieved_ops_per_s"] = achieved;
      j["overloaded"] = overloaded;
      j["latency_from"] = "scheduled arrival";
    }
    j["key_bytes"] = o.key_bytes;
    j["value_bytes"] = o.value_bytes;
    j["reads_from"] = c.reads_from;
    if (!c.reads_at.empty()) j["reads_at"] = c.reads_at;
    if (op == "scan") {
      j["reads_from"] = c.scans_from;
      j["scan_length"] = fmt::format("uniform 1..{}", kScanLengthMax);
      j["records_per_scan"] = static_cast<double>(r.scanned) / static_cast<double>(st.hist.count());
    }
    j["writes"] = op == "insert" && !c.inserts.empty() ? c.inserts : c.writes;
    if (!c.peer.is_null()) j["peer"] = c.peer;
    Placement p = placement;
    p.load = load_text;
    j["placement"] = placement_json(p);
    j["cpu_load"] = load_text;
    r.guard.add_to(j);
    add_provenance(j);
    if (wl == "A" && op == "update" && load_name == "load") {
      if (overloaded) tails->overloaded.push_back(c.system);
      if (percentile_reportable(st.hist, 0.99)) {
        tails->p99_us[c.system] = static_cast<double>(st.hist.percentile(0.99)) / 1e3;
      }
      if (percentile_reportable(st.hist, 0.5)) {
        tails->p50_us[c.system] = static_cast<double>(st.hist.percentile(0.5)) / 1e3;
      }
    }
    if (o.json) {
      out << j.dump() << "\n";
    } else {
      out << fmt::format(
          "{:<7} {:<12} YCSB-{} {:<6} {:<5} {:<6} samples {:>6}  p50 {:>9} us  p99 {:>9} us  "
          "p99.9 {:>9} us  max {:>9.1f} us  {:.4f} Mops  replica CPU/write {}{}{}  -> {}{}\n",
          c.experiment, c.system, wl, op, load_name,
          c.rate > 0 ? fmt::format("{:.0f}/s", c.rate) : std::string("closed"), st.hist.count(),
          percentile_text(st.hist, 0.5, 1e-3, 1), percentile_text(st.hist, 0.99, 1e-3, 1),
          percentile_text(st.hist, 0.999, 1e-3, 1), static_cast<double>(st.hist.max()) / 1e3,
          static_cast<double>(r.total) / r.seconds / 1e6,
          r.writes > 0 ? fmt::format("{:.0f} ns", static_cast<double>(r.replica_cpu_ns) / static_cast<double>(r.writes))
                       : std::string("-"),
          counted ? fmt::format("  traversals/write {:.1f}", traversals_per_write) : std::string(),
          r.read_server ? fmt::format("  tail read service: on CPU {:.0f} %, waiting {:.0f} %",
                                      100.0 * static_cast<double>(r.read_server->run_ns) / (r.seconds * 1e9),
                                      100.0 * static_cast<double>(r.read_server->wait_ns) / (r.seconds * 1e9))
                        : std::string(),
          j.value("bound_by", std::string("?")),
          r.guard.disturbed()
              ? fmt::format("  client core DISTURBED (work item p99 {:.1f}x quiet)", r.guard.p99_ratio())
              : std::string());
    }
  }
}

void add_p99_ratios(const UpdateTails& t, const std::vector<std::string>& bases, const std::string& prefix,
                    nlohmann::json& summary) {
  const auto hl = t.p99_us.find("hyperloop");
  if (hl == t.p99_us.end()) return;
  for (const auto& base : bases) {
    if (const auto b = t.p99_us.find(base); b != t.p99_us.end()) {
      summary[prefix + base + "_over_hyperloop"] = b->second / hl->second;
    } else if (const auto m = t.p50_us.find(base); m != t.p50_us.end()) {
      summary[prefix + base + "_over_hyperloop_at_least"] = m->second / hl->second;
    }
  }
}

}  // namespace ferry::bench::store_bench
