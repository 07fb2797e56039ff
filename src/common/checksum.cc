#include "ferry/common/checksum.h"

#include <xxhash.h>

namespace ferry {

uint64_t checksum64(std::span<const uint8_t> bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

}  // namespace ferry
