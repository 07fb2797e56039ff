// libFuzzer target: the connection manager's frame decoder
// (include/ferry/cm/message.h), which reads whatever a TCP peer sends a
// listener or a connecting client.
//
// Input: a byte stream as it would arrive on a CM connection: frames of a
// 4-byte big-endian length and a body. Checked properties:
//  - decode_length accepts only kMessageHeaderBytes..kMaxMessageBytes;
//  - decode never reads outside the body (ASan) and never crashes;
//  - whatever decodes re-encodes to exactly the same bytes (the format has
//    one encoding per message), and that encoding decodes to the same message;
//  - a decoded message respects the bounds the encoder enforces.
//
// Run: ./cm_message_fuzz -max_total_time=60 ../tests/fuzz/corpus/cm_message_fuzz
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ferry/cm/message.h"

namespace {

using namespace ferry;
using namespace ferry::cm;

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

void check_bounds(const Message& m) {
  if (const Req* req = std::get_if<Req>(&m)) {
    FUZZ_CHECK(valid_service_name(req->service));
    FUZZ_CHECK(req->private_data.size() <= kMaxPrivateDataBytes);
    FUZZ_CHECK(req->endpoint.qp_num != 0 && req->endpoint.qp_num <= 0xFFFFFF);
    FUZZ_CHECK(req->endpoint.first_psn <= 0xFFFFFF);
  } else if (const Rep* rep = std::get_if<Rep>(&m)) {
    FUZZ_CHECK(rep->private_data.size() <= kMaxPrivateDataBytes);
    FUZZ_CHECK(rep->endpoint.qp_num != 0 && rep->endpoint.qp_num <= 0xFFFFFF);
  } else if (const Rej* rej = std::get_if<Rej>(&m)) {
    FUZZ_CHECK(rej->code != Code::kOk);
    FUZZ_CHECK(rej->text.size() <= kMaxRejectTextBytes);
  }
}

void check_body(std::span<const uint8_t> body) {
  Result<Message> m = decode(body);
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == Code::kInvalidArgument || m.status().code() == Code::kUnimplemented);
    return;
  }
  check_bounds(m.value());
  Result<std::vector<uint8_t>> frame = encode(m.value());
  FUZZ_CHECK(frame.ok());
  const std::vector<uint8_t>& f = frame.value();
  FUZZ_CHECK(f.size() == kFrameHeaderBytes + body.size());
  FUZZ_CHECK(std::equal(body.begin(), body.end(), f.begin() + kFrameHeaderBytes));
  Result<Message> again = decode(std::span<const uint8_t>(f).subspan(kFrameHeaderBytes));
  FUZZ_CHECK(again.ok() && again.value() == m.value());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  // The stream as a listener reads it: frame after frame until one is bad.
  while (in.size() >= kFrameHeaderBytes) {
    Result<uint32_t> length = decode_length(in.first<kFrameHeaderBytes>());
    if (!length.ok()) break;
    FUZZ_CHECK(length.value() >= kMessageHeaderBytes && length.value() <= kMaxMessageBytes);
    in = in.subspan(kFrameHeaderBytes);
    if (in.size() < length.value()) {
      check_body(in);  // a truncated body must fail cleanly too
      break;
    }
    check_body(in.first(length.value()));
    in = in.subspan(length.value());
  }
  // And the whole input as one body, whatever its framing.
  check_body(std::span<const uint8_t>(data, size));
  return 0;
}
