// The replica side of a HyperLoop group: what each replica's application
// does once, at setup -- create its queues, pre-post the WQE chains of every
// primitive, and hand the first operation to its NIC -- after which its
// thread does nothing but wait (docs/hyperloop.md, "Replica setup").
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "ferry/common/status.h"
#include "ferry/hyperloop/group.h"
#include "ferry/nic/verbs.h"
#include "host.h"
#include "layout.h"

namespace ferry::hyperloop::detail {

// A replica's application thread: runs setup steps handed to it, then
// blocks. Its CPU time is what the benchmark reports as replica CPU.
class Agent {
 public:
  Agent(std::string name, int cpu);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;
  // Runs fn on the agent's thread and waits for it.
  void run(const std::function<void()>& fn);
  uint64_t cpu_ns() const;
  // Waits (up to a second) until the thread is asleep in the kernel again
  // after its last task, so that cpu_ns() stops moving: the few microseconds
  // it takes to get back into its wait are setup, not data-path work.
  void wait_asleep() const;

 private:
  void main();
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void()>* task_ = nullptr;
  bool done_ = false;
  bool stop_ = false;
  std::thread thread_;
  std::string name_;
  int cpu_ = -1;
  std::atomic<int> tid_{0};
};

struct ReplicaChain {
  Chain chain = Chain::kWrite;
  bool tail = false;
  std::unique_ptr<nic::CompletionQueue> rcq;  // RECV completions from upstream (count-only; WAIT target)
  std::unique_ptr<nic::CompletionQueue> lcq;  // loopback completions (count-only; WAIT target)
  std::unique_ptr<nic::QueuePair> up;         // from upstream: managed receive queue
  std::unique_ptr<nic::QueuePair> down;       // to the next replica or the client: managed send queue
  std::unique_ptr<nic::QueuePair> loop_a;     // loopback requester: managed send queue
  std::unique_ptr<nic::QueuePair> loop_b;     // loopback responder
  std::unique_ptr<nic::QueuePair> ctl;        // WAIT / ENABLE chain: managed, enables and re-arms itself
  std::unique_ptr<nic::QueuePair> ctl_peer;   // ctl's partner (the re-arm atomics' responder); posts the boot enables
  std::unique_ptr<nic::MemoryRegion> ctl_mr;  // the control ring: local write, remote atomic
  uint8_t* down_ring = nullptr;
  uint8_t* loop_ring = nullptr;
  uint8_t* ctl_ring = nullptr;
  uint8_t* forward = nullptr;                 // ring_ops slots of forward_stride bytes
  uint32_t forward_stride = 0;
  uint32_t ctl_depth = 0;
};

// Where a replica's chains send to (learned at connection setup).
struct Downstream {
  uint64_t region_iova = 0;  // next replica's region (gWRITE forwarding); unused by the tail
  uint32_t region_rkey = 0;
  // The client's acknowledgement buffer of each chain (tail only): ring_ops
  // slots of ack_stride bytes; gCAS result maps land there.
  std::array<uint64_t, kChainCount> ack_slots{};
  uint32_t ack_rkey = 0;
  uint32_t ack_stride = 0;   // bytes per ring slot
};

// One replica of a group. In process, `host` owns the NIC's protection
// domain and the region (an emulated machine of the caller's Engine); in a
// replica process (Replica, include/ferry/hyperloop/replica.h, replica.cc) the
// caller's NIC and memory are used.
struct ReplicaNode {
  uint32_t index = 0;
  uint32_t replicas = 0;
  GroupOptions options;
  nic::Nic* nic = nullptr;
  nic::ProtectionDomain* pd = nullptr;
  nic::MemoryRegion* region_mr = nullptr;  // the group's region: local write, remote write/read/flush/atomic
  std::unique_ptr<Host> host;              // in process: owns nic's PD, the region and its MR
  // Rings, forward buffers and scratch: replica_wq_bytes() bytes, zeroed.
  // In process a DRAM region of host's domain (wq_region), else the caller's.
  uint8_t* wq = nullptr;
  pm::Region* wq_region = nullptr;
  std::unique_ptr<nic::MemoryRegion> wq_mr;
  uint8_t* discard = nullptr;
  std::unique_ptr<nic::CompletionQueue> misc_cq;  // count-only, for queues nobody waits on
  std::array<ReplicaChain, kChainCount> chains;
  std::unique_ptr<Agent> agent;

  ReplicaNode() = default;
  ReplicaNode(const ReplicaNode&) = delete;
  ReplicaNode& operator=(const ReplicaNode&) = delete;
  ~ReplicaNode();
  // Destroys the agent, the queues, the rings and their memory (in that
  // verbs order), keeping `host` (its region and the NIC's PD): what dies
  // with a replica's process, and what a reconfiguration rebuilds. Idempotent.
  void teardown();
  // The process is gone (teardown ran): the host's memory is all that is left.
  bool dead() const { return agent == nullptr; }

  bool tail() const { return index + 1 == replicas; }
  uint64_t wq_iova(const void* p) const { return reinterpret_cast<uint64_t>(p); }
  uint64_t region_iova(uint64_t offset) const { return region_mr->iova() + offset; }
};

// Bytes of a replica's work-queue memory for a chain of n replicas.
size_t replica_wq_bytes(uint32_t n, uint32_t ring_ops);

// In process: fills r.nic, r.pd, r.region_mr from r.host and allocates r.wq
// from its domain.
Status attach_host(ReplicaNode& r);

// Setup step 1 (on the agent): the WQE region's MR, CQs and QPs (in RESET).
// r.nic, r.pd, r.region_mr and r.wq must be set.
Status create_replica_queues(ReplicaNode& r);
// Setup step 2 (on the agent, after the connection manager connected the
// QPs): RECVs with their scatter lists, WQE templates, the control blocks
// (which re-arm themselves lap after lap), and the boot enables.
Status post_replica_chains(ReplicaNode& r, const Downstream& down);

}  // namespace ferry::hyperloop::detail
