// The simulator's world: fault rates, the seed's swarm choice, the event
// trace and its digest, the system table, the shrinker.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ferry/common/checksum.h"
#include "ferry/sim/sim.h"
#include "ferry/sim/systems.h"

namespace ferry::sim {

namespace {

constexpr std::array<std::string_view, kFaultKinds> kNames = {
    "loss", "dup", "delay", "partition", "crash", "power", "slow", "client-crash", "replace", "membership-down"};

// Each kind's default rate (FaultRates::defaults()).
constexpr std::array<double, kFaultKinds> kDefaults = {
    0.002,  // loss, per packet
    0.002,  // dup
    0.01,   // delay
    0.02,   // partition, per operation
    0.01,   // process crash
    0.01,   // power failure
    0.02,   // slow host
    0.02,   // client crash
    0.01,   // member replaced
    0.02,   // membership store down
};

std::string format_rate(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", r);
  return buf;
}

}  // namespace

std::string_view fault_name(FaultKind kind) { return kNames[static_cast<size_t>(kind)]; }

bool FaultRates::any() const {
  for (double r : rate) {
    if (r > 0) return true;
  }
  return false;
}

FaultRates FaultRates::none() { return {}; }

FaultRates FaultRates::defaults() {
  FaultRates f;
  f.rate = kDefaults;
  return f;
}

Result<FaultRates> FaultRates::parse(std::string_view spec) {
  if (spec == "none" || spec.empty()) return none();
  if (spec == "default" || spec == "all") return defaults();
  FaultRates f;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string_view name = item.substr(0, eq);
    size_t kind = kFaultKinds;
    for (size_t k = 0; k < kFaultKinds; ++k) {
      if (kNames[k] == name) kind = k;
    }
    if (kind == kFaultKinds) {
      std::string known;
      for (auto n : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
      return invalid_argument("--faults: unknown fault '" + std::string(name) + "' (known: " + known + ")");
    }
    if (eq == std::string_view::npos) {
      f.rate[kind] = kDefaults[kind];
      continue;
    }
    const std::string text(item.substr(eq + 1));
    char* tail = nullptr;
    const double r = std::strtod(text.c_str(), &tail);
    if (text.empty() || tail == nullptr || *tail != '\0' || !(r >= 0 && r <= 1)) {
      return invalid_argument("--faults: rate of '" + std::string(name) + "' must be a number in [0, 1], not '" + text +
                              "'");
    }
    f.rate[kind] = r;
  }
  return f;
}

std::string FaultRates::to_string() const {
  std::string out;
  for (size_t k = 0; k < kFaultKinds; ++k) {
    if (rate[k] > 0) out += (out.empty() ? "" : ",") + std::string(kNames[k]) + "=" + format_rate(rate[k]);
  }
  return out.empty() ? "none" : out;
}

std::string RunResult::summary() const {
  std::string faults_text;
  for (size_t k = 0; k < kFaultKinds; ++k) {
    if (faults[k] != 0) {
      faults_text += (faults_text.empty() ? "" : " ") + std::string(kNames[k]) + "=" + std::to_string(faults[k]);
    }
  }
  char digest_text[32];
  std::snprintf(digest_text, sizeof digest_text, "%016llx", static_cast<unsigned long long>(digest));
  return std::string(ok ? "ok" : "FAIL") + " seed=" + std::to_string(seed) + " ops=" + std::to_string(ops) +
         " acked=" + std::to_string(acknowledged) + " pending=" + std::to_string(pending) +
         " reads=" + std::to_string(reads) + " faults[" + (faults_text.empty() ? "none" : faults_text) + "]" +
         " events=" + std::to_string(events) + " digest=" + digest_text + (ok ? "" : " broke=" + invariant);
}

World::World(const RunOptions& options)
    : options_(options),
      rates_(options.faults),
      rng_(options.seed * 0x9E3779B97F4A7C15ULL + 1),
      fault_rng_(options.seed * 0xD1B54A32D192ED03ULL + 2),
      digest_(options.seed) {
  if (options_.swarm) {
    // The seed's choice of faults, from a stream of its own, so that the
    // other two streams do not depend on which kinds are given.
    Rng swarm(options.seed * 0x8CB92BA72F3D8DD7ULL + 3);
    for (size_t k = 0; k < kFaultKinds; ++k) {
      const bool on = swarm.below(4) != 0;
      const double scale = 0.25 + 1.75 * swarm.uniform();
      rates_.rate[k] = on ? rates_.rate[k] * scale : 0.0;
    }
  }
}

void World::event(std::string_view text) {
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%10.3f us ", static_cast<double>(clock_.now_ns()) / 1000.0);
  std::string line = stamp;
  line += text;
  digest_ = checksum64(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(line.data()), line.size()), digest_);
  ++events_;
  if (options_.trace) options_.trace(line);
  if (options_.trace_tail != 0) {
    tail_.push_back(std::move(line));
    while (tail_.size() > options_.trace_tail) tail_.pop_front();
  }
}

bool World::strike(FaultKind kind, double scale) {
  const double r = rates_[kind] * scale;
  if (!fault_rng_.chance(r)) return false;
  const uint64_t index = next_fault_++;
  if (options_.skip_faults.count(index) != 0) {
    event("fault #" + std::to_string(index) + " " + std::string(fault_name(kind)) + " skipped");
    return false;
  }
  ++counts_[static_cast<size_t>(kind)];
  event("fault #" + std::to_string(index) + " " + std::string(fault_name(kind)));
  return true;
}

void World::count(FaultKind kind, uint64_t n) { counts_[static_cast<size_t>(kind)] += n; }

void World::finish(RunResult* result) const {
  result->seed = options_.seed;
  result->digest = digest_;
  result->events = events_;
  result->tail.assign(tail_.begin(), tail_.end());
  result->faults = counts_;
  result->faults_injected = next_fault_;
  result->sim_ns = clock_.now_ns();
  result->options = "seed=" + std::to_string(options_.seed) + " ops=" + std::to_string(options_.ops) +
                    " faults=" + rates_.to_string() + (options_.swarm ? " (swarm)" : "");
  if (!options_.skip_faults.empty()) {
    std::string skipped;
    for (uint64_t i : options_.skip_faults) skipped += (skipped.empty() ? "" : ",") + std::to_string(i);
    result->options += " skip-faults=" + skipped;
  }
}

const std::vector<System>& systems() {
  static const std::vector<System> all = [] {
    std::vector<System> v;
    v.push_back(juneberry_system());
    v.push_back(hyperloop_store_system());
    v.push_back(tailwind_system());
    return v;
  }();
  return all;
}

std::vector<std::string> missing_coverage(const System& system, const RunOptions& options, uint64_t seeds,
                                          const std::map<std::string, uint64_t>& covered) {
  std::vector<std::string> missing;
  // Only a campaign like the one the requirement was measured on: enough
  // seeds, the default rates with swarm, the default size, nothing skipped.
  const bool applies = system.cover_within != 0 && seeds >= system.cover_within && options.swarm &&
                       options.faults.rate == FaultRates::defaults().rate && options.ops == 0 &&
                       options.skip_faults.empty();
  if (!applies) return missing;
  for (const std::string& name : system.must_cover) {
    auto it = covered.find(name);
    if (it == covered.end() || it->second == 0) missing.push_back(name);
  }
  return missing;
}

Result<const System*> find_system(std::string_view name) {
  std::string names;
  for (const System& s : systems()) {
    if (s.name == name) return &s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  return not_found("no simulated system '" + std::string(name) + "' (there are: " + names + ")");
}

std::string replay_command(const System& system, const RunOptions& options) {
  std::string cmd = "ferry sim " + system.name + " --seed " + std::to_string(options.seed);
  if (options.ops != 0) cmd += " --ops " + std::to_string(options.ops);
  cmd += " --faults " + options.faults.to_string();
  if (!options.swarm) cmd += " --no-swarm";
  if (!options.skip_faults.empty()) {
    std::string skipped;
    for (uint64_t i : options.skip_faults) skipped += (skipped.empty() ? "" : ",") + std::to_string(i);
    cmd += " --skip-faults " + skipped;
  }
  return cmd;
}

ShrinkResult shrink(const System& system, const RunOptions& failing, const RunResult& failure,
                    const std::function<void(const RunOptions&, const RunResult&)>& progress) {
  ShrinkResult best{failing, failure, 0};
  if (best.options.ops == 0) best.options.ops = system.default_ops;
  auto attempt = [&](const RunOptions& o) {
    RunResult r = system.run(o);
    ++best.tries;
    if (progress) progress(o, r);
    if (!r.ok) {
      best.options = o;
      best.result = std::move(r);
      return true;
    }
    return false;
  };
  // Fewer operations: the smallest count that still fails (a run is a
  // prefix of a longer one until the workload ends, but the final reads
  // and recoveries differ, so bisection is a heuristic, not a proof).
  uint64_t lo = 1, hi = best.options.ops;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    RunOptions o = best.options;
    o.ops = mid;
    if (attempt(o)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  // Fewer faults: skip each fired fault in turn, newest first.
  const uint64_t fired = best.result.faults_injected;
  for (uint64_t i = fired; i-- > 0;) {
    if (best.options.skip_faults.count(i) != 0) continue;
    RunOptions o = best.options;
    o.skip_faults.insert(i);
    attempt(o);
  }
  return best;
}

}  // namespace ferry::sim
