// libFuzzer target: the durable OQ recovery scan (durable_log.h), which reads
// whatever a worker's PM area held after a power failure.
//
// Input: [buffers code][strides code][stride code][control mode]
//        [req_to_execute lo, hi][srq_tail lo, hi] area bytes...
// The area is a heap buffer of exactly the layout's size (the input, then
// zeros), so ASan reports any read past it. With control mode bit 0 the
// control block gets a valid magic, version and layout and the two positions
// from the input, so the fuzzer reaches the scan loop; otherwise the input's
// own bytes stand. With bit 1 every stride whose size field fits its buffer
// gets a correct checksum (no mutation finds a 64-bit hash by chance). Every visited request must re-parse at its position,
// positions must increase strictly, and lie in [ReqToExecute, SRQTail); the
// admission table entry of each visited request's buffer is read as recovery
// reads it.
//
// Run: ./rpc_recovery_scan_fuzz -max_total_time=60 ../tests/fuzz/corpus/rpc_recovery_scan_fuzz
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "ferry/common/checksum.h"
#include "ferry/rpc/durable_log.h"

namespace {

using namespace ferry::rpc;

#define FUZZ_CHECK(cond)            \
  do {                              \
    if (!(cond)) __builtin_trap();  \
  } while (0)

constexpr size_t kConfigBytes = 8;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kConfigBytes) return 0;
  DurableLayout layout;
  layout.buffers = 1 + data[0] % 8;
  layout.stride_bytes = 64u << (data[2] % 3);
  layout.buffer_bytes = layout.stride_bytes << (data[1] % 6);
  const bool valid_control = (data[3] & 1) != 0;
  const uint64_t rte = static_cast<uint64_t>(data[4]) | static_cast<uint64_t>(data[5]) << 8;
  const uint64_t tail = static_cast<uint64_t>(data[6]) | static_cast<uint64_t>(data[7]) << 8;
  const size_t area_bytes = layout.area_bytes();
  auto area = std::make_unique<uint8_t[]>(area_bytes);
  std::memset(area.get(), 0, area_bytes);
  const size_t n = size - kConfigBytes;
  std::memcpy(area.get(), data + kConfigBytes, n < area_bytes ? n : area_bytes);
  if (valid_control) {
    DurableControl c{};
    std::memcpy(&c, area.get(), sizeof(c));
    c.magic = kDurableMagic;
    c.version = kDurableVersion;
    c.buffers = layout.buffers;
    c.buffer_bytes = layout.buffer_bytes;
    c.stride_bytes = layout.stride_bytes;
    c.req_to_execute = rte;
    c.srq_tail = tail;
    std::memcpy(area.get(), &c, sizeof(c));
  }
  if ((data[3] & 2) != 0) {
    for (uint32_t b = 0; b < layout.buffers; ++b) {
      for (uint32_t st = 0; st < layout.strides(); ++st) {
        uint8_t* at = area.get() + kDurableControlBytes + static_cast<size_t>(b) * layout.buffer_bytes +
                      static_cast<size_t>(st) * layout.stride_bytes;
        const size_t left = layout.buffer_bytes - static_cast<size_t>(st) * layout.stride_bytes;
        uint32_t claimed;
        std::memcpy(&claimed, at + 8, 4);
        if (claimed < kRequestHeaderBytes || claimed > left) continue;
        const uint64_t sum = ferry::checksum64(std::span<const uint8_t>(at + 8, claimed - 8), kChecksumSeed);
        std::memcpy(at, &sum, 8);
      }
    }
  }
  const uint32_t max_request = layout.buffer_bytes;
  uint64_t last = 0;
  bool any = false;
  auto stats = scan_durable_area(std::span<const uint8_t>(area.get(), area_bytes), layout, max_request,
                                 [&](uint64_t position, const RequestView& v) {
                                   FUZZ_CHECK(!any || position > last);
                                   any = true;
                                   last = position;
                                   const uint64_t strides = layout.strides();
                                   const size_t at = layout.buffer_offset(position / strides) +
                                                     (position % strides) * layout.stride_bytes;
                                   FUZZ_CHECK(v.payload.data() == area.get() + at + kRequestHeaderBytes);
                                   FUZZ_CHECK(at + v.size <= area_bytes);
                                   RequestView again;
                                   FUZZ_CHECK(parse_request(std::span<const uint8_t>(area.get() + at, v.size), true,
                                                            max_request, &again) == RequestCheck::kValid);
                                   // Recovery reads the buffer's admission token too (untrusted).
                                   (void)durable_admission_token(std::span<const uint8_t>(area.get(), area_bytes),
                                                                 layout, position / strides);
                                 });
  if (stats.ok()) {
    FUZZ_CHECK(stats.value().from <= stats.value().to);
    FUZZ_CHECK(!any || (last >= stats.value().from && last < stats.value().to));
  }
  return 0;
}
