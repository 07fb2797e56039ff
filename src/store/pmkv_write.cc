// PmKv's mutations and their persist order (docs/pmkv.md, "Persist order").
//
// Every mutation publishes with one aligned 8-byte word, stored after
// everything it makes reachable is durable, then fenced before the engine
// reuses anything it makes unreachable:
//   put:    record --nt stores--> fence --> link word --> fence --> free old block
//   remove:                                 link word --> fence --> free block
//   create: [magic := 0 --> fence] --> layout, empty index --nt--> fence --> magic --> fence
#include <algorithm>
#include <cstring>

#include "ferry/store/pmkv.h"
#include "pmkv_alloc.h"
#include "pmkv_format.h"

namespace ferry::store {

using detail::kRecordHeaderBytes;
using detail::kUnit;
using detail::RecordHeader;

bool PmKv::reached(CrashPoint point) { return !options_.crash_hook || options_.crash_hook(point); }

Status PmKv::stopped(CrashPoint point) {
  failed_ = true;
  return unavailable("PmKv: crash injected at " + std::string(crash_point_name(point)));
}

Status PmKv::commit_word(uint64_t offset, uint64_t value, CrashPoint written, CrashPoint durable) {
  FERRY_ASSERT(offset % 8 == 0 && offset + 8 <= layout_->heap_end(), "commit word at ", offset);
  if (eadr_) {
    // The cache is in the persistence domain: the store is durable once made.
    region_->store(base_ + offset, &value, sizeof(value));
  } else {
    // H7: rewrite the word's whole line with non-temporal stores -- one 64 B
    // write, no read for ownership, no partial line. The other 56 bytes are
    // rewritten with what they hold (durable already: every operation ends
    // with a fence), so only the 8-byte word can differ after a failure.
    alignas(64) uint8_t line[kUnit];
    const uint64_t line_at = offset / kUnit * kUnit;
    std::memcpy(line, base_ + line_at, kUnit);
    std::memcpy(line + (offset - line_at), &value, sizeof(value));
    region_->store_nt(base_ + line_at, line, kUnit);
  }
  if (!reached(written)) return stopped(written);
  region_->drain();
  ++fences_;
  if (!reached(durable)) return stopped(durable);
  return ok_status();
}

Status PmKv::put(std::string_view key, std::string_view value) { return put_at(key, value, nullptr, 0, 0); }

Status PmKv::put_reserved(std::string_view key, std::string_view value, const PmKvReservation& r, uint64_t at,
                          uint64_t room) {
  return put_at(key, value, &r, at, room);
}

Status PmKv::put_at(std::string_view key, std::string_view value, const PmKvReservation* r, uint64_t spot,
                    uint64_t room) {
  FERRY_RETURN_IF_ERROR(check_usable());
  if (key.size() > kPmKvMaxKeyBytes) {
    return invalid_argument("PmKv: key of " + std::to_string(key.size()) + " bytes; at most " +
                            std::to_string(kPmKvMaxKeyBytes));
  }
  if (value.size() > kPmKvMaxValueBytes) {
    return invalid_argument("PmKv: value of " + std::to_string(value.size()) + " bytes; at most " +
                            std::to_string(kPmKvMaxValueBytes));
  }
  const uint64_t hash = detail::key_hash(key, layout_->hash_seed);
  FERRY_ASSIGN_OR_RETURN(Position pos, find(key, hash));
  if (pos.found && pos.header.value_bytes == value.size()) {
    const uint8_t* old_kv = base_ + pos.record_at + kRecordHeaderBytes;
    if (detail::equal_bytes(old_kv + key.size(), value.data(), value.size()) &&
        detail::record_checksum(pos.header, old_kv) == pos.header.checksum) {
      ++puts_;
      return ok_status();  // already durable, as every reachable record
    }
  }

  const size_t record = detail::record_bytes(key.size(), value.size());
  size_t block = detail::block_bytes(record);
  std::optional<uint64_t> unit;
  if (r != nullptr) {
    if (const auto placed = place_reserved(record, *r, spot, room)) {
      unit = placed->first;
      block = placed->second * kUnit;
    } else {
      ++reserved_misses_;
    }
  }
  if (!unit) unit = alloc_->allocate(block / kUnit, detail::block_alignment(record) / kUnit);
  if (!unit) {
    return resource_exhausted("PmKv: no free block of " + std::to_string(block) + " bytes (" +
                              std::to_string(alloc_->free_units() * kUnit) + " bytes free, largest extent " +
                              std::to_string(alloc_->largest_free_units() * kUnit) + ")");
  }
  const uint64_t at = *unit * kUnit;

  // Stage the whole block in DRAM: header, key, value, zero padding.
  RecordHeader h{};
  h.next = pos.found ? pos.header.next : pos.link;  // a replacement takes the old record's place in the chain
  h.magic = detail::kRecordMagic;
  h.value_bytes = static_cast<uint32_t>(value.size());
  h.block_units = static_cast<uint16_t>(block / kUnit);
  h.key_bytes = static_cast<uint8_t>(key.size());
  uint8_t* staged = scratch_.data();
  detail::copy_bytes(staged + kRecordHeaderBytes, key.data(), key.size());
  detail::copy_bytes(staged + kRecordHeaderBytes + key.size(), value.data(), value.size());
  std::memset(staged + record, 0, block - record);
  h.checksum = detail::record_checksum(h, staged + kRecordHeaderBytes);
  std::memcpy(staged, &h, sizeof(h));
  FERRY_ASSERT(detail::check_record_header(h, at, *layout_).empty(), "malformed record staged at ", at);

  if (!reached(CrashPoint::kBeforeWrite)) return stopped(CrashPoint::kBeforeWrite);
  // H4/H7 + H5/H6: non-temporal stores of whole lines into an aligned, padded block.
  region_->store_nt(base_ + at, staged, block);
  if (!reached(CrashPoint::kDataWritten)) return stopped(CrashPoint::kDataWritten);
  region_->drain();
  ++fences_;
  if (!reached(CrashPoint::kDataDurable)) return stopped(CrashPoint::kDataDurable);
  FERRY_RETURN_IF_ERROR(
      commit_word(pos.link_at, detail::make_link(at, hash), CrashPoint::kCommitWritten, CrashPoint::kCommitDurable));

  // Durable. Only now may the old block be reused.
  if (pos.found) {
    free_block(pos.record_at / kUnit, pos.header.block_units);
    bytes_in_use_ -= size_t{pos.header.block_units} * kUnit;
    payload_bytes_ -= size_t{pos.header.key_bytes} + pos.header.value_bytes;
  } else {
    ++records_;
  }
  bytes_in_use_ += block;
  payload_bytes_ += key.size() + value.size();
  ++puts_;
  return ok_status();
}

Status PmKv::remove(std::string_view key) {
  FERRY_RETURN_IF_ERROR(check_usable());
  if (key.size() > kPmKvMaxKeyBytes) return not_found("PmKv: key longer than any stored key");
  FERRY_ASSIGN_OR_RETURN(Position pos, find(key, detail::key_hash(key, layout_->hash_seed)));
  if (!pos.found) return not_found("PmKv: no such key");
  if (!reached(CrashPoint::kBeforeWrite)) return stopped(CrashPoint::kBeforeWrite);
  FERRY_RETURN_IF_ERROR(
      commit_word(pos.link_at, pos.header.next, CrashPoint::kCommitWritten, CrashPoint::kCommitDurable));
  free_block(pos.record_at / kUnit, pos.header.block_units);
  bytes_in_use_ -= size_t{pos.header.block_units} * kUnit;
  payload_bytes_ -= size_t{pos.header.key_bytes} + pos.header.value_bytes;
  --records_;
  ++removes_;
  return ok_status();
}

Status PmKv::format() {
  const Layout& layout = *layout_;
  if (!reached(CrashPoint::kBeforeWrite)) return stopped(CrashPoint::kBeforeWrite);
  // 1. Retire whatever the region held: with its magic word durably cleared,
  //    no failure below can leave an old store that looks valid but has a
  //    half-zeroed index.
  if (detail::load_u64(base_) != 0) {
    FERRY_RETURN_IF_ERROR(commit_word(0, 0, CrashPoint::kRetireWritten, CrashPoint::kRetireDurable));
  }
  // 2. The superblock's fields (magic still 0) and an empty index.
  alignas(64) uint8_t super[detail::kSuperblockBytes] = {};
  detail::Superblock sb{};
  sb.magic = 0;
  sb.version = detail::kFormatVersion;
  sb.region_bytes = layout.region_bytes;
  sb.bucket_offset = layout.bucket_offset;
  sb.bucket_count = layout.bucket_count;
  sb.heap_offset = layout.heap_offset;
  sb.heap_bytes = layout.heap_bytes;
  sb.hash_seed = layout.hash_seed;
  sb.checksum = detail::superblock_checksum(sb);
  std::memcpy(super, &sb, sizeof(sb));
  region_->store_nt(base_, super, sizeof(super));
  static constexpr size_t kZeroChunk = 16 << 10;
  alignas(64) static constexpr uint8_t kZeros[kZeroChunk] = {};
  for (uint64_t off = layout.bucket_offset; off < layout.heap_offset; off += kZeroChunk) {
    region_->store_nt(base_ + off, kZeros, std::min<uint64_t>(kZeroChunk, layout.heap_offset - off));
  }
  if (!reached(CrashPoint::kDataWritten)) return stopped(CrashPoint::kDataWritten);
  region_->drain();
  ++fences_;
  if (!reached(CrashPoint::kDataDurable)) return stopped(CrashPoint::kDataDurable);
  // 3. Commit: the magic word.
  return commit_word(0, detail::kSuperMagic, CrashPoint::kCommitWritten, CrashPoint::kCommitDurable);
}

}  // namespace ferry::store
