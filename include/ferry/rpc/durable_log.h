// The recoverable SRQ of durable JUNE BERRY (NSDI'25 §5.3) as bytes in PM.
//
// Each server worker owns one area of a PM region: a control block, then a
// ring of `buffers` receive buffers of `buffer_bytes`, each split into
// strides of `stride_bytes` (a multi-packet SRQ; an ordinary SRQ is one
// stride per buffer). Requests land in the buffers by DMA and are recorded
// by position: buffer sequence number * strides + stride. The control block
// holds two persisted positions:
//   ReqToExecute  the first request not yet executed (advanced after a
//                 request executed, before its software response)
//   SRQTail       buffers posted so far (advanced, and persisted, *before*
//                 the RECV is posted, so a request can never land beyond it)
// After the buffers, one admission entry per buffer slot: {sequence, token},
// what the service set aside for the buffer posted there (Server::Admission),
// persisted before SRQTail passes it.
// Recovery scans from ReqToExecute up to SRQTail; a stride whose bytes are
// not a valid request (checksum, size) is skipped. Before a buffer is posted
// again, the worker zeroes the checksum of every request it held, so a
// scan never mistakes a previous lap's request for a new one.
// Format spec: docs/rpc-format.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "ferry/common/status.h"
#include "ferry/rpc/format.h"

namespace ferry::rpc {

inline constexpr uint64_t kDurableMagic = 0x51445952524546ULL;  // "FERRYDQ"
inline constexpr uint32_t kDurableVersion = 2;  // 2: the admission table after the buffers
inline constexpr size_t kDurableControlBytes = 256;

struct DurableLayout {
  uint32_t buffers = 0;       // receive buffers in the ring
  uint32_t buffer_bytes = 0;  // one buffer (a multiple of stride_bytes)
  uint32_t stride_bytes = 0;  // request alignment (the multi-packet stride)
  uint32_t strides() const { return buffer_bytes / stride_bytes; }
  size_t ring_bytes() const { return static_cast<size_t>(buffers) * buffer_bytes; }
  size_t buffer_offset(uint64_t sequence) const {
    return kDurableControlBytes + static_cast<size_t>(sequence % buffers) * buffer_bytes;
  }
  // The admission table: buffers entries of kAdmissionEntryBytes, 64 B aligned.
  size_t admission_offset() const { return kDurableControlBytes + ring_bytes(); }
  size_t admission_entry_offset(uint64_t sequence) const;
  size_t admission_bytes() const;
  size_t area_bytes() const { return admission_offset() + admission_bytes(); }
};

// One admission table entry: the buffer sequence it was written for, and the
// service's token. Written with one 16-byte store and persisted before SRQTail
// passes `sequence`.
struct AdmissionEntry {
  uint64_t sequence;
  uint64_t token;
};
inline constexpr size_t kAdmissionEntryBytes = sizeof(AdmissionEntry);
static_assert(kAdmissionEntryBytes == 16);
inline size_t DurableLayout::admission_entry_offset(uint64_t sequence) const {
  return admission_offset() + static_cast<size_t>(sequence % buffers) * kAdmissionEntryBytes;
}
inline size_t DurableLayout::admission_bytes() const {
  return (static_cast<size_t>(buffers) * kAdmissionEntryBytes + 63) / 64 * 64;
}

// The control block, at the start of the area. Every persisted field sits on
// its own 64 B line and is written with one aligned 8-byte store.
struct DurableControl {
  uint64_t magic;         // kDurableMagic once initialized
  uint32_t version;       // kDurableVersion
  uint32_t worker;
  uint32_t buffers;       // the layout this area was written with
  uint32_t buffer_bytes;
  uint32_t stride_bytes;
  uint32_t reserved;
  uint8_t pad0[32];
  uint64_t req_to_execute;  // offset 64: position of the first request not executed
  uint8_t pad1[56];
  uint64_t srq_tail;        // offset 128: buffers posted (sequence of the next one)
  uint8_t pad2[120];
};
static_assert(sizeof(DurableControl) == kDurableControlBytes);
static_assert(offsetof(DurableControl, req_to_execute) == 64);
static_assert(offsetof(DurableControl, srq_tail) == 128);

struct ScanStats {
  uint64_t from = 0;            // ReqToExecute
  uint64_t to = 0;              // SRQTail * strides
  uint64_t valid = 0;           // requests found
  uint64_t skipped_strides = 0; // strides that did not start a valid request
};

// The admission token persisted for buffer `sequence` of an area that
// scan_durable_area accepted. kDataLoss: the entry was written for another
// sequence (the area is inconsistent: a buffer in the scan range is always
// posted after its entry was persisted).
Result<uint64_t> durable_admission_token(std::span<const uint8_t> area, const DurableLayout& layout,
                                         uint64_t sequence);

// Scans one worker's area (untrusted bytes: whatever PM held after a
// failure) and calls `visit` for every valid request from ReqToExecute to
// SRQTail, in position order. kNotFound: the area was never initialized;
// kDataLoss: its control block is inconsistent (nothing visited);
// kInvalidArgument: `layout` is not the one the area was written with.
Result<ScanStats> scan_durable_area(std::span<const uint8_t> area, const DurableLayout& layout,
                                    uint32_t max_request_bytes,
                                    const std::function<void(uint64_t position, const RequestView&)>& visit);

}  // namespace ferry::rpc
