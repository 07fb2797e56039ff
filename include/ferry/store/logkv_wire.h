// LogKv's request bytes (docs/tailwind.md, "Requests"): what a client sends
// as the payload of a PUT, GET or DELETE RPC (store/logkv.h's RequestType).
// Public so that a client other than logkv::Client -- the benchmark's, which
// issues its own calls -- builds requests with the server's own codec.
//
// Threads: free functions, no state.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ferry::store::logkv {

inline constexpr uint8_t kConditional = 1;  // RequestHeader::flags: compare expected_version

struct RequestHeader {
  uint64_t table_id;
  uint64_t expected_version;  // with kConditional; 0 = the key must not exist
  uint8_t flags;
  uint8_t reserved;  // 0
  uint16_t key_bytes;
  uint32_t value_bytes;  // PUT only; 0 otherwise
};
static_assert(sizeof(RequestHeader) == 24);

struct ParsedRequest {
  RequestHeader header{};
  std::span<const uint8_t> key;  // inside the parsed payload
  std::span<const uint8_t> value;
};

// Reads bytes from the network: true only if they are exactly a header, the
// key and the value, with no reserved bit set.
bool parse_request(std::span<const uint8_t> payload, ParsedRequest* out);
// A request's bytes; a conditional one when expected_version is set.
std::vector<uint8_t> encode_request(uint64_t table_id, std::span<const uint8_t> key, std::span<const uint8_t> value,
                                    std::optional<uint64_t> expected_version);

}  // namespace ferry::store::logkv
