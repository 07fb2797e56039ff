// RoCEv2-shaped transport headers (IBTA Vol. 1 ch. 9): BTH, RETH, AETH,
// AtomicETH, AtomicAckETH, ImmDt, and the IBTA 1.5 FETH. Byte-exact layouts in
// network byte order; specification in docs/wire-format.md.
//
// Everything here parses untrusted bytes: a parse never reads outside the
// given span, never trusts a length field, and reports malformed input as a
// ParseError value (counted by the NIC, then dropped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace ferry::nic::wire {

// RC opcodes (BTH opcode field, transport type RC = 0b000).
enum Opcode : uint8_t {
  kSendFirst = 0x00,
  kSendMiddle = 0x01,
  kSendLast = 0x02,
  kSendLastImm = 0x03,
  kSendOnly = 0x04,
  kSendOnlyImm = 0x05,
  kWriteFirst = 0x06,
  kWriteMiddle = 0x07,
  kWriteLast = 0x08,
  kWriteLastImm = 0x09,
  kWriteOnly = 0x0A,
  kWriteOnlyImm = 0x0B,
  kReadRequest = 0x0C,
  kReadResponseFirst = 0x0D,
  kReadResponseMiddle = 0x0E,
  kReadResponseLast = 0x0F,
  kReadResponseOnly = 0x10,
  kAcknowledge = 0x11,
  kAtomicAcknowledge = 0x12,
  kCompareSwap = 0x13,
  kFetchAdd = 0x14,
  kFlush = 0x1C,  // IBTA 1.5 Memory Placement Extensions
};

constexpr size_t kBthBytes = 12;
// The BTH's DestQP (bytes 5-7) of serialized headers at least kBthBytes
// long, without parsing or checking the rest.
inline uint32_t peek_dest_qp(const uint8_t* header) {
  return (static_cast<uint32_t>(header[5]) << 16) | (static_cast<uint32_t>(header[6]) << 8) | header[7];
}
constexpr size_t kRethBytes = 16;
constexpr size_t kAethBytes = 4;
constexpr size_t kAtomicEthBytes = 28;
constexpr size_t kAtomicAckEthBytes = 8;
constexpr size_t kImmDtBytes = 4;
constexpr size_t kFethBytes = 4;
constexpr size_t kMaxHeaderBytes = 48;
constexpr uint32_t kMaxPayloadBytes = 4096;  // largest IBTA path MTU
constexpr uint16_t kDefaultPkey = 0xFFFF;
constexpr uint32_t kPsnMask = 0xFFFFFF;
constexpr uint32_t kQpnMask = 0xFFFFFF;

static_assert(kBthBytes + kRethBytes + kImmDtBytes <= kMaxHeaderBytes);
static_assert(kBthBytes + kAtomicEthBytes <= kMaxHeaderBytes);
static_assert(kBthBytes + kAethBytes + kAtomicAckEthBytes <= kMaxHeaderBytes);
static_assert(kBthBytes + kFethBytes + kRethBytes <= kMaxHeaderBytes);

// AETH syndrome: bits 6..5 type, bits 4..0 value.
enum AckType : uint8_t { kAckTypeAck = 0, kAckTypeRnrNak = 1, kAckTypeNak = 3 };
enum NakCode : uint8_t {
  kNakPsnSequenceError = 0,
  kNakInvalidRequest = 1,
  kNakRemoteAccessError = 2,
  kNakRemoteOperationalError = 3,
};
constexpr uint8_t kAckNoCredit = 0x1F;  // "invalid credit count": no end-to-end credits
inline uint8_t make_syndrome(AckType type, uint8_t value) {
  return static_cast<uint8_t>((type << 5) | (value & 0x1F));
}
inline AckType syndrome_type(uint8_t s) { return static_cast<AckType>((s >> 5) & 0x3); }
inline uint8_t syndrome_value(uint8_t s) { return s & 0x1F; }

// FETH placement types (bits 3..0) and selectivity levels (bits 5..4).
enum FlushPlacement : uint8_t { kPlacementGlobalVisibility = 0x1, kPlacementPersistence = 0x2 };
enum FlushSelectivity : uint8_t { kSelectRange = 0, kSelectMemoryRegion = 1 };

struct Bth {
  uint8_t opcode = 0;
  bool solicited = false;
  bool mig_req = true;
  uint8_t pad_count = 0;  // 0..3 bytes of padding after the payload
  uint8_t tver = 0;
  uint16_t pkey = kDefaultPkey;
  bool fecn = false;
  bool becn = false;
  uint32_t dest_qp = 0;   // 24-bit
  bool ack_req = false;
  uint32_t psn = 0;       // 24-bit
};
struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_length = 0;
};
struct Aeth {
  uint8_t syndrome = 0;
  uint32_t msn = 0;  // 24-bit
};
struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
};
struct Feth {
  uint8_t selectivity = 0;  // 0 = the memory region range given in RETH
  uint8_t placement = kPlacementPersistence;
};

// Extension headers an opcode carries, in wire order after the BTH.
enum ExtHeader : uint8_t {
  kHasReth = 1u << 0,
  kHasAeth = 1u << 1,
  kHasAtomicEth = 1u << 2,
  kHasAtomicAckEth = 1u << 3,
  kHasImmDt = 1u << 4,
  kHasFeth = 1u << 5,
};

struct OpcodeInfo {
  bool valid = false;
  bool request = false;      // sent by a requester (vs response/ACK)
  bool payload = false;      // may carry payload
  bool first = false;        // starts a message
  bool last = false;         // ends a message
  uint8_t headers = 0;       // ExtHeader mask
  const char* name = "invalid";
};
const OpcodeInfo& opcode_info(uint8_t opcode);

// All headers of one packet, as parsed or to be serialized.
struct Headers {
  Bth bth;
  Reth reth;
  Aeth aeth;
  AtomicEth atomic;
  uint64_t atomic_ack_orig = 0;
  uint32_t imm = 0;
  Feth feth;
};

enum class ParseError : uint8_t {
  kNone = 0,
  kTruncated,         // fewer bytes than the opcode's headers need
  kBadOpcode,         // not an RC opcode Ferry speaks
  kBadVersion,        // BTH TVer != 0
  kBadPad,            // pad count inconsistent with the payload length
  kUnexpectedPayload, // payload on an opcode that carries none
  kPayloadTooLong,    // more than kMaxPayloadBytes
  kCount,
};
std::string_view parse_error_name(ParseError e);

// Length of the headers `opcode` carries (BTH included); 0 for an invalid opcode.
size_t header_length(uint8_t opcode);

// Writes the headers for h.bth.opcode into `out` (>= kMaxHeaderBytes) and
// returns their length. The BTH pad count is taken from h as given.
size_t serialize_headers(const Headers& h, std::span<uint8_t> out);

// Parses the headers at the start of `bytes`. On success fills *h and
// *header_len. Does not look at the payload.
ParseError parse_headers(std::span<const uint8_t> bytes, Headers* h, size_t* header_len);

// Checks a parsed header set against the payload length that accompanies it.
ParseError check_payload(const Headers& h, size_t payload_len);

// Contiguous packet form (used by byte transports and the fuzzer):
// headers || payload || pad_count zero bytes. No ICRC (docs/wire-format.md).
size_t serialize_packet(const Headers& h, std::span<const uint8_t> payload, std::span<uint8_t> out);
ParseError parse_packet(std::span<const uint8_t> bytes, Headers* h, std::span<const uint8_t>* payload);

inline uint8_t pad_for(size_t payload_len) { return static_cast<uint8_t>((4 - (payload_len & 3)) & 3); }

// 24-bit PSN arithmetic, modulo 2^24 with a half window.
inline uint32_t psn_add(uint32_t psn, uint32_t n) { return (psn + n) & kPsnMask; }
// Signed distance a - b in (-2^23, 2^23]: exactly half the space counts as
// ahead, so two PSNs are never each "before" the other.
inline int32_t psn_diff(uint32_t a, uint32_t b) {
  const int32_t d = static_cast<int32_t>((a - b) & kPsnMask);
  return d > (1 << 23) ? d - (1 << 24) : d;
}
inline bool psn_before(uint32_t a, uint32_t b) { return psn_diff(a, b) < 0; }

}  // namespace ferry::nic::wire
