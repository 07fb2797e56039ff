#include "ferry/pm/hints.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ferry/common/cpu.h"
#include "ferry/common/rng.h"

namespace ferry::pm {

size_t write_granularity(size_t size) { return size < 256 ? 64 : 256; }

size_t padded_size(size_t size) {
  const size_t g = write_granularity(size);
  return (size + g - 1) / g * g;
}

PmAllocator::PmAllocator(Region& region, size_t offset, size_t length)
    : region_(region),
      begin_(offset),
      end_(length == 0 ? region.size() : std::min(region.size(), offset + length)),
      next_(offset) {}

Result<uint8_t*> PmAllocator::allocate(size_t size) {
  if (size == 0) return invalid_argument("PmAllocator: size 0");
  const size_t g = write_granularity(size);
  const size_t start = (next_ + g - 1) / g * g;
  const size_t len = padded_size(size);
  if (start > end_ || len > end_ - start) {
    return resource_exhausted("PmAllocator: " + std::to_string(len) + " bytes do not fit");
  }
  next_ = start + len;
  return region_.data() + start;
}

void persistent_copy(Region& region, uint8_t* dst, const void* src, size_t len, const CpuWriteHints& hints) {
  if (len == 0) return;
  if (hints.whole_lines) {
    // Extend to whole lines: one aligned streaming write per line, no merge read.
    const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
    const uintptr_t lo = a & ~uintptr_t{63};
    const uintptr_t hi = (a + len + 63) & ~uintptr_t{63};
    uint8_t line_buf[4096 + 128];
    uint8_t* out = reinterpret_cast<uint8_t*>(lo);
    const size_t total = hi - lo;
    if (total <= sizeof(line_buf)) {
      std::memset(line_buf, 0, total);
      std::memcpy(line_buf + (a - lo), src, len);
      if (hints.non_temporal) {
        region.store_nt(out, line_buf, total);
        region.drain();  // streaming stores need only the fence
      } else {
        region.store(out, line_buf, total);
        region.persist(out, total);
      }
      return;
    }
  }
  if (hints.non_temporal) {
    region.store_nt(dst, src, len);
    region.drain();
  } else {
    region.store(dst, src, len);
    region.persist(dst, len);
  }
}

LockTable::LockTable(size_t slots) : slots_(std::max<size_t>(slots, 1)) {
  base_ = static_cast<uint8_t*>(std::aligned_alloc(4096, (slots_ * 64 + 4095) & ~size_t{4095}));
  FERRY_ASSERT(base_ != nullptr, "LockTable: out of memory");
  std::memset(base_, 0, slots_ * 64);
}

LockTable::~LockTable() { std::free(base_); }

size_t LockTable::offset(uint64_t key) const { return static_cast<size_t>(mix64(key) % slots_) * 64; }

static nic::SendWr persist_point_wr(uint64_t wr_id, uint64_t remote_addr, uint32_t rkey, uint32_t len,
                                    PersistPoint point) {
  nic::SendWr wr;
  wr.wr_id = wr_id;
  wr.flags = nic::kSendSignaled;
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  if (point == PersistPoint::kRead) {
    wr.opcode = nic::WrOpcode::kRdmaRead;  // 0 bytes: orders behind the WRITE, touches nothing
  } else {
    wr.opcode = nic::WrOpcode::kFlush;
    wr.flush_length = len;
    wr.flush_persistent = true;
  }
  return wr;
}

Status post_persistent_write(nic::QueuePair& qp, const nic::Sge& local, uint64_t remote_addr, uint32_t rkey,
                             uint64_t wr_id, PersistPoint point) {
  nic::SendWr wrs[2];
  wrs[0].wr_id = wr_id;
  wrs[0].opcode = nic::WrOpcode::kRdmaWrite;
  wrs[0].flags = 0;  // unsignaled: the persistence point's completion stands for both
  wrs[0].sg_list = std::span<const nic::Sge>(&local, 1);
  wrs[0].remote_addr = remote_addr;
  wrs[0].rkey = rkey;
  wrs[1] = persist_point_wr(wr_id, remote_addr, rkey, local.length, point);
  return qp.post_send(wrs);  // one doorbell
}

static Status wait_one(nic::CompletionQueue& cq) {
  nic::WorkCompletion wc;
  for (;;) {
    auto n = cq.poll(std::span<nic::WorkCompletion>(&wc, 1));
    if (!n.ok()) return n.status();
    if (n.value() == 1) break;
    cpu_relax();
  }
  if (wc.status != nic::WcStatus::kSuccess) {
    return internal_error(std::string("persistent write: request failed with ") +
                          std::string(nic::wc_status_name(wc.status)));
  }
  return ok_status();
}

Status persistent_write_strawman(nic::QueuePair& qp, nic::CompletionQueue& cq, const nic::Sge& local,
                                 uint64_t remote_addr, uint32_t rkey, PersistPoint point) {
  nic::SendWr write;
  write.opcode = nic::WrOpcode::kRdmaWrite;
  write.flags = nic::kSendSignaled;
  write.sg_list = std::span<const nic::Sge>(&local, 1);
  write.remote_addr = remote_addr;
  write.rkey = rkey;
  FERRY_RETURN_IF_ERROR(qp.post_send(write));
  FERRY_RETURN_IF_ERROR(wait_one(cq));  // first round trip
  FERRY_RETURN_IF_ERROR(qp.post_send(persist_point_wr(0, remote_addr, rkey, local.length, point)));
  return wait_one(cq);  // second round trip
}

}  // namespace ferry::pm
