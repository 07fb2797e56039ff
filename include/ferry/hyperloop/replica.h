// The replica side of a HyperLoop group, for a replica that runs in its own
// process against its host's NIC (a `ferry nicd` daemon, or an in-process
// NIC in tests). It creates its queues over the caller's region, pre-posts
// every chain and then needs no CPU: its NIC serves the group while the
// process sleeps -- or is stopped (docs/hyperloop.md, "Across processes").
//
// Setup, through the connection manager (docs/connection-manager.md):
//   1. create(): queues, the loopback pairs, the up QPs in INIT;
//   2. serve(listener): the up services its upstream (the client, or the
//      replica before it) connects to. They refuse (kUnavailable, "not
//      ready") until step 3 is done, and the upstream retries;
//   3. connect_downstream(address): its down QPs to the next replica's up
//      services, or (the tail) to the client's acknowledgement services;
//      then it posts its chains and becomes ready.
// Every member must be configured with the same GroupOptions (replicas,
// region_bytes, ring_ops, window, flush_verb); a mismatch is refused with a
// message naming the option.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "ferry/cm/cm.h"
#include "ferry/common/status.h"
#include "ferry/hyperloop/group.h"
#include "ferry/nic/verbs.h"

namespace ferry::hyperloop {

struct ReplicaSpec {
  std::string group = "g0";  // names the CM services ("hyperloop.<group>.<chain>.up")
  uint32_t index = 0;        // position in the chain: 0 is the head, replicas-1 the tail
  GroupOptions options;      // media, pm_dir and platform are unused: the memory is the caller's
  uint32_t connect_timeout_ms = 30000;  // connect_downstream waits this long for its peer
};

// Where a replica's handshakes stand (for logs and tests).
struct ReplicaStatus {
  bool ready = false;           // downstream connected, chains posted
  uint32_t upstream_links = 0;  // chains whose upstream connected (0..3)
  std::string last_error;       // the last refused or failed upstream handshake, if any
};

class Replica {
 public:
  // `region` is the group's data (at least options.region_bytes; registered
  // for remote write, read, atomics and FLUSH). For a daemon-attached NIC it
  // must be shared memory (nic::SharedMemory, ferry/nic/shared_memory.h). It must outlive the Replica.
  static Result<std::unique_ptr<Replica>> create(nic::Nic& nic, std::span<uint8_t> region, const ReplicaSpec& spec);
  // Unserves its services, then destroys its queues (the chain stops).
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Registers the three up services on `listener`, which must outlive the
  // Replica (or outlive its destruction, which unserves them).
  Status serve(cm::Listener& listener);
  // Connects downstream ("host:port" of the next replica's listener, or of
  // the client's for the tail), waiting up to spec.connect_timeout_ms for
  // it to come up and be ready; then posts the chains. Once.
  Status connect_downstream(std::string_view address);

  ReplicaStatus status() const;
  const ReplicaSpec& spec() const;
  std::span<uint8_t> region() const;

  struct Impl;

 private:
  explicit Replica(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The Naive-RDMA baseline's replica in its own process (naive.h): the same
// setup and wiring (services "naive.<group>.up" / ".ack"), but once
// connected a thread of this process receives every operation, applies it
// and forwards it -- so stopping the process stops the chain. kEvent blocks
// on a completion channel between operations, kPoll busy-polls a core.
class NaiveReplica {
 public:
  static Result<std::unique_ptr<NaiveReplica>> create(nic::Nic& nic, std::span<uint8_t> region,
                                                      const ReplicaSpec& spec, bool poll_mode = false, int cpu = -1);
  // Stops the thread, unserves, destroys the queues.
  ~NaiveReplica();
  NaiveReplica(const NaiveReplica&) = delete;
  NaiveReplica& operator=(const NaiveReplica&) = delete;

  Status serve(cm::Listener& listener);
  // Connects downstream and starts the thread that serves the chain.
  Status connect_downstream(std::string_view address);
  ReplicaStatus status() const;
  uint64_t ops() const;     // operations this replica applied and forwarded
  uint64_t cpu_ns() const;  // CPU time of its serving thread

  struct Impl;

 private:
  explicit NaiveReplica(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::hyperloop
