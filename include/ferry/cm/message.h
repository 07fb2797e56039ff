// The connection manager's wire messages (docs/connection-manager.md, "Wire
// format"): REQ, REP, REJ and RTU, each one length-prefixed binary frame on
// the CM's TCP connection.
//
// Pure (no sockets), so that the decoder can be tested and fuzzed byte by
// byte (tests/fuzz/cm_message_fuzz.cc). The decoder never trusts its input:
// it reads only inside the given span, checks every length against both the
// bytes present and the protocol's bounds, and reports bad input as a Status.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/nic/types.h"

namespace ferry::cm {

// Bumped on any incompatible change of the bytes below. A listener answers a
// REQ of another version with a REJ (kUnsupportedVersion) in its own version.
constexpr uint8_t kWireVersion = 1;
constexpr size_t kFrameHeaderBytes = 4;  // big-endian body length
// Bounds a peer cannot exceed; they also bound what a listener buffers per
// connection. The largest valid body (a REQ with the longest name and full
// private data) is 4,396 bytes; the limit leaves room without trusting it.
constexpr size_t kMaxMessageBytes = 8192;
constexpr size_t kMaxServiceNameBytes = 255;
constexpr size_t kMaxPrivateDataBytes = 4096;
constexpr size_t kMaxRejectTextBytes = 1024;
// version, type, reserved (2 bytes).
constexpr size_t kMessageHeaderBytes = 4;
// GID, UDP port, QP number, first PSN, path MTU, fabric id.
constexpr size_t kEndpointBytes = 16 + 2 + 4 + 4 + 4 + 8;
static_assert(kMessageHeaderBytes + 1 + kMaxServiceNameBytes + kEndpointBytes + 2 + kMaxPrivateDataBytes <=
              kMaxMessageBytes);
static_assert(kMessageHeaderBytes + 4 + kMaxRejectTextBytes <= kMaxMessageBytes);

// What a peer needs to reach one RC QP.
struct QpEndpoint {
  // The NIC's GID (Nic::gid): ::ffff:a.b.c.d for a UDP-attached NIC, the
  // synthetic fe80::ff:fe<address> of an in-process one.
  nic::Gid gid;
  // The NIC's UDP port, or 0 for an in-process NIC: such a peer is reachable
  // only from NICs of the same Engine.
  uint16_t udp_port = 0;
  // For an in-process NIC, which Engine's fabric it is attached to (an
  // identifier of the process and the Engine), so that a peer in another
  // process is refused instead of being connected to whichever local NIC
  // has the same fabric address. 0 for a UDP-attached NIC.
  uint64_t fabric_id = 0;
  uint32_t qp_num = 0;       // 24-bit, nonzero
  uint32_t first_psn = 0;    // 24-bit: the PSN of the first packet this QP sends
  uint32_t path_mtu = 4096;  // REQ: the largest the requester accepts; REP: the one both use
  friend bool operator==(const QpEndpoint&, const QpEndpoint&) = default;
};

// Why a REJ was sent; the active side maps it to a Status code.
enum class RejectReason : uint8_t {
  kUnknownService = 1,     // no service of that name at the listener
  kServiceRefused = 2,     // the service's AcceptFn failed; `code` is its Status code
  kBadMessage = 3,         // a malformed message, or one out of turn
  kUnsupportedVersion = 4, // the listener speaks another kWireVersion
  kLocalError = 5,         // the sender could not bring its QP up (e.g. the peer is unreachable from its NIC)
};
std::string_view reject_reason_name(RejectReason r);

// Active -> passive: connect to `service`.
struct Req {
  std::string service;  // 1..kMaxServiceNameBytes printable ASCII characters, no spaces
  QpEndpoint endpoint;  // the requester's QP
  std::vector<uint8_t> private_data;
  friend bool operator==(const Req&, const Req&) = default;
};
// Passive -> active: accepted; the responder's QP is in RTR.
struct Rep {
  QpEndpoint endpoint;  // the responder's QP; path_mtu is the one both use
  std::vector<uint8_t> private_data;
  friend bool operator==(const Rep&, const Rep&) = default;
};
// Either way: refused, and why. Ends the exchange.
struct Rej {
  RejectReason reason = RejectReason::kBadMessage;
  Code code = Code::kUnavailable;  // never kOk
  std::string text;                // for humans, up to kMaxRejectTextBytes
  friend bool operator==(const Rej&, const Rej&) = default;
};
// Active -> passive: the requester's QP is in RTS; the responder may go to RTS.
struct Rtu {
  friend bool operator==(const Rtu&, const Rtu&) = default;
};
using Message = std::variant<Req, Rep, Rej, Rtu>;

std::string_view message_name(const Message& m);  // "REQ", "REP", "REJ", "RTU"

// True if `name` can be a service name (what Req::service allows).
bool valid_service_name(std::string_view name);

// The whole frame (length prefix and body). kInvalidArgument, naming the
// field, if a field is outside the bounds above (a REJ's text is not: it is
// truncated and its control characters replaced, since it is only advice).
Result<std::vector<uint8_t>> encode(const Message& message);

// The body length a frame header announces. kInvalidArgument if it is 0 or
// above kMaxMessageBytes: the stream cannot be trusted past it.
Result<uint32_t> decode_length(std::span<const uint8_t, kFrameHeaderBytes> header);

// Decodes one body (without its length prefix). kUnimplemented if the
// version is not kWireVersion (the body is not read further); kInvalidArgument
// saying what is wrong for anything else malformed: an unknown type, a
// nonzero reserved field, a length beyond the bytes present or the bounds,
// an invalid field (QP number or PSN over 24 bits, a path MTU that is not
// 256..4096, a bad service name, an unknown reject reason or code, control
// characters in a REJ's text), or trailing bytes.
Result<Message> decode(std::span<const uint8_t> body);

}  // namespace ferry::cm
