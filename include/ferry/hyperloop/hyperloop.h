// HyperLoop (SIGCOMM'18 §4): group primitives executed by the replicas' NICs.
//
// At group creation each replica pre-posts, for every primitive, a chain of
// work requests that its NIC runs with no CPU: a RECV from upstream whose
// scatter list rewrites the pre-posted WQEs of the operation (addresses,
// lengths, opcodes: remote work-request manipulation), a WAIT on that RECV's
// completion queue, the operation's WQEs (forwarding WRITE, loopback CAS or
// copy, 0-byte READ for gFLUSH), the forwarding SEND, and the enables that
// hand the next operation's WQEs to the NIC. The tail acknowledges the client
// with WRITE_WITH_IMM. Each control block ends by re-arming itself for the
// next lap with loopback FETCH_AND_ADDs on its WQEs' index fields, so after
// setup no replica CPU does anything and no host writes into another's rings.
// docs/hyperloop.md specifies the metadata and every chain.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "ferry/hyperloop/group.h"

namespace ferry::cm {
class Listener;
}

namespace ferry::hyperloop {

// A group whose replicas run in other processes or hosts, each a Replica
// (replica.h) against its host's NIC daemon, wired by the connection manager
// (docs/hyperloop.md, "Across processes").
struct RemoteGroupOptions {
  std::string group = "g0";   // the name the replicas were given
  GroupOptions options;       // the same as every replica's (media, pm_dir, platform unused)
  std::string head;           // replica 0's CM listener, "host:port"
  // The client's own CM listener: the tail connects to it for the
  // acknowledgements (services "hyperloop.<group>.<chain>.ack", served
  // until the group is connected). Must outlive connect_group.
  cm::Listener* listener = nullptr;
  // How long to wait for the chain to come up (replicas start in any order).
  uint32_t timeout_ms = 30000;
};

struct HyperLoopStats {
  uint64_t ops_completed = 0;
  uint64_t window_waits = 0;      // submissions that waited for room in the window
};

// Where one replica's work-queue rings are and how they are protected, for
// diagnostics and the safety tests (docs/hyperloop.md, "Safety"). The rings
// take no remote WRITE at all: RECV scatter lists rewrite the down and
// loopback WQEs locally; the control rings take remote atomics only, which
// only the replica's own loopback control pair is allowed to issue.
struct ReplicaRings {
  nic::Nic* nic = nullptr;              // the replica's NIC
  nic::ProtectionDomain* pd = nullptr;  // the group's protection domain there
  uint64_t addr = 0;                    // every ring, forward buffer and scratch of the replica
  size_t bytes = 0;
  uint32_t key = 0;                     // its memory region: local write only
  uint32_t access = 0;
  struct Chain {
    uint64_t down_ring = 0;  // the down QP's send ring (rewritten by RECV scatter)
    uint64_t ctl_ring = 0;   // the control ring (re-armed by loopback atomics)
    size_t ctl_bytes = 0;
    uint32_t ctl_key = 0;    // its memory region: local write, remote atomic
    uint32_t ctl_access = 0;
    uint32_t down_qpn = 0;   // the managed queues, by number
    uint32_t ctl_qpn = 0;
  };
  std::array<Chain, 3> chains;  // gWRITE, gCAS, gMEMCPY
};

// What replace_replica did (docs/hyperloop-storage.md, "Chain failure and recovery").
struct ReplacementReport {
  uint32_t removed = 0;        // the replica that left (its index before)
  uint32_t source = 0;         // the neighbour the new tail copied (its index after)
  uint64_t bytes_copied = 0;   // by the new member's NIC, with RDMA READs
  uint64_t aborted_ops = 0;    // operations of the old data path failed with kUnavailable
};

class HyperLoopClient final : public GroupClient {
 public:
  // A client whose groups are built in process: its own host and every
  // replica host are NICs of `engine` (tests, simulation, benchmarks).
  static Result<std::unique_ptr<HyperLoopClient>> create(nic::Engine& engine, const ClientOptions& options = {});
  // A client on `nic` (daemon-attached, or of an Engine) whose groups are
  // connected to replicas in other processes (connect_group).
  static Result<std::unique_ptr<HyperLoopClient>> create(nic::Nic& nic, const ClientOptions& options = {});
  ~HyperLoopClient() override;

  // Connects to a chain of Replicas: serves the acknowledgement services on
  // options.listener, then connects to replica 0, retrying while it is not
  // up or not ready (every replica is ready once its downstream is), until
  // options.timeout_ms. The group then works as one built by create_group,
  // except that replica(), replica_rings() are kFailedPrecondition (their
  // memory is in other processes), wire_bytes() counts only the client's
  // QPs and replica_cpu_ns() is 0 (measure the replica processes).
  // Errors: kInvalidArgument (bad options, or a replica configured
  // differently: the message names the option), kTimedOut/kUnavailable
  // (the chain did not come up; the message names the address), those of
  // the NIC.
  Result<GroupId> connect_group(const RemoteGroupOptions& options);
  // Moves group `gid` (connected across processes) to another chain of
  // Replicas -- the chain rebuilt after a member failed, whose group name
  // carries the new view's version (so that no member of the old chain can
  // connect to it) -- keeping its GroupId and its client memory: every
  // outstanding operation fails with kUnavailable, the client-side queues
  // and buffers are destroyed, and the group connects as connect_group
  // does. options.options.region_bytes must be the group's. On an error the
  // group stays failed (operations return kFailedPrecondition) until a
  // reconnect_group succeeds. kFailedPrecondition for an in-process group.
  Status reconnect_group(GroupId gid, const RemoteGroupOptions& options);

  std::string_view system() const override { return "hyperloop"; }
  Result<GroupId> create_group(const GroupOptions& options) override;
  Result<std::span<uint8_t>> client_memory(GroupId gid) override;
  Result<ReplicaView> replica(GroupId gid, uint32_t index) override;
  Result<GroupOptions> group_options(GroupId gid) const override;
  Status gwrite_async(GroupId gid, uint64_t offset, uint32_t size, bool flush, Callback done) override;
  Status gcas_async(GroupId gid, uint64_t offset, uint64_t old_value, uint64_t new_value, uint8_t execute_map,
                    bool flush, Callback done) override;
  Status gmemcpy_async(GroupId gid, uint64_t src_offset, uint64_t dst_offset, uint32_t size, bool flush,
                       Callback done) override;
  Status gflush_async(GroupId gid, Callback done) override;
  Result<uint32_t> outstanding(GroupId gid) const override;
  uint64_t replica_cpu_ns() const override;
  Result<WireBytes> wire_bytes(GroupId gid) const override;

  // ---- failures and chain reconfiguration (groups built in process) ----
  // Replica `index`'s process dies (a fault, for tests and the demo): its
  // application thread and every queue and ring it created are destroyed, as
  // the kernel destroys a dead process's QPs; its host and region remain (a PM
  // file outlives the process; power_fail it through replica() for the power
  // failure mode). Operations through it stop completing: the group times
  // out (op_timeout_ns) or fails.
  Status kill_replica(GroupId gid, uint32_t index);
  // The data-path half of chain recovery: replica `failed` (dead or alive)
  // leaves the chain and a new replica host joins at the tail. First every
  // outstanding operation fails (kUnavailable: the chain is paused); the new
  // member's NIC copies the whole region (log and database) from its
  // upstream neighbour, the last survivor, with RDMA READs and persists it;
  // then every chain is rebuilt over the survivors in their order plus the
  // new tail, and the group is usable again (indices shift down past
  // `failed`). What the application must do on top (reconcile the logs,
  // re-execute, release locks) is TxnClient::recover's. kFailedPrecondition
  // for a group of one replica or one connected across processes. If the
  // copy fails the group stays as it was (failed; retry); if the rebuild
  // itself fails, the group is gone (kNotFound from then on).
  Result<ReplacementReport> replace_replica(GroupId gid, uint32_t failed);
  // Fault injection: group `gid`'s whole data path goes down where it
  // stands -- the client's process died, or the replicas' hosts lost power
  // (then power_fail their domains through replica() as well). Every
  // outstanding operation fails with kUnavailable; every queue, ring and
  // buffer of the client and of every replica is destroyed, as the kernel
  // destroys a dead process's QPs; what a NIC had not finished stays as far
  // as it got (a gWRITE may be whole on replica 0 and absent downstream).
  // The hosts, their regions and the client's memory stay. Until
  // restart_group, operations fail with kFailedPrecondition (a crashed
  // client's leftover calls change nothing). May run inside a poll hook.
  // kFailedPrecondition for a group connected across processes.
  Status stop_group(GroupId gid);
  // Builds group `gid`'s data path again over the same members in the same
  // order, with their regions as they are (the client that took the dead
  // one's place, or the replicas back from a power failure, reconnect);
  // stops it first if it runs. What the application must do on top
  // (reconcile the logs, release the locks) is TxnClient's resume and
  // recover. If the rebuild fails the group is gone (kNotFound from then on).
  // Not inside a poll hook.
  Status restart_group(GroupId gid);

  // Fault injection at arbitrary points of an operation (tests): `hook`
  // runs at the start of every poll, i.e. between engine steps while a
  // synchronous call waits. It may kill replicas; it must not submit.
  void set_poll_hook(std::function<void()> hook);
  // Fault injection (tests): `hook` sees the message of every operation
  // (docs/hyperloop.md, "Metadata": the descriptors of replicas 0..N-1, and
  // gCAS's result map) after the client built it and before it is posted,
  // and may change its bytes, as a buggy or hostile client would; the
  // primitive is kFlush for a gflush's flush-only operations. What the
  // replicas' NICs then do is what the safety tests check.
  using MessageHook = std::function<void(Primitive, std::span<uint8_t>)>;
  void set_message_hook(MessageHook hook);

  HyperLoopStats stats() const;
  Result<ReplicaRings> replica_rings(GroupId gid, uint32_t index) const;

  struct Impl;

 protected:
  size_t poll_completions() override;

 private:
  HyperLoopClient(nic::Engine* engine, const ClientOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::hyperloop
