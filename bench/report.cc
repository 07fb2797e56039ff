#include "report.h"

#include <fmt/format.h>

#include <cmath>

#include "build_info.h"
#include "ferry/common/cpu.h"

namespace ferry::bench {

nlohmann::json placement_json(const Placement& p) {
  nlohmann::json e = {{"threads", p.engine_threads}, {"pinned", p.engine_pinned}};
  if (p.engine_pinned) e["cpu"] = p.engine_cpu;
  if (p.engine_fifo > 0) e["fifo_priority"] = p.engine_fifo;
  return e;
}

std::string placement_text(const Placement& p) {
  std::string engine = p.engine_pinned ? fmt::format("pinned to CPU {}", p.engine_cpu) : "not pinned";
  if (p.engine_fifo > 0) engine += fmt::format(", SCHED_FIFO {}", p.engine_fifo);
  const std::string client = p.client_cpu >= 0 ? fmt::format("pinned to CPU {}", p.client_cpu) : "not pinned";
  return fmt::format("NIC engine: {} thread(s), {}; client thread {}; CPU load: {}; machine: {}", p.engine_threads,
                     engine, client, p.load, machine_description());
}

uint64_t samples_needed(double q) { return static_cast<uint64_t>(std::ceil(10.0 / (1.0 - q) - 1e-9)); }

bool percentile_reportable(const Histogram& h, double q) { return h.count() > 0 && h.count() >= samples_needed(q); }

nlohmann::json percentile_json(const Histogram& h, double q, double scale) {
  if (!percentile_reportable(h, q)) return nullptr;
  return static_cast<double>(h.percentile(q)) * scale;
}

std::string percentile_text(const Histogram& h, double q, double scale, int decimals) {
  if (!percentile_reportable(h, q)) return "n/a";
  return fmt::format("{:.{}f}", static_cast<double>(h.percentile(q)) * scale, decimals);
}

void add_percentiles_ns(nlohmann::json& j, const Histogram& h) {
  j["samples"] = h.count();
  j["p50_ns"] = percentile_json(h, 0.50);
  j["p95_ns"] = percentile_json(h, 0.95);
  j["p99_ns"] = percentile_json(h, 0.99);
  j["p999_ns"] = percentile_json(h, 0.999);
  j["max_ns"] = h.max();
}

void add_provenance(nlohmann::json& j) {
  j["commit"] = build_commit();
  if (build_dirty()) j["dirty"] = true;
  j["machine"] = machine_description();
}

}  // namespace ferry::bench
