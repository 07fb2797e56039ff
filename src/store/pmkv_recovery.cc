// PmKv's recovery (open) and consistency check (verify): walk every chain of
// the index, check every link and record, rebuild the DRAM allocator from
// the blocks reached (docs/pmkv.md, "Recovery").
//
// Nothing in the region is trusted: every link is bounds-checked before it
// is followed, every header before its sizes are used, and a block already
// reached (a loop, or two links to one block) is a corruption, so the walk
// ends and never reads outside the region.
#include <algorithm>
#include <cstring>

#include "ferry/store/pmkv.h"
#include "pmkv_alloc.h"
#include "pmkv_format.h"

namespace ferry::store {

using detail::kRecordHeaderBytes;
using detail::kUnit;
using detail::RecordHeader;

namespace {

bool test_bit(const std::vector<uint64_t>& bits, uint64_t i) { return (bits[i / 64] >> (i % 64)) & 1; }
void set_bit(std::vector<uint64_t>& bits, uint64_t i) { bits[i / 64] |= uint64_t{1} << (i % 64); }

}  // namespace

Status PmKv::walk(std::vector<uint64_t>& used, const CutLink* cut, bool verify_checksums, Totals& totals) const {
  const Layout& layout = *layout_;
  const uint64_t heap_unit0 = layout.heap_offset / kUnit;
  used.assign((layout.heap_bytes / kUnit + 63) / 64, 0);
  totals = Totals{};
  struct Seen {
    uint64_t hash;
    uint64_t at;
  };
  std::vector<Seen> chain;  // the current chain's records, to find a key twice

  // Why the record `link` points to (from bucket `bucket`) cannot be part of
  // the store, or empty if it can; fills `header` and `hash`.
  auto check = [&](uint64_t link, uint64_t bucket, RecordHeader& header, uint64_t& hash) -> std::string {
    const uint64_t at = detail::link_offset(link);
    if (at < layout.heap_offset || at >= layout.heap_end() || layout.heap_end() - at < kRecordHeaderBytes) {
      return "points outside the heap";
    }
    std::memcpy(&header, base_ + at, sizeof(header));
    if (std::string why = detail::check_record_header(header, at, layout); !why.empty()) return why;
    for (uint64_t u = 0; u < header.block_units; ++u) {
      if (test_bit(used, at / kUnit - heap_unit0 + u)) return "overlaps a record already reached (a loop?)";
    }
    const uint8_t* kv = base_ + at + kRecordHeaderBytes;
    const std::string_view key(reinterpret_cast<const char*>(kv), header.key_bytes);
    hash = detail::key_hash(key, layout.hash_seed);
    if (hash % layout.bucket_count != bucket) return "its key belongs to another bucket";
    if (detail::hash_tag(hash) != detail::link_tag(link)) return "the link's tag does not match the key";
    if (verify_checksums && detail::record_checksum(header, kv) != header.checksum) return "checksum mismatch";
    for (const Seen& s : chain) {
      if (s.hash == hash && std::memcmp(base_ + s.at + kRecordHeaderBytes, kv, header.key_bytes) == 0) {
        return "its key is already in the chain";  // equal hashes and key bytes: equal lengths too
      }
    }
    return {};
  };

  for (uint64_t bucket = 0; bucket < layout.bucket_count; ++bucket) {
    chain.clear();
    uint64_t link_at = layout.bucket_link_offset(bucket);
    for (;;) {
      const uint64_t link = detail::load_u64(base_ + link_at);
      if (link == 0) break;
      RecordHeader header{};
      uint64_t hash = 0;
      if (const std::string why = check(link, bucket, header, hash); !why.empty()) {
        const std::string where = "bucket " + std::to_string(bucket) + ", link at offset " + std::to_string(link_at) +
                                  " to offset " + std::to_string(detail::link_offset(link)) + ": " + why;
        if (cut == nullptr) return data_loss("PmKv: " + where);
        FERRY_RETURN_IF_ERROR((*cut)(link_at, where));
        break;
      }
      const uint64_t at = detail::link_offset(link);
      for (uint64_t u = 0; u < header.block_units; ++u) set_bit(used, at / kUnit - heap_unit0 + u);
      chain.push_back({hash, at});
      ++totals.records;
      totals.bytes_in_use += size_t{header.block_units} * kUnit;
      totals.payload_bytes += size_t{header.key_bytes} + header.value_bytes;
      link_at = at;
    }
    totals.longest_chain = std::max<uint64_t>(totals.longest_chain, chain.size());
  }
  return ok_status();
}

Status PmKv::recover() {
  PmKvRecovery report;
  CutLink cut = [&](uint64_t link_at, const std::string& why) {
    report.problems.push_back(why);
    ++report.links_cut;
    return commit_word(link_at, 0, CrashPoint::kCommitWritten, CrashPoint::kCommitDurable);
  };
  std::vector<uint64_t> used;
  Totals totals;
  FERRY_RETURN_IF_ERROR(walk(used, options_.repair ? &cut : nullptr, options_.verify_checksums, totals));
  alloc_->rebuild(used);
  records_ = totals.records;
  bytes_in_use_ = totals.bytes_in_use;
  payload_bytes_ = totals.payload_bytes;
  report.records = totals.records;
  report.longest_chain = totals.longest_chain;
  recovery_ = std::move(report);
  return ok_status();
}

Status PmKv::verify() const {
  FERRY_RETURN_IF_ERROR(check_usable());
  std::vector<uint64_t> used;
  Totals totals;
  FERRY_RETURN_IF_ERROR(walk(used, nullptr, /*verify_checksums=*/true, totals));
  if (totals.records != records_ || totals.bytes_in_use != bytes_in_use_ || totals.payload_bytes != payload_bytes_) {
    return internal_error("PmKv: the index holds " + std::to_string(totals.records) + " records in " +
                          std::to_string(totals.bytes_in_use) + " bytes, the engine counts " +
                          std::to_string(records_) + " in " + std::to_string(bytes_in_use_));
  }
  const uint64_t heap_unit0 = layout_->heap_offset / kUnit;
  uint64_t free_units = 0;
  std::string overlap;
  alloc_->for_each_free([&](uint64_t unit, uint64_t units) {
    free_units += units;
    for (uint64_t u = unit; u < unit + units && overlap.empty(); ++u) {
      if (test_bit(used, u - heap_unit0)) overlap = "free extent at unit " + std::to_string(unit) + " holds a record";
    }
  });
  if (!overlap.empty()) return internal_error("PmKv: " + overlap);
  // A reservation's unit holds a record exactly where it says so.
  uint64_t reserved_units = 0;
  for (const auto& [first, r] : reserved_) {
    reserved_units += r.units - r.live_units;
    for (uint64_t i = 0; i < r.units; ++i) {
      if (r.live[i] != test_bit(used, first + i - heap_unit0)) {
        return internal_error("PmKv: reservation at unit " + std::to_string(first) + ": unit " +
                              std::to_string(first + i) + (r.live[i] ? " should hold a record" : " holds a record"));
      }
    }
  }
  if ((free_units + reserved_units) * kUnit + totals.bytes_in_use != layout_->heap_bytes) {
    return internal_error("PmKv: " + std::to_string(free_units * kUnit) + " bytes free + " +
                          std::to_string(reserved_units * kUnit) + " reserved + " +
                          std::to_string(totals.bytes_in_use) + " in use != heap of " +
                          std::to_string(layout_->heap_bytes) + " (a block is leaked)");
  }
  return ok_status();
}

}  // namespace ferry::store
