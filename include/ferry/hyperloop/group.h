// Replication groups and their group memory primitives (HyperLoop, SIGCOMM'18
// §4.2): gWRITE, gCAS, gMEMCPY and gFLUSH over a chain of 1..7 replicas.
//
// GroupClient is the coordinator's API. Two systems implement it:
//  - HyperLoopClient (hyperloop.h): the replicas' NICs execute every
//    operation from pre-posted WQE chains; no replica CPU on the data path.
//  - NaiveClient (naive.h): the paper's Naive-RDMA baseline; replica CPU
//    threads receive each operation, apply it and forward it.
//
// Every group is a client host plus `replicas` replica hosts, each an
// emulated machine (its own NIC on the caller's Engine and its own
// persistence domain) with a registered memory region of `region_bytes`
// (persistent memory by default). Offsets are byte offsets into that region,
// the same on every replica.
//
// Semantics (Table 1 of the paper):
//  gwrite(gid, offset, size): replicates the client's bytes at
//    client_memory(gid)[offset, offset+size) to every replica at offset.
//  gcas(gid, offset, old, new, execute_map): on each replica whose bit is set
//    in execute_map, compare-and-swap the 8-byte word at offset; the result
//    map returns what each executing replica saw. A partly successful gCAS is
//    undone with gcas(offset, new, old, result.succeeded) (§4.2).
//  gmemcpy(gid, src, dst, size): each replica copies its own bytes.
//  gflush(gid): every operation of this group completed before the gflush was
//    submitted is durable on every replica when it completes. Each primitive
//    also takes `flush`: the interleaved form, where each replica makes the
//    operation durable before forwarding it down the chain.
//
// Ordering: operations of one primitive complete in submission order and are
// applied in that order on every replica. gWRITE, gCAS and gMEMCPY run on
// separate chains (as in the paper, one metadata region per primitive), so
// two operations of different primitives are unordered unless the first one
// completed before the second was submitted.
//
// Threads: a client is used by one thread at a time. Completion callbacks run
// inside poll() (and inside the synchronous calls, which poll).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "ferry/common/status.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"

namespace ferry::hyperloop {

constexpr uint32_t kMaxReplicas = 7;
using GroupId = uint32_t;

enum class Primitive : uint8_t { kWrite = 0, kCas, kMemcpy, kFlush };
std::string_view primitive_name(Primitive p);

struct GroupOptions {
  uint32_t replicas = 3;            // chain length N, 1..7
  size_t region_bytes = 1 << 20;    // per replica, and the client's own memory
  pm::Media media = pm::Media::kPm; // replica regions: PM (libpmem2-mapped file) or DRAM
  // Where PM backing files are created (and removed at destruction). Empty:
  // /dev/shm, the tmpfs the paper used to emulate battery-backed DRAM, else
  // $TMPDIR or /tmp.
  std::string pm_dir;
  pm::PlatformConfig platform;      // each replica host's platform (DDIO, eADR, NIC buffer)
  // Operations per ring lap (a power of two, 8..1024): receive ring depth of
  // every chain; the pre-posted rings hold this many operations.
  uint32_t ring_ops = 128;
  // Operations one primitive may have outstanding (1 .. ring_ops/4).
  uint32_t window = 16;
  // gFLUSH with the IBTA 1.5 FLUSH verb instead of the paper's 0-byte READ.
  bool flush_verb = false;
};

struct CasResult {
  uint8_t executed = 0;   // replicas that ran the CAS (the execute map)
  uint8_t succeeded = 0;  // executed replicas that swapped (they saw `old`)
  // The word each executed replica saw before the CAS (its result-map field);
  // 0 for replicas that did not execute.
  std::array<uint64_t, kMaxReplicas> original{};
};

struct OpResult {
  Status status;
  Primitive primitive = Primitive::kWrite;
  uint64_t seq = 0;  // submission number within the group, from 0
  CasResult cas;     // gCAS only
};
using Callback = std::function<void(const OpResult&)>;

struct ClientOptions {
  // A synchronous call or drain() gives up after this long (kTimedOut);
  // simulated time when the engine runs on a FakeClock.
  uint64_t op_timeout_ns = 10'000'000'000ULL;
  // Pin the replicas' application threads to this CPU (-1: leave them where
  // they start). Benchmarks put them, and the load, on one CPU.
  int replica_cpu = -1;
};

// Bytes a group's hosts sent each other, from the NICs' per-QP counters
// (nic::QpTraffic), split by what they carry. Loopback QPs (both ends on one
// NIC) never touch the network: their packets are counted apart.
struct WireBytes {
  uint64_t payload = 0;   // the operations' data (gWRITE bytes moved between hosts)
  uint64_t metadata = 0;  // operation descriptors / headers, acknowledgement payloads (gCAS result maps)
  uint64_t rearm = 0;     // WQE images written into replicas' rings to re-arm them
  uint64_t headers = 0;   // transport headers of every packet, ACKs and READ responses included
  uint64_t packets = 0;   // packets between hosts
  uint64_t loopback_packets = 0;  // NIC-internal packets (loopback QPs): no wire bytes
  uint64_t total() const { return payload + metadata + rearm + headers; }
  WireBytes operator-(const WireBytes& o) const {
    return {payload - o.payload, metadata - o.metadata, rearm - o.rearm, headers - o.headers, packets - o.packets,
            loopback_packets - o.loopback_packets};
  }
};

// What a replica host holds, for the application and for verification.
struct ReplicaView {
  pm::PersistenceDomain* domain = nullptr;  // its persistence domain (power_fail, images)
  pm::Region* region = nullptr;             // the group's region on that replica
};

class GroupClient {
 public:
  virtual ~GroupClient();
  GroupClient(const GroupClient&) = delete;
  GroupClient& operator=(const GroupClient&) = delete;

  // "hyperloop", "naive-event" or "naive-poll".
  virtual std::string_view system() const = 0;

  // Builds a group: its replica hosts, their regions and whatever the system
  // pre-posts. kInvalidArgument names the bad option.
  virtual Result<GroupId> create_group(const GroupOptions& options) = 0;
  // The client's own memory of the group (the source of gwrite).
  virtual Result<std::span<uint8_t>> client_memory(GroupId gid) = 0;
  virtual Result<ReplicaView> replica(GroupId gid, uint32_t index) = 0;
  virtual Result<GroupOptions> group_options(GroupId gid) const = 0;

  // ---- asynchronous forms ----
  // Validate, then submit (after waiting for room in the window, polling
  // meanwhile). `done` runs once, inside poll(), when the operation
  // completed or failed. Errors returned here mean nothing was submitted:
  // kNotFound (unknown group), kOutOfRange (outside the region),
  // kInvalidArgument (size 0, misaligned CAS, bad execute map),
  // kFailedPrecondition (the group failed earlier), kTimedOut (no room).
  virtual Status gwrite_async(GroupId gid, uint64_t offset, uint32_t size, bool flush, Callback done) = 0;
  virtual Status gcas_async(GroupId gid, uint64_t offset, uint64_t old_value, uint64_t new_value,
                            uint8_t execute_map, bool flush, Callback done) = 0;
  virtual Status gmemcpy_async(GroupId gid, uint64_t src_offset, uint64_t dst_offset, uint32_t size, bool flush,
                               Callback done) = 0;
  virtual Status gflush_async(GroupId gid, Callback done) = 0;
  // On a manual engine, steps it once; then polls completions, runs the
  // callbacks of finished operations and returns how many ran. Any thread
  // that owns the client; a daemon-attached client only polls.
  size_t poll();
  // Operations of gid submitted and not yet completed.
  virtual Result<uint32_t> outstanding(GroupId gid) const = 0;

  // ---- synchronous forms: submit, then poll until done ----
  Status gwrite(GroupId gid, uint64_t offset, uint32_t size, bool flush = false);
  Result<CasResult> gcas(GroupId gid, uint64_t offset, uint64_t old_value, uint64_t new_value, uint8_t execute_map,
                         bool flush = false);
  Status gmemcpy(GroupId gid, uint64_t src_offset, uint64_t dst_offset, uint32_t size, bool flush = false);
  Status gflush(GroupId gid);
  // Waits until gid has nothing outstanding.
  Status drain(GroupId gid);

  // CPU time consumed by the replicas' application threads since creation
  // (HyperLoop's only do setup; Naive's run every operation).
  virtual uint64_t replica_cpu_ns() const = 0;
  // What gid's hosts have sent each other since creation (setup included;
  // take differences). A control command per QP: not for the data path.
  virtual Result<WireBytes> wire_bytes(GroupId gid) const = 0;

  // The Engine that runs the client's NIC in this process; nullptr for a
  // client on a daemon-attached NIC (HyperLoopClient::create(nic::Nic&)).
  nic::Engine* engine() const { return engine_; }
  const ClientOptions& client_options() const { return options_; }

 protected:
  GroupClient(nic::Engine* engine, const ClientOptions& options) : engine_(engine), options_(options) {}
  // Polls the client's completion queues and runs callbacks (no stepping).
  virtual size_t poll_completions() = 0;
  // Polls completions (driving a manual engine, advancing a FakeClock when
  // idle) until pred() holds; kTimedOut after op_timeout_ns.
  Status wait_until(const std::function<bool()>& pred);

 private:
  // Submits one operation through `submit` and waits for its callback: the
  // synchronous forms.
  Result<OpResult> run_sync(const std::function<Status(Callback)>& submit);

  nic::Engine* engine_;
  ClientOptions options_;
};

namespace detail {
// What a QP's transmitted bytes count as (WireBytes): a data-path requester
// (WRITE payload is data, SEND payload is metadata), an acknowledging
// requester (the tail's WRITE_WITH_IMM: metadata), a re-arming requester
// (WRITE payload is WQE images), a responder (headers, READ response data),
// or a loopback QP (no wire bytes).
enum class QpRole : uint8_t { kData, kAcknowledge, kRearm, kResponder, kLoopback };
void add_traffic(WireBytes& w, const nic::QueuePair& qp, QpRole role);
}  // namespace detail

// Checks an offset range against the region: kOutOfRange with the numbers.
Status check_range(const char* what, uint64_t offset, uint64_t size, size_t region_bytes);
// gcas: 8-byte aligned word inside the region (kInvalidArgument /
// kOutOfRange); execute_map names only replicas of the group.
Status check_cas_args(uint64_t offset, uint8_t execute_map, const GroupOptions& options);
// gmemcpy: size >= 1, both ranges inside the region, and not overlapping
// (the NICs copy in MTU-sized pieces, like memcpy, not memmove).
Status check_memcpy_args(uint64_t src_offset, uint64_t dst_offset, uint32_t size, const GroupOptions& options);
// gwrite: size >= 1 and inside the region.
Status check_write_args(uint64_t offset, uint32_t size, const GroupOptions& options);
// Checks GroupOptions (shared by both systems).
Status validate_group_options(const GroupOptions& options);

}  // namespace ferry::hyperloop
