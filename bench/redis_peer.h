// Redis as a real peer of `ferry bench store` (issue 13 item 6): Debian's
// redis-server, a primary and two replicas on loopback, each a separate
// executable (posix_spawnp; never a fork of the benchmark), driven with
// hiredis, Redis's own C client. A write is SET then WAIT 2 0: it returns
// once both replicas acknowledged the write's replication offset.
//
// Range scans (YCSB-E) as a Redis user would do them: beside the keys, an
// ordered index of them in one sorted set (kIndexKey), every score 0 so
// that ZRANGEBYLEX walks the members (the keys) in byte order; load and
// insert_replicated add to it, scan reads it and then MGETs the values.
//
// What WAIT promises, honestly: the write is in both replicas' memory, not
// on any disk. Persistence is off (`--save ""`, `--appendonly no`), as an
// in-memory store's fastest configuration; Ferry's store acknowledges a
// write once it is durable in every replica's persistent memory (gFLUSH).
// Redis therefore does less per write than Ferry does, which favours Redis.
//
// Placement: the primary plays the front end of Ferry's store, which runs
// on the client's thread, so it is pinned to client_cpu; the two replicas
// are pinned to replica_cpu, where the load (stress-ng) runs, like Ferry's
// replicas' threads. Every thread of each server is pinned once it answers
// PING (Redis starts its background threads before it listens).
//
// The servers share one temporary working directory and write nothing
// there (no persistence, diskless replication both ways, warnings on the
// pipe ChildProcess reads when a server fails). The servers are stopped
// (SIGTERM, then SIGKILL) on every exit path: the destructor, and
// ChildProcess's fatal-signal handler, which also removes the directory.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "child_process.h"
#include "ferry/common/status.h"

struct redisContext;

namespace ferry::bench {

// One record of a scan: a key from the index and its value (nullopt: the
// index lists a key that has no value).
struct RedisRecord {
  std::string key;
  std::optional<std::string> value;
};

struct RedisPeerOptions {
  int primary_cpu = -1;  // -1: not pinned
  int replica_cpu = -1;
  std::string server = "redis-server";  // looked up in PATH
};

class RedisPeer {
 public:
  // The sorted set that indexes the keys (no bench key starts with "ferry:").
  static constexpr std::string_view kIndexKey = "ferry:key-index";

  // True if `server` can be found in PATH (the bench skips Redis otherwise).
  static bool installed(const std::string& server = "redis-server");

  // Starts the primary and both replicas on free loopback ports below the
  // ephemeral range, waits until both replicas are online (the primary's
  // connected_slaves:2, each replica's master_link_status:up, at most
  // 20 s), pins them and connects. kNotFound: redis-server is not
  // installed; kUnavailable: a server did not start or replicate (quoting
  // its log). Progress goes to `log`.
  static Result<std::unique_ptr<RedisPeer>> start(const RedisPeerOptions& options, std::ostream& log);
  ~RedisPeer();  // disconnects, stops the three servers, removes the directory
  RedisPeer(const RedisPeer&) = delete;
  RedisPeer& operator=(const RedisPeer&) = delete;

  // SET key value, then WAIT 2 0: an update of a key already in the index.
  // kUnavailable if WAIT saw fewer than two
  // replicas, or on a connection or server error.
  Status set_replicated(std::string_view key, std::span<const uint8_t> value);
  // A new key, as a Redis user keeping an ordered index would write it:
  // MULTI, SET key value, ZADD <index> 0 key, EXEC, pipelined (one round
  // trip; atomic, so that a scan never lists a key whose value is not
  // there yet), then WAIT 2 0 (a second round trip, as in set_replicated).
  // Errors as set_replicated's, and kUnavailable if EXEC was aborted.
  Status insert_replicated(std::string_view key, std::span<const uint8_t> value);
  // SETs and ZADDs to the index without WAIT, pipelined, then one WAIT 2 0:
  // loading, untimed. `values` is reused round robin.
  Status load(const std::vector<std::string>& keys, const std::vector<std::vector<uint8_t>>& values);
  // GET key from the primary; nullopt if absent.
  Result<std::optional<std::string>> get(std::string_view key);
  // Up to `count` records with key >= start_key in byte order, from the
  // primary: ZRANGEBYLEX <index> [start_key + LIMIT 0 count, then MGET of
  // the keys it listed (two round trips, the second needing the first's
  // answer; none if the index lists no key). A key MGET finds no value for
  // comes back with nullopt: judging that is the caller's.
  Result<std::vector<RedisRecord>> scan(std::string_view start_key, uint32_t count);

  // CPU time the two replica processes used so far (utime + stime of
  // /proc/PID/stat, every thread; 10 ms ticks on most kernels), ns.
  uint64_t replica_cpu_ns() const;
  // "redis-server 7.0.15: primary 127.0.0.1:21000 (CPU 1), replicas :21001,
  // :21002 (CPU 0); appendonly no, save off (WAIT: replicas' memory)".
  const std::string& description() const { return description_; }
  const std::string& version() const { return version_; }

 private:
  RedisPeer() = default;
  Status command_status(void* reply, std::string_view what);
  // WAIT 2 0; kUnavailable unless both replicas acknowledged.
  Status wait_both_replicas();

  std::string dir_;
  std::vector<std::unique_ptr<ChildProcess>> servers_;  // primary, replica, replica
  std::vector<int> ports_;
  redisContext* primary_ = nullptr;
  std::string description_;
  std::string version_;
};

}  // namespace ferry::bench
