// The operation header of the Naive-RDMA baseline: what the client SENDs to
// the head replica and each replica SENDs to the next. Replicas parse it as
// untrusted input (it arrives from the network): parse_naive_header accepts
// exactly the records encode_naive_header can produce for a region of the
// given size, and rejects everything else with a message.
//
// Layout: kNaiveHeaderBytes, little-endian, no implicit padding.
//
//   off  size  field
//     0     4  magic        kNaiveMagic
//     4     1  version      kNaiveVersion
//     5     1  primitive    Primitive (0 gwrite, 1 gcas, 2 gmemcpy, 3 gflush)
//     6     1  flags        bit 0: flush (interleaved gFLUSH); other bits 0
//     7     1  replicas     chain length, 1..kMaxReplicas
//     8     8  seq          submission number within the group
//    16     8  offset       gwrite/gcas target, gmemcpy destination
//    24     8  src_offset   gmemcpy source
//    32     4  size         bytes (gcas: 8)
//    36     1  execute_map  gcas: bit i = replica i runs the CAS
//    37     3  reserved     0
//    40     8  old          gcas compare value
//    48     8  new          gcas swap value
//    56    56  results[7]   gcas: word replica i saw (filled as the op
//                           travels down the chain; the tail returns
//                           results[0..replicas) to the client)
//
// Canonical form (checked by the parser, so that parse and encode are exact
// inverses): fields a primitive does not use are zero; gflush always carries
// the flush flag; results[i] is zero unless replica i executes the CAS;
// gmemcpy ranges do not overlap (as in HyperLoop, whose NIC copy cannot).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ferry/common/status.h"
#include "ferry/hyperloop/group.h"

namespace ferry::hyperloop::detail {

constexpr uint32_t kNaiveMagic = 0x564E5246;  // "FRNV" in memory order
constexpr uint8_t kNaiveVersion = 1;
constexpr uint8_t kNaiveFlagFlush = 1u << 0;
constexpr size_t kNaiveHeaderBytes = 112;
constexpr size_t kNaiveResultsOffset = 56;
// The largest gwrite the NIC carries in one message (its 2 GiB limit).
constexpr uint64_t kNaiveMaxWriteBytes = uint64_t{1} << 31;

static_assert(kNaiveResultsOffset + 8 * kMaxReplicas == kNaiveHeaderBytes, "results end the header");
static_assert(kNaiveResultsOffset % 8 == 0, "results are 8-byte aligned for the tail's ack WRITE");

struct NaiveHeader {
  Primitive primitive = Primitive::kWrite;
  bool flush = false;
  uint8_t replicas = 1;
  uint64_t seq = 0;
  uint64_t offset = 0;
  uint64_t src_offset = 0;
  uint32_t size = 0;
  uint8_t execute_map = 0;
  uint64_t old_value = 0;
  uint64_t new_value = 0;
  std::array<uint64_t, kMaxReplicas> results{};

  bool operator==(const NaiveHeader&) const = default;
};

// Checks a header against the canonical form for a region of region_bytes:
// kInvalidArgument naming the first bad field. Allocates only on failure.
Status validate_naive_header(const NaiveHeader& header, size_t region_bytes);

// Parses exactly kNaiveHeaderBytes bytes (a longer or shorter message is
// rejected). kInvalidArgument names the first bad field; never reads outside
// `bytes`. Allocates only on failure.
Result<NaiveHeader> parse_naive_header(std::span<const uint8_t> bytes, size_t region_bytes);

// Writes the kNaiveHeaderBytes-byte record into out[0, kNaiveHeaderBytes)
// (out must be at least that long). The header is the caller's own, so it is
// not validated here; validate_naive_header first where it came from outside.
void encode_naive_header(const NaiveHeader& header, std::span<uint8_t> out);

// The result map as the tail returns it to the client: results[0, replicas)
// of a header, 8 little-endian bytes each (bytes.size() >= 8 * replicas).
// Entries from `replicas` on are 0.
std::array<uint64_t, kMaxReplicas> decode_naive_results(std::span<const uint8_t> bytes, uint32_t replicas);

}  // namespace ferry::hyperloop::detail
