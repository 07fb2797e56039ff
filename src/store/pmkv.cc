// PmKv: create/open, lookups and statistics. Mutations: pmkv_write.cc;
// recovery and the consistency check: pmkv_recovery.cc; format: docs/pmkv.md.
#include "ferry/store/pmkv.h"

#include <algorithm>
#include <cstring>

#include "pmkv_alloc.h"
#include "pmkv_format.h"

namespace ferry::store {

using detail::kRecordHeaderBytes;
using detail::kUnit;
using detail::kXpLine;
using detail::load_u64;
using detail::RecordHeader;

namespace {

uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }
uint64_t round_down(uint64_t x, uint64_t to) { return x / to * to; }

Status check_region(const pm::Region& region) {
  if (region.media() != pm::Media::kPm) return invalid_argument("PmKv: the region is DRAM, not PM");
  if (reinterpret_cast<uintptr_t>(region.data()) % kXpLine != 0) {
    return invalid_argument("PmKv: the region's base is not 256-byte aligned");
  }
  if (region.size() < detail::kSuperblockBytes + kXpLine + detail::kMinHeapBytes) {
    return invalid_argument("PmKv: a region of " + std::to_string(region.size()) + " bytes is too small");
  }
  return ok_status();
}

// The layout create() gives a region of `region_bytes` with `bucket_count` buckets.
Result<PmKv::Layout> compute_layout(uint64_t region_bytes, uint64_t bucket_count) {
  if (bucket_count == 0) bucket_count = std::max<uint64_t>(1, region_bytes / 256);
  if (bucket_count > region_bytes / 16) {
    return invalid_argument("PmKv: " + std::to_string(bucket_count) + " buckets take more than half of a region of " +
                            std::to_string(region_bytes) + " bytes");
  }
  PmKv::Layout layout;
  layout.region_bytes = region_bytes;
  layout.bucket_offset = detail::kSuperblockBytes;
  layout.bucket_count = bucket_count;
  layout.heap_offset = round_up(layout.bucket_offset + bucket_count * 8, kXpLine);
  const uint64_t heap_end = round_down(region_bytes, kXpLine);
  if (heap_end < layout.heap_offset + detail::kMinHeapBytes) {
    return invalid_argument("PmKv: a region of " + std::to_string(region_bytes) + " bytes leaves no heap after " +
                            std::to_string(bucket_count) + " buckets");
  }
  layout.heap_bytes = heap_end - layout.heap_offset;
  layout.hash_seed = detail::kHashSeed;
  return layout;
}

}  // namespace

PmKv::PmKv(pm::PersistenceDomain& domain, pm::Region& region, PmKvOptions options)
    : region_(&region),
      base_(region.data()),
      options_(std::move(options)),
      eadr_(domain.config().eadr),
      scratch_(detail::block_bytes(detail::kMaxRecordBytes)) {}

PmKv::~PmKv() = default;

Result<std::unique_ptr<PmKv>> PmKv::create(pm::PersistenceDomain& domain, pm::Region& region, PmKvOptions options) {
  FERRY_RETURN_IF_ERROR(check_region(region));
  FERRY_ASSIGN_OR_RETURN(Layout layout, compute_layout(region.size(), options.bucket_count));
  std::unique_ptr<PmKv> kv(new PmKv(domain, region, std::move(options)));
  kv->layout_ = std::make_unique<Layout>(layout);
  kv->alloc_ = std::make_unique<Allocator>(layout.heap_offset / kUnit, layout.heap_end() / kUnit);
  FERRY_RETURN_IF_ERROR(kv->format());
  return kv;
}

Result<std::unique_ptr<PmKv>> PmKv::open(pm::PersistenceDomain& domain, pm::Region& region, PmKvOptions options) {
  FERRY_RETURN_IF_ERROR(check_region(region));
  detail::Superblock sb;
  std::memcpy(&sb, region.data(), sizeof(sb));
  if (sb.magic != detail::kSuperMagic) {
    return not_found("PmKv: the region holds no store (no superblock magic): create() one");
  }
  if (sb.checksum != detail::superblock_checksum(sb)) return data_loss("PmKv: superblock checksum mismatch");
  if (sb.version != detail::kFormatVersion) {
    return unimplemented("PmKv: format version " + std::to_string(sb.version) + ", this build reads " +
                         std::to_string(detail::kFormatVersion));
  }
  if (sb.region_bytes > region.size()) {
    return data_loss("PmKv: the store spans " + std::to_string(sb.region_bytes) + " bytes, the region only " +
                     std::to_string(region.size()) + " (truncated?)");
  }
  // The checksum held, so a mismatch here is a forged or buggy superblock.
  auto expected = compute_layout(sb.region_bytes, sb.bucket_count);
  if (sb.flags != 0 || sb.bucket_count == 0 || !expected.ok() || expected->bucket_offset != sb.bucket_offset ||
      expected->heap_offset != sb.heap_offset || expected->heap_bytes != sb.heap_bytes) {
    return data_loss("PmKv: superblock layout fields are inconsistent");
  }
  std::unique_ptr<PmKv> kv(new PmKv(domain, region, std::move(options)));
  Layout layout = expected.value();
  layout.hash_seed = sb.hash_seed;
  kv->layout_ = std::make_unique<Layout>(layout);
  kv->alloc_ = std::make_unique<Allocator>(layout.heap_offset / kUnit, layout.heap_end() / kUnit);
  FERRY_RETURN_IF_ERROR(kv->recover());
  return kv;
}

Status PmKv::check_usable() const {
  if (failed_) return failed_precondition("PmKv: an injected crash stopped an operation; open() the region again");
  return ok_status();
}

Result<PmKv::Position> PmKv::find(std::string_view key, uint64_t hash) const {
  const uint64_t bucket = hash % layout_->bucket_count;
  Position pos;
  pos.link_at = layout_->bucket_link_offset(bucket);
  pos.link = load_u64(base_ + pos.link_at);
  const Position head = pos;
  // Every link was checked at open() and is only ever replaced by this
  // engine; the checks below guard against the region being damaged since.
  for (uint64_t steps = 0; pos.link != 0; ++steps) {
    const uint64_t at = detail::link_offset(pos.link);
    if (steps > records_ || at < layout_->heap_offset || at > layout_->heap_end() - kRecordHeaderBytes) {
      return data_loss("PmKv: bucket " + std::to_string(bucket) + " holds an invalid link (damaged since open)");
    }
    RecordHeader h;
    std::memcpy(&h, base_ + at, sizeof(h));
    if (const std::string why = detail::check_record_header(h, at, *layout_); !why.empty()) {
      return data_loss("PmKv: record at offset " + std::to_string(at) + ": " + why);
    }
    if (detail::link_tag(pos.link) == detail::hash_tag(hash) && h.key_bytes == key.size() &&
        detail::equal_bytes(base_ + at + kRecordHeaderBytes, key.data(), key.size())) {
      pos.found = true;
      pos.record_at = at;
      pos.header = h;
      return pos;
    }
    pos.link_at = at;  // the record's link word is its first field
    pos.link = h.next;
  }
  return head;
}

Result<PmKv::Position> PmKv::find_verified(std::string_view key) const {
  FERRY_RETURN_IF_ERROR(check_usable());
  if (key.size() > kPmKvMaxKeyBytes) return not_found("PmKv: key longer than any stored key");
  FERRY_ASSIGN_OR_RETURN(Position pos, find(key, detail::key_hash(key, layout_->hash_seed)));
  if (!pos.found) return not_found("PmKv: no such key");
  if (detail::record_checksum(pos.header, base_ + pos.record_at + kRecordHeaderBytes) != pos.header.checksum) {
    return data_loss("PmKv: record at offset " + std::to_string(pos.record_at) + " fails its checksum");
  }
  return pos;
}

Result<size_t> PmKv::get_into(std::string_view key, std::span<uint8_t> out) const {
  FERRY_ASSIGN_OR_RETURN(Position pos, find_verified(key));
  const uint8_t* kv = base_ + pos.record_at + kRecordHeaderBytes;
  if (out.size() < pos.header.value_bytes) {
    return out_of_range("PmKv: the value has " + std::to_string(pos.header.value_bytes) + " bytes, the buffer " +
                        std::to_string(out.size()));
  }
  detail::copy_bytes(out.data(), kv + pos.header.key_bytes, pos.header.value_bytes);
  return size_t{pos.header.value_bytes};
}

Result<std::string> PmKv::get(std::string_view key) const {
  FERRY_ASSIGN_OR_RETURN(Position pos, find_verified(key));
  const uint8_t* kv = base_ + pos.record_at + kRecordHeaderBytes;
  return std::string(reinterpret_cast<const char*>(kv + pos.header.key_bytes), pos.header.value_bytes);
}

Status PmKv::for_each(const std::function<void(std::string_view key, std::string_view value)>& fn) const {
  FERRY_RETURN_IF_ERROR(check_usable());
  for (uint64_t bucket = 0; bucket < layout_->bucket_count; ++bucket) {
    uint64_t link = load_u64(base_ + layout_->bucket_link_offset(bucket));
    for (uint64_t steps = 0; link != 0; ++steps) {
      const uint64_t at = detail::link_offset(link);
      if (steps > records_ || at < layout_->heap_offset || at > layout_->heap_end() - kRecordHeaderBytes) {
        return data_loss("PmKv: bucket " + std::to_string(bucket) + " holds an invalid link (damaged since open)");
      }
      RecordHeader h;
      std::memcpy(&h, base_ + at, sizeof(h));
      const uint8_t* kv = base_ + at + kRecordHeaderBytes;
      if (const std::string why = detail::check_record_header(h, at, *layout_); !why.empty()) {
        return data_loss("PmKv: record at offset " + std::to_string(at) + ": " + why);
      }
      if (detail::record_checksum(h, kv) != h.checksum) {
        return data_loss("PmKv: record at offset " + std::to_string(at) + " fails its checksum");
      }
      fn(std::string_view(reinterpret_cast<const char*>(kv), h.key_bytes),
         std::string_view(reinterpret_cast<const char*>(kv + h.key_bytes), h.value_bytes));
      link = h.next;
    }
  }
  return ok_status();
}

PmKvStats PmKv::stats() const {
  PmKvStats s;
  s.records = records_;
  s.bucket_count = layout_->bucket_count;
  s.heap_bytes = layout_->heap_bytes;
  s.bytes_in_use = bytes_in_use_;
  s.payload_bytes = payload_bytes_;
  s.bytes_free = alloc_->free_units() * kUnit;
  s.largest_free_bytes = alloc_->largest_free_units() * kUnit;
  s.free_extents = alloc_->extents();
  s.reservations = reserved_.size();
  for (const auto& [unit, r] : reserved_) s.bytes_reserved += (r.units - r.live_units) * kUnit;
  s.reserved_misses = reserved_misses_;
  s.fences = fences_;
  s.puts = puts_;
  s.removes = removes_;
  return s;
}

}  // namespace ferry::store
