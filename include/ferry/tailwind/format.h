// Tailwind's log format (ATC'18 §3.1, Figure 3; specification:
// docs/tailwind.md "Format"). A primary's segment and every backup's buffer
// for it hold the same bytes: a sequence of entries, each log entry followed
// by a checksum entry whose CRC covers every entry header so far in the
// buffer. Backups never parse it while replication runs; they scan it
// (Algorithm 1, scan_buffer) only when its primary failed, or to verify a
// closed buffer read back from storage.
//
// Everything here is part of the format: changing a constant, a field or
// the CRC is a new format. All integers are little-endian; buffer bytes are
// read through memcpy (never by casting), so a corrupt buffer is only ever
// data to check.
//
//   log entry       EntryHeader (16 B), then body_bytes of body
//   checksum entry  u8 type = kChecksum, 3 zero bytes, u32 CRC (8 B)
//
// The CRC is CRC32C chained over the 16-byte headers of every log entry
// from the start of the buffer (checksum entries are not covered); a CRC
// of 0 is written as 1, so a checksum entry is never all zero (§3.3.1:
// buffers are pre-zeroed, and a zero word must never look valid). Each
// header carries a CRC32C of its own body, so the chain covers the bodies
// too.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "ferry/common/status.h"

namespace ferry::tailwind {

static_assert(std::endian::native == std::endian::little, "the Tailwind format is little-endian");

enum class EntryType : uint8_t {
  kInvalid = 0,        // pre-zeroed memory: the end of the data
  kSegmentHeader = 1,  // first entry of every segment: which log and segment this is
  kObject = 2,         // a key-value object (a PUT)
  kTombstone = 3,      // a deleted object
  kChecksum = 4,       // CRC over all log-entry headers so far in the buffer
};
std::string_view entry_type_name(EntryType type);

inline constexpr size_t kEntryHeaderBytes = 16;
inline constexpr size_t kChecksumEntryBytes = 8;

// The 16-byte header of a log entry (not of a checksum entry).
struct EntryHeader {
  uint8_t type = 0;         // EntryType
  uint8_t flags = 0;        // 0
  uint16_t key_bytes = 0;   // objects and tombstones; 0 otherwise
  uint32_t body_bytes = 0;  // bytes after the header (the entry's size)
  uint32_t value_bytes = 0; // objects; 0 otherwise
  uint32_t body_crc = 0;    // CRC32C of the body
};
static_assert(sizeof(EntryHeader) == kEntryHeaderBytes);

// Bodies (fixed part first, then the key, then the value).
inline constexpr size_t kSegmentHeaderBodyBytes = 24;  // u64 log_id, u64 segment_id, u32 segment_bytes, u32 0
inline constexpr size_t kObjectFixedBytes = 16;        // u64 table_id, u64 version
inline constexpr size_t kTombstoneFixedBytes = 24;     // u64 table_id, u64 version (of the object removed), u64 segment_id (where it was)
inline constexpr size_t kMaxKeyBytes = 0xFFFF;

// A checksum as the primary writes it: never 0.
inline uint32_t stored_checksum(uint32_t crc) { return crc == 0 ? 1 : crc; }

// One decoded log entry. Spans point into the buffer it was read from.
struct Entry {
  EntryType type = EntryType::kInvalid;
  size_t offset = 0;        // of its header in the buffer
  size_t bytes = 0;         // header + body (not the checksum entry after it)
  // kSegmentHeader
  uint64_t log_id = 0;
  uint64_t segment_id = 0;
  uint32_t segment_bytes = 0;
  // kObject, kTombstone
  uint64_t table_id = 0;
  uint64_t version = 0;
  uint64_t tombstone_segment_id = 0;  // kTombstone: the segment that held the object
  std::span<const uint8_t> key;
  std::span<const uint8_t> value;   // kObject
};

// Bytes an appended object (or tombstone) takes with its checksum entry.
size_t object_append_bytes(size_t key_bytes, size_t value_bytes);
size_t tombstone_append_bytes(size_t key_bytes);
inline constexpr size_t kSegmentHeaderAppendBytes = kEntryHeaderBytes + kSegmentHeaderBodyBytes + kChecksumEntryBytes;

// Builds a segment in memory the caller owns (the primary's log), appending
// entries and their checksum entries; the bytes it writes are exactly the
// bytes a replica must hold. The memory must be zero from offset() on.
// Not thread-safe.
class SegmentWriter {
 public:
  // Starts a segment in `memory` with its segment-header entry.
  // kInvalidArgument if the memory is too small for it.
  static Result<SegmentWriter> start(std::span<uint8_t> memory, uint64_t log_id, uint64_t segment_id);

  // Where an append landed: [offset, offset + bytes) of the segment, the
  // entry and its checksum entry (what the primary replicates, in one WRITE).
  struct Appended {
    size_t offset = 0;
    size_t bytes = 0;
    uint32_t checksum = 0;  // the stored checksum it ends with
  };
  // kResourceExhausted when the entry does not fit in what is left (the
  // segment is then full: close it and start another); kInvalidArgument
  // for a key over kMaxKeyBytes or an empty key.
  Result<Appended> append_object(uint64_t table_id, uint64_t version, std::span<const uint8_t> key,
                                 std::span<const uint8_t> value);
  Result<Appended> append_tombstone(uint64_t table_id, uint64_t version, uint64_t segment_id,
                                    std::span<const uint8_t> key);

  size_t offset() const { return offset_; }        // bytes written (valid) so far
  uint32_t checksum() const { return checksum_; }  // the last stored checksum
  size_t capacity() const { return memory_.size(); }
  uint64_t log_id() const { return log_id_; }
  uint64_t segment_id() const { return segment_id_; }
  std::span<const uint8_t> bytes() const { return memory_.first(offset_); }

 private:
  SegmentWriter(std::span<uint8_t> memory, uint64_t log_id, uint64_t segment_id)
      : memory_(memory), log_id_(log_id), segment_id_(segment_id) {}
  Result<Appended> append(const EntryHeader& header, std::span<const uint8_t> fixed, std::span<const uint8_t> key,
                          std::span<const uint8_t> value);
  std::span<uint8_t> memory_;
  uint64_t log_id_;
  uint64_t segment_id_;
  size_t offset_ = 0;
  uint32_t crc_ = 0;       // running CRC over log-entry headers
  uint32_t checksum_ = 0;  // stored form of crc_ at the last checksum entry
};

// Why a scan stopped.
enum class ScanStop : uint8_t {
  kEndOfData = 0,      // a zero type byte: nothing (more) was written here
  kEndOfBuffer,        // the last entry ended exactly at the end of the buffer
  kChecksumMismatch,   // a checksum entry disagrees with the headers before it (torn or corrupt)
  kBodyMismatch,       // an entry's body does not match its header's CRC (torn or corrupt)
  kBadHeader,          // unknown type, non-zero reserved bits, inconsistent sizes
  kTruncated,          // a header or body would run past the end of the buffer
};
std::string_view scan_stop_name(ScanStop stop);

struct ScanResult {
  // The buffer is valid through here: just past the last checksum entry
  // that matched (0: none did).
  size_t valid_bytes = 0;
  uint32_t checksum = 0;   // that checksum entry's value (0: none)
  uint64_t entries = 0;    // log entries (any type) before valid_bytes
  uint64_t objects = 0;    // ... of which objects
  uint64_t tombstones = 0; // ... of which tombstones
  ScanStop stop = ScanStop::kEndOfData;
  size_t stop_offset = 0;  // where the scan stopped
  // Whether every byte from valid_bytes to the end is zero. A buffer whose
  // primary failed has at most a torn tail there; a closed buffer (or a
  // tail after an acknowledged append) must have none.
  bool zero_after_valid = true;
};

// Algorithm 1 (§3.3.1) over `buffer`: walks the entries from offset 0 by
// their sizes, chaining the CRC over each log-entry header, and moves the
// valid offset past each checksum entry that equals the chain so far. It
// also checks each entry's body CRC and header sanity, so a bit flip
// anywhere stops it at or before the flipped entry. Never reads outside
// `buffer`; any bytes are acceptable input.
ScanResult scan_buffer(std::span<const uint8_t> buffer);

// Decodes the log entries of a prefix scan_buffer() found valid
// ([0, valid_bytes)), in order. Returns kDataLoss (and stops) if the bytes
// are not a valid prefix -- the caller scanned something else.
Status for_each_entry(std::span<const uint8_t> valid_prefix, const std::function<void(const Entry&)>& visit);

// Checks a closed buffer against what its close recorded: the scan must end
// exactly at `offset` with `checksum`, with zeros after it, and the first
// entry must be the segment header of (log_id, segment_id). kDataLoss,
// naming the first disagreement, declares the replica corrupted.
Status verify_closed(std::span<const uint8_t> buffer, uint64_t log_id, uint64_t segment_id, size_t offset,
                     uint32_t checksum);

}  // namespace ferry::tailwind
