// A backup's durable storage for closed Tailwind buffers (ATC'18 §3.2: a
// closed buffer is flushed to storage, re-zeroed and returned to the pool;
// §3.3.1: on recovery, closed buffers are read back from storage and are
// the only copies whose metadata is already known).
//
// One directory per backup, one file per (log, segment):
//
//   log-<log_id>-seg-<segment_id>.tws       decimal ids, no leading zeros
//   log-<log_id>-seg-<segment_id>.tws.tmp   a write in progress; a crash may
//                                           leave one behind, readers ignore it
//
// File format (all integers little-endian; the layout is the format):
//
//   offset size  field
//        0    8  magic            the ASCII bytes "FRYTWSG1"
//        8    4  format_version   1
//       12    4  flags            0
//       16    8  log_id
//       24    8  segment_id
//       32    8  replica_version
//       40    8  bytes            valid bytes of the buffer (the close's offset)
//       48    4  checksum         the last Tailwind checksum in the buffer
//       52    4  data_crc32c      CRC32C (ferry::crc32c, seed 0) of the data
//       56    4  header_crc32c    CRC32C of header bytes [0, 56)
//       60    4  zero
//       64       data             exactly `bytes` bytes
//
// Files written with StorageMode::kDirect are padded with zeros to a multiple
// of 4096 bytes (the offset, length and memory alignment of its writes: a
// multiple of the logical block size of every filesystem open() accepts); `bytes` alone gives the data's length, so a
// reader accepts a file of any length from 64 + bytes up to that multiple,
// whichever mode wrote it. The header repeats the ids in the file name so a
// file copied or renamed onto another segment's name is detected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::tailwind {

// How write() makes a segment durable.
enum class StorageMode : uint8_t {
  kFdatasync = 0,  // buffered write(), then fdatasync()
  kDirect,         // O_DIRECT writes padded to 4096 bytes, then fdatasync() for the size
};
// "fdatasync", "o_direct".
std::string_view storage_mode_name(StorageMode mode);
// Accepts the names storage_mode_name() returns, and "direct" for kDirect;
// kInvalidArgument for anything else.
Result<StorageMode> parse_storage_mode(std::string_view name);

// What a closed replica is, as its close recorded it.
struct StoredSegment {
  uint64_t log_id = 0;
  uint64_t segment_id = 0;
  uint64_t replica_version = 0;
  uint64_t bytes = 0;     // valid bytes of the buffer (the close's offset)
  uint32_t checksum = 0;  // the last checksum in it (the close's checksum)
};

// Totals since open(). A failed call counts nothing except the syncs it
// issued.
struct StorageCounters {
  uint64_t segments_written = 0;  // successful write()s
  uint64_t bytes_written = 0;     // file bytes of those: header, data and O_DIRECT padding
  uint64_t syncs = 0;             // fdatasync() and directory fsync() calls
  uint64_t segments_read = 0;     // successful read()s
  uint64_t write_ns = 0;          // wall time inside successful write()s
};

// One backup's durable storage for closed buffers: a directory, one file
// per (log, segment). Each directory should have one SegmentStore at a time
// (two would race on the temporary names).
//
// Thread-safe. Writes and removes are serialized by one mutex, held across
// their syncs; read() and list() take it only to count, and see either the
// old or the new copy of a segment being replaced (rename is atomic).
//
// I/O errors map to codes a backup can act on: kResourceExhausted when the
// filesystem is full (stop accepting buffers), kPermissionDenied for
// EACCES/EPERM/EROFS, kUnavailable for any other failure of the device.
class SegmentStore {
 public:
  // Opens the store in `dir`, creating it (and its parents, each made
  // durable in its parent) if missing. kDirect: probes that the filesystem
  // accepts aligned O_DIRECT writes of 4096 bytes and is not memory
  // (tmpfs and ramfs accept O_DIRECT since Linux 6.6 but bypass nothing and
  // persist nothing); kInvalidArgument naming `dir` and suggesting
  // fdatasync if not. Leftover temporaries are left alone.
  static Result<std::unique_ptr<SegmentStore>> open(const std::string& dir, StorageMode mode);

  ~SegmentStore();
  SegmentStore(const SegmentStore&) = delete;
  SegmentStore& operator=(const SegmentStore&) = delete;

  // Durably stores the valid bytes of a closed buffer: once it returns OK
  // the segment (data and file name) survives a power failure of the host.
  // Writes a temporary, syncs it, renames it over the final name and fsyncs
  // the directory, so a crash at any point leaves the older copy of the
  // same (log, segment), if any, or the new one -- never a mix. Replaces an
  // older copy. kInvalidArgument if bytes.size() != meta.bytes. `bytes` is
  // only read during the call; the caller may re-zero it afterwards.
  [[nodiscard]] Status write(const StoredSegment& meta, std::span<const uint8_t> bytes);

  // One segment read back: its metadata and exactly meta.bytes bytes.
  struct Loaded {
    StoredSegment meta;
    std::vector<uint8_t> bytes;
  };
  // kNotFound if absent; kDataLoss if the file is damaged (short file, bad
  // magic, version or flags, header CRC mismatch, ids that differ from the
  // file name, data CRC mismatch). Never crashes on any file content, and
  // allocates at most the file's size.
  [[nodiscard]] Result<Loaded> read(uint64_t log_id, uint64_t segment_id) const;

  // The segments stored for `log_id`, ascending segment_id: metadata only,
  // from the file headers (the header and the file's length are checked,
  // the data CRC is left to read()). Damaged files are skipped and counted
  // in *damaged if non-null; temporaries and names not of the format above
  // are ignored. An unreadable directory yields an empty list.
  std::vector<StoredSegment> list(uint64_t log_id, uint64_t* damaged = nullptr) const;

  // Removes a segment durably (unlink, then fsync of the directory).
  // kNotFound if absent.
  [[nodiscard]] Status remove(uint64_t log_id, uint64_t segment_id);

  StorageMode mode() const { return mode_; }

  // Paced writes: write() issues at most `chunk_bytes` per system call and
  // yields the CPU between them (0: one call, the default). For a writer
  // that shares a core with latency-critical threads (a backup's flusher
  // beside its RPC workers): a long write then delays them by one chunk,
  // not by the whole segment. Not thread-safe against a concurrent write().
  void set_paced_writes(size_t chunk_bytes) { paced_chunk_bytes_ = chunk_bytes; }
  const std::string& dir() const { return dir_; }
  StorageCounters counters() const;

 private:
  struct AlignedDeleter {
    void operator()(uint8_t* p) const;
  };
  using AlignedBuffer = std::unique_ptr<uint8_t, AlignedDeleter>;

  SegmentStore(std::string dir, StorageMode mode, int dir_fd, AlignedBuffer chunk);

  std::string path_of(const std::string& name) const;

  const std::string dir_;
  const StorageMode mode_;
  const int dir_fd_;  // O_DIRECTORY, for *at() calls and the directory fsync
  size_t paced_chunk_bytes_ = 0;

  mutable std::mutex mutex_;  // sim-seam: never held across a fiber switch (file I/O runs whole)
  // kDirect: the aligned staging buffer of its writes (storage.cc:
  // kDirectChunkBytes); null for kFdatasync. Guarded by mutex_.
  AlignedBuffer chunk_;
  mutable StorageCounters counters_;  // guarded by mutex_
};

}  // namespace ferry::tailwind
