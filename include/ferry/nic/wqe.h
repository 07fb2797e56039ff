// In-memory layouts of work-queue entries and completion-queue entries.
// Specification: docs/wqe-format.md. These are host-memory formats that the
// NIC reads when it starts a request and that a remote peer may rewrite (the
// HyperLoop remote work-request manipulation), so every field is checked when
// decoded: a WQE is untrusted input.
//
// All integers are little-endian (host order on every platform Ferry targets).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "ferry/nic/types.h"

namespace ferry::nic {

// ---- send-queue WQE ---------------------------------------------------------
// A WQE occupies one slot of `stride` bytes (64 << k). Header 48 bytes, then
// data segments (16 bytes each) or inline data.
struct WqeCtrlSeg {
  uint8_t opcode;    // WrOpcode
  uint8_t flags;     // SendFlags
  uint16_t num_ds;   // data segments, or inline byte count when kSendInline
  uint32_t imm_data;
  uint64_t wr_id;
};
struct WqeRemoteSeg {
  uint64_t remote_addr;  // WAIT: completion index; ENABLE: producer index
  uint32_t rkey;         // WAIT: CQ number; ENABLE: QP number
  uint32_t aux;          // FLUSH: bit 0 = persistence placement, bit 1 = whole-MR selectivity; else 0
};
struct WqeAtomicSeg {
  uint64_t compare_add;
  uint64_t swap;
};
struct WqeDataSeg {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

constexpr size_t kWqeCtrlOffset = 0;
constexpr size_t kWqeRemoteOffset = 16;
constexpr size_t kWqeAtomicOffset = 32;
constexpr size_t kWqeDataOffset = 48;
constexpr size_t kSendWqeBasicBlock = 64;
constexpr uint32_t kMaxSendSge = 30;     // 48 + 30*16 = 528 -> stride 1024
constexpr uint32_t kMaxInlineData = 976; // 1024 - 48

static_assert(sizeof(WqeCtrlSeg) == 16);
static_assert(sizeof(WqeRemoteSeg) == 16);
static_assert(sizeof(WqeAtomicSeg) == 16);
static_assert(sizeof(WqeDataSeg) == 16);
static_assert(kWqeDataOffset + sizeof(WqeDataSeg) == kSendWqeBasicBlock,
              "one SGE must fit the 64-byte basic block");

// ---- receive-queue WQE (QP RQ and SRQ) -------------------------------------
struct RecvWqeHeader {
  uint64_t wr_id;
  uint16_t num_sge;
  uint16_t flags;  // kRecvWqePosted; other bits written 0, ignored
  uint32_t reserved;
};
// Set in every RECV WQE the application posts: a slot without it (zeroed
// memory) holds no RECV.
constexpr uint16_t kRecvWqePosted = 1;
static_assert(sizeof(RecvWqeHeader) == 16);
constexpr size_t kRecvWqeDataOffset = 16;
constexpr uint32_t kMaxRecvSge = 31;  // 16 + 31*16 = 512

// ---- CQE -----------------------------------------------------------------------
// 64 bytes. Valid when `owner` equals ((consumer_index / depth) & 1) + 1; the
// NIC writes every other field before storing `owner` with release ordering.
struct Cqe {
  uint64_t wr_id;
  uint32_t byte_len;
  uint32_t imm_data;
  uint32_t qp_num;
  uint32_t src_qp;
  uint16_t wqe_index;
  uint8_t opcode;   // WcOpcode
  uint8_t status;   // WcStatus
  uint8_t flags;    // bit 0: has_imm, bit 1: solicited, bit 2: MP buffer done, bit 3: MP filler
  uint8_t reserved0;
  uint16_t stride_index;         // multi-packet SRQ: first stride of the message
  uint16_t mp_strides_consumed;  // ... and how many strides it took
  uint8_t reserved[29];
  uint8_t owner;
};
static_assert(sizeof(Cqe) == 64);
static_assert(offsetof(Cqe, stride_index) == 30);
static_assert(offsetof(Cqe, mp_strides_consumed) == 32);
static_assert(offsetof(Cqe, owner) == 63);
constexpr uint8_t kCqeFlagImm = 1;
constexpr uint8_t kCqeFlagSolicited = 2;
constexpr uint8_t kCqeFlagMpBufferDone = 4;
constexpr uint8_t kCqeFlagMpFiller = 8;

// Stride of a send WQE for the given capabilities: the smallest 64 << k that
// holds the header plus max(max_send_sge segments, max_inline bytes).
uint32_t send_wqe_stride(uint32_t max_send_sge, uint32_t max_inline_data);
// Stride of a receive WQE: the smallest 32 << k that holds header + SGEs.
uint32_t recv_wqe_stride(uint32_t max_recv_sge);

// A send WQE decoded from its slot, with nothing resolved yet.
struct DecodedSendWqe {
  WrOpcode opcode;
  uint8_t flags;
  uint16_t num_ds;
  uint32_t imm_data;
  uint64_t wr_id;
  WqeRemoteSeg remote;
  WqeAtomicSeg atomic;
  const uint8_t* data;  // start of data segments / inline bytes inside the slot
};

// kEmpty: the slot holds no published WQE (send: opcode byte 0; receive: the
// posted flag clear). A managed queue waits at such a slot for a post; on
// any other queue it is a malformed WQE.
enum class WqeError : uint8_t { kNone = 0, kEmpty, kBadOpcode, kTooManySge, kInlineTooLong, kBadFlags };

// Decodes the slot; returns kNone or why the WQE is malformed. `max_sge` and
// `max_inline` are the queue's capacities; the slot is `stride` bytes.
WqeError decode_send_wqe(std::span<const uint8_t> slot, uint32_t max_sge, uint32_t max_inline,
                         DecodedSendWqe* out);

// Encodes `wr` into a zeroed slot of `stride` bytes. Inline payloads are copied
// from the SGE addresses (which must be readable). The caller has validated
// `wr` against the queue's capacities. `wait_cq_number`/`enable_qp_number`
// carry the object numbers for cross-channel requests.
void encode_send_wqe(const SendWr& wr, uint32_t wait_cq_number, uint32_t enable_qp_number,
                     std::span<uint8_t> slot);

// Receive WQEs.
struct DecodedRecvWqe {
  uint64_t wr_id;
  uint16_t num_sge;
  const uint8_t* sges;  // num_sge WqeDataSeg records
};
WqeError decode_recv_wqe(std::span<const uint8_t> slot, uint32_t max_sge, DecodedRecvWqe* out);
void encode_recv_wqe(const RecvWr& wr, std::span<uint8_t> slot);

inline WqeDataSeg load_data_seg(const uint8_t* p) {
  WqeDataSeg s;
  std::memcpy(&s, p, sizeof(s));
  return s;
}

}  // namespace ferry::nic
