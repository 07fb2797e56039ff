// The CM wire format (docs/connection-manager.md, "Wire format"): every
// message round-trips, and the decoder rejects whatever a peer could send
// that is not a valid message -- truncated, oversized, of another version,
// with bad fields or trailing bytes.
#include <gtest/gtest.h>

#include <array>
#include <span>
#include <vector>

#include "cm_internal.h"
#include "ferry/cm/message.h"

namespace ferry::cm {
namespace {

QpEndpoint udp_endpoint() {
  QpEndpoint e;
  e.gid = nic::Gid::from_ipv4(0x0A000002);
  e.udp_port = 4791;
  e.qp_num = 0xABCDEF;
  e.first_psn = 0x123456;
  e.path_mtu = 1024;
  return e;
}

std::vector<uint8_t> bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::vector<Message> every_message_type() {
  QpEndpoint in_process;
  in_process.gid = nic::Gid::in_process(3);
  in_process.fabric_id = 0x0123456789ABCDEFULL;
  in_process.qp_num = 1;
  in_process.first_psn = 0;
  in_process.path_mtu = 4096;
  return {
      Req{"echo", udp_endpoint(), bytes(16, 1)},
      Req{std::string(kMaxServiceNameBytes, 'x'), in_process, bytes(kMaxPrivateDataBytes, 2)},
      Req{"empty-private-data", udp_endpoint(), {}},
      Rep{udp_endpoint(), bytes(24, 3)},
      Rep{in_process, {}},
      Rej{RejectReason::kServiceRefused, Code::kResourceExhausted, "no free QPs"},
      Rej{RejectReason::kUnknownService, Code::kNotFound, std::string(kMaxRejectTextBytes, 'r')},
      Rej{RejectReason::kLocalError, Code::kFailedPrecondition, ""},
      Rtu{},
  };
}

// The body of an encoded frame, its length prefix checked.
std::vector<uint8_t> body_of(const std::vector<uint8_t>& frame) {
  EXPECT_GE(frame.size(), kFrameHeaderBytes);
  Result<uint32_t> length = decode_length(std::span<const uint8_t, kFrameHeaderBytes>(frame.data(), kFrameHeaderBytes));
  EXPECT_TRUE(length.ok()) << length.status().to_string();
  EXPECT_EQ(length.value(), frame.size() - kFrameHeaderBytes);
  return std::vector<uint8_t>(frame.begin() + kFrameHeaderBytes, frame.end());
}

std::vector<uint8_t> encode_body(const Message& m) {
  Result<std::vector<uint8_t>> frame = encode(m);
  EXPECT_TRUE(frame.ok()) << frame.status().to_string();
  return body_of(frame.value());
}

TEST(CmMessageTest, EveryMessageTypeRoundTrips) {
  for (const Message& m : every_message_type()) {
    const std::vector<uint8_t> body = encode_body(m);
    ASSERT_LE(body.size(), kMaxMessageBytes);
    Result<Message> back = decode(body);
    ASSERT_TRUE(back.ok()) << message_name(m) << ": " << back.status().to_string();
    EXPECT_EQ(back.value(), m) << message_name(m);
  }
}

TEST(CmMessageTest, EveryTruncationOfEveryMessageIsRejected) {
  for (const Message& m : every_message_type()) {
    const std::vector<uint8_t> body = encode_body(m);
    for (size_t n = 0; n < body.size(); ++n) {
      Result<Message> r = decode(std::span<const uint8_t>(body.data(), n));
      ASSERT_FALSE(r.ok()) << message_name(m) << " truncated to " << n << " of " << body.size() << " bytes";
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    }
  }
}

TEST(CmMessageTest, TrailingBytesAreRejected) {
  for (const Message& m : every_message_type()) {
    std::vector<uint8_t> body = encode_body(m);
    body.push_back(0);
    Result<Message> r = decode(body);
    ASSERT_FALSE(r.ok()) << message_name(m);
    EXPECT_NE(r.status().message().find("after the"), std::string::npos) << r.status().message();
  }
}

TEST(CmMessageTest, FrameLengthsOutsideTheBoundsAreRejected) {
  auto length = [](uint32_t n) {
    const std::array<uint8_t, 4> h{static_cast<uint8_t>(n >> 24), static_cast<uint8_t>(n >> 16),
                                   static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n)};
    return decode_length(h);
  };
  EXPECT_FALSE(length(0).ok());
  EXPECT_FALSE(length(kMessageHeaderBytes - 1).ok());
  EXPECT_TRUE(length(kMessageHeaderBytes).ok());
  EXPECT_TRUE(length(kMaxMessageBytes).ok());
  EXPECT_FALSE(length(kMaxMessageBytes + 1).ok());
  EXPECT_FALSE(length(0xFFFFFFFF).ok());
  // "GET " -- what an HTTP client sends first.
  const std::array<uint8_t, 4> http{'G', 'E', 'T', ' '};
  EXPECT_FALSE(decode_length(http).ok());
}

TEST(CmMessageTest, AnotherVersionIsUnimplementedNotMalformed) {
  std::vector<uint8_t> body = encode_body(Rtu{});
  body[0] = kWireVersion + 1;
  Result<Message> r = decode(body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnimplemented);
  EXPECT_NE(r.status().message().find("version 2"), std::string::npos) << r.status().message();
}

TEST(CmMessageTest, BadHeaderFieldsAreRejected) {
  std::vector<uint8_t> body = encode_body(Rtu{});
  body[1] = 9;  // no such type
  EXPECT_FALSE(decode(body).ok());
  body[1] = 0;
  EXPECT_FALSE(decode(body).ok());
  body = encode_body(Rtu{});
  body[3] = 1;  // reserved
  EXPECT_FALSE(decode(body).ok());
}

// Offsets in a REP body: header (4), then the endpoint.
constexpr size_t kRepEndpoint = kMessageHeaderBytes;
constexpr size_t kRepQpNum = kRepEndpoint + 16 + 2;
constexpr size_t kRepPsn = kRepQpNum + 4;
constexpr size_t kRepMtu = kRepPsn + 4;
constexpr size_t kRepPrivateLength = kRepEndpoint + kEndpointBytes;

void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

TEST(CmMessageTest, EndpointFieldsOutsideTheirRangesAreRejected) {
  const std::vector<uint8_t> good = encode_body(Rep{udp_endpoint(), {}});
  ASSERT_TRUE(decode(good).ok());
  struct Case {
    size_t at;
    uint32_t value;
    const char* why;
  } cases[] = {
      {kRepQpNum, 0, "QP number 0"},
      {kRepQpNum, 1u << 24, "QP number over 24 bits"},
      {kRepPsn, 1u << 24, "PSN over 24 bits"},
      {kRepMtu, 300, "path MTU 300"},
      {kRepMtu, 8192, "path MTU 8192"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> body = good;
    put32(body, c.at, c.value);
    EXPECT_FALSE(decode(body).ok()) << c.why;
  }
}

TEST(CmMessageTest, PrivateDataBeyondTheLimitIsRejectedBothWays) {
  Rep rep{udp_endpoint(), bytes(kMaxPrivateDataBytes + 1, 5)};
  Result<std::vector<uint8_t>> frame = encode(rep);
  ASSERT_FALSE(frame.ok());
  EXPECT_EQ(frame.status().code(), Code::kInvalidArgument);
  // A peer that claims 4097 bytes and sends them is refused on the length.
  std::vector<uint8_t> body = encode_body(Rep{udp_endpoint(), bytes(kMaxPrivateDataBytes, 5)});
  body[kRepPrivateLength] = (kMaxPrivateDataBytes + 1) >> 8;
  body[kRepPrivateLength + 1] = (kMaxPrivateDataBytes + 1) & 0xFF;
  body.push_back(0);
  Result<Message> r = decode(body);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exceeds 4096"), std::string::npos) << r.status().message();
}

TEST(CmMessageTest, ServiceNamesMustBePrintableAndBounded) {
  EXPECT_TRUE(valid_service_name("echo"));
  EXPECT_TRUE(valid_service_name("hyperloop/group-7"));
  EXPECT_FALSE(valid_service_name(""));
  EXPECT_FALSE(valid_service_name("two words"));
  EXPECT_FALSE(valid_service_name(std::string("nul\0", 4)));
  EXPECT_FALSE(valid_service_name(std::string(kMaxServiceNameBytes + 1, 'x')));
  EXPECT_FALSE(encode(Req{"bad name", udp_endpoint(), {}}).ok());
  // On the wire: a name with a control character is refused.
  std::vector<uint8_t> body = encode_body(Req{"echo", udp_endpoint(), {}});
  body[kMessageHeaderBytes + 1] = '\n';
  EXPECT_FALSE(decode(body).ok());
}

TEST(CmMessageTest, RejectFieldsAreChecked) {
  EXPECT_FALSE(encode(Rej{RejectReason::kBadMessage, Code::kOk, "ok is no error"}).ok());
  std::vector<uint8_t> body = encode_body(Rej{RejectReason::kBadMessage, Code::kInvalidArgument, "x"});
  std::vector<uint8_t> bad_reason = body;
  bad_reason[kMessageHeaderBytes] = 0;
  EXPECT_FALSE(decode(bad_reason).ok());
  std::vector<uint8_t> bad_code = body;
  bad_code[kMessageHeaderBytes + 1] = 0;  // kOk
  EXPECT_FALSE(decode(bad_code).ok());
  bad_code[kMessageHeaderBytes + 1] = 200;
  EXPECT_FALSE(decode(bad_code).ok());
  // A REJ's text is advice: an over-long one is cut, control characters blanked.
  Result<std::vector<uint8_t>> long_text =
      encode(Rej{RejectReason::kLocalError, Code::kInternal, std::string(5000, 'a') + "\n"});
  ASSERT_TRUE(long_text.ok());
  Result<Message> back = decode(body_of(long_text.value()));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::get<Rej>(back.value()).text, std::string(kMaxRejectTextBytes, 'a'));
  // ... so one that arrives with a control character was not ours.
  std::vector<uint8_t> nul_text = encode_body(Rej{RejectReason::kLocalError, Code::kInternal, "abc"});
  nul_text.back() = 0;
  EXPECT_FALSE(decode(nul_text).ok());
}

TEST(CmMessageTest, InProcessGidMapsBackToItsFabricAddress) {
  for (uint32_t address : {0u, 1u, 0x123456u, 0xFFFFFFu}) {
    Result<uint32_t> back = detail::in_process_address(nic::Gid::in_process(address));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back.value(), address);
  }
  EXPECT_FALSE(detail::in_process_address(nic::Gid::from_ipv4(0x7F000001)).ok());
}

}  // namespace
}  // namespace ferry::cm
