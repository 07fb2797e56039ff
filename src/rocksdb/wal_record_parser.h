// RocksDB's WAL format (RocksDB 7.8 db/log_format.h, the LevelDB log format
// with RocksDB's recyclable records), read by a replica's applier from the
// WAL bytes the stream delivers: 32 KiB blocks of physical records
// {u32 masked CRC32C, u16 length, u8 type[, u32 log number], payload}, a
// block's last bytes too few for a header zero-filled; a logical record (a
// write batch) is one FULL record or FIRST, MIDDLE..., LAST fragments.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "ferry/common/status.h"

namespace ferry::rocks {

inline constexpr uint64_t kWalBlockBytes = 32768;

struct WalPhysicalRecord {
  enum Kind { kNeedMore, kSkip, kFull, kFirst, kMiddle, kLast };
  Kind kind = kNeedMore;
  uint64_t bytes = 0;        // consumed from the window's start (kNeedMore: 0)
  std::string_view payload;  // into the window
};

// The physical record at the start of `window`, whose first byte is byte
// `offset` of WAL `file`: kNeedMore when the window ends inside it, kSkip
// for a block's zero trailer. kDataLoss: a record that crosses a block, fails
// its CRC, or carries another log number, or an unknown type;
// kUnimplemented: a compression-type record (WAL compression).
Result<WalPhysicalRecord> parse_wal_physical_record(std::span<const uint8_t> window, uint64_t offset, uint64_t file);

}  // namespace ferry::rocks
