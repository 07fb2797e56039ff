// libFuzzer target: Tailwind's recovery scan (Algorithm 1, format.h), which
// reads whatever a torn or corrupted backup buffer holds.
//
// Input: [mode] bytes...
//  - mode bit 0 clear: the bytes are the buffer, as is.
//  - mode bit 0 set: the bytes steer a valid segment built by SegmentWriter
//    (key/value sizes and contents), which is then corrupted at a
//    fuzzer-chosen offset (flip, zero a range, or truncate): no mutation
//    finds a CRC32C chain by chance, this reaches the deep states.
// The buffer is a heap allocation of exactly its size, so ASan reports any
// read past it. Checked: the result's offsets are ordered and in bounds;
// for_each_entry over the valid prefix succeeds and its entries tile it;
// re-scanning the prefix alone gives the same answer; and with a built
// segment, every entry in the valid prefix is byte-identical to what the
// writer wrote (a corrupted header is never accepted).
//
// Run: ./tailwind_scan_fuzz -max_total_time=60 ../tests/fuzz/corpus/tailwind_scan_fuzz
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "ferry/tailwind/format.h"

namespace {

using namespace ferry::tailwind;

#define FUZZ_CHECK(cond)            \
  do {                              \
    if (!(cond)) __builtin_trap();  \
  } while (0)

void check_scan(std::span<const uint8_t> buffer, const std::vector<uint8_t>* original) {
  const ScanResult r = scan_buffer(buffer);
  FUZZ_CHECK(r.valid_bytes <= buffer.size());
  FUZZ_CHECK(r.stop_offset <= buffer.size());
  FUZZ_CHECK(r.valid_bytes <= r.stop_offset);
  FUZZ_CHECK(r.objects + r.tombstones <= r.entries);
  const bool zero = std::all_of(buffer.begin() + static_cast<ptrdiff_t>(r.valid_bytes), buffer.end(),
                                [](uint8_t b) { return b == 0; });
  FUZZ_CHECK(zero == r.zero_after_valid);
  const auto prefix = buffer.first(r.valid_bytes);
  size_t next = 0;
  uint64_t entries = 0;
  const auto status = for_each_entry(prefix, [&](const Entry& e) {
    FUZZ_CHECK(e.offset >= next);
    FUZZ_CHECK(e.offset + e.bytes <= prefix.size());
    if (!e.key.empty()) FUZZ_CHECK(e.key.data() >= prefix.data() && e.key.data() + e.key.size() <= prefix.data() + prefix.size());
    if (!e.value.empty()) {
      FUZZ_CHECK(e.value.data() >= prefix.data() && e.value.data() + e.value.size() <= prefix.data() + prefix.size());
    }
    if (original != nullptr) {
      FUZZ_CHECK(std::equal(buffer.begin() + static_cast<ptrdiff_t>(e.offset),
                            buffer.begin() + static_cast<ptrdiff_t>(e.offset + e.bytes),
                            original->begin() + static_cast<ptrdiff_t>(e.offset)));
    }
    next = e.offset + e.bytes;
    ++entries;
  });
  FUZZ_CHECK(status.ok());
  FUZZ_CHECK(entries == r.entries);
  const ScanResult again = scan_buffer(prefix);
  FUZZ_CHECK(again.valid_bytes == r.valid_bytes && again.checksum == r.checksum && again.entries == r.entries);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  if ((mode & 1) == 0) {
    std::unique_ptr<uint8_t[]> copy(new uint8_t[size + 1]);
    if (size != 0) std::memcpy(copy.get(), data, size);
    check_scan({copy.get(), size}, nullptr);
    return 0;
  }
  // Build a valid segment steered by the input, then corrupt it.
  if (size < 6) return 0;
  const size_t capacity = 256 + (size_t{data[0]} << 4);
  const size_t corrupt_at = (size_t{data[1]} << 8 | data[2]);
  const uint8_t corruption = data[3];
  const size_t corrupt_len = 1 + data[4] % 64;
  data += 5;
  size -= 5;
  std::vector<uint8_t> segment(capacity, 0);
  auto writer = SegmentWriter::start(segment, 9, 4);
  if (!writer.ok()) return 0;
  size_t at = 0;
  uint64_t version = 1;
  while (at + 2 <= size) {
    const size_t key_bytes = 1 + data[at] % 24;
    const size_t value_bytes = data[at + 1] % 96;
    at += 2;
    const size_t avail = size - at;
    std::vector<uint8_t> key(key_bytes), value(value_bytes);
    for (size_t i = 0; i < key_bytes; ++i) key[i] = avail != 0 ? data[at + i % avail] : 0;
    for (size_t i = 0; i < value_bytes; ++i) value[i] = avail != 0 ? data[at + (key_bytes + i) % avail] : 0;
    const bool tombstone = (data[at - 2] & 0x80) != 0;
    auto a = tombstone ? writer->append_tombstone(1, version, 3, key) : writer->append_object(1, version, key, value);
    if (!a.ok()) break;
    ++version;
    at += std::min(avail, key_bytes);
  }
  const std::vector<uint8_t> original = segment;
  // The intact segment scans to its end exactly.
  const ScanResult intact = scan_buffer(segment);
  FUZZ_CHECK(intact.valid_bytes == writer->offset() && intact.checksum == writer->checksum());
  const size_t pos = corrupt_at % capacity;
  const size_t end = std::min(capacity, pos + corrupt_len);
  size_t length = capacity;
  switch (corruption % 3) {
    case 0: segment[pos] ^= static_cast<uint8_t>(1u << (corruption >> 5)); break;
    case 1: std::fill(segment.begin() + static_cast<ptrdiff_t>(pos), segment.begin() + static_cast<ptrdiff_t>(end), 0); break;
    default: length = pos; break;  // truncated buffer
  }
  std::unique_ptr<uint8_t[]> copy(new uint8_t[length + 1]);
  std::memcpy(copy.get(), segment.data(), length);
  check_scan({copy.get(), length}, &original);
  return 0;
}
