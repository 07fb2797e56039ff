// Naive-RDMA operation header: encoding and the validating parser
// (layout in naive_wire.h).
#include "naive_wire.h"

#include <string>

namespace ferry::hyperloop::detail {

namespace {

// Explicit byte order: the header is a wire format, not a struct image.
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

bool in_region(uint64_t offset, uint64_t size, size_t region_bytes) {
  return offset <= region_bytes && size <= region_bytes - offset;
}

Status bad(const char* what) { return invalid_argument(std::string("naive header: ") + what); }

}  // namespace

Status validate_naive_header(const NaiveHeader& h, size_t region_bytes) {
  if (static_cast<uint8_t>(h.primitive) > static_cast<uint8_t>(Primitive::kFlush)) return bad("unknown primitive");
  if (h.replicas < 1 || h.replicas > kMaxReplicas) return bad("replicas outside 1..7");
  const bool cas = h.primitive == Primitive::kCas;
  const uint8_t members = static_cast<uint8_t>((1u << h.replicas) - 1);
  if (!cas && h.execute_map != 0) return bad("execute map on a primitive other than gcas");
  if ((h.execute_map & ~members) != 0) return bad("execute map names a replica beyond the chain");
  for (uint32_t i = 0; i < kMaxReplicas; ++i) {
    const bool executes = cas && (h.execute_map & (1u << i)) != 0;
    if (h.results[i] != 0 && !executes) return bad("result of a non-executing replica");
  }
  if (!cas && (h.old_value != 0 || h.new_value != 0)) return bad("compare/swap values on a primitive other than gcas");
  if (h.primitive != Primitive::kMemcpy && h.src_offset != 0) {
    return bad("source offset on a primitive other than gmemcpy");
  }
  switch (h.primitive) {
    case Primitive::kWrite:
      if (h.size == 0) return bad("gwrite of 0 bytes");
      if (h.size > kNaiveMaxWriteBytes) return bad("gwrite larger than a NIC message");
      if (!in_region(h.offset, h.size, region_bytes)) return bad("gwrite outside the region");
      break;
    case Primitive::kCas:
      if (h.size != 8) return bad("gcas size is not 8");
      if (h.offset % 8 != 0) return bad("gcas offset not 8-byte aligned");
      if (!in_region(h.offset, 8, region_bytes)) return bad("gcas outside the region");
      break;
    case Primitive::kMemcpy:
      if (h.size == 0) return bad("gmemcpy of 0 bytes");
      if (!in_region(h.src_offset, h.size, region_bytes)) return bad("gmemcpy source outside the region");
      if (!in_region(h.offset, h.size, region_bytes)) return bad("gmemcpy destination outside the region");
      if (h.src_offset < h.offset + h.size && h.offset < h.src_offset + h.size) return bad("gmemcpy ranges overlap");
      break;
    case Primitive::kFlush:
      if (!h.flush) return bad("gflush without the flush flag");
      if (h.offset != 0 || h.size != 0) return bad("gflush with an offset or size");
      break;
  }
  return ok_status();
}

Result<NaiveHeader> parse_naive_header(std::span<const uint8_t> bytes, size_t region_bytes) {
  if (bytes.size() != kNaiveHeaderBytes) return bad("wrong length");
  const uint8_t* p = bytes.data();
  if (get_u32(p) != kNaiveMagic) return bad("bad magic");
  if (p[4] != kNaiveVersion) return bad("unknown version");
  if (p[5] > static_cast<uint8_t>(Primitive::kFlush)) return bad("unknown primitive");
  if ((p[6] & ~kNaiveFlagFlush) != 0) return bad("unknown flag bits");
  if (p[37] != 0 || p[38] != 0 || p[39] != 0) return bad("reserved bytes not zero");
  NaiveHeader h;
  h.primitive = static_cast<Primitive>(p[5]);
  h.flush = (p[6] & kNaiveFlagFlush) != 0;
  h.replicas = p[7];
  h.seq = get_u64(p + 8);
  h.offset = get_u64(p + 16);
  h.src_offset = get_u64(p + 24);
  h.size = get_u32(p + 32);
  h.execute_map = p[36];
  h.old_value = get_u64(p + 40);
  h.new_value = get_u64(p + 48);
  for (uint32_t i = 0; i < kMaxReplicas; ++i) h.results[i] = get_u64(p + kNaiveResultsOffset + 8 * i);
  FERRY_RETURN_IF_ERROR(validate_naive_header(h, region_bytes));
  return h;
}

void encode_naive_header(const NaiveHeader& h, std::span<uint8_t> out) {
  FERRY_ASSERT(out.size() >= kNaiveHeaderBytes, "naive header: output of ", out.size(), " bytes");
  uint8_t* p = out.data();
  put_u32(p, kNaiveMagic);
  p[4] = kNaiveVersion;
  p[5] = static_cast<uint8_t>(h.primitive);
  p[6] = h.flush ? kNaiveFlagFlush : 0;
  p[7] = h.replicas;
  put_u64(p + 8, h.seq);
  put_u64(p + 16, h.offset);
  put_u64(p + 24, h.src_offset);
  put_u32(p + 32, h.size);
  p[36] = h.execute_map;
  p[37] = p[38] = p[39] = 0;
  put_u64(p + 40, h.old_value);
  put_u64(p + 48, h.new_value);
  for (uint32_t i = 0; i < kMaxReplicas; ++i) put_u64(p + kNaiveResultsOffset + 8 * i, h.results[i]);
}

std::array<uint64_t, kMaxReplicas> decode_naive_results(std::span<const uint8_t> bytes, uint32_t replicas) {
  FERRY_ASSERT(replicas <= kMaxReplicas && bytes.size() >= 8 * replicas, "naive results: ", bytes.size(), " bytes for ",
               replicas, " replicas");
  std::array<uint64_t, kMaxReplicas> results{};
  for (uint32_t i = 0; i < replicas; ++i) results[i] = get_u64(bytes.data() + 8 * i);
  return results;
}

}  // namespace ferry::hyperloop::detail
