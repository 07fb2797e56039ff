// libFuzzer target: HyperLoop's transaction log (txn.h): the record decoder,
// the recovery scan and a replica's replay, which read whatever a crashed
// replica's region holds.
//
// Input: [mode] [log lines] bytes...
//  - mode bit 0 clear: a region whose control block is a valid layout (the
//    ring of `log lines` x 64 bytes, a 4 KiB database) and whose log ring and
//    database are the bytes: replay_txn_log must stay inside the region,
//    move the head forward by at most one lap over whole records, and a
//    second replay must find nothing more. With mode bit 1 set too, the
//    replayed database is then read as a TxnKv image (txn_kv.h) by a
//    replica's reader: its scans must stay inside the image (an
//    allocation of exactly the image's size), end, and answer sorted, in
//    range, or kDataLoss (kInvalidArgument: a header of other options).
//    The same image answers the store's read service (txn_kv_wire.h):
//    SCANs built from the bytes, and the bytes themselves as a request
//    (GETs only where refused before the image: see read_as_store); every
//    answer fits its capacity and parses as a reply.
//  - mode bit 2 set (any mode): the bytes are also parsed as a read
//    service request of each type and as a reply (what a replica and a
//    client read from the network): whatever is accepted must encode back
//    to exactly the same bytes, and a reply's entries must fit the bytes.
//    Likewise a region read (kTxnKvReadRegion) and its reply; its answer
//    over a 64-byte region stays inside the region and fits its capacity.
//  - mode bit 0 set: the bytes steer valid records (offsets, lengths,
//    contents) written back to back into the ring, which is then corrupted
//    at a fuzzer-chosen bit: every record the scan accepts must be
//    byte-identical to one that was written there (a corrupted record is
//    never accepted).
// The region is a heap allocation of exactly its size, so ASan reports any
// access past it.
//
// Run: ./txn_log_fuzz -max_total_time=60 ../tests/fuzz/corpus/txn_log_fuzz
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ferry/hyperloop/txn.h"
#include "ferry/hyperloop/txn_kv.h"
#include "ferry/hyperloop/txn_kv_wire.h"

namespace {

using namespace ferry::hyperloop;

#define FUZZ_CHECK(cond)            \
  do {                              \
    if (!(cond)) __builtin_trap();  \
  } while (0)

constexpr uint64_t kDbBytes = 4096;
constexpr uint64_t kMagic = 0x314E5854504C4846ULL;  // the control block's (txn.cc)

void put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// A small store's image: fits the 4 KiB database.
TxnKvOptions kv_options() {
  TxnKvOptions o;
  o.slots = 16;
  o.key_max = 16;
  o.value_max = 16;
  o.locks = 2;
  return o;
}

void read_as_store(std::span<const uint8_t> db, const uint8_t* data, size_t size) {
  const TxnKvOptions o = kv_options();
  const uint64_t image_bytes = txn_kv_db_bytes(o);
  FUZZ_CHECK(image_bytes <= db.size());
  std::unique_ptr<uint8_t[]> image(new uint8_t[image_bytes]);
  std::memcpy(image.get(), db.data(), image_bytes);
  uint64_t lock_words[8] = {};
  TxnKvReplicaReader reader({image.get(), image_bytes},
                            ReplicaLocks(reinterpret_cast<uint8_t*>(lock_words), sizeof lock_words), o);
  const std::string start(reinterpret_cast<const char*>(data), std::min<size_t>(size, 3));
  for (const uint32_t count : {1u, 5u, 1000u}) {
    auto got = reader.scan(start, count);
    if (!got.ok()) {
      // A malformed image, or a header of other options.
      FUZZ_CHECK(got.status().code() == ferry::Code::kDataLoss ||
                 got.status().code() == ferry::Code::kInvalidArgument);
      continue;
    }
    FUZZ_CHECK(got->size() <= count && got->size() <= o.slots);
    for (size_t i = 0; i < got->size(); ++i) {
      const auto& [k, v] = (*got)[i];
      FUZZ_CHECK(k.size() <= o.key_max && v.size() <= o.value_max && k >= start);
      if (i > 0) FUZZ_CHECK((*got)[i - 1].first < k);
    }
  }
  // The read service over the same image, with a small reply so scans cut.
  // A GET that reaches the image probes slots, and a slot whose checksum
  // fails is one a writer is changing: the GET waits for it, forever on a
  // damaged image. So only GETs refused before the image run here.
  TxnKvReadRequest page;
  page.type = kTxnKvReadScan;
  page.key = start;
  page.count = size > 3 ? 1 + data[3] % 20 : 20;
  page.after = size > 4 && (data[4] & 1) != 0;
  const std::vector<uint8_t> built = encode_txn_kv_read(page);
  const std::span<const uint8_t> asked[] = {built, {data, size}};
  for (const size_t capacity : {size_t{48}, size_t{4096}}) {
    for (const uint16_t type : {kTxnKvReadGet, kTxnKvReadScan}) {
      for (const std::span<const uint8_t> payload : asked) {
        if (type == kTxnKvReadGet && parse_txn_kv_read(type, payload).ok()) continue;
        const std::vector<uint8_t> answer = answer_txn_kv_read(reader, type, payload, capacity);
        FUZZ_CHECK(answer.size() <= capacity);
        auto reply = parse_txn_kv_reply(answer);
        FUZZ_CHECK(reply.ok());
        FUZZ_CHECK(type == kTxnKvReadScan || reply->entries.empty());
        for (size_t i = 1; i < reply->entries.size(); ++i) {
          FUZZ_CHECK(reply->entries[i - 1].first < reply->entries[i].first);
        }
      }
    }
  }
  for (uint32_t l = 0; l < 8; ++l) FUZZ_CHECK(lock_words[l] == 0);  // every read lock released
}

// The read service's parsers over arbitrary bytes (a copy of exactly their
// size: ASan reports any read past it).
void parse_read_wire(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size == 0 ? 1 : size]);
  if (size != 0) std::memcpy(copy.get(), data, size);
  const std::span<const uint8_t> payload(copy.get(), size);
  for (const uint16_t type : {kTxnKvReadGet, kTxnKvReadScan, kTxnKvReadRegion, uint16_t{4}}) {
    auto r = parse_txn_kv_read(type, payload);
    if (!r.ok()) continue;
    FUZZ_CHECK(type == kTxnKvReadGet || type == kTxnKvReadScan);
    const auto key = reinterpret_cast<const uint8_t*>(r->key.data());
    FUZZ_CHECK(key == copy.get() + kTxnKvReadRequestHeaderBytes && key + r->key.size() == copy.get() + size);
    const std::vector<uint8_t> again = encode_txn_kv_read(r.value());
    FUZZ_CHECK(again.size() == size && std::memcmp(again.data(), copy.get(), size) == 0);
  }
  // A region read: accepted requests encode back; the answer over a small
  // region stays inside it, fits its capacity and parses.
  if (auto r = parse_txn_region_read(payload); r.ok()) {
    FUZZ_CHECK(r->length != 0);
    const std::vector<uint8_t> again = encode_txn_region_read(r.value());
    FUZZ_CHECK(again.size() == size && std::memcmp(again.data(), copy.get(), size) == 0);
  }
  {
    std::unique_ptr<uint8_t[]> region(new uint8_t[64]);
    for (size_t i = 0; i < 64; ++i) region[i] = static_cast<uint8_t>(i);
    const std::vector<uint8_t> answer = answer_txn_region_read({region.get(), 64}, payload, 40);
    FUZZ_CHECK(answer.size() <= 40);
    auto parsed = parse_txn_region_reply(answer);
    FUZZ_CHECK(parsed.ok());
    if (parsed->status == TxnKvReadStatus::kOk) {
      const auto r = parse_txn_region_read(payload);
      FUZZ_CHECK(r.ok() && !parsed->bytes.empty() && r->offset + parsed->bytes.size() <= 64);
      FUZZ_CHECK(std::memcmp(parsed->bytes.data(), region.get() + r->offset, parsed->bytes.size()) == 0);
    }
  }
  if (auto region_reply = parse_txn_region_reply(payload); region_reply.ok()) {
    const std::vector<uint8_t> again = encode_txn_region_reply(region_reply.value());
    FUZZ_CHECK(again.size() == size && std::memcmp(again.data(), copy.get(), size) == 0);
  }
  auto reply = parse_txn_kv_reply(payload);
  if (!reply.ok()) return;
  FUZZ_CHECK(reply->entries.size() <= size / kTxnKvReadEntryHeaderBytes);
  const std::vector<uint8_t> again = encode_txn_kv_reply(reply.value());
  FUZZ_CHECK(again.size() == size && std::memcmp(again.data(), copy.get(), size) == 0);
}

void replay_region(const uint8_t* data, size_t size, uint64_t log_bytes, bool as_store) {
  const size_t region_bytes = kTxnControlBytes + log_bytes + kDbBytes;
  std::unique_ptr<uint8_t[]> region(new uint8_t[region_bytes]);
  std::memset(region.get(), 0, region_bytes);
  put64(region.get(), kMagic);
  put64(region.get() + 8, log_bytes);
  put64(region.get() + 16, kDbBytes);
  const uint64_t head = size >= 8 ? [&] {
    uint64_t h;
    std::memcpy(&h, data, 8);
    return h / kTxnRecordAlign * kTxnRecordAlign % (1u << 20);
  }() : 0;
  put64(region.get() + kTxnHeadOffset, head);
  const size_t body = std::min(size > 8 ? size - 8 : 0, region_bytes - kTxnControlBytes);
  if (body > 0) std::memcpy(region.get() + kTxnControlBytes, data + 8, body);
  const std::span<uint8_t> span(region.get(), region_bytes);
  auto first = replay_txn_log(span);
  FUZZ_CHECK(first.ok());
  FUZZ_CHECK(first->head_before == head);
  FUZZ_CHECK(first->head_after >= first->head_before);
  FUZZ_CHECK(first->head_after - first->head_before <= log_bytes);
  FUZZ_CHECK((first->head_after - first->head_before) % kTxnRecordAlign == 0);
  auto second = replay_txn_log(span);
  FUZZ_CHECK(second.ok());
  FUZZ_CHECK(second->records == 0 && second->head_after == first->head_after);
  if (as_store) read_as_store(span.subspan(kTxnControlBytes + log_bytes), data, size);
}

void corrupt_built_ring(const uint8_t* data, size_t size, uint64_t log_bytes) {
  std::vector<uint8_t> ring(log_bytes, 0);
  std::map<uint64_t, std::vector<uint8_t>> written;  // position -> record bytes
  size_t at = 0;
  uint64_t lsn = log_bytes * 3;  // a later lap: stale-LSN checks matter
  while (at + 4 <= size) {
    const uint32_t n = 1 + data[at] % 3;
    std::vector<std::vector<uint8_t>> values;
    std::vector<TxnWrite> writes;
    for (uint32_t i = 0; i < n && at + 4 <= size; ++i) {
      const uint32_t len = 1 + data[at + 1] % 120;
      const uint64_t off = (static_cast<uint64_t>(data[at + 2]) << 4) % (kDbBytes - len);
      values.emplace_back(len, data[at + 3]);
      writes.push_back({off, {}});
      at += 4;
    }
    for (size_t i = 0; i < writes.size(); ++i) writes[i].data = values[i];
    const std::vector<uint8_t> rec = encode_txn_record(lsn, writes);
    const uint64_t pos = lsn % log_bytes;
    if (pos + rec.size() > log_bytes) break;
    std::memcpy(ring.data() + pos, rec.data(), rec.size());
    written[pos] = rec;
    lsn += rec.size();
  }
  if (size >= 2) {
    const uint64_t bit = (static_cast<uint64_t>(data[size - 1]) << 8 | data[size - 2]) % (log_bytes * 8);
    ring[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  for (const TxnRecord& r : scan_log(ring, log_bytes * 3, kDbBytes)) {
    const uint64_t pos = r.lsn % log_bytes;
    auto it = written.find(pos);
    FUZZ_CHECK(it != written.end());
    FUZZ_CHECK(it->second.size() == r.bytes);
    FUZZ_CHECK(std::memcmp(it->second.data(), ring.data() + pos, r.bytes) == 0);
    for (const auto& e : r.entries) {
      FUZZ_CHECK(e.data_at + e.len <= pos + r.bytes);
      FUZZ_CHECK(e.offset + e.len <= kDbBytes);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const uint64_t log_bytes = (1 + data[1] % 64) * kTxnRecordAlign;
  if ((mode & 4) != 0) parse_read_wire(data + 2, size - 2);
  if ((mode & 1) == 0) {
    replay_region(data + 2, size - 2, log_bytes, (mode & 2) != 0);
  } else {
    corrupt_built_ring(data + 2, size - 2, log_bytes);
  }
  return 0;
}
