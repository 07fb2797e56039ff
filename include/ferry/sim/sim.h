// Deterministic whole-system simulation (docs/simulation.md): a storage
// system's production code -- its NICs on a manual engine, its services'
// cores, its clients -- run as one cluster in one thread, on one virtual
// clock, with every decision drawn from one seed: the workload, the
// interleaving of the cores, and the faults. A run ends with checkers over
// everything a client saw (its history) and over the machines' state, and
// yields a verdict; the same seed always gives the same run (the digest of
// its events is equal), so a failure is replayed by naming its seed.
//
// The pieces, as FoundationDB's simulator and TigerBeetle's VOPR have them:
//   - World: the clock, the random streams and the event trace of one run.
//     Workload and interleaving draw from one stream, faults from another,
//     so a fault the shrinker skips leaves the workload's draws as they were.
//   - FaultRates: how often each kind of fault may strike. The seed picks
//     which kinds are on and scales each rate (swarm testing: some seeds
//     run one fault hard, others many gently); the run prints the choice.
//   - RunResult: the verdict, the invariant a failure broke, the events
//     that led to it, counts, and the digest.
//   - A system (systems.h) is a function from RunOptions to RunResult;
//     shrink() reduces a failing run to fewer operations and faults.
//
// Thread rules: a World and a run belong to one thread; runs of different
// seeds may go on in parallel threads (they share nothing).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/rng.h"
#include "ferry/common/status.h"

namespace ferry::sim {

// The faults a simulation injects. Which kinds a system supports is its
// own (systems.h says); a rate of a kind it does not support is ignored.
enum class FaultKind : uint8_t {
  kPacketLoss,       // a packet is lost on the wire
  kPacketDuplicate,  // a packet is delivered twice
  kPacketDelay,      // a packet is held back (and so reordered)
  kPartition,        // a link is cut, one way or both, until a heal
  kProcessCrash,     // a server process dies (DRAM lost, PM kept) and restarts from PM
  kPowerFailure,     // a host loses power (PM keeps what the power-failure model decides)
  kSlowHost,         // a host's cores run rarely for a while
  kClientCrash,      // a client dies with calls in flight; a new one resumes
  kMemberReplace,    // a member is replaced while writes are in flight
  kMembershipDown,   // the membership store is unavailable for a while
};
inline constexpr size_t kFaultKinds = 10;
std::string_view fault_name(FaultKind kind);  // "loss", "dup", "delay", "partition", "crash", ...

// Per-kind rates. Packet kinds: probability per packet. The others:
// probability per workload operation that the fault strikes during it.
struct FaultRates {
  std::array<double, kFaultKinds> rate{};

  double& operator[](FaultKind k) { return rate[static_cast<size_t>(k)]; }
  double operator[](FaultKind k) const { return rate[static_cast<size_t>(k)]; }
  bool any() const;

  static FaultRates none();
  // The rates CI's seeds run with (docs/simulation.md).
  static FaultRates defaults();
  // "none", "default", or a comma list of name=rate (and "name" alone for
  // the default rate of that kind), applied over "none" -- e.g.
  // "loss=0.01,crash,power=0.02". kInvalidArgument names a bad item.
  static Result<FaultRates> parse(std::string_view spec);
  // "loss=0.01,crash=0.02" (kinds with a nonzero rate; "none" if none).
  std::string to_string() const;
};

struct RunOptions {
  uint64_t seed = 1;
  uint64_t ops = 0;  // workload operations; 0: the system's default
  FaultRates faults = FaultRates::defaults();
  // Swarm testing: the seed turns each given kind on (3 in 4) and scales
  // its rate by [0.25, 2). false: the rates as given.
  bool swarm = true;
  // Faults (their index in the run's order of faults) not injected: the
  // shrinker's lever. A skipped fault still draws what it would have drawn.
  std::set<uint64_t> skip_faults;
  size_t trace_tail = 40;  // events kept for a failure's report
  // Called with every event line as it happens (--trace); may be empty.
  std::function<void(std::string_view)> trace;
};

struct RunResult {
  uint64_t seed = 0;
  bool ok = false;
  std::string invariant;  // the broken one ("linearizable", "durable", ...); empty when ok
  std::string detail;     // what broke it, readable
  std::string options;    // the run's options as the seed expanded them
  uint64_t digest = 0;    // of every event, in order
  uint64_t events = 0;
  std::vector<std::string> tail;               // the last trace_tail events
  uint64_t ops = 0;                            // workload operations issued
  uint64_t acknowledged = 0;                   // writes whose commit a client saw
  uint64_t pending = 0;                        // operations whose outcome no client learnt
  uint64_t reads = 0;                          // reads answered
  std::array<uint64_t, kFaultKinds> faults{};  // injected, per kind (packet kinds: packets)
  uint64_t faults_injected = 0;                // non-packet faults fired (indices 0..n-1)
  uint64_t sim_ns = 0;                         // virtual time the run took
  // What the run exercised, by name (system-specific: "torn-after-crash",
  // ...): System::must_cover names the ones a campaign must meet.
  std::map<std::string, uint64_t> coverage;
  std::string summary() const;  // one line: verdict, ops, faults, digest
};

// One run's world.
class World {
 public:
  explicit World(const RunOptions& options);

  FakeClock& clock() { return clock_; }
  uint64_t now() const { return clock_.now_ns(); }
  Rng& rng() { return rng_; }                         // the workload's and the scheduler's draws
  const FaultRates& rates() const { return rates_; }  // after swarm scaling
  const RunOptions& options() const { return options_; }

  // Records an event (folded into the digest, kept in the tail, traced).
  void event(std::string_view text);
  // Whether a fault of `kind` strikes now: draws against its rate (times
  // `scale`) from the fault stream. A fault that strikes gets the next
  // index; a skipped one (RunOptions::skip_faults) returns false. Logged.
  bool strike(FaultKind kind, double scale = 1.0);
  // A draw from the fault stream (a fault's parameters: which host, how long).
  uint64_t fault_below(uint64_t bound) { return fault_rng_.below(bound); }
  // Counts packet faults the fabric reports (for the result).
  void count(FaultKind kind, uint64_t n);

  // Fills the digest, events, tail, options, fault counts and time.
  void finish(RunResult* result) const;

 private:
  RunOptions options_;
  FaultRates rates_;
  FakeClock clock_;
  Rng rng_;
  Rng fault_rng_;
  uint64_t digest_;
  uint64_t events_ = 0;
  uint64_t next_fault_ = 0;
  std::array<uint64_t, kFaultKinds> counts_{};
  std::deque<std::string> tail_;
};

// A simulated system: its name (the `ferry sim` subcommand), what it runs,
// the faults it supports, its default operation count, and its run.
struct System {
  std::string name;
  std::string description;
  std::vector<FaultKind> faults;
  uint64_t default_ops = 200;
  std::function<RunResult(const RunOptions&)> run;
  // Coverage a campaign must reach: each named RunResult::coverage count is
  // non-zero over any campaign of at least `cover_within` seeds at the
  // default fault rates (swarm on). A count that stays zero means a fault
  // no longer does what it is there for -- the campaign fails as a seed
  // would (check_coverage).
  std::vector<std::string> must_cover;
  uint64_t cover_within = 0;
};

// The coverage a campaign of `seeds` seeds at `options`' rates reached
// (summed RunResult::coverage): the names in system.must_cover it never
// met, when the campaign is one the requirement applies to (else empty).
std::vector<std::string> missing_coverage(const System& system, const RunOptions& options, uint64_t seeds,
                                          const std::map<std::string, uint64_t>& covered);

// Every system (systems.h), in `ferry sim`'s order.
const std::vector<System>& systems();
// kNotFound naming the systems there are.
Result<const System*> find_system(std::string_view name);

// Reduces a failing run: fewer operations (the shortest prefix that still
// fails, by bisection), then fewer faults (each fired fault skipped in
// turn, kept skipped if the run still fails). A run counts as failing if it
// breaks any invariant. `progress` (optional) sees each try.
struct ShrinkResult {
  RunOptions options;  // the reduced run's (ops, skip_faults set)
  RunResult result;    // its failure
  uint64_t tries = 0;
};
ShrinkResult shrink(const System& system, const RunOptions& failing, const RunResult& failure,
                    const std::function<void(const RunOptions&, const RunResult&)>& progress = {});

// The command line that replays `options` exactly.
std::string replay_command(const System& system, const RunOptions& options);

}  // namespace ferry::sim
