// The WAL stream's format (wal_stream.h): header and chunk encodings, and
// the verified read side over a replica's region.
#include "ferry/rocksdb/wal_stream.h"

#include <cstring>
#include <string>

#include "ferry/common/assert.h"
#include "ferry/common/checksum.h"
#include "ferry/hyperloop/txn.h"

namespace ferry::rocks {

namespace {

constexpr uint64_t kHeaderChecked = 48;  // the stream header's fields before its checksum
constexpr uint64_t kChunkChecked = 40;   // the chunk header's fields before its checksum

uint64_t load_u64(const uint8_t* at) {
  uint64_t v;
  std::memcpy(&v, at, 8);
  return v;
}
uint32_t load_u32(const uint8_t* at) {
  uint32_t v;
  std::memcpy(&v, at, 4);
  return v;
}
void store_u64(uint8_t* at, uint64_t v) { std::memcpy(at, &v, 8); }
void store_u32(uint8_t* at, uint32_t v) { std::memcpy(at, &v, 4); }

uint64_t chunk_checksum(std::span<const uint8_t> fields, std::span<const uint8_t> data) {
  // XXH3 over the fields, then over the data seeded with the first: one
  // pass each, no concatenation.
  return checksum64(data, checksum64(fields));
}

}  // namespace

uint64_t WalChunk::next() const { return position + wal_chunk_stream_bytes(data.size()); }

uint64_t wal_chunk_stream_bytes(uint64_t data_bytes) {
  return kWalChunkHeaderBytes + (data_bytes + kWalStreamAlign - 1) / kWalStreamAlign * kWalStreamAlign;
}

uint64_t wal_stream_capacity(uint64_t db_bytes) {
  return db_bytes <= kWalStreamHeaderBytes ? 0 : (db_bytes - kWalStreamHeaderBytes) / kWalStreamAlign * kWalStreamAlign;
}

void encode_wal_stream_header(const WalStreamHeader& h, std::span<uint8_t, kWalStreamHeaderBytes> out) {
  std::memset(out.data(), 0, out.size());
  store_u64(out.data(), kWalStreamMagic);
  store_u64(out.data() + 8, h.stream_id);
  store_u64(out.data() + 16, h.begin);
  store_u64(out.data() + 24, h.end);
  store_u64(out.data() + 32, h.last_file);
  store_u64(out.data() + 40, h.last_file_bytes);
  store_u64(out.data() + kHeaderChecked, checksum64(std::span<const uint8_t>(out.data(), kHeaderChecked)));
}

void encode_wal_chunk_header(uint64_t position, uint64_t file, uint64_t offset, std::span<const uint8_t> data,
                             std::span<uint8_t, kWalChunkHeaderBytes> out) {
  FERRY_ASSERT(position % kWalStreamAlign == 0, "a chunk at ", position, " is not 64-byte aligned");
  FERRY_ASSERT(!data.empty() && data.size() <= UINT32_MAX, "a chunk of ", data.size(), " bytes");
  std::memset(out.data(), 0, out.size());
  store_u64(out.data(), kWalChunkMagic);
  store_u64(out.data() + 8, position);
  store_u64(out.data() + 16, file);
  store_u64(out.data() + 24, offset);
  store_u32(out.data() + 32, static_cast<uint32_t>(data.size()));
  store_u64(out.data() + kChunkChecked, chunk_checksum(std::span<const uint8_t>(out.data(), kChunkChecked), data));
}

Result<WalStreamReader> WalStreamReader::open(std::span<const uint8_t> region) {
  const uint64_t control = hyperloop::kTxnControlBytes;
  if (region.size() < control) return data_loss("WAL stream: a region smaller than the control block");
  const uint64_t log_bytes = load_u64(region.data() + 8);
  const uint64_t db_bytes = load_u64(region.data() + 16);
  if (log_bytes == 0 || log_bytes % hyperloop::kTxnRecordAlign != 0 || log_bytes > region.size() - control ||
      db_bytes > region.size() - control - log_bytes || wal_stream_capacity(db_bytes) == 0) {
    return data_loss("WAL stream: the region holds no transaction layout with room for a stream");
  }
  return WalStreamReader(region.subspan(control + log_bytes, db_bytes), wal_stream_capacity(db_bytes));
}

Result<WalStreamHeader> decode_wal_stream_header(std::span<const uint8_t, kWalStreamHeaderBytes> bytes,
                                                 uint64_t capacity) {
  const uint8_t* h = bytes.data();
  bool zero = true;
  for (uint8_t b : bytes) zero = zero && b == 0;
  if (zero) return not_found("WAL stream: no stream was started in this region");
  if (load_u64(h) != kWalStreamMagic ||
      load_u64(h + kHeaderChecked) != checksum64(std::span<const uint8_t>(h, kHeaderChecked))) {
    return data_loss("WAL stream: the header fails its magic or checksum");
  }
  WalStreamHeader out;
  out.stream_id = load_u64(h + 8);
  out.begin = load_u64(h + 16);
  out.end = load_u64(h + 24);
  out.last_file = load_u64(h + 32);
  out.last_file_bytes = load_u64(h + 40);
  if (out.stream_id == 0 || out.begin > out.end || out.end - out.begin > capacity || out.begin % kWalStreamAlign != 0 ||
      out.end % kWalStreamAlign != 0) {
    return data_loss("WAL stream: a header with stream id " + std::to_string(out.stream_id) + ", begin " +
                     std::to_string(out.begin) + " and end " + std::to_string(out.end) + " (capacity " +
                     std::to_string(capacity) + ")");
  }
  return out;
}

Result<WalStreamHeader> WalStreamReader::header() const {
  uint8_t h[kWalStreamHeaderBytes];
  std::memcpy(h, db_.data(), sizeof h);
  return decode_wal_stream_header(h, capacity_);
}

void WalStreamReader::copy_out(uint64_t position, std::span<uint8_t> out) const {
  FERRY_ASSERT(out.size() <= capacity_, "a read of ", out.size(), " bytes from a ring of ", capacity_);
  const uint64_t at = position % capacity_;
  const uint64_t first = std::min<uint64_t>(out.size(), capacity_ - at);
  std::memcpy(out.data(), db_.data() + kWalStreamHeaderBytes + at, first);
  if (first < out.size()) std::memcpy(out.data() + first, db_.data() + kWalStreamHeaderBytes, out.size() - first);
}

Result<WalChunk> WalStreamReader::chunk_at(uint64_t position, const WalStreamHeader& header) const {
  if (position < header.begin || position >= header.end || position % kWalStreamAlign != 0) {
    return out_of_range("WAL stream: no chunk at " + std::to_string(position) + " in [" + std::to_string(header.begin) +
                        ", " + std::to_string(header.end) + ")");
  }
  uint8_t h[kWalChunkHeaderBytes];
  copy_out(position, h);
  const uint64_t bytes = load_u32(h + 32);
  if (load_u64(h) != kWalChunkMagic || load_u64(h + 8) != position || bytes == 0 ||
      wal_chunk_stream_bytes(bytes) > header.end - position) {
    return data_loss("WAL stream: no valid chunk header at " + std::to_string(position));
  }
  WalChunk c;
  c.position = position;
  c.file = load_u64(h + 16);
  c.offset = load_u64(h + 24);
  c.data.resize(bytes);
  copy_out(position + kWalChunkHeaderBytes, c.data);
  if (load_u64(h + kChunkChecked) != chunk_checksum(std::span<const uint8_t>(h, kChunkChecked), c.data)) {
    return data_loss("WAL stream: the chunk at " + std::to_string(position) + " fails its checksum");
  }
  return c;
}

Result<std::vector<WalImage>> read_wal_stream(std::span<const uint8_t> region) {
  FERRY_ASSIGN_OR_RETURN(const WalStreamReader reader, WalStreamReader::open(region));
  FERRY_ASSIGN_OR_RETURN(const WalStreamHeader header, reader.header());
  std::vector<WalImage> out;
  for (uint64_t p = header.begin; p < header.end;) {
    FERRY_ASSIGN_OR_RETURN(WalChunk c, reader.chunk_at(p, header));
    if (out.empty() || out.back().file_number != c.file) {
      if (!out.empty() && c.file < out.back().file_number) {
        return data_loss("WAL stream: WAL " + std::to_string(c.file) + " after WAL " +
                         std::to_string(out.back().file_number));
      }
      out.push_back(WalImage{c.file, c.offset, {}});
    } else if (out.back().first_offset + out.back().bytes.size() != c.offset) {
      return data_loss("WAL stream: WAL " + std::to_string(c.file) + " continues at " + std::to_string(c.offset) +
                       " after " + std::to_string(out.back().first_offset + out.back().bytes.size()));
    }
    out.back().bytes.insert(out.back().bytes.end(), c.data.begin(), c.data.end());
    p = c.next();
  }
  return out;
}

}  // namespace ferry::rocks
