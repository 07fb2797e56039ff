// PmKv's format helpers: checksums, the key hash, record header checks.
#include "pmkv_format.h"

#include <algorithm>

#include "ferry/common/rng.h"

namespace ferry::store {

std::string_view crash_point_name(CrashPoint point) {
  switch (point) {
    case CrashPoint::kBeforeWrite:
      return "before-write";
    case CrashPoint::kRetireWritten:
      return "retire-written";
    case CrashPoint::kRetireDurable:
      return "retire-durable";
    case CrashPoint::kDataWritten:
      return "data-written";
    case CrashPoint::kDataDurable:
      return "data-durable";
    case CrashPoint::kCommitWritten:
      return "commit-written";
    case CrashPoint::kCommitDurable:
      return "commit-durable";
  }
  return "unknown";
}

}  // namespace ferry::store

namespace ferry::store::detail {

uint64_t key_hash(std::string_view key, uint32_t seed) {
  // Word-at-a-time through splitmix64's bijective finalizer; the length is
  // mixed in first, so zero-padded tails of different lengths differ.
  const auto* p = reinterpret_cast<const uint8_t*>(key.data());
  size_t n = key.size();
  uint64_t h = mix64((uint64_t{seed} << 32) ^ n);
  for (; n >= 8; n -= 8, p += 8) h = mix64(h ^ load_u64(p));
  if (n != 0) {
    uint64_t tail = 0;
    std::memcpy(&tail, p, n);
    h = mix64(h ^ tail);
  }
  return h;
}

uint32_t record_checksum(const RecordHeader& header, const uint8_t* key_and_value) {
  const auto* h = reinterpret_cast<const uint8_t*>(&header);
  uint32_t crc = crc32c(0, h + offsetof(RecordHeader, magic), kRecordHeaderBytes - offsetof(RecordHeader, magic));
  return crc32c(crc, key_and_value, size_t{header.key_bytes} + header.value_bytes);
}

uint32_t superblock_checksum(const Superblock& sb) {
  const auto* p = reinterpret_cast<const uint8_t*>(&sb);
  return crc32c(0, p + offsetof(Superblock, version), offsetof(Superblock, checksum) - offsetof(Superblock, version));
}

std::string check_record_header(const RecordHeader& header, uint64_t offset, const PmKv::Layout& layout) {
  if (header.magic != kRecordMagic) return "no record magic";
  if (header.reserved != 0) return "reserved byte set";
  if (header.value_bytes > kPmKvMaxValueBytes)
    return "value size " + std::to_string(header.value_bytes) + " over the limit";
  const size_t record = record_bytes(header.key_bytes, header.value_bytes);
  const size_t block = size_t{header.block_units} * kUnit;
  // Padded and aligned to its write granularity (H5/H6), or -- a record
  // placed in a reservation where that did not fit -- whole 64 B lines.
  const bool padded = block == block_bytes(record);
  const bool lined = block == line_bytes(record);
  if (!padded && !lined) {
    return "block of " + std::to_string(header.block_units) + " units does not match a record of " +
           std::to_string(record) + " bytes";
  }
  const bool aligned = (padded && offset % block_alignment(record) == 0) || (lined && offset % kUnit == 0);
  if (!aligned) return "block misaligned";
  if (offset < layout.heap_offset || offset > layout.heap_end() || layout.heap_end() - offset < block) {
    return "block outside the heap";
  }
  return {};
}

}  // namespace ferry::store::detail
