// `ferry bench tailwind`: see tailwind_bench.h. The system under test is
// tailwind_setup.h's, the points tailwind_points.h's, the report
// tailwind_report.h's; this file checks the options and runs the systems in
// order, the RPC baseline first.
#include "tailwind_bench.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common.h"
#include "tailwind_points.h"
#include "tailwind_report.h"
#include "tailwind_setup.h"

namespace ferry::bench {
namespace {

using tailwind_bench::Emitter;
using tailwind_bench::kOpenInflight;
using tailwind_bench::mix_of;
using tailwind_bench::placement;
using tailwind_bench::run_measured;
using tailwind_bench::run_recovery;
using tailwind_bench::summarize;

Status validate(const TailwindBenchOptions& o) {
  for (const auto& e : o.experiments) {
    if (!has({"clients", "latency", "active", "recovery"}, e)) {
      return invalid_argument("unknown experiment '" + e + "' (clients, latency, active, recovery)");
    }
  }
  for (const auto& s : o.systems) {
    if (!has({"tailwind", "rpc"}, s)) return invalid_argument("unknown system '" + s + "' (tailwind, rpc)");
  }
  if (o.systems.empty()) return invalid_argument("no system to run");
  for (const auto& w : o.workloads) FERRY_RETURN_IF_ERROR(mix_of(w, o).status());
  if (o.servers < o.replicas + 1) {
    return invalid_argument(
        fmt::format("{} servers cannot hold {} replicas of each log besides its primary", o.servers, o.replicas));
  }
  if (o.workers == 0) return invalid_argument("at least one worker per server");
  if (o.keys < 100) return invalid_argument("at least 100 keys");
  if (o.key_bytes == 0 || o.value_bytes == 0) return invalid_argument("keys and values must not be empty");
  for (uint32_t c : o.clients) {
    if (c == 0 || c > kOpenInflight) return invalid_argument(fmt::format("clients must be 1..{}", kOpenInflight));
  }
  if (o.peak_clients == 0 || o.peak_clients > kOpenInflight) {
    return invalid_argument(fmt::format("--peak-clients must be 1..{}", kOpenInflight));
  }
  if (o.active_clients == 0 || o.active_clients > kOpenInflight) {
    return invalid_argument(fmt::format("--active-clients must be 1..{}", kOpenInflight));
  }
  if (o.backup_media != "dram" && o.backup_media != "pm") {
    return invalid_argument("unknown --backup-media '" + o.backup_media + "' (dram, pm)");
  }
  if (o.recovery_backups < o.replicas + 1) {
    return invalid_argument(
        fmt::format("--recovery-backups {}: the recovery masters need {} backups besides themselves",
                    o.recovery_backups, o.replicas));
  }
  for (double l : o.loads) {
    if (!(l > 0 && l <= 2)) return invalid_argument("loads are fractions of the RPC peak in (0, 2]");
  }
  for (uint32_t a : o.active) {
    if (a == 0 || a > o.servers) return invalid_argument(fmt::format("active primaries must be 1..{}", o.servers));
  }
  if (!(o.closed_seconds > 0) || !(o.min_seconds > 0) || o.max_seconds < o.min_seconds) {
    return invalid_argument("point durations must be positive, --max-seconds >= --min-seconds");
  }
  return ok_status();
}

}  // namespace

TailwindBenchOptions tailwind_quick_options() {
  TailwindBenchOptions o;
  o.workloads = {"ycsb-b", "write-only"};
  o.clients = {1, 8, 64};
  o.loads = {0.2, 0.8};
  o.active = {1, 4};
  o.keys = 20000;
  o.closed_seconds = 0.3;
  o.min_seconds = 0.3;
  o.max_seconds = 1.0;
  o.target_samples = 5000;
  o.recovery_objects = 100000;
  return o;
}

Status run_tailwind_bench(const TailwindBenchOptions& options, std::ostream& out, std::ostream& log) {
  FERRY_RETURN_IF_ERROR(validate(options));
  TailwindBenchOptions o = options;
  o.client_cpu = usable_cpu(o.client_cpu);
  o.server_cpu = usable_cpu(o.server_cpu);
  std::error_code ec;
  std::string base = o.dir.empty() ? std::filesystem::current_path(ec).string() : o.dir;
  std::filesystem::create_directories(base, ec);
  std::string pattern = base + "/ferry-bench-tailwind-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return unavailable("cannot create a directory under " + base + ": " + std::strerror(errno));
  }
  const std::string dir = pattern;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code e;
      std::filesystem::remove_all(dir, e);
    }
  } cleanup{dir};

  Emitter em(o, out, log, placement(o, dir));
  em.text() << fmt::format(
      "ferry bench tailwind: Tailwind vs RPC replication on LogKv, {} servers, r = {}, {} B keys, {} B values, "
      "{} keys\n  NIC engine: manual, stepped by the client thread (cpu {}), standing for the client machine and "
      "every host's NIC; all server workers on cpu {}; no CPU load; {} backup buffers; storage {}\n",
      o.servers, o.replicas, o.key_bytes, o.value_bytes, o.keys, o.client_cpu, o.server_cpu, o.backup_media,
      em.placement()["storage"].get<std::string>());
  double rpc_peak = 0;
  const bool measured = has(o.experiments, "clients") || has(o.experiments, "latency") || has(o.experiments, "active");
  // The RPC baseline first: the latency loads are fractions of its peak.
  std::vector<std::string> order;
  if (has(o.systems, "rpc")) order.push_back("rpc");
  if (has(o.systems, "tailwind")) order.push_back("tailwind");
  if (measured) {
    for (const auto& system : order) {
      const std::string fresh = dir + "/" + system;
      std::filesystem::create_directories(fresh, ec);
      FERRY_RETURN_IF_ERROR(run_measured(system, o, fresh, em, &rpc_peak));
      std::filesystem::remove_all(fresh, ec);
    }
  }
  summarize(em);
  if (has(o.experiments, "recovery")) {
    std::vector<uint64_t> sizes = {o.recovery_objects};
    if (o.full) sizes.push_back(10'000'000);
    for (uint64_t n : sizes) {
      for (const auto& system : order) {
        const std::string fresh = dir + "/recovery-" + system;
        std::filesystem::create_directories(fresh, ec);
        FERRY_RETURN_IF_ERROR(run_recovery(system, n, o, fresh, em));
        std::filesystem::remove_all(fresh, ec);
      }
    }
  }
  return ok_status();
}

}  // namespace ferry::bench
