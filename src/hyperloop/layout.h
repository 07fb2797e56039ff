// HyperLoop's in-memory contracts (docs/hyperloop.md): the per-replica
// metadata records, the message each replica receives, the shape of every
// pre-posted chain, the control (WAIT/ENABLE) block of one operation, and the
// RECV scatter list that rewrites an operation's WQEs. Pure functions: the
// replica's setup and the client's message encoding both build from them, so
// the two sides cannot disagree.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "ferry/nic/types.h"
#include "ferry/nic/wqe.h"

namespace ferry::hyperloop::detail {

// One chain per primitive (gFLUSH rides on them); each has its own queues,
// rings and metadata, as in the paper's "separate metadata regions".
enum class Chain : uint8_t { kWrite = 0, kCas = 1, kMemcpy = 2 };
constexpr int kChainCount = 3;
const char* chain_name(Chain c);

constexpr uint32_t kDescBytes = 32;
constexpr uint32_t kWqeBytes = 64;  // send WQE stride with one SGE (docs/wqe-format.md)

// Metadata for one replica, gWRITE (forwarding) and gMEMCPY (local copy).
struct CopyDesc {
  uint8_t op;            // opcode byte of the data WQE: RDMA_WRITE or NOP
  uint8_t flush_op;      // opcode byte of the flush WQE: RDMA_READ / FLUSH, or NOP
  uint16_t reserved0;
  uint32_t imm;          // operation number (the tail's WRITE_WITH_IMM immediate)
  uint64_t remote_addr;  // gWRITE: next replica's address; gMEMCPY: own destination
  uint64_t local_addr;   // own source address
  uint32_t length;
  uint32_t reserved1;
};
// Metadata for one replica, gCAS.
struct CasDesc {
  uint8_t op;        // ATOMIC_CMP_AND_SWP, or NOP when the execute-map bit is clear
  uint8_t flush_op;  // RDMA_READ / FLUSH, or NOP
  uint16_t reserved0;
  uint32_t imm;
  uint64_t target;   // own address of the word
  uint64_t compare;
  uint64_t swap;
};
static_assert(sizeof(CopyDesc) == kDescBytes && sizeof(CasDesc) == kDescBytes);

// Byte offsets of the WQE fields the scatter lists rewrite.
constexpr uint32_t kOpcodeField = 0;                          // u8
constexpr uint32_t kImmField = 4;                             // u32
constexpr uint32_t kRemoteAddrField = nic::kWqeRemoteOffset;  // u64
constexpr uint32_t kCompareSwapField = nic::kWqeAtomicOffset; // 2 x u64
constexpr uint32_t kSgeAddrLenField = nic::kWqeDataOffset;    // u64 addr + u32 length

// The opcodes each rewritten opcode field may hold (docs/hyperloop.md,
// "Which opcodes a slot may hold"): a descriptor's `op` turns its data WQE
// on or off (gWRITE/gMEMCPY: RDMA_WRITE or NOP; gCAS: CMP_AND_SWP or NOP),
// its `flush_op` the flush WQE (the group's flush opcode -- 0-byte READ, or
// FLUSH with flush_verb -- or NOP). The client builds only these. Nothing
// on a replica checks them: the RECV scatter writes the byte into the WQE
// and the NIC runs it, with no replica software in between. What a client
// that sends others cannot do is the replica setup's to enforce through the
// NIC: its data queues lack the cross-channel capability (no WAIT, no
// ENABLE), its region grants no remote READ, its links no atomics.
enum class OpcodeField : uint8_t { kData, kFlush };
bool opcode_allowed(Chain c, OpcodeField field, bool flush_verb, uint8_t opcode);

struct ChainShape {
  uint32_t down_per_op;  // WQEs per operation on the down QP (a power of two)
  uint32_t loop_per_op;  // on the loopback QP (0: no loopback)
  uint32_t ctl_waits_enables;  // WAIT / ENABLE WQEs in an operation's control block
  uint32_t ctl_per_op;   // control-ring slots per operation (a power of two): the WAITs and
                         // ENABLEs and one re-arming FETCH_AND_ADD for each
};

// The control queue and every receive queue are enabled once, at boot, this
// far: the control queue paces itself with its WAITs (and the NIC never starts
// a slot whose previous WQE, a re-arm included, has not completed), and a
// receive slot is reused lap after lap under the client's window.
constexpr uint64_t kEnabledForever = uint64_t{1} << 62;
ChainShape chain_shape(Chain c, bool tail);

// Bytes replica `i` of `n` receives for one operation: its descriptor and
// those of the replicas after it, then (gCAS) the result map of all n.
uint32_t message_bytes(Chain c, uint32_t n, uint32_t i);
// Offset of replica i's result field inside its forward buffer (gCAS).
uint32_t result_offset_in_forward(uint32_t n, uint32_t i);
// Forward-buffer slot size for a chain (enough for any replica's message).
uint32_t forward_stride(Chain c, uint32_t n);
// Depth of the control ring: one lap of `ring_ops` operations
// (ctl_per_op * ring_ops slots, a power of two). Operation k's block always
// occupies the same slots as operation k + ring_ops's.
uint32_t ctl_depth(Chain c, uint32_t ring_ops);

// One control WQE, independent of how it is emitted.
//   WAIT / SEND_ENABLE / RECV_ENABLE: `target` is the CQ or queue, `index`
//     the absolute count.
//   FETCH_AND_ADD (the self re-arm): a loopback atomic that adds `index` to
//     the index field of the WQE in slot `slot` of this same block, turning
//     it into operation k + ring_ops's WQE for the next lap.
enum class CtlTarget : uint8_t { kRecvCq, kLoopCq, kDown, kLoop, kCtlRing, kNone };
struct CtlWqe {
  nic::WrOpcode opcode = nic::WrOpcode::kNop;
  CtlTarget target = CtlTarget::kNone;
  uint64_t index = 0;
  uint32_t slot = 0;  // FETCH_AND_ADD: the block slot it re-arms
};
constexpr uint32_t kMaxCtlPerOp = 8;
// The control block of operation k (0-based) of a chain with `ring_ops`
// receive slots: WAIT for its RECV, enable the loopback WQEs and wait for
// them (gCAS, gMEMCPY), enable the down WQEs, then re-arm each of those for
// operation k + ring_ops (FETCH_AND_ADD of the lap's increment into its index
// field). The block's WQEs are the same on every lap but for the indices the
// re-arm advances, so the ring runs forever without a post or a remote write.
std::array<CtlWqe, kMaxCtlPerOp> ctl_block(Chain c, bool tail, uint32_t ring_ops, uint64_t k);

// Where the RECV of a given receive slot scatters the message (addresses are
// host addresses inside the replica's WQE region, whose lkey the caller adds).
struct ScatterPlan {
  std::array<nic::Sge, 8> sges{};
  uint32_t count = 0;
  uint32_t total = 0;  // bytes, must equal message_bytes()
};
struct ScatterTargets {
  uint64_t down_ring = 0;  // address of the down QP's send ring
  uint64_t loop_ring = 0;  // address of the loopback QP's send ring (gCAS, gMEMCPY)
  uint64_t forward = 0;    // address of this slot's forward buffer
  uint64_t discard = 0;    // scratch for bytes nobody needs (>= 32 bytes)
  uint32_t ring_ops = 0;
};
ScatterPlan scatter_plan(Chain c, uint32_t n, uint32_t i, uint32_t slot, const ScatterTargets& t);

}  // namespace ferry::hyperloop::detail
