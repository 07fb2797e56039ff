// Fixed-width little-endian fields in byte buffers (the transaction log's
// records, its control block and the store's slots): memcpy, so unaligned
// and type-punning-free.
#pragma once

#include <cstdint>
#include <cstring>

namespace ferry::hyperloop::detail {

template <typename T>
T load_le(const uint8_t* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

template <typename T>
void store_le(uint8_t* at, T v) {
  std::memcpy(at, &v, sizeof v);
}

}  // namespace ferry::hyperloop::detail
