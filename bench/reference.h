// Physical references measured in the same run as a benchmark, so that its
// results can be stated as ratios that survive a noisy machine:
//  - a cross-thread ping-pong over one shared cache line per direction, the
//    floor for anything that crosses from an application core to an engine
//    core and back;
//  - memcpy bandwidth over the same working set a benchmark moves.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ferry/common/histogram.h"

namespace ferry::bench {

// Round trips between a thread pinned to cpu_a (measuring) and one pinned to
// cpu_b (echoing). Returns the RTT histogram in nanoseconds. -1 = no pinning.
Histogram pingpong_rtt(int cpu_a, int cpu_b, uint64_t round_trips);

// Time the calling thread's CPU was taken away: a tight loop reads the clock
// for `seconds` and records every gap longer than `threshold_ns` (a timer
// tick, an interrupt, a hypervisor exit). On a VM these set the floor of any
// tail latency for operations of several microseconds.
struct CpuStalls {
  Histogram gaps;           // ns, one per stall
  double per_second = 0;    // stalls per second
  double stolen_fraction = 0;  // of the time measured
};
CpuStalls cpu_stalls(double seconds, uint64_t threshold_ns = 5'000);

// memcpy throughput in bytes/second, copying `size`-byte blocks that cycle
// through `blocks` distinct source/destination slots, on the calling thread,
// for at least `min_seconds`.
double memcpy_bytes_per_second(size_t size, size_t blocks, double min_seconds);

}  // namespace ferry::bench
