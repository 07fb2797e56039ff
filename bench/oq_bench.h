// `ferry bench oq`: JUNE BERRY (NSDI'25) §6, Figures 6-11 -- the Ordered
// Queue RPC framework against RawRPC and DeferredExec on the same code
// (rpc/ in three modes), in one run:
//   threads  Fig. 6: closed-loop throughput (Mops) of 64 B and 1 KB nilext
//            puts vs client threads (sessions) 1..8, for OQ (cache set) and
//            JUNE BERRY-D (durable OQ, PmKv put) with multi-packet SRQ and
//            client-side delegation on and off, and RawRPC; with the server
//            NIC's modeled resource counters (QP-context lookups and misses,
//            receive-WQE DMAs) per request and the QP count.
//   latency  Figs. 7-8: the memcached-like cache engine under the four
//            Twitter clusters of Table 1, open-loop Poisson arrivals at
//            fractions of each cluster's peak, p50/p99/p99.9 per system.
//   pmkv     Figs. 9-11: PmKv on JUNE BERRY-D against RawRPC (and
//            DeferredExec) over the same durable PmKv, put ratios
//            100/50/5/0 %, latency vs load; and a value-size sweep (peak
//            throughput, Fig. 11, and median latency at a fixed fraction of
//            RawRPC's peak for each size).
//
// Load. The peak an offered load refers to is measured first, in the same
// run: the closed-loop saturation throughput of RawRPC (which executes every
// request before it commits) on the same workload, `sessions` sessions x
// `max_inflight` calls. Open-loop points draw Poisson arrivals over the whole
// client machine; each request's latency runs from its *scheduled* arrival
// to its commit (OQ nilext: the server NIC's hardware ACK; durable OQ: the
// READ behind the SEND; DeferredExec nilext: the worker's software ACK;
// everything else: the worker's reply), so a request that waits for a free
// call slot on the client is charged for the wait (no coordinated omission).
// A point runs until it has `target_samples` measured requests (bounded by
// min/max seconds); a percentile with fewer than 10/(1-q) samples behind it
// is null (report.h).
//
// Placement on a 2-CPU machine (the reasoning of group_bench.h): the NIC
// engine is a manual engine stepped by the client thread, pinned to
// client_cpu -- it stands for the client machine and for the NIC hardware of
// every host at once. The server's worker threads are real threads pinned to
// server_cpu (ServerOptions::threaded, worker_cpus), so the server CPU is a
// separate core that must execute and reply in RawRPC and need not be on the
// commit path of a nilext request in OQ. One server worker by default (the
// paper's per-worker effects); with --workers N they all share server_cpu.
// No CPU load; nothing forks this process. Every point reports the client
// core's stalls (gaps in the client loop) and the load average, since on a
// shared VM a ms-long stall of either core sets the p99 of a short point.
// Each point builds its system afresh (engine, server, prefilled engine
// partitions, client) and tears it down, so that only one server's workers
// ever poll the server CPU, and systems are interleaved point by point.
//
// Modeled counters: the server NIC's NicResourceModel (a QP-context cache of
// qp_context_entries, scaled down with the QP counts: the paper has 3,456 vs
// 144 QPs around an RNIC cache of hundreds; here 8 vs 1 around 4) counts what
// an RNIC would fetch by DMA. They are counters only: nothing runs slower
// for a miss, so the emulator's throughput does not show Fig. 6's gains --
// the counters show their cause.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::bench {

struct OqBenchOptions {
  std::vector<std::string> experiments = {"threads", "latency", "pmkv"};
  // Each experiment runs the ones it compares: threads {oq, oq-durable,
  // rawrpc}, latency {rawrpc, deferred, oq}, pmkv {oq-durable, rawrpc, deferred}.
  std::vector<std::string> systems = {"oq", "oq-durable", "deferred", "rawrpc"};
  // threads (Fig. 6)
  std::vector<uint32_t> threads = {1, 2, 4, 8};
  std::vector<uint32_t> thread_value_bytes = {64, 1024};
  // multi-packet SRQ x delegation for oq and oq-durable: mp-deleg, mp, deleg, plain
  // (RawRPC runs mp-deleg, the paper's "same codebase, same optimizations").
  std::vector<std::string> variants = {"mp-deleg", "mp", "deleg", "plain"};
  uint32_t thread_inflight = 4;  // calls each session keeps in flight
  // latency (Figs. 7-8)
  std::vector<uint32_t> clusters = {12, 19, 27, 31};
  std::vector<double> loads = {0.2, 0.4, 0.6, 0.8, 0.9};  // latency: fractions of RawRPC's measured peak
  // pmkv (Figs. 9-11). Loads reach lower: JUNE BERRY-D's own peak on the
  // emulated PM is well under RawRPC's (the PM model's per-store cost).
  std::vector<double> pm_loads = {0.1, 0.2, 0.3, 0.4, 0.6, 0.8};
  std::vector<double> put_percents = {100, 50, 5, 0};
  std::vector<uint32_t> value_sizes = {64, 256, 1024, 4096};
  double sweep_put_percent = 100;  // the value-size sweep's put ratio
  double sweep_load = 0.5;         // ... its latency points' fraction of RawRPC's peak at each size
  // shared
  uint32_t workers = 1;       // server worker threads (each with its SRQ and partition)
  uint32_t sessions = 4;      // client sessions (threads) in latency and pmkv
  uint32_t max_inflight = 8;  // calls in flight per session, closed loop (the peaks)
  // ... at most, open loop: an open-loop generator should not hold arrivals
  // back, and a small cap lets a few slow calls (gets queued behind sets at a
  // stalled worker) block every session's sets on the client.
  uint32_t open_inflight = 32;
  uint64_t keys = 10000;      // key space (prefilled before each point)
  double closed_seconds = 0.8;       // a closed-loop (peak, threads) point
  double min_seconds = 0.6;          // an open-loop point, at least (several of the VM's ms-long stalls)
  double max_seconds = 3.0;          // ... at most
  uint64_t target_samples = 20000;   // ... measured requests it aims for (p99.9 needs 10,000)
  double warmup_seconds = 0.05;      // before every point, not measured
  uint32_t qp_context_entries = 4;   // modeled server-NIC QP-context cache
  int client_cpu = 1;                // the client thread, which steps every NIC
  int server_cpu = 0;                // the server's worker threads
  // Busy work added before every request's handler, the same in every
  // system, so that the server CPU is the bottleneck as in the paper
  // (docs/juneberry.md, "The paper's regime"). -1: each experiment's
  // default from the paper's figures (server_ns_for); 0: none (the emulator's
  // own regime, where the client/NIC core bounds the peaks).
  int64_t server_ns_per_request = -1;
  std::string pm_dir;                // PM files (default /dev/shm)
  size_t pm_region_bytes = 128ull << 20;  // PmKv region per worker
  bool json = false;
};

// The paper's per-request server time (worker-seconds per request at its
// peak): Fig. 8's memcached server, 16 workers at Cluster-19's 4.1 Mops
// peak, 16 / 4.1e6 s = 3.9 us; Fig. 10's PMemKV server, 18 workers at about
// 2.0 Mops of write-only puts, 18 / 2.0e6 s = 9.0 us. Fig. 6's echo server
// does no back-end work: 0.
inline constexpr uint64_t kPaperCacheNsPerRequest = 3900;
inline constexpr uint64_t kPaperPmKvNsPerRequest = 9000;
// The busy work an experiment's points add (OqBenchOptions::server_ns_per_request).
uint64_t server_ns_for(const OqBenchOptions& o, const std::string& experiment);

// The small configuration `--quick` selects (under ~20 s, every system, every
// experiment): for options the command line did not set.
OqBenchOptions oq_quick_options();

// Runs the experiments; the report goes to `out` (or, with json, one JSON
// object per point to `out` and the text report to `log`).
// kInvalidArgument names a bad option.
Status run_oq_bench(const OqBenchOptions& options, std::ostream& out, std::ostream& log);

}  // namespace ferry::bench
