#include "ferry/store/logkv_wire.h"

#include <cstring>

namespace ferry::store::logkv {

bool parse_request(std::span<const uint8_t> payload, ParsedRequest* out) {
  if (payload.size() < sizeof(RequestHeader)) return false;
  std::memcpy(&out->header, payload.data(), sizeof(RequestHeader));
  const RequestHeader& h = out->header;
  if (h.reserved != 0 || (h.flags & ~kConditional) != 0) return false;
  if (payload.size() != sizeof(RequestHeader) + h.key_bytes + static_cast<size_t>(h.value_bytes)) return false;
  out->key = payload.subspan(sizeof(RequestHeader), h.key_bytes);
  out->value = payload.subspan(sizeof(RequestHeader) + h.key_bytes, h.value_bytes);
  return true;
}

std::vector<uint8_t> encode_request(uint64_t table_id, std::span<const uint8_t> key, std::span<const uint8_t> value,
                                    std::optional<uint64_t> expected_version) {
  RequestHeader h{};
  h.table_id = table_id;
  h.expected_version = expected_version.value_or(0);
  h.flags = expected_version.has_value() ? kConditional : 0;
  h.key_bytes = static_cast<uint16_t>(key.size());
  h.value_bytes = static_cast<uint32_t>(value.size());
  std::vector<uint8_t> out(sizeof h + key.size() + value.size());
  std::memcpy(out.data(), &h, sizeof h);
  if (!key.empty()) std::memcpy(out.data() + sizeof h, key.data(), key.size());
  if (!value.empty()) std::memcpy(out.data() + sizeof h + key.size(), value.data(), value.size());
  return out;
}

}  // namespace ferry::store::logkv
