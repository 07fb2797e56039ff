#include "ferry/common/checksum.h"

#include <isa-l/crc.h>
#include <xxhash.h>

#include <algorithm>

namespace ferry {

uint64_t checksum64(std::span<const uint8_t> bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

uint32_t crc32c(uint32_t crc, const void* data, size_t len) {
  // ISA-L's crc32_iscsi carries the register as is (no pre/post inversion);
  // the conventional CRC32C inverts on entry and exit, which also makes
  // chaining work.
  uint32_t reg = ~crc;
  const auto* p = static_cast<const uint8_t*>(data);
  while (len != 0) {  // crc32_iscsi takes an int length
    const size_t n = std::min<size_t>(len, size_t{1} << 30);
    reg = crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(n), reg);
    p += n;
    len -= n;
  }
  return ~reg;
}

}  // namespace ferry
