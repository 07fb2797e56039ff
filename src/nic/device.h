// The backend behind the public verbs handles (internal header).
//
// A Nic is either in process -- its NicCore runs on an Engine of this
// process (InProcessDevice, nic.cc) -- or attached to a NIC daemon through
// its Unix socket (nicd::Client, src/nicd/client.cc). Control operations go
// through the Device; the data path (post_send, post_recv, poll) runs in the
// handles on the views below, which point at the rings and shared records
// (shared_records.h) in this process's address space, whoever placed them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ferry/common/status.h"
#include "ferry/nic/types.h"
#include "ferry/nic/verbs.h"
#include "ferry/nic/wqe.h"
#include "shared_records.h"

namespace ferry::nic::detail {

class NicCore;

struct CqView {
  uint64_t handle = 0;  // the backend's name for the object
  CqRecord* rec = nullptr;
  Cqe* ring = nullptr;
  uint32_t depth = 0;
  uint32_t number = 0;
  bool count_only = false;
  bool has_channel = false;
};

struct SrqView {
  uint64_t handle = 0;
  SrqRecord* rec = nullptr;
  uint8_t* ring = nullptr;
  uint32_t depth = 0, stride = 0, max_sge = 0, number = 0, pd = 0;
  uint32_t mp_strides = 0, mp_stride_bytes = 0;
  // Application side.
  uint64_t app_producer = 0;
  uint64_t app_consumer_cache = 0;  // last consumer read; re-read only when full
};

struct QpView {
  uint64_t handle = 0;
  uint32_t qpn = 0, pd = 0;
  QpRecord* rec = nullptr;
  FreeMark* free_marks = nullptr;
  uint32_t free_marks_size = 0;
  uint8_t* sq_ring = nullptr;
  uint32_t sq_depth = 0, sq_stride = 0;
  uint8_t* rq_ring = nullptr;
  uint32_t rq_depth = 0, rq_stride = 0;
  QpCapabilities cap;
  bool has_srq = false, managed_send = false, managed_recv = false, cross_channel = false;
  // Application side.
  uint64_t app_sq_producer = 0;
  uint64_t app_rq_producer = 0;
  uint64_t app_sq_freed_cache = 0;     // last freed index seen; re-read only when the ring looks full
  uint64_t app_rq_consumer_cache = 0;  // last rq_consumer read; likewise
};

struct ChannelView {
  uint64_t handle = 0;
  ChannelRecord* rec = nullptr;
  int event_fd = -1;  // owned by the backend
};

class Device {
 public:
  virtual ~Device() = default;

  virtual uint32_t address() const = 0;
  virtual const std::string& name() const = 0;
  virtual Gid gid() const = 0;
  virtual std::optional<UdpEndpoint> udp_endpoint() const = 0;
  virtual uint32_t max_path_mtu() const = 0;
  virtual UdpCounters udp_counters() const = 0;
  virtual NicCounters counters() const = 0;
  virtual std::optional<AsyncEvent> poll_async_event() = 0;
  virtual Result<uint32_t> resolve(const UdpEndpoint& endpoint) = 0;
  virtual NicCore* core() const { return nullptr; }

  virtual Result<uint32_t> alloc_pd() = 0;
  virtual void dealloc_pd(uint32_t pd) = 0;
  virtual Result<uint32_t> reg_mr(uint32_t pd, void* addr, size_t length, uint32_t access) = 0;
  virtual void dereg_mr(uint32_t key) = 0;
  virtual Result<ChannelView> create_channel() = 0;
  virtual void destroy_channel(const ChannelView& channel) = 0;
  virtual Result<CqView> create_cq(const CqInitAttr& attr, uint64_t channel) = 0;
  virtual void destroy_cq(uint64_t cq) = 0;
  virtual Result<SrqView> create_srq(uint32_t pd, const SrqInitAttr& attr) = 0;
  virtual void destroy_srq(uint64_t srq) = 0;
  // send_cq, recv_cq, srq: the handles of those objects (srq 0: none).
  virtual Result<QpView> create_qp(uint32_t pd, const QpInitAttr& attr, uint64_t send_cq, uint64_t recv_cq,
                                   uint64_t srq) = 0;
  virtual void destroy_qp(uint64_t qp) = 0;
  virtual Status modify_qp(uint64_t qp, const QpAttr& attr, uint32_t mask) = 0;
  virtual Result<QpAttr> query_qp(uint64_t qp) = 0;
  virtual Result<QpTraffic> qp_traffic(uint64_t qp) = 0;

  // Data path: queue QP `qpn` on the NIC's doorbell queue and wake the NIC
  // (the caller has just set its record's doorbell_queued).
  virtual void ring_doorbell(uint32_t qpn) = 0;

  // The device is gone (its daemon died): every operation fails from now on
  // with `fatal_status()` and no completion will ever arrive.
  bool dead() const { return dead_.load(std::memory_order_acquire); }
  Status fatal_status() const;

 protected:
  std::atomic<bool> dead_{false};
};

// The backend of a NIC of this process (nic.cc).
std::unique_ptr<Device> make_in_process_device(NicCore* core);

// A SharedMemory mapping of this process (shared_memory.h): a backend whose
// NIC runs in another process hands that process the file behind the
// memory it registers. Any thread.
struct SharedMapping {
  uint64_t id = 0;  // unique for the life of the process
  uint8_t* base = nullptr;
  size_t size = 0;
  int fd = -1;  // owned by the SharedMemory
};
// The live mapping holding all of [addr, addr + length), if any.
std::optional<SharedMapping> find_shared_mapping(uint64_t addr, uint64_t length);
// Whether the SharedMemory with this id is still mapped.
bool shared_mapping_alive(uint64_t id);

}  // namespace ferry::nic::detail
