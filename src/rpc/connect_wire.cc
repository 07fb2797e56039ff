// Encoding and checking the RPC handshake's private data.
#include "connect_wire.h"

#include <cstring>
#include <string>

namespace ferry::rpc::detail {

namespace {

template <typename T>
void put(std::vector<uint8_t>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <typename T>
T get(std::span<const uint8_t> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

Status check_preamble(std::span<const uint8_t> bytes, size_t min_bytes, const char* what) {
  if (bytes.size() < min_bytes) {
    return invalid_argument(std::string("rpc: a ") + what + " of " + std::to_string(bytes.size()) + " bytes (at least " +
                            std::to_string(min_bytes) + ")");
  }
  if (get<uint32_t>(bytes, 0) != kConnectMagic) return invalid_argument(std::string("rpc: not an RPC ") + what);
  const auto version = get<uint16_t>(bytes, 4);
  if (version != kConnectVersion) {
    return unimplemented(std::string("rpc: ") + what + " of version " + std::to_string(version) + " (this is " +
                         std::to_string(kConnectVersion) + ")");
  }
  return ok_status();
}

}  // namespace

std::vector<uint8_t> encode_connect_request(uint32_t worker) {
  std::vector<uint8_t> out(kConnectRequestBytes, 0);
  put(out, 0, kConnectMagic);
  put(out, 4, kConnectVersion);
  put(out, 8, worker);
  return out;
}

Result<uint32_t> decode_connect_request(std::span<const uint8_t> bytes) {
  FERRY_RETURN_IF_ERROR(check_preamble(bytes, kConnectRequestBytes, "connection request"));
  if (bytes.size() != kConnectRequestBytes || get<uint16_t>(bytes, 6) != 0) {
    return invalid_argument("rpc: malformed connection request");
  }
  return get<uint32_t>(bytes, 8);
}

std::vector<uint8_t> encode_server_info(const ServerInfo& info) {
  std::vector<uint8_t> out(kConnectReplyHeaderBytes + 2 * info.nilext_types.size(), 0);
  put(out, 0, kConnectMagic);
  put(out, 4, kConnectVersion);
  put(out, 6, static_cast<uint8_t>(info.mode));
  put(out, 7, static_cast<uint8_t>(info.durable ? 1 : 0));
  put(out, 12, info.workers);
  put(out, 16, info.max_request_bytes);
  put(out, 20, info.max_response_bytes);
  put(out, 36, static_cast<uint32_t>(info.nilext_types.size()));
  for (size_t i = 0; i < info.nilext_types.size(); ++i) put(out, kConnectReplyHeaderBytes + 2 * i, info.nilext_types[i]);
  return out;
}

std::vector<uint8_t> encode_connect_reply(const WorkerEndpoint& endpoint, const std::vector<uint8_t>& server_info) {
  std::vector<uint8_t> out = server_info;
  put(out, 8, endpoint.worker);
  put(out, 24, endpoint.flush_addr);
  put(out, 32, endpoint.flush_rkey);
  return out;
}

Result<ConnectReply> decode_connect_reply(std::span<const uint8_t> bytes) {
  FERRY_RETURN_IF_ERROR(check_preamble(bytes, kConnectReplyHeaderBytes, "connection reply"));
  ConnectReply r;
  const auto mode = get<uint8_t>(bytes, 6);
  const auto durable = get<uint8_t>(bytes, 7);
  if (mode > static_cast<uint8_t>(Mode::kOrderedQueue) || durable > 1) {
    return invalid_argument("rpc: connection reply with mode " + std::to_string(mode) + ", durable " +
                            std::to_string(durable));
  }
  r.info.mode = static_cast<Mode>(mode);
  r.info.durable = durable == 1;
  r.endpoint.worker = get<uint32_t>(bytes, 8);
  r.info.workers = get<uint32_t>(bytes, 12);
  r.info.max_request_bytes = get<uint32_t>(bytes, 16);
  r.info.max_response_bytes = get<uint32_t>(bytes, 20);
  r.endpoint.flush_addr = get<uint64_t>(bytes, 24);
  r.endpoint.flush_rkey = get<uint32_t>(bytes, 32);
  const auto count = get<uint32_t>(bytes, 36);
  if (r.info.workers == 0 || r.info.workers > 64 || r.endpoint.worker >= r.info.workers) {
    return invalid_argument("rpc: connection reply for worker " + std::to_string(r.endpoint.worker) + " of " +
                            std::to_string(r.info.workers));
  }
  if (r.info.max_request_bytes < kRequestHeaderBytes || r.info.max_request_bytes > (1u << 20) ||
      r.info.max_response_bytes < kResponseHeaderBytes || r.info.max_response_bytes > (1u << 20)) {
    return invalid_argument("rpc: connection reply with request/response sizes " +
                            std::to_string(r.info.max_request_bytes) + "/" + std::to_string(r.info.max_response_bytes));
  }
  if (bytes.size() != kConnectReplyHeaderBytes + 2 * static_cast<size_t>(count)) {
    return invalid_argument("rpc: connection reply of " + std::to_string(bytes.size()) + " bytes for " +
                            std::to_string(count) + " nilext types");
  }
  for (uint32_t i = 0; i < count; ++i) {
    const auto t = get<uint16_t>(bytes, kConnectReplyHeaderBytes + 2 * i);
    if (!r.info.nilext_types.empty() && t <= r.info.nilext_types.back()) {
      return invalid_argument("rpc: connection reply's nilext types are not ascending");
    }
    r.info.nilext_types.push_back(t);
  }
  return r;
}

}  // namespace ferry::rpc::detail
