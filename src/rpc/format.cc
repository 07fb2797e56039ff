#include "ferry/rpc/format.h"

#include <bit>
#include <cstring>

#include "ferry/common/assert.h"
#include "ferry/common/checksum.h"

namespace ferry::rpc {

static_assert(std::endian::native == std::endian::little, "the formats are little-endian in memory");

const char* rpc_error_name(RpcError e) {
  switch (e) {
    case RpcError::kUnknownType: return "unknown request type";
    case RpcError::kNotNilext: return "request type cannot be nilext";
    case RpcError::kMalformed: return "malformed request";
    case RpcError::kTooLarge: return "reply too large";
  }
  return "unknown rpc error";
}

const char* request_check_name(RequestCheck c) {
  switch (c) {
    case RequestCheck::kValid: return "valid";
    case RequestCheck::kTruncated: return "truncated";
    case RequestCheck::kBadSize: return "bad size";
    case RequestCheck::kBadVersion: return "bad version";
    case RequestCheck::kBadChecksum: return "bad checksum";
  }
  return "?";
}

RequestCheck parse_request(std::span<const uint8_t> bytes, bool exact, uint32_t max_bytes, RequestView* out) {
  if (bytes.size() < kRequestHeaderBytes) return RequestCheck::kTruncated;
  RequestHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.size < kRequestHeaderBytes || h.size > max_bytes) return RequestCheck::kBadSize;
  if (h.size > bytes.size()) return exact ? RequestCheck::kBadSize : RequestCheck::kTruncated;
  if (exact && h.size != bytes.size()) return RequestCheck::kBadSize;
  if (h.version != kFormatVersion || (h.flags & ~kRequestNilext) != 0 || h.reserved != 0) {
    return RequestCheck::kBadVersion;
  }
  if (checksum64(bytes.subspan(8, h.size - 8), kChecksumSeed) != h.checksum) return RequestCheck::kBadChecksum;
  out->request_id = h.request_id;
  out->origin = h.origin;
  out->size = h.size;
  out->type = h.type;
  out->nilext = (h.flags & kRequestNilext) != 0;
  out->payload = bytes.subspan(kRequestHeaderBytes, h.size - kRequestHeaderBytes);
  return RequestCheck::kValid;
}

uint32_t seal_request(std::span<uint8_t> out, uint16_t type, uint8_t flags, uint64_t request_id, uint32_t origin,
                      uint32_t payload_bytes) {
  const uint32_t size = kRequestHeaderBytes + payload_bytes;
  FERRY_ASSERT(out.size() >= size, "seal_request: buffer too small");
  RequestHeader h{};
  h.size = size;
  h.type = type;
  h.flags = flags;
  h.version = kFormatVersion;
  h.request_id = request_id;
  h.origin = origin;
  std::memcpy(out.data(), &h, sizeof(h));
  h.checksum = checksum64(out.subspan(8, size - 8), kChecksumSeed);
  std::memcpy(out.data(), &h.checksum, sizeof(h.checksum));
  return size;
}

bool parse_response(std::span<const uint8_t> bytes, ResponseView* out) {
  if (bytes.size() < kResponseHeaderBytes) return false;
  ResponseHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.size != bytes.size() || h.reserved != 0 || h.reserved2 != 0) return false;
  if (h.kind < static_cast<uint8_t>(ResponseKind::kReply) || h.kind > static_cast<uint8_t>(ResponseKind::kError)) {
    return false;
  }
  out->request_id = h.request_id;
  out->origin = h.origin;
  out->kind = static_cast<ResponseKind>(h.kind);
  out->status = h.status;
  out->payload = bytes.subspan(kResponseHeaderBytes);
  return true;
}

uint32_t write_response(std::span<uint8_t> out, uint64_t request_id, uint32_t origin, ResponseKind kind, uint8_t status,
                        uint32_t payload_bytes) {
  const uint32_t size = kResponseHeaderBytes + payload_bytes;
  FERRY_ASSERT(out.size() >= size, "write_response: buffer too small");
  ResponseHeader h{};
  h.request_id = request_id;
  h.size = size;
  h.kind = static_cast<uint8_t>(kind);
  h.status = status;
  h.origin = origin;
  std::memcpy(out.data(), &h, sizeof(h));
  return size;
}

}  // namespace ferry::rpc
