// The private data of an RPC connection's CM handshake (docs/rpc-format.md,
// "Connecting"): the REQ names the worker, the REP describes the server.
// Little-endian, fixed layout; the decoders take untrusted bytes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/rpc/server.h"

namespace ferry::rpc::detail {

inline constexpr uint32_t kConnectMagic = 0x43505246;  // "FRPC"
inline constexpr uint16_t kConnectVersion = 1;
inline constexpr size_t kConnectRequestBytes = 12;
inline constexpr size_t kConnectReplyHeaderBytes = 40;

std::vector<uint8_t> encode_connect_request(uint32_t worker);
// The worker; kInvalidArgument for anything but a well-formed request,
// kUnimplemented for another version.
Result<uint32_t> decode_connect_request(std::span<const uint8_t> bytes);

// The server's info without the endpoint (encode_connect_reply adds it).
std::vector<uint8_t> encode_server_info(const ServerInfo& info);
std::vector<uint8_t> encode_connect_reply(const WorkerEndpoint& endpoint, const std::vector<uint8_t>& server_info);
struct ConnectReply {
  WorkerEndpoint endpoint;
  ServerInfo info;
};
// kInvalidArgument for a malformed reply (wrong size, unknown mode, sizes
// out of range, nilext types not ascending), kUnimplemented for another version.
Result<ConnectReply> decode_connect_reply(std::span<const uint8_t> bytes);

}  // namespace ferry::rpc::detail
