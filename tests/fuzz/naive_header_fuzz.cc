// libFuzzer target: the Naive-RDMA operation-header parser (naive_wire.h),
// which every replica runs on bytes from the network.
//
// Properties checked on every input:
//  - parse_naive_header never reads outside the input (ASan) and never hits
//    undefined behaviour (UBSan), for a fixed region size and for one the
//    input picks;
//  - a header that parses is valid (validate_naive_header agrees), lies inside
//    the region, and re-encodes to exactly the input bytes (the parser accepts
//    only the canonical form, so parse and encode are inverses);
//  - the re-encoded bytes parse to the same header.
// Any violation traps, which libFuzzer reports as a crash.
//
// Run: ./naive_header_fuzz -max_total_time=60 ../tests/fuzz/corpus/naive_header_fuzz
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "naive_wire.h"

namespace {

using namespace ferry::hyperloop;
using namespace ferry::hyperloop::detail;

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

constexpr size_t kRegionBytes = 1 << 20;  // what the seeds are made for

void check(std::span<const uint8_t> input, size_t region_bytes) {
  auto parsed = parse_naive_header(input, region_bytes);
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == ferry::Code::kInvalidArgument);
    return;
  }
  const NaiveHeader& h = parsed.value();
  FUZZ_CHECK(input.size() == kNaiveHeaderBytes);
  FUZZ_CHECK(validate_naive_header(h, region_bytes).ok());
  FUZZ_CHECK(h.replicas >= 1 && h.replicas <= kMaxReplicas);
  // What a replica does with it stays inside its region.
  switch (h.primitive) {
    case Primitive::kWrite:
    case Primitive::kMemcpy:
      FUZZ_CHECK(h.size >= 1 && h.offset + h.size <= region_bytes && h.offset + h.size > h.offset);
      if (h.primitive == Primitive::kMemcpy) {
        FUZZ_CHECK(h.src_offset + h.size <= region_bytes);
        FUZZ_CHECK(h.src_offset + h.size <= h.offset || h.offset + h.size <= h.src_offset);
      }
      break;
    case Primitive::kCas:
      FUZZ_CHECK(h.size == 8 && h.offset % 8 == 0 && h.offset + 8 <= region_bytes);
      FUZZ_CHECK((h.execute_map >> h.replicas) == 0);
      break;
    case Primitive::kFlush:
      FUZZ_CHECK(h.flush && h.size == 0 && h.offset == 0);
      break;
  }
  uint8_t out[kNaiveHeaderBytes];
  encode_naive_header(h, out);
  FUZZ_CHECK(std::memcmp(out, input.data(), kNaiveHeaderBytes) == 0);
  auto again = parse_naive_header(std::span<const uint8_t>(out, kNaiveHeaderBytes), region_bytes);
  FUZZ_CHECK(again.ok() && again.value() == h);
  if (h.primitive == Primitive::kCas) {
    const auto results =
        decode_naive_results(std::span<const uint8_t>(out + kNaiveResultsOffset, 8 * h.replicas), h.replicas);
    for (uint32_t i = 0; i < kMaxReplicas; ++i) FUZZ_CHECK(results[i] == (i < h.replicas ? h.results[i] : 0));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  check(input, kRegionBytes);
  // The same bytes against a region size taken from a trailing byte, so the
  // bounds checks meet small regions and their edges too.
  if (size == kNaiveHeaderBytes + 1) check(input.first(kNaiveHeaderBytes), size_t{data[size - 1]} * 4096 + 8);
  return 0;
}
