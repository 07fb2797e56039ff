// What bounds a benchmark point (issue 29): each resource's busy fraction
// over the point's window, measured by the benchmark, and the one that set
// the pace. A paper's claim is judged only on points in the paper's regime
// (JUNE BERRY's: the server CPU bounds the peak, not the emulated NIC).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "ferry/common/idle_sampler.h"

namespace ferry::bench {

// A resource at or above this busy fraction is taken to set the pace.
inline constexpr double kBoundBusy = 0.9;

// A point whose measuring threads spent more than this fraction of its
// window runnable but off their CPU (schedstat's wait time: another thread
// or process held it) is disturbed: its tail shows that, not the system.
inline constexpr double kDisturbedWait = 0.05;

// A resource whose busy fraction this run cannot measure (Redis's client
// steps no NIC; naive-poll's replica polls, so its CPU says nothing of its
// work): never the one that bounds.
inline constexpr double kNotMeasured = -1;

// One resource's busy fraction: "server", "client-nic", "replica", ...
struct Busy {
  const char* resource;
  double fraction;
};

// A polling thread's busy fraction from its idle time over a window
// (IdleSampler), within [0, 1]; 0 for an empty window.
inline double busy_fraction(uint64_t idle_ns, double window_ns) {
  if (window_ns <= 0) return 0;
  const double busy = 1.0 - static_cast<double>(idle_ns) / window_ns;
  return busy < 0 ? 0 : busy > 1 ? 1 : busy;
}

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

}  // namespace ferry::bench
