// `ferry bench nic`: perftest-style latency and bandwidth of the software
// RNIC for WRITE, READ, SEND and ATOMIC, with the physical references
// (cross-thread ping-pong, memcpy) measured in the same run.
//
// --transport udp: the two NICs are two NIC daemons (`ferry nicd`), separate
// processes posix_spawned from this executable, talking RoCEv2 over loopback
// UDP; the client side attaches to daemon A, the server side to daemon B.
// Every point also measures, in the same run, the in-process figure (the
// same point on one in-process Engine) and a plain UDP ping-pong of the same
// payload with an echo process (`ferry bench udp-echo`), the physical
// reference for that wire.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::bench {

struct NicBenchOptions {
  std::vector<std::string> ops = {"write", "read", "send", "atomic"};
  std::vector<uint32_t> sizes = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
  std::vector<uint32_t> outstanding = {1, 16};  // 1 = latency test, >1 = rate/bandwidth test
  uint64_t iters = 0;              // measured operations per point; 0 = sized by seconds_per_point
  double seconds_per_point = 0.25;
  int client_cpu = 0;              // the measuring application thread
  int engine_cpu = 1;              // the NIC engine thread
  int engine_fifo = 0;             // SCHED_FIFO priority for the engine (0 = normal)
  uint32_t mtu = 4096;
  bool json = false;               // one JSON object per line instead of a table
  // Run the engine on the measuring thread (manual mode, one step per poll):
  // measures the NIC's processing cost per operation with no cross-core
  // traffic. A profile, not a latency: nothing here is concurrent.
  bool inline_engine = false;

  // "inproc" (both NICs on one Engine of this process) or "udp" (two daemons).
  std::string transport = "inproc";
  // --transport udp: the engine CPUs of daemon A (client side) and B (server
  // side), and how long each engine keeps polling after its last work before
  // it sleeps in ppoll on its socket and wake eventfd. -1: not pinned.
  // Why these defaults (measured: docs/nic-performance.md, "Over UDP between
  // two daemons"): a round trip needs three parties (the measuring thread,
  // engine A, engine B) and this machine has two vCPUs, so one CPU is shared.
  // Both engines share CPU 1 and never spin: each sleeps as soon as it is idle
  // and is woken by the datagram (or A by the post's eventfd write), a switch
  // on the same CPU; an engine that spins there only delays the other's
  // wakeup (it must be preempted: 4x worse at 16 outstanding), and an engine
  // on the client's CPU waits for the polling client to be preempted (~3x,
  // millisecond tails).
  std::vector<int> daemon_engine_cpus = {1, 1};
  std::vector<uint64_t> daemon_spin_us = {0, 0};
  // How the measuring thread waits for its completions: "poll" (spin on the
  // CQ) or "block" (sleep on a completion channel the daemon signals). It
  // polls by default: it has CPU 0 to itself, so spinning costs the engines
  // nothing, while blocking adds a wakeup of CPU 0 per operation (~+20 us).
  std::string client_wait = "poll";

  // Per-QP cost at scale (nic_qp_scale.h): when not empty, `bench nic` runs
  // only these points, one per N QP pairs, for each op and size, in process.
  std::vector<uint32_t> qp_pairs;
  uint32_t qp_depth = 16;  // send and receive queue depth of each of their QPs
};

// Runs the benchmark, writing results to `out` and progress to `log`.
// kInvalidArgument for an unknown op or a bad size.
Status run_nic_bench(const NicBenchOptions& options, std::ostream& out, std::ostream& log);

}  // namespace ferry::bench
