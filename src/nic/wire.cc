// Serialization and parsing of the transport headers (docs/wire-format.md).
#include "ferry/nic/wire.h"

#include <array>
#include <cstring>

namespace ferry::nic::wire {
namespace {

constexpr std::array<OpcodeInfo, 256> build_opcode_table() {
  std::array<OpcodeInfo, 256> t{};
  auto set = [&](uint8_t op, bool request, bool payload, bool first, bool last, uint8_t headers,
                 const char* name) { t[op] = OpcodeInfo{true, request, payload, first, last, headers, name}; };
  set(kSendFirst, true, true, true, false, 0, "SEND_FIRST");
  set(kSendMiddle, true, true, false, false, 0, "SEND_MIDDLE");
  set(kSendLast, true, true, false, true, 0, "SEND_LAST");
  set(kSendLastImm, true, true, false, true, kHasImmDt, "SEND_LAST_IMM");
  set(kSendOnly, true, true, true, true, 0, "SEND_ONLY");
  set(kSendOnlyImm, true, true, true, true, kHasImmDt, "SEND_ONLY_IMM");
  set(kWriteFirst, true, true, true, false, kHasReth, "WRITE_FIRST");
  set(kWriteMiddle, true, true, false, false, 0, "WRITE_MIDDLE");
  set(kWriteLast, true, true, false, true, 0, "WRITE_LAST");
  set(kWriteLastImm, true, true, false, true, kHasImmDt, "WRITE_LAST_IMM");
  set(kWriteOnly, true, true, true, true, kHasReth, "WRITE_ONLY");
  set(kWriteOnlyImm, true, true, true, true, kHasReth | kHasImmDt, "WRITE_ONLY_IMM");
  set(kReadRequest, true, false, true, true, kHasReth, "READ_REQUEST");
  set(kReadResponseFirst, false, true, true, false, kHasAeth, "READ_RESPONSE_FIRST");
  set(kReadResponseMiddle, false, true, false, false, 0, "READ_RESPONSE_MIDDLE");
  set(kReadResponseLast, false, true, false, true, kHasAeth, "READ_RESPONSE_LAST");
  set(kReadResponseOnly, false, true, true, true, kHasAeth, "READ_RESPONSE_ONLY");
  set(kAcknowledge, false, false, true, true, kHasAeth, "ACKNOWLEDGE");
  set(kAtomicAcknowledge, false, false, true, true, kHasAeth | kHasAtomicAckEth, "ATOMIC_ACKNOWLEDGE");
  set(kCompareSwap, true, false, true, true, kHasAtomicEth, "COMPARE_SWAP");
  set(kFetchAdd, true, false, true, true, kHasAtomicEth, "FETCH_ADD");
  set(kFlush, true, false, true, true, kHasFeth | kHasReth, "FLUSH");
  return t;
}

constexpr std::array<OpcodeInfo, 256> kOpcodeTable = build_opcode_table();

constexpr size_t compute_header_length(uint8_t headers) {
  size_t n = kBthBytes;
  if (headers & kHasFeth) n += kFethBytes;
  if (headers & kHasReth) n += kRethBytes;
  if (headers & kHasAeth) n += kAethBytes;
  if (headers & kHasAtomicEth) n += kAtomicEthBytes;
  if (headers & kHasAtomicAckEth) n += kAtomicAckEthBytes;
  if (headers & kHasImmDt) n += kImmDtBytes;
  return n;
}

inline void put8(uint8_t*& p, uint8_t v) { *p++ = v; }
inline void put16(uint8_t*& p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
  p += 2;
}
inline void put24(uint8_t*& p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
  p += 3;
}
inline void put32(uint8_t*& p, uint32_t v) {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
  p += 4;
}
inline void put64(uint8_t*& p, uint64_t v) {
  v = __builtin_bswap64(v);
  std::memcpy(p, &v, 8);
  p += 8;
}
inline uint8_t get8(const uint8_t*& p) { return *p++; }
inline uint16_t get16(const uint8_t*& p) {
  uint16_t v = static_cast<uint16_t>((p[0] << 8) | p[1]);
  p += 2;
  return v;
}
inline uint32_t get24(const uint8_t*& p) {
  uint32_t v = (static_cast<uint32_t>(p[0]) << 16) | (static_cast<uint32_t>(p[1]) << 8) | p[2];
  p += 3;
  return v;
}
inline uint32_t get32(const uint8_t*& p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  p += 4;
  return __builtin_bswap32(v);
}
inline uint64_t get64(const uint8_t*& p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  p += 8;
  return __builtin_bswap64(v);
}

}  // namespace

const OpcodeInfo& opcode_info(uint8_t opcode) { return kOpcodeTable[opcode]; }

size_t header_length(uint8_t opcode) {
  const OpcodeInfo& info = kOpcodeTable[opcode];
  return info.valid ? compute_header_length(info.headers) : 0;
}

std::string_view parse_error_name(ParseError e) {
  switch (e) {
    case ParseError::kNone: return "none";
    case ParseError::kTruncated: return "truncated";
    case ParseError::kBadOpcode: return "bad_opcode";
    case ParseError::kBadVersion: return "bad_version";
    case ParseError::kBadPad: return "bad_pad";
    case ParseError::kUnexpectedPayload: return "unexpected_payload";
    case ParseError::kPayloadTooLong: return "payload_too_long";
    case ParseError::kCount: break;
  }
  return "unknown";
}

size_t serialize_headers(const Headers& h, std::span<uint8_t> out) {
  const OpcodeInfo& info = kOpcodeTable[h.bth.opcode];
  const size_t len = compute_header_length(info.headers);
  if (!info.valid || out.size() < len) return 0;
  uint8_t* p = out.data();
  // BTH
  put8(p, h.bth.opcode);
  put8(p, static_cast<uint8_t>((h.bth.solicited ? 0x80 : 0) | (h.bth.mig_req ? 0x40 : 0) |
                               ((h.bth.pad_count & 0x3) << 4) | (h.bth.tver & 0xF)));
  put16(p, h.bth.pkey);
  put8(p, static_cast<uint8_t>((h.bth.fecn ? 0x80 : 0) | (h.bth.becn ? 0x40 : 0)));
  put24(p, h.bth.dest_qp & kQpnMask);
  put8(p, h.bth.ack_req ? 0x80 : 0);
  put24(p, h.bth.psn & kPsnMask);
  // Extension headers in IBTA order.
  if (info.headers & kHasFeth) {
    put32(p, (static_cast<uint32_t>(h.feth.selectivity & 0x3) << 4) | (h.feth.placement & 0xF));
  }
  if (info.headers & kHasReth) {
    put64(p, h.reth.va);
    put32(p, h.reth.rkey);
    put32(p, h.reth.dma_length);
  }
  if (info.headers & kHasAeth) {
    put8(p, h.aeth.syndrome);
    put24(p, h.aeth.msn & 0xFFFFFF);
  }
  if (info.headers & kHasAtomicEth) {
    put64(p, h.atomic.va);
    put32(p, h.atomic.rkey);
    put64(p, h.atomic.swap_add);
    put64(p, h.atomic.compare);
  }
  if (info.headers & kHasAtomicAckEth) put64(p, h.atomic_ack_orig);
  if (info.headers & kHasImmDt) put32(p, h.imm);
  return len;
}

ParseError parse_headers(std::span<const uint8_t> bytes, Headers* h, size_t* header_len) {
  if (bytes.size() < kBthBytes) return ParseError::kTruncated;
  const uint8_t* p = bytes.data();
  const OpcodeInfo& info = kOpcodeTable[p[0]];
  if (!info.valid) return ParseError::kBadOpcode;
  const size_t len = compute_header_length(info.headers);
  if (bytes.size() < len) return ParseError::kTruncated;

  h->bth.opcode = get8(p);
  const uint8_t b1 = get8(p);
  h->bth.solicited = (b1 & 0x80) != 0;
  h->bth.mig_req = (b1 & 0x40) != 0;
  h->bth.pad_count = (b1 >> 4) & 0x3;
  h->bth.tver = b1 & 0xF;
  if (h->bth.tver != 0) return ParseError::kBadVersion;
  h->bth.pkey = get16(p);
  const uint8_t b4 = get8(p);
  h->bth.fecn = (b4 & 0x80) != 0;
  h->bth.becn = (b4 & 0x40) != 0;
  h->bth.dest_qp = get24(p);
  h->bth.ack_req = (get8(p) & 0x80) != 0;
  h->bth.psn = get24(p);
  if (info.headers & kHasFeth) {
    const uint32_t f = get32(p);
    h->feth.selectivity = static_cast<uint8_t>((f >> 4) & 0x3);
    h->feth.placement = static_cast<uint8_t>(f & 0xF);
  }
  if (info.headers & kHasReth) {
    h->reth.va = get64(p);
    h->reth.rkey = get32(p);
    h->reth.dma_length = get32(p);
  }
  if (info.headers & kHasAeth) {
    h->aeth.syndrome = get8(p);
    h->aeth.msn = get24(p);
  }
  if (info.headers & kHasAtomicEth) {
    h->atomic.va = get64(p);
    h->atomic.rkey = get32(p);
    h->atomic.swap_add = get64(p);
    h->atomic.compare = get64(p);
  }
  if (info.headers & kHasAtomicAckEth) h->atomic_ack_orig = get64(p);
  if (info.headers & kHasImmDt) h->imm = get32(p);
  *header_len = len;
  return ParseError::kNone;
}

ParseError check_payload(const Headers& h, size_t payload_len) {
  const OpcodeInfo& info = kOpcodeTable[h.bth.opcode];
  if (!info.valid) return ParseError::kBadOpcode;
  if (!info.payload && payload_len != 0) return ParseError::kUnexpectedPayload;
  if (payload_len > kMaxPayloadBytes) return ParseError::kPayloadTooLong;
  if (h.bth.pad_count != pad_for(payload_len)) return ParseError::kBadPad;
  return ParseError::kNone;
}

size_t serialize_packet(const Headers& h, std::span<const uint8_t> payload, std::span<uint8_t> out) {
  Headers copy = h;
  copy.bth.pad_count = pad_for(payload.size());
  uint8_t hdr[kMaxHeaderBytes];
  const size_t hlen = serialize_headers(copy, hdr);
  if (hlen == 0) return 0;
  const size_t total = hlen + payload.size() + copy.bth.pad_count;
  if (out.size() < total) return 0;
  std::memcpy(out.data(), hdr, hlen);
  if (!payload.empty()) std::memcpy(out.data() + hlen, payload.data(), payload.size());
  std::memset(out.data() + hlen + payload.size(), 0, copy.bth.pad_count);
  return total;
}

ParseError parse_packet(std::span<const uint8_t> bytes, Headers* h, std::span<const uint8_t>* payload) {
  size_t hlen = 0;
  ParseError e = parse_headers(bytes, h, &hlen);
  if (e != ParseError::kNone) return e;
  const size_t rest = bytes.size() - hlen;
  if (rest < h->bth.pad_count) return ParseError::kBadPad;
  const size_t payload_len = rest - h->bth.pad_count;
  e = check_payload(*h, payload_len);
  if (e != ParseError::kNone) return e;
  *payload = bytes.subspan(hlen, payload_len);
  return ParseError::kNone;
}

}  // namespace ferry::nic::wire
