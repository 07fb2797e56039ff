// libFuzzer target: the transport-header parser (wire.h) on untrusted bytes.
//
// Properties checked on every input:
//  - parse_headers / parse_packet / check_payload never read outside the input
//    (ASan) and never hit undefined behaviour (UBSan);
//  - a packet that parses re-serializes to the same length, the same header
//    bytes (reserved bits aside), the same payload and zero pad bytes, and
//    parses again to the same Headers.
// Any violation traps, which libFuzzer reports as a crash.
//
// Run: ./packet_parser_fuzz -max_total_time=60 ../tests/fuzz/corpus/packet_parser_fuzz
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "ferry/nic/wire.h"

namespace {

using namespace ferry::nic::wire;

#define FUZZ_CHECK(cond)            \
  do {                              \
    if (!(cond)) __builtin_trap();  \
  } while (0)

bool same_headers(const Headers& a, const Headers& b) {
  return a.bth.opcode == b.bth.opcode && a.bth.solicited == b.bth.solicited && a.bth.mig_req == b.bth.mig_req &&
         a.bth.pad_count == b.bth.pad_count && a.bth.tver == b.bth.tver && a.bth.pkey == b.bth.pkey &&
         a.bth.fecn == b.bth.fecn && a.bth.becn == b.bth.becn && a.bth.dest_qp == b.bth.dest_qp &&
         a.bth.ack_req == b.bth.ack_req && a.bth.psn == b.bth.psn && a.reth.va == b.reth.va &&
         a.reth.rkey == b.reth.rkey && a.reth.dma_length == b.reth.dma_length && a.aeth.syndrome == b.aeth.syndrome &&
         a.aeth.msn == b.aeth.msn && a.atomic.va == b.atomic.va && a.atomic.rkey == b.atomic.rkey &&
         a.atomic.swap_add == b.atomic.swap_add && a.atomic.compare == b.atomic.compare &&
         a.atomic_ack_orig == b.atomic_ack_orig && a.imm == b.imm && a.feth.selectivity == b.feth.selectivity &&
         a.feth.placement == b.feth.placement;
}

// Mask of the header bits that carry a field (1) versus reserved bits (0),
// which the parser ignores and the serializer writes as zero.
uint8_t header_byte_mask(uint8_t opcode, size_t i) {
  if (i == 4) return 0xC0;  // FECN, BECN; bits 5..0 reserved
  if (i == 8) return 0x80;  // AckReq; bits 6..0 reserved
  if ((opcode_info(opcode).headers & kHasFeth) && i >= kBthBytes && i < kBthBytes + kFethBytes) {
    return i == kBthBytes + kFethBytes - 1 ? 0x3F : 0x00;  // selectivity + placement in the last byte
  }
  return 0xFF;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);

  // parse_headers on arbitrary bytes.
  Headers h{};
  size_t header_len = 0;
  if (parse_headers(input, &h, &header_len) == ParseError::kNone) {
    FUZZ_CHECK(header_len >= kBthBytes && header_len <= kMaxHeaderBytes && header_len <= size);
    FUZZ_CHECK(header_len == header_length(h.bth.opcode));
    FUZZ_CHECK(opcode_info(h.bth.opcode).valid);
    FUZZ_CHECK(h.bth.tver == 0 && h.bth.pad_count < 4);
    FUZZ_CHECK(h.bth.dest_qp <= kQpnMask && h.bth.psn <= kPsnMask && h.aeth.msn <= 0xFFFFFF);
    (void)check_payload(h, size - header_len);
  }

  // check_payload with fuzzer-chosen header fields and lengths (it must cope
  // with any opcode byte and pad count, including invalid ones).
  if (size >= 4) {
    Headers c{};
    c.bth.opcode = data[0];
    c.bth.pad_count = data[1];
    const size_t len = static_cast<size_t>(data[2]) << 8 | data[3];
    const ParseError e = check_payload(c, len);
    if (e == ParseError::kNone) {
      FUZZ_CHECK(opcode_info(c.bth.opcode).valid && len <= kMaxPayloadBytes && c.bth.pad_count == pad_for(len));
      FUZZ_CHECK(opcode_info(c.bth.opcode).payload || len == 0);
    }
  }

  // parse_packet, then serialize and parse again.
  Headers p{};
  std::span<const uint8_t> payload;
  if (parse_packet(input, &p, &payload) != ParseError::kNone) return 0;
  const size_t hlen = header_length(p.bth.opcode);
  FUZZ_CHECK(hlen != 0);
  FUZZ_CHECK(payload.size() <= kMaxPayloadBytes);
  FUZZ_CHECK(payload.data() == data + hlen);
  FUZZ_CHECK(hlen + payload.size() + p.bth.pad_count == size);
  FUZZ_CHECK(p.bth.pad_count == pad_for(payload.size()));

  const size_t cap = kMaxHeaderBytes + payload.size() + 3;
  auto out = std::make_unique<uint8_t[]>(cap);
  const size_t n = serialize_packet(p, payload, std::span<uint8_t>(out.get(), cap));
  FUZZ_CHECK(n == size);
  for (size_t i = 0; i < hlen; ++i) {
    const uint8_t mask = header_byte_mask(p.bth.opcode, i);
    FUZZ_CHECK((out[i] & mask) == (data[i] & mask));
    FUZZ_CHECK((out[i] & ~mask) == 0);
  }
  if (!payload.empty()) FUZZ_CHECK(std::memcmp(out.get() + hlen, payload.data(), payload.size()) == 0);
  for (size_t i = hlen + payload.size(); i < n; ++i) FUZZ_CHECK(out[i] == 0);

  Headers q{};
  std::span<const uint8_t> payload2;
  FUZZ_CHECK(parse_packet(std::span<const uint8_t>(out.get(), n), &q, &payload2) == ParseError::kNone);
  FUZZ_CHECK(same_headers(p, q));
  FUZZ_CHECK(payload2.size() == payload.size());
  if (!payload.empty()) FUZZ_CHECK(std::memcmp(payload2.data(), payload.data(), payload.size()) == 0);

  // serialize_headers alone agrees with the packet's header bytes.
  uint8_t hdr[kMaxHeaderBytes];
  FUZZ_CHECK(serialize_headers(p, hdr) == hlen);
  FUZZ_CHECK(std::memcmp(hdr, out.get(), hlen) == 0);
  return 0;
}
