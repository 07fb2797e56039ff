#include "etcd_gateway.h"

#include <array>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

namespace ferry::membership::etcd {

namespace {

using json = nlohmann::json;

constexpr char kBase64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr size_t kQuotedBytesMax = 200;  // of a non-JSON error body, in a Status message

Status malformed(std::string_view what) { return unavailable("malformed etcd response: " + std::string(what)); }

// The start of an untrusted body, printable, for an error message.
std::string quote(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size() && i < kQuotedBytesMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(body[i]);
    out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  }
  if (body.size() > kQuotedBytesMax) out += "...";
  return out;
}

Result<json> parse_object(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return malformed("not JSON: '" + quote(body) + "'");
  if (!j.is_object()) return malformed("not a JSON object: '" + quote(body) + "'");
  return j;
}

// Field readers. A missing field has its protobuf default (the gateway
// leaves defaults out); a present field of the wrong type is malformed.
Result<const json*> object_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return static_cast<const json*>(nullptr);
  if (!it->is_object()) return malformed(std::string("'") + name + "' is not an object");
  return &*it;
}

Result<int64_t> int_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return int64_t{0};
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return malformed(std::string("'") + name + "' out of range");
    }
    return static_cast<int64_t>(v);
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string()) return malformed(std::string("'") + name + "' is not an int64");
  const std::string& s = it->get_ref<const std::string&>();
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) {
    return malformed(std::string("'") + name + "' is not an int64: '" + quote(s) + "'");
  }
  return v;
}

Result<bool> bool_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return false;
  if (!it->is_boolean()) return malformed(std::string("'") + name + "' is not a boolean");
  return it->get<bool>();
}

Result<std::string> string_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) return malformed(std::string("'") + name + "' is not a string");
  return it->get<std::string>();
}

Result<std::string> bytes_field(const json& obj, const char* name) {
  FERRY_ASSIGN_OR_RETURN(std::string text, string_field(obj, name));
  std::optional<std::string> bytes = base64_decode(text);
  if (!bytes) return malformed(std::string("'") + name + "' is not base64");
  return std::move(*bytes);
}

// Every successful response carries a header with the store's revision (>= 1).
Result<Revision> header_revision(const json& obj) {
  FERRY_ASSIGN_OR_RETURN(const json* header, object_field(obj, "header"));
  if (header == nullptr) return malformed("no header");
  FERRY_ASSIGN_OR_RETURN(Revision rev, int_field(*header, "revision"));
  if (rev <= 0) return malformed("header revision " + std::to_string(rev));
  return rev;
}

Result<KeyValue> decode_kv(const json& j) {
  if (!j.is_object()) return malformed("key-value is not an object");
  KeyValue kv;
  FERRY_ASSIGN_OR_RETURN(kv.key, bytes_field(j, "key"));
  FERRY_ASSIGN_OR_RETURN(kv.value, bytes_field(j, "value"));
  FERRY_ASSIGN_OR_RETURN(kv.create_revision, int_field(j, "create_revision"));
  FERRY_ASSIGN_OR_RETURN(kv.mod_revision, int_field(j, "mod_revision"));
  FERRY_ASSIGN_OR_RETURN(kv.version, int_field(j, "version"));
  FERRY_ASSIGN_OR_RETURN(kv.lease, int_field(j, "lease"));
  if (kv.mod_revision <= 0 || kv.create_revision < 0 || kv.create_revision > kv.mod_revision) {
    return malformed("key-value revisions create " + std::to_string(kv.create_revision) + " mod " +
                     std::to_string(kv.mod_revision));
  }
  return kv;
}

Result<Event> decode_event(const json& j) {
  if (!j.is_object()) return malformed("event is not an object");
  Event event;
  auto type = j.find("type");
  if (type != j.end() && !type->is_null()) {
    if (*type == "PUT" || *type == 0) {
      event.type = Event::Type::kPut;
    } else if (*type == "DELETE" || *type == 1) {
      event.type = Event::Type::kDelete;
    } else {
      return malformed("unknown event type");
    }
  }
  FERRY_ASSIGN_OR_RETURN(const json* kv, object_field(j, "kv"));
  if (kv == nullptr) return malformed("event without kv");
  FERRY_ASSIGN_OR_RETURN(event.kv, decode_kv(*kv));
  if (event.type == Event::Type::kDelete) {
    // etcd sends the deleted key and the delete's revision only.
    event.kv = KeyValue{std::move(event.kv.key), {}, 0, event.kv.mod_revision, 0, 0};
  }
  return event;
}

Status grpc_status(int64_t grpc_code, std::string message) {
  message = "etcd: " + message;
  switch (grpc_code) {
    case 3:
      return invalid_argument(std::move(message));
    case 4:
      return timed_out(std::move(message));
    case 5:
      return not_found(std::move(message));
    case 6:
      return Status(Code::kAlreadyExists, std::move(message));
    case 7:
    case 16:
      return permission_denied(std::move(message));
    case 8:
      return resource_exhausted(std::move(message));
    case 9:
      return failed_precondition(std::move(message));
    case 11:
      return out_of_range(std::move(message));
    case 12:
      return unimplemented(std::move(message));
    case 15:
      return data_loss(std::move(message));
    default:
      return unavailable(std::move(message) + " (gRPC code " + std::to_string(grpc_code) + ")");
  }
}

// {"error": "...", "code": N, "message": "..."} (unary) or
// {"error": {"grpc_code": N, "message": "..."}} (streams); nullopt otherwise.
std::optional<Status> gateway_error(const json& j) {
  auto error = j.find("error");
  if (error == j.end()) return std::nullopt;
  const json* holder = error->is_object() ? &*error : &j;
  const char* code_name = error->is_object() ? "grpc_code" : "code";
  Result<int64_t> code = int_field(*holder, code_name);
  Result<std::string> message = string_field(*holder, "message");
  std::string text = message.ok() && !message.value().empty() ? message.value() : std::string("error");
  if (error->is_string() && (!message.ok() || message.value().empty())) text = error->get<std::string>();
  if (!code.ok() || code.value() == 0) return unavailable("etcd gateway error: " + quote(text));
  return grpc_status(code.value(), quote(text));
}

struct Bounds {
  std::string key;
  std::string range_end;  // empty: the single key
};

Bounds bounds(const KeySpan& span) {
  if (!span.is_prefix) return {span.key, {}};
  // etcd rejects an empty key; "\0" up to "\0" means every key.
  if (span.key.empty()) return {std::string(1, '\0'), std::string(1, '\0')};
  return {span.key, prefix_range_end(span.key)};
}

json span_json(const KeySpan& span) {
  const Bounds b = bounds(span);
  json j = {{"key", base64_encode(b.key)}};
  if (!b.range_end.empty()) j["range_end"] = base64_encode(b.range_end);
  return j;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16 |
                       static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) out.push_back(kBase64Alphabet[(v >> shift) & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (rest == 2) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    out.push_back(kBase64Alphabet[(v >> 18) & 63]);
    out.push_back(kBase64Alphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kBase64Alphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  static const std::array<int8_t, 256> kValue = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kBase64Alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    if (last && text[i + 3] == '=') pad = text[i + 2] == '=' ? 2 : 1;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      int8_t d = 0;
      if (k < 4 - pad) {
        d = kValue[static_cast<uint8_t>(text[i + k])];
        if (d < 0) return std::nullopt;
      }
      v = v << 6 | static_cast<uint32_t>(d);
    }
    // Canonical only: the bits a padded group does not carry must be zero.
    if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0)) return std::nullopt;
    out.push_back(static_cast<char>(v >> 16));
    if (pad < 2) out.push_back(static_cast<char>(v >> 8 & 0xff));
    if (pad < 1) out.push_back(static_cast<char>(v & 0xff));
  }
  return out;
}

std::string prefix_range_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) != 0xff) {
      end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

std::string encode_put(const std::string& key, const std::string& value, LeaseId lease) {
  json j = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) j["lease"] = std::to_string(lease);
  return j.dump();
}

std::string encode_range(const KeySpan& span) { return span_json(span).dump(); }

std::string encode_delete(const KeySpan& span) { return span_json(span).dump(); }

std::string encode_cas(const std::string& compare_key, Revision expected_mod_revision, const Mutation& effect) {
  json compare = {{"key", base64_encode(compare_key)},
                  {"target", "MOD"},
                  {"result", "EQUAL"},
                  {"mod_revision", std::to_string(expected_mod_revision)}};
  json op;
  if (effect.kind == Mutation::Kind::kPut) {
    json put = {{"key", base64_encode(effect.key)}, {"value", base64_encode(effect.value)}};
    if (effect.lease != 0) put["lease"] = std::to_string(effect.lease);
    op["request_put"] = std::move(put);
  } else {
    op["request_delete_range"] = {{"key", base64_encode(effect.key)}};
  }
  json j;
  j["compare"] = json::array({std::move(compare)});
  j["success"] = json::array({std::move(op)});
  return j.dump();
}

std::string encode_lease_grant(int64_t ttl_seconds) { return json{{"TTL", std::to_string(ttl_seconds)}}.dump(); }

std::string encode_lease_id(LeaseId lease) { return json{{"ID", std::to_string(lease)}}.dump(); }

std::string encode_watch_create(const KeySpan& span, Revision start_revision) {
  json create = span_json(span);
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  return json{{"create_request", std::move(create)}}.dump();
}

Result<Revision> decode_put(std::string_view body) {
  FERRY_ASSIGN_OR_RETURN(json j, parse_object(body));
  if (auto e = gateway_error(j)) return *e;
  return header_revision(j);
}

Result<RangeResult> decode_range(std::string_view body) {
  FERRY_ASSIGN_OR_RETURN(json j, parse_object(body));
  if (auto e = gateway_error(j)) return *e;
  RangeResult result;
  FERRY_ASSIGN_OR_RETURN(result.revision, header_revision(j));
  auto kvs = j.find("kvs");
  if (kvs != j.end() && !kvs->is_null()) {
    if (!kvs->is_array()) return malformed("'kvs' is not an array");
    result.kvs.reserve(kvs->size());
    for (const json& kv : *kvs) {
      FERRY_ASSIGN_OR_RETURN(KeyValue decoded, decode_kv(kv));
      if (decoded.mod_revision > result.revision) return malformed("key-value newer than the header revision");
      result.kvs.push_back(std::move(decoded));
    }
  }
  return result;
}

Result<DeleteResult> decode_delete(std::string_view body) {
  FERRY_ASSIGN_OR_RETURN(json j, parse_object(body));
  if (auto e = gateway_error(j)) return *e;
  DeleteResult result;
  FERRY_ASSIGN_OR_RETURN(result.revision, header_revision(j));
  FERRY_ASSIGN_OR_RETURN(result.deleted, int_field(j, "deleted"));
  if (result.deleted < 0) return malformed("negative 'deleted'");
  return result;
}

Result<TxnResult> decode_txn(std::string_view body) {
  FERRY_ASSIGN_OR_RETURN(json j, parse_object(body));
  if (auto e = gateway_error(j)) return *e;
  TxnResult result;
  FERRY_ASSIGN_OR_RETURN(result.revision, header_revision(j));
  FERRY_ASSIGN_OR_RETURN(result.succeeded, bool_field(j, "succeeded"));
  return result;
}

Result<Lease> decode_lease_grant(std::string_view body) {
  FERRY_ASSIGN_OR_RETURN(json j, parse_object(body));
  if (auto e = gateway_error(j)) return *e;
  FERRY_ASSIGN_OR_RETURN(std::string error, string_field(j, "error"));
  if (!error.empty()) return unavailable("etcd refused the lease: " + quote(error));
  Lease lease;
  FERRY_ASSIGN_OR_RETURN(lease.id, int_field(j, "ID"));
  FERRY_ASSIGN_OR_RETURN(lease.ttl_seconds, int_field(j, "TTL"));
  if (lease.id == 0 || lease.ttl_seconds <= 0) return malformed("lease grant without an ID or a TTL");
  return lease;
}

Result<int64_t> decode_keep_alive(std::string_view body) {
  FERRY_ASSIGN_OR_RETURN(json j, parse_object(body));
  if (auto e = gateway_error(j)) return *e;
  FERRY_ASSIGN_OR_RETURN(const json* result, object_field(j, "result"));
  if (result == nullptr) return malformed("keep-alive answer without a result");
  FERRY_ASSIGN_OR_RETURN(LeaseId id, int_field(*result, "ID"));
  FERRY_ASSIGN_OR_RETURN(int64_t ttl, int_field(*result, "TTL"));
  if (ttl <= 0) return not_found("lease " + std::to_string(id) + " not found (expired or revoked)");
  return ttl;
}

Status decode_error(long http_status, std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && j.is_object()) {
    if (auto e = gateway_error(j)) return *e;
  }
  return unavailable("etcd gateway answered HTTP " + std::to_string(http_status) + ": '" + quote(body) + "'");
}

Status WatchStreamDecoder::decode_line(std::string_view line, std::vector<WatchMessage>* out) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  if (line.empty()) return ok_status();
  FERRY_ASSIGN_OR_RETURN(json j, parse_object(line));
  if (auto e = gateway_error(j)) return *e;
  FERRY_ASSIGN_OR_RETURN(const json* result, object_field(j, "result"));
  if (result == nullptr) return malformed("watch message without a result");
  WatchMessage m;
  // Not header_revision(): etcd 3.4's cancel for a compacted start revision
  // carries a header without a revision.
  FERRY_ASSIGN_OR_RETURN(const json* header, object_field(*result, "header"));
  if (header == nullptr) return malformed("watch message without a header");
  FERRY_ASSIGN_OR_RETURN(m.header_revision, int_field(*header, "revision"));
  if (m.header_revision < 0) return malformed("negative watch header revision");
  FERRY_ASSIGN_OR_RETURN(m.created, bool_field(*result, "created"));
  FERRY_ASSIGN_OR_RETURN(m.canceled, bool_field(*result, "canceled"));
  FERRY_ASSIGN_OR_RETURN(m.compact_revision, int_field(*result, "compact_revision"));
  FERRY_ASSIGN_OR_RETURN(m.cancel_reason, string_field(*result, "cancel_reason"));
  auto events = result->find("events");
  if (events != result->end() && !events->is_null()) {
    if (!events->is_array()) return malformed("'events' is not an array");
    m.events.reserve(events->size());
    for (const json& e : *events) {
      FERRY_ASSIGN_OR_RETURN(Event event, decode_event(e));
      m.events.push_back(std::move(event));
    }
  }
  out->push_back(std::move(m));
  return ok_status();
}

Status WatchStreamDecoder::feed(std::string_view chunk, std::vector<WatchMessage>* out) {
  if (!error_.ok()) return error_;
  size_t start = 0;
  for (size_t i = 0; i < chunk.size(); ++i) {
    if (chunk[i] != '\n') continue;
    std::string_view piece = chunk.substr(start, i - start);
    Status s;
    // The same bound however the stream is chunked.
    if (partial_.size() + piece.size() > line_bytes_max_) {
      s = malformed("watch message longer than " + std::to_string(line_bytes_max_) + " bytes");
    } else if (partial_.empty()) {
      s = decode_line(piece, out);
    } else {
      partial_.append(piece);
      s = decode_line(partial_, out);
      partial_.clear();
    }
    if (!s.ok()) {
      error_ = s;
      return s;
    }
    start = i + 1;
  }
  partial_.append(chunk.substr(start));
  if (partial_.size() > line_bytes_max_) {
    error_ = malformed("watch message longer than " + std::to_string(line_bytes_max_) + " bytes");
    return error_;
  }
  return ok_status();
}

Status WatchStreamDecoder::finish(std::vector<WatchMessage>* out) {
  if (!error_.ok()) return error_;
  std::string rest = std::move(partial_);
  partial_.clear();
  Status s = decode_line(rest, out);
  if (!s.ok()) error_ = s;
  return s;
}

}  // namespace ferry::membership::etcd
