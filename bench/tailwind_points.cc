#include "tailwind_points.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common.h"
#include "load_loop.h"
#include "report.h"
#include "tailwind_setup.h"

namespace ferry::bench::tailwind_bench {
namespace {

// Closed loop: `clients` requests in flight; a request's latency runs from its send.
Status run_point_closed(Sut& s, Requests& requests, uint32_t clients, const TailwindBenchOptions& o, Point& p) {
  LogKvTarget target(s, p.run, requests, clients);
  FERRY_ASSIGN_OR_RETURN(
      p.run.loop, run_closed(target, p.run.rec, LoopPlan::timed(o.warmup_seconds, o.closed_seconds), timing_clock()));
  return ok_status();
}

// Open loop: Poisson arrivals at `rate_per_s`; a request's latency runs from
// its scheduled arrival, so waiting for a free call slot is charged to it.
Status run_point_open(Sut& s, Requests& requests, double rate_per_s, const TailwindBenchOptions& o, uint64_t seed,
                      Backlog& backlog, Point& p) {
  LogKvTarget target(s, p.run, requests, kOpenInflight);
  const LoopPlan plan = LoopPlan::sampled(o.warmup_seconds, o.target_samples, rate_per_s, o.min_seconds, o.max_seconds);
  FERRY_ASSIGN_OR_RETURN(p.run.loop,
                         run_open(target, p.run.rec, plan, Arrivals{rate_per_s, seed}, backlog, timing_clock()));
  return ok_status();
}

// Keys owned by servers < `active`, in key-number order.
std::vector<uint64_t> keys_of_active(Requests& issuer, uint64_t keys, uint32_t active) {
  std::vector<uint64_t> out;
  for (uint64_t k = 0; k < keys; ++k) {
    if (issuer.owner(k) < active) out.push_back(k);
  }
  return out;
}

}  // namespace

Status run_measured(const std::string& system, const TailwindBenchOptions& o, const std::string& dir, Emitter& em,
                    double* rpc_peak_mops) {
  std::ostream& log = em.text();
  log << fmt::format("{}: building {} servers (r = {}, {} worker(s) + 1 backup worker each)\n", system, o.servers,
                     o.replicas, o.workers);
  FERRY_ASSIGN_OR_RETURN(auto sut, build_sut(system, o, dir));
  Sut& s = *sut;
  if (o.client_cpu >= 0) (void)pin_current_thread(o.client_cpu);
  FERRY_ASSIGN_OR_RETURN(const KvMix write_mix, mix_of("write-only", o));
  {
    Requests filler(s, write_mix, nullptr, 1);
    std::vector<uint64_t> all(o.keys);
    for (uint64_t k = 0; k < o.keys; ++k) all[k] = k;
    FERRY_RETURN_IF_ERROR(prefill(s, filler, all, log, "prefill"));
  }
  auto clean = [&] {
    auto r = s.drive<Result<logkv::CleanResult>>(o.server_cpu, [&] { return s.cluster->clean(); });
    if (r.ok() && r->segments_cleaned > 0) {
      log << fmt::format("  (cleaner: {} segments compacted, {} objects moved, {:.1f} MB freed)\n", r->segments_cleaned,
                         r->objects_relocated, static_cast<double>(r->bytes_freed) / 1e6);
    }
    return r.status();
  };
  uint64_t seed = 100;
  if (has(o.experiments, "clients")) {
    log << system << ": Fig. 7 -- throughput per server vs clients\n";
    for (const auto& w : o.workloads) {
      FERRY_ASSIGN_OR_RETURN(const KvMix mix, mix_of(w, o));
      for (uint32_t c : o.clients) {
        Requests requests(s, mix, nullptr, ++seed);
        Point p{"clients", "7", system, w, c, std::nullopt, 0, 0, {}};
        FERRY_RETURN_IF_ERROR(run_point_closed(s, requests, c, o, p));
        em.emit(point_json(p, o));
      }
      FERRY_RETURN_IF_ERROR(clean());
    }
  }
  if (has(o.experiments, "active")) {
    log << system << ": Fig. 9 -- throughput per active primary\n";
    for (const auto& w : o.workloads) {
      FERRY_ASSIGN_OR_RETURN(const KvMix mix, mix_of(w, o));
      for (uint32_t a : o.active) {
        Requests probe(s, mix, nullptr, 1);
        const std::vector<uint64_t> keys = keys_of_active(probe, o.keys, a);
        Requests requests(s, mix, &keys, ++seed);
        Point p{"active", "9", system, w, o.active_clients, std::nullopt, 0, a, {}};
        FERRY_RETURN_IF_ERROR(run_point_closed(s, requests, o.active_clients, o, p));
        em.emit(point_json(p, o));
      }
      FERRY_RETURN_IF_ERROR(clean());
    }
  }
  if (has(o.experiments, "latency")) {
    // This system's closed-loop peak (write-only, peak_clients): the RPC
    // baseline's is the reference every load is a fraction of.
    Requests peak_requests(s, write_mix, nullptr, ++seed);
    Point peak{"peak", "8", system, "write-only", o.peak_clients, std::nullopt, 0, 0, {}};
    FERRY_RETURN_IF_ERROR(run_point_closed(s, peak_requests, o.peak_clients, o, peak));
    nlohmann::json pj = point_json(peak, o);
    em.emit(pj);
    if (system == "rpc" || *rpc_peak_mops <= 0) {
      *rpc_peak_mops = pj["mops"].get<double>();
      if (system != "rpc") log << "  (no RPC baseline in this run: loads are fractions of this system's own peak)\n";
    }
    log << fmt::format("{}: Figs. 8 and 10 -- write-only latency and CPU vs offered load (RPC peak {:.3f} Mops)\n",
                       system, *rpc_peak_mops);
    Backlog backlog(kBacklogCapacity);
    for (double l : o.loads) {
      Requests requests(s, write_mix, nullptr, ++seed);
      Point p{"latency", "8", system, "write-only", 0, l, *rpc_peak_mops, 0, {}};
      FERRY_RETURN_IF_ERROR(run_point_open(s, requests, l * *rpc_peak_mops * 1e6, o, ++seed, backlog, p));
      em.emit(point_json(p, o));
    }
  }
  return ok_status();
}

// Fig. 13: one server holding `objects` objects crashes and is recovered.
Status run_recovery(const std::string& system, uint64_t objects, const TailwindBenchOptions& o, const std::string& dir,
                    Emitter& em) {
  std::ostream& log = em.text();
  TailwindBenchOptions ro = o;
  // The crashed server and its backups (the paper's: 10); the survivors are
  // the recovery masters, each with r backups besides itself.
  ro.servers = o.recovery_backups + 1;
  ro.keys = std::max<uint64_t>(objects * ro.servers * 2, 1000);  // a key space wide enough to pick the victim's keys
  FERRY_ASSIGN_OR_RETURN(auto sut, build_sut(system, ro, dir));
  Sut& s = *sut;
  if (o.client_cpu >= 0) (void)pin_current_thread(o.client_cpu);
  FERRY_ASSIGN_OR_RETURN(const KvMix mix, mix_of("write-only", ro));
  Requests issuer(s, mix, nullptr, 7);
  const uint32_t victim = 0;
  std::vector<uint64_t> keys;
  keys.reserve(objects);
  for (uint64_t k = 0; k < ro.keys && keys.size() < objects; ++k) {
    if (issuer.owner(k) == victim) keys.push_back(k);
  }
  if (keys.size() < objects) return internal_error("recovery: not enough keys hash to the victim's tablets");
  log << fmt::format("{}: Fig. 13 -- writing {} objects to server {}\n", system, objects, victim);
  FERRY_RETURN_IF_ERROR(prefill(s, issuer, keys, log, "fill"));
  FERRY_RETURN_IF_ERROR(s.drive<Status>(o.server_cpu, [&] { return s.cluster->crash_server(victim); }));
  std::vector<tailwind::BackupCounters> before;
  for (uint32_t i = 0; i < ro.servers; ++i)
    before.push_back(i == victim ? tailwind::BackupCounters{} : backup_counters(s, i));
  log << fmt::format("{}: server {} crashed; recovering\n", system, victim);
  uint64_t last = now_ns();
  const uint64_t t0 = now_ns();
  auto result = s.drive<Result<logkv::RecoveryResult>>(o.server_cpu, [&] {
    return s.cluster->recover_server(victim, [&](const logkv::RecoveryProgress& p) {
      const uint64_t now = now_ns();
      if (now - last > 1'000'000'000ULL) {
        std::fprintf(stderr, "  recovery: %llu of %llu segments, %llu objects restored\n",
                     static_cast<unsigned long long>(p.segments_done),
                     static_cast<unsigned long long>(p.segments_total),
                     static_cast<unsigned long long>(p.objects_restored));
        last = now;
      }
    });
  });
  const uint64_t wall = now_ns() - t0;
  FERRY_RETURN_IF_ERROR(result.status());
  const logkv::RecoveryResult& r = *result;
  uint64_t scanned = 0, scan_ns = 0, verified = 0, verify_ns = 0;
  for (uint32_t i = 0; i < ro.servers; ++i) {
    if (i == victim) continue;
    const tailwind::BackupCounters after = backup_counters(s, i);
    scanned += after.open_buffers_scanned - before[i].open_buffers_scanned;
    scan_ns += after.scan_ns - before[i].scan_ns;
    verified += after.closed_verified - before[i].closed_verified;
    verify_ns += after.verify_ns - before[i].verify_ns;
  }
  if (r.progress.objects_restored != objects) {
    return internal_error(fmt::format("recovery restored {} objects of {}", r.progress.objects_restored, objects));
  }
  nlohmann::json j;
  j["bench"] = "tailwind";
  j["experiment"] = "recovery";
  j["figure"] = "13";
  j["system"] = system;
  j["workload"] = "write-only";
  j["objects"] = objects;
  j["servers"] = ro.servers;
  j["segments"] = r.progress.segments_total;
  j["bytes"] = r.progress.bytes;
  j["recovery_s"] = static_cast<double>(wall) / 1e9;
  j["objects_per_s"] = static_cast<double>(objects) / (static_cast<double>(wall) / 1e9);
  j["mb_per_s"] = static_cast<double>(r.progress.bytes) / 1e6 / (static_cast<double>(wall) / 1e9);
  j["placement"] = placement(o, dir);
  std::vector<uint32_t> masters = r.new_owners;
  std::sort(masters.begin(), masters.end());
  masters.erase(std::unique(masters.begin(), masters.end()), masters.end());
  j["recovery_masters"] = masters.size();
  j["backups"] = ro.servers - 1;
  // The phases (wall time): locate + read (every backup fences the log and
  // scans; the replicas are read over RPC), the partitioned replay, the
  // restore. Algorithm 1 apart: the backups' CPU time scanning open buffers.
  j["read_s"] = static_cast<double>(r.read_ns) / 1e9;
  j["replay_s"] = static_cast<double>(r.replay_ns) / 1e9;
  j["restore_s"] = static_cast<double>(r.restore_ns) / 1e9;
  j["open_buffers_scanned"] = scanned;
  j["algorithm1_scan_ms"] = static_cast<double>(scan_ns) / 1e6;
  j["closed_replicas_verified"] = verified;
  j["closed_verify_ms"] = static_cast<double>(verify_ns) / 1e6;
  j["recovery_threads"] = fmt::format(
      "{} recovery masters replay their own tablets' entries of every segment in parallel, then restore in "
      "parallel (one thread each per phase); all on cpu {}",
      masters.size(), o.server_cpu);
  add_provenance(j);
  em.raw(j);
  em.text() << fmt::format(
      "  {:<8} recovery of {} objects ({} segments, {:.1f} MB, {} backups): {:.2f} s, {:.0f} objects/s "
      "(read {:.2f} s, replay {:.2f} s, restore {:.2f} s; Algorithm 1 over {} open buffers: {:.2f} ms CPU)\n",
      system, objects, r.progress.segments_total, static_cast<double>(r.progress.bytes) / 1e6, ro.servers - 1,
      j["recovery_s"].get<double>(), j["objects_per_s"].get<double>(), j["read_s"].get<double>(),
      j["replay_s"].get<double>(), j["restore_s"].get<double>(), scanned, j["algorithm1_scan_ms"].get<double>());
  return ok_status();
}

}  // namespace ferry::bench::tailwind_bench
