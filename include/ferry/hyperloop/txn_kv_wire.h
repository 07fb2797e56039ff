// The read service of a transactional-store replica in its own process
// (`ferry store replica`, docs/deployment.md "The transactional store as
// processes"): the bytes of a GET or SCAN request and of its answer, carried
// as the payload of an RPC (rpc/server.h, RawRPC) whose request type is the
// operation. docs/rpc-format.md "The transactional store's read service"
// specifies them. Every parser here reads bytes from the network: it checks
// every size against the bytes it was given and refuses anything its encoder
// could not have produced (fuzzed by txn_log_fuzz, mode bit 2).
//
// Threads: free functions; answer_txn_kv_read uses the reader as
// TxnKvReplicaReader allows (one reader per thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/hyperloop/txn_kv.h"

namespace ferry::hyperloop {

// RPC request types of the read service.
inline constexpr uint16_t kTxnKvReadGet = 1;
inline constexpr uint16_t kTxnKvReadScan = 2;
// Raw bytes of the replica's data region (control block, log, database):
// what a front end recovering a chain across processes reads of each member
// (TxnClient::recover with a remote TxnRecoverySource).
inline constexpr uint16_t kTxnKvReadRegion = 3;
inline constexpr size_t kTxnRegionReadRequestBytes = 16;
inline constexpr size_t kTxnRegionReplyHeaderBytes = 8;
inline constexpr size_t kTxnKvReadRequestHeaderBytes = 8;
inline constexpr size_t kTxnKvReadReplyHeaderBytes = 8;
inline constexpr size_t kTxnKvReadEntryHeaderBytes = 8;

struct TxnKvReadRequest {
  uint16_t type = kTxnKvReadGet;
  std::string_view key;  // GET: the key; SCAN: where to start (points into the parsed payload)
  uint32_t count = 0;    // SCAN: entries wanted (1..); GET: 0
  bool after = false;    // SCAN: start strictly after `key` (the next page of a scan)
};

// The answer's status byte.
enum class TxnKvReadStatus : uint8_t {
  kOk = 0,
  kNotFound = 1,    // GET of an absent key
  kInvalid = 2,     // a malformed request, or a key over key_max
  kUnreadable = 3,  // the replica's image is not a store of its options (not formatted yet, or damaged)
  kTooLarge = 4,    // one entry does not fit the reply (the server's reply size is too small)
};

struct TxnKvReadReply {
  TxnKvReadStatus status = TxnKvReadStatus::kOk;
  // SCAN: the reply was cut to fit; ask again after the last key.
  bool more = false;
  TxnKvEntries entries;  // GET found: one; SCAN: in ascending key order
};

// The request's payload (8-byte header and the key).
std::vector<uint8_t> encode_txn_kv_read(const TxnKvReadRequest& request);
// kInvalidArgument unless `payload` is exactly what encode_txn_kv_read
// makes for a request of `type` (sizes tile the payload, reserved bits 0, a
// GET has no count or flags, a SCAN a non-zero count). The key views
// `payload`, which must outlive the result.
Result<TxnKvReadRequest> parse_txn_kv_read(uint16_t type, std::span<const uint8_t> payload);

std::vector<uint8_t> encode_txn_kv_reply(const TxnKvReadReply& reply);
// kInvalidArgument unless `payload` is exactly an encoded reply (entries
// tile it, sizes inside it, reserved bits 0, a known status, entries only
// with kOk). Copies the keys and values.
Result<TxnKvReadReply> parse_txn_kv_reply(std::span<const uint8_t> payload);

// What a replica answers to a request of `type` with `payload`, from its
// own image through `reader` (under its read locks): the encoded reply, at
// most `capacity` bytes (a SCAN answers as many whole entries as fit and
// sets `more` when it cut some). Never fails: a bad request or an
// unreadable image is a status. `capacity` must hold at least the header.
std::vector<uint8_t> answer_txn_kv_read(TxnKvReplicaReader& reader, uint16_t type, std::span<const uint8_t> payload,
                                        size_t capacity);

// A region read (kTxnKvReadRegion): `length` bytes from `offset` of the
// data region. The answer may be shorter (the reply's capacity, the
// region's end); the reader pages.
struct TxnRegionReadRequest {
  uint64_t offset = 0;
  uint32_t length = 0;  // 1..
};
struct TxnRegionReadReply {
  TxnKvReadStatus status = TxnKvReadStatus::kOk;  // kOk, or kInvalid (offset past the region, length 0)
  std::vector<uint8_t> bytes;                     // kOk: 1..length bytes from offset
};

// 16 bytes: u64 offset, u32 length, u32 0.
std::vector<uint8_t> encode_txn_region_read(const TxnRegionReadRequest& request);
// kInvalidArgument unless `payload` is exactly such a request (reserved 0,
// length non-zero).
Result<TxnRegionReadRequest> parse_txn_region_read(std::span<const uint8_t> payload);
// 8-byte header (u8 status, three 0 bytes, u32 byte count), then the bytes.
std::vector<uint8_t> encode_txn_region_reply(const TxnRegionReadReply& reply);
// kInvalidArgument unless `payload` is exactly an encoded region reply
// (the count tiles it, reserved bytes 0, bytes only with kOk). Copies them.
Result<TxnRegionReadReply> parse_txn_region_reply(std::span<const uint8_t> payload);
// What a replica answers to a region read with `payload` from `region`: at
// most `capacity` bytes (which must hold the header and at least one byte).
// Never fails: a bad request, or an offset at or past the region's end, is
// kInvalid. The replica's CPU copies without locks: the front end asks only
// while its chain is paused (no write in flight).
std::vector<uint8_t> answer_txn_region_read(std::span<const uint8_t> region, std::span<const uint8_t> payload,
                                            size_t capacity);

// Bytes of a reply carrying one entry of these sizes.
size_t txn_kv_reply_bytes(size_t key_bytes, size_t value_bytes);

}  // namespace ferry::hyperloop
