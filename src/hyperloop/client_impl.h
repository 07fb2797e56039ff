// Internal state of a HyperLoopClient: its groups, each with the client's
// side of every chain (message and acknowledgement slots, the head and ack
// QPs, the operations in flight) and, in process, the replicas it built.
//
// The client's code, by concern (docs/hyperloop.md follows a gWRITE through
// them in this order):
//   hyperloop.cc           the public API: groups made, connected, killed,
//                          replaced; gwrite_async & co. check and submit
//   client_submit.cc       one message down a chain per operation (descriptors
//                          for every replica, the head's WRITE / flush / SEND)
//   client_complete.cc     the tail's WRITE_WITH_IMM completes it; failures
//   client_build.cc        a group's data path built in process
//   client_reconfigure.cc  in process: a replica replaced, a group stopped
//                          and restarted
//   client_remote.cc       a group whose replicas are processes (Replica, on
//                          NIC daemons), connected through the CM
// The replicas' side is replica_node.h (setup) and layout.h (the WQE chains).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/nic/shared_memory.h"
#include "ferry/nic/verbs.h"
#include "host.h"
#include "layout.h"

namespace ferry::hyperloop {

namespace detail {
struct ReplicaNode;  // replica_node.h
class LinkSet;       // wiring.h
}  // namespace detail

// An operation in flight on a chain, in its ring slot.
struct Pending {
  uint64_t group_seq = 0;
  Primitive primitive = Primitive::kWrite;
  Callback done;
  uint8_t execute_map = 0;
  uint64_t old_value = 0;
  int32_t join = -1;  // gflush that this flush-only operation belongs to
};

// A gflush spans the chains that had unflushed operations.
struct FlushJoin {
  bool used = false;
  uint32_t remaining = 0;
  uint64_t group_seq = 0;
  Callback done;
};

// The client's side of one chain (one per primitive: layout.h, Chain).
struct ClientChain {
  detail::Chain chain = detail::Chain::kWrite;
  std::unique_ptr<nic::CompletionQueue> head_cq;
  std::unique_ptr<nic::CompletionQueue> ack_cq;
  std::unique_ptr<nic::QueuePair> head;  // client -> replica 0
  std::unique_ptr<nic::QueuePair> ack;   // tail -> client (WRITE_WITH_IMM)
  uint8_t* meta = nullptr;               // ring_ops message slots
  uint32_t meta_stride = 0;
  uint8_t* acks = nullptr;  // ring_ops acknowledgement slots (gCAS result maps)
  uint32_t ack_stride = 64;
  uint64_t next = 0;             // operations submitted on this chain
  uint64_t acked = 0;            // operations acknowledged
  bool dirty = false;            // operations since the last flush
  std::vector<Pending> pending;  // ring_ops slots
};

struct Group {
  GroupId id = 0;
  GroupOptions options;
  uint32_t n = 0;
  // Memory of a group connected across processes (shared, so that a daemon
  // can map it): destroyed last.
  nic::SharedMemory remote_client_mem;
  nic::SharedMemory remote_buf_mem;
  // The client's side. In process `client` (an emulated host of the Engine)
  // owns the PD and the client memory; across processes the group does.
  nic::Nic* cnic = nullptr;
  nic::ProtectionDomain* cpd = nullptr;
  std::unique_ptr<detail::Host> client;
  std::unique_ptr<nic::ProtectionDomain> remote_pd;
  std::unique_ptr<nic::MemoryRegion> remote_client_mr;
  std::span<uint8_t> client_mem;  // the gwrite source
  nic::MemoryRegion* client_mr = nullptr;
  pm::Region* buf = nullptr;  // in process: message and acknowledgement slots
  uint8_t* buf_base = nullptr;
  std::unique_ptr<nic::MemoryRegion> buf_mr;
  // The replicas: built here (in process), or only their regions' base
  // addresses and the head's rkey (across processes).
  std::vector<std::unique_ptr<detail::ReplicaNode>> replicas;
  std::array<uint64_t, kMaxReplicas> replica_iova{};
  uint32_t head_rkey = 0;
  std::string remote_name;                // across processes: the group's name
  std::unique_ptr<detail::LinkSet> acks;  // the tail's ack services, served until connected
  std::array<ClientChain, detail::kChainCount> chains;
  std::vector<FlushJoin> joins;
  Status failed;
  bool stopped = false;  // stop_group: no queues until restart_group
  uint64_t next_seq = 0;
  uint32_t hosts_made = 0;      // replica hosts built for this group so far (names)
  uint64_t retired_cpu_ns = 0;  // replica CPU of data paths torn down by reconfigurations

  Group();
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Stops serving the tail's acknowledgement services.
  void unserve();
  // Destroys the client's side of every chain in verbs order (QPs, then
  // CQs, then the slots' MR and memory), as the kernel tears down a dead
  // process's objects. Outstanding operations must have been failed first.
  void release_client_chains();
  bool remote() const { return !remote_name.empty(); }
  uint64_t buf_iova(const void* p) const { return reinterpret_cast<uint64_t>(p); }
  nic::WrOpcode flush_opcode() const { return options.flush_verb ? nic::WrOpcode::kFlush : nic::WrOpcode::kRdmaRead; }
};

struct HyperLoopClient::Impl {
  HyperLoopClient* self = nullptr;
  nic::Nic* nic = nullptr;  // a client created on a NIC (create(nic::Nic&)): its groups connect across processes
  std::vector<std::unique_ptr<Group>> groups;
  HyperLoopStats stats;
  std::deque<std::pair<Callback, OpResult>> ready;  // finished, callback not yet run
  std::function<void()> poll_hook;                  // set_poll_hook
  MessageHook message_hook;                         // set_message_hook

  Result<Group*> find(GroupId gid) const {
    if (gid >= groups.size() || groups[gid] == nullptr) return not_found("unknown group " + std::to_string(gid));
    return groups[gid].get();
  }

  // ---- client_build.cc ----
  // Builds g's data path over `hosts` (chain order; fresh ones are made
  // for the missing tail positions) and its client host if it has none.
  Status build(Group& g, std::vector<std::unique_ptr<detail::Host>> hosts = {});
  // The client's buffers (per chain the message slots and the
  // acknowledgement slots), CQs and QPs, on g.cnic / g.cpd; shared by both
  // kinds of group.
  Status build_client_side(Group& g);

  // ---- client_reconfigure.cc ----
  Result<ReplacementReport> replace(GroupId gid, uint32_t failed);
  // Fails every outstanding operation of g with `reason` and destroys every
  // queue, ring and buffer of its data path, the client's and the replicas',
  // keeping the hosts (regions, NICs, PDs) and the client's memory.
  void stop(Group& g, const Status& reason);
  // A new data path over g's members, in their order (stop first if needed).
  Status restart(GroupId gid);
  // Returns the bytes copied.
  Result<uint64_t> copy_region(detail::Host& from, detail::Host& to);

  // ---- client_remote.cc ----
  Status connect_remote(Group& g, const RemoteGroupOptions& ro);
  // The chains of a group across processes (client side: buffers, queues,
  // acknowledgement services, the head connection); connect_remote's second
  // half, and reconnect_group's after teardown_chains.
  Status connect_chains(Group& g, const RemoteGroupOptions& ro);
  // Fails every outstanding operation of g with `reason` and destroys its
  // client-side chains, keeping its PD and client memory.
  void teardown_chains(Group& g, const Status& reason);

  // ---- client_submit.cc ----
  // Waits for room in ch's window; kFailedPrecondition once g failed.
  Status acquire(Group& g, ClientChain& ch);
  void record(Group& g, ClientChain& ch, Primitive p, Callback done, uint8_t execute_map, uint64_t old_value,
              int32_t join, bool flushes);
  Status post_write(Group& g, uint64_t offset, uint32_t size, bool data, bool flush);
  Status post_cas(Group& g, uint64_t offset, uint64_t old_value, uint64_t new_value, uint8_t map, bool flush);
  Status post_memcpy(Group& g, uint64_t src, uint64_t dst, uint32_t size, bool copy, bool flush);
  Status post_flush_only(Group& g, ClientChain& ch);
  // Posts operation ch.next on ch's head QP: `before` (at most two WRs: a
  // gWRITE's data and flush), then the SEND of its message `msg` (fenced
  // behind them with `fence`), once the message hook saw it as `hooked`.
  Status send_message(Group& g, ClientChain& ch, uint8_t* msg, Primitive hooked, std::span<const nic::SendWr> before,
                      bool fence);

  // ---- client_complete.cc ----
  // Fails every outstanding operation of g (their callbacks run with
  // `status`) and marks g failed; the first failure wins.
  void fail(Group& g, const Status& status);
  void complete(Group& g, ClientChain& ch, const nic::WorkCompletion& wc);
  // Takes every completion of g's chains; returns how many.
  size_t poll_group(Group& g);
};

}  // namespace ferry::hyperloop
