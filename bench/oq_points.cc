#include "oq_points.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common.h"
#include "core_guard.h"
#include "oq_report.h"

namespace ferry::bench::oq_bench {
namespace {

// Work items timed before and after every point for the client core's speed
// (about 2 ms each).
constexpr int kSpeedSamples = 2000;

// Which systems each experiment compares (in this order, the baseline first
// where there is one).
const std::vector<std::string> kThreadSystems = {"rawrpc", "oq", "oq-durable"};
const std::vector<std::string> kLatencySystems = {"rawrpc", "deferred", "oq"};
const std::vector<std::string> kPmSystems = {"rawrpc", "deferred", "oq-durable"};

Backend backend_for(const std::string& experiment, const std::string& system) {
  if (experiment == "threads") return system == "oq-durable" ? Backend::kPmKv : Backend::kCache;
  return experiment == "latency" ? Backend::kCache : Backend::kPmKv;
}

std::string variant_name(bool mp, bool deleg) {
  if (mp && deleg) return "mp-deleg";
  if (mp) return "mp";
  if (deleg) return "deleg";
  return "plain";
}

}  // namespace

const Point* find_point(const std::vector<Point>& points, const std::string& experiment, const std::string& workload,
                        const std::string& system, std::optional<double> fraction) {
  for (const Point& p : points) {
    if (p.experiment != experiment || p.workload != workload || p.system != system) continue;
    if (p.offered_fraction.has_value() != fraction.has_value()) continue;
    if (fraction && std::abs(*p.offered_fraction - *fraction) > 1e-9) continue;
    return &p;
  }
  return nullptr;
}

bool PointRunner::selected(const std::string& system) const { return has(o_.systems, system); }

Result<PmHost*> PointRunner::pm_host() {
  if (!pm_) {
    FERRY_ASSIGN_OR_RETURN(pm_, make_pm_host(o_));
  }
  return pm_.get();
}

void PointRunner::keep(Point p) {
  print_row(text_, p);
  points_.push_back(std::move(p));
}

Result<Point> PointRunner::measure(const std::string& experiment, const std::string& system,
                                   const std::string& workload, const KvMix& mix, bool mp, bool deleg,
                                   uint32_t sessions, uint32_t inflight, std::optional<double> fraction,
                                   double peak_mops) {
  SutConfig c;
  c.system = system;
  c.backend = backend_for(experiment, system);
  c.multi_packet = mp;
  c.delegation = deleg;
  c.sessions = sessions;
  c.max_inflight = inflight;
  c.mix = mix;
  c.server_ns_per_request = server_ns_for(o_, experiment);
  PmHost* pm_host_ptr = nullptr;
  if (c.backend == Backend::kPmKv) {
    FERRY_ASSIGN_OR_RETURN(pm_host_ptr, pm_host());
  }
  Point p;  // before the system: calls the system still holds report into p.run
  p.work_item_before_ns = time_work_item(kSpeedSamples).percentile(0.5);
  if (work_item_first_ns_ == 0) work_item_first_ns_ = p.work_item_before_ns;
  p.work_item_first_ns = work_item_first_ns_;
  FERRY_ASSIGN_OR_RETURN(auto sut, build_sut(c, o_, pm_host_ptr));
  p.experiment = experiment;
  p.system = system;
  p.workload = workload;
  p.variant = variant_name(mp, deleg);
  p.backend = c.backend;
  p.multi_packet = mp;
  p.delegation = deleg;
  p.sessions = sessions;
  p.max_inflight = inflight;
  p.mix = mix;
  p.queue_pairs = sut->client->queue_pairs();
  p.workers = o_.workers;
  p.server_ns_per_request = c.server_ns_per_request;
  p.offered_fraction = fraction;
  p.peak_mops = peak_mops;
  p.load_average = load_average();
  const uint64_t seed = ++seed_ * 0x9E3779B97F4A7C15ULL;
  KvTarget target(*sut, p.run, seed);
  if (!fraction) {
    // Closed loop: every session keeps `inflight` calls in flight; a call's
    // latency runs from its send.
    p.run.closed = true;
    FERRY_ASSIGN_OR_RETURN(
        p.run.loop,
        run_closed(target, p.run.rec, LoopPlan::timed(o_.warmup_seconds, o_.closed_seconds), timing_clock()));
  } else {
    // Open loop: Poisson arrivals over the client machine, each sent on the
    // next session with a free call slot; latency from the scheduled arrival.
    const double rate = *fraction * peak_mops * 1e6;
    if (rate < 1.0) return internal_error("no peak to take a fraction of (RawRPC committed nothing)");
    const LoopPlan plan = LoopPlan::sampled(o_.warmup_seconds, o_.target_samples, rate, o_.min_seconds, o_.max_seconds);
    FERRY_ASSIGN_OR_RETURN(
        p.run.loop, run_open(target, p.run.rec, plan, Arrivals{rate, seed ^ 0xA5A5A5A5ULL}, backlog_, timing_clock()));
  }
  p.work_item_after_ns = time_work_item(kSpeedSamples).percentile(0.5);
  return p;
}

Status PointRunner::run_threads() {
  text_ << "\nthreads (Fig. 6): closed loop, nilext puts, each session keeps " << o_.thread_inflight
        << " calls in flight; oq = cache set, oq-durable = PmKv put on JUNE BERRY-D, rawrpc = cache set\n";
  for (uint32_t value_bytes : o_.thread_value_bytes) {
    KvMix mix;
    mix.set_fraction = 1.0;
    mix.key_space = o_.keys;
    mix.key_bytes = 8;
    mix.value_bytes = value_bytes;
    mix.distribution = workload::KeyDistribution::kUniform;
    const std::string workload = fmt::format("put-{}B", value_bytes);
    text_ << fmt::format(" {} (request {} B)\n", workload, request_bytes(mix));
    for (uint32_t threads : o_.threads) {
      for (const std::string& system : kThreadSystems) {
        if (!selected(system)) continue;
        for (const std::string& v : o_.variants) {
          // RawRPC keeps the paper's optimizations (same codebase): one variant.
          if (system == "rawrpc" && v != "mp-deleg") continue;
          const bool mp = v == "mp-deleg" || v == "mp";
          const bool deleg = v == "mp-deleg" || v == "deleg";
          FERRY_ASSIGN_OR_RETURN(Point p, measure("threads", system, workload, mix, mp, deleg, threads,
                                                  o_.thread_inflight, std::nullopt, 0.0));
          keep(std::move(p));
        }
      }
    }
  }
  return ok_status();
}

// The peak (RawRPC, closed loop) and then every load for every system,
// interleaved per load (the order of systems rotates from load to load).
Status PointRunner::run_latency_like(const std::string& experiment, const std::string& workload, const KvMix& mix,
                                     const std::vector<std::string>& systems, const std::vector<double>& loads) {
  std::vector<std::string> chosen;
  for (const std::string& s : systems) {
    if (selected(s)) chosen.push_back(s);
  }
  // The peak the fractions refer to is RawRPC's even if RawRPC's own points
  // were not asked for; the other systems' closed-loop peaks come along.
  double peak = 0;
  for (const std::string& s : systems) {
    if (s != "rawrpc" && !selected(s)) continue;
    FERRY_ASSIGN_OR_RETURN(
        Point p, measure(experiment, s, workload, mix, true, true, o_.sessions, o_.max_inflight, std::nullopt, 0.0));
    if (s == "rawrpc") peak = achieved_mops(p.run);
    keep(std::move(p));
  }
  for (Point& p : points_) {
    if (p.experiment == experiment && p.workload == workload && p.run.closed) p.peak_mops = peak;
  }
  auto own_peak = [&](const std::string& system) {
    const Point* c = find_point(points_, experiment, workload, system, std::nullopt);
    return c != nullptr ? achieved_mops(c->run) : 0.0;
  };
  for (size_t li = 0; li < loads.size(); ++li) {
    for (size_t k = 0; k < chosen.size(); ++k) {
      const std::string& s = chosen[(k + li) % chosen.size()];
      FERRY_ASSIGN_OR_RETURN(
          Point p, measure(experiment, s, workload, mix, true, true, o_.sessions, o_.open_inflight, loads[li], peak));
      p.own_peak_mops = own_peak(s);
      keep(std::move(p));
    }
  }
  return ok_status();
}

Status PointRunner::run_latency() {
  text_ << "\nlatency (Figs. 7-8): cache engine, Twitter clusters (Table 1), open-loop Poisson at fractions of "
           "RawRPC's measured peak; latency from the scheduled arrival to the commit\n";
  for (uint32_t id : o_.clusters) {
    FERRY_ASSIGN_OR_RETURN(const workload::TwitterCluster cl, workload::twitter_cluster(static_cast<int>(id)));
    const KvMix mix = workload::twitter_mix(cl, o_.keys);
    const std::string workload = fmt::format("cluster-{}", id);
    text_ << fmt::format(" {}: {:.0f}% set, key {} B, value {} B, Zipf {}\n", workload, cl.set_ratio * 100,
                         cl.key_bytes, cl.value_bytes, cl.zipf_alpha);
    FERRY_RETURN_IF_ERROR(run_latency_like("latency", workload, mix, kLatencySystems, o_.loads));
  }
  return ok_status();
}

Status PointRunner::run_pmkv() {
  text_ << "\npmkv (Figs. 9-10): PmKv (durable, in PM), 8 B keys, 91 B values, Zipf 0.99; oq-durable = JUNE BERRY-D; "
           "open-loop Poisson at fractions of RawRPC's measured peak\n";
  for (double put : o_.put_percents) {
    const KvMix mix = workload::pmemkv_mix(put / 100.0, o_.keys);
    const std::string workload = fmt::format("pmemkv-put{:g}", put);
    text_ << fmt::format(" {}: {:g}% put\n", workload, put);
    FERRY_RETURN_IF_ERROR(run_latency_like("pmkv", workload, mix, kPmSystems, o_.pm_loads));
  }
  text_ << fmt::format(
      "\npmkv value-size sweep (Fig. 11): {:g}% put, 8 B keys; peak throughput (closed loop) and "
      "latency at {:.0f}% of RawRPC's peak for each size\n",
      o_.sweep_put_percent, o_.sweep_load * 100);
  for (uint32_t size : o_.value_sizes) {
    KvMix mix = workload::pmemkv_mix(o_.sweep_put_percent / 100.0, o_.keys);
    mix.value_bytes = size;
    const std::string workload = fmt::format("pmemkv-put{:g}-value{}B", o_.sweep_put_percent, size);
    text_ << fmt::format(" {}\n", workload);
    FERRY_RETURN_IF_ERROR(run_latency_like("pmkv_value_size", workload, mix, kPmSystems, {o_.sweep_load}));
  }
  return ok_status();
}

}  // namespace ferry::bench::oq_bench
