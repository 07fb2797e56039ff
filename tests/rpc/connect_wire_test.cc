// The RPC handshake's private data (src/rpc/connect_wire.h): what the
// encoders write comes back from the decoders, and every malformation a peer
// could send is refused with the code the header promises.
#include "connect_wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/rpc/format.h"
#include "ferry/rpc/server.h"

namespace ferry::rpc::connect_wire_test {
namespace {

using detail::decode_connect_reply;
using detail::decode_connect_request;
using detail::encode_connect_reply;
using detail::encode_connect_request;
using detail::encode_server_info;
using detail::kConnectReplyHeaderBytes;
using detail::kConnectRequestBytes;

// Field offsets, as encode_connect_request and encode_connect_reply write them.
constexpr size_t kVersionAt = 4;
constexpr size_t kModeAt = 6;
constexpr size_t kDurableAt = 7;
constexpr size_t kWorkerAt = 8;
constexpr size_t kWorkersAt = 12;
constexpr size_t kMaxRequestAt = 16;
constexpr size_t kMaxResponseAt = 20;
constexpr size_t kCountAt = 36;

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t at, T v) {
  ASSERT_LE(at + sizeof v, bytes.size());
  std::memcpy(bytes.data() + at, &v, sizeof v);
}

ServerInfo oq_info() {
  ServerInfo i;
  i.mode = Mode::kOrderedQueue;
  i.durable = true;
  i.workers = 4;
  i.max_request_bytes = 4096;
  i.max_response_bytes = 1 << 20;
  i.nilext_types = {1, 4, 65535};
  return i;
}

WorkerEndpoint endpoint(uint32_t worker) {
  WorkerEndpoint e;
  e.worker = worker;
  e.flush_addr = 0x0123456789ABCDEFull;
  e.flush_rkey = 0xFEDCBA98u;
  return e;
}

// A well-formed reply (worker 2 of oq_info()) to damage.
std::vector<uint8_t> good_reply() { return encode_connect_reply(endpoint(2), encode_server_info(oq_info())); }

void expect_same(const ServerInfo& a, const ServerInfo& b) {
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.durable, b.durable);
  EXPECT_EQ(a.workers, b.workers);
  EXPECT_EQ(a.max_request_bytes, b.max_request_bytes);
  EXPECT_EQ(a.max_response_bytes, b.max_response_bytes);
  EXPECT_EQ(a.nilext_types, b.nilext_types);
}

Code reply_code(const std::vector<uint8_t>& bytes) { return decode_connect_reply(bytes).status().code(); }

// ---- the request ----

TEST(ConnectWireTest, RequestRoundTripsEveryWorkerIndex) {
  for (uint32_t w : {0u, 1u, 63u, 64u, 0xFFFFFFFFu}) {
    const auto bytes = encode_connect_request(w);
    ASSERT_EQ(bytes.size(), kConnectRequestBytes);
    auto decoded = decode_connect_request(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
    // The decoder does not bound the worker: the server does (it knows how many it has).
    EXPECT_EQ(decoded.value(), w);
  }
}

TEST(ConnectWireTest, RequestShorterOrLongerThanItsFixedSizeIsRefused) {
  const auto good = encode_connect_request(1);
  for (size_t n : {size_t{0}, size_t{4}, size_t{6}, kConnectRequestBytes - 1}) {
    const std::vector<uint8_t> shorter(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(decode_connect_request(shorter).status().code(), Code::kInvalidArgument) << n << " bytes";
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_EQ(decode_connect_request(longer).status().code(), Code::kInvalidArgument);
  longer.resize(64, 0);
  EXPECT_EQ(decode_connect_request(longer).status().code(), Code::kInvalidArgument);
}

TEST(ConnectWireTest, RequestWithBadMagicIsRefused) {
  auto bytes = encode_connect_request(1);
  bytes[0] ^= 1;
  EXPECT_EQ(decode_connect_request(bytes).status().code(), Code::kInvalidArgument);
  bytes = encode_connect_request(1);
  bytes[3] = 0;
  EXPECT_EQ(decode_connect_request(bytes).status().code(), Code::kInvalidArgument);
}

TEST(ConnectWireTest, RequestOfAnotherVersionIsUnimplemented) {
  for (uint16_t v : {uint16_t{0}, uint16_t{2}, uint16_t{0xFFFF}}) {
    auto bytes = encode_connect_request(1);
    poke<uint16_t>(bytes, kVersionAt, v);
    auto decoded = decode_connect_request(bytes);
    EXPECT_EQ(decoded.status().code(), Code::kUnimplemented) << "version " << v;
    EXPECT_NE(decoded.status().message().find("version " + std::to_string(v)), std::string::npos)
        << decoded.status().to_string();
  }
}

TEST(ConnectWireTest, RequestWithNonzeroReservedFieldIsRefused) {
  for (uint16_t reserved : {uint16_t{1}, uint16_t{0x100}, uint16_t{0xFFFF}}) {
    auto bytes = encode_connect_request(1);
    poke<uint16_t>(bytes, 6, reserved);
    EXPECT_EQ(decode_connect_request(bytes).status().code(), Code::kInvalidArgument) << reserved;
  }
}

// ---- the reply ----

TEST(ConnectWireTest, ReplyRoundTripsWithNilextTypesDurableAndFlushTarget) {
  const ServerInfo info = oq_info();
  const auto bytes = good_reply();
  ASSERT_EQ(bytes.size(), kConnectReplyHeaderBytes + 2 * info.nilext_types.size());
  auto decoded = decode_connect_reply(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  expect_same(decoded->info, info);
  EXPECT_EQ(decoded->endpoint.worker, 2u);
  EXPECT_EQ(decoded->endpoint.flush_addr, 0x0123456789ABCDEFull);
  EXPECT_EQ(decoded->endpoint.flush_rkey, 0xFEDCBA98u);
  EXPECT_EQ(encode_connect_reply(decoded->endpoint, encode_server_info(decoded->info)), bytes);
}

TEST(ConnectWireTest, ReplyRoundTripsWithoutNilextTypesInEveryMode) {
  for (Mode mode : {Mode::kRawRpc, Mode::kDeferredExec, Mode::kOrderedQueue}) {
    ServerInfo info;
    info.mode = mode;
    info.durable = false;
    info.workers = 1;
    info.max_request_bytes = kRequestHeaderBytes;
    info.max_response_bytes = kResponseHeaderBytes;
    WorkerEndpoint e;  // not durable: no flush target
    const auto bytes = encode_connect_reply(e, encode_server_info(info));
    ASSERT_EQ(bytes.size(), kConnectReplyHeaderBytes);
    auto decoded = decode_connect_reply(bytes);
    ASSERT_TRUE(decoded.ok()) << mode_name(mode) << ": " << decoded.status().to_string();
    expect_same(decoded->info, info);
    EXPECT_EQ(decoded->endpoint.worker, 0u);
    EXPECT_EQ(decoded->endpoint.flush_addr, 0u);
    EXPECT_EQ(decoded->endpoint.flush_rkey, 0u);
    EXPECT_EQ(encode_connect_reply(decoded->endpoint, encode_server_info(decoded->info)), bytes);
  }
}

TEST(ConnectWireTest, ReplyAcceptsEveryServerInfoAValidServerHas) {
  // The bounds Server::create accepts: 1..64 workers, requests of
  // 32..1 MiB, responses of 24..1 MiB (a response header is 24 bytes).
  ServerInfo info = oq_info();
  info.workers = 64;
  info.max_request_bytes = kRequestHeaderBytes;
  info.max_response_bytes = kResponseHeaderBytes;
  info.nilext_types = {0};
  auto decoded = decode_connect_reply(encode_connect_reply(endpoint(63), encode_server_info(info)));
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  expect_same(decoded->info, info);
  info.max_request_bytes = 1u << 20;
  info.max_response_bytes = 1u << 20;
  decoded = decode_connect_reply(encode_connect_reply(endpoint(0), encode_server_info(info)));
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  expect_same(decoded->info, info);
}

TEST(ConnectWireTest, ReplyTooShortIsRefused) {
  const auto good = good_reply();
  for (size_t n : {size_t{0}, size_t{6}, kConnectReplyHeaderBytes - 1}) {
    const std::vector<uint8_t> shorter(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(reply_code(shorter), Code::kInvalidArgument) << n << " bytes";
  }
}

TEST(ConnectWireTest, ReplyWithBadMagicIsRefused) {
  auto bytes = good_reply();
  bytes[1] ^= 0x80;
  EXPECT_EQ(reply_code(bytes), Code::kInvalidArgument);
}

TEST(ConnectWireTest, ReplyOfAnotherVersionIsUnimplemented) {
  for (uint16_t v : {uint16_t{0}, uint16_t{2}}) {
    auto bytes = good_reply();
    poke<uint16_t>(bytes, kVersionAt, v);
    EXPECT_EQ(reply_code(bytes), Code::kUnimplemented) << "version " << v;
  }
}

TEST(ConnectWireTest, ReplyWithModeOutOfRangeIsRefused) {
  for (uint8_t mode : {uint8_t{3}, uint8_t{0xFF}}) {
    auto bytes = good_reply();
    poke<uint8_t>(bytes, kModeAt, mode);
    EXPECT_EQ(reply_code(bytes), Code::kInvalidArgument) << int{mode};
  }
}

TEST(ConnectWireTest, ReplyWithDurableAboveOneIsRefused) {
  for (uint8_t durable : {uint8_t{2}, uint8_t{0xFF}}) {
    auto bytes = good_reply();
    poke<uint8_t>(bytes, kDurableAt, durable);
    EXPECT_EQ(reply_code(bytes), Code::kInvalidArgument) << int{durable};
  }
}

TEST(ConnectWireTest, ReplyWithZeroOrMoreThan64WorkersIsRefused) {
  for (uint32_t workers : {0u, 65u, 0xFFFFFFFFu}) {
    auto bytes = good_reply();
    poke<uint32_t>(bytes, kWorkerAt, 0);
    poke<uint32_t>(bytes, kWorkersAt, workers);
    EXPECT_EQ(reply_code(bytes), Code::kInvalidArgument) << workers << " workers";
  }
}

TEST(ConnectWireTest, ReplyForAWorkerTheServerDoesNotHaveIsRefused) {
  // oq_info() has 4 workers.
  for (uint32_t worker : {4u, 5u, 0xFFFFFFFFu}) {
    auto bytes = good_reply();
    poke<uint32_t>(bytes, kWorkerAt, worker);
    EXPECT_EQ(reply_code(bytes), Code::kInvalidArgument) << "worker " << worker;
  }
  auto last = good_reply();
  poke<uint32_t>(last, kWorkerAt, 3);
  EXPECT_TRUE(decode_connect_reply(last).ok()) << "worker 3 of 4 is the last one";
}

TEST(ConnectWireTest, ReplyWithSizesOutOfRangeIsRefused) {
  struct Case {
    uint32_t request, response;
  };
  for (const Case c :
       {Case{kRequestHeaderBytes - 1, 4096}, Case{0, 4096}, Case{(1u << 20) + 1, 4096}, Case{0xFFFFFFFFu, 4096},
        Case{4096, kResponseHeaderBytes - 1}, Case{4096, 0}, Case{4096, (1u << 20) + 1}, Case{4096, 0xFFFFFFFFu}}) {
    auto bytes = good_reply();
    poke<uint32_t>(bytes, kMaxRequestAt, c.request);
    poke<uint32_t>(bytes, kMaxResponseAt, c.response);
    EXPECT_EQ(reply_code(bytes), Code::kInvalidArgument) << c.request << "/" << c.response;
  }
}

TEST(ConnectWireTest, ReplyWithNilextTypesNotAscendingIsRefused) {
  for (std::vector<uint16_t> types : {std::vector<uint16_t>{4, 1}, std::vector<uint16_t>{1, 1},
                                      std::vector<uint16_t>{1, 2, 3, 3}, std::vector<uint16_t>{65535, 0}}) {
    ServerInfo info = oq_info();
    info.nilext_types = types;
    EXPECT_EQ(reply_code(encode_connect_reply(endpoint(0), encode_server_info(info))), Code::kInvalidArgument)
        << ::testing::PrintToString(types);
  }
}

TEST(ConnectWireTest, ReplyWhoseLengthDoesNotMatchItsNilextCountIsRefused) {
  const auto good = good_reply();  // 3 nilext types
  std::vector<uint8_t> one_byte_more = good;
  one_byte_more.push_back(9);
  EXPECT_EQ(reply_code(one_byte_more), Code::kInvalidArgument);
  std::vector<uint8_t> one_type_more = good;
  one_type_more.push_back(0xFF);
  one_type_more.push_back(0xFF);
  EXPECT_EQ(reply_code(one_type_more), Code::kInvalidArgument) << "an extra type the count does not cover";
  std::vector<uint8_t> cut = good;
  cut.pop_back();
  EXPECT_EQ(reply_code(cut), Code::kInvalidArgument);
  for (uint32_t count : {0u, 2u, 4u, 0x80000000u, 0xFFFFFFFFu}) {
    auto bytes = good;
    poke<uint32_t>(bytes, kCountAt, count);
    EXPECT_EQ(reply_code(bytes), Code::kInvalidArgument) << count << " types claimed, 3 present";
  }
}

}  // namespace
}  // namespace ferry::rpc::connect_wire_test
