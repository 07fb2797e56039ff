// The idle time of a polling loop's passes, sampled: every 16th pass is timed
// (two TSC reads, about 12 ns each on the project's VM, which on every pass
// would slow a saturated emulator core by 5-15 %), and an idle one counts 16
// times. A benchmark's client thread, which steps every emulated NIC, learns
// how busy its core was (bench/regime.h; nic::EngineOptions::account_idle).
// One writer (the polling thread); idle_ns() may be read from any thread.
#pragma once

#include <cstdint>

#include "ferry/common/counter.h"
#include "ferry/common/tsc.h"

namespace ferry {

class IdleSampler {
 public:
  static constexpr uint64_t kEvery = 16;
  // A timed pass longer than this lost its CPU (a stall, as the load loops'
  // LoopGaps count them), not a typical pass: it counts once, not 16 times,
  // or one preemption would read as a whole window idle.
  static constexpr double kStallNs = 20'000;

  // At a pass's start; true when this pass is timed.
  bool begin() {
    if ((++passes_ & (kEvery - 1)) != 0) return false;
    t0_ = Tsc::now();
    return true;
  }
  // At its end, with what begin() returned and whether it did anything.
  void end(bool timed, bool busy) {
    if (!timed || busy) return;
    const uint64_t d = Tsc::now() - t0_;
    ticks_.add(static_cast<double>(d) * Tsc::ns_per_tick() < kStallNs ? d * kEvery : d);
  }
  // Idle time measured whole (a sleep), in TSC ticks.
  void add_idle_ticks(uint64_t ticks) { ticks_.add(ticks); }
  uint64_t idle_ns() const { return static_cast<uint64_t>(static_cast<double>(ticks_.get()) * Tsc::ns_per_tick()); }

 private:
  uint64_t passes_ = 0;
  uint64_t t0_ = 0;
  Counter ticks_;
};

}  // namespace ferry
