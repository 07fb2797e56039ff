// The WAL stream of replicated RocksDB (SIGCOMM'18 §5.1): the format in
// which the head's WAL bytes lie in every replica's PM, in TxnClient's
// database area (the same offsets on every replica), and the read side that
// a replica's applier (wal_applier.h) and recovery use. The full spec, with
// who writes what and in which order, is in docs/hyperloop-storage.md
// "Replicated RocksDB".
//
// Little-endian throughout. The database area is
//   [0, 64)            the stream header: u64 magic "FRWALST2", u64 stream
//                      id, u64 begin, u64 end, u64 last file, u64 last file
//                      bytes, u64 checksum (XXH3-64 of the first 48 bytes),
//                      u64 0
//   [64, 64 + C)       the ring: stream position p (bytes since the stream
//                      began; never wraps) is at 64 + p mod C, C the
//                      capacity (a multiple of 64)
// The stream is a sequence of chunks from `begin` to `end`, each at a
// position that is a multiple of 64: a 64-byte header {u64 magic
// "FRWALCK1", u64 its own position, u64 WAL file number, u64 file offset,
// u32 data bytes, u32 0, u64 checksum (XXH3-64 of the 40 bytes before it and
// the data), 16 zero bytes}, then the data (bytes [offset, offset + data) of
// that WAL file), padded to 64. A chunk's data may wrap at the ring's end; its
// header never does. Chunks of one WAL file are contiguous in the file and in
// order; every byte of WAL n precedes in the stream every byte of a WAL with
// a higher number (the head's ordering rule), so the stream read from its
// start is RocksDB's WAL in order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::rocks {

inline constexpr uint64_t kWalStreamMagic = 0x3254534C41575246ULL;  // "FRWALST2"
inline constexpr uint64_t kWalChunkMagic = 0x314B434C41575246ULL;   // "FRWALCK1"
inline constexpr uint64_t kWalStreamHeaderBytes = 64;
inline constexpr uint64_t kWalChunkHeaderBytes = 64;
inline constexpr uint64_t kWalStreamAlign = 64;

// The stream header. begin..end are the chunks a reader may still need:
// below `begin` the head may have overwritten them.
struct WalStreamHeader {
  uint64_t stream_id = 0;        // chosen by the head that started the stream; never 0
  uint64_t begin = 0;            // the oldest chunk kept
  uint64_t end = 0;              // after the newest chunk
  uint64_t last_file = 0;        // the WAL of the newest chunk (0: no chunk yet)
  uint64_t last_file_bytes = 0;  // bytes [0, last_file_bytes) of it are in the stream
};

// Where a replica's database stands in a stream: every WAL record before
// `offset` of WAL `file` (and every earlier WAL) is applied there, and the
// chunk at `position` holds that offset (offset in [its offset, its offset +
// its data]) or is the first chunk of a later WAL -- or `position` is the
// stream's end, where the next chunk will be.
struct WalStreamCursor {
  uint64_t stream_id = 0;
  uint64_t position = 0;
  uint64_t file = 0;  // 0: before any WAL
  uint64_t offset = 0;
};

// A chunk as read back (its data copied out of the region).
struct WalChunk {
  uint64_t position = 0;
  uint64_t file = 0;
  uint64_t offset = 0;
  std::vector<uint8_t> data;
  uint64_t next() const;  // the position after it
};

// The bytes a chunk of `data_bytes` occupies in the stream (header and
// padding included).
uint64_t wal_chunk_stream_bytes(uint64_t data_bytes);
// The ring's capacity for a database area of `db_bytes`.
uint64_t wal_stream_capacity(uint64_t db_bytes);

// Encodings (the head's side). `out` is 64 bytes.
void encode_wal_stream_header(const WalStreamHeader& h, std::span<uint8_t, kWalStreamHeaderBytes> out);
void encode_wal_chunk_header(uint64_t position, uint64_t file, uint64_t offset, std::span<const uint8_t> data,
                             std::span<uint8_t, kWalChunkHeaderBytes> out);
// The header in `bytes` (the database area's first 64 bytes, copied) for a
// ring of `capacity`. kNotFound: all zero (no stream yet); kDataLoss: bad
// magic or checksum, a zero stream id, or begin/end misaligned, out of
// order or apart by more than the capacity.
Result<WalStreamHeader> decode_wal_stream_header(std::span<const uint8_t, kWalStreamHeaderBytes> bytes,
                                                 uint64_t capacity);

// A replica's region (TxnClient's layout) read as a WAL stream. The NIC may
// write the region while it is read: every read copies the bytes out first
// and trusts only what verifies (the header's checksum; a chunk's magic,
// position and checksum), and chunks are read only below the header's end,
// which nothing overwrites before every replica's applier passed them.
// `region` must outlive the reader.
class WalStreamReader {
 public:
  // kDataLoss: the control block holds no transaction layout with room for a
  // stream.
  static Result<WalStreamReader> open(std::span<const uint8_t> region);

  // The header now (decode_wal_stream_header's errors).
  Result<WalStreamHeader> header() const;
  // The chunk at `position`, which must lie in [header.begin, header.end)
  // of a header just read (else kOutOfRange). kDataLoss: it does not verify,
  // or it reaches past `end`.
  Result<WalChunk> chunk_at(uint64_t position, const WalStreamHeader& header) const;
  uint64_t capacity() const { return capacity_; }

 private:
  WalStreamReader(std::span<const uint8_t> db, uint64_t capacity) : db_(db), capacity_(capacity) {}
  void copy_out(uint64_t position, std::span<uint8_t> out) const;  // wraps at the ring's end

  std::span<const uint8_t> db_;
  uint64_t capacity_;
};

// The bytes of each WAL file that a region's stream holds from `begin` to
// `end`, in stream order (tests, tools). Errors: WalStreamReader's, and
// kDataLoss when the chunks of a file are not contiguous.
struct WalImage {
  uint64_t file_number = 0;
  uint64_t first_offset = 0;   // the file offset of bytes[0]
  std::vector<uint8_t> bytes;  // the file's bytes [first_offset, first_offset + size)
};
Result<std::vector<WalImage>> read_wal_stream(std::span<const uint8_t> region);

}  // namespace ferry::rocks
