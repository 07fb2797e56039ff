// The Tailwind log format (format.h; ATC'18 §3.1 Figure 3, §3.3.1
// Algorithm 1 and Figure 6) against an encoder written here from the
// specification alone: SegmentWriter's bytes equal it byte for byte, a chain
// CRC of 0 is stored as 1; scan_buffer over hand-built buffers (end of data,
// end of buffer, wrong checksums, bad headers, truncation, bad bodies); torn
// appends cut at every byte and with 64-byte DMA holes; every bit of a
// closed segment flipped (verify_closed must say kDataLoss); for_each_entry's
// decoding; random segments with random corruption.
//
// Randomized tests print their seed; FERRY_SEED=<n> reruns one.
#include "ferry/tailwind/format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/common/checksum.h"
#include "ferry/common/status.h"
#include "test_seed.h"

namespace ferry::tailwind {
// A named namespace around the file-local one: the test executable is a
// unity build, and sibling files have their own helpers.
namespace format_test {
namespace {

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------
// The format restated from the specification (docs and paper), not taken
// from format.h: FormatPinned checks that format.h agrees.

constexpr size_t kHeaderSize = 16;         // u8 type, u8 flags, u16 key, u32 body, u32 value, u32 body CRC
constexpr size_t kChecksumSize = 8;        // u8 type 4, 3 zero bytes, u32 CRC
constexpr size_t kSegmentBodySize = 24;    // u64 log, u64 segment, u32 segment bytes, u32 0
constexpr size_t kObjectFixedSize = 16;    // u64 table, u64 version
constexpr size_t kTombstoneFixedSize = 24; // u64 table, u64 version, u64 segment
constexpr uint8_t kTypeSegmentHeader = 1;
constexpr uint8_t kTypeObject = 2;
constexpr uint8_t kTypeTombstone = 3;
constexpr uint8_t kTypeChecksum = 4;

void put_le(Bytes& b, size_t at, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) b.at(at + i) = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const Bytes& b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{b.at(at + i)} << (8 * i);
  return v;
}
Bytes bytes_of(std::string_view s) { return Bytes(s.begin(), s.end()); }
Bytes slice(const Bytes& b, size_t from, size_t n) { return Bytes(b.begin() + from, b.begin() + from + n); }
uint32_t crc_of(const Bytes& b) { return crc32c(0, b.data(), b.size()); }
uint32_t stored_form(uint32_t crc) { return crc == 0 ? 1 : crc; }

// A log-entry header's fields, written as given (a test may make them wrong).
struct Header {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint16_t key_bytes = 0;
  uint32_t body_bytes = 0;
  uint32_t value_bytes = 0;
  uint32_t body_crc = 0;
};

// The right header for `body`.
Header header_for(uint8_t type, size_t key_bytes, size_t value_bytes, const Bytes& body) {
  Header h;
  h.type = type;
  h.key_bytes = static_cast<uint16_t>(key_bytes);
  h.body_bytes = static_cast<uint32_t>(body.size());
  h.value_bytes = static_cast<uint32_t>(value_bytes);
  h.body_crc = crc_of(body);
  return h;
}

Bytes segment_header_body(uint64_t log_id, uint64_t segment_id, size_t capacity) {
  Bytes body(kSegmentBodySize, 0);
  put_le(body, 0, log_id, 8);
  put_le(body, 8, segment_id, 8);
  put_le(body, 16, capacity, 4);
  return body;
}
Bytes object_body(uint64_t table_id, uint64_t version, const Bytes& key, const Bytes& value) {
  Bytes body(kObjectFixedSize, 0);
  put_le(body, 0, table_id, 8);
  put_le(body, 8, version, 8);
  body.insert(body.end(), key.begin(), key.end());
  body.insert(body.end(), value.begin(), value.end());
  return body;
}
Bytes tombstone_body(uint64_t table_id, uint64_t version, uint64_t segment_id, const Bytes& key) {
  Bytes body(kTombstoneFixedSize, 0);
  put_le(body, 0, table_id, 8);
  put_le(body, 8, version, 8);
  put_le(body, 16, segment_id, 8);
  body.insert(body.end(), key.begin(), key.end());
  return body;
}

// An object or tombstone to append.
struct Op {
  uint8_t type = kTypeObject;
  uint64_t table_id = 0;
  uint64_t version = 0;
  uint64_t segment_id = 0;  // tombstones
  Bytes key;
  Bytes value;  // objects
};
Op object_op(uint64_t table_id, uint64_t version, std::string_view key, std::string_view value) {
  return Op{kTypeObject, table_id, version, 0, bytes_of(key), bytes_of(value)};
}
Op tombstone_op(uint64_t table_id, uint64_t version, uint64_t segment_id, std::string_view key) {
  return Op{kTypeTombstone, table_id, version, segment_id, bytes_of(key), {}};
}
size_t op_bytes(const Op& op) {
  return op.type == kTypeObject ? kHeaderSize + kObjectFixedSize + op.key.size() + op.value.size() + kChecksumSize
                                : kHeaderSize + kTombstoneFixedSize + op.key.size() + kChecksumSize;
}

// Where one append (a log entry and the checksum entry after it) lies.
struct Placed {
  uint8_t type = 0;     // of its log entry
  size_t entry = 0;     // its log-entry header
  size_t checksum = 0;  // its checksum entry
  size_t end = 0;       // just past the checksum entry
  uint32_t stored = 0;  // the CRC its checksum entry holds
};

// The independent encoder: a zeroed buffer of `capacity` bytes filled from
// offset 0.
class Hand {
 public:
  explicit Hand(size_t capacity) : bytes_(capacity, 0) {}

  const Bytes& bytes() const { return bytes_; }
  size_t offset() const { return offset_; }
  uint32_t chain() const { return chain_; }  // CRC32C over every log-entry header so far
  const std::vector<Placed>& appends() const { return appends_; }
  bool fits(size_t n) const { return n <= bytes_.size() - offset_; }

  // A log entry: `h` as given, then `body`; the chain takes its header.
  void entry(const Header& h, const Bytes& body) {
    const size_t at = offset_;
    put_le(bytes_, at, h.type, 1);
    put_le(bytes_, at + 1, h.flags, 1);
    put_le(bytes_, at + 2, h.key_bytes, 2);
    put_le(bytes_, at + 4, h.body_bytes, 4);
    put_le(bytes_, at + 8, h.value_bytes, 4);
    put_le(bytes_, at + 12, h.body_crc, 4);
    for (size_t i = 0; i < body.size(); ++i) bytes_.at(at + kHeaderSize + i) = body[i];
    chain_ = crc32c(chain_, bytes_.data() + at, kHeaderSize);
    offset_ = at + kHeaderSize + body.size();
    last_entry_ = at;
    last_type_ = h.type;
  }
  // A checksum entry holding `crc` (and `reserved` in its 3 reserved bytes).
  void checksum_entry(uint32_t crc, uint32_t reserved = 0) {
    put_le(bytes_, offset_, kTypeChecksum, 1);
    put_le(bytes_, offset_ + 1, reserved, 3);
    put_le(bytes_, offset_ + 4, crc, 4);
    appends_.push_back({last_type_, last_entry_, offset_, offset_ + kChecksumSize, crc});
    offset_ += kChecksumSize;
  }
  // The right checksum entry.
  void seal() { checksum_entry(stored_form(chain_)); }

  void segment_header(uint64_t log_id, uint64_t segment_id) {
    const Bytes body = segment_header_body(log_id, segment_id, bytes_.size());
    entry(header_for(kTypeSegmentHeader, 0, 0, body), body);
    seal();
  }
  void append(const Op& op) {
    if (op.type == kTypeObject) {
      const Bytes body = object_body(op.table_id, op.version, op.key, op.value);
      entry(header_for(kTypeObject, op.key.size(), op.value.size(), body), body);
    } else {
      const Bytes body = tombstone_body(op.table_id, op.version, op.segment_id, op.key);
      entry(header_for(kTypeTombstone, op.key.size(), 0, body), body);
    }
    seal();
  }

 private:
  Bytes bytes_;
  size_t offset_ = 0;
  uint32_t chain_ = 0;
  size_t last_entry_ = 0;
  uint8_t last_type_ = 0;
  std::vector<Placed> appends_;
};

Result<SegmentWriter::Appended> write_op(SegmentWriter& w, const Op& op) {
  if (op.type == kTypeObject) return w.append_object(op.table_id, op.version, op.key, op.value);
  return w.append_tombstone(op.table_id, op.version, op.segment_id, op.key);
}

// A segment built by both encoders.
struct Built {
  Hand hand;
  Bytes memory;  // what SegmentWriter wrote
  size_t offset = 0;
  uint32_t checksum = 0;
  std::vector<SegmentWriter::Appended> appended;  // after the segment header
};

// Segment `segment_id` of log `log_id` holding `ops` (which must fit).
Built build(size_t capacity, uint64_t log_id, uint64_t segment_id, const std::vector<Op>& ops) {
  Built b{Hand(capacity), Bytes(capacity, 0), 0, 0, {}};
  b.hand.segment_header(log_id, segment_id);
  Result<SegmentWriter> w = SegmentWriter::start(b.memory, log_id, segment_id);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  if (!w.ok()) return b;
  for (const Op& op : ops) {
    EXPECT_TRUE(b.hand.fits(op_bytes(op)));
    b.hand.append(op);
    Result<SegmentWriter::Appended> a = write_op(w.value(), op);
    EXPECT_TRUE(a.ok()) << a.status().to_string();
    if (!a.ok()) return b;
    b.appended.push_back(a.value());
  }
  b.offset = w->offset();
  b.checksum = w->checksum();
  return b;
}

// The append holding byte `pos` of `hand`'s buffer (appends().size(): past the end).
size_t append_at(const Hand& hand, size_t pos) {
  size_t k = 0;
  while (k < hand.appends().size() && pos >= hand.appends()[k].end) ++k;
  return k;
}

// The field byte `pos` of `hand`'s buffer belongs to.
std::string field_at(const Hand& hand, size_t pos) {
  const size_t k = append_at(hand, pos);
  if (k == hand.appends().size()) return "after end";
  const Placed& p = hand.appends()[k];
  if (pos >= p.checksum) {
    const size_t i = pos - p.checksum;
    return i == 0 ? "checksum.type" : i < 4 ? "checksum.reserved" : "checksum.crc";
  }
  const size_t i = pos - p.entry;
  if (i == 0) return "type";
  if (i == 1) return "flags";
  if (i < 4) return "key_bytes";
  if (i < 8) return "body_bytes";
  if (i < 12) return "value_bytes";
  if (i < 16) return "body_crc";
  return "body";
}

// What scan_buffer must report.
struct Expected {
  size_t valid_bytes = 0;
  uint32_t checksum = 0;
  uint64_t entries = 0;
  uint64_t objects = 0;
  uint64_t tombstones = 0;
  ScanStop stop = ScanStop::kEndOfData;
  size_t stop_offset = 0;
  bool zero_after_valid = true;
};

// A scan of `hand`'s buffer that found its first `valid` appends valid and
// stopped at `stop_offset` for `stop`.
Expected expect_after(const Hand& hand, size_t valid, ScanStop stop, size_t stop_offset, bool zero_after_valid) {
  Expected e;
  if (valid > 0) {
    e.valid_bytes = hand.appends()[valid - 1].end;
    e.checksum = hand.appends()[valid - 1].stored;
  }
  e.entries = valid;
  for (size_t k = 0; k < valid; ++k) {
    e.objects += hand.appends()[k].type == kTypeObject;
    e.tombstones += hand.appends()[k].type == kTypeTombstone;
  }
  e.stop = stop;
  e.stop_offset = stop_offset;
  e.zero_after_valid = zero_after_valid;
  return e;
}

void expect_scan(const ScanResult& r, const Expected& e) {
  EXPECT_EQ(r.valid_bytes, e.valid_bytes);
  EXPECT_EQ(r.checksum, e.checksum);
  EXPECT_EQ(r.entries, e.entries);
  EXPECT_EQ(r.objects, e.objects);
  EXPECT_EQ(r.tombstones, e.tombstones);
  EXPECT_EQ(scan_stop_name(r.stop), scan_stop_name(e.stop));
  EXPECT_EQ(r.stop_offset, e.stop_offset);
  EXPECT_EQ(r.zero_after_valid, e.zero_after_valid);
}

// The u32 x (little-endian) for which crc32c(seed, prefix || x) == target.
// A CRC is affine over GF(2) in its message bits and its last 32 bits
// determine it: solve the 32x32 system by Gaussian elimination.
uint32_t force_crc(uint32_t seed, const Bytes& prefix, uint32_t target) {
  const uint32_t start = crc32c(seed, prefix.data(), prefix.size());
  auto crc_with = [start](uint32_t x) {
    uint8_t tail[4];
    for (size_t i = 0; i < 4; ++i) tail[i] = static_cast<uint8_t>(x >> (8 * i));
    return crc32c(start, tail, 4);
  };
  const uint32_t base = crc_with(0);
  uint32_t pivot[32] = {};  // pivot[b]: a sum of columns whose highest set bit is b
  uint32_t combo[32] = {};  // the x bits that sum is made of
  for (int i = 0; i < 32; ++i) {
    uint32_t v = crc_with(uint32_t{1} << i) ^ base;
    uint32_t m = uint32_t{1} << i;
    for (int bit = 31; bit >= 0 && v != 0; --bit) {
      if (((v >> bit) & 1) == 0) continue;
      if (pivot[bit] == 0) {
        pivot[bit] = v;
        combo[bit] = m;
        break;
      }
      v ^= pivot[bit];
      m ^= combo[bit];
    }
  }
  uint32_t want = target ^ base;
  uint32_t x = 0;
  for (int bit = 31; bit >= 0; --bit) {
    if (((want >> bit) & 1) != 0 && pivot[bit] != 0) {
      want ^= pivot[bit];
      x ^= combo[bit];
    }
  }
  return x;
}

// An object that, appended where the chain is `chain_before`, makes the
// chain 0: its body CRC and the last 4 bytes of its value are solved for.
Op zero_chain_object(uint32_t chain_before) {
  Op op = object_op(5, 77, "zero", "chain-0:????");
  Bytes prefix(12, 0);  // the header without its body_crc
  put_le(prefix, 0, kTypeObject, 1);
  put_le(prefix, 2, op.key.size(), 2);
  put_le(prefix, 4, kObjectFixedSize + op.key.size() + op.value.size(), 4);
  put_le(prefix, 8, op.value.size(), 4);
  const uint32_t body_crc = force_crc(chain_before, prefix, 0);
  Bytes body = object_body(op.table_id, op.version, op.key, op.value);
  body.resize(body.size() - 4);
  put_le(op.value, op.value.size() - 4, force_crc(0, body, body_crc), 4);
  return op;
}

// A fresh seed each run unless FERRY_SEED names one; printed, and recorded
// in the test's XML report.
uint64_t test_seed() {
  std::random_device rd;
  const uint64_t seed = ferry::testing::test_seed((uint64_t{rd()} << 32) ^ rd());
  ::testing::Test::RecordProperty("FERRY_SEED", std::to_string(seed));
  return seed;
}

// ---------------------------------------------------------------------------
// FormatPinned: the bytes, independently of SegmentWriter.

TEST(FormatPinned, ConstantsAndSizes) {
  // The primitive the hand encoder uses is CRC32C (Castagnoli) and chains.
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c(crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);

  EXPECT_EQ(kEntryHeaderBytes, kHeaderSize);
  EXPECT_EQ(sizeof(EntryHeader), kHeaderSize);
  EXPECT_EQ(kChecksumEntryBytes, kChecksumSize);
  EXPECT_EQ(kSegmentHeaderBodyBytes, kSegmentBodySize);
  EXPECT_EQ(kObjectFixedBytes, kObjectFixedSize);
  EXPECT_EQ(kTombstoneFixedBytes, kTombstoneFixedSize);
  EXPECT_EQ(kMaxKeyBytes, 65535u);
  EXPECT_EQ(kSegmentHeaderAppendBytes, 48u);
  EXPECT_EQ(static_cast<uint8_t>(EntryType::kInvalid), 0);
  EXPECT_EQ(static_cast<uint8_t>(EntryType::kSegmentHeader), kTypeSegmentHeader);
  EXPECT_EQ(static_cast<uint8_t>(EntryType::kObject), kTypeObject);
  EXPECT_EQ(static_cast<uint8_t>(EntryType::kTombstone), kTypeTombstone);
  EXPECT_EQ(static_cast<uint8_t>(EntryType::kChecksum), kTypeChecksum);

  EXPECT_EQ(object_append_bytes(5, 3), 48u);
  EXPECT_EQ(object_append_bytes(1, 0), 41u);
  EXPECT_EQ(object_append_bytes(65535, 1000), 16u + 16 + 65535 + 1000 + 8);
  EXPECT_EQ(tombstone_append_bytes(5), 53u);
  EXPECT_EQ(tombstone_append_bytes(1), 49u);

  EXPECT_EQ(stored_checksum(0), 1u);
  EXPECT_EQ(stored_checksum(1), 1u);
  EXPECT_EQ(stored_checksum(2), 2u);
  EXPECT_EQ(stored_checksum(0xFFFFFFFFu), 0xFFFFFFFFu);
  EXPECT_EQ(stored_checksum(0xE3069283u), 0xE3069283u);
}

TEST(FormatPinned, SegmentMatchesHandEncoder) {
  const Built b = build(4096, 7, 3,
                        {object_op(1, 1, "alpha", "one"), object_op(2, 5, "k", ""), tombstone_op(1, 1, 2, "alpha")});
  const Bytes& m = b.memory;
  EXPECT_EQ(m, b.hand.bytes());  // all 4096 bytes, the zeros after the end too

  // Where each append landed: segment header [0,48), then 48 + 41 + 53 bytes.
  ASSERT_EQ(b.appended.size(), 3u);
  const std::vector<std::pair<size_t, size_t>> placed = {{48, 48}, {96, 41}, {137, 53}};
  for (size_t i = 0; i < placed.size(); ++i) {
    EXPECT_EQ(b.appended[i].offset, placed[i].first) << i;
    EXPECT_EQ(b.appended[i].bytes, placed[i].second) << i;
  }
  EXPECT_EQ(b.offset, 190u);

  // The segment header entry, literally.
  EXPECT_EQ(slice(m, 0, 12), (Bytes{1, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(slice(m, 16, 24), (Bytes{7, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x10, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(get_le(m, 12, 4), crc_of(slice(m, 16, 24)));
  // The first object: header, table, version, key, value.
  EXPECT_EQ(slice(m, 48, 12), (Bytes{2, 0, 5, 0, 24, 0, 0, 0, 3, 0, 0, 0}));
  EXPECT_EQ(get_le(m, 60, 4), crc_of(slice(m, 64, 24)));
  EXPECT_EQ(get_le(m, 64, 8), 1u);
  EXPECT_EQ(get_le(m, 72, 8), 1u);
  EXPECT_EQ(slice(m, 80, 8), bytes_of("alphaone"));
  // The second object: a 1-byte key, no value.
  EXPECT_EQ(slice(m, 96, 12), (Bytes{2, 0, 1, 0, 17, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(get_le(m, 112, 8), 2u);
  EXPECT_EQ(get_le(m, 120, 8), 5u);
  EXPECT_EQ(m[128], 'k');
  // The tombstone: table, version, segment of the object, key.
  EXPECT_EQ(slice(m, 137, 12), (Bytes{3, 0, 5, 0, 29, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(get_le(m, 149, 4), crc_of(slice(m, 153, 29)));
  EXPECT_EQ(get_le(m, 153, 8), 1u);
  EXPECT_EQ(get_le(m, 161, 8), 1u);
  EXPECT_EQ(get_le(m, 169, 8), 2u);
  EXPECT_EQ(slice(m, 177, 5), bytes_of("alpha"));

  // A checksum entry after each: type 4, three zero bytes, CRC32C chained
  // over the 16-byte headers only (never 0).
  const size_t headers[] = {0, 48, 96, 137};
  const size_t checksums[] = {40, 88, 129, 182};
  Bytes chained;
  for (size_t k = 0; k < 4; ++k) {
    const Bytes h = slice(m, headers[k], 16);
    chained.insert(chained.end(), h.begin(), h.end());
    EXPECT_EQ(slice(m, checksums[k], 4), (Bytes{4, 0, 0, 0})) << k;
    EXPECT_EQ(get_le(m, checksums[k] + 4, 4), stored_form(crc_of(chained))) << k;
    EXPECT_NE(get_le(m, checksums[k] + 4, 4), 0u) << k;
    if (k > 0) {
      EXPECT_EQ(b.appended[k - 1].checksum, get_le(m, checksums[k] + 4, 4)) << k;
    }
  }
  EXPECT_EQ(b.checksum, get_le(m, 186, 4));
  EXPECT_TRUE(std::all_of(m.begin() + 190, m.end(), [](uint8_t x) { return x == 0; }));
}

// A chain that comes to 0 is written as 1, scans as valid with 1, and the
// chain goes on from 0 (not from the stored 1). A checksum entry holding 0
// is never valid.
TEST(FormatPinned, ZeroChainIsStoredAsOne) {
  Hand probe(4096);
  probe.segment_header(7, 3);
  const Op zero = zero_chain_object(probe.chain());
  const Built b = build(4096, 7, 3, {zero, object_op(1, 2, "after", "zero")});
  ASSERT_EQ(b.hand.appends().size(), 3u);
  ASSERT_EQ(b.hand.appends()[1].stored, 1u) << "the test's CRC solver failed";
  EXPECT_EQ(b.memory, b.hand.bytes());
  ASSERT_EQ(b.appended.size(), 2u);
  EXPECT_EQ(b.appended[0].checksum, 1u);
  const size_t c = b.hand.appends()[1].checksum;
  EXPECT_EQ(get_le(b.memory, c + 4, 4), 1u);

  // Only the zero-chain append: its checksum is the segment's.
  const Bytes one = slice(b.memory, 0, b.hand.appends()[1].end);
  ScanResult r = scan_buffer(one);
  expect_scan(r, expect_after(b.hand, 2, ScanStop::kEndOfBuffer, one.size(), true));
  EXPECT_EQ(r.checksum, 1u);
  expect_scan(scan_buffer(b.memory), expect_after(b.hand, 3, ScanStop::kEndOfData, b.offset, true));
  EXPECT_TRUE(verify_closed(b.memory, 7, 3, b.offset, b.checksum).ok());

  // The chain's 0 written as is: the scan stops there.
  Bytes m = b.memory;
  put_le(m, c + 4, 0, 4);
  expect_scan(scan_buffer(m), expect_after(b.hand, 1, ScanStop::kChecksumMismatch, c, false));
  EXPECT_EQ(verify_closed(m, 7, 3, b.offset, b.checksum).code(), Code::kDataLoss);
  Bytes m1 = slice(m, 0, b.hand.appends()[1].end);
  EXPECT_EQ(verify_closed(m1, 7, 3, m1.size(), 0).code(), Code::kDataLoss);
}

TEST(FormatPinned, StartAndKeyLimits) {
  Bytes small(kSegmentHeaderAppendBytes - 1, 0);
  Result<SegmentWriter> too_small = SegmentWriter::start(small, 1, 1);
  ASSERT_FALSE(too_small.ok());
  EXPECT_EQ(too_small.status().code(), Code::kInvalidArgument);

  // Exactly a segment header: full at once.
  Bytes exact(kSegmentHeaderAppendBytes, 0);
  Result<SegmentWriter> w = SegmentWriter::start(exact, 9, 9);
  ASSERT_TRUE(w.ok());
  Hand hand(kSegmentHeaderAppendBytes);
  hand.segment_header(9, 9);
  EXPECT_EQ(exact, hand.bytes());
  EXPECT_EQ(w->offset(), kSegmentHeaderAppendBytes);
  Result<SegmentWriter::Appended> full = w->append_object(1, 1, bytes_of("k"), {});
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(exact, hand.bytes());
  expect_scan(scan_buffer(exact), expect_after(hand, 1, ScanStop::kEndOfBuffer, exact.size(), true));

  // Keys of 1..65535 bytes.
  Op longest = object_op(1, 1, "", "v");
  longest.key.assign(kMaxKeyBytes, 'K');
  Op longest_tombstone = tombstone_op(1, 1, 4, "");
  longest_tombstone.key.assign(kMaxKeyBytes, 'T');
  const Built b = build(1 << 18, 2, 2, {longest, longest_tombstone});
  EXPECT_EQ(b.memory, b.hand.bytes());
  EXPECT_TRUE(verify_closed(b.memory, 2, 2, b.offset, b.checksum).ok());

  Bytes memory(1 << 18, 0);
  Result<SegmentWriter> w2 = SegmentWriter::start(memory, 2, 2);
  ASSERT_TRUE(w2.ok());
  const Bytes too_long(kMaxKeyBytes + 1, 'K');
  EXPECT_EQ(w2->append_object(1, 1, too_long, {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(w2->append_tombstone(1, 1, 1, too_long).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(w2->append_object(1, 1, {}, bytes_of("v")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(w2->append_tombstone(1, 1, 1, {}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(w2->offset(), kSegmentHeaderAppendBytes);
}

// ---------------------------------------------------------------------------
// FormatScan: Algorithm 1 over buffers only the hand encoder built.

// The segment header and one object: the valid prefix a damaged third
// append must leave.
Hand good_prefix(size_t capacity) {
  Hand h(capacity);
  h.segment_header(9, 1);
  h.append(object_op(1, 10, "key-a", "value-a"));
  return h;
}

// The first n bytes of b, in a buffer of their own (so ASan sees overreads).
Bytes first(const Bytes& b, size_t n) { return slice(b, 0, n); }

TEST(FormatScan, EmptyAndZeroBuffers) {
  const ScanResult empty = scan_buffer({});
  EXPECT_EQ(empty.valid_bytes, 0u);
  EXPECT_EQ(empty.checksum, 0u);
  EXPECT_EQ(empty.entries, 0u);
  EXPECT_EQ(empty.stop_offset, 0u);
  EXPECT_TRUE(empty.zero_after_valid);
  EXPECT_TRUE(empty.stop == ScanStop::kEndOfData || empty.stop == ScanStop::kEndOfBuffer);

  for (size_t size : {1, 7, 8, 15, 16, 4096}) {
    SCOPED_TRACE(size);
    const Hand zeros(size);
    expect_scan(scan_buffer(zeros.bytes()), expect_after(zeros, 0, ScanStop::kEndOfData, 0, true));
  }
}

TEST(FormatScan, EndsExactlyAtEndOfBuffer) {
  const Op a = object_op(4, 4, "exact", "fit");
  const Op t = tombstone_op(4, 5, 3, "exact");
  Hand h(kSegmentHeaderAppendBytes + op_bytes(a) + op_bytes(t));
  h.segment_header(3, 4);
  h.append(a);
  h.append(t);
  ASSERT_EQ(h.offset(), h.bytes().size());
  expect_scan(scan_buffer(h.bytes()), expect_after(h, 3, ScanStop::kEndOfBuffer, h.offset(), true));
  EXPECT_TRUE(verify_closed(h.bytes(), 3, 4, h.offset(), h.appends().back().stored).ok());
  // Every valid prefix also ends exactly at its end.
  for (size_t k = 0; k < 3; ++k) {
    const size_t end = h.appends()[k].end;
    expect_scan(scan_buffer(first(h.bytes(), end)), expect_after(h, k + 1, ScanStop::kEndOfBuffer, end, true));
  }
}

TEST(FormatScan, EntriesThenZeros) {
  Hand h(512);
  h.segment_header(9, 1);
  h.append(object_op(1, 10, "key-a", "value-a"));
  h.append(tombstone_op(1, 11, 1, "key-b"));
  h.append(object_op(2, 12, "z", ""));
  expect_scan(scan_buffer(h.bytes()), expect_after(h, 4, ScanStop::kEndOfData, h.offset(), true));
  EXPECT_TRUE(verify_closed(h.bytes(), 9, 1, h.offset(), h.appends().back().stored).ok());
}

TEST(FormatScan, WrongChecksumEndsTheValidPrefix) {
  for (int which = 0; which < 6; ++which) {
    SCOPED_TRACE(which);
    Hand h = good_prefix(512);
    const Bytes body = object_body(2, 20, bytes_of("key-c"), bytes_of("value-c"));
    h.entry(header_for(kTypeObject, 5, 7, body), body);
    const uint32_t right = stored_form(h.chain());
    uint32_t wrong = 0;
    switch (which) {
      case 0: wrong = right ^ 1; break;
      case 1: wrong = right ^ 0x80000000u; break;
      case 2: wrong = 0; break;                            // torn: never valid
      case 3: wrong = h.appends()[1].stored; break;        // stale: the previous one
      case 4: wrong = stored_form(crc32c(0, h.bytes().data() + h.appends()[1].end, 16)); break;  // not chained
      case 5: wrong = stored_form(crc32c(0, h.bytes().data(), h.offset())); break;  // over every byte
    }
    ASSERT_NE(wrong, right);
    h.checksum_entry(wrong);
    h.append(object_op(2, 21, "key-d", "value-d"));  // nothing after a mismatch counts
    expect_scan(scan_buffer(h.bytes()), expect_after(h, 2, ScanStop::kChecksumMismatch, h.appends()[2].checksum, false));
  }
}

TEST(FormatScan, ChecksumEntryReservedBytesMustBeZero) {
  for (uint32_t reserved : {0x1u, 0x80u, 0x100u, 0x8000u, 0x10000u, 0x800000u, 0xFFFFFFu}) {
    SCOPED_TRACE(reserved);
    Hand h = good_prefix(512);
    const Bytes body = object_body(2, 20, bytes_of("key-c"), bytes_of("value-c"));
    h.entry(header_for(kTypeObject, 5, 7, body), body);
    h.checksum_entry(stored_form(h.chain()), reserved);
    expect_scan(scan_buffer(h.bytes()), expect_after(h, 2, ScanStop::kBadHeader, h.appends()[2].checksum, false));
  }
}

TEST(FormatScan, UnknownTypeIsABadHeader) {
  for (uint8_t type : {0x05, 0x06, 0x07, 0x08, 0x10, 0x40, 0x80, 0xFF}) {
    SCOPED_TRACE(int{type});
    Hand h = good_prefix(512);
    const Bytes body = object_body(2, 20, bytes_of("key-c"), bytes_of("value-c"));
    h.entry(header_for(type, 5, 7, body), body);
    h.seal();
    expect_scan(scan_buffer(h.bytes()), expect_after(h, 2, ScanStop::kBadHeader, h.appends()[2].entry, false));
  }
}

TEST(FormatScan, NonZeroFlagsAreABadHeader) {
  const Bytes object = object_body(2, 20, bytes_of("key-c"), bytes_of("value-c"));
  const Bytes tombstone = tombstone_body(2, 20, 1, bytes_of("key-c"));
  const Bytes segment = segment_header_body(9, 1, 512);
  for (int bit = 0; bit < 8; ++bit) {
    for (int kind = 0; kind < 3; ++kind) {
      SCOPED_TRACE(::testing::Message() << "bit " << bit << " kind " << kind);
      Hand h = good_prefix(512);
      Header hh = kind == 0   ? header_for(kTypeObject, 5, 7, object)
                  : kind == 1 ? header_for(kTypeTombstone, 5, 0, tombstone)
                              : header_for(kTypeSegmentHeader, 0, 0, segment);
      hh.flags = static_cast<uint8_t>(1u << bit);
      h.entry(hh, kind == 0 ? object : kind == 1 ? tombstone : segment);
      h.seal();
      expect_scan(scan_buffer(h.bytes()), expect_after(h, 2, ScanStop::kBadHeader, h.appends()[2].entry, false));
    }
  }
}

// Sizes that disagree with the type (the body CRC is right each time, so
// only the size checks can reject them).
TEST(FormatScan, InconsistentSizesAreABadHeader) {
  const Bytes kk = bytes_of("kk");
  const Bytes vvv = bytes_of("vvv");
  const Bytes obj = object_body(1, 2, kk, vvv);  // 21 bytes
  Bytes obj_long = obj;
  obj_long.push_back('x');
  const Bytes obj_short = slice(obj, 0, obj.size() - 1);
  const Bytes obj_no_key = object_body(1, 2, {}, vvv);
  const Bytes tomb = tombstone_body(1, 2, 3, kk);  // 26 bytes
  Bytes tomb_long = tomb;
  tomb_long.push_back('x');
  const Bytes tomb_as_object = object_body(1, 2, kk, {});
  const Bytes tomb_no_key = tombstone_body(1, 2, 3, {});
  const Bytes seg = segment_header_body(9, 1, 512);
  Bytes seg_long = seg;
  seg_long.push_back(0);
  const Bytes seg_short = slice(seg, 0, 16);
  const Bytes one = bytes_of("x");

  struct Case {
    const char* what;
    Header header;
    const Bytes* body;
  };
  const std::vector<Case> cases = {
      {"object body one byte long", header_for(kTypeObject, 2, 3, obj_long), &obj_long},
      {"object body one byte short", header_for(kTypeObject, 2, 3, obj_short), &obj_short},
      {"object without a key", header_for(kTypeObject, 0, 3, obj_no_key), &obj_no_key},
      {"object value_bytes off", header_for(kTypeObject, 2, 4, obj), &obj},
      {"object key_bytes off", header_for(kTypeObject, 3, 3, obj), &obj},
      {"object sizes wrapping u32", header_for(kTypeObject, 1, 0xFFFFFFF0u, one), &one},
      {"tombstone with a value", header_for(kTypeTombstone, 2, 1, tomb_long), &tomb_long},
      {"tombstone value_bytes set", header_for(kTypeTombstone, 2, 1, tomb), &tomb},
      {"tombstone with an object's body", header_for(kTypeTombstone, 2, 0, tomb_as_object), &tomb_as_object},
      {"tombstone without a key", header_for(kTypeTombstone, 0, 0, tomb_no_key), &tomb_no_key},
      {"segment header with a key", header_for(kTypeSegmentHeader, 1, 0, seg), &seg},
      {"segment header with a value", header_for(kTypeSegmentHeader, 0, 1, seg), &seg},
      {"segment header body long", header_for(kTypeSegmentHeader, 0, 0, seg_long), &seg_long},
      {"segment header body short", header_for(kTypeSegmentHeader, 0, 0, seg_short), &seg_short},
  };
  // The wrapping case really wraps: 16 + 1 + 0xFFFFFFF0 == 1 (mod 2^32).
  EXPECT_EQ(cases[5].header.body_bytes, static_cast<uint32_t>(16u + 1u + 0xFFFFFFF0u));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Hand h = good_prefix(512);
    h.entry(c.header, *c.body);
    h.seal();
    expect_scan(scan_buffer(h.bytes()), expect_after(h, 2, ScanStop::kBadHeader, h.appends()[2].entry, false));
  }
}

TEST(FormatScan, TruncatedEntries) {
  Hand h = good_prefix(512);
  h.append(object_op(2, 20, "key-c", "value-c-long-enough"));
  const Placed p = h.appends()[2];
  struct Case {
    size_t size;
    ScanStop stop;
    size_t stop_offset;
  };
  const std::vector<Case> cases = {
      {p.entry + 1, ScanStop::kTruncated, p.entry},             // a header cut
      {p.entry + 10, ScanStop::kTruncated, p.entry},
      {p.entry + 15, ScanStop::kTruncated, p.entry},
      {p.entry + 16, ScanStop::kTruncated, p.entry},            // the body past the end
      {p.entry + 16 + 5, ScanStop::kTruncated, p.entry},
      {p.checksum - 1, ScanStop::kTruncated, p.entry},
      {p.checksum, ScanStop::kEndOfBuffer, p.checksum},         // no checksum entry
      {p.checksum + 1, ScanStop::kTruncated, p.checksum},       // a checksum entry cut
      {p.checksum + 5, ScanStop::kTruncated, p.checksum},
      {p.checksum + 7, ScanStop::kTruncated, p.checksum},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.size);
    expect_scan(scan_buffer(first(h.bytes(), c.size)), expect_after(h, 2, c.stop, c.stop_offset, false));
  }

  // A header claiming a body longer than the whole buffer (its sizes agree).
  Hand big = good_prefix(512);
  const Bytes body = bytes_of("only the start of a long body");
  Header hh = header_for(kTypeObject, 1, 100000, body);
  hh.body_bytes = kObjectFixedSize + 1 + 100000;
  big.entry(hh, body);
  big.seal();
  expect_scan(scan_buffer(big.bytes()), expect_after(big, 2, ScanStop::kTruncated, big.appends()[2].entry, false));
}

TEST(FormatScan, BodyMismatch) {
  Hand h = good_prefix(512);
  h.append(object_op(2, 20, "key-c", "value-c"));
  const Placed p = h.appends()[2];
  for (size_t pos = p.entry + kHeaderSize; pos < p.checksum; ++pos) {
    for (uint8_t x : {0x01, 0x80, 0xFF}) {
      SCOPED_TRACE(::testing::Message() << "byte " << pos << " ^ " << int{x});
      Bytes m = h.bytes();
      m[pos] ^= x;
      expect_scan(scan_buffer(m), expect_after(h, 2, ScanStop::kBodyMismatch, p.entry, false));
    }
  }
}

// ---------------------------------------------------------------------------
// FormatTornWrite: a primary that died during an append (Figure 6).

// Appends of several sizes; the later ones span many 64-byte lines.
Built torn_segment() {
  Op zeros_inside = object_op(3, 7, "key-with-zeros", "");
  zeros_inside.value.assign(40, 0);
  zeros_inside.value[0] = 'z';
  Op big = object_op(4, 9, "sixteen-byte-key", "");
  for (size_t i = 0; i < 600; ++i) big.value.push_back(static_cast<uint8_t>(i * 7 + 1));
  Op bigger = object_op(5, 1, "k", "");
  for (size_t i = 0; i < 1000; ++i) bigger.value.push_back(static_cast<uint8_t>(i * 13 + 5));
  return build(2048, 11, 4, {object_op(1, 1, "a", ""), zeros_inside, tombstone_op(3, 2, 1, "key"), big, bigger});
}

// `full` as if only appends [0, k) and the first `cut` bytes of append k had arrived.
Bytes torn(const Hand& hand, const Bytes& full, size_t k, size_t cut) {
  Bytes m = full;
  std::fill(m.begin() + static_cast<std::ptrdiff_t>(hand.appends()[k].entry + cut), m.end(), 0);
  return m;
}

TEST(FormatTornWrite, EveryCutOfEveryAppend) {
  const Built b = torn_segment();
  ASSERT_EQ(b.memory, b.hand.bytes());
  const std::vector<Placed>& appends = b.hand.appends();
  for (size_t k = 0; k < appends.size(); ++k) {
    const Placed& p = appends[k];
    for (size_t cut = 0; cut <= p.end - p.entry; ++cut) {
      SCOPED_TRACE(::testing::Message() << "append " << k << " cut at " << cut << " of " << p.end - p.entry);
      const Bytes m = torn(b.hand, b.memory, k, cut);
      // Only bytes that the tear left as they were (zeros) can make it whole.
      const bool whole = std::all_of(b.memory.begin() + static_cast<std::ptrdiff_t>(p.entry + cut),
                                     b.memory.begin() + static_cast<std::ptrdiff_t>(p.end),
                                     [](uint8_t x) { return x == 0; });
      const ScanResult r = scan_buffer(m);
      if (whole) {
        expect_scan(r, expect_after(b.hand, k + 1, ScanStop::kEndOfData, p.end, true));
        continue;
      }
      EXPECT_EQ(r.valid_bytes, p.entry);
      EXPECT_EQ(r.checksum, k == 0 ? 0u : appends[k - 1].stored);
      EXPECT_EQ(r.entries, k);
      EXPECT_TRUE(r.stop_offset == p.entry || r.stop_offset == p.checksum) << r.stop_offset;
      EXPECT_NE(r.stop, ScanStop::kEndOfBuffer);
      EXPECT_EQ(r.zero_after_valid, cut == 0);
      if (k > 0) {
        const Status s = verify_closed(m, 11, 4, p.entry, appends[k - 1].stored);
        EXPECT_EQ(s.code(), cut == 0 ? Code::kOk : Code::kDataLoss) << s.to_string();
      }
    }
  }
}

// Figure 6's three states, for the last append (B) after A.
TEST(FormatTornWrite, Figure6Cases) {
  const Built b = torn_segment();
  const size_t k = b.hand.appends().size() - 1;
  const Placed& p = b.hand.appends()[k];
  ASSERT_GT(p.stored, 0xFFu) << "case (c) needs a CRC whose upper bytes are not zero";
  const size_t entry_bytes = p.checksum - p.entry;

  // B and its checksum fully written: B is recovered.
  expect_scan(scan_buffer(torn(b.hand, b.memory, k, p.end - p.entry)),
              expect_after(b.hand, k + 1, ScanStop::kEndOfData, p.end, true));

  // (a) B written, its checksum entry not at all: B is discarded.
  expect_scan(scan_buffer(torn(b.hand, b.memory, k, entry_bytes)),
              expect_after(b.hand, k, ScanStop::kEndOfData, p.checksum, false));

  // (b) B partially written: its length field cut (l' < l), its header
  // without the body, half its body.
  expect_scan(scan_buffer(torn(b.hand, b.memory, k, 5)), expect_after(b.hand, k, ScanStop::kBadHeader, p.entry, false));
  expect_scan(scan_buffer(torn(b.hand, b.memory, k, kHeaderSize)),
              expect_after(b.hand, k, ScanStop::kBodyMismatch, p.entry, false));
  expect_scan(scan_buffer(torn(b.hand, b.memory, k, kHeaderSize + (entry_bytes - kHeaderSize) / 2)),
              expect_after(b.hand, k, ScanStop::kBodyMismatch, p.entry, false));

  // (c) B written, its checksum partially: only the type byte (a CRC of 0,
  // never valid), one byte and three bytes of the CRC.
  for (size_t extra : {1, 4, 5, 7}) {
    SCOPED_TRACE(extra);
    expect_scan(scan_buffer(torn(b.hand, b.memory, k, entry_bytes + extra)),
                expect_after(b.hand, k, ScanStop::kChecksumMismatch, p.checksum, false));
  }
}

// The NIC's DMA of an append torn at 64-byte lines: any subset of the lines
// the append covers arrived (lines at buffer offsets multiple of 64).
TEST(FormatTornWrite, Dma64ByteHoles) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("FERRY_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Built b = torn_segment();
  const std::vector<Placed>& appends = b.hand.appends();
  bool sampled = false;
  for (size_t k = 0; k < appends.size(); ++k) {
    const Placed& p = appends[k];
    const Bytes base = torn(b.hand, b.memory, k, p.end - p.entry);
    std::vector<std::pair<size_t, size_t>> lines;  // [begin, end) of the append in each line
    for (size_t at = p.entry; at < p.end;) {
      const size_t next = std::min(p.end, (at / 64 + 1) * 64);
      lines.emplace_back(at, next);
      at = next;
    }
    const size_t n = lines.size();
    const uint64_t all = (uint64_t{1} << n) - 1;
    uint64_t whole_masks = 0;
    auto check = [&](uint64_t present) {
      Bytes m = base;
      bool whole = true;
      for (size_t i = 0; i < n; ++i) {
        if ((present >> i) & 1) continue;
        for (size_t j = lines[i].first; j < lines[i].second; ++j) {
          whole = whole && m[j] == 0;
          m[j] = 0;
        }
      }
      const ScanResult r = scan_buffer(m);
      EXPECT_EQ(r.valid_bytes, whole ? p.end : p.entry)
          << "append " << k << " (" << n << " lines), lines present 0x" << std::hex << present;
      whole_masks += whole;
    };
    if (n <= 12) {
      for (uint64_t present = 0; present <= all; ++present) check(present);
    } else {
      sampled = true;
      check(all);
      for (size_t i = 0; i < n; ++i) check(all & ~(uint64_t{1} << i));  // one line lost
      for (int i = 0; i < 20000; ++i) check(rng() & all);
    }
    EXPECT_GE(whole_masks, 1u) << "append " << k;
  }
  EXPECT_TRUE(sampled) << "the segment should have an append over more than 12 lines";
}

// ---------------------------------------------------------------------------
// FormatBitFlip: a closed segment with any bit flipped is corrupt.

// A flip inside append k leaves appends [0, k) valid, since the scan never
// looks ahead: valid_bytes is exactly the end of the checksum entry before
// k. A single flipped bit always stops it at k: the sizes of each type are
// tied (one field changes alone), types 1-3 are more than one bit from each
// other's valid sizes and from 4, and CRC32C catches any one-bit error in a
// body, a body_crc or a checksum. It stops at the log entry for a flip
// there, at the checksum entry for a flip in it; a flip after the end stops
// it at the end with non-zero bytes after it.
TEST(FormatBitFlip, EveryBitOfAClosedSegment) {
  Built b = build(384, 21, 8, {object_op(1, 2, "key", "val"), tombstone_op(1, 2, 5, "key"), object_op(2, 3, "k2", "")});
  ASSERT_EQ(b.memory, b.hand.bytes());
  ASSERT_TRUE(verify_closed(b.memory, 21, 8, b.offset, b.checksum).ok());
  const std::vector<Placed>& appends = b.hand.appends();
  std::set<std::string> fields;
  for (size_t pos = 0; pos < b.memory.size(); ++pos) {
    const std::string field = field_at(b.hand, pos);
    fields.insert(field);
    const size_t k = append_at(b.hand, pos);
    size_t valid = b.offset;
    size_t stop = b.offset;
    if (k < appends.size()) {
      valid = appends[k].entry;
      stop = pos < appends[k].checksum ? appends[k].entry : appends[k].checksum;
    }
    for (int bit = 0; bit < 8; ++bit) {
      b.memory[pos] ^= static_cast<uint8_t>(1u << bit);
      const ScanResult r = scan_buffer(b.memory);
      EXPECT_EQ(r.valid_bytes, valid) << "byte " << pos << " (" << field << ") bit " << bit;
      EXPECT_EQ(r.stop_offset, stop) << "byte " << pos << " (" << field << ") bit " << bit;
      EXPECT_FALSE(r.zero_after_valid) << "byte " << pos << " (" << field << ") bit " << bit;
      const Status s = verify_closed(b.memory, 21, 8, b.offset, b.checksum);
      EXPECT_EQ(s.code(), Code::kDataLoss) << "byte " << pos << " (" << field << ") bit " << bit << ": "
                                           << s.to_string();
      b.memory[pos] ^= static_cast<uint8_t>(1u << bit);
    }
  }
  EXPECT_EQ(fields, (std::set<std::string>{"type", "flags", "key_bytes", "body_bytes", "value_bytes", "body_crc", "body",
                                           "checksum.type", "checksum.reserved", "checksum.crc", "after end"}));
}

TEST(FormatBitFlip, VerifyClosedRejectsWhatItWasNotClosedWith) {
  const Built b =
      build(384, 21, 8, {object_op(1, 2, "key", "val"), tombstone_op(1, 2, 5, "key"), object_op(2, 3, "k2", "")});
  const std::vector<Placed>& appends = b.hand.appends();
  ASSERT_TRUE(verify_closed(b.memory, 21, 8, b.offset, b.checksum).ok());
  auto loss = [](const Status& s) { return s.code() == Code::kDataLoss; };
  // Another log or segment.
  EXPECT_TRUE(loss(verify_closed(b.memory, 22, 8, b.offset, b.checksum)));
  EXPECT_TRUE(loss(verify_closed(b.memory, 20, 8, b.offset, b.checksum)));
  EXPECT_TRUE(loss(verify_closed(b.memory, 0, 8, b.offset, b.checksum)));
  EXPECT_TRUE(loss(verify_closed(b.memory, 21, 9, b.offset, b.checksum)));
  EXPECT_TRUE(loss(verify_closed(b.memory, 21, 7, b.offset, b.checksum)));
  EXPECT_TRUE(loss(verify_closed(b.memory, 8, 21, b.offset, b.checksum)));
  // Another offset (an earlier valid end too, with its own checksum).
  const Placed& before = appends[appends.size() - 2];
  for (size_t offset : {before.end, b.offset - 1, b.offset + 1, b.offset + 8, size_t{0}, b.memory.size()}) {
    EXPECT_TRUE(loss(verify_closed(b.memory, 21, 8, offset, b.checksum))) << offset;
  }
  EXPECT_TRUE(loss(verify_closed(b.memory, 21, 8, before.end, before.stored)));
  // Another checksum.
  for (uint32_t checksum : {b.checksum ^ 1, b.checksum ^ 0x80000000u, 0u, 1u, before.stored}) {
    EXPECT_TRUE(loss(verify_closed(b.memory, 21, 8, b.offset, checksum))) << checksum;
  }
  // Non-zero bytes after the end.
  for (size_t pos : {b.offset, b.offset + 1, b.offset + 100, b.memory.size() - 1}) {
    Bytes m = b.memory;
    m[pos] = 0x01;
    EXPECT_TRUE(loss(verify_closed(m, 21, 8, b.offset, b.checksum))) << pos;
  }
  // A valid buffer that does not start with a segment header.
  Hand headless(384);
  headless.append(object_op(1, 2, "key", "val"));
  headless.append(object_op(1, 3, "key", "val"));
  ASSERT_EQ(scan_buffer(headless.bytes()).valid_bytes, headless.offset());
  EXPECT_TRUE(loss(verify_closed(headless.bytes(), 21, 8, headless.offset(), headless.appends().back().stored)));
  EXPECT_TRUE(loss(verify_closed(headless.bytes(), 0, 0, headless.offset(), headless.appends().back().stored)));
  // Nothing at all.
  const Hand nothing(384);
  EXPECT_TRUE(loss(verify_closed(nothing.bytes(), 21, 8, 0, 0)));
}

// ---------------------------------------------------------------------------
// FormatForEachEntry

struct Decoded {
  EntryType type;
  size_t offset, bytes;
  uint64_t log_id, segment_id;
  uint32_t segment_bytes;
  uint64_t table_id, version, tombstone_segment_id;
  Bytes key, value;
};

std::vector<Decoded> decode_all(const Bytes& prefix, Status* status) {
  std::vector<Decoded> out;
  *status = for_each_entry(prefix, [&out](const Entry& e) {
    out.push_back({e.type, e.offset, e.bytes, e.log_id, e.segment_id, e.segment_bytes, e.table_id, e.version,
                   e.tombstone_segment_id, Bytes(e.key.begin(), e.key.end()), Bytes(e.value.begin(), e.value.end())});
  });
  return out;
}

TEST(FormatForEachEntry, DecodesWhatWasWritten) {
  Op big = object_op(4, 2, "y", "");
  big.value.assign(300, 'v');
  const std::vector<Op> ops = {object_op(3, 100, "apple", "red"), tombstone_op(3, 99, 5, "pear"),
                               object_op(4, 1, "x", ""), big};
  const Built b = build(1024, 31, 6, ops);
  ASSERT_EQ(b.memory, b.hand.bytes());
  const std::vector<Placed>& appends = b.hand.appends();

  Status s;
  const std::vector<Decoded> all = decode_all(first(b.memory, b.offset), &s);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(all.size(), ops.size() + 1);
  const Decoded& h = all[0];
  EXPECT_EQ(h.type, EntryType::kSegmentHeader);
  EXPECT_EQ(h.offset, 0u);
  EXPECT_EQ(h.bytes, kHeaderSize + kSegmentBodySize);
  EXPECT_EQ(h.log_id, 31u);
  EXPECT_EQ(h.segment_id, 6u);
  EXPECT_EQ(h.segment_bytes, 1024u);
  EXPECT_TRUE(h.key.empty());
  EXPECT_TRUE(h.value.empty());
  for (size_t i = 0; i < ops.size(); ++i) {
    SCOPED_TRACE(i);
    const Decoded& d = all[i + 1];
    const Op& op = ops[i];
    EXPECT_EQ(static_cast<uint8_t>(d.type), op.type);
    EXPECT_EQ(d.offset, appends[i + 1].entry);
    EXPECT_EQ(d.bytes, appends[i + 1].checksum - appends[i + 1].entry);
    EXPECT_EQ(d.table_id, op.table_id);
    EXPECT_EQ(d.version, op.version);
    EXPECT_EQ(d.tombstone_segment_id, op.segment_id);
    EXPECT_EQ(d.key, op.key);
    EXPECT_EQ(d.value, op.value);
  }

  // Every valid prefix decodes to the entries in it; so does nothing.
  for (size_t k = 0; k < appends.size(); ++k) {
    const std::vector<Decoded> some = decode_all(first(b.memory, appends[k].end), &s);
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(some.size(), k + 1);
  }
  EXPECT_TRUE(decode_all({}, &s).empty());
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(FormatForEachEntry, RejectsWhatIsNotAValidPrefix) {
  const Built b = build(1024, 31, 6, {object_op(3, 100, "apple", "red"), tombstone_op(3, 99, 5, "pear")});
  const std::vector<Placed>& appends = b.hand.appends();
  Bytes corrupt = first(b.memory, b.offset);
  corrupt[appends[1].entry + kHeaderSize + 2] ^= 0x10;
  const std::vector<std::pair<const char*, Bytes>> spans = {
      {"the zeros after the end", b.memory},
      {"a cut entry", first(b.memory, appends[2].entry + 20)},
      {"an entry without its checksum entry", first(b.memory, appends[2].checksum)},
      {"a cut checksum entry", first(b.memory, appends[2].checksum + 4)},
      {"a corrupt body", corrupt},
      {"zeros", Bytes(64, 0)},
  };
  for (const auto& [what, span] : spans) {
    SCOPED_TRACE(what);
    Status s;
    const std::vector<Decoded> seen = decode_all(span, &s);
    EXPECT_EQ(s.code(), Code::kDataLoss) << s.to_string();
    const size_t valid = scan_buffer(span).valid_bytes;
    for (const Decoded& d : seen) EXPECT_LT(d.offset, valid) << "visited past the valid prefix";
  }
}

// ---------------------------------------------------------------------------
// FormatRandom

Bytes random_bytes(std::mt19937_64& rng, size_t n) {
  Bytes b(n);
  for (uint8_t& x : b) x = rng() % 4 == 0 ? 0 : static_cast<uint8_t>(rng());
  return b;
}

Op random_op(std::mt19937_64& rng) {
  Op op;
  op.type = rng() % 3 == 0 ? kTypeTombstone : kTypeObject;
  op.table_id = rng() % 4 == 0 ? 0 : rng();
  op.version = rng();
  op.segment_id = op.type == kTypeTombstone ? rng() : 0;
  size_t key = 0;
  switch (rng() % 8) {
    case 0:
    case 1: key = 1; break;
    case 2: key = 256 + rng() % 800; break;
    default: key = 1 + rng() % 48; break;
  }
  op.key = random_bytes(rng, key);
  if (op.type == kTypeObject) {
    size_t value = 0;
    switch (rng() % 8) {
      case 0:
      case 1: value = 0; break;
      case 2: value = 300 + rng() % 700; break;
      default: value = rng() % 120; break;
    }
    op.value = random_bytes(rng, value);
  }
  return op;
}

TEST(FormatRandom, WriterAgreesScansAndDetectsCorruption) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("FERRY_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int segment = 0; segment < 2000; ++segment) {
    SCOPED_TRACE(::testing::Message() << "segment " << segment);
    std::vector<Op> ops(rng() % 12);
    size_t need = kSegmentHeaderAppendBytes;
    for (Op& op : ops) {
      op = random_op(rng);
      need += op_bytes(op);
    }
    size_t capacity = need;  // exactly full
    switch (rng() % 4) {
      case 0: break;
      case 1: capacity = kSegmentHeaderAppendBytes + rng() % (need - kSegmentHeaderAppendBytes + 1); break;  // some don't fit
      default: capacity = need + rng() % 256; break;
    }
    const uint64_t log_id = rng();
    const uint64_t segment_id = rng();

    Hand hand(capacity);
    hand.segment_header(log_id, segment_id);
    Bytes memory(capacity, 0);
    Result<SegmentWriter> w = SegmentWriter::start(memory, log_id, segment_id);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    for (const Op& op : ops) {
      const bool fits = hand.fits(op_bytes(op));
      Result<SegmentWriter::Appended> a = write_op(w.value(), op);
      if (!fits) {
        ASSERT_FALSE(a.ok());
        EXPECT_EQ(a.status().code(), Code::kResourceExhausted);
        continue;
      }
      ASSERT_TRUE(a.ok()) << a.status().to_string();
      hand.append(op);
      EXPECT_EQ(a.value().offset, hand.appends().back().entry);
      EXPECT_EQ(a.value().bytes, op_bytes(op));
      EXPECT_EQ(a.value().bytes, op.type == kTypeObject ? object_append_bytes(op.key.size(), op.value.size())
                                                        : tombstone_append_bytes(op.key.size()));
      EXPECT_EQ(a.value().checksum, hand.appends().back().stored);
    }
    ASSERT_EQ(memory, hand.bytes());
    ASSERT_EQ(w->offset(), hand.offset());
    ASSERT_EQ(w->checksum(), hand.appends().back().stored);
    const size_t n = hand.appends().size();
    expect_scan(scan_buffer(memory),
                expect_after(hand, n, hand.offset() == capacity ? ScanStop::kEndOfBuffer : ScanStop::kEndOfData,
                             hand.offset(), true));
    ASSERT_TRUE(verify_closed(memory, log_id, segment_id, hand.offset(), w->checksum()).ok());
    Status decoded = for_each_entry(first(memory, hand.offset()), [](const Entry&) {});
    EXPECT_TRUE(decoded.ok()) << decoded.to_string();

    for (int c = 0; c < 16; ++c) {
      const size_t pos = rng() % capacity;
      const uint8_t x = static_cast<uint8_t>(1 + rng() % 255);
      const size_t k = append_at(hand, pos);
      memory[pos] ^= x;
      const Status s = verify_closed(memory, log_id, segment_id, hand.offset(), w->checksum());
      EXPECT_EQ(s.code(), Code::kDataLoss) << "byte " << pos << " (" << field_at(hand, pos) << ") ^ " << int{x};
      EXPECT_EQ(scan_buffer(memory).valid_bytes, k < n ? hand.appends()[k].entry : hand.offset())
          << "byte " << pos << " (" << field_at(hand, pos) << ") ^ " << int{x};
      memory[pos] ^= x;
    }
  }
}

}  // namespace
}  // namespace format_test
}  // namespace ferry::tailwind
