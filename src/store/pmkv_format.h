// PmKv's on-PM format (specification: docs/pmkv.md). Everything here is part
// of the format: changing a constant, a field, the hash or the checksum is a
// new format version.
//
// All integers are little-endian. PM is read through memcpy into these
// structs (never by casting region bytes), so a corrupt region is only ever
// data to check.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "ferry/common/checksum.h"
#include "ferry/pm/hints.h"
#include "ferry/store/pmkv.h"

namespace ferry::store::detail {

static_assert(std::endian::native == std::endian::little, "the PM format is little-endian");

inline constexpr uint64_t kSuperMagic = 0x3156'4b50'4d59'5246ULL;  // "FRYMPKV1" in memory order
inline constexpr uint32_t kFormatVersion = 2;  // 2: records in whole lines (reservations)
inline constexpr uint32_t kRecordMagic = 0x5256'4b50U;  // "PKVR" in memory order
inline constexpr uint32_t kHashSeed = 0x6a09'e667U;

inline constexpr size_t kUnit = 64;              // allocation unit: a cache line / PCIe data word (H6)
inline constexpr size_t kXpLine = 256;           // media line (H5)
inline constexpr size_t kSuperblockBytes = 256;  // one XPLine; only the first 64 bytes are used
inline constexpr size_t kRecordHeaderBytes = 24;
inline constexpr size_t kMaxRecordBytes = kRecordHeaderBytes + kPmKvMaxKeyBytes + kPmKvMaxValueBytes;
inline constexpr size_t kMinHeapBytes = 4 * kXpLine;

// Link word: 0 is the end of a chain; otherwise bits 0..47 hold the target
// block's offset in the region in 64 B units (never 0: the superblock is
// there) and bits 48..63 the top 16 bits of the target's key hash.
// Written only by the owning engine's thread, each store fenced before the
// operation returns and after the record it points to is durable.
inline constexpr int kLinkOffsetBits = 48;
inline constexpr uint64_t kLinkOffsetMask = (uint64_t{1} << kLinkOffsetBits) - 1;

// Superblock, at offset 0. Written once by create(): magic last.
struct Superblock {
  uint64_t magic;          // kSuperMagic: the commit word of create()
  uint32_t version;        // kFormatVersion
  uint32_t flags;          // 0
  uint64_t region_bytes;   // the region size the layout was computed for
  uint64_t bucket_offset;  // = kSuperblockBytes
  uint64_t bucket_count;
  uint64_t heap_offset;  // bucket_offset + bucket_count * 8 rounded up to 256
  uint64_t heap_bytes;   // to region_bytes rounded down to 256
  uint32_t hash_seed;
  uint32_t checksum;  // CRC32C of bytes [8, 60)
};
static_assert(sizeof(Superblock) == 64);
static_assert(offsetof(Superblock, checksum) == 60);

// Record header, at the start of the record's block (64 B aligned; 256 B
// aligned for blocks of 256 B or more). The key follows at 24, the value at
// 24 + key_bytes, then zeros to the end of the block.
struct RecordHeader {
  uint64_t next;      // link to the next record of the chain: the only field ever rewritten
  uint32_t checksum;  // CRC32C of bytes [12, 24 + key_bytes + value_bytes)
  uint32_t magic;     // kRecordMagic
  uint32_t value_bytes;
  uint16_t block_units;  // the block's size in 64 B units = padded_size(record bytes) / 64
  uint8_t key_bytes;
  uint8_t reserved;  // 0
};
static_assert(sizeof(RecordHeader) == kRecordHeaderBytes);
static_assert(offsetof(RecordHeader, checksum) == 8 && offsetof(RecordHeader, magic) == 12);
static_assert(kMaxRecordBytes < (size_t{1} << 16) * kUnit, "block_units fits 16 bits");
static_assert(kPmKvMaxKeyBytes <= UINT8_MAX, "key_bytes fits 8 bits");

inline uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// memcpy/memcmp that accept (nullptr, 0), as an empty string_view or span may be.
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n != 0) std::memcpy(dst, src, n);
}
inline bool equal_bytes(const void* a, const void* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

inline uint64_t make_link(uint64_t block_offset, uint64_t hash) {
  return (hash & ~kLinkOffsetMask) | (block_offset / kUnit);
}
inline uint64_t link_offset(uint64_t link) { return (link & kLinkOffsetMask) * kUnit; }
inline uint16_t link_tag(uint64_t link) { return static_cast<uint16_t>(link >> kLinkOffsetBits); }
inline uint16_t hash_tag(uint64_t hash) { return static_cast<uint16_t>(hash >> kLinkOffsetBits); }

inline size_t record_bytes(size_t key_bytes, size_t value_bytes) {
  return kRecordHeaderBytes + key_bytes + value_bytes;
}
// H5/H6: records under 256 B take whole 64 B lines, larger ones whole XPLines.
inline size_t block_bytes(size_t record) { return pm::padded_size(record); }
inline size_t block_alignment(size_t record) { return pm::write_granularity(record); }
// The smallest block of whole 64 B lines (H4) that holds `record`: what a
// record placed in a reservation takes when its padded block does not fit
// its spot (PmKv::put_reserved).
inline size_t line_bytes(size_t record) { return (record + kUnit - 1) / kUnit * kUnit; }

using ferry::crc32c;  // common/checksum.h
// The key hash that places a key in a bucket (hash % bucket_count) and tags
// links to it (top 16 bits). Part of the format.
uint64_t key_hash(std::string_view key, uint32_t seed);

// The record's checksum over its header fields after `checksum`, key and value.
uint32_t record_checksum(const RecordHeader& header, const uint8_t* key_and_value);
uint32_t superblock_checksum(const Superblock& sb);

// Why a record header (read from PM at `offset`) is not a well-formed record
// of this store, or empty if it is. Checks magic, sizes, block size, alignment
// and that the block lies inside the heap; not the checksum.
std::string check_record_header(const RecordHeader& header, uint64_t offset, const PmKv::Layout& layout);

}  // namespace ferry::store::detail

namespace ferry::store {

// The superblock's layout fields, as validated at open() (or computed at create()).
struct PmKv::Layout {
  uint64_t region_bytes = 0;
  uint64_t bucket_offset = 0;
  uint64_t bucket_count = 0;
  uint64_t heap_offset = 0;
  uint64_t heap_bytes = 0;
  uint32_t hash_seed = 0;

  uint64_t heap_end() const { return heap_offset + heap_bytes; }
  uint64_t bucket_link_offset(uint64_t bucket) const { return bucket_offset + bucket * 8; }
};

// Where a key is, or where it would be inserted.
struct PmKv::Position {
  uint64_t link_at = 0;  // offset of the link word pointing at the record (absent: the bucket head)
  uint64_t link = 0;     // that word's value
  bool found = false;
  uint64_t record_at = 0;         // found: the record's offset
  detail::RecordHeader header{};  // found: its header
};

}  // namespace ferry::store
