// 64-bit checksums of untrusted bytes (records read back from PM, requests
// taken off the network): XXH3-64 from libxxhash, which detects accidental
// corruption (torn DMA, stale bytes) and is not a MAC -- a client that wants
// to forge a valid record can.
#pragma once

#include <cstdint>
#include <span>

namespace ferry {

uint64_t checksum64(std::span<const uint8_t> bytes, uint64_t seed = 0);

}  // namespace ferry
