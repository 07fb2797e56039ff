// The store's read service wire (txn_kv_wire.h; docs/rpc-format.md "The
// transactional store's read service").
#include "ferry/hyperloop/txn_kv_wire.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "le_words.h"

namespace ferry::hyperloop {

namespace {

constexpr uint8_t kReadFlagAfter = 1;   // request flags
constexpr uint8_t kReplyFlagMore = 1;   // reply flags
constexpr uint8_t kLastStatus = static_cast<uint8_t>(TxnKvReadStatus::kTooLarge);

void append_entry(std::vector<uint8_t>* out, std::string_view key, std::span<const uint8_t> value) {
  const size_t at = out->size();
  out->resize(at + kTxnKvReadEntryHeaderBytes + key.size() + value.size());
  uint8_t* p = out->data() + at;
  detail::store_le<uint16_t>(p, static_cast<uint16_t>(key.size()));
  detail::store_le<uint16_t>(p + 2, 0);
  detail::store_le<uint32_t>(p + 4, static_cast<uint32_t>(value.size()));
  if (!key.empty()) std::memcpy(p + kTxnKvReadEntryHeaderBytes, key.data(), key.size());
  if (!value.empty()) std::memcpy(p + kTxnKvReadEntryHeaderBytes + key.size(), value.data(), value.size());
}

std::vector<uint8_t> reply_header(TxnKvReadStatus status, bool more, uint32_t entries) {
  std::vector<uint8_t> out(kTxnKvReadReplyHeaderBytes, 0);
  out[0] = static_cast<uint8_t>(status);
  out[1] = more ? kReplyFlagMore : 0;
  detail::store_le<uint32_t>(out.data() + 4, entries);
  return out;
}

std::vector<uint8_t> status_only(TxnKvReadStatus status) { return reply_header(status, false, 0); }

TxnKvReadStatus status_of(const Status& s) {
  switch (s.code()) {
    case Code::kNotFound:
      return TxnKvReadStatus::kNotFound;
    case Code::kInvalidArgument:
      return TxnKvReadStatus::kInvalid;
    default:
      return TxnKvReadStatus::kUnreadable;
  }
}

}  // namespace

size_t txn_kv_reply_bytes(size_t key_bytes, size_t value_bytes) {
  return kTxnKvReadReplyHeaderBytes + kTxnKvReadEntryHeaderBytes + key_bytes + value_bytes;
}

std::vector<uint8_t> encode_txn_kv_read(const TxnKvReadRequest& r) {
  std::vector<uint8_t> out(kTxnKvReadRequestHeaderBytes + r.key.size(), 0);
  detail::store_le<uint16_t>(out.data(), static_cast<uint16_t>(r.key.size()));
  out[2] = r.type == kTxnKvReadScan && r.after ? kReadFlagAfter : 0;
  out[3] = 0;
  detail::store_le<uint32_t>(out.data() + 4, r.type == kTxnKvReadScan ? r.count : 0);
  if (!r.key.empty()) std::memcpy(out.data() + kTxnKvReadRequestHeaderBytes, r.key.data(), r.key.size());
  return out;
}

Result<TxnKvReadRequest> parse_txn_kv_read(uint16_t type, std::span<const uint8_t> payload) {
  if (type != kTxnKvReadGet && type != kTxnKvReadScan) {
    return invalid_argument("txn kv read: unknown request type " + std::to_string(type));
  }
  if (payload.size() < kTxnKvReadRequestHeaderBytes) return invalid_argument("txn kv read: a truncated header");
  const uint8_t* p = payload.data();
  const size_t key_bytes = detail::load_le<uint16_t>(p);
  const uint8_t flags = p[2];
  if (kTxnKvReadRequestHeaderBytes + key_bytes != payload.size()) {
    return invalid_argument("txn kv read: the key's size does not match the payload's");
  }
  if (p[3] != 0 || (flags & ~kReadFlagAfter) != 0) return invalid_argument("txn kv read: reserved bits set");
  TxnKvReadRequest r;
  r.type = type;
  r.key = std::string_view(reinterpret_cast<const char*>(p + kTxnKvReadRequestHeaderBytes), key_bytes);
  r.count = detail::load_le<uint32_t>(p + 4);
  r.after = (flags & kReadFlagAfter) != 0;
  if (type == kTxnKvReadGet && (r.count != 0 || r.after || key_bytes == 0)) {
    return invalid_argument("txn kv read: a GET names a key and has no count or flags");
  }
  if (type == kTxnKvReadScan && r.count == 0) return invalid_argument("txn kv read: a SCAN of 0 entries");
  return r;
}

std::vector<uint8_t> encode_txn_kv_reply(const TxnKvReadReply& reply) {
  std::vector<uint8_t> out = reply_header(reply.status, reply.more, static_cast<uint32_t>(reply.entries.size()));
  for (const auto& [k, v] : reply.entries) append_entry(&out, k, v);
  return out;
}

Result<TxnKvReadReply> parse_txn_kv_reply(std::span<const uint8_t> payload) {
  if (payload.size() < kTxnKvReadReplyHeaderBytes) return invalid_argument("txn kv reply: a truncated header");
  const uint8_t* p = payload.data();
  if (p[0] > kLastStatus) return invalid_argument("txn kv reply: unknown status " + std::to_string(p[0]));
  if ((p[1] & ~kReplyFlagMore) != 0 || p[2] != 0 || p[3] != 0) {
    return invalid_argument("txn kv reply: reserved bits set");
  }
  TxnKvReadReply r;
  r.status = static_cast<TxnKvReadStatus>(p[0]);
  r.more = (p[1] & kReplyFlagMore) != 0;
  const uint32_t entries = detail::load_le<uint32_t>(p + 4);
  if (entries != 0 && r.status != TxnKvReadStatus::kOk) return invalid_argument("txn kv reply: entries with an error");
  // Each entry takes at least its header: bounds the allocation by the bytes.
  if (entries > (payload.size() - kTxnKvReadReplyHeaderBytes) / kTxnKvReadEntryHeaderBytes) {
    return invalid_argument("txn kv reply: more entries than bytes");
  }
  r.entries.reserve(entries);
  size_t at = kTxnKvReadReplyHeaderBytes;
  for (uint32_t i = 0; i < entries; ++i) {
    if (payload.size() - at < kTxnKvReadEntryHeaderBytes) return invalid_argument("txn kv reply: a truncated entry");
    const size_t key_bytes = detail::load_le<uint16_t>(p + at);
    const size_t value_bytes = detail::load_le<uint32_t>(p + at + 4);
    if (detail::load_le<uint16_t>(p + at + 2) != 0) return invalid_argument("txn kv reply: reserved bits set");
    at += kTxnKvReadEntryHeaderBytes;
    if (payload.size() - at < key_bytes || payload.size() - at - key_bytes < value_bytes) {
      return invalid_argument("txn kv reply: an entry runs past the payload");
    }
    std::string key(reinterpret_cast<const char*>(p + at), key_bytes);
    std::vector<uint8_t> value(p + at + key_bytes, p + at + key_bytes + value_bytes);
    r.entries.emplace_back(std::move(key), std::move(value));
    at += key_bytes + value_bytes;
  }
  if (at != payload.size()) return invalid_argument("txn kv reply: bytes after the last entry");
  return r;
}

std::vector<uint8_t> answer_txn_kv_read(TxnKvReplicaReader& reader, uint16_t type, std::span<const uint8_t> payload,
                                        size_t capacity) {
  auto request = parse_txn_kv_read(type, payload);
  if (!request.ok()) return status_only(TxnKvReadStatus::kInvalid);
  if (Status s = reader.check_image(); !s.ok()) return status_only(TxnKvReadStatus::kUnreadable);
  const TxnKvReadRequest& r = request.value();
  if (r.type == kTxnKvReadGet) {
    auto value = reader.get(r.key);
    if (!value.ok()) return status_only(status_of(value.status()));
    if (txn_kv_reply_bytes(r.key.size(), value->size()) > capacity) return status_only(TxnKvReadStatus::kTooLarge);
    std::vector<uint8_t> out = reply_header(TxnKvReadStatus::kOk, false, 1);
    append_entry(&out, r.key, value.value());
    return out;
  }
  // Whole entries take at least their header: never ask the image for more
  // than the reply could carry (plus the start key a next page skips, plus
  // one to learn whether the reply was cut).
  if (capacity < kTxnKvReadReplyHeaderBytes + kTxnKvReadEntryHeaderBytes) return status_only(TxnKvReadStatus::kTooLarge);
  const size_t fit = (capacity - kTxnKvReadReplyHeaderBytes) / kTxnKvReadEntryHeaderBytes;
  const auto want = static_cast<uint32_t>(
      std::min<uint64_t>(std::min<uint64_t>(r.count, fit) + (r.after ? 1 : 0) + 1, UINT32_MAX));
  auto scanned = reader.scan(r.key, want);
  if (!scanned.ok()) return status_only(status_of(scanned.status()));
  std::vector<uint8_t> out = reply_header(TxnKvReadStatus::kOk, false, 0);
  uint32_t entries = 0;
  bool more = false;
  for (const auto& [k, v] : scanned.value()) {
    if (r.after && k == r.key) continue;
    if (entries == r.count) break;  // the extra one: the count ends the scan, not the reply's size
    if (out.size() + kTxnKvReadEntryHeaderBytes + k.size() + v.size() > capacity) {
      if (entries == 0) return status_only(TxnKvReadStatus::kTooLarge);
      more = true;
      break;
    }
    append_entry(&out, k, v);
    ++entries;
  }
  if (!more && entries < r.count && scanned->size() == want) more = true;  // cut by `fit`, not by the image's end
  out[1] = more ? kReplyFlagMore : 0;
  detail::store_le<uint32_t>(out.data() + 4, entries);
  return out;
}

// ---- region reads ----

std::vector<uint8_t> encode_txn_region_read(const TxnRegionReadRequest& r) {
  std::vector<uint8_t> out(kTxnRegionReadRequestBytes, 0);
  detail::store_le<uint64_t>(out.data(), r.offset);
  detail::store_le<uint32_t>(out.data() + 8, r.length);
  return out;
}

Result<TxnRegionReadRequest> parse_txn_region_read(std::span<const uint8_t> payload) {
  if (payload.size() != kTxnRegionReadRequestBytes) {
    return invalid_argument("txn region read: a request of " + std::to_string(payload.size()) + " bytes, not 16");
  }
  if (detail::load_le<uint32_t>(payload.data() + 12) != 0) {
    return invalid_argument("txn region read: reserved bits set");
  }
  TxnRegionReadRequest r;
  r.offset = detail::load_le<uint64_t>(payload.data());
  r.length = detail::load_le<uint32_t>(payload.data() + 8);
  if (r.length == 0) return invalid_argument("txn region read: a read of 0 bytes");
  return r;
}

std::vector<uint8_t> encode_txn_region_reply(const TxnRegionReadReply& reply) {
  std::vector<uint8_t> out(kTxnRegionReplyHeaderBytes + reply.bytes.size(), 0);
  out[0] = static_cast<uint8_t>(reply.status);
  detail::store_le<uint32_t>(out.data() + 4, static_cast<uint32_t>(reply.bytes.size()));
  if (!reply.bytes.empty()) {
    std::memcpy(out.data() + kTxnRegionReplyHeaderBytes, reply.bytes.data(), reply.bytes.size());
  }
  return out;
}

Result<TxnRegionReadReply> parse_txn_region_reply(std::span<const uint8_t> payload) {
  if (payload.size() < kTxnRegionReplyHeaderBytes) return invalid_argument("txn region reply: a truncated header");
  const uint8_t* p = payload.data();
  if (p[0] > kLastStatus) return invalid_argument("txn region reply: unknown status " + std::to_string(p[0]));
  if (p[1] != 0 || p[2] != 0 || p[3] != 0) return invalid_argument("txn region reply: reserved bits set");
  const uint32_t bytes = detail::load_le<uint32_t>(p + 4);
  if (bytes != payload.size() - kTxnRegionReplyHeaderBytes) {
    return invalid_argument("txn region reply: the byte count does not match the payload's");
  }
  TxnRegionReadReply r;
  r.status = static_cast<TxnKvReadStatus>(p[0]);
  if (bytes != 0 && r.status != TxnKvReadStatus::kOk) return invalid_argument("txn region reply: bytes with an error");
  r.bytes.assign(p + kTxnRegionReplyHeaderBytes, p + payload.size());
  return r;
}

std::vector<uint8_t> answer_txn_region_read(std::span<const uint8_t> region, std::span<const uint8_t> payload,
                                            size_t capacity) {
  TxnRegionReadReply reply;
  auto request = parse_txn_region_read(payload);
  if (!request.ok() || request->offset >= region.size() || capacity <= kTxnRegionReplyHeaderBytes) {
    reply.status = TxnKvReadStatus::kInvalid;
    return encode_txn_region_reply(reply);
  }
  const uint64_t n = std::min<uint64_t>(std::min<uint64_t>(request->length, region.size() - request->offset),
                                        capacity - kTxnRegionReplyHeaderBytes);
  const uint8_t* from = region.data() + request->offset;
  reply.bytes.assign(from, from + n);
  return encode_txn_region_reply(reply);
}

}  // namespace ferry::hyperloop
