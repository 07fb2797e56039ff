// Object management of the software RNIC: PDs, MRs, CQs, SRQs and QPs (the
// control path). Every table mutation runs on the engine through
// Engine::run_control, so the data path reads the tables without locks.
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>

#include "device.h"
#include "ferry/common/align.h"
#include "nic_core.h"

namespace ferry::nic {
namespace detail {

AlignedBuffer::AlignedBuffer(size_t bytes, RecordArena* from) : arena(from) {
  if (arena != nullptr) {
    size = std::max<size_t>(round_up(bytes, 4096), 4096);
    ptr = arena->allocate(size);  // zeroed; nullptr when full
    if (ptr == nullptr) size = 0;
    return;
  }
  // Cache-line granules, not pages: a QP's rings and record are a few
  // hundred bytes each at small depths, and page-aligned buffers put every
  // QP's hot first lines into the same few cache sets (issue 31).
  const size_t lines = std::max<size_t>(round_up(bytes, kCacheLine), kCacheLine);
  if (lines >= kMapBytes) {  // as free_buffer decides
    // A deep ring (a server's CQ of thousands of entries) from anonymous
    // pages, which are zero until written: only the slots the NIC reaches
    // cost memory and a page fault, not the whole ring at creation.
    size = round_up(bytes, 4096);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FERRY_ASSERT(p != MAP_FAILED, "out of memory mapping ", size, " bytes");
    ptr = static_cast<uint8_t*>(p);
    return;
  }
  size = lines;
  ptr = static_cast<uint8_t*>(std::aligned_alloc(kCacheLine, size));
  FERRY_ASSERT(ptr != nullptr, "out of memory allocating ", size, " bytes");
  std::memset(ptr, 0, size);
}

static void free_buffer(uint8_t* ptr, size_t size, RecordArena* arena) {
  if (ptr == nullptr) return;
  if (arena != nullptr) {
    arena->release(ptr, size);
  } else if (size >= AlignedBuffer::kMapBytes) {
    munmap(ptr, size);
  } else {
    std::free(ptr);
  }
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    free_buffer(ptr, size, arena);
    ptr = o.ptr;
    size = o.size;
    arena = o.arena;
    o.ptr = nullptr;
    o.size = 0;
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { free_buffer(ptr, size, arena); }

ChannelCore::ChannelCore(RecordArena* arena) : rec_memory(sizeof(ChannelRecord), arena) {
  if (rec_memory.ptr != nullptr) rec = new (rec_memory.ptr) ChannelRecord();
  event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}
ChannelCore::~ChannelCore() {
  if (event_fd >= 0) close(event_fd);
}

static uint32_t round_pow2(uint32_t v, uint32_t min_value) {
  uint32_t r = min_value;
  while (r < v) r <<= 1;
  return r;
}

NicCore::NicCore(Engine* engine, Fabric* fabric, const NicOptions& options)
    : engine_(engine),
      fabric_(fabric),
      options_(options),
      memory_(options.memory ? options.memory : &DramHostMemory::instance()),
      mrs_(std::max(options.max_mrs, 2u)),
      doorbells_(round_pow2(options.max_qps, 2)),
      qpc_cache_(options.resource_model.qp_context_entries, round_pow2(std::max(options.max_qps, 2u), 2)) {
  const uint32_t max_qps = round_pow2(std::max(options.max_qps, 2u), 2);
  qp_index_bits_ = static_cast<uint32_t>(__builtin_ctz(max_qps));
  FERRY_ASSERT(qp_index_bits_ <= 16, "max_qps too large for 24-bit QP numbers with a generation");
  qps_.resize(max_qps);
  cqs_.resize(std::max(options.max_cqs, 2u));
  srqs_.resize(std::max(options.max_srqs, 2u));
  pd_refs_.push_back(0);  // PD handle 0 is never used
  address_ = fabric_->attach(this);
  watch_ns_ = engine_->options().doorbell_watch_ns;
  tx_burst_ = std::max<uint32_t>(1, engine_->options().tx_burst);
  if (options_.name.empty()) options_.name = "nic" + std::to_string(address_);
}

NicCore::~NicCore() = default;

QpCore* NicCore::find_qp(uint32_t qpn) const {
  QpCore* qp = qps_[qpn & ((1u << qp_index_bits_) - 1)].get();
  return (qp != nullptr && qp->qpn == qpn) ? qp : nullptr;
}

CqCore* NicCore::find_cq(uint32_t number) const {
  return number < cqs_.size() ? cqs_[number].get() : nullptr;
}

const MrEntry* NicCore::find_mr(uint32_t key) const {
  const uint32_t index = key >> 8;
  const MrEntry* mr = mrs_.find(index);
  return (mr != nullptr && mr->valid && mr->key == key) ? mr : nullptr;
}

bool NicCore::segs_live(const LocalSeg* segs, uint32_t n) const {
  for (uint32_t i = 0; i < n; ++i) {
    if (segs[i].lkey == 0) continue;
    const MrEntry* mr = find_mr(segs[i].lkey);
    // The key's variant is 8 bits: a key reused 255 registrations later is
    // caught by the bounds.
    if (mr == nullptr || segs[i].ptr < mr->base || segs[i].ptr + segs[i].length > mr->base + mr->length) return false;
  }
  return true;
}

uint32_t NicCore::alloc_pd() {
  const uint32_t handle = next_pd_++;
  pd_refs_.push_back(0);
  return handle;
}

void NicCore::dealloc_pd(uint32_t handle) {
  FERRY_ASSERT(handle < pd_refs_.size() && pd_refs_[handle] == 0,
               "protection domain destroyed while MRs, QPs or SRQs still use it");
}

Result<uint32_t> NicCore::reg_mr(uint32_t pd, uint8_t* addr, size_t length, uint32_t access, uint64_t iova) {
  if (addr == nullptr && length != 0) return invalid_argument("reg_mr: null address");
  if (!pd_valid(pd)) return invalid_argument("reg_mr: no such protection domain");
  if (iova + length < iova) return invalid_argument("reg_mr: range wraps the address space");
  if (access & ~kAccessAll) return invalid_argument("reg_mr: unknown access flags");
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite)) {
    return invalid_argument("reg_mr: remote write/atomic access requires local write (IBTA)");
  }
  if (reinterpret_cast<uintptr_t>(addr) + length < reinterpret_cast<uintptr_t>(addr)) {
    return invalid_argument("reg_mr: range wraps the address space");
  }
  for (uint32_t tries = 0; tries < mrs_.capacity(); ++tries) {
    uint32_t index = next_mr_index_;
    next_mr_index_ = next_mr_index_ + 1 >= mrs_.capacity() ? 1 : next_mr_index_ + 1;
    MrEntry& e = mrs_.at(index);
    if (e.valid) continue;
    // The low byte varies on reuse so a stale key does not match a new region.
    const uint8_t variant = next_mr_variant_++;
    if (next_mr_variant_ == 0) next_mr_variant_ = 1;
    e.key = (index << 8) | variant;
    e.pd = pd;
    e.base = addr;
    e.iova = iova;
    e.length = length;
    e.access = access;
    e.valid = true;
    ++pd_refs_[pd];
    return e.key;
  }
  return resource_exhausted("reg_mr: memory-region table full (max_mrs)");
}

void NicCore::dereg_mr(uint32_t key) {
  MrEntry& e = mrs_.at(key >> 8);
  FERRY_ASSERT(e.valid && e.key == key, "dereg of unknown MR");
  // Packets still in flight may borrow this memory; copy them before it goes.
  fabric_->materialize_range(e.base, e.length);
  // Remote operations this NIC has checked against the MR but not finished
  // must not touch the memory any more. As on hardware, where the NIC
  // translates each DMA through the (now invalid) key, they fail when they
  // next would: a queued READ response when its turn to be sent comes, a
  // multi-packet WRITE at its next packet (remote access NAK, QP to ERROR).
  // Copying the unsent READ bytes instead would let a READ finish from memory
  // the application has already taken back.
  for (QpCore* qp : responders_) {
    const uint32_t cap = static_cast<uint32_t>(qp->responses.size());
    for (uint32_t i = 0; i < qp->resp_count; ++i) {
      ResponseEntry& r = qp->responses[(qp->resp_head + i) % cap];
      if (r.kind == ResponseEntry::Kind::kRead && r.rkey == key) {
        r.source_gone = true;
        r.data = nullptr;
      }
    }
  }
  for (const auto& qp : qps_) {
    if (qp && qp->in_msg == QpCore::InMsg::kWrite && qp->write_rkey == key) {
      qp->write_target_gone = true;
      qp->write_ptr = nullptr;
    }
  }
  --pd_refs_[e.pd];
  e.valid = false;
}

Result<CqCore*> NicCore::create_cq(const CqInitAttr& attr, ChannelCore* channel, RecordArena* arena,
                                   uint32_t owner) {
  if (!attr.count_only && (attr.cqe == 0 || attr.cqe > (1u << 22))) {
    return invalid_argument("create_cq: cqe must be in 1..4194304");
  }
  for (uint32_t n = 1; n < cqs_.size(); ++n) {
    if (cqs_[n]) continue;
    auto cq = std::make_unique<CqCore>();
    cq->number = n;
    cq->count_only = attr.count_only;
    cq->channel = channel;
    cq->owner = owner;
    cq->rec_memory = AlignedBuffer(sizeof(CqRecord), arena);
    if (cq->rec_memory.ptr == nullptr) return resource_exhausted("create_cq: no room for its record in shared memory");
    cq->rec = new (cq->rec_memory.ptr) CqRecord();
    if (!attr.count_only) {
      cq->depth = round_pow2(attr.cqe, 2);
      cq->ring_memory = AlignedBuffer(static_cast<size_t>(cq->depth) * sizeof(Cqe), arena);
      if (cq->ring_memory.ptr == nullptr) return resource_exhausted("create_cq: no room for its ring in shared memory");
      cq->ring = reinterpret_cast<Cqe*>(cq->ring_memory.ptr);
    }
    CqCore* raw = cq.get();
    cqs_[n] = std::move(cq);
    return raw;
  }
  return resource_exhausted("create_cq: CQ table full (max_cqs)");
}

void NicCore::detach_channel(const ChannelCore* channel) {
  for (auto& cq : cqs_) {
    if (cq && cq->channel == channel) cq->channel = nullptr;
  }
}

void NicCore::destroy_cq(CqCore* cq) {
  FERRY_ASSERT(cq->users == 0, "CQ destroyed while QPs still use it");
  cqs_[cq->number].reset();
}

Result<SrqCore*> NicCore::create_srq(uint32_t pd, const SrqInitAttr& attr, RecordArena* arena, uint32_t owner) {
  if (!pd_valid(pd)) return invalid_argument("create_srq: no such protection domain");
  if (attr.max_wr == 0 || attr.max_wr > (1u << 20)) return invalid_argument("create_srq: max_wr must be in 1..1048576");
  if (attr.max_sge > kMaxRecvSge) return invalid_argument("create_srq: max_sge above " + std::to_string(kMaxRecvSge));
  const bool pow2 = [](uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }(attr.mp_strides);
  if (attr.mp_strides != 0) {
    const uint32_t k = attr.mp_stride_bytes;
    if (!pow2 || attr.mp_strides > 32768) {
      return invalid_argument("create_srq: mp_strides must be a power of two up to 32768");
    }
    if (k < 64 || k > 8192 || (k & (k - 1)) != 0) {
      return invalid_argument("create_srq: mp_stride_bytes must be a power of two in 64..8192");
    }
    if (static_cast<uint64_t>(attr.mp_strides) * k > (1u << 30)) {
      return invalid_argument("create_srq: a multi-packet buffer is at most 1 GiB");
    }
    if (attr.mp_max_message_bytes > attr.mp_strides * k) {
      return invalid_argument("create_srq: mp_max_message_bytes exceeds one buffer");
    }
  }
  for (uint32_t n = 1; n < srqs_.size(); ++n) {
    if (srqs_[n]) continue;
    auto srq = std::make_unique<SrqCore>();
    srq->number = n;
    srq->pd = pd;
    srq->owner = owner;
    srq->rec_memory = AlignedBuffer(sizeof(SrqRecord), arena);
    if (srq->rec_memory.ptr == nullptr) return resource_exhausted("create_srq: no room for its record in shared memory");
    srq->rec = new (srq->rec_memory.ptr) SrqRecord();
    srq->depth = round_pow2(attr.max_wr, 2);
    srq->max_sge = std::max(attr.max_sge, 1u);
    srq->stride = recv_wqe_stride(srq->max_sge);
    const size_t bytes = static_cast<size_t>(srq->depth) * srq->stride;
    if (!attr.ring_memory.empty()) {
      if (attr.ring_memory.size() < bytes || reinterpret_cast<uintptr_t>(attr.ring_memory.data()) % 64 != 0) {
        return invalid_argument("create_srq: ring_memory must be 64-byte aligned and hold " + std::to_string(bytes) +
                                " bytes");
      }
      srq->ring = attr.ring_memory.data();
    } else {
      // In the client's shared arena when it has one (a daemon's client
      // writes its receive WQEs there), as QP rings are.
      srq->ring_memory = AlignedBuffer(bytes, arena);
      if (srq->ring_memory.ptr == nullptr) return resource_exhausted("create_srq: no room for its ring in shared memory");
      srq->ring = srq->ring_memory.ptr;
    }
    srq->rec->limit.store(attr.srq_limit, std::memory_order_relaxed);
    if (attr.mp_strides != 0) {
      srq->mp_strides = attr.mp_strides;
      srq->mp_stride_bytes = attr.mp_stride_bytes;
      const uint32_t max_message = attr.mp_max_message_bytes ? attr.mp_max_message_bytes : srq->mp_buffer_bytes();
      srq->mp_max_message_strides = (max_message + attr.mp_stride_bytes - 1) / attr.mp_stride_bytes;
    }
    ++pd_refs_[pd];
    SrqCore* raw = srq.get();
    srqs_[n] = std::move(srq);
    return raw;
  }
  return resource_exhausted("create_srq: SRQ table full (max_srqs)");
}

void NicCore::destroy_srq(SrqCore* srq) {
  FERRY_ASSERT(srq->users == 0, "SRQ destroyed while QPs are attached");
  fabric_->materialize_range(srq->ring, static_cast<size_t>(srq->depth) * srq->stride);
  --pd_refs_[srq->pd];
  srqs_[srq->number].reset();
}

Result<QpCore*> NicCore::create_qp(uint32_t pd, const QpInitAttr& attr, CqCore* send_cq, CqCore* recv_cq,
                                   SrqCore* srq, RecordArena* arena, uint32_t owner) {
  const QpCapabilities& cap = attr.cap;
  if (!pd_valid(pd)) return invalid_argument("create_qp: no such protection domain");
  if (cap.max_send_wr == 0 || cap.max_send_wr > (1u << 16)) return invalid_argument("create_qp: max_send_wr must be in 1..65536");
  if (cap.max_recv_wr > (1u << 16)) return invalid_argument("create_qp: max_recv_wr above 65536");
  if (cap.max_send_sge > kMaxSendSge) return invalid_argument("create_qp: max_send_sge above " + std::to_string(kMaxSendSge));
  if (cap.max_recv_sge > kMaxRecvSge) return invalid_argument("create_qp: max_recv_sge above " + std::to_string(kMaxRecvSge));
  if (cap.max_inline_data > kMaxInlineData) return invalid_argument("create_qp: max_inline_data above " + std::to_string(kMaxInlineData));
  if (attr.srq != nullptr && attr.managed_recv) return invalid_argument("create_qp: a managed receive queue cannot use an SRQ");

  const uint32_t slots = 1u << qp_index_bits_;
  for (uint32_t i = 0; i < slots; ++i) {
    // Index 0 would make QP number 0 possible; skip it.
    const uint32_t index = i;
    if (index == 0 || qps_[index]) continue;
    auto qp = std::make_unique<QpCore>();
    const uint32_t generation = next_qp_generation_++ & ((1u << (24 - qp_index_bits_)) - 1);
    if (next_qp_generation_ >= (1u << (24 - qp_index_bits_))) next_qp_generation_ = 1;
    qp->qpn = (generation << qp_index_bits_) | index;
    qp->nic = this;
    qp->pd = pd;
    qp->owner = owner;
    qp->send_cq = send_cq;
    qp->recv_cq = recv_cq;
    qp->srq = srq;
    qp->cap = cap;
    qp->cap.max_send_sge = std::max(cap.max_send_sge, 1u);
    qp->cap.max_recv_sge = std::max(cap.max_recv_sge, 1u);
    qp->sq_sig_all = attr.sq_sig_all;
    qp->managed_send = attr.managed_send;
    qp->managed_recv = attr.managed_recv;
    qp->cross_channel = attr.cross_channel;
    qp->sq_depth = round_pow2(cap.max_send_wr, 2);
    qp->sq_stride = send_wqe_stride(qp->cap.max_send_sge, cap.max_inline_data);
    qp->cap.max_send_wr = qp->sq_depth;
    const size_t sq_bytes = static_cast<size_t>(qp->sq_depth) * qp->sq_stride;
    if (!attr.send_ring_memory.empty()) {
      if (attr.send_ring_memory.size() < sq_bytes || reinterpret_cast<uintptr_t>(attr.send_ring_memory.data()) % 64 != 0) {
        return invalid_argument("create_qp: send_ring_memory must be 64-byte aligned and hold " +
                                std::to_string(sq_bytes) + " bytes");
      }
      qp->sq_ring = attr.send_ring_memory.data();
    } else {
      qp->sq_memory = AlignedBuffer(sq_bytes, arena);
      if (qp->sq_memory.ptr == nullptr) return resource_exhausted("create_qp: no room for its send ring in shared memory");
      qp->sq_ring = qp->sq_memory.ptr;
    }
    if (qp->srq == nullptr) {
      qp->rq_depth = round_pow2(std::max(cap.max_recv_wr, 1u), 2);
      qp->rq_stride = recv_wqe_stride(qp->cap.max_recv_sge);
      qp->cap.max_recv_wr = qp->rq_depth;
      const size_t rq_bytes = static_cast<size_t>(qp->rq_depth) * qp->rq_stride;
      if (!attr.recv_ring_memory.empty()) {
        if (attr.recv_ring_memory.size() < rq_bytes || reinterpret_cast<uintptr_t>(attr.recv_ring_memory.data()) % 64 != 0) {
          return invalid_argument("create_qp: recv_ring_memory must be 64-byte aligned and hold " +
                                  std::to_string(rq_bytes) + " bytes");
        }
        qp->rq_ring = attr.recv_ring_memory.data();
      } else {
        qp->rq_memory = AlignedBuffer(rq_bytes, arena);
        if (qp->rq_memory.ptr == nullptr) {
          return resource_exhausted("create_qp: no room for its receive ring in shared memory");
        }
        qp->rq_ring = qp->rq_memory.ptr;
      }
    }
    constexpr size_t kRecordBytes = (sizeof(QpRecord) + 63) & ~size_t{63};
    qp->rec_memory = AlignedBuffer(kRecordBytes + static_cast<size_t>(qp->sq_depth) * sizeof(FreeMark), arena);
    if (qp->rec_memory.ptr == nullptr) return resource_exhausted("create_qp: no room for its record in shared memory");
    qp->rec = new (qp->rec_memory.ptr) QpRecord();
    qp->free_marks = reinterpret_cast<FreeMark*>(qp->rec_memory.ptr + kRecordBytes);
    qp->free_marks_size = qp->sq_depth;
    qp->slots.resize(qp->sq_depth);
    qp->slot_sges.resize(static_cast<size_t>(qp->sq_depth) * qp->cap.max_send_sge);
    ++qp->send_cq->users;
    ++qp->recv_cq->users;
    qp->send_cq->add_pd_user(qp->pd);
    qp->recv_cq->add_pd_user(qp->pd);
    if (qp->srq) ++qp->srq->users;
    ++pd_refs_[pd];
    QpCore* raw = qp.get();
    qps_[index] = std::move(qp);
    return raw;
  }
  return resource_exhausted("create_qp: QP table full (max_qps)");
}

void NicCore::destroy_qp(QpCore* qp) {
  // Packets in flight may borrow inline data from this QP's ring.
  fabric_->materialize_from(address_, qp->qpn);
  qpc_cache_.forget(qp->qpn & ((1u << qp_index_bits_) - 1));
  if (qp->waiting_cq) {
    // Unlink from the CQ's WAIT list.
    for (auto& cq : cqs_) {
      if (!cq) continue;
      QpCore** link = &cq->waiters;
      while (*link) {
        if (*link == qp) {
          *link = qp->wait_next;
          break;
        }
        link = &(*link)->wait_next;
      }
    }
  }
  // Unlink from engine work lists.
  for (QpCore** link = &ready_head_; *link;) {
    if (*link == qp) {
      *link = qp->ready_next;
      if (ready_tail_ == qp) {
        ready_tail_ = nullptr;
        for (QpCore* p = ready_head_; p; p = p->ready_next) ready_tail_ = p;
      }
      break;
    }
    link = &(*link)->ready_next;
  }
  for (QpCore** link = &ack_head_; *link; link = &(*link)->ack_next) {
    if (*link == qp) {
      *link = qp->ack_next;
      break;
    }
  }
  timer_qps_.erase(std::remove(timer_qps_.begin(), timer_qps_.end(), qp), timer_qps_.end());
  flush_qps_.erase(std::remove(flush_qps_.begin(), flush_qps_.end(), qp), flush_qps_.end());
  watched_.erase(std::remove(watched_.begin(), watched_.end(), qp), watched_.end());
  responders_.erase(std::remove(responders_.begin(), responders_.end(), qp), responders_.end());
  --qp->send_cq->users;
  --qp->recv_cq->users;
  qp->send_cq->remove_pd_user(qp->pd);
  qp->recv_cq->remove_pd_user(qp->pd);
  if (qp->srq) --qp->srq->users;
  --pd_refs_[qp->pd];
  qps_[qp->qpn & ((1u << qp_index_bits_) - 1)].reset();
}

void NicCore::push_async_event(AsyncEvent ev) {
  std::lock_guard<std::mutex> lock(async_mu_);
  if (async_events_.size() < 4096) async_events_.push_back(ev);
}

std::optional<AsyncEvent> NicCore::pop_async_event() {
  std::lock_guard<std::mutex> lock(async_mu_);
  if (async_events_.empty()) return std::nullopt;
  AsyncEvent ev = async_events_.front();
  async_events_.pop_front();
  return ev;
}

NicCounters NicCore::counters() const {
  NicCounters c;
  c.tx_packets = counters_.tx_packets;
  c.rx_packets = counters_.rx_packets;
  c.rx_malformed = counters_.rx_malformed;
  c.rx_unknown_qp = counters_.rx_unknown_qp;
  c.rx_duplicates = counters_.rx_duplicates;
  c.rx_out_of_sequence = counters_.rx_out_of_sequence;
  c.seq_naks_sent = counters_.seq_naks_sent;
  c.rnr_naks_sent = counters_.rnr_naks_sent;
  c.error_naks_sent = counters_.error_naks_sent;
  c.acks_sent = counters_.acks_sent;
  c.retransmitted_packets = counters_.retransmitted_packets;
  c.ack_timeouts = counters_.ack_timeouts;
  c.rnr_retries = counters_.rnr_retries;
  c.atomic_replays = counters_.atomic_replays;
  c.read_replays = counters_.read_replays;
  c.doorbells = counters_.doorbells;
  c.wqes_fetched = counters_.wqes_fetched;
  c.cqes_written = counters_.cqes_written;
  c.modeled_qpc_lookups = counters_.modeled_qpc_lookups;
  c.modeled_qpc_misses = counters_.modeled_qpc_misses;
  c.modeled_recv_wqe_dmas = counters_.modeled_recv_wqe_dmas;
  return c;
}

}  // namespace detail

// ---- in-process device -------------------------------------------------------

namespace {

// The backend of a NIC of this process: control operations run on the
// engine (Engine::run_control), the handles share the cores' records.
class InProcessDevice final : public detail::Device {
 public:
  explicit InProcessDevice(detail::NicCore* core) : core_(core) {}

  uint32_t address() const override { return core_->address(); }
  const std::string& name() const override { return core_->name(); }
  Gid gid() const override { return core_->gid(); }
  std::optional<UdpEndpoint> udp_endpoint() const override { return core_->udp_endpoint(); }
  uint32_t max_path_mtu() const override { return core_->max_path_mtu(); }
  UdpCounters udp_counters() const override { return core_->udp_counters(); }
  NicCounters counters() const override { return core_->counters(); }
  std::optional<AsyncEvent> poll_async_event() override { return core_->pop_async_event(); }
  Result<uint32_t> resolve(const UdpEndpoint& endpoint) override { return core_->engine()->resolve(endpoint); }
  detail::NicCore* core() const override { return core_; }

  Result<uint32_t> alloc_pd() override {
    uint32_t handle = 0;
    run([&] { handle = core_->alloc_pd(); });
    return handle;
  }
  void dealloc_pd(uint32_t pd) override {
    run([&] { core_->dealloc_pd(pd); });
  }
  Result<uint32_t> reg_mr(uint32_t pd, void* addr, size_t length, uint32_t access) override {
    Result<uint32_t> key = internal_error("unset");
    run([&] { key = core_->reg_mr(pd, static_cast<uint8_t*>(addr), length, access); });
    return key;
  }
  void dereg_mr(uint32_t key) override {
    run([&] { core_->dereg_mr(key); });
  }
  Result<detail::ChannelView> create_channel() override {
    auto channel = std::make_unique<detail::ChannelCore>();
    if (!channel->ok()) return internal_error("create_comp_channel: eventfd failed");
    detail::ChannelView view;
    view.rec = channel->rec;
    view.event_fd = channel->event_fd;
    view.handle = reinterpret_cast<uint64_t>(channel.release());
    return view;
  }
  void destroy_channel(const detail::ChannelView& view) override {
    auto* channel = reinterpret_cast<detail::ChannelCore*>(view.handle);
    run([&] { core_->detach_channel(channel); });
    delete channel;
  }
  Result<detail::CqView> create_cq(const CqInitAttr& attr, uint64_t channel) override {
    Result<detail::CqCore*> cq = internal_error("unset");
    run([&] { cq = core_->create_cq(attr, reinterpret_cast<detail::ChannelCore*>(channel)); });
    if (!cq.ok()) return cq.status();
    const detail::CqCore* c = cq.value();
    detail::CqView view;
    view.handle = reinterpret_cast<uint64_t>(c);
    view.rec = c->rec;
    view.ring = c->ring;
    view.depth = c->depth;
    view.number = c->number;
    view.count_only = c->count_only;
    view.has_channel = c->channel != nullptr;
    return view;
  }
  void destroy_cq(uint64_t cq) override {
    run([&] { core_->destroy_cq(reinterpret_cast<detail::CqCore*>(cq)); });
  }
  Result<detail::SrqView> create_srq(uint32_t pd, const SrqInitAttr& attr) override {
    Result<detail::SrqCore*> srq = internal_error("unset");
    run([&] { srq = core_->create_srq(pd, attr); });
    if (!srq.ok()) return srq.status();
    return srq_view(srq.value());
  }
  void destroy_srq(uint64_t srq) override {
    run([&] { core_->destroy_srq(reinterpret_cast<detail::SrqCore*>(srq)); });
  }
  Result<detail::QpView> create_qp(uint32_t pd, const QpInitAttr& attr, uint64_t send_cq, uint64_t recv_cq,
                                   uint64_t srq) override {
    Result<detail::QpCore*> qp = internal_error("unset");
    run([&] {
      qp = core_->create_qp(pd, attr, reinterpret_cast<detail::CqCore*>(send_cq),
                            reinterpret_cast<detail::CqCore*>(recv_cq), reinterpret_cast<detail::SrqCore*>(srq));
    });
    if (!qp.ok()) return qp.status();
    return qp_view(qp.value());
  }
  void destroy_qp(uint64_t qp) override {
    run([&] { core_->destroy_qp(reinterpret_cast<detail::QpCore*>(qp)); });
  }
  Status modify_qp(uint64_t qp, const QpAttr& attr, uint32_t mask) override {
    Status status;
    run([&] { status = core_->modify_qp(reinterpret_cast<detail::QpCore*>(qp), attr, mask); });
    return status;
  }
  Result<QpAttr> query_qp(uint64_t handle) override {
    QpAttr attr;
    run([&] {
      const auto* qp = reinterpret_cast<detail::QpCore*>(handle);
      attr = qp->attr;
      attr.state = qp->state;
    });
    return attr;
  }
  Result<QpTraffic> qp_traffic(uint64_t handle) override {
    QpTraffic t;
    run([&] { t = reinterpret_cast<detail::QpCore*>(handle)->traffic(); });
    return t;
  }
  void ring_doorbell(uint32_t qpn) override { core_->ring_doorbell(qpn); }

 private:
  void run(const std::function<void()>& fn) { core_->engine()->run_control(fn); }
  static detail::SrqView srq_view(const detail::SrqCore* s) {
    detail::SrqView view;
    view.handle = reinterpret_cast<uint64_t>(s);
    view.rec = s->rec;
    view.ring = s->ring;
    view.depth = s->depth;
    view.stride = s->stride;
    view.max_sge = s->max_sge;
    view.number = s->number;
    view.pd = s->pd;
    view.mp_strides = s->mp_strides;
    view.mp_stride_bytes = s->mp_stride_bytes;
    return view;
  }
  static detail::QpView qp_view(const detail::QpCore* q) {
    detail::QpView view;
    view.handle = reinterpret_cast<uint64_t>(q);
    view.qpn = q->qpn;
    view.pd = q->pd;
    view.rec = q->rec;
    view.free_marks = q->free_marks;
    view.free_marks_size = q->free_marks_size;
    view.sq_ring = q->sq_ring;
    view.sq_depth = q->sq_depth;
    view.sq_stride = q->sq_stride;
    view.rq_ring = q->rq_ring;
    view.rq_depth = q->rq_depth;
    view.rq_stride = q->rq_stride;
    view.cap = q->cap;
    view.has_srq = q->srq != nullptr;
    view.managed_send = q->managed_send;
    view.managed_recv = q->managed_recv;
    view.cross_channel = q->cross_channel;
    return view;
  }

  detail::NicCore* core_;
};

}  // namespace

std::unique_ptr<detail::Device> detail::make_in_process_device(detail::NicCore* core) {
  return std::make_unique<InProcessDevice>(core);
}

Status detail::Device::fatal_status() const {
  return unavailable("NIC " + name() + ": device fatal: its NIC daemon is gone");
}

// ---- public handles ----------------------------------------------------------

Nic::Nic(std::unique_ptr<detail::Device> device) : dev_(std::move(device)) {}
Nic::~Nic() = default;

uint32_t Nic::address() const { return dev_->address(); }
const std::string& Nic::name() const { return dev_->name(); }
Gid Nic::gid() const { return dev_->gid(); }
std::optional<UdpEndpoint> Nic::udp_endpoint() const { return dev_->udp_endpoint(); }
uint32_t Nic::max_path_mtu() const { return dev_->max_path_mtu(); }
UdpCounters Nic::udp_counters() const { return dev_->udp_counters(); }
Result<uint32_t> Nic::resolve(const UdpEndpoint& endpoint) { return dev_->resolve(endpoint); }
detail::NicCore* Nic::core() const { return dev_->core(); }
Engine* Nic::engine() const { return dev_->core() != nullptr ? dev_->core()->engine() : nullptr; }
bool Nic::alive() const { return !dev_->dead(); }

Result<std::unique_ptr<ProtectionDomain>> Nic::alloc_pd() {
  FERRY_ASSIGN_OR_RETURN(uint32_t handle, dev_->alloc_pd());
  return std::unique_ptr<ProtectionDomain>(new ProtectionDomain(dev_.get(), handle));
}

ProtectionDomain::~ProtectionDomain() { dev_->dealloc_pd(handle_); }

Result<std::unique_ptr<MemoryRegion>> Nic::reg_mr(ProtectionDomain& pd, void* addr, size_t length, uint32_t access) {
  if (pd.dev_ != dev_.get()) return invalid_argument("reg_mr: protection domain belongs to another NIC");
  FERRY_ASSIGN_OR_RETURN(uint32_t key, dev_->reg_mr(pd.handle(), addr, length, access));
  return std::unique_ptr<MemoryRegion>(
      new MemoryRegion(dev_.get(), static_cast<uint8_t*>(addr), length, access, key));
}

MemoryRegion::~MemoryRegion() { dev_->dereg_mr(lkey_); }

Result<std::unique_ptr<CompletionChannel>> Nic::create_comp_channel() {
  FERRY_ASSIGN_OR_RETURN(detail::ChannelView view, dev_->create_channel());
  return std::unique_ptr<CompletionChannel>(
      new CompletionChannel(dev_.get(), std::make_unique<detail::ChannelView>(view)));
}

Result<std::unique_ptr<CompletionQueue>> Nic::create_cq(const CqInitAttr& attr) {
  if (attr.channel != nullptr && attr.channel->dev_ != dev_.get()) {
    return invalid_argument("create_cq: completion channel belongs to another NIC");
  }
  const uint64_t channel = attr.channel ? attr.channel->view_->handle : 0;
  FERRY_ASSIGN_OR_RETURN(detail::CqView view, dev_->create_cq(attr, channel));
  auto handle = std::unique_ptr<CompletionQueue>(
      new CompletionQueue(dev_.get(), std::make_unique<detail::CqView>(view), attr.channel));
  if (attr.channel != nullptr) {
    std::lock_guard<std::mutex> lock(attr.channel->mu_);
    attr.channel->cqs_[view.number] = handle.get();
  }
  return handle;
}

CompletionQueue::~CompletionQueue() {
  if (channel_ != nullptr) {
    std::lock_guard<std::mutex> lock(channel_->mu_);
    channel_->cqs_.erase(view_->number);
  }
  dev_->destroy_cq(view_->handle);
}

SharedReceiveQueue::SharedReceiveQueue(detail::Device* dev, std::unique_ptr<detail::SrqView> view)
    : dev_(dev), view_(std::move(view)) {}

Result<std::unique_ptr<SharedReceiveQueue>> Nic::create_srq(ProtectionDomain& pd, const SrqInitAttr& attr) {
  if (pd.dev_ != dev_.get()) return invalid_argument("create_srq: protection domain belongs to another NIC");
  FERRY_ASSIGN_OR_RETURN(detail::SrqView view, dev_->create_srq(pd.handle(), attr));
  return std::unique_ptr<SharedReceiveQueue>(
      new SharedReceiveQueue(dev_.get(), std::make_unique<detail::SrqView>(view)));
}

SharedReceiveQueue::~SharedReceiveQueue() { dev_->destroy_srq(view_->handle); }

QueuePair::QueuePair(detail::Device* dev, std::unique_ptr<detail::QpView> view, CompletionQueue* send_cq)
    : dev_(dev), view_(std::move(view)), send_cq_(send_cq) {}

Result<std::unique_ptr<QueuePair>> Nic::create_qp(ProtectionDomain& pd, const QpInitAttr& attr) {
  if (pd.dev_ != dev_.get()) return invalid_argument("create_qp: protection domain belongs to another NIC");
  if (attr.send_cq == nullptr || attr.recv_cq == nullptr) return invalid_argument("create_qp: send_cq and recv_cq are required");
  if (attr.send_cq->dev_ != dev_.get() || attr.recv_cq->dev_ != dev_.get() ||
      (attr.srq && attr.srq->dev_ != dev_.get())) {
    return invalid_argument("create_qp: CQ or SRQ belongs to another NIC");
  }
  const uint64_t srq = attr.srq ? attr.srq->view_->handle : 0;
  FERRY_ASSIGN_OR_RETURN(detail::QpView view, dev_->create_qp(pd.handle(), attr, attr.send_cq->view_->handle,
                                                              attr.recv_cq->view_->handle, srq));
  return std::unique_ptr<QueuePair>(
      new QueuePair(dev_.get(), std::make_unique<detail::QpView>(view), attr.send_cq));
}

QueuePair::~QueuePair() { dev_->destroy_qp(view_->handle); }

std::optional<AsyncEvent> Nic::poll_async_event() { return dev_->poll_async_event(); }
NicCounters Nic::counters() const { return dev_->counters(); }

}  // namespace ferry::nic
