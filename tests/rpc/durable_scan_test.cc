// The recovery scan of a durable worker area (JUNE BERRY-D §5.3, Figure 5) on
// hand-built areas: a torn or corrupted request is skipped stride by stride
// and the scan resumes at the next aligned request; only positions from
// ReqToExecute to SRQTail are visited; inconsistent control blocks are refused.
// (The power-fail campaign's requests fit one 64 B chunk and never tear, so
// these cases are built here; the fuzz target covers arbitrary bytes.)
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ferry/rpc/durable_log.h"
#include "ferry/rpc/format.h"

namespace ferry::rpc {
namespace {

constexpr DurableLayout kLayout{/*buffers=*/2, /*buffer_bytes=*/256, /*stride_bytes=*/64};  // 4 strides a buffer

class ScanArea {
 public:
  ScanArea() : bytes_(kLayout.area_bytes(), 0) {
    DurableControl c{};
    c.magic = kDurableMagic;
    c.version = kDurableVersion;
    c.buffers = kLayout.buffers;
    c.buffer_bytes = kLayout.buffer_bytes;
    c.stride_bytes = kLayout.stride_bytes;
    std::memcpy(bytes_.data(), &c, sizeof(c));
  }
  void set_positions(uint64_t req_to_execute, uint64_t srq_tail) {
    auto* c = reinterpret_cast<DurableControl*>(bytes_.data());
    c->req_to_execute = req_to_execute;
    c->srq_tail = srq_tail;
  }
  // A valid request of `payload` bytes (filled with `fill`) at `position`; returns its offset in the area.
  size_t put(uint64_t position, uint32_t payload, uint8_t fill, uint64_t id) {
    const size_t at = kLayout.buffer_offset(position / kLayout.strides()) +
                      (position % kLayout.strides()) * kLayout.stride_bytes;
    std::memset(bytes_.data() + at + kRequestHeaderBytes, fill, payload);
    seal_request(std::span<uint8_t>(bytes_.data() + at, kRequestHeaderBytes + payload), 7, kRequestNilext, id, 0,
                 payload);
    return at;
  }
  uint8_t* data() { return bytes_.data(); }

  struct Visit {
    uint64_t position;
    uint64_t id;
  };
  Result<ScanStats> scan(std::vector<Visit>* visits) {
    return scan_durable_area(bytes_, kLayout, 256, [&](uint64_t position, const RequestView& v) {
      visits->push_back({position, v.request_id});
    });
  }

 private:
  std::vector<uint8_t> bytes_;
};

TEST(DurableScan, ATornRequestIsSkippedAndTheScanResumesAtTheNextAlignedRequest) {
  ScanArea a;
  a.put(0, 12, 0xA1, 1);                           // one stride
  const size_t torn = a.put(1, 90, 0xB2, 2);       // 122 B: strides 1-2
  a.put(3, 12, 0xC3, 3);                           // one stride
  // The power failed mid-DMA: the tail of request 2 (its second 64 B chunk) never reached PM.
  std::memset(a.data() + torn + 64, 0, 58);
  a.set_positions(0, 1);
  std::vector<ScanArea::Visit> visits;
  auto stats = a.scan(&visits);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  ASSERT_EQ(visits.size(), 2u);
  EXPECT_EQ(visits[0].position, 0u);
  EXPECT_EQ(visits[0].id, 1u);
  EXPECT_EQ(visits[1].position, 3u);
  EXPECT_EQ(visits[1].id, 3u);
  EXPECT_EQ(stats.value().skipped_strides, 2u);
}

TEST(DurableScan, AOneBitFlipAnywhereInARequestRejectsIt) {
  for (size_t bit = 0; bit < (kRequestHeaderBytes + 20) * 8; ++bit) {
    ScanArea a;
    const size_t at = a.put(0, 20, 0x5A, 9);
    a.data()[at + bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    a.set_positions(0, 1);
    std::vector<ScanArea::Visit> visits;
    auto stats = a.scan(&visits);
    ASSERT_TRUE(stats.ok());
    EXPECT_TRUE(visits.empty()) << "bit " << bit << " flipped, request still accepted";
  }
}

TEST(DurableScan, OnlyPositionsFromReqToExecuteToSrqTailAreVisited) {
  ScanArea a;
  a.put(0, 12, 1, 10);  // executed already (below ReqToExecute)
  a.put(2, 12, 2, 11);
  a.put(4, 12, 3, 12);  // buffer 1: not posted (beyond SRQTail)
  a.set_positions(1, 1);
  std::vector<ScanArea::Visit> visits;
  auto stats = a.scan(&visits);
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(visits.size(), 1u);
  EXPECT_EQ(visits[0].id, 11u);
  EXPECT_EQ(stats.value().from, 1u);
  EXPECT_EQ(stats.value().to, 4u);
}

TEST(DurableScan, AnInconsistentOrForeignControlBlockIsRefused) {
  std::vector<ScanArea::Visit> visits;
  {
    ScanArea a;
    a.set_positions(9, 1);  // ReqToExecute beyond SRQTail's range
    EXPECT_EQ(a.scan(&visits).status().code(), Code::kDataLoss);
  }
  {
    ScanArea a;
    a.set_positions(0, 3);  // three buffers outstanding in a ring of two
    EXPECT_EQ(a.scan(&visits).status().code(), Code::kDataLoss);
  }
  {
    ScanArea a;
    reinterpret_cast<DurableControl*>(a.data())->magic = 0;
    EXPECT_EQ(a.scan(&visits).status().code(), Code::kNotFound);
  }
  {
    ScanArea a;
    reinterpret_cast<DurableControl*>(a.data())->stride_bytes = 128;
    EXPECT_EQ(a.scan(&visits).status().code(), Code::kInvalidArgument);
  }
  EXPECT_TRUE(visits.empty());
}

}  // namespace
}  // namespace ferry::rpc
