// Tailwind's log format: building segments and Algorithm 1.
#include "ferry/tailwind/format.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "ferry/common/checksum.h"

namespace ferry::tailwind {
namespace {

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void store_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
void store_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

EntryHeader load_header(const uint8_t* p) {
  EntryHeader h;
  std::memcpy(&h, p, sizeof h);
  return h;
}

// The fixed part of a body of each log-entry type, and whether the header's
// sizes are consistent with it.
bool header_consistent(const EntryHeader& h) {
  if (h.flags != 0) return false;
  switch (static_cast<EntryType>(h.type)) {
    case EntryType::kSegmentHeader:
      return h.key_bytes == 0 && h.value_bytes == 0 && h.body_bytes == kSegmentHeaderBodyBytes;
    case EntryType::kObject:
      return h.key_bytes != 0 &&
             uint64_t{h.body_bytes} == kObjectFixedBytes + uint64_t{h.key_bytes} + uint64_t{h.value_bytes};
    case EntryType::kTombstone:
      return h.key_bytes != 0 && h.value_bytes == 0 && uint64_t{h.body_bytes} == kTombstoneFixedBytes + h.key_bytes;
    default:
      return false;
  }
}

Entry decode(const EntryHeader& h, const uint8_t* entry, size_t offset) {
  Entry e;
  e.type = static_cast<EntryType>(h.type);
  e.offset = offset;
  e.bytes = kEntryHeaderBytes + h.body_bytes;
  const uint8_t* body = entry + kEntryHeaderBytes;
  switch (e.type) {
    case EntryType::kSegmentHeader:
      e.log_id = load_u64(body);
      e.segment_id = load_u64(body + 8);
      e.segment_bytes = load_u32(body + 16);
      break;
    case EntryType::kObject:
      e.table_id = load_u64(body);
      e.version = load_u64(body + 8);
      e.key = {body + kObjectFixedBytes, h.key_bytes};
      e.value = {body + kObjectFixedBytes + h.key_bytes, h.value_bytes};
      break;
    case EntryType::kTombstone:
      e.table_id = load_u64(body);
      e.version = load_u64(body + 8);
      e.tombstone_segment_id = load_u64(body + 16);
      e.key = {body + kTombstoneFixedBytes, h.key_bytes};
      break;
    default:
      break;
  }
  return e;
}

}  // namespace

std::string_view entry_type_name(EntryType type) {
  switch (type) {
    case EntryType::kInvalid: return "invalid";
    case EntryType::kSegmentHeader: return "segment-header";
    case EntryType::kObject: return "object";
    case EntryType::kTombstone: return "tombstone";
    case EntryType::kChecksum: return "checksum";
  }
  return "unknown";
}

std::string_view scan_stop_name(ScanStop stop) {
  switch (stop) {
    case ScanStop::kEndOfData: return "end-of-data";
    case ScanStop::kEndOfBuffer: return "end-of-buffer";
    case ScanStop::kChecksumMismatch: return "checksum-mismatch";
    case ScanStop::kBodyMismatch: return "body-mismatch";
    case ScanStop::kBadHeader: return "bad-header";
    case ScanStop::kTruncated: return "truncated";
  }
  return "unknown";
}

size_t object_append_bytes(size_t key_bytes, size_t value_bytes) {
  return kEntryHeaderBytes + kObjectFixedBytes + key_bytes + value_bytes + kChecksumEntryBytes;
}
size_t tombstone_append_bytes(size_t key_bytes) {
  return kEntryHeaderBytes + kTombstoneFixedBytes + key_bytes + kChecksumEntryBytes;
}

Result<SegmentWriter> SegmentWriter::start(std::span<uint8_t> memory, uint64_t log_id, uint64_t segment_id) {
  if (memory.size() < kSegmentHeaderAppendBytes || memory.size() > UINT32_MAX) {
    return invalid_argument("a segment of " + std::to_string(memory.size()) + " bytes cannot hold its header");
  }
  SegmentWriter w(memory, log_id, segment_id);
  uint8_t fixed[kSegmentHeaderBodyBytes] = {};
  store_u64(fixed, log_id);
  store_u64(fixed + 8, segment_id);
  store_u32(fixed + 16, static_cast<uint32_t>(memory.size()));
  EntryHeader h;
  h.type = static_cast<uint8_t>(EntryType::kSegmentHeader);
  h.body_bytes = kSegmentHeaderBodyBytes;
  auto appended = w.append(h, fixed, {}, {});
  if (!appended.ok()) return appended.status();
  return w;
}

Result<SegmentWriter::Appended> SegmentWriter::append_object(uint64_t table_id, uint64_t version,
                                                             std::span<const uint8_t> key,
                                                             std::span<const uint8_t> value) {
  if (key.empty() || key.size() > kMaxKeyBytes) return invalid_argument("key must be 1..65535 bytes");
  if (value.size() > UINT32_MAX - kObjectFixedBytes - key.size()) return invalid_argument("value too large");
  uint8_t fixed[kObjectFixedBytes];
  store_u64(fixed, table_id);
  store_u64(fixed + 8, version);
  EntryHeader h;
  h.type = static_cast<uint8_t>(EntryType::kObject);
  h.key_bytes = static_cast<uint16_t>(key.size());
  h.value_bytes = static_cast<uint32_t>(value.size());
  h.body_bytes = static_cast<uint32_t>(kObjectFixedBytes + key.size() + value.size());
  return append(h, fixed, key, value);
}

Result<SegmentWriter::Appended> SegmentWriter::append_tombstone(uint64_t table_id, uint64_t version,
                                                                uint64_t segment_id, std::span<const uint8_t> key) {
  if (key.empty() || key.size() > kMaxKeyBytes) return invalid_argument("key must be 1..65535 bytes");
  uint8_t fixed[kTombstoneFixedBytes];
  store_u64(fixed, table_id);
  store_u64(fixed + 8, version);
  store_u64(fixed + 16, segment_id);
  EntryHeader h;
  h.type = static_cast<uint8_t>(EntryType::kTombstone);
  h.key_bytes = static_cast<uint16_t>(key.size());
  h.body_bytes = static_cast<uint32_t>(kTombstoneFixedBytes + key.size());
  return append(h, fixed, key, {});
}

Result<SegmentWriter::Appended> SegmentWriter::append(const EntryHeader& header, std::span<const uint8_t> fixed,
                                                      std::span<const uint8_t> key, std::span<const uint8_t> value) {
  const size_t total = kEntryHeaderBytes + size_t{header.body_bytes} + kChecksumEntryBytes;
  if (total > memory_.size() - offset_) return resource_exhausted("segment full");
  uint8_t* entry = memory_.data() + offset_;
  uint8_t* body = entry + kEntryHeaderBytes;
  std::memcpy(body, fixed.data(), fixed.size());
  if (!key.empty()) std::memcpy(body + fixed.size(), key.data(), key.size());
  if (!value.empty()) std::memcpy(body + fixed.size() + key.size(), value.data(), value.size());
  EntryHeader h = header;
  h.body_crc = crc32c(0, body, h.body_bytes);
  std::memcpy(entry, &h, sizeof h);
  crc_ = crc32c(crc_, entry, kEntryHeaderBytes);
  checksum_ = stored_checksum(crc_);
  uint8_t* check = body + h.body_bytes;
  std::memset(check, 0, kChecksumEntryBytes);
  check[0] = static_cast<uint8_t>(EntryType::kChecksum);
  store_u32(check + 4, checksum_);
  Appended a{offset_, total, checksum_};
  offset_ += total;
  return a;
}

ScanResult scan_buffer(std::span<const uint8_t> buffer) {
  ScanResult r;
  const uint8_t* base = buffer.data();
  const size_t size = buffer.size();
  size_t pos = 0;
  uint32_t crc = 0;
  uint64_t entries = 0, objects = 0, tombstones = 0;  // since the start, committed at each checksum
  auto stop = [&](ScanStop why) {
    r.stop = why;
    r.stop_offset = pos;
  };
  while (true) {
    if (pos == size) {
      stop(ScanStop::kEndOfBuffer);
      break;
    }
    const uint8_t type = base[pos];
    if (type == static_cast<uint8_t>(EntryType::kInvalid)) {
      stop(ScanStop::kEndOfData);
      break;
    }
    if (type == static_cast<uint8_t>(EntryType::kChecksum)) {
      if (size - pos < kChecksumEntryBytes) {
        stop(ScanStop::kTruncated);
        break;
      }
      if (base[pos + 1] != 0 || base[pos + 2] != 0 || base[pos + 3] != 0) {
        stop(ScanStop::kBadHeader);
        break;
      }
      // Algorithm 1 lines 7-17: a checksum that differs from the chain ends
      // the valid prefix (a zero chain is stored as 1, never as 0).
      if (load_u32(base + pos + 4) != stored_checksum(crc)) {
        stop(ScanStop::kChecksumMismatch);
        break;
      }
      pos += kChecksumEntryBytes;
      r.valid_bytes = pos;
      r.checksum = stored_checksum(crc);
      r.entries = entries;
      r.objects = objects;
      r.tombstones = tombstones;
      continue;
    }
    if (size - pos < kEntryHeaderBytes) {
      stop(ScanStop::kTruncated);
      break;
    }
    const EntryHeader h = load_header(base + pos);
    if (!header_consistent(h)) {
      stop(ScanStop::kBadHeader);
      break;
    }
    if (h.body_bytes > size - pos - kEntryHeaderBytes) {
      stop(ScanStop::kTruncated);
      break;
    }
    if (crc32c(0, base + pos + kEntryHeaderBytes, h.body_bytes) != h.body_crc) {
      stop(ScanStop::kBodyMismatch);
      break;
    }
    crc = crc32c(crc, base + pos, kEntryHeaderBytes);  // Algorithm 1 line 24
    ++entries;
    objects += h.type == static_cast<uint8_t>(EntryType::kObject);
    tombstones += h.type == static_cast<uint8_t>(EntryType::kTombstone);
    pos += kEntryHeaderBytes + h.body_bytes;
  }
  r.zero_after_valid = std::all_of(base + r.valid_bytes, base + size, [](uint8_t b) { return b == 0; });
  return r;
}

Status for_each_entry(std::span<const uint8_t> valid_prefix, const std::function<void(const Entry&)>& visit) {
  const ScanResult scan = scan_buffer(valid_prefix);
  if (scan.valid_bytes != valid_prefix.size()) {
    return data_loss("not a valid prefix: the scan stopped at offset " + std::to_string(scan.stop_offset) +
                            " (" + std::string(scan_stop_name(scan.stop)) + ")");
  }
  size_t pos = 0;
  while (pos < valid_prefix.size()) {
    const uint8_t* p = valid_prefix.data() + pos;
    if (p[0] == static_cast<uint8_t>(EntryType::kChecksum)) {
      pos += kChecksumEntryBytes;
      continue;
    }
    const EntryHeader h = load_header(p);
    visit(decode(h, p, pos));
    pos += kEntryHeaderBytes + h.body_bytes;
  }
  return ok_status();
}

Status verify_closed(std::span<const uint8_t> buffer, uint64_t log_id, uint64_t segment_id, size_t offset,
                     uint32_t checksum) {
  const ScanResult scan = scan_buffer(buffer);
  auto fail = [&](const std::string& what) {
    return data_loss("replica of log " + std::to_string(log_id) + " segment " + std::to_string(segment_id) +
                            " is corrupted: " + what);
  };
  if (scan.valid_bytes != offset) {
    return fail("valid through " + std::to_string(scan.valid_bytes) + " of " + std::to_string(offset) +
                " bytes (scan stopped at " + std::to_string(scan.stop_offset) + ": " +
                std::string(scan_stop_name(scan.stop)) + ")");
  }
  if (scan.checksum != checksum) return fail("its last checksum differs from the one its close recorded");
  if (!scan.zero_after_valid) return fail("non-zero bytes after its end");
  if (offset < kSegmentHeaderAppendBytes) return fail("no segment header");
  const EntryHeader h = load_header(buffer.data());
  if (h.type != static_cast<uint8_t>(EntryType::kSegmentHeader)) return fail("it does not start with a segment header");
  const Entry e = decode(h, buffer.data(), 0);
  if (e.log_id != log_id || e.segment_id != segment_id) {
    return fail("it holds log " + std::to_string(e.log_id) + " segment " + std::to_string(e.segment_id));
  }
  return ok_status();
}

}  // namespace ferry::tailwind
