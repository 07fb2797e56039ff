// The recovery scan of a durable worker area (JUNE BERRY-D, NSDI'25 §5.3,
// Figure 5): from ReqToExecute to SRQTail, stride by stride, skipping to the
// next aligned address wherever the bytes are not a valid request.
#include <cstring>
#include <string>

#include "ferry/rpc/durable_log.h"

namespace ferry::rpc {

Result<ScanStats> scan_durable_area(std::span<const uint8_t> area, const DurableLayout& layout,
                                    uint32_t max_request_bytes,
                                    const std::function<void(uint64_t position, const RequestView&)>& visit) {
  if (layout.buffers == 0 || layout.stride_bytes == 0 || layout.buffer_bytes == 0 ||
      layout.buffer_bytes % layout.stride_bytes != 0) {
    return invalid_argument("scan_durable_area: bad layout");
  }
  if (area.size() < layout.area_bytes()) return invalid_argument("scan_durable_area: area smaller than the layout");
  DurableControl c;
  std::memcpy(&c, area.data(), sizeof(c));
  if (c.magic != kDurableMagic) return not_found("scan_durable_area: area not initialized");
  if (c.version != kDurableVersion) return data_loss("scan_durable_area: unknown version " + std::to_string(c.version));
  if (c.buffers != layout.buffers || c.buffer_bytes != layout.buffer_bytes || c.stride_bytes != layout.stride_bytes) {
    return invalid_argument("scan_durable_area: the area was written with another layout");
  }
  const uint64_t strides = layout.strides();
  if (c.srq_tail > UINT64_MAX / strides) return data_loss("scan_durable_area: SRQTail out of range");
  const uint64_t end = c.srq_tail * strides;
  // Buffers are posted again only after every request in them executed, so
  // at most `buffers` of them lie between ReqToExecute and SRQTail.
  if (c.req_to_execute > end || c.srq_tail - c.req_to_execute / strides > layout.buffers) {
    return data_loss("scan_durable_area: ReqToExecute " + std::to_string(c.req_to_execute) + " inconsistent with SRQTail " +
                     std::to_string(c.srq_tail));
  }
  ScanStats stats;
  stats.from = c.req_to_execute;
  stats.to = end;
  uint64_t pos = c.req_to_execute;
  while (pos < end) {
    const uint64_t sequence = pos / strides;
    const uint64_t stride = pos % strides;
    const size_t at = layout.buffer_offset(sequence) + stride * layout.stride_bytes;
    const size_t left = layout.buffer_bytes - stride * layout.stride_bytes;  // requests never cross buffers
    RequestView v;
    if (parse_request(area.subspan(at, left), /*exact=*/false, max_request_bytes, &v) == RequestCheck::kValid) {
      ++stats.valid;
      visit(pos, v);
      pos += (v.size + layout.stride_bytes - 1) / layout.stride_bytes;
    } else {
      ++stats.skipped_strides;
      ++pos;
    }
  }
  return stats;
}

Result<uint64_t> durable_admission_token(std::span<const uint8_t> area, const DurableLayout& layout,
                                         uint64_t sequence) {
  if (layout.buffers == 0 || area.size() < layout.area_bytes()) {
    return invalid_argument("durable_admission_token: area smaller than the layout");
  }
  AdmissionEntry e;
  std::memcpy(&e, area.data() + layout.admission_entry_offset(sequence), sizeof(e));
  if (e.sequence != sequence) {
    return data_loss("durable area: the admission entry of buffer " + std::to_string(sequence) + " was written for " +
                     std::to_string(e.sequence));
  }
  return e.token;
}

}  // namespace ferry::rpc
