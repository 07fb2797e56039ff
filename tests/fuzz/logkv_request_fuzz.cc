// libFuzzer target: LogKv's request parser (ferry/store/logkv_wire.h), which
// reads whatever a client sends in a PUT, GET or DELETE payload, and the
// parsers of its control wire (a restore batch, a table map, a tablet
// assignment), which read what the coordinator or a server sends.
//
// The payload is a heap allocation of exactly its size, so ASan reports any
// read past it. Checked: a parsed request's key and value lie inside the
// payload, back to back after the header, and tile it exactly; encoding the
// parsed request gives back the same bytes (nothing is accepted that the
// client's encoder could not have produced, reserved bits included). The
// same bytes are parsed as each control message: an accepted one must
// encode back to the same bytes, and a restore batch's keys and values must
// lie inside the payload.
//
// Run: ./logkv_request_fuzz -max_total_time=60 ../tests/fuzz/corpus/logkv_request_fuzz
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "logkv_internal.h"

namespace {

using namespace ferry::store::logkv::detail;

bool same_bytes(const std::vector<uint8_t>& a, std::span<const uint8_t> b) {
  return a.size() == b.size() && (b.empty() || std::memcmp(a.data(), b.data(), b.size()) == 0);
}

bool inside(std::span<const uint8_t> part, std::span<const uint8_t> whole) {
  const auto p = reinterpret_cast<uintptr_t>(part.data());
  const auto w = reinterpret_cast<uintptr_t>(whole.data());
  return p >= w && p + part.size() <= w + whole.size();
}

void check_request(std::span<const uint8_t> payload) {
  ParsedRequest req;
  if (!parse_request(payload, &req)) return;
  if (req.key.data() != payload.data() + sizeof(RequestHeader)) std::abort();
  if (req.key.size() != req.header.key_bytes || req.value.size() != req.header.value_bytes) std::abort();
  if (req.value.data() != req.key.data() + req.key.size()) std::abort();
  if (sizeof(RequestHeader) + req.key.size() + req.value.size() != payload.size()) std::abort();
  const std::optional<uint64_t> expected =
      (req.header.flags & kConditional) != 0 ? std::optional<uint64_t>(req.header.expected_version) : std::nullopt;
  const auto again = encode_request(req.header.table_id, req.key, req.value, expected);
  // An unconditional request's expected_version is not part of its meaning:
  // the encoder writes 0 there, so compare the rest.
  if (again.size() != payload.size()) std::abort();
  for (size_t i = 0; i < payload.size(); ++i) {
    if (expected == std::nullopt && i >= 8 && i < 16) continue;
    if (again[i] != payload[i]) std::abort();
  }
}

void check_restore(std::span<const uint8_t> payload) {
  auto batch = parse_restore(payload);
  if (!batch.ok()) return;
  WireWriter w;
  begin_restore(w, batch->max_version);
  size_t bytes = 8;
  for (const RestoreObject& o : batch->objects) {
    if (!inside(o.key, payload) || !inside(o.value, payload)) std::abort();
    if (o.version == 0 || o.version > batch->max_version) std::abort();
    bytes += restore_object_bytes(o.key.size(), o.value.size());
    add_restore_object(w, o.table_id, o.version, o.key, o.value);
  }
  if (bytes != payload.size()) std::abort();
  if (!same_bytes(w.out(), payload)) std::abort();
}

void check_table_map(std::span<const uint8_t> payload) {
  auto map = parse_table_map(payload);
  if (!map.ok()) return;
  if (map->table_id == 0 || map->owners.empty() || map->owners.size() > 65536) std::abort();
  if (!same_bytes(encode_table_map(map.value()), payload)) std::abort();
}

void check_assignment(std::span<const uint8_t> payload) {
  auto a = parse_assignment(payload);
  if (!a.ok()) return;
  if (a->table_id == 0 || a->tablets == 0 || a->tablets > 65536 || a->owned.size() > a->tablets) std::abort();
  for (uint32_t t : a->owned) {
    if (t >= a->tablets) std::abort();
  }
  if (!same_bytes(encode_assignment(a.value()), payload)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size == 0 ? 1 : size]);
  if (size != 0) std::memcpy(copy.get(), data, size);
  const std::span<const uint8_t> payload(copy.get(), size);
  check_request(payload);
  check_restore(payload);
  check_table_map(payload);
  check_assignment(payload);
  return 0;
}
