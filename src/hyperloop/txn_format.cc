// The transaction log's records (docs/hyperloop-storage.md, "Transaction log"):
// encoding, the checked decoder and the recovery scan. Records come back
// from a replica's memory after a crash: the decoder trusts nothing.
#include <cstring>

#include "ferry/common/align.h"
#include "ferry/common/checksum.h"
#include "ferry/hyperloop/txn.h"
#include "le_words.h"

namespace ferry::hyperloop {

namespace {

constexpr uint32_t kRecordMagic = 0x52544C48;   // "HLTR"
constexpr uint32_t kPaddingMagic = 0x44504C48;  // "HLPD"

// Over every byte of the record but the checksum field itself.
uint64_t record_checksum(const uint8_t* record, uint32_t bytes) {
  const uint64_t head = checksum64({record, 24});
  return checksum64({record + kTxnRecordHeaderBytes, bytes - kTxnRecordHeaderBytes}, head);
}

}  // namespace

std::vector<uint8_t> encode_txn_record(uint64_t lsn, std::span<const TxnWrite> writes) {
  uint64_t body = 0;
  for (const TxnWrite& w : writes) body += kTxnEntryHeaderBytes + round_up(w.data.size(), 8);
  const uint64_t bytes = round_up(kTxnRecordHeaderBytes + body, kTxnRecordAlign);
  std::vector<uint8_t> out(bytes, 0);
  uint8_t* r = out.data();
  detail::store_le<uint32_t>(r, writes.empty() ? kPaddingMagic : kRecordMagic);
  detail::store_le<uint32_t>(r + 4, static_cast<uint32_t>(bytes));
  detail::store_le<uint64_t>(r + 8, lsn);
  detail::store_le<uint32_t>(r + 16, static_cast<uint32_t>(writes.size()));
  size_t at = kTxnRecordHeaderBytes;
  for (const TxnWrite& w : writes) {
    detail::store_le<uint64_t>(r + at, w.offset);
    detail::store_le<uint32_t>(r + at + 8, static_cast<uint32_t>(w.data.size()));
    at += kTxnEntryHeaderBytes;
    if (!w.data.empty()) std::memcpy(r + at, w.data.data(), w.data.size());
    at += round_up(w.data.size(), 8);
  }
  detail::store_le<uint64_t>(r + 24, record_checksum(r, static_cast<uint32_t>(bytes)));
  return out;
}

std::vector<uint8_t> encode_txn_padding(uint64_t lsn, uint32_t bytes) {
  std::vector<uint8_t> out(bytes, 0);
  uint8_t* r = out.data();
  detail::store_le<uint32_t>(r, kPaddingMagic);
  detail::store_le<uint32_t>(r + 4, bytes);
  detail::store_le<uint64_t>(r + 8, lsn);
  detail::store_le<uint64_t>(r + 24, record_checksum(r, bytes));
  return out;
}

Result<TxnRecord> decode_txn_record(std::span<const uint8_t> ring, uint64_t lsn, uint64_t db_bytes) {
  if (ring.empty() || ring.size() % kTxnRecordAlign != 0) return invalid_argument("txn: a ring of 64-byte lines");
  const uint64_t pos = lsn % ring.size();
  if (pos % kTxnRecordAlign != 0) return not_found("txn: an LSN off a 64-byte line");
  const uint8_t* r = ring.data() + pos;
  const uint64_t room = ring.size() - pos;
  const auto magic = detail::load_le<uint32_t>(r);
  const auto bytes = detail::load_le<uint32_t>(r + 4);
  if ((magic != kRecordMagic && magic != kPaddingMagic) || bytes == 0 || bytes % kTxnRecordAlign != 0 ||
      bytes > room || detail::load_le<uint64_t>(r + 8) != lsn || detail::load_le<uint32_t>(r + 20) != 0) {
    return not_found("txn: no record of LSN " + std::to_string(lsn));
  }
  if (detail::load_le<uint64_t>(r + 24) != record_checksum(r, bytes)) {
    return not_found("txn: the record of LSN " + std::to_string(lsn) + " fails its checksum");
  }
  TxnRecord out;
  out.lsn = lsn;
  out.bytes = bytes;
  out.padding = magic == kPaddingMagic;
  const auto entries = detail::load_le<uint32_t>(r + 16);
  if (out.padding) {
    if (entries != 0) return not_found("txn: a padding record with entries");
    return out;
  }
  if (entries == 0) return not_found("txn: a record without entries");
  uint64_t at = kTxnRecordHeaderBytes;
  for (uint32_t e = 0; e < entries; ++e) {
    if (bytes - at < kTxnEntryHeaderBytes) return not_found("txn: an entry past the record's end");
    TxnRecord::Entry entry;
    entry.offset = detail::load_le<uint64_t>(r + at);
    entry.len = detail::load_le<uint32_t>(r + at + 8);
    if (detail::load_le<uint32_t>(r + at + 12) != 0) return not_found("txn: an entry's reserved field is set");
    at += kTxnEntryHeaderBytes;
    const uint64_t padded = round_up(entry.len, 8);
    if (entry.len == 0 || padded > bytes - at) return not_found("txn: an entry's data past the record's end");
    if (entry.offset > db_bytes || entry.len > db_bytes - entry.offset) {
      return not_found("txn: an entry outside the database");
    }
    entry.data_at = pos + at;
    at += padded;
    out.entries.push_back(entry);
  }
  if (round_up(at, kTxnRecordAlign) != bytes) return not_found("txn: a record longer than its entries");
  return out;
}

std::vector<TxnRecord> scan_log(std::span<const uint8_t> ring, uint64_t head, uint64_t db_bytes) {
  std::vector<TxnRecord> out;
  uint64_t lsn = head;
  // At most one lap: a ring holds no more than its size of records.
  while (lsn - head < ring.size()) {
    auto r = decode_txn_record(ring, lsn, db_bytes);
    if (!r.ok()) break;
    lsn += r->bytes;
    out.push_back(std::move(r).value());
  }
  return out;
}

}  // namespace ferry::hyperloop
