// What bounds a benchmark point (issue 29): each resource's busy fraction
// over the point's window, measured by the benchmark, and the one that set
// the pace. A paper's claim is judged only on points in the paper's regime
// (JUNE BERRY's: the server CPU bounds the peak, not the emulated NIC).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "ferry/common/tsc.h"

namespace ferry::bench {

// A resource at or above this busy fraction is taken to set the pace.
inline constexpr double kBoundBusy = 0.9;

// A point whose measuring threads spent more than this fraction of its
// window runnable but off their CPU (schedstat's wait time: another thread
// or process held it) is disturbed: its tail shows that, not the system.
inline constexpr double kDisturbedWait = 0.05;

// One resource's busy fraction: "server", "client-nic", "replica", ...
struct Busy {
  const char* resource;
  double fraction;
};

// The busiest resource when it is at least kBoundBusy busy (the first named
// on a tie); otherwise "other" for a closed loop (its calls in flight x
// latency set the pace) and "offered-load" for an open loop (nothing
// saturated: the arrivals set it).
inline std::string bound_by(std::initializer_list<Busy> busy, bool closed_loop) {
  const Busy* top = nullptr;
  for (const Busy& b : busy) {
    if (top == nullptr || b.fraction > top->fraction) top = &b;
  }
  if (top != nullptr && top->fraction >= kBoundBusy) return top->resource;
  return closed_loop ? "other" : "offered-load";
}

// The idle time of a polling loop's passes, sampled: every 16th pass is timed
// (two TSC reads, about 12 ns each on this VM, which on every pass would
// slow a saturated client core by 5-15 %), and an idle one counts 16 times.
class IdleSampler {
 public:
  static constexpr uint64_t kEvery = 16;
  // At a pass's start; true when this pass is timed.
  bool begin() {
    if ((++passes_ & (kEvery - 1)) != 0) return false;
    t0_ = Tsc::now();
    return true;
  }
  // At its end, with what begin() returned and whether it did anything. A
  // timed pass longer than 20 us was the thread losing its CPU (a stall,
  // load_loop.h's LoopGaps), not a typical pass: it counts once, not 16
  // times, or one preemption would read as the whole window idle.
  void end(bool timed, bool busy) {
    if (!timed || busy) return;
    const uint64_t d = Tsc::now() - t0_;
    ticks_ += static_cast<double>(d) * Tsc::ns_per_tick() < 20'000 ? d * kEvery : d;
  }
  uint64_t idle_ns() const { return static_cast<uint64_t>(static_cast<double>(ticks_) * Tsc::ns_per_tick()); }

 private:
  uint64_t passes_ = 0;
  uint64_t t0_ = 0;
  uint64_t ticks_ = 0;
};

}  // namespace ferry::bench
