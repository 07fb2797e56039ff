// The backup service's RPC payloads (docs/tailwind.md "Control RPCs").
// Fixed little-endian structs read with memcpy after a size check: a
// request is whatever a peer sent, so anything malformed is refused as
// kInvalidArgument, never trusted.
//
// Replies: the app status byte is the Status code (0 = ok); an error's
// payload is its message.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/tailwind/backup.h"

namespace ferry::tailwind::detail {

struct SegmentRef {  // close, version, free, and the head of open/replicate/read
  uint64_t log_id = 0;
  uint64_t segment_id = 0;
};

struct OpenRequest {
  uint64_t log_id = 0;
  uint64_t segment_id = 0;
  uint64_t replica_version = 0;
};
struct OpenReply {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t bytes = 0;
};
struct CloseRequest {
  uint64_t log_id = 0;
  uint64_t segment_id = 0;
  uint64_t offset = 0;
  uint32_t checksum = 0;
  uint32_t reserved = 0;
};
struct VersionRequest {
  uint64_t log_id = 0;
  uint64_t segment_id = 0;
  uint64_t replica_version = 0;
};
struct ReplicateHeader {  // followed by the bytes
  uint64_t log_id = 0;
  uint64_t segment_id = 0;
  uint64_t offset = 0;
};
struct FindRequest {
  uint64_t log_id = 0;
};
struct WireReplica {  // one per replica in a find reply, after a u32 count and u32 0
  uint64_t segment_id = 0;
  uint64_t replica_version = 0;
  uint64_t valid_bytes = 0;
  uint32_t checksum = 0;
  uint8_t closed = 0;
  uint8_t corrupted = 0;
  uint8_t stop = 0;
  uint8_t zero_after_valid = 0;
};
struct ReadRequest {
  uint64_t log_id = 0;
  uint64_t segment_id = 0;
  uint64_t offset = 0;
  uint32_t max_bytes = 0;
  uint8_t closed = 0;
  uint8_t reserved[3] = {};
};
static_assert(sizeof(OpenRequest) == 24 && sizeof(OpenReply) == 16 && sizeof(CloseRequest) == 32);
static_assert(sizeof(VersionRequest) == 24 && sizeof(ReplicateHeader) == 24 && sizeof(FindRequest) == 8);
static_assert(sizeof(WireReplica) == 32 && sizeof(ReadRequest) == 32 && sizeof(SegmentRef) == 16);

template <typename T>
std::vector<uint8_t> encode(const T& message) {
  std::vector<uint8_t> out(sizeof(T));
  std::memcpy(out.data(), &message, sizeof(T));
  return out;
}

// Exactly sizeof(T) bytes (or at least, with `prefix`): anything else is malformed.
template <typename T>
Result<T> decode(std::span<const uint8_t> bytes, bool prefix = false) {
  if (bytes.size() < sizeof(T) || (!prefix && bytes.size() != sizeof(T))) {
    return invalid_argument("malformed Tailwind request: " + std::to_string(bytes.size()) + " bytes");
  }
  T message;
  std::memcpy(&message, bytes.data(), sizeof(T));
  return message;
}

// The CM REQ of a primary's data-path connection (Backup::serve): which log.
struct DataPathRequest {
  uint32_t magic = kDataPathMagic;
  uint32_t reserved = 0;
  uint64_t log_id = 0;
  static constexpr uint32_t kDataPathMagic = 0x44575446;  // "FTWD"
};
inline std::vector<uint8_t> encode_data_path_request(uint64_t log_id) {
  DataPathRequest r;
  r.log_id = log_id;
  return encode(r);
}
inline Result<uint64_t> decode_data_path_request(std::span<const uint8_t> bytes) {
  FERRY_ASSIGN_OR_RETURN(auto r, decode<DataPathRequest>(bytes));
  if (r.magic != DataPathRequest::kDataPathMagic || r.reserved != 0 || r.log_id == 0) {
    return invalid_argument("malformed Tailwind data-path request");
  }
  return r.log_id;
}

std::vector<uint8_t> encode_find_reply(const std::vector<ReplicaInfo>& replicas);
Result<std::vector<ReplicaInfo>> decode_find_reply(std::span<const uint8_t> bytes);

}  // namespace ferry::tailwind::detail
