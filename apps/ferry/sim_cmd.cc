// `ferry sim <system>`: the deterministic whole-system simulator
// (docs/simulation.md). One line per seed; for a failure, the broken
// invariant, the events that led to it, a shrunk run and the command that
// replays it. Exit code: 0 when every seed ran clean, 1 when one failed
// (or a campaign missed the coverage its system requires, System::must_cover),
// 2 for bad arguments.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "command.h"
#include "ferry/sim/sim.h"

namespace ferry::apps {

namespace {

struct SimFlags {
  uint64_t seed = 1;
  uint64_t seeds = 0;  // 0: just --seed
  uint64_t ops = 0;
  std::string faults = "default";
  bool no_swarm = false;
  std::string skip_faults;
  bool shrink = true;
  bool quiet = false;
  bool trace = false;
  size_t tail = 30;
  uint64_t stop_after = 1;  // failures before the campaign stops
};

void print_failure(const sim::System& system, const sim::RunOptions& options, const sim::RunResult& r) {
  std::printf("  broke: %s\n  %s\n  options: %s\n", r.invariant.c_str(), r.detail.c_str(), r.options.c_str());
  std::printf("  last %zu events:\n", r.tail.size());
  for (const auto& line : r.tail) std::printf("    %s\n", line.c_str());
  std::printf("  replay: %s\n", sim::replay_command(system, options).c_str());
}

int run_sim(const sim::System& system, const SimFlags& flags) {
  auto rates = sim::FaultRates::parse(flags.faults);
  if (!rates.ok()) {
    std::fprintf(stderr, "ferry sim: %s\n", rates.status().message().c_str());
    return 2;
  }
  sim::RunOptions base;
  base.ops = flags.ops;
  base.faults = rates.value();
  base.swarm = !flags.no_swarm;
  base.trace_tail = flags.tail;
  if (!flags.skip_faults.empty()) {
    size_t start = 0;
    while (start < flags.skip_faults.size()) {
      size_t end = flags.skip_faults.find(',', start);
      if (end == std::string::npos) end = flags.skip_faults.size();
      const std::string item = flags.skip_faults.substr(start, end - start);
      char* tail = nullptr;
      const unsigned long long v = std::strtoull(item.c_str(), &tail, 10);
      if (item.empty() || *tail != '\0') {
        std::fprintf(stderr, "ferry sim: --skip-faults takes fault indices separated by commas, not '%s'\n",
                     flags.skip_faults.c_str());
        return 2;
      }
      base.skip_faults.insert(v);
      start = end + 1;
    }
  }
  if (flags.trace)
    base.trace = [](std::string_view line) { std::printf("    %.*s\n", static_cast<int>(line.size()), line.data()); };
  const uint64_t count = flags.seeds == 0 ? 1 : flags.seeds;
  std::printf("ferry sim %s: %llu seed%s from %llu, faults %s%s, %s\n", system.name.c_str(),
              static_cast<unsigned long long>(count), count == 1 ? "" : "s",
              static_cast<unsigned long long>(flags.seed), base.faults.to_string().c_str(),
              base.swarm ? " (swarm: each seed picks and scales them)" : "",
              "one thread, virtual time (NICs on a manual engine)");
  uint64_t failed = 0, ops = 0, acked = 0, pending = 0;
  std::array<uint64_t, sim::kFaultKinds> faults{};
  std::map<std::string, uint64_t> covered;
  uint64_t ran = 0;
  for (uint64_t i = 0; i < count; ++i) {
    sim::RunOptions options = base;
    options.seed = flags.seed + i;
    const sim::RunResult r = system.run(options);
    ops += r.ops;
    acked += r.acknowledged;
    pending += r.pending;
    for (size_t k = 0; k < sim::kFaultKinds; ++k) faults[k] += r.faults[k];
    for (const auto& [name, n] : r.coverage) covered[name] += n;
    ++ran;
    if (!flags.quiet || !r.ok || count == 1) {
      std::printf("%s\n", r.summary().c_str());
    } else if ((i + 1) % 100 == 0) {
      std::printf("... %llu seeds, %llu failed\n", static_cast<unsigned long long>(i + 1),
                  static_cast<unsigned long long>(failed));
    }
    std::fflush(stdout);
    if (r.ok) continue;
    ++failed;
    print_failure(system, options, r);
    if (flags.shrink) {
      std::printf("  shrinking (fewer operations, then fewer faults)...\n");
      std::fflush(stdout);
      const sim::ShrinkResult s = sim::shrink(system, options, r);
      std::printf("  shrunk in %llu tries to %llu ops, %llu of %llu faults skipped:\n",
                  static_cast<unsigned long long>(s.tries), static_cast<unsigned long long>(s.options.ops),
                  static_cast<unsigned long long>(s.options.skip_faults.size()),
                  static_cast<unsigned long long>(s.result.faults_injected));
      std::printf("  %s\n", s.result.summary().c_str());
      print_failure(system, s.options, s.result);
    }
    if (failed >= flags.stop_after) break;
  }
  std::string faults_text;
  for (size_t k = 0; k < sim::kFaultKinds; ++k) {
    if (faults[k] != 0) {
      faults_text += (faults_text.empty() ? "" : " ") + std::string(sim::fault_name(static_cast<sim::FaultKind>(k))) +
                     "=" + std::to_string(faults[k]);
    }
  }
  if (!covered.empty()) {
    std::string text;
    for (const auto& [name, n] : covered) text += (text.empty() ? "" : " ") + name + "=" + std::to_string(n);
    std::printf("coverage: %s\n", text.c_str());
  }
  bool uncovered = false;
  if (failed == 0) {
    const std::vector<std::string> missing = sim::missing_coverage(system, base, ran, covered);
    for (const std::string& name : missing) {
      std::printf(
          "COVERAGE %s: never met in %llu seeds (it must be within %llu): a fault no longer does what it is "
          "there for\n",
          name.c_str(), static_cast<unsigned long long>(ran), static_cast<unsigned long long>(system.cover_within));
    }
    uncovered = !missing.empty();
  }
  std::printf("%s: %llu failed; %llu ops, %llu acknowledged writes, %llu pending; faults: %s\n",
              failed == 0 && !uncovered ? "clean" : "FAILED", static_cast<unsigned long long>(failed),
              static_cast<unsigned long long>(ops), static_cast<unsigned long long>(acked),
              static_cast<unsigned long long>(pending), faults_text.empty() ? "none" : faults_text.c_str());
  return failed == 0 && !uncovered ? 0 : 1;
}

}  // namespace

void add_sim_commands(CLI::App& app, Commands& commands) {
  CLI::App* sim_app = app.add_subcommand(
      "sim",
      "deterministic simulation: a system's cluster in one thread on a virtual clock, under seeded faults, "
      "every history checked (docs/simulation.md)");
  sim_app->require_subcommand(1);
  std::string fault_names;
  for (size_t k = 0; k < sim::kFaultKinds; ++k) {
    fault_names += (k == 0 ? "" : ", ") + std::string(sim::fault_name(static_cast<sim::FaultKind>(k)));
  }
  for (const sim::System& system : sim::systems()) {
    CLI::App* cmd = sim_app->add_subcommand(system.name, system.description);
    auto flags = std::make_shared<SimFlags>();
    cmd->add_option("--seed", flags->seed, "the (first) seed")->capture_default_str();
    cmd->add_option("--seeds", flags->seeds, "run this many seeds from --seed (default: just --seed)");
    cmd->add_option("--ops", flags->ops,
                    "workload operations per seed (default " + std::to_string(system.default_ops) + ")");
    cmd->add_option("--faults", flags->faults,
                    "none, default, or name[=rate],... of: " + fault_names +
                        " (packet kinds per packet, the rest per operation)")
        ->capture_default_str();
    cmd->add_flag("--no-swarm", flags->no_swarm, "use the rates as given (default: each seed picks and scales them)");
    cmd->add_option("--skip-faults", flags->skip_faults, "fault indices not to inject (a shrunk run's replay)");
    cmd->add_flag("!--no-shrink", flags->shrink, "do not shrink a failing run");
    cmd->add_flag("--quiet", flags->quiet, "print failures and a line every 100 seeds only");
    cmd->add_flag("--trace", flags->trace, "print every event as it happens");
    cmd->add_option("--tail", flags->tail, "events shown before a failure")->capture_default_str();
    cmd->add_option("--stop-after", flags->stop_after, "stop the campaign after this many failing seeds")
        ->capture_default_str();
    const sim::System* s = &system;
    commands.add(cmd, [s, flags] { return run_sim(*s, *flags); });
  }
}

}  // namespace ferry::apps
