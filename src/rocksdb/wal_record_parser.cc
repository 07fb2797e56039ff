// RocksDB's WAL physical records (wal_record_parser.h).
#include "wal_record_parser.h"

#include <cstring>
#include <string>

#include "ferry/common/checksum.h"

namespace ferry::rocks {

namespace {

constexpr uint64_t kHeaderBytes = 7;             // CRC, length, type
constexpr uint64_t kRecyclableHeaderBytes = 11;  // and the log number's low 32 bits
constexpr uint32_t kMaskDelta = 0xa282ead8u;     // RocksDB's crc32c::Mask

uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

uint32_t load_u32(const uint8_t* at) {
  uint32_t v;
  std::memcpy(&v, at, 4);
  return v;
}

}  // namespace

Result<WalPhysicalRecord> parse_wal_physical_record(std::span<const uint8_t> window, uint64_t offset, uint64_t file) {
  WalPhysicalRecord r;
  const uint64_t block_left = kWalBlockBytes - offset % kWalBlockBytes;
  if (block_left < kHeaderBytes) {
    // The block's trailer: too short for a header, zero-filled.
    if (window.size() < block_left) return r;
    r.kind = WalPhysicalRecord::kSkip;
    r.bytes = block_left;
    return r;
  }
  if (window.size() < kHeaderBytes) return r;
  const uint8_t type = window[6];
  const uint64_t length = window[4] | (uint64_t{window[5]} << 8);
  if (type == 0 && length == 0) {
    // Zero to the block's end: a recyclable writer's trailer (under 11
    // bytes) or preallocated space.
    if (window.size() < block_left) return r;
    r.kind = WalPhysicalRecord::kSkip;
    r.bytes = block_left;
    return r;
  }
  const bool recyclable = type >= 5 && type <= 8;
  const uint64_t header = recyclable ? kRecyclableHeaderBytes : kHeaderBytes;
  const std::string where = "WAL " + std::to_string(file) + " offset " + std::to_string(offset);
  if (header + length > block_left) return data_loss("WAL record at " + where + " crosses its block");
  if (window.size() < header + length) return r;
  if (type == 9) return unimplemented("WAL record at " + where + ": WAL compression");
  if (type < 1 || type > 8) return data_loss("WAL record at " + where + " of unknown type " + std::to_string(type));
  // The CRC covers the type, the log number (recyclable) and the payload.
  if (unmask_crc(load_u32(window.data())) != crc32c(0, window.data() + 6, header - 6 + length)) {
    return data_loss("WAL record at " + where + " fails its CRC");
  }
  if (recyclable && load_u32(window.data() + 7) != static_cast<uint32_t>(file)) {
    return data_loss("WAL record at " + where + " belongs to another log (recycled)");
  }
  static constexpr WalPhysicalRecord::Kind kKinds[] = {WalPhysicalRecord::kFull, WalPhysicalRecord::kFirst,
                                                       WalPhysicalRecord::kMiddle, WalPhysicalRecord::kLast};
  r.kind = kKinds[(type - 1) % 4];
  r.bytes = header + length;
  r.payload = std::string_view(reinterpret_cast<const char*>(window.data()) + header, length);
  return r;
}

}  // namespace ferry::rocks
