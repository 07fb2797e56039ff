// libFuzzer target: the RPC request and response parsers (format.h), which
// read bytes a client (or PM after a crash) controls, and the decoders of
// the CM handshake's private data (src/rpc/connect_wire.h), which read bytes
// a TCP peer controls.
//
// Input: [mode][max_bytes lo][max_bytes hi] message bytes...
// mode bit 0: parse as a received message (exact) or as a scan (followed by
// anything); bit 1: first fix the checksum up for the size field's bytes (a
// 64-bit hash no mutation finds by chance), so the parser's valid path and
// its other checks are reached. The message is a heap buffer of exactly its size, so ASan
// reports any read past it. A request that parses is sealed again from its
// fields and must come back byte for byte; so must a response.
// The message (before any checksum fix-up) is also decoded as a connection
// request and a connection reply: one that is accepted must encode back to
// the same bytes (nothing accepted that the server's encoder could not have
// written) and describe a server Server::create accepts; one that is
// refused must be refused as malformed or of another version.
//
// Run: ./rpc_request_fuzz -max_total_time=60 ../tests/fuzz/corpus/rpc_request_fuzz
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "connect_wire.h"
#include "ferry/common/checksum.h"
#include "ferry/rpc/format.h"

namespace {

using namespace ferry::rpc;

#define FUZZ_CHECK(cond)            \
  do {                              \
    if (!(cond)) __builtin_trap();  \
  } while (0)

volatile uint64_t g_sink;

bool same_bytes(const std::vector<uint8_t>& a, std::span<const uint8_t> b) {
  return a.size() == b.size() && (b.empty() || std::memcmp(a.data(), b.data(), b.size()) == 0);
}

bool refused_as_documented(const ferry::Status& st) {
  return st.code() == ferry::Code::kInvalidArgument || st.code() == ferry::Code::kUnimplemented;
}

void fuzz_connect(std::span<const uint8_t> bytes) {
  auto request = detail::decode_connect_request(bytes);
  if (request.ok()) {
    FUZZ_CHECK(same_bytes(detail::encode_connect_request(request.value()), bytes));
  } else {
    FUZZ_CHECK(refused_as_documented(request.status()));
  }
  auto reply = detail::decode_connect_reply(bytes);
  if (!reply.ok()) {
    FUZZ_CHECK(refused_as_documented(reply.status()));
    return;
  }
  const ServerInfo& info = reply.value().info;
  FUZZ_CHECK(info.workers >= 1 && info.workers <= 64 && reply.value().endpoint.worker < info.workers);
  FUZZ_CHECK(info.max_request_bytes >= kRequestHeaderBytes && info.max_request_bytes <= (1u << 20));
  FUZZ_CHECK(info.max_response_bytes >= kResponseHeaderBytes && info.max_response_bytes <= (1u << 20));
  for (size_t i = 1; i < info.nilext_types.size(); ++i) FUZZ_CHECK(info.nilext_types[i - 1] < info.nilext_types[i]);
  FUZZ_CHECK(same_bytes(detail::encode_connect_reply(reply.value().endpoint, detail::encode_server_info(info)), bytes));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const bool exact = (data[0] & 1) != 0;
  const uint32_t max_bytes = 32u + (static_cast<uint32_t>(data[1]) | static_cast<uint32_t>(data[2]) << 8);
  const size_t n = size - 3;
  auto msg = std::make_unique<uint8_t[]>(n == 0 ? 1 : n);
  std::memcpy(msg.get(), data + 3, n);
  fuzz_connect(std::span<const uint8_t>(msg.get(), n));
  if ((data[0] & 2) != 0 && n >= kRequestHeaderBytes) {
    uint32_t claimed;
    std::memcpy(&claimed, msg.get() + 8, 4);
    if (claimed >= 8 && claimed <= n) {
      const uint64_t sum = ferry::checksum64(std::span<const uint8_t>(msg.get() + 8, claimed - 8), kChecksumSeed);
      std::memcpy(msg.get(), &sum, 8);
    }
  }
  const std::span<const uint8_t> bytes(msg.get(), n);

  RequestView v;
  if (parse_request(bytes, exact, max_bytes, &v) == RequestCheck::kValid) {
    FUZZ_CHECK(v.size >= kRequestHeaderBytes && v.size <= n && v.size <= max_bytes);
    FUZZ_CHECK(!exact || v.size == n);
    FUZZ_CHECK(v.payload.data() == msg.get() + kRequestHeaderBytes);
    FUZZ_CHECK(v.payload.size() == v.size - kRequestHeaderBytes);
    uint64_t sum = 0;
    for (uint8_t b : v.payload) sum += b;
    g_sink = sum;
    std::vector<uint8_t> again(v.size);
    std::memcpy(again.data() + kRequestHeaderBytes, v.payload.data(), v.payload.size());
    const uint32_t sealed = seal_request(again, v.type, v.nilext ? kRequestNilext : 0, v.request_id, v.origin,
                                         static_cast<uint32_t>(v.payload.size()));
    FUZZ_CHECK(sealed == v.size);
    FUZZ_CHECK(std::memcmp(again.data(), msg.get(), v.size) == 0);
  }

  ResponseView r;
  if (parse_response(bytes, &r)) {
    FUZZ_CHECK(n >= kResponseHeaderBytes);
    FUZZ_CHECK(r.payload.data() == msg.get() + kResponseHeaderBytes && r.payload.size() == n - kResponseHeaderBytes);
    std::vector<uint8_t> again(n);
    const uint32_t written = write_response(again, r.request_id, r.origin, r.kind, r.status,
                                            static_cast<uint32_t>(r.payload.size()));
    FUZZ_CHECK(written == n);
    FUZZ_CHECK(std::memcmp(again.data(), msg.get(), kResponseHeaderBytes) == 0);
  }
  return 0;
}
