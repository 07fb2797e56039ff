// What a NIC engine thread spends per packet, for `ferry bench nic`:
// the engine thread's CPU time over a measured window divided by the
// packets its NICs handled in that window (issue 31, item 4).
//
// "Packets handled" counts each packet once per engine that touched it. In
// process one engine both sends and receives every packet (both NICs are
// its own), so its packets are the ones its NICs received, and the cost
// covers both ends. A NIC daemon's engine does one end of each packet, so
// its packets are those its NIC sent plus those it received; for the two
// daemons together the comparable figure is both engines' CPU over the
// packets on the wire (sent by either).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace ferry::bench {

// Cumulative counters of one engine, sampled at a window's edges.
struct EngineWork {
  uint64_t cpu_ns = 0;      // the engine thread's CPU time
  uint64_t tx_packets = 0;  // packets its NICs transmitted
  uint64_t rx_packets = 0;  // packets its NICs received
};

// The kernel thread id of process `pid`'s engine thread (by its name,
// nic::kEngineThreadName), or 0 if it has none or several.
int find_engine_thread(pid_t pid);

// b - a, field by field (b sampled after a).
EngineWork engine_work_delta(const EngineWork& a, const EngineWork& b);

// What the scheduler says of thread `tid` of process `pid`, from
// /proc/<pid>/task/<tid>/schedstat: time on a CPU and time runnable but
// waiting for one (taken away by another thread), in ns; zeros if it cannot
// be read (thread gone).
struct SchedStat {
  uint64_t run_ns = 0;
  uint64_t wait_ns = 0;
  SchedStat& operator+=(const SchedStat& o) {
    run_ns += o.run_ns;
    wait_ns += o.wait_ns;
    return *this;
  }
};
SchedStat read_schedstat(pid_t pid, int tid);
// Summed over every thread of the process but except_tid (those alive now:
// a thread that ended since an earlier call takes its time with it).
SchedStat read_schedstat_except(pid_t pid, int except_tid);
// Its on-CPU time alone.
inline uint64_t schedstat_cpu_ns(pid_t pid, int tid) { return read_schedstat(pid, tid).run_ns; }

// TSC ticks per ns (GHz) when the TSC is invariant, else 0: cycles are
// then not reported. The TSC rate is the nominal clock, not the core's
// momentary one (turbo, a VM's host).
double tsc_ghz();

// A per-packet figure: `cpu_ns` over `packets`, in ns and (TSC known) cycles.
struct PacketCost {
  uint64_t cpu_ns = 0;
  uint64_t packets = 0;
  double ns_per_packet = 0;      // 0 when no packets
  double cycles_per_packet = 0;  // 0 when no packets or the TSC rate is unknown
};
PacketCost packet_cost(uint64_t cpu_ns, uint64_t packets);

// {"cpu_ns", "packets", "ns_per_packet", "cycles_per_packet" (null when
// unknown), "tsc_ghz", "measured"}: the JSON shape documented in
// docs/nic-performance.md. `measured` says whose CPU time it is.
nlohmann::json packet_cost_json(const PacketCost& c, const std::string& measured);

}  // namespace ferry::bench
