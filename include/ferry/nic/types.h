// Verbs vocabulary of the software RNIC: opcodes, completion statuses, work
// requests and object attributes. Names follow libibverbs (ibv_wr_opcode,
// ibv_wc_status, ibv_qp_attr, ...) so that a verbs programmer can read them.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ferry/common/status.h"

namespace ferry::nic {

class CompletionQueue;
class CompletionChannel;
class QueuePair;
class SharedReceiveQueue;

// Memory-region and QP access flags (ibv_access_flags).
enum Access : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
  kAccessRemoteAtomic = 1u << 3,
  // IBTA 1.5 FLUSH, per placement type (IBV_ACCESS_FLUSH_GLOBAL / _PERSISTENT).
  kAccessFlushGlobal = 1u << 4,
  kAccessFlushPersistent = 1u << 5,
};
constexpr uint32_t kAccessAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic |
                                kAccessFlushGlobal | kAccessFlushPersistent;

// RC queue-pair states (ibv_qp_state; SQD/SQE are not modeled).
enum class QpState : uint8_t { kReset = 0, kInit, kRtr, kRts, kError };
std::string_view qp_state_name(QpState s);

// Send-queue work request opcodes. The numeric values are the `opcode` byte of
// the in-memory WQE (docs/wqe-format.md). 0 is no opcode: it is what a ring
// slot that never held a published WQE (zeroed memory) reads as, so the NIC
// can tell an empty slot from a WQE and never executes one.
enum class WrOpcode : uint8_t {
  kRdmaWrite = 1,
  kRdmaWriteWithImm = 2,
  kSend = 3,
  kSendWithImm = 4,
  kRdmaRead = 5,
  kAtomicCmpAndSwp = 6,
  kAtomicFetchAndAdd = 7,
  kNop = 8,
  // Cross-channel (CORE-Direct) requests; local to the NIC, no network traffic.
  kWait = 9,         // stall this queue until cq.completions_total() >= index
  kSendEnable = 10,  // let a managed send queue execute WQEs below index
  kRecvEnable = 11,  // let a managed receive queue expose WQEs below index
  // IBTA 1.5 memory placement (docs/persistence.md).
  kFlush = 12,
};
constexpr uint8_t kWrOpcodeEmpty = 0;  // the opcode byte of an empty ring slot
constexpr uint8_t kWrOpcodeFirst = 1;
constexpr uint8_t kWrOpcodeEnd = 13;   // one past the last opcode
constexpr bool valid_wr_opcode(uint8_t v) { return v >= kWrOpcodeFirst && v < kWrOpcodeEnd; }
std::string_view wr_opcode_name(WrOpcode op);

// Send flags (ibv_send_flags).
enum SendFlags : uint8_t {
  kSendSignaled = 1u << 0,   // produce a CQE on success
  kSendFence = 1u << 1,      // start only after prior READ/ATOMIC WRs completed
  kSendSolicited = 1u << 2,  // set the solicited-event bit on the message
  kSendInline = 1u << 3,     // copy the payload into the WQE at post time
};

// Work-completion opcodes (ibv_wc_opcode).
enum class WcOpcode : uint8_t {
  kSend = 0,
  kRdmaWrite,
  kRdmaRead,
  kCompSwap,
  kFetchAdd,
  kNop,
  kWait,
  kSendEnable,
  kRecvEnable,
  kFlush,
  kRecv = 128,
  kRecvRdmaWithImm,
};
std::string_view wc_opcode_name(WcOpcode op);
// The completion opcode a send WR of this opcode reports.
WcOpcode wc_opcode_for(WrOpcode op);
// True if a message of this opcode carries the WR's data (SEND, WRITE and
// their _WITH_IMM forms): the only opcodes that may be posted inline.
constexpr bool opcode_carries_payload(WrOpcode op) {
  return op == WrOpcode::kSend || op == WrOpcode::kSendWithImm || op == WrOpcode::kRdmaWrite ||
         op == WrOpcode::kRdmaWriteWithImm;
}

// Work-completion statuses (ibv_wc_status subset).
enum class WcStatus : uint8_t {
  kSuccess = 0,
  kLocLenErr,         // local length error (message larger than the RECV buffers)
  kLocQpOpErr,        // malformed WQE (unknown opcode, too many SGEs, ...)
  kLocProtErr,        // local SGE failed lkey/bounds/access checks
  kWrFlushErr,        // QP in ERROR: request flushed without executing
  kRemInvReqErr,      // responder NAKed: invalid request (length, alignment, opcode)
  kRemAccessErr,      // responder NAKed: rkey/bounds/permission violation
  kRemOpErr,          // responder NAKed: it failed to complete the operation
  kRetryExcErr,       // transport retry counter exceeded (no ACK)
  kRnrRetryExcErr,    // RNR retry counter exceeded (no RECV at responder)
  kGeneralErr,
};
std::string_view wc_status_name(WcStatus s);

// One completion (ibv_wc).
struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  bool has_imm = false;
  bool solicited = false;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;
  uint32_t qp_num = 0;      // the local QP this completion belongs to
  uint32_t src_qp = 0;      // remote QP number that sent the message (receives)
  uint32_t wqe_index = 0;   // low 16 bits of the absolute WQE index in its queue
  // Multi-packet SRQ receives: the message starts at stride `stride_index`
  // of buffer `wqe_index` (wr_id is the buffer's). `mp_buffer_done`: no more
  // messages will be placed in that buffer (it may still have messages in
  // flight from other QPs); `mp_filler`: no message, only that news.
  uint16_t stride_index = 0;
  // ... and took `mp_strides_consumed` strides: the next message of that
  // buffer starts at stride_index + mp_strides_consumed (a filler: the
  // strides left unused at the buffer's end).
  uint16_t mp_strides_consumed = 0;
  bool mp_buffer_done = false;
  bool mp_filler = false;
};

// Scatter/gather element (ibv_sge).
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// Send work request (ibv_send_wr). The sg_list span only needs to live for the
// duration of the post call.
struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint8_t flags = 0;  // SendFlags
  std::span<const Sge> sg_list;
  uint32_t imm_data = 0;
  // RDMA WRITE/READ/FLUSH target, and ATOMIC target.
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  // ATOMIC operands: compare (CMP_AND_SWP) or add (FETCH_AND_ADD), and swap.
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // WAIT: the CQ and the absolute completion count to wait for.
  const CompletionQueue* wait_cq = nullptr;
  // SEND_ENABLE / RECV_ENABLE: the managed queue and the absolute index.
  const QueuePair* enable_qp = nullptr;
  // WAIT index or ENABLE index (absolute, since creation).
  uint64_t index = 0;
  // FLUSH: bytes to flush from remote_addr (carried in the WQE's atomic
  // segment), and the placement type: false = global visibility, true =
  // persistence.
  uint32_t flush_length = 0;
  bool flush_persistent = true;
  // FLUSH selectivity: false = the range [remote_addr, +flush_length), true =
  // the whole memory region of rkey (no range check).
  bool flush_whole_mr = false;
};

// Receive work request (ibv_recv_wr).
struct RecvWr {
  uint64_t wr_id = 0;
  std::span<const Sge> sg_list;
};

struct QpCapabilities {
  uint32_t max_send_wr = 128;     // rounded up to a power of two
  uint32_t max_recv_wr = 128;     // rounded up to a power of two
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;
};

struct QpInitAttr {
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  SharedReceiveQueue* srq = nullptr;  // receives come from the SRQ when set
  QpCapabilities cap;
  bool sq_sig_all = false;            // every send WR produces a CQE
  // Managed queues (mlx5 cd_slave): execute only up to the index that
  // SEND_ENABLE / RECV_ENABLE requests on another queue of the same NIC set.
  bool managed_send = false;
  bool managed_recv = false;
  // May issue cross-channel requests (WAIT, SEND_ENABLE, RECV_ENABLE), as a
  // QP created with mlx5's IBV_EXP_QP_CREATE_CROSS_CHANNEL (cd_master). A QP
  // without it is refused them at post (kInvalidArgument), and a WQE
  // rewritten into one in its ring completes with LOC_QP_OP_ERR when the NIC
  // starts it: a peer that rewrites a data queue's WQEs (HyperLoop) cannot
  // turn one into a WAIT or an ENABLE.
  bool cross_channel = false;
  // Optional caller-provided ring memory (e.g. a persistent-memory region);
  // when empty the NIC allocates page-aligned DRAM. Must be 64-byte aligned and
  // at least the ring size (see QueuePair::send_ring()).
  std::span<uint8_t> send_ring_memory;
  std::span<uint8_t> recv_ring_memory;
};

// QP attribute mask for QueuePair::modify (ibv_qp_attr_mask).
enum QpAttrMask : uint32_t {
  kQpState = 1u << 0,
  kQpAccessFlags = 1u << 1,
  kQpPathMtu = 1u << 2,
  kQpDest = 1u << 3,            // dest_nic + dest_qp_num (the address vector)
  kQpRqPsn = 1u << 4,
  kQpSqPsn = 1u << 5,
  kQpMaxDestRdAtomic = 1u << 6,
  kQpMinRnrTimer = 1u << 7,
  kQpTimeout = 1u << 8,
  kQpRetryCnt = 1u << 9,
  kQpRnrRetry = 1u << 10,
  kQpMaxRdAtomic = 1u << 11,
};

struct QpAttr {
  QpState state = QpState::kReset;
  uint32_t access_flags = 0;        // remote access the QP allows (Access)
  uint32_t path_mtu = 4096;         // 256, 512, 1024, 2048 or 4096
  uint32_t dest_nic = 0;            // address of the remote NIC
  uint32_t dest_qp_num = 0;
  uint32_t rq_psn = 0;              // 24-bit
  uint32_t sq_psn = 0;              // 24-bit
  uint8_t max_dest_rd_atomic = 16;  // READ/ATOMIC the responder keeps for replay
  uint8_t min_rnr_timer = 1;        // IBTA 5-bit code: 1 = 10 us ... 0 = 655 ms
  uint8_t timeout = 14;             // local ACK timeout 4.096 us * 2^timeout; 0 = infinite
  uint8_t retry_cnt = 7;            // 0..7 transport retries
  uint8_t rnr_retry = 7;            // 0..7 RNR retries; 7 = infinite
  uint8_t max_rd_atomic = 16;       // READ/ATOMIC this QP keeps outstanding
};

struct CqInitAttr {
  uint32_t cqe = 256;               // capacity, rounded up to a power of two
  // Count completions only: stores no CQE, never overruns. For queues nobody
  // polls, whose completions only feed WAIT requests.
  bool count_only = false;
  CompletionChannel* channel = nullptr;  // where armed events are delivered
};

struct SrqInitAttr {
  uint32_t max_wr = 256;           // rounded up to a power of two
  uint32_t max_sge = 1;
  uint32_t srq_limit = 0;          // armed limit; 0 = not armed
  std::span<uint8_t> ring_memory;  // optional, as for QPs
  // Multi-packet (striding) SRQ, mlx5's striding RQ (docs/wqe-format.md):
  // every posted RECV is one buffer of `mp_strides` strides of
  // `mp_stride_bytes` bytes (powers of two), and messages land in it back to
  // back, each at the next stride boundary. 0 = an ordinary SRQ; at most 32768.
  uint32_t mp_strides = 0;
  uint32_t mp_stride_bytes = 64;
  // The largest message a multi-packet SEND may carry: its first packet does
  // not say its length, so it is placed only where this much still fits.
  // 0 = one whole buffer.
  uint32_t mp_max_message_bytes = 0;
};

// Asynchronous events (ibv_async_event subset).
enum class AsyncEventType : uint8_t {
  kCqError,           // CQ overrun; the CQ and its QPs are in error
  kQpFatal,           // QP moved to ERROR because of a CQ error
  kSrqLimitReached,   // SRQ WQE count dropped below the armed limit (disarms)
  kQpLastWqeReached,  // SRQ-attached QP in ERROR will consume no more WQEs
  kDeviceFatal,       // the device is gone (its NIC daemon died); object = 0
};
std::string_view async_event_name(AsyncEventType t);

// What one QP has transmitted, by packet kind: requests it sent as a
// requester, responses it sent as a responder, retransmissions included.
// Header bytes are the transport headers of docs/wire-format.md (BTH and
// extension headers); RoCEv2 adds Ethernet, IP, UDP and ICRC per packet.
enum class PacketKind : uint8_t {
  kSend = 0,      // SEND_* (with or without immediate)
  kWrite,         // RDMA_WRITE_* (with or without immediate)
  kReadRequest,   // READ_REQUEST and FLUSH
  kReadResponse,  // READ_RESPONSE_* (also a FLUSH's answer)
  kAtomic,        // COMPARE_SWAP, FETCH_ADD, ATOMIC_ACKNOWLEDGE
  kAck,           // ACKNOWLEDGE: ACKs and NAKs
};
constexpr int kPacketKinds = 6;
struct QpTraffic {
  uint64_t packets[kPacketKinds] = {};
  uint64_t header_bytes[kPacketKinds] = {};
  uint64_t payload_bytes[kPacketKinds] = {};
  uint64_t total_packets() const;
  uint64_t total_bytes() const;  // headers and payload
};

struct AsyncEvent {
  AsyncEventType type;
  uint32_t number;  // CQ, QP or SRQ number
};

// The IANA-registered UDP destination port of RoCEv2 (rxe listens on it).
constexpr uint16_t kRoceV2UdpPort = 4791;

// A global identifier (IBTA GID, 16 bytes, network byte order), the address
// an RoCE peer is known by. A UDP-attached NIC's GID is the IPv4-mapped IPv6
// address of its bind address (::ffff:a.b.c.d), as rxe derives GIDs from IP
// addresses. An in-process NIC has no IP address; its synthetic GID is the
// link-local one rxe would derive (EUI-64) from the locally administered MAC
// 02:00:00:xx:yy:zz, where xx:yy:zz is its fabric address:
// fe80::ff:fe<xx>:<yyzz> (docs/wire-format.md, "RoCEv2 over UDP").
struct Gid {
  std::array<uint8_t, 16> raw{};

  static Gid from_ipv4(uint32_t ipv4);             // ipv4 in host byte order
  static Gid in_process(uint32_t fabric_address);  // the synthetic GID above
  bool is_ipv4_mapped() const;
  uint32_t ipv4() const;  // host byte order; meaningful only if is_ipv4_mapped()
  // RFC 5952 text ("::ffff:127.0.0.1", "fe80::ff:fe00:1").
  std::string to_string() const;
  // Accepts IPv6 text (an IPv4-mapped form included) or a dotted IPv4
  // address, which is mapped. kInvalidArgument otherwise.
  static Result<Gid> parse(std::string_view text);
  friend bool operator==(const Gid&, const Gid&) = default;
};

// An IPv4 address and UDP port: where a NIC's datagrams are bound (local) or
// sent (remote). What a peer's GID and port resolve to.
struct UdpEndpoint {
  uint32_t ipv4 = 0;              // host byte order
  uint16_t port = kRoceV2UdpPort;  // host byte order; 0 when binding = ephemeral

  Gid gid() const { return Gid::from_ipv4(ipv4); }
  std::string to_string() const;  // "a.b.c.d:port"
  // "a.b.c.d:port" or "a.b.c.d" (port 4791). kInvalidArgument otherwise.
  static Result<UdpEndpoint> parse(std::string_view text);
  // The endpoint an IPv4-mapped GID stands for; kInvalidArgument for any other GID.
  static Result<UdpEndpoint> from_gid(const Gid& gid, uint16_t port = kRoceV2UdpPort);
  friend bool operator==(const UdpEndpoint&, const UdpEndpoint&) = default;
};

// IBTA local ACK timeout: 4.096 us * 2^code; 0 means infinite (returns 0).
uint64_t ack_timeout_ns(uint8_t code);
// IBTA RNR NAK timer (5-bit code, IBTA Table 45) in nanoseconds.
uint64_t rnr_timer_ns(uint8_t code);

}  // namespace ferry::nic
