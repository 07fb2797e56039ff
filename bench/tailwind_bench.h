// `ferry bench tailwind`: Tailwind (ATC'18) §5 on LogKv, the RAMCloud-like
// store -- Tailwind's one-sided replication against RAMCloud's RPC
// replication on the same code (tailwind::Replication::kRpc), in one run:
//   clients   Fig. 7: closed-loop throughput per server vs clients (each
//             client one request in flight), YCSB-B (95/5), YCSB-A (50/50)
//             and write-only, 30 B keys and 100 B values, YCSB's scrambled
//             Zipfian (0.99) from the shared workload generator.
//   latency   Figs. 8 and 10: write-only, open-loop Poisson arrivals at
//             fractions of the RPC baseline's measured peak: PUT p50/p99/
//             p99.9 and the CPU the servers' workers spent per second.
//   active    Fig. 9: throughput per active primary when only the tablets
//             of 1..N servers receive requests (the others only back up),
//             30 closed-loop clients, YCSB-B, YCSB-A and write-only.
//   recovery  Fig. 13: a server holding N objects (1 M; 10 M with --full)
//             crashes with 10 other servers as its backups; the recovery
//             masters rebuild its tablets from the backups' replicas. Wall
//             time and rate, and the phases apart: locating and reading the
//             replicas (with the backups' Algorithm 1 scan of their open
//             buffers, its CPU time reported on its own), the masters'
//             partitioned replay (in parallel) and their restore.
//
// RPC baseline as RAMCloud replicates (tailwind::Replication::kRpc): one
// replicate RPC in flight per backup, appends written meanwhile merged into
// the next (`appends_per_replicate_rpc`). Merging needs PUTs in flight at a
// primary at once, so several client-request workers per server.
//
// Placement on a 2-CPU machine (the reasoning of oq_bench.h): the NIC engine
// is a manual engine stepped by the client thread, pinned to client_cpu -- it
// stands for the client machine and for the NIC hardware of every host.
// Every server's worker threads (its client-request workers and its backup
// worker) are real threads pinned to server_cpu: that core is "the servers'
// CPU", which must copy every object into the backups' buffers in the RPC
// baseline and need not in Tailwind. Control work (segment cleaning between
// experiments, crash recovery) runs on a thread pinned to server_cpu while
// the client thread keeps stepping the engine. Backup buffers are DRAM
// (battery-backed, as in RAMCloud and the paper's setup), or persistent
// memory with --backup-media pm; closed segments go to files in `dir`
// (default: the working directory, a real file system) with write +
// fdatasync, on the backups' flusher threads after the close replied.
//
// CPU. Workers poll (as RAMCloud's do), so their thread CPU time is the wall
// time; the benchmark reports each worker's busy time instead (rpc::
// WorkerCounters::busy_ns: time spent handling completions, measured with
// the TSC), summed per role: worker_cores (client-request workers per
// server), backup_cpu_ns_per_put (backup workers' busy time per PUT
// acknowledged in the window: opens, closes and, for the RPC baseline, every
// replicated object), backup_replication_requests (requests the backup
// workers served that were not segment control: 0 for Tailwind).
// Backups flush closed segments to storage on a flusher thread (pinned to
// server_cpu) after the close replied; that work, the same per byte in both
// systems, is backup_flush_ns_per_put (their CPU time). There is no dispatch thread: each
// worker polls its own receive queue (the NIC dispatches by SRQ), so
// dispatch_cores is null.
//
// Each point runs until it has target_samples measured requests (bounded by
// min/max seconds for open loop, closed_seconds for closed loop); a
// percentile with fewer than 10/(1-q) samples behind it is null (report.h).
// Latency runs from the scheduled arrival (open loop) or the send (closed
// loop) to the reply.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::bench {

struct TailwindBenchOptions {
  std::vector<std::string> experiments = {"clients", "latency", "active", "recovery"};
  std::vector<std::string> systems = {"rpc", "tailwind"};  // rpc first: latency loads are fractions of its peak
  std::vector<std::string> workloads = {"ycsb-b", "ycsb-a", "write-only"};  // clients experiment
  std::vector<uint32_t> clients = {1, 2, 4, 8, 16, 32, 64};
  std::vector<double> loads = {0.1, 0.2, 0.4, 0.6, 0.8, 0.9};  // latency: fractions of the RPC peak
  std::vector<uint32_t> active = {1, 2, 3, 4};                 // active: primaries receiving requests
  uint32_t peak_clients = 64;                                  // closed-loop clients of the peaks (latency)
  uint32_t active_clients = 30;  // closed-loop clients of the active experiment (the paper's Fig. 9: 30)
  uint32_t servers = 4;        // storage servers (each primary and backup)
  uint32_t replicas = 3;
  uint32_t workers = 1;        // client-request workers per server (plus one backup worker)
  uint64_t keys = 100000;      // key space (prefilled)
  uint32_t key_bytes = 30;
  uint32_t value_bytes = 100;
  uint64_t segment_bytes = 8ull << 20;
  uint32_t backup_buffers = 16;
  double closed_seconds = 0.5;      // a closed-loop point's window
  double min_seconds = 0.5;         // an open-loop point, at least
  double max_seconds = 3.0;         // ... at most
  uint64_t target_samples = 20000;  // ... measured requests it aims for
  double warmup_seconds = 0.1;
  uint64_t recovery_objects = 1000000;  // recovery: objects on the crashed server
  uint32_t recovery_backups = 10;       // recovery: servers besides the crashed one (the paper's Fig. 13: 10)
  // Backup buffers: "dram" (battery-backed, the paper's; Tailwind WRITEs
  // are durable at their ACK) or "pm" (persistent memory: Tailwind follows
  // each WRITE with a FLUSH, the RPC baseline's backups persist their copy).
  std::string backup_media = "dram";
  bool full = false;                    // recovery also with 10 M objects
  int client_cpu = 1;   // the client thread, which steps every NIC
  int server_cpu = 0;   // every server's workers and the control thread
  std::string dir;      // backups' storage and PM files (default: the working directory)
  bool json = false;
};

// The small configuration `--quick` selects (well under a minute).
TailwindBenchOptions tailwind_quick_options();

// Runs the experiments; the report goes to `out` (or, with json, one JSON
// object per point to `out` and the text report to `log`).
// kInvalidArgument names a bad option.
Status run_tailwind_bench(const TailwindBenchOptions& options, std::ostream& out, std::ostream& log);

}  // namespace ferry::bench
