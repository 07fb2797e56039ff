// libFuzzer target: LogKv's request parser (store/logkv_internal.h), which
// reads whatever a client sends in a PUT, GET or DELETE payload.
//
// The payload is a heap allocation of exactly its size, so ASan reports any
// read past it. Checked: a parsed request's key and value lie inside the
// payload, back to back after the header, and tile it exactly; encoding the
// parsed request gives back the same bytes (nothing is accepted that the
// client's encoder could not have produced, reserved bits included).
//
// Run: ./logkv_request_fuzz -max_total_time=60 ../tests/fuzz/corpus/logkv_request_fuzz
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "logkv_internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::store::logkv::detail;
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size == 0 ? 1 : size]);
  if (size != 0) std::memcpy(copy.get(), data, size);
  const std::span<const uint8_t> payload(copy.get(), size);
  ParsedRequest req;
  if (!parse_request(payload, &req)) return 0;
  if (req.key.data() != payload.data() + sizeof(RequestHeader)) std::abort();
  if (req.key.size() != req.header.key_bytes || req.value.size() != req.header.value_bytes) std::abort();
  if (req.value.data() != req.key.data() + req.key.size()) std::abort();
  if (sizeof(RequestHeader) + req.key.size() + req.value.size() != size) std::abort();
  const std::optional<uint64_t> expected =
      (req.header.flags & kConditional) != 0 ? std::optional<uint64_t>(req.header.expected_version) : std::nullopt;
  const auto again = encode_request(req.header.table_id, req.key, req.value, expected);
  // An unconditional request's expected_version is not part of its meaning:
  // the encoder writes 0 there, so compare the rest.
  if (again.size() != size) std::abort();
  for (size_t i = 0; i < size; ++i) {
    if (expected == std::nullopt && i >= 8 && i < 16) continue;
    if (again[i] != payload[i]) std::abort();
  }
  return 0;
}
