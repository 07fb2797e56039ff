// Checksums of untrusted bytes (records read back from PM or storage,
// requests taken off the network). They detect accidental corruption (torn
// DMA, stale bytes, bit flips) and are not MACs: a peer that wants to forge a
// valid record can.
//  - checksum64: XXH3-64 from libxxhash.
//  - crc32c: CRC32C (Castagnoli, reflected, as iSCSI and ext4) from ISA-L,
//    for formats that specify a 32-bit CRC (PmKv records, Tailwind logs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ferry {

uint64_t checksum64(std::span<const uint8_t> bytes, uint64_t seed = 0);

// crc32c(0, "123456789") == 0xE3069283, and it chains:
// crc32c(crc32c(0, a), b) == crc32c(0, a || b).
uint32_t crc32c(uint32_t crc, const void* data, size_t len);
inline uint32_t crc32c(uint32_t crc, std::span<const uint8_t> bytes) { return crc32c(crc, bytes.data(), bytes.size()); }

}  // namespace ferry
