// libFuzzer target: decoding send and receive WQEs from slots whose bytes a
// remote peer controls (wqe.h).
//
// Input: [send stride code][max_sge][max_inline lo][max_inline hi]
//        [recv stride code][recv max_sge] slot bytes...
// The slot is a heap buffer of exactly the chosen stride, so ASan reports any
// read past it. When a decode succeeds, every data segment or inline byte it
// reports is read (and summed) to prove it lies inside the slot; the decoded
// WQE is then re-encoded and decoded again, and must come back the same.
//
// Run: ./wqe_decode_fuzz -max_total_time=60 ../tests/fuzz/corpus/wqe_decode_fuzz
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "ferry/nic/wqe.h"

namespace {

using namespace ferry::nic;

#define FUZZ_CHECK(cond)            \
  do {                              \
    if (!(cond)) __builtin_trap();  \
  } while (0)

volatile uint64_t g_sink;

constexpr size_t kConfigBytes = 6;

std::unique_ptr<uint8_t[]> make_slot(size_t stride, const uint8_t* bytes, size_t n) {
  auto slot = std::make_unique<uint8_t[]>(stride);  // value-initialized: zero
  std::memcpy(slot.get(), bytes, n < stride ? n : stride);
  return slot;
}

void fuzz_send(const uint8_t* config, const uint8_t* body, size_t body_size) {
  const uint32_t stride = 64u << (config[0] % 5);                         // 64 .. 1024
  const uint32_t max_sge = config[1] % (kMaxSendSge + 3);                 // a little beyond the real limit
  const uint32_t max_inline = (config[2] | config[3] << 8) % 1100;        // beyond 976 too
  auto slot = make_slot(stride, body, body_size);
  const std::span<const uint8_t> span(slot.get(), stride);

  DecodedSendWqe w;
  if (decode_send_wqe(span, max_sge, max_inline, &w) != WqeError::kNone) return;
  FUZZ_CHECK(valid_wr_opcode(static_cast<uint8_t>(w.opcode)));
  FUZZ_CHECK((w.flags & ~(kSendSignaled | kSendFence | kSendSolicited | kSendInline)) == 0);
  FUZZ_CHECK(w.data == slot.get() + kWqeDataOffset);
  uint64_t sum = 0;
  std::vector<Sge> sges;
  if (w.flags & kSendInline) {
    FUZZ_CHECK(w.num_ds <= max_inline);
    for (uint16_t i = 0; i < w.num_ds; ++i) sum += w.data[i];
    sges.push_back(Sge{reinterpret_cast<uint64_t>(w.data), w.num_ds, 0});
  } else {
    FUZZ_CHECK(w.num_ds <= max_sge);
    for (uint16_t i = 0; i < w.num_ds; ++i) {
      const WqeDataSeg s = load_data_seg(w.data + static_cast<size_t>(i) * sizeof(WqeDataSeg));
      sum += s.addr + s.length + s.lkey;
      sges.push_back(Sge{s.addr, s.length, s.lkey});
    }
  }
  g_sink = sum;

  // Re-encode what was decoded; decoding it again gives the same WQE, except
  // for fields the opcode does not carry (encode writes those as zero).
  SendWr wr;
  wr.wr_id = w.wr_id;
  wr.opcode = w.opcode;
  wr.flags = w.flags;
  wr.sg_list = sges;
  wr.imm_data = w.imm_data;
  wr.remote_addr = w.remote.remote_addr;
  wr.rkey = w.remote.rkey;
  wr.compare_add = w.atomic.compare_add;
  wr.swap = w.atomic.swap;
  wr.index = w.remote.remote_addr;
  wr.flush_persistent = (w.remote.aux & 1) != 0;
  auto again = std::make_unique<uint8_t[]>(stride);
  encode_send_wqe(wr, w.remote.rkey, w.remote.rkey, std::span<uint8_t>(again.get(), stride));
  DecodedSendWqe w2;
  FUZZ_CHECK(decode_send_wqe(std::span<const uint8_t>(again.get(), stride), max_sge, max_inline, &w2) ==
             WqeError::kNone);
  FUZZ_CHECK(w2.opcode == w.opcode && w2.flags == w.flags && w2.num_ds == w.num_ds);
  FUZZ_CHECK(w2.imm_data == w.imm_data && w2.wr_id == w.wr_id);
  FUZZ_CHECK(w2.remote.remote_addr == w.remote.remote_addr && w2.remote.rkey == w.remote.rkey);
  const bool cross_channel =
      w.opcode == WrOpcode::kWait || w.opcode == WrOpcode::kSendEnable || w.opcode == WrOpcode::kRecvEnable;
  if (w.opcode == WrOpcode::kFlush) {
    FUZZ_CHECK(w2.remote.aux == (w.remote.aux & 1));
  } else {
    FUZZ_CHECK(w2.remote.aux == 0);
  }
  if (!cross_channel && w.opcode != WrOpcode::kFlush) {
    FUZZ_CHECK(w2.atomic.compare_add == w.atomic.compare_add && w2.atomic.swap == w.atomic.swap);
  }
  const size_t data_bytes = (w.flags & kSendInline) ? w.num_ds : static_cast<size_t>(w.num_ds) * sizeof(WqeDataSeg);
  FUZZ_CHECK(std::memcmp(again.get() + kWqeDataOffset, slot.get() + kWqeDataOffset, data_bytes) == 0);
}

void fuzz_recv(const uint8_t* config, const uint8_t* body, size_t body_size) {
  const uint32_t stride = 32u << (config[4] % 5);   // 32 .. 512
  const uint32_t max_sge = config[5] % (kMaxRecvSge + 3);
  auto slot = make_slot(stride, body, body_size);
  DecodedRecvWqe r;
  if (decode_recv_wqe(std::span<const uint8_t>(slot.get(), stride), max_sge, &r) != WqeError::kNone) return;
  FUZZ_CHECK(r.num_sge <= max_sge);
  FUZZ_CHECK(r.sges == slot.get() + kRecvWqeDataOffset);
  uint64_t sum = r.wr_id;
  std::vector<Sge> sges;
  for (uint16_t i = 0; i < r.num_sge; ++i) {
    const WqeDataSeg s = load_data_seg(r.sges + static_cast<size_t>(i) * sizeof(WqeDataSeg));
    sum += s.addr + s.length + s.lkey;
    sges.push_back(Sge{s.addr, s.length, s.lkey});
  }
  g_sink = sum;

  auto again = std::make_unique<uint8_t[]>(stride);
  encode_recv_wqe(RecvWr{r.wr_id, sges}, std::span<uint8_t>(again.get(), stride));
  DecodedRecvWqe r2;
  FUZZ_CHECK(decode_recv_wqe(std::span<const uint8_t>(again.get(), stride), max_sge, &r2) == WqeError::kNone);
  FUZZ_CHECK(r2.wr_id == r.wr_id && r2.num_sge == r.num_sge);
  FUZZ_CHECK(std::memcmp(again.get() + kRecvWqeDataOffset, slot.get() + kRecvWqeDataOffset,
                         static_cast<size_t>(r.num_sge) * sizeof(WqeDataSeg)) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kConfigBytes) return 0;
  fuzz_send(data, data + kConfigBytes, size - kConfigBytes);
  fuzz_recv(data, data + kConfigBytes, size - kConfigBytes);
  return 0;
}
