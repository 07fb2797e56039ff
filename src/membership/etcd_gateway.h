// etcd v3 JSON gateway encoding (etcd 3.4, the version Debian bookworm ships):
// request bodies and response decoders for /v3/kv/*, /v3/lease/* and the
// /v3/watch stream. Internal to the membership layer; the decoders are
// exposed here for tests and tests/fuzz/etcd_response_fuzz.cc.
//
// The gateway is grpc-gateway over etcd's protobufs: bytes fields (keys,
// values) are base64, int64 fields are decimal strings, and fields equal to
// their default (0, false, empty, PUT) are left out. Every decoder treats its
// input as untrusted: a malformed body is an unavailable Status saying what
// was wrong, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/membership/store.h"

namespace ferry::membership::etcd {

// Standard base64 (RFC 4648 section 4) with padding.
std::string base64_encode(std::string_view bytes);
// nullopt for anything but canonical padded base64.
std::optional<std::string> base64_decode(std::string_view text);

// etcd's range_end for a prefix: the prefix with its last byte incremented,
// trailing 0xff bytes dropped first; "\0" (every key) when nothing is left.
std::string prefix_range_end(std::string_view prefix);

// Request bodies.
std::string encode_put(const std::string& key, const std::string& value, LeaseId lease);
std::string encode_range(const KeySpan& span);
std::string encode_delete(const KeySpan& span);
std::string encode_cas(const std::string& compare_key, Revision expected_mod_revision, const Mutation& effect);
std::string encode_lease_grant(int64_t ttl_seconds);
std::string encode_lease_id(LeaseId lease);  // keepalive and revoke
std::string encode_watch_create(const KeySpan& span, Revision start_revision);

// Response decoders (HTTP 200 bodies).
Result<Revision> decode_put(std::string_view body);
Result<RangeResult> decode_range(std::string_view body);
Result<DeleteResult> decode_delete(std::string_view body);
Result<TxnResult> decode_txn(std::string_view body);
Result<Lease> decode_lease_grant(std::string_view body);
// The TTL renewed for; not_found if the lease is gone (etcd answers TTL 0).
Result<int64_t> decode_keep_alive(std::string_view body);

// The Status for a non-200 answer (or a 200 whose body is a gateway error
// object): the gRPC code in the body mapped to a Code, else unavailable with
// the HTTP status and the start of the body.
Status decode_error(long http_status, std::string_view body);

// One message of the watch stream.
struct WatchMessage {
  Revision header_revision = 0;  // 0 when etcd leaves it out (a cancel does)
  bool created = false;
  bool canceled = false;
  Revision compact_revision = 0;  // set when canceled because the start revision was compacted
  std::string cancel_reason;
  std::vector<Event> events;
};

// Splits the /v3/watch response stream (newline-delimited JSON objects, each
// {"result": WatchResponse} or {"error": ...}) into messages, whatever the
// chunking. Bounded: a line longer than `line_bytes_max` is an error.
class WatchStreamDecoder {
 public:
  explicit WatchStreamDecoder(size_t line_bytes_max = 64u << 20) : line_bytes_max_(line_bytes_max) {}

  // Appends the messages completed by `chunk` to *out. After an error the
  // stream is unusable (every later call fails).
  Status feed(std::string_view chunk, std::vector<WatchMessage>* out);
  // The stream ended: a final unterminated message is decoded too.
  Status finish(std::vector<WatchMessage>* out);

 private:
  Status decode_line(std::string_view line, std::vector<WatchMessage>* out);

  const size_t line_bytes_max_;
  std::string partial_;
  Status error_;
};

}  // namespace ferry::membership::etcd
