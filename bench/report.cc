#include "report.h"

#include <fmt/format.h>

#include "ferry/common/cpu.h"
#include "ferry/common/tsc.h"

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

void add_percentiles_ns(nlohmann::json& j, const Histogram& h) {
  j["p50_ns"] = h.percentile(0.50);
  j["p95_ns"] = h.percentile(0.95);
  j["p99_ns"] = h.percentile(0.99);
  j["p999_ns"] = h.percentile(0.999);
  j["max_ns"] = h.max();
}

int usable_cpu(int wanted) { return (wanted >= 0 && wanted < available_cpus()) ? wanted : -1; }

const Clock& timing_clock() {
  if (Tsc::invariant()) return TscClock::instance();
  return SteadyClock::instance();
}

const char* timing_clock_name() { return Tsc::invariant() ? "tsc" : "clock_monotonic"; }

}  // namespace ferry::bench
