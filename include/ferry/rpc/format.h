// The byte formats of Ferry's RPC layer (spec: docs/rpc-format.md).
//
// A request is what a client SENDs into a server worker's shared receive
// queue. In durable mode (JUNE BERRY-D, NSDI'25 §5.3) the same bytes are the
// persistent record that recovery scans back out of PM, which is why every
// request begins with a checksum over the whole request and its size: a
// scanner can tell a complete request from a torn one or from stale bytes.
// Everything here parses untrusted input (network, PM after a crash) and never
// reads outside the span it is given.
#pragma once

#include <cstdint>
#include <span>

namespace ferry::rpc {

inline constexpr uint8_t kFormatVersion = 1;
inline constexpr uint32_t kRequestHeaderBytes = 32;
inline constexpr uint32_t kResponseHeaderBytes = 24;
inline constexpr uint64_t kChecksumSeed = 0x4a554e4542455252ULL;  // "JUNEBERR"

// Request flags.
inline constexpr uint8_t kRequestNilext = 1;  // the client commits at the ACK, expects no reply (OQ)

// Little-endian on the wire and in PM; x86 only (static_assert in format.cc).
struct RequestHeader {
  uint64_t checksum;    // XXH3-64 (seed kChecksumSeed) of bytes [8, size)
  uint32_t size;        // the whole request, header included
  uint16_t type;        // the handler
  uint8_t flags;        // kRequestNilext
  uint8_t version;      // kFormatVersion
  uint64_t request_id;  // chosen by the client; echoed in the response
  uint32_t origin;      // the client's routing tag (delegation: the initiating session); echoed
  uint32_t reserved;    // 0
};
static_assert(sizeof(RequestHeader) == kRequestHeaderBytes);

// What a response says about the request.
enum class ResponseKind : uint8_t {
  kReply = 1,  // executed; status and payload are the handler's
  kAck = 2,    // DeferredExec: committed, will be executed (no payload)
  kError = 3,  // not executed; status is an RpcError
};

// Framework errors, in ResponseHeader::status of a kError response.
enum class RpcError : uint8_t {
  kUnknownType = 1,  // no handler for the type
  kNotNilext = 2,    // marked nilext, but its handler returns state or can fail by state
  kMalformed = 3,    // the request's header is inconsistent (size, version, reserved bits)
  kTooLarge = 4,     // the handler's reply did not fit max_response_bytes
};
const char* rpc_error_name(RpcError e);

struct ResponseHeader {
  uint64_t request_id;  // the request's
  uint32_t size;        // the whole response, header included
  uint8_t kind;         // ResponseKind
  uint8_t status;       // kReply: the handler's status byte; kError: RpcError
  uint16_t reserved;    // 0
  uint32_t origin;      // the request's
  uint32_t reserved2;   // 0
};
static_assert(sizeof(ResponseHeader) == kResponseHeaderBytes);

// ---- requests ----

struct RequestView {
  uint64_t request_id = 0;
  uint32_t origin = 0;
  uint32_t size = 0;
  uint16_t type = 0;
  bool nilext = false;
  std::span<const uint8_t> payload;  // points into the parsed bytes
};

enum class RequestCheck : uint8_t {
  kValid = 0,
  kTruncated,    // fewer bytes than a header, or than the size field says
  kBadSize,      // size below a header, above max_bytes, or (exact) not the message length
  kBadVersion,   // unknown version, flags or reserved bits
  kBadChecksum,  // the checksum does not cover these bytes
};
const char* request_check_name(RequestCheck c);

// Parses and verifies the request at the start of `bytes`. `exact`: the
// request must be exactly bytes.size() long (a received message); otherwise
// it may be followed by anything (a scan through a PM buffer). On kValid,
// *out views into `bytes`.
RequestCheck parse_request(std::span<const uint8_t> bytes, bool exact, uint32_t max_bytes, RequestView* out);

// Writes a request header for `payload_bytes` bytes already placed at
// out[kRequestHeaderBytes..] and seals it with the checksum. `out` must hold
// kRequestHeaderBytes + payload_bytes. Returns the request size.
uint32_t seal_request(std::span<uint8_t> out, uint16_t type, uint8_t flags, uint64_t request_id, uint32_t origin,
                      uint32_t payload_bytes);

// ---- responses ----

struct ResponseView {
  uint64_t request_id = 0;
  uint32_t origin = 0;
  ResponseKind kind = ResponseKind::kReply;
  uint8_t status = 0;
  std::span<const uint8_t> payload;
};

// Parses a received response (exactly bytes.size() long); false if it is
// malformed. Responses travel client <- server over RC and are not
// checksummed: the transport's CRC stands for that on a real NIC.
bool parse_response(std::span<const uint8_t> bytes, ResponseView* out);

// Writes a response header in front of `payload_bytes` bytes already at
// out[kResponseHeaderBytes..]; returns the response size.
uint32_t write_response(std::span<uint8_t> out, uint64_t request_id, uint32_t origin, ResponseKind kind, uint8_t status,
                        uint32_t payload_bytes);

}  // namespace ferry::rpc
