// `ferry bench store`: HyperLoop §6.2, Figure 12 -- the replicated
// transactional key-value store (hyperloop/txn_kv.h) on HyperLoop against the
// same store on the Naive-RDMA baselines (event-driven and busy-polling), in
// one run, with the replica CPU quiet and loaded.
//
//   YCSB A (50 % updates), B (5 %), D (5 % inserts, reads of recent keys),
//   E (95 % scans of uniform length 1..100 from a Zipfian key over the
//   store's ordered index, 5 % inserts), F (50 % read-modify-writes);
//   32-byte keys, 1 KB values, scrambled Zipfian (D: the latest keys).
//
// Writes are the front end's: lock, Append, ExecuteAndAdvance, unlock, all by
// group primitives (an insert also takes the index lock). Reads and scans
// are a replica's: its read lock (a scan: every stripe's and the index
// lock) and its own image (the tail's), executed here by the client thread, which in this emulation
// also stands for that replica's CPU. Placement as in `ferry bench group`:
// the client thread (which steps the manual NIC engine, i.e. every host's
// NIC) on client_cpu; the replicas' application threads and the load
// (stress-ng, a separate executable) on replica_cpu.
//
// A real peer in the same run (system "redis-wait2", bench/redis_peer.h):
// Debian's redis-server, a primary and two replicas on loopback, the
// replicas pinned to replica_cpu under the same load; a write is SET then
// WAIT 2 0 (both replicas' memory: Redis runs without persistence, while
// Ferry's writes are durable in the replicas' PM), a read a GET from the
// primary. YCSB-E as a Redis user would run it: the keys also in a sorted
// set (scores 0), an insert MULTI/SET/ZADD/EXEC then WAIT 2 0, a scan
// ZRANGEBYLEX on that set then MGET (each answer checked, untimed). Skipped
// with a message when redis-server is not installed.
//
// Experiment "rocksdb" (Figure 11): the real RocksDB with its write-ahead
// log replicated at every Sync through rocks::ReplicatedWalFileSystem on
// each system's group; YCSB-A, reads db->Get at the head, updates db->Put
// with sync = true. RocksDB's own files go to a temporary directory on
// tmpfs (/dev/shm), as the paper's testbed emulated NVM with tmpfs.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/pm/region.h"

namespace ferry::bench {

struct StoreBenchOptions {
  std::vector<std::string> experiments = {"ycsb", "rocksdb"};
  // redis-wait2 runs in the ycsb experiment only.
  std::vector<std::string> systems = {"hyperloop", "naive-event", "naive-poll", "redis-wait2"};
  std::vector<std::string> workloads = {"A", "B", "D", "E", "F"};
  std::vector<std::string> loads = {"quiet", "load"};
  // Where the chain systems' reads and scans run (ycsb): "client" -- on the
  // client thread over the tail's image (that replica's CPU emulated
  // there); "replica" -- on the tail replica's CPU, through its RPC read
  // service (a worker thread on replica_cpu, under the load).
  std::vector<std::string> reads_at = {"client", "replica"};
  uint64_t records = 100'000;  // the paper's 100 K (--full: 1 M)
  uint32_t key_bytes = 32;
  uint32_t value_bytes = 1024;
  uint64_t ops = 10'000;       // per point
  double max_seconds = 20.0;   // cap on a point
  // The rocksdb experiment's second set of points: Poisson arrivals at this
  // rate (ops/s), latency from each op's scheduled time (no coordinated
  // omission). 0: closed loop only. Well below every system's quiet
  // capacity on a 2-CPU machine (RocksDB's own stalls -- memtable switches,
  // new WAL files -- keep a closed-loop client near 3-5 K ops/s).
  double rocksdb_rate = 250;
  uint64_t rocksdb_open_ops = 3000;  // ops per open-loop point (at least 1,000 updates behind a p99)
  uint32_t load_processes = 10;
  int client_cpu = 1;
  int replica_cpu = 0;
  pm::Media media = pm::Media::kPm;
  // TxnOptions::interleaved_flush: each gWRITE and gMEMCPY of a write
  // carries its flush (one chain traversal), or is followed by a gFLUSH
  // (two; the store before 2026-11-29).
  bool interleaved_flush = true;
  uint64_t seed = 1;
  bool json = false;
};

Status run_store_bench(const StoreBenchOptions& options, std::ostream& out, std::ostream& log);

}  // namespace ferry::bench
