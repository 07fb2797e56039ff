// libFuzzer target: the etcd v3 gateway response decoders
// (src/membership/etcd_gateway.h) and the view value format (view.h), which
// read whatever an etcd endpoint -- or anything listening there -- sends.
//
// Input: [selector][chunk] body bytes...
// selector % 8 picks the decoder: range, txn, delete, lease grant, keep-alive,
// put, an error body (HTTP status from `chunk`), or the watch stream. Every
// input also goes through base64_decode and decode_view. Checked properties:
//  - decoded key-values are consistent (create <= mod <= header revision);
//  - the watch stream decodes to the same messages however it is chunked
//    (one feed vs. feeds of `chunk`+1 bytes);
//  - base64_decode accepts only canonical text: encoding its output gives
//    the input back; decode_view's output encodes and decodes to itself.
//
// Run: ./etcd_response_fuzz -max_total_time=60 ../tests/fuzz/corpus/etcd_response_fuzz
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "etcd_gateway.h"
#include "ferry/membership/view.h"

namespace {

using namespace ferry::membership;
using namespace ferry::membership::etcd;

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

void check_kv(const KeyValue& kv, Revision header) {
  FUZZ_CHECK(kv.mod_revision > 0);
  FUZZ_CHECK(kv.create_revision >= 0 && kv.create_revision <= kv.mod_revision);
  FUZZ_CHECK(header == 0 || kv.mod_revision <= header);
}

struct Decoded {
  ferry::Status status;
  std::vector<WatchMessage> messages;
};

Decoded decode_stream(std::string_view body, size_t chunk) {
  Decoded d;
  WatchStreamDecoder decoder(1 << 16);
  for (size_t i = 0; i < body.size() && d.status.ok(); i += chunk) {
    d.status = decoder.feed(body.substr(i, chunk), &d.messages);
  }
  if (d.status.ok()) d.status = decoder.finish(&d.messages);
  return d;
}

bool same_messages(const std::vector<WatchMessage>& a, const std::vector<WatchMessage>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].header_revision != b[i].header_revision || a[i].created != b[i].created ||
        a[i].canceled != b[i].canceled || a[i].compact_revision != b[i].compact_revision ||
        a[i].cancel_reason != b[i].cancel_reason || a[i].events != b[i].events) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t selector = data[0];
  const size_t chunk = static_cast<size_t>(data[1]) + 1;
  const std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);

  switch (selector % 8) {
    case 0: {
      ferry::Result<RangeResult> r = decode_range(body);
      if (r.ok()) {
        FUZZ_CHECK(r.value().revision > 0);
        for (const KeyValue& kv : r.value().kvs) check_kv(kv, r.value().revision);
      }
      break;
    }
    case 1: {
      ferry::Result<TxnResult> r = decode_txn(body);
      FUZZ_CHECK(!r.ok() || r.value().revision > 0);
      break;
    }
    case 2: {
      ferry::Result<DeleteResult> r = decode_delete(body);
      FUZZ_CHECK(!r.ok() || (r.value().revision > 0 && r.value().deleted >= 0));
      break;
    }
    case 3: {
      ferry::Result<Lease> r = decode_lease_grant(body);
      FUZZ_CHECK(!r.ok() || (r.value().id != 0 && r.value().ttl_seconds > 0));
      break;
    }
    case 4: {
      ferry::Result<int64_t> r = decode_keep_alive(body);
      FUZZ_CHECK(!r.ok() || r.value() > 0);
      break;
    }
    case 5: {
      ferry::Result<Revision> r = decode_put(body);
      FUZZ_CHECK(!r.ok() || r.value() > 0);
      break;
    }
    case 6: {
      const ferry::Status s = decode_error(static_cast<long>(data[1]) + 300, body);
      FUZZ_CHECK(!s.ok());
      break;
    }
    case 7: {
      const Decoded whole = decode_stream(body, body.size() + 1);
      const Decoded pieces = decode_stream(body, chunk);
      FUZZ_CHECK(whole.status.ok() == pieces.status.ok());
      if (whole.status.ok()) {
        FUZZ_CHECK(same_messages(whole.messages, pieces.messages));
        for (const WatchMessage& m : whole.messages) {
          FUZZ_CHECK(m.header_revision >= 0);
          for (const Event& e : m.events) check_kv(e.kv, 0);
        }
      }
      break;
    }
  }

  std::optional<std::string> bytes = base64_decode(body);
  if (bytes) FUZZ_CHECK(base64_encode(*bytes) == body);

  ferry::Result<View> view = decode_view(body);
  if (view.ok()) {
    ferry::Result<View> again = decode_view(encode_view(view.value()));
    FUZZ_CHECK(again.ok() && again.value() == view.value());
  }
  return 0;
}
