// Transport headers (wire.h), checked against the IBTA Vol. 1 ch. 9 layouts
// rather than against the implementation: hand-computed bytes for a few
// packets, every opcode through serialize/parse, every ParseError, and the
// 24-bit PSN arithmetic across the wrap.
#include "ferry/nic/wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace ferry::nic::wire {
namespace {

using Bytes = std::vector<uint8_t>;

// What the IBTA says each RC opcode carries (independent of opcode_info).
struct OpcodeSpec {
  uint8_t opcode;
  size_t header_bytes;  // BTH included
  bool payload;
};
constexpr std::array<OpcodeSpec, 22> kSpec = {{
    {kSendFirst, 12, true},
    {kSendMiddle, 12, true},
    {kSendLast, 12, true},
    {kSendLastImm, 16, true},
    {kSendOnly, 12, true},
    {kSendOnlyImm, 16, true},
    {kWriteFirst, 28, true},
    {kWriteMiddle, 12, true},
    {kWriteLast, 12, true},
    {kWriteLastImm, 16, true},
    {kWriteOnly, 28, true},
    {kWriteOnlyImm, 32, true},
    {kReadRequest, 28, false},
    {kReadResponseFirst, 16, true},
    {kReadResponseMiddle, 12, true},
    {kReadResponseLast, 16, true},
    {kReadResponseOnly, 16, true},
    {kAcknowledge, 16, false},
    {kAtomicAcknowledge, 24, false},
    {kCompareSwap, 40, false},
    {kFetchAdd, 40, false},
    {kFlush, 32, false},
}};

const OpcodeSpec* find_spec(uint8_t opcode) {
  for (const OpcodeSpec& s : kSpec) {
    if (s.opcode == opcode) return &s;
  }
  return nullptr;
}

// Every field set to a distinctive, in-range, non-default value.
Headers distinctive_headers(uint8_t opcode) {
  Headers h;
  h.bth.opcode = opcode;
  h.bth.solicited = true;
  h.bth.mig_req = false;
  h.bth.pad_count = 0;
  h.bth.tver = 0;
  h.bth.pkey = 0x8123;
  h.bth.fecn = true;
  h.bth.becn = true;
  h.bth.dest_qp = 0xA1B2C3;
  h.bth.ack_req = true;
  h.bth.psn = 0xD4E5F6;
  h.reth = Reth{0x0102030405060708ULL, 0x99AABBCC, 0x00001234};
  h.aeth = Aeth{make_syndrome(kAckTypeNak, kNakRemoteAccessError), 0x345678};
  h.atomic = AtomicEth{0x1122334455667788ULL, 0xCAFEF00D, 0x8877665544332211ULL, 0x0F1E2D3C4B5A6978ULL};
  h.atomic_ack_orig = 0xFEEDFACEDEADBEEFULL;
  h.imm = 0x5EED1234;
  h.feth = Feth{2, kPlacementGlobalVisibility};
  return h;
}

// Compares the BTH and the extension headers `opcode` carries.
void expect_same_headers(const Headers& want, const Headers& got) {
  EXPECT_EQ(got.bth.opcode, want.bth.opcode);
  EXPECT_EQ(got.bth.solicited, want.bth.solicited);
  EXPECT_EQ(got.bth.mig_req, want.bth.mig_req);
  EXPECT_EQ(got.bth.pad_count, want.bth.pad_count);
  EXPECT_EQ(got.bth.tver, want.bth.tver);
  EXPECT_EQ(got.bth.pkey, want.bth.pkey);
  EXPECT_EQ(got.bth.fecn, want.bth.fecn);
  EXPECT_EQ(got.bth.becn, want.bth.becn);
  EXPECT_EQ(got.bth.dest_qp, want.bth.dest_qp);
  EXPECT_EQ(got.bth.ack_req, want.bth.ack_req);
  EXPECT_EQ(got.bth.psn, want.bth.psn);
  const uint8_t carried = opcode_info(want.bth.opcode).headers;
  if (carried & kHasReth) {
    EXPECT_EQ(got.reth.va, want.reth.va);
    EXPECT_EQ(got.reth.rkey, want.reth.rkey);
    EXPECT_EQ(got.reth.dma_length, want.reth.dma_length);
  }
  if (carried & kHasAeth) {
    EXPECT_EQ(got.aeth.syndrome, want.aeth.syndrome);
    EXPECT_EQ(got.aeth.msn, want.aeth.msn);
  }
  if (carried & kHasAtomicEth) {
    EXPECT_EQ(got.atomic.va, want.atomic.va);
    EXPECT_EQ(got.atomic.rkey, want.atomic.rkey);
    EXPECT_EQ(got.atomic.swap_add, want.atomic.swap_add);
    EXPECT_EQ(got.atomic.compare, want.atomic.compare);
  }
  if (carried & kHasAtomicAckEth) {
    EXPECT_EQ(got.atomic_ack_orig, want.atomic_ack_orig);
  }
  if (carried & kHasImmDt) {
    EXPECT_EQ(got.imm, want.imm);
  }
  if (carried & kHasFeth) {
    EXPECT_EQ(got.feth.selectivity, want.feth.selectivity);
    EXPECT_EQ(got.feth.placement, want.feth.placement);
  }
}

Bytes serialize(const Headers& h) {
  Bytes out(kMaxHeaderBytes, 0xEE);
  const size_t n = serialize_headers(h, out);
  out.resize(n);
  return out;
}

Bytes packet(const Headers& h, const Bytes& payload) {
  Bytes out(kMaxHeaderBytes + kMaxPayloadBytes + 8, 0xEE);
  const size_t n = serialize_packet(h, payload, out);
  out.resize(n);
  return out;
}

ParseError parse_packet_error(const Bytes& bytes) {
  Headers h;
  std::span<const uint8_t> payload;
  return parse_packet(bytes, &h, &payload);
}

// ---- exact bytes ------------------------------------------------------------

TEST(WireBytes, WriteOnlyMatchesHandComputedBthAndReth) {
  Headers h;
  h.bth.opcode = kWriteOnly;
  h.bth.solicited = true;
  h.bth.mig_req = true;
  h.bth.pad_count = 3;
  h.bth.pkey = 0xFFFF;
  h.bth.becn = true;
  h.bth.dest_qp = 0x123456;
  h.bth.ack_req = true;
  h.bth.psn = 0xABCDEF;
  h.reth = Reth{0x0102030405060708ULL, 0x11223344, 257};
  const Bytes want = {
      0x0A,                                            // opcode WRITE_ONLY
      0xF0,                                            // SE | M | PadCnt=3 | TVer=0
      0xFF, 0xFF,                                      // P_Key
      0x40,                                            // BECN
      0x12, 0x34, 0x56,                                // DestQP
      0x80,                                            // AckReq
      0xAB, 0xCD, 0xEF,                                // PSN
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,  // RETH VA
      0x11, 0x22, 0x33, 0x44,                          // RETH R_Key
      0x00, 0x00, 0x01, 0x01,                          // RETH DMA length 257
  };
  EXPECT_EQ(serialize(h), want);
  EXPECT_EQ(header_length(kWriteOnly), want.size());

  // As a packet: 257 payload bytes then 3 zero pad bytes, pad count recomputed.
  Bytes payload(257);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 3 + 1);
  h.bth.pad_count = 0;  // serialize_packet must set it from the payload length
  const Bytes pkt = packet(h, payload);
  ASSERT_EQ(pkt.size(), 28u + 257u + 3u);
  EXPECT_EQ(Bytes(pkt.begin(), pkt.begin() + 28), want);
  EXPECT_EQ(Bytes(pkt.begin() + 28, pkt.begin() + 28 + 257), payload);
  EXPECT_EQ(pkt[285], 0);
  EXPECT_EQ(pkt[286], 0);
  EXPECT_EQ(pkt[287], 0);
}

TEST(WireBytes, PeekDestQpReadsTheBthsDestQpWithoutParsing) {
  for (const uint32_t qpn : {0u, 1u, 0x000777u, 0x123456u, 0xFFFFFFu}) {
    Headers h;
    h.bth.opcode = kSendOnly;
    h.bth.dest_qp = qpn;
    h.bth.psn = 0xABCDEF;
    const Bytes b = serialize(h);
    ASSERT_GE(b.size(), kBthBytes);
    EXPECT_EQ(peek_dest_qp(b.data()), qpn);
  }
}

TEST(WireBytes, AckCarriesSyndromeAndMsnInAeth) {
  Headers h;
  h.bth.opcode = kAcknowledge;
  h.bth.dest_qp = 7;
  h.bth.psn = 0x000100;
  h.aeth.syndrome = make_syndrome(kAckTypeNak, kNakRemoteAccessError);
  h.aeth.msn = 0x00ABCD;
  const Bytes want = {
      0x11, 0x40, 0xFF, 0xFF,  // opcode ACK, M set (default), P_Key 0xFFFF
      0x00, 0x00, 0x00, 0x07,  // DestQP 7
      0x00, 0x00, 0x01, 0x00,  // PSN 0x100
      0x62,                    // syndrome: NAK (0b11) << 5 | remote access error (2)
      0x00, 0xAB, 0xCD,        // MSN
  };
  EXPECT_EQ(serialize(h), want);

  Headers back;
  size_t len = 0;
  ASSERT_EQ(parse_headers(want, &back, &len), ParseError::kNone);
  EXPECT_EQ(len, 16u);
  EXPECT_EQ(syndrome_type(back.aeth.syndrome), kAckTypeNak);
  EXPECT_EQ(syndrome_value(back.aeth.syndrome), kNakRemoteAccessError);
  EXPECT_EQ(back.aeth.msn, 0x00ABCDu);
  EXPECT_EQ(back.bth.psn, 0x100u);
  EXPECT_EQ(back.bth.dest_qp, 7u);
}

TEST(WireBytes, CompareSwapCarriesAtomicEthSwapThenCompare) {
  Headers h;
  h.bth.opcode = kCompareSwap;
  h.bth.mig_req = false;
  h.bth.pkey = 0x8001;
  h.bth.fecn = true;
  h.bth.dest_qp = 0xFFFFFF;
  h.bth.ack_req = true;
  h.bth.psn = 0;
  h.atomic = AtomicEth{0x1122334455667788ULL, 0xDEADBEEF, 0xA1A2A3A4A5A6A7A8ULL, 0xB1B2B3B4B5B6B7B8ULL};
  const Bytes want = {
      0x13, 0x00, 0x80, 0x01, 0x80, 0xFF, 0xFF, 0xFF, 0x80, 0x00, 0x00, 0x00,  // BTH
      0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,                          // VA
      0xDE, 0xAD, 0xBE, 0xEF,                                                  // R_Key
      0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8,                          // Swap/Add
      0xB1, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8,                          // Compare
  };
  EXPECT_EQ(serialize(h), want);
}

TEST(WireBytes, AtomicAckPutsOriginalValueAfterAeth) {
  Headers h;
  h.bth.opcode = kAtomicAcknowledge;
  h.bth.mig_req = false;
  h.bth.dest_qp = 0x000102;
  h.bth.psn = 0xFFFFFF;
  h.aeth = Aeth{make_syndrome(kAckTypeAck, kAckNoCredit), 0x000003};
  h.atomic_ack_orig = 0x0123456789ABCDEFULL;
  const Bytes want = {
      0x12, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x01, 0x02, 0x00, 0xFF, 0xFF, 0xFF,  // BTH
      0x1F, 0x00, 0x00, 0x03,                                                  // AETH
      0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF,                          // AtomicAckETH
  };
  EXPECT_EQ(serialize(h), want);
}

TEST(WireBytes, WriteOnlyImmPutsImmDtAfterReth) {
  Headers h;
  h.bth.opcode = kWriteOnlyImm;
  h.bth.mig_req = false;
  h.bth.psn = 1;
  h.bth.dest_qp = 2;
  h.reth = Reth{0x10, 0x20, 0x30};
  h.imm = 0xCAFEBABE;
  const Bytes want = {
      0x0B, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01,  // BTH
      0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x20, 0, 0, 0, 0x30,                 // RETH
      0xCA, 0xFE, 0xBA, 0xBE,                                                  // ImmDt
  };
  EXPECT_EQ(serialize(h), want);
}

TEST(WireBytes, FlushPutsFethBeforeReth) {
  Headers h;
  h.bth.opcode = kFlush;
  h.bth.mig_req = false;
  h.bth.dest_qp = 0x000010;
  h.bth.psn = 0x000020;
  h.feth = Feth{1, kPlacementPersistence};
  h.reth = Reth{0xAABBCCDD00112233ULL, 0x01020304, 0x00000040};
  const Bytes want = {
      0x1C, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x20,  // BTH
      0x00, 0x00, 0x00, 0x12,                                                  // FETH: SEL=1, PLT=2
      0xAA, 0xBB, 0xCC, 0xDD, 0x00, 0x11, 0x22, 0x33,                          // RETH VA
      0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x00, 0x40,                          // R_Key, length
  };
  EXPECT_EQ(serialize(h), want);
  Headers back;
  size_t len = 0;
  ASSERT_EQ(parse_headers(want, &back, &len), ParseError::kNone);
  EXPECT_EQ(back.feth.selectivity, 1);
  EXPECT_EQ(back.feth.placement, kPlacementPersistence);
  EXPECT_EQ(back.reth.va, 0xAABBCCDD00112233ULL);
  EXPECT_EQ(back.reth.dma_length, 0x40u);
}

TEST(WireBytes, ParsesBthFieldsFromRawBytes) {
  // SEND_ONLY, SE=0 M=1 PadCnt=2 TVer=0, P_Key 0x7FFF, FECN, reserved bits set
  // in byte 4 and byte 8 (ignored), DestQP 0x000ABC, AckReq, PSN 0x800000.
  const Bytes raw = {0x04, 0x60, 0x7F, 0xFF, 0xBF, 0x00, 0x0A, 0xBC, 0xFF, 0x80, 0x00, 0x00};
  Headers h;
  size_t len = 0;
  ASSERT_EQ(parse_headers(raw, &h, &len), ParseError::kNone);
  EXPECT_EQ(len, 12u);
  EXPECT_EQ(h.bth.opcode, kSendOnly);
  EXPECT_FALSE(h.bth.solicited);
  EXPECT_TRUE(h.bth.mig_req);
  EXPECT_EQ(h.bth.pad_count, 2);
  EXPECT_EQ(h.bth.pkey, 0x7FFF);
  EXPECT_TRUE(h.bth.fecn);
  EXPECT_FALSE(h.bth.becn);
  EXPECT_EQ(h.bth.dest_qp, 0x000ABCu);
  EXPECT_TRUE(h.bth.ack_req);
  EXPECT_EQ(h.bth.psn, 0x800000u);
}

TEST(WireBytes, SerializeMasksTwentyFourBitFields) {
  Headers h;
  h.bth.opcode = kSendOnly;
  h.bth.dest_qp = 0xFF123456;  // only 24 bits go on the wire
  h.bth.psn = 0x01ABCDEF;
  const Bytes b = serialize(h);
  ASSERT_EQ(b.size(), 12u);
  EXPECT_EQ(b[4], 0x00) << "DestQP high bits must not leak into byte 4";
  EXPECT_EQ(b[5], 0x12);
  EXPECT_EQ(b[6], 0x34);
  EXPECT_EQ(b[7], 0x56);
  EXPECT_EQ(b[8], 0x00) << "PSN high bits must not leak into byte 8";
  EXPECT_EQ(b[9], 0xAB);
  EXPECT_EQ(b[10], 0xCD);
  EXPECT_EQ(b[11], 0xEF);
}

// ---- opcode table -------------------------------------------------------------

TEST(WireOpcodes, HeaderLengthMatchesSpecForEveryByteValue) {
  for (int op = 0; op < 256; ++op) {
    const OpcodeSpec* spec = find_spec(static_cast<uint8_t>(op));
    const OpcodeInfo& info = opcode_info(static_cast<uint8_t>(op));
    if (spec == nullptr) {
      EXPECT_FALSE(info.valid) << "opcode " << op;
      EXPECT_EQ(header_length(static_cast<uint8_t>(op)), 0u) << "opcode " << op;
    } else {
      EXPECT_TRUE(info.valid) << "opcode " << op;
      EXPECT_EQ(header_length(static_cast<uint8_t>(op)), spec->header_bytes) << info.name;
      EXPECT_EQ(info.payload, spec->payload) << info.name;
    }
  }
}

TEST(WireOpcodes, FirstLastAndRequestFlags) {
  EXPECT_TRUE(opcode_info(kSendFirst).first);
  EXPECT_FALSE(opcode_info(kSendFirst).last);
  EXPECT_FALSE(opcode_info(kSendMiddle).first);
  EXPECT_FALSE(opcode_info(kSendMiddle).last);
  EXPECT_TRUE(opcode_info(kWriteLastImm).last);
  EXPECT_TRUE(opcode_info(kReadRequest).request);
  EXPECT_FALSE(opcode_info(kReadResponseOnly).request);
  EXPECT_FALSE(opcode_info(kAcknowledge).request);
  EXPECT_TRUE(opcode_info(kFlush).request);
  EXPECT_EQ(opcode_info(kFlush).headers, kHasFeth | kHasReth);
  EXPECT_EQ(opcode_info(kAtomicAcknowledge).headers, kHasAeth | kHasAtomicAckEth);
}

// ---- round trips ---------------------------------------------------------------

TEST(WireRoundTrip, EveryOpcodeThroughSerializeAndParseHeaders) {
  for (const OpcodeSpec& spec : kSpec) {
    SCOPED_TRACE(opcode_info(spec.opcode).name);
    for (uint8_t pad = 0; pad < 4; ++pad) {
      Headers h = distinctive_headers(spec.opcode);
      h.bth.pad_count = pad;
      const Bytes b = serialize(h);
      ASSERT_EQ(b.size(), spec.header_bytes);
      Headers back;
      size_t len = 0;
      ASSERT_EQ(parse_headers(b, &back, &len), ParseError::kNone);
      EXPECT_EQ(len, spec.header_bytes);
      expect_same_headers(h, back);
    }
  }
}

TEST(WireRoundTrip, FlippedBthFlagsRoundTrip) {
  Headers h = distinctive_headers(kSendOnly);
  h.bth.solicited = false;
  h.bth.mig_req = true;
  h.bth.fecn = false;
  h.bth.becn = false;
  h.bth.ack_req = false;
  h.bth.pkey = 0;
  h.bth.dest_qp = 0;
  h.bth.psn = kPsnMask;
  Headers back;
  size_t len = 0;
  ASSERT_EQ(parse_headers(serialize(h), &back, &len), ParseError::kNone);
  expect_same_headers(h, back);
}

TEST(WireRoundTrip, EveryOpcodeThroughSerializeAndParsePacketWithPayloadLengths) {
  const size_t lengths[] = {0, 1, 2, 3, 4, 5, 1023, 4095, 4096};
  for (const OpcodeSpec& spec : kSpec) {
    SCOPED_TRACE(opcode_info(spec.opcode).name);
    for (size_t n : lengths) {
      SCOPED_TRACE(n);
      Bytes payload(n);
      for (size_t i = 0; i < n; ++i) payload[i] = static_cast<uint8_t>(0xA5 ^ (i * 13));
      Headers h = distinctive_headers(spec.opcode);
      h.bth.pad_count = 3;  // ignored: serialize_packet computes it
      const Bytes pkt = packet(h, payload);
      const size_t pad = (4 - n % 4) % 4;
      ASSERT_EQ(pkt.size(), spec.header_bytes + n + pad);
      EXPECT_EQ(pkt.size() % 4, 0u) << "headers + payload + pad is a whole number of words";
      EXPECT_EQ(static_cast<size_t>((pkt[1] >> 4) & 0x3), pad) << "PadCnt in BTH byte 1";
      for (size_t i = 0; i < pad; ++i) EXPECT_EQ(pkt[spec.header_bytes + n + i], 0) << "pad bytes are zero";

      Headers back;
      std::span<const uint8_t> got;
      const ParseError e = parse_packet(pkt, &back, &got);
      if (!spec.payload && n != 0) {
        EXPECT_EQ(e, ParseError::kUnexpectedPayload);
        continue;
      }
      ASSERT_EQ(e, ParseError::kNone);
      Headers want = h;
      want.bth.pad_count = static_cast<uint8_t>(pad);
      expect_same_headers(want, back);
      ASSERT_EQ(got.size(), n);
      EXPECT_EQ(got.data(), pkt.data() + spec.header_bytes) << "payload is a view into the packet";
      EXPECT_TRUE(std::equal(got.begin(), got.end(), payload.begin()));
    }
  }
}

TEST(WireRoundTrip, PadForIsTheDistanceToTheNextWord) {
  EXPECT_EQ(pad_for(0), 0);
  EXPECT_EQ(pad_for(1), 3);
  EXPECT_EQ(pad_for(2), 2);
  EXPECT_EQ(pad_for(3), 1);
  EXPECT_EQ(pad_for(4), 0);
  EXPECT_EQ(pad_for(4093), 3);
  EXPECT_EQ(pad_for(4096), 0);
}

TEST(WireRoundTrip, SerializeRefusesInvalidOpcodeAndShortPacketBuffers) {
  Headers h = distinctive_headers(0x15);
  uint8_t out[kMaxHeaderBytes + 16];
  EXPECT_EQ(serialize_headers(h, out), 0u);
  EXPECT_EQ(serialize_packet(h, {}, out), 0u);

  h.bth.opcode = kWriteOnly;  // 28 header bytes
  const uint8_t payload[5] = {1, 2, 3, 4, 5};
  // 28 + 5 + 3 pad = 36 bytes needed.
  EXPECT_EQ(serialize_packet(h, payload, std::span<uint8_t>(out, 35)), 0u);
  EXPECT_EQ(serialize_packet(h, payload, std::span<uint8_t>(out, 36)), 36u);
}

// ---- parse errors ----------------------------------------------------------------

TEST(WireParseErrors, TruncatedAtEveryLengthBelowTheHeaderLength) {
  for (const OpcodeSpec& spec : kSpec) {
    SCOPED_TRACE(opcode_info(spec.opcode).name);
    const Bytes full = serialize(distinctive_headers(spec.opcode));
    ASSERT_EQ(full.size(), spec.header_bytes);
    for (size_t n = 0; n < spec.header_bytes; ++n) {
      // A heap copy of exactly n bytes, so ASan catches any over-read.
      const Bytes prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
      Headers h;
      size_t len = 0;
      EXPECT_EQ(parse_headers(prefix, &h, &len), ParseError::kTruncated) << "length " << n;
      EXPECT_EQ(parse_packet_error(prefix), ParseError::kTruncated) << "length " << n;
    }
  }
}

TEST(WireParseErrors, InvalidOpcodes) {
  for (uint8_t op : {uint8_t{0x15}, uint8_t{0x16}, uint8_t{0x1B}, uint8_t{0x1D}, uint8_t{0x20}, uint8_t{0x40},
                     uint8_t{0x64}, uint8_t{0x80}, uint8_t{0xFF}}) {
    Bytes b(kMaxHeaderBytes, 0);
    b[0] = op;
    Headers h;
    size_t len = 0;
    EXPECT_EQ(parse_headers(b, &h, &len), ParseError::kBadOpcode) << int{op};
    EXPECT_EQ(parse_packet_error(b), ParseError::kBadOpcode) << int{op};
    h.bth.opcode = op;
    EXPECT_EQ(check_payload(h, 0), ParseError::kBadOpcode) << int{op};
  }
  // Short input is truncated before the opcode can be judged.
  const Bytes short_bad = {0xFF, 0, 0};
  EXPECT_EQ(parse_packet_error(short_bad), ParseError::kTruncated);
}

TEST(WireParseErrors, NonZeroTransportVersion) {
  for (uint8_t tver = 1; tver < 16; ++tver) {
    Bytes b = serialize(distinctive_headers(kSendOnly));
    b[1] = static_cast<uint8_t>((b[1] & 0xF0) | tver);
    Headers h;
    size_t len = 0;
    EXPECT_EQ(parse_headers(b, &h, &len), ParseError::kBadVersion) << int{tver};
    EXPECT_EQ(parse_packet_error(b), ParseError::kBadVersion) << int{tver};
  }
  // serialize_headers writes TVer as given, so a bad version also comes back.
  Headers h = distinctive_headers(kAcknowledge);
  h.bth.tver = 5;
  const Bytes b = serialize(h);
  EXPECT_EQ(b[1] & 0x0F, 5);
  EXPECT_EQ(parse_packet_error(b), ParseError::kBadVersion);
}

TEST(WireParseErrors, PadCountInconsistentWithPacketLength) {
  const Bytes hdr = serialize(distinctive_headers(kSendOnly));
  auto with = [&](uint8_t pad, size_t rest) {
    Bytes b = hdr;
    b[1] = static_cast<uint8_t>((b[1] & ~0x30) | (pad << 4));
    b.resize(hdr.size() + rest, 0);
    return b;
  };
  // Payload + pad must be a whole number of 4-byte words.
  EXPECT_EQ(parse_packet_error(with(0, 5)), ParseError::kBadPad);
  EXPECT_EQ(parse_packet_error(with(1, 5)), ParseError::kBadPad);
  EXPECT_EQ(parse_packet_error(with(3, 6)), ParseError::kBadPad);
  EXPECT_EQ(parse_packet_error(with(2, 1)), ParseError::kBadPad);
  // Fewer bytes after the headers than the pad count claims.
  EXPECT_EQ(parse_packet_error(with(3, 2)), ParseError::kBadPad);
  EXPECT_EQ(parse_packet_error(with(1, 0)), ParseError::kBadPad);
  // Consistent combinations parse and give payload = rest - pad.
  for (uint8_t pad = 0; pad < 4; ++pad) {
    Headers h;
    std::span<const uint8_t> payload;
    ASSERT_EQ(parse_packet(with(pad, 8), &h, &payload), ParseError::kNone) << int{pad};
    EXPECT_EQ(payload.size(), 8u - pad);
  }
  // Pad on an opcode that carries no payload.
  Bytes ack = serialize(distinctive_headers(kAcknowledge));
  ack[1] = static_cast<uint8_t>(ack[1] | 0x30);
  ack.resize(ack.size() + 3, 0);
  EXPECT_EQ(parse_packet_error(ack), ParseError::kBadPad);

  Headers h = distinctive_headers(kSendOnly);
  h.bth.pad_count = 1;
  EXPECT_EQ(check_payload(h, 4), ParseError::kBadPad);
  EXPECT_EQ(check_payload(h, 3), ParseError::kNone);
  h.bth.pad_count = 0;
  EXPECT_EQ(check_payload(h, 1), ParseError::kBadPad);
}

TEST(WireParseErrors, PayloadOnOpcodesThatCarryNone) {
  for (uint8_t op : {uint8_t{kReadRequest}, uint8_t{kAcknowledge}, uint8_t{kAtomicAcknowledge},
                     uint8_t{kCompareSwap}, uint8_t{kFetchAdd}, uint8_t{kFlush}}) {
    SCOPED_TRACE(opcode_info(op).name);
    Bytes b = serialize(distinctive_headers(op));
    b.resize(b.size() + 4, 0x77);  // 4 payload bytes, pad 0
    EXPECT_EQ(parse_packet_error(b), ParseError::kUnexpectedPayload);
    Headers h = distinctive_headers(op);
    EXPECT_EQ(check_payload(h, 4), ParseError::kUnexpectedPayload);
    EXPECT_EQ(check_payload(h, 0), ParseError::kNone);
  }
}

TEST(WireParseErrors, PayloadLongerThanLargestMtu) {
  for (uint8_t op : {uint8_t{kSendOnly}, uint8_t{kWriteOnly}, uint8_t{kReadResponseMiddle}}) {
    SCOPED_TRACE(opcode_info(op).name);
    Bytes b = serialize(distinctive_headers(op));
    const size_t hlen = b.size();
    b.resize(hlen + 4100, 0);
    EXPECT_EQ(parse_packet_error(b), ParseError::kPayloadTooLong);
    // 4097 payload bytes + 3 pad.
    b[1] = static_cast<uint8_t>((b[1] & ~0x30) | (3 << 4));
    EXPECT_EQ(parse_packet_error(b), ParseError::kPayloadTooLong);
    // Exactly 4096 is fine.
    b[1] = static_cast<uint8_t>(b[1] & ~0x30);
    b.resize(hlen + 4096);
    EXPECT_EQ(parse_packet_error(b), ParseError::kNone);
  }
  Headers h = distinctive_headers(kSendOnly);
  h.bth.pad_count = pad_for(4097);
  EXPECT_EQ(check_payload(h, 4097), ParseError::kPayloadTooLong);
  h.bth.pad_count = 0;
  EXPECT_EQ(check_payload(h, 4096), ParseError::kNone);
  EXPECT_EQ(check_payload(h, 1u << 20), ParseError::kPayloadTooLong);
}

TEST(WireParseErrors, ParseHeadersIgnoresTrailingBytes) {
  Bytes b = serialize(distinctive_headers(kReadRequest));
  b.resize(b.size() + 100, 0xAB);
  Headers h;
  size_t len = 0;
  EXPECT_EQ(parse_headers(b, &h, &len), ParseError::kNone);
  EXPECT_EQ(len, 28u);
}

TEST(WireParseErrors, ErrorNames) {
  EXPECT_EQ(parse_error_name(ParseError::kNone), "none");
  EXPECT_EQ(parse_error_name(ParseError::kTruncated), "truncated");
  EXPECT_EQ(parse_error_name(ParseError::kBadOpcode), "bad_opcode");
  EXPECT_EQ(parse_error_name(ParseError::kBadVersion), "bad_version");
  EXPECT_EQ(parse_error_name(ParseError::kBadPad), "bad_pad");
  EXPECT_EQ(parse_error_name(ParseError::kUnexpectedPayload), "unexpected_payload");
  EXPECT_EQ(parse_error_name(ParseError::kPayloadTooLong), "payload_too_long");
  EXPECT_EQ(parse_error_name(ParseError::kCount), "unknown");
}

// ---- PSN arithmetic ----------------------------------------------------------------

TEST(WirePsn, AddWrapsAtTwoToTheTwentyFour) {
  EXPECT_EQ(psn_add(0, 1), 1u);
  EXPECT_EQ(psn_add(0xFFFFFF, 1), 0u);
  EXPECT_EQ(psn_add(0xFFFFFE, 5), 3u);
  EXPECT_EQ(psn_add(5, kPsnMask), 4u) << "adding 2^24 - 1 steps back by one";
  EXPECT_EQ(psn_add(0, kPsnMask), 0xFFFFFFu);
  EXPECT_EQ(psn_add(0x123456, 0x1000000), 0x123456u) << "adding 2^24 is the identity";
  EXPECT_EQ(psn_add(0x800000, 0x800000), 0u);
}

TEST(WirePsn, DiffAcrossTheWrap) {
  EXPECT_EQ(psn_diff(0, 0xFFFFFF), 1);
  EXPECT_EQ(psn_diff(0xFFFFFF, 0), -1);
  EXPECT_EQ(psn_diff(2, 0xFFFFFE), 4);
  EXPECT_EQ(psn_diff(0xFFFFFE, 2), -4);
  EXPECT_EQ(psn_diff(0x123456, 0x123456), 0);
  EXPECT_EQ(psn_diff(0x000010, 0x000001), 15);
  EXPECT_EQ(psn_diff(0x000001, 0x000010), -15);
  // Inputs are 24-bit; bits above are ignored.
  EXPECT_EQ(psn_diff(0x01000005, 0x00000003), 2);
}

TEST(WirePsn, DiffJustInsideTheHalfWindow) {
  const int32_t kHalf = 1 << 23;
  EXPECT_EQ(psn_diff(kHalf - 1, 0), kHalf - 1);
  EXPECT_EQ(psn_diff(0, kHalf - 1), -(kHalf - 1));
  EXPECT_EQ(psn_diff(kHalf + 1, 0), -(kHalf - 1));
  EXPECT_EQ(psn_diff(0, kHalf + 1), kHalf - 1);
  // Same distances straddling the wrap.
  EXPECT_EQ(psn_diff(psn_add(0xFFFFF0, kHalf - 1), 0xFFFFF0), kHalf - 1);
  EXPECT_EQ(psn_diff(psn_add(0xFFFFF0, kHalf + 1), 0xFFFFF0), -(kHalf - 1));
}

// wire.h documents psn_diff as "Signed distance a - b in (-2^23, 2^23]": a
// distance of exactly 2^23 must come back as +2^23, so neither PSN is before
// the other. The implementation returns -2^23 instead, which makes
// psn_before(a, b) and psn_before(b, a) both true.
TEST(WirePsn, DiffAtExactlyHalfWindowIsPositiveAsDocumented) {
  const int32_t kHalf = 1 << 23;
  EXPECT_EQ(psn_diff(kHalf, 0), kHalf);
  EXPECT_EQ(psn_diff(0, kHalf), kHalf);
  EXPECT_EQ(psn_diff(0xFFFFFF, 0x7FFFFF), kHalf);
  EXPECT_FALSE(psn_before(kHalf, 0) && psn_before(0, kHalf))
      << "two PSNs cannot each be before the other";
}

TEST(WirePsn, DiffStaysInRangeForManyPairs) {
  const int32_t kHalf = 1 << 23;
  const uint32_t samples[] = {0, 1, 2, 0x7FFFFE, 0x7FFFFF, 0x800001, 0x800002, 0xFFFFFE, 0xFFFFFF, 0x123456};
  for (uint32_t a : samples) {
    for (uint32_t b : samples) {
      if (((a - b) & kPsnMask) == static_cast<uint32_t>(kHalf)) continue;  // covered above
      const int32_t d = psn_diff(a, b);
      EXPECT_GT(d, -kHalf) << a << " - " << b;
      EXPECT_LT(d, kHalf) << a << " - " << b;
      EXPECT_EQ(psn_add(b, static_cast<uint32_t>(d)), a) << "b + (a - b) == a";
      EXPECT_EQ(psn_diff(b, a), -d) << a << ", " << b;
    }
  }
}

TEST(WirePsn, BeforeAcrossTheWrap) {
  EXPECT_TRUE(psn_before(0xFFFFFF, 0));
  EXPECT_FALSE(psn_before(0, 0xFFFFFF));
  EXPECT_TRUE(psn_before(0xFFFFF0, 0x000010));
  EXPECT_FALSE(psn_before(0x000010, 0xFFFFF0));
  EXPECT_FALSE(psn_before(0x42, 0x42));
  EXPECT_TRUE(psn_before(0x41, 0x42));
  EXPECT_FALSE(psn_before(0x7FFFFF, 0)) << "2^23 - 1 ahead is after";
  EXPECT_TRUE(psn_before(0x800001, 0)) << "2^23 + 1 ahead is 2^23 - 1 behind";
}

// ---- AETH syndrome ------------------------------------------------------------------

TEST(WireSyndrome, MakeAndSplit) {
  EXPECT_EQ(make_syndrome(kAckTypeAck, kAckNoCredit), 0x1F);
  EXPECT_EQ(make_syndrome(kAckTypeAck, 0), 0x00);
  EXPECT_EQ(make_syndrome(kAckTypeRnrNak, 14), 0x2E);
  EXPECT_EQ(make_syndrome(kAckTypeNak, kNakPsnSequenceError), 0x60);
  EXPECT_EQ(make_syndrome(kAckTypeNak, kNakRemoteOperationalError), 0x63);
  EXPECT_EQ(make_syndrome(kAckTypeAck, 0xFF), 0x1F) << "value is 5 bits";
  EXPECT_EQ(make_syndrome(kAckTypeAck, 0x20), 0x00) << "value bit 5 must not leak into the type";

  EXPECT_EQ(syndrome_type(0x1F), kAckTypeAck);
  EXPECT_EQ(syndrome_value(0x1F), 0x1F);
  EXPECT_EQ(syndrome_type(0x2E), kAckTypeRnrNak);
  EXPECT_EQ(syndrome_value(0x2E), 14);
  EXPECT_EQ(syndrome_type(0x62), kAckTypeNak);
  EXPECT_EQ(syndrome_value(0x62), kNakRemoteAccessError);
  EXPECT_EQ(static_cast<int>(syndrome_type(0x40)), 2) << "reserved type is reported as is";
  EXPECT_EQ(syndrome_type(0xE1), kAckTypeNak) << "bit 7 is reserved and ignored";
  EXPECT_EQ(syndrome_value(0xE1), 1);

  for (uint8_t type : {uint8_t{0}, uint8_t{1}, uint8_t{2}, uint8_t{3}}) {
    for (uint8_t value = 0; value < 32; ++value) {
      const uint8_t s = make_syndrome(static_cast<AckType>(type), value);
      EXPECT_EQ(syndrome_type(s), type);
      EXPECT_EQ(syndrome_value(s), value);
      EXPECT_EQ(s & 0x80, 0);
    }
  }
}

}  // namespace
}  // namespace ferry::nic::wire
