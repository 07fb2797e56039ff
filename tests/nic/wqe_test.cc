// Work-queue entry layouts (wqe.h). The byte offsets are an interface: a
// remote peer rewrites WQEs in place with RDMA WRITEs (HyperLoop), so the
// tests read and write raw slot bytes, not only encode/decode pairs.
#include "ferry/nic/wqe.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace ferry::nic {
namespace {

using Bytes = std::vector<uint8_t>;

template <typename T>
T load_le(const Bytes& slot, size_t offset) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(slot[offset + i]) << (8 * i));
  return v;
}

template <typename T>
void store_le(Bytes& slot, size_t offset, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) slot[offset + i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}

uint64_t addr_of(const void* p) { return reinterpret_cast<uint64_t>(p); }

// ---- strides ------------------------------------------------------------------

TEST(WqeStride, SendStrideHoldsHeaderPlusSgesOrInline) {
  EXPECT_EQ(send_wqe_stride(0, 0), 64u) << "at least one SGE's room";
  EXPECT_EQ(send_wqe_stride(1, 0), 64u);
  EXPECT_EQ(send_wqe_stride(2, 0), 128u);
  EXPECT_EQ(send_wqe_stride(5, 0), 128u);   // 48 + 80 = 128
  EXPECT_EQ(send_wqe_stride(6, 0), 256u);   // 48 + 96 = 144
  EXPECT_EQ(send_wqe_stride(13, 0), 256u);  // 48 + 208 = 256
  EXPECT_EQ(send_wqe_stride(14, 0), 512u);
  EXPECT_EQ(send_wqe_stride(kMaxSendSge, 0), 1024u);
  EXPECT_EQ(send_wqe_stride(1, 16), 64u);
  EXPECT_EQ(send_wqe_stride(1, 17), 128u);
  EXPECT_EQ(send_wqe_stride(1, 100), 256u);
  EXPECT_EQ(send_wqe_stride(1, 208), 256u);
  EXPECT_EQ(send_wqe_stride(1, 209), 512u);
  EXPECT_EQ(send_wqe_stride(1, kMaxInlineData), 1024u);
  EXPECT_EQ(send_wqe_stride(4, 100), 256u) << "the larger of SGEs and inline decides";
}

TEST(WqeStride, RecvStrideHoldsHeaderPlusSges) {
  EXPECT_EQ(recv_wqe_stride(0), 32u);
  EXPECT_EQ(recv_wqe_stride(1), 32u);
  EXPECT_EQ(recv_wqe_stride(2), 64u);
  EXPECT_EQ(recv_wqe_stride(3), 64u);
  EXPECT_EQ(recv_wqe_stride(4), 128u);
  EXPECT_EQ(recv_wqe_stride(7), 128u);
  EXPECT_EQ(recv_wqe_stride(8), 256u);
  EXPECT_EQ(recv_wqe_stride(kMaxRecvSge), 512u);
}

// ---- send WQE layout ----------------------------------------------------------

TEST(WqeLayout, EncodePutsFieldsAtDocumentedOffsets) {
  const Sge sge{0x1112131415161718ULL, 0x21222324, 0x31323334};
  SendWr wr;
  wr.wr_id = 0x0102030405060708ULL;
  wr.opcode = WrOpcode::kAtomicCmpAndSwp;
  wr.flags = kSendSignaled | kSendFence;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.imm_data = 0x41424344;
  wr.remote_addr = 0xA1A2A3A4A5A6A7A8ULL;
  wr.rkey = 0xB1B2B3B4;
  wr.compare_add = 0xC1C2C3C4C5C6C7C8ULL;
  wr.swap = 0xD1D2D3D4D5D6D7D8ULL;
  Bytes slot(64, 0);
  encode_send_wqe(wr, 0, 0, slot);

  EXPECT_EQ(slot[0], 6) << "opcode at 0 (ATOMIC_CMP_AND_SWP = 6)";
  EXPECT_EQ(slot[1], kSendSignaled | kSendFence) << "flags at 1";
  EXPECT_EQ(load_le<uint16_t>(slot, 2), 1) << "num_ds at 2-3";
  EXPECT_EQ(load_le<uint32_t>(slot, 4), 0x41424344u) << "imm at 4-7";
  EXPECT_EQ(load_le<uint64_t>(slot, 8), 0x0102030405060708ULL) << "wr_id at 8-15";
  EXPECT_EQ(load_le<uint64_t>(slot, 16), 0xA1A2A3A4A5A6A7A8ULL) << "remote_addr at 16-23";
  EXPECT_EQ(load_le<uint32_t>(slot, 24), 0xB1B2B3B4u) << "rkey at 24-27";
  EXPECT_EQ(load_le<uint32_t>(slot, 28), 0u) << "aux at 28-31";
  EXPECT_EQ(load_le<uint64_t>(slot, 32), 0xC1C2C3C4C5C6C7C8ULL) << "compare_add at 32-39";
  EXPECT_EQ(load_le<uint64_t>(slot, 40), 0xD1D2D3D4D5D6D7D8ULL) << "swap at 40-47";
  EXPECT_EQ(load_le<uint64_t>(slot, 48), 0x1112131415161718ULL) << "SGE addr at 48-55";
  EXPECT_EQ(load_le<uint32_t>(slot, 56), 0x21222324u) << "SGE length at 56-59";
  EXPECT_EQ(load_le<uint32_t>(slot, 60), 0x31323334u) << "SGE lkey at 60-63";
}

TEST(WqeLayout, DecodeReadsHandWrittenSlotBytes) {
  // A slot as a remote peer would write it, byte by byte, without encode.
  Bytes slot(128, 0);
  slot[0] = static_cast<uint8_t>(WrOpcode::kRdmaWriteWithImm);
  slot[1] = kSendSolicited;
  store_le<uint16_t>(slot, 2, 2);
  store_le<uint32_t>(slot, 4, 0xFACEB00C);
  store_le<uint64_t>(slot, 8, 0x8877665544332211ULL);
  store_le<uint64_t>(slot, 16, 0x0000700012345678ULL);
  store_le<uint32_t>(slot, 24, 0x00ABCDEF);
  store_le<uint32_t>(slot, 28, 0x5);
  store_le<uint64_t>(slot, 32, 0x1111222233334444ULL);
  store_le<uint64_t>(slot, 40, 0x5555666677778888ULL);
  store_le<uint64_t>(slot, 48, 0x1000);
  store_le<uint32_t>(slot, 56, 64);
  store_le<uint32_t>(slot, 60, 0x101);
  store_le<uint64_t>(slot, 64, 0x2000);
  store_le<uint32_t>(slot, 72, 32);
  store_le<uint32_t>(slot, 76, 0x202);

  DecodedSendWqe w;
  ASSERT_EQ(decode_send_wqe(slot, 2, 0, &w), WqeError::kNone);
  EXPECT_EQ(w.opcode, WrOpcode::kRdmaWriteWithImm);
  EXPECT_EQ(w.flags, kSendSolicited);
  EXPECT_EQ(w.num_ds, 2);
  EXPECT_EQ(w.imm_data, 0xFACEB00Cu);
  EXPECT_EQ(w.wr_id, 0x8877665544332211ULL);
  EXPECT_EQ(w.remote.remote_addr, 0x0000700012345678ULL);
  EXPECT_EQ(w.remote.rkey, 0x00ABCDEFu);
  EXPECT_EQ(w.remote.aux, 5u);
  EXPECT_EQ(w.atomic.compare_add, 0x1111222233334444ULL);
  EXPECT_EQ(w.atomic.swap, 0x5555666677778888ULL);
  ASSERT_EQ(w.data, slot.data() + 48);
  const WqeDataSeg s0 = load_data_seg(w.data);
  const WqeDataSeg s1 = load_data_seg(w.data + 16);
  EXPECT_EQ(s0.addr, 0x1000u);
  EXPECT_EQ(s0.length, 64u);
  EXPECT_EQ(s0.lkey, 0x101u);
  EXPECT_EQ(s1.addr, 0x2000u);
  EXPECT_EQ(s1.length, 32u);
  EXPECT_EQ(s1.lkey, 0x202u);
}

TEST(WqeLayout, RemoteRewriteOfOpcodeAndRemoteAddressIsSeenByDecode) {
  const Sge sge{0x4000, 8, 0x77};
  SendWr wr;
  wr.opcode = WrOpcode::kNop;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  Bytes slot(64, 0);
  encode_send_wqe(wr, 0, 0, slot);
  // The peer turns the NOP into a FETCH_AND_ADD on its own memory.
  slot[0] = static_cast<uint8_t>(WrOpcode::kAtomicFetchAndAdd);
  store_le<uint64_t>(slot, 16, 0xDEAD0000);
  store_le<uint32_t>(slot, 24, 0x99);
  store_le<uint64_t>(slot, 32, 3);
  DecodedSendWqe w;
  ASSERT_EQ(decode_send_wqe(slot, 1, 0, &w), WqeError::kNone);
  EXPECT_EQ(w.opcode, WrOpcode::kAtomicFetchAndAdd);
  EXPECT_EQ(w.remote.remote_addr, 0xDEAD0000u);
  EXPECT_EQ(w.remote.rkey, 0x99u);
  EXPECT_EQ(w.atomic.compare_add, 3u);
  EXPECT_EQ(load_data_seg(w.data).lkey, 0x77u);
}

// ---- round trips ----------------------------------------------------------------

TEST(WqeRoundTrip, EveryOpcodeWithSges) {
  const Sge sges[3] = {{0x10000, 100, 0x101}, {0x20000, 0, 0x202}, {0x30000, 4096, 0x303}};
  for (uint8_t op = kWrOpcodeFirst; op < kWrOpcodeEnd; ++op) {
    const auto opcode = static_cast<WrOpcode>(op);
    SCOPED_TRACE(wr_opcode_name(opcode));
    SendWr wr;
    wr.wr_id = 0xABC0000000000000ULL + op;
    wr.opcode = opcode;
    wr.flags = kSendSignaled | kSendSolicited;
    wr.sg_list = sges;
    wr.imm_data = 0x1000u + op;
    wr.remote_addr = 0x7F0000001000ULL + op;
    wr.rkey = 0x5500u + op;
    wr.compare_add = 0xCCCCu + op;
    wr.swap = 0x5555u + op;
    wr.index = 0x123456789ULL;
    wr.flush_persistent = true;
    const uint32_t wait_cq = 17, enable_qp = 0x000345;
    const uint32_t stride = send_wqe_stride(3, 0);
    Bytes slot(stride, 0);
    encode_send_wqe(wr, wait_cq, enable_qp, slot);

    DecodedSendWqe w;
    ASSERT_EQ(decode_send_wqe(slot, 3, 0, &w), WqeError::kNone);
    EXPECT_EQ(w.opcode, opcode);
    EXPECT_EQ(w.flags, kSendSignaled | kSendSolicited);
    EXPECT_EQ(w.wr_id, wr.wr_id);
    EXPECT_EQ(w.imm_data, wr.imm_data);
    ASSERT_EQ(w.num_ds, 3);
    for (int i = 0; i < 3; ++i) {
      const WqeDataSeg s = load_data_seg(w.data + i * 16);
      EXPECT_EQ(s.addr, sges[i].addr);
      EXPECT_EQ(s.length, sges[i].length);
      EXPECT_EQ(s.lkey, sges[i].lkey);
    }
    switch (opcode) {
      case WrOpcode::kWait:
        EXPECT_EQ(w.remote.remote_addr, 0x123456789ULL) << "WAIT: completion index";
        EXPECT_EQ(w.remote.rkey, wait_cq) << "WAIT: CQ number";
        break;
      case WrOpcode::kSendEnable:
      case WrOpcode::kRecvEnable:
        EXPECT_EQ(w.remote.remote_addr, 0x123456789ULL) << "ENABLE: producer index";
        EXPECT_EQ(w.remote.rkey, enable_qp) << "ENABLE: QP number";
        break;
      case WrOpcode::kFlush:
        EXPECT_EQ(w.remote.remote_addr, wr.remote_addr);
        EXPECT_EQ(w.remote.rkey, wr.rkey);
        EXPECT_EQ(w.remote.aux, 1u) << "persistence placement";
        break;
      case WrOpcode::kAtomicCmpAndSwp:
      case WrOpcode::kAtomicFetchAndAdd:
        EXPECT_EQ(w.remote.remote_addr, wr.remote_addr);
        EXPECT_EQ(w.remote.rkey, wr.rkey);
        EXPECT_EQ(w.atomic.compare_add, wr.compare_add);
        EXPECT_EQ(w.atomic.swap, wr.swap);
        EXPECT_EQ(w.remote.aux, 0u);
        break;
      default:
        EXPECT_EQ(w.remote.remote_addr, wr.remote_addr);
        EXPECT_EQ(w.remote.rkey, wr.rkey);
        EXPECT_EQ(w.remote.aux, 0u);
        break;
    }
  }
}

TEST(WqeRoundTrip, FlushGlobalVisibilityClearsAux) {
  SendWr wr;
  wr.opcode = WrOpcode::kFlush;
  wr.remote_addr = 0x1234;
  wr.rkey = 0x42;
  wr.flush_persistent = false;
  Bytes slot(64, 0);
  encode_send_wqe(wr, 0, 0, slot);
  EXPECT_EQ(load_le<uint32_t>(slot, 28), 0u);
  DecodedSendWqe w;
  ASSERT_EQ(decode_send_wqe(slot, 1, 0, &w), WqeError::kNone);
  EXPECT_EQ(w.opcode, WrOpcode::kFlush);
  EXPECT_EQ(w.remote.aux, 0u);
  EXPECT_EQ(w.remote.remote_addr, 0x1234u);
  EXPECT_EQ(w.remote.rkey, 0x42u);
  EXPECT_EQ(w.num_ds, 0);
}

// The requester takes a FLUSH's length from the WQE's compare_add field
// (src/nic/requester.cc, start_next_wqe: `s.length = ... wqe.atomic.compare_add`),
// but encode_send_wqe writes no atomic segment for FLUSH, so every posted
// FLUSH goes on the wire with RETH DMA length 0, and the responder then skips
// the rkey and bounds check (a FLUSH with a bad rkey completes successfully).
// Regression: encode used to drop the FLUSH length, so every FLUSH went out
// with DMA length 0 and skipped the responder's rkey and bounds checks.
TEST(WqeRoundTrip, FlushLengthSurvivesEncode) {
  SendWr wr;
  wr.opcode = WrOpcode::kFlush;
  wr.remote_addr = 0x10000;
  wr.rkey = 0x42;
  wr.flush_length = 4096;  // carried in the atomic segment's compare_add
  Bytes slot(64, 0);
  encode_send_wqe(wr, 0, 0, slot);
  DecodedSendWqe w;
  ASSERT_EQ(decode_send_wqe(slot, 1, 0, &w), WqeError::kNone);
  EXPECT_EQ(w.atomic.compare_add, 4096u) << "FLUSH length lost between post_send and the requester";
}

TEST(WqeRoundTrip, WaitAndEnableKeepTheirFullSixtyFourBitIndex) {
  for (WrOpcode op : {WrOpcode::kWait, WrOpcode::kSendEnable, WrOpcode::kRecvEnable}) {
    SendWr wr;
    wr.opcode = op;
    wr.index = 0xFEDCBA9876543210ULL;
    Bytes slot(64, 0);
    encode_send_wqe(wr, 0xC0FFEE, 0xBEEF, slot);
    EXPECT_EQ(load_le<uint64_t>(slot, 16), 0xFEDCBA9876543210ULL) << wr_opcode_name(op);
    EXPECT_EQ(load_le<uint32_t>(slot, 24), op == WrOpcode::kWait ? 0xC0FFEEu : 0xBEEFu) << wr_opcode_name(op);
  }
}

TEST(WqeRoundTrip, InlinePayloadIsCopiedIntoTheSlot) {
  uint8_t a[60], b[40];
  for (int i = 0; i < 60; ++i) a[i] = static_cast<uint8_t>(i + 1);
  for (int i = 0; i < 40; ++i) b[i] = static_cast<uint8_t>(200 - i);
  const Sge sges[2] = {{addr_of(a), 60, 0}, {addr_of(b), 40, 0}};
  SendWr wr;
  wr.wr_id = 9;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kSendInline | kSendSignaled;
  wr.sg_list = sges;
  const uint32_t stride = send_wqe_stride(1, 100);
  ASSERT_EQ(stride, 256u);
  Bytes slot(stride, 0);
  encode_send_wqe(wr, 0, 0, slot);
  EXPECT_EQ(load_le<uint16_t>(slot, 2), 100) << "num_ds holds the inline byte count";
  EXPECT_EQ(std::memcmp(slot.data() + 48, a, 60), 0);
  EXPECT_EQ(std::memcmp(slot.data() + 108, b, 40), 0);
  EXPECT_EQ(slot[148], 0) << "nothing written past the inline bytes";

  // Changing the source after encoding does not change the WQE.
  a[0] = 0xFF;
  DecodedSendWqe w;
  ASSERT_EQ(decode_send_wqe(slot, 1, 100, &w), WqeError::kNone);
  EXPECT_EQ(w.flags, kSendInline | kSendSignaled);
  EXPECT_EQ(w.num_ds, 100);
  EXPECT_EQ(w.data, slot.data() + 48);
  EXPECT_EQ(w.data[0], 1);
  EXPECT_EQ(w.data[99], 200 - 39);
}

TEST(WqeRoundTrip, InlineWriteWithImmAndEmptyInline) {
  uint8_t payload[3] = {7, 8, 9};
  const Sge sge{addr_of(payload), 3, 0};
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaWriteWithImm;
  wr.flags = kSendInline;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.imm_data = 0x600D;
  wr.remote_addr = 0x9000;
  wr.rkey = 5;
  Bytes slot(64, 0);
  encode_send_wqe(wr, 0, 0, slot);
  DecodedSendWqe w;
  ASSERT_EQ(decode_send_wqe(slot, 1, 16, &w), WqeError::kNone);
  EXPECT_EQ(w.num_ds, 3);
  EXPECT_EQ(w.imm_data, 0x600Du);
  EXPECT_EQ(w.remote.remote_addr, 0x9000u);
  EXPECT_EQ(w.data[0], 7);
  EXPECT_EQ(w.data[2], 9);

  wr.sg_list = {};
  Bytes empty(64, 0);
  encode_send_wqe(wr, 0, 0, empty);
  ASSERT_EQ(decode_send_wqe(empty, 1, 0, &w), WqeError::kNone);
  EXPECT_EQ(w.num_ds, 0);
}

// ---- decode rejections ----------------------------------------------------------------

Bytes valid_write_slot(uint32_t stride) {
  const Sge sge{0x1000, 8, 1};
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  Bytes slot(stride, 0);
  encode_send_wqe(wr, 0, 0, slot);
  return slot;
}

TEST(WqeDecode, OpcodeZeroIsAnEmptySlotAndUnknownOpcodesAreRejected) {
  DecodedSendWqe w;
  for (int op = 0; op < 256; ++op) {
    Bytes slot = valid_write_slot(64);
    slot[0] = static_cast<uint8_t>(op);
    const WqeError e = decode_send_wqe(slot, 1, 0, &w);
    if (op == 0) {
      EXPECT_EQ(e, WqeError::kEmpty);
    } else if (op < kWrOpcodeEnd) {
      EXPECT_EQ(e, WqeError::kNone) << op;
    } else {
      EXPECT_EQ(e, WqeError::kBadOpcode) << op;
    }
  }
  Bytes zeroed(64, 0);
  EXPECT_EQ(decode_send_wqe(zeroed, 1, 0, &w), WqeError::kEmpty) << "zeroed memory holds no WQE";
}

TEST(WqeDecode, ARecvSlotWithoutThePostedFlagHoldsNoRecv) {
  DecodedRecvWqe r;
  Bytes zeroed(32, 0);
  EXPECT_EQ(decode_recv_wqe(zeroed, 1, &r), WqeError::kEmpty);
  const Sge sge{0x1000, 8, 1};
  Bytes slot(32, 0);
  encode_recv_wqe(RecvWr{5, std::span<const Sge>(&sge, 1)}, slot);
  EXPECT_EQ(decode_recv_wqe(slot, 1, &r), WqeError::kNone);
  EXPECT_EQ(r.wr_id, 5u);
  RecvWqeHeader hdr;
  std::memcpy(&hdr, slot.data(), sizeof(hdr));
  EXPECT_EQ(hdr.flags, kRecvWqePosted);
}

TEST(WqeDecode, RejectsUnknownFlagBits) {
  DecodedSendWqe w;
  for (int bit = 0; bit < 8; ++bit) {
    Bytes slot = valid_write_slot(64);
    slot[1] = static_cast<uint8_t>(1u << bit);
    const uint8_t flag = static_cast<uint8_t>(1u << bit);
    // Inline with num_ds = 1 is one inline byte: fits max_inline 16.
    const WqeError e = decode_send_wqe(slot, 1, 16, &w);
    if (flag & (kSendSignaled | kSendFence | kSendSolicited | kSendInline)) {
      EXPECT_EQ(e, WqeError::kNone) << "flag bit " << bit;
    } else {
      EXPECT_EQ(e, WqeError::kBadFlags) << "flag bit " << bit;
    }
  }
  Bytes slot = valid_write_slot(64);
  slot[1] = kSendSignaled | kSendFence | kSendSolicited | kSendInline;
  EXPECT_EQ(decode_send_wqe(slot, 1, 16, &w), WqeError::kNone);
  slot[1] = 0xF0 | kSendSignaled;
  EXPECT_EQ(decode_send_wqe(slot, 1, 16, &w), WqeError::kBadFlags);
}

TEST(WqeDecode, RejectsMoreSgesThanTheQueueAllowsOrTheSlotHolds) {
  DecodedSendWqe w;
  Bytes slot = valid_write_slot(128);  // room for 5 SGEs
  store_le<uint16_t>(slot, 2, 2);
  EXPECT_EQ(decode_send_wqe(slot, 2, 0, &w), WqeError::kNone);
  store_le<uint16_t>(slot, 2, 3);
  EXPECT_EQ(decode_send_wqe(slot, 2, 0, &w), WqeError::kTooManySge) << "above the queue's max_sge";
  store_le<uint16_t>(slot, 2, 5);
  EXPECT_EQ(decode_send_wqe(slot, kMaxSendSge, 0, &w), WqeError::kNone) << "exactly fills the slot";
  store_le<uint16_t>(slot, 2, 6);
  EXPECT_EQ(decode_send_wqe(slot, kMaxSendSge, 0, &w), WqeError::kTooManySge) << "beyond the slot";
  store_le<uint16_t>(slot, 2, 0xFFFF);
  EXPECT_EQ(decode_send_wqe(slot, UINT32_MAX, 0, &w), WqeError::kTooManySge) << "beyond the slot";
  store_le<uint16_t>(slot, 2, 0);
  EXPECT_EQ(decode_send_wqe(slot, 1, 0, &w), WqeError::kNone);
}

TEST(WqeDecode, RejectsInlineLongerThanMaxInlineOrTheSlot) {
  DecodedSendWqe w;
  Bytes slot = valid_write_slot(256);  // 208 bytes of room
  slot[1] = kSendInline;
  store_le<uint16_t>(slot, 2, 100);
  EXPECT_EQ(decode_send_wqe(slot, 1, 100, &w), WqeError::kNone);
  store_le<uint16_t>(slot, 2, 101);
  EXPECT_EQ(decode_send_wqe(slot, 1, 100, &w), WqeError::kInlineTooLong);
  store_le<uint16_t>(slot, 2, 208);
  EXPECT_EQ(decode_send_wqe(slot, 1, kMaxInlineData, &w), WqeError::kNone);
  store_le<uint16_t>(slot, 2, 209);
  EXPECT_EQ(decode_send_wqe(slot, 1, kMaxInlineData, &w), WqeError::kInlineTooLong) << "beyond the slot";
  // Inline bytes are not SGEs: max_sge does not limit them.
  store_le<uint16_t>(slot, 2, 50);
  EXPECT_EQ(decode_send_wqe(slot, 1, 64, &w), WqeError::kNone);
  // With the inline flag clear, the same count is an SGE count.
  slot[1] = 0;
  EXPECT_EQ(decode_send_wqe(slot, 1, 64, &w), WqeError::kTooManySge);
}

// ---- receive WQEs ---------------------------------------------------------------------

TEST(RecvWqe, EncodeLayoutAndRoundTrip) {
  const Sge sges[3] = {{0xA000, 10, 0x11}, {0xB000, 20, 0x22}, {0xC000, 30, 0x33}};
  const RecvWr wr{0x0123456789ABCDEFULL, sges};
  const uint32_t stride = recv_wqe_stride(3);
  ASSERT_EQ(stride, 64u);
  Bytes slot(stride, 0);
  encode_recv_wqe(wr, slot);
  EXPECT_EQ(load_le<uint64_t>(slot, 0), 0x0123456789ABCDEFULL) << "wr_id at 0-7";
  EXPECT_EQ(load_le<uint16_t>(slot, 8), 3) << "num_sge at 8-9";
  EXPECT_EQ(load_le<uint64_t>(slot, 16), 0xA000u) << "first SGE at 16";
  EXPECT_EQ(load_le<uint32_t>(slot, 24), 10u);
  EXPECT_EQ(load_le<uint32_t>(slot, 28), 0x11u);
  EXPECT_EQ(load_le<uint64_t>(slot, 48), 0xC000u) << "third SGE at 48";

  DecodedRecvWqe r;
  ASSERT_EQ(decode_recv_wqe(slot, 3, &r), WqeError::kNone);
  EXPECT_EQ(r.wr_id, 0x0123456789ABCDEFULL);
  EXPECT_EQ(r.num_sge, 3);
  EXPECT_EQ(r.sges, slot.data() + 16);
  for (int i = 0; i < 3; ++i) {
    const WqeDataSeg s = load_data_seg(r.sges + i * 16);
    EXPECT_EQ(s.addr, sges[i].addr);
    EXPECT_EQ(s.length, sges[i].length);
    EXPECT_EQ(s.lkey, sges[i].lkey);
  }
}

TEST(RecvWqe, ZeroSgeRecvRoundTrips) {
  const RecvWr wr{77, {}};
  Bytes slot(32, 0xCC);
  encode_recv_wqe(wr, slot);
  DecodedRecvWqe r;
  ASSERT_EQ(decode_recv_wqe(slot, 1, &r), WqeError::kNone);
  EXPECT_EQ(r.wr_id, 77u);
  EXPECT_EQ(r.num_sge, 0);
}

TEST(RecvWqe, DecodeRejectsMoreSgesThanMaxOrSlot) {
  Bytes slot(64, 0);  // room for 3 SGEs
  DecodedRecvWqe r;
  store_le<uint16_t>(slot, 10, kRecvWqePosted);
  store_le<uint16_t>(slot, 8, 2);
  EXPECT_EQ(decode_recv_wqe(slot, 2, &r), WqeError::kNone);
  EXPECT_EQ(decode_recv_wqe(slot, 1, &r), WqeError::kTooManySge) << "above max_sge";
  store_le<uint16_t>(slot, 8, 3);
  EXPECT_EQ(decode_recv_wqe(slot, kMaxRecvSge, &r), WqeError::kNone);
  store_le<uint16_t>(slot, 8, 4);
  EXPECT_EQ(decode_recv_wqe(slot, kMaxRecvSge, &r), WqeError::kTooManySge) << "beyond the slot";
  store_le<uint16_t>(slot, 8, 0xFFFF);
  EXPECT_EQ(decode_recv_wqe(slot, UINT32_MAX, &r), WqeError::kTooManySge);
}

}  // namespace
}  // namespace ferry::nic
