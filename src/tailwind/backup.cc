// A Tailwind backup: the buffer pool, its directory, and the control
// operations. The data path (RDMA WRITE and FLUSH into open buffers) never
// reaches this file: it is the NIC's.
#include "ferry/tailwind/backup.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "ferry/common/checksum.h"
#include "ferry/common/cpu.h"
#include "ferry/nic/dma_memory.h"
#include "messages.h"

namespace ferry::tailwind {
namespace {

// Directory slot, one per buffer, at the start of the region (64 B each).
// Written only by the backup's CPU under its mutex, persisted before the
// operation that changed it returns.
constexpr uint32_t kSlotMagic = 0x53425754;  // "TWBS"
constexpr size_t kSlotBytes = 64;
// kSlotClosed: closed (close_bytes, close_checksum recorded), not yet on
// storage; a restart flushes it.
enum SlotState : uint8_t { kSlotFree = 0, kSlotOpen = 1, kSlotClosed = 2 };
struct SlotRecord {
  uint32_t magic;
  uint8_t state;
  uint8_t reserved[3];
  uint64_t log_id;
  uint64_t segment_id;
  uint64_t replica_version;
  uint64_t buffer_bytes;
  uint64_t close_bytes;     // kSlotClosed: the close's offset
  uint32_t close_checksum;  // ... and checksum
  uint32_t crc;  // CRC32C of the bytes before it
};
static_assert(sizeof(SlotRecord) <= kSlotBytes);

uint32_t slot_crc(const SlotRecord& r) { return crc32c(0, &r, offsetof(SlotRecord, crc)); }

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

std::string_view buffer_media_name(BufferMedia media) { return media == BufferMedia::kPm ? "pm" : "dram"; }

struct Backup::Impl {
  nic::Nic* nic = nullptr;
  pm::PersistenceDomain* domain = nullptr;
  BackupOptions options;
  pm::Region* region = nullptr;  // kPm, or kDram from the domain
  nic::DmaMemory own_memory;     // kDram without a domain (shared with a daemon-attached NIC)
  uint8_t* base = nullptr;
  size_t directory_bytes = 0;
  uint32_t max_open = 1;
  size_t pace_bytes = 0;  // the background flusher's pieces (0: not paced)
  std::unique_ptr<SegmentStore> store;

  struct Link {  // the data path of one primary (its log)
    std::unique_ptr<nic::ProtectionDomain> pd;
    std::unique_ptr<nic::CompletionQueue> cq;
    std::unique_ptr<nic::QueuePair> qp;
  };
  struct Slot {
    bool open = false;
    bool closed = false;            // closed, not yet on storage (served from the buffer)
    bool flushing = false;          // closed: its storage write is under way (without mu)
    bool free_after_flush = false;  // flushing: freed meanwhile; drop the stored copy after
    bool zeroing = false;           // flushed and free on record, being re-zeroed (not yet reusable)
    uint64_t log_id = 0;
    uint64_t segment_id = 0;
    uint64_t replica_version = 0;
    uint64_t close_bytes = 0;
    uint32_t close_checksum = 0;
    std::unique_ptr<nic::MemoryRegion> mr;  // in the log's link's PD, while open
    bool in_use() const { return open || closed || zeroing; }
  };

  Runtime* rt = nullptr;  // options.runtime, or Runtime::threads()
  mutable Mutex mu;
  mutable CondVar flushed_cv;      // a flush finished
  CondVar flush_cv;                // work for the flusher
  std::deque<size_t> flush_queue;  // closed slots to flush, in close order
  bool stop_flusher = false;
  Thread flusher;  // spawned by rt
  std::vector<Slot> slots;
  std::map<uint64_t, Link> links;
  // Logs fenced here (§3.3.4): their primary was declared failed and their
  // log is being (or was) recovered. For good: every later request of such
  // a log but find, read and free is refused, and so is a new connection.
  std::set<uint64_t> fenced;
  std::map<std::pair<uint64_t, uint64_t>, std::vector<uint8_t>> loaded;  // closed replicas read by find()
  BackupCounters counters;

  std::vector<std::pair<cm::Listener*, std::string>> served;  // serve()

  Result<nic::QueuePair*> new_link_locked(uint64_t log_id);
  std::vector<ReplicaInfo> find_locked(uint64_t log_id);

  ~Impl() {
    // No CM callback may run from here on.
    for (auto& [listener, name] : served) (void)listener->unserve(name);
    // Flushes not yet done are abandoned, as at a crash: their slots say
    // closed in the directory, and a restart (recover) flushes them.
    {
      std::lock_guard lock(mu);
      stop_flusher = true;
    }
    flush_cv.notify_all();
    if (flusher.joinable()) flusher.join();
    for (auto& s : slots) s.mr.reset();
    links.clear();
    if (region != nullptr && domain != nullptr) domain->release(region);
  }

  uint8_t* buffer_at(size_t i) const { return base + directory_bytes + i * options.buffer_bytes; }

  void persist(void* p, size_t n) {
    if (region != nullptr && region->media() == pm::Media::kPm) region->persist(p, n);
  }

  void write_slot(size_t i) {
    const Slot& s = slots[i];
    SlotRecord r{};
    r.magic = kSlotMagic;
    r.state = s.open ? kSlotOpen : s.closed ? kSlotClosed : kSlotFree;
    r.log_id = s.log_id;
    r.segment_id = s.segment_id;
    r.replica_version = s.replica_version;
    r.buffer_bytes = options.buffer_bytes;
    r.close_bytes = s.closed ? s.close_bytes : 0;
    r.close_checksum = s.closed ? s.close_checksum : 0;
    r.crc = slot_crc(r);
    uint8_t* dst = base + i * kSlotBytes;
    std::memcpy(dst, &r, sizeof r);
    persist(dst, sizeof r);
  }

  // Re-zeroes buffer i; with `piece` (the flusher's pacing) in pieces of
  // that size, yielding the CPU between them.
  void zero_buffer(size_t i, size_t piece = 0) {
    const size_t step = piece == 0 ? options.buffer_bytes : piece;
    for (size_t at = 0; at < options.buffer_bytes; at += step) {
      const size_t n = std::min(step, options.buffer_bytes - at);
      std::memset(buffer_at(i) + at, 0, n);
      persist(buffer_at(i) + at, n);
      if (piece != 0 && at + n < options.buffer_bytes) rt->yield();
    }
  }

  int find_open(uint64_t log_id, uint64_t segment_id) const {
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].open && slots[i].log_id == log_id && slots[i].segment_id == segment_id) return static_cast<int>(i);
    }
    return -1;
  }

  Status not_open(uint64_t log_id, uint64_t segment_id) const {
    return not_found("log " + std::to_string(log_id) + " segment " + std::to_string(segment_id) + " is not open on " +
                     options.name);
  }

  int find_closed(uint64_t log_id, uint64_t segment_id) const {
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].closed && slots[i].log_id == log_id && slots[i].segment_id == segment_id) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  uint32_t open_count() const {
    return static_cast<uint32_t>(std::count_if(slots.begin(), slots.end(), [](const Slot& s) { return s.open; }));
  }
  // Buffers whose contents are not on storage: what backup power must flush.
  uint32_t unflushed_count() const {
    return static_cast<uint32_t>(
        std::count_if(slots.begin(), slots.end(), [](const Slot& s) { return s.open || s.closed; }));
  }
  void update_gauges() {
    counters.open_buffers = open_count();
    counters.closed_unflushed = unflushed_count() - counters.open_buffers;
  }

  // Writes closed slot i to storage, re-zeroes it and frees it. Called with
  // `lock` held; releases it around the storage write and the re-zeroing
  // (the slot's flags keep everyone else off the buffer meanwhile).
  Status flush_slot(size_t i, std::unique_lock<Mutex>& lock) {
    Slot& s = slots[i];
    StoredSegment meta;
    meta.log_id = s.log_id;
    meta.segment_id = s.segment_id;
    meta.replica_version = s.replica_version;
    meta.bytes = s.close_bytes;
    meta.checksum = s.close_checksum;
    s.flushing = true;
    lock.unlock();
    // CPU time, not wall time: a paced flush yields the core between pieces.
    const uint64_t cpu0 = thread_cpu_time_ns();
    const Status written = store->write(meta, {buffer_at(i), meta.bytes});
    const uint64_t write_ns = thread_cpu_time_ns() - cpu0;
    lock.lock();
    counters.flush_ns += write_ns;
    s.flushing = false;
    if (!written.ok()) {
      ++counters.flush_failures;
      if (s.free_after_flush) {  // nobody needs it any more
        s.free_after_flush = false;
        s.closed = false;
        zero_buffer(i);
        write_slot(i);
        update_gauges();
      }
      flushed_cv.notify_all();
      return written;
    }
    if (s.free_after_flush) (void)store->remove(meta.log_id, meta.segment_id);
    s.free_after_flush = false;
    // On storage now: free on record first (a restart re-zeroes a free
    // slot), then re-zero it without the mutex before it can be reused.
    s.closed = false;
    s.zeroing = true;
    write_slot(i);
    ++counters.flushes;
    update_gauges();
    flushed_cv.notify_all();
    lock.unlock();
    const uint64_t cpu1 = thread_cpu_time_ns();
    zero_buffer(i, pace_bytes);
    const uint64_t zero_ns = thread_cpu_time_ns() - cpu1;
    lock.lock();
    counters.flush_ns += zero_ns;
    s.zeroing = false;
    flushed_cv.notify_all();
    return ok_status();
  }

  void flusher_main() {
    std::unique_lock lock(mu);
    while (true) {
      flush_cv.wait(lock, [&] { return stop_flusher || !flush_queue.empty(); });
      if (stop_flusher) return;
      const size_t i = flush_queue.front();
      flush_queue.pop_front();
      if (slots[i].closed) (void)flush_slot(i, lock);  // a failure is counted; the buffer stays closed in memory
      flushed_cv.notify_all();  // also when it was freed before its turn: the queue may be empty now
    }
  }

  // The log's data path stops: its QP to ERROR, its open buffers
  // deregistered (a WRITE in flight lands up to here and no further).
  void cut_link_locked(uint64_t log_id) {
    for (auto& s : slots) {
      if (s.open && s.log_id == log_id) s.mr.reset();
    }
    auto it = links.find(log_id);
    if (it == links.end()) return;
    nic::QpAttr attr;
    attr.state = nic::QpState::kError;
    (void)it->second.qp->modify(attr, nic::kQpState);
  }

  void fence_locked(uint64_t log_id) {
    fenced.insert(log_id);
    cut_link_locked(log_id);
  }

  // kPermissionDenied for a fenced log: what its (old) primary is told.
  Status refuse_if_fenced(uint64_t log_id) const {
    if (fenced.count(log_id) == 0) return ok_status();
    return permission_denied("log " + std::to_string(log_id) + " is fenced on " + options.name +
                             ": its primary was declared failed and its log recovered elsewhere; that primary "
                             "cannot rejoin with it");
  }

  Status init() {
    directory_bytes = round_up(size_t{options.buffers} * kSlotBytes, 4096);
    const size_t total = directory_bytes + size_t{options.buffers} * options.buffer_bytes;
    if (options.media == BufferMedia::kPm) {
      FERRY_ASSIGN_OR_RETURN(region, domain->map_pm(options.pm_path, total, /*create=*/true));
      base = region->data();
    } else if (domain != nullptr) {
      FERRY_ASSIGN_OR_RETURN(region, domain->alloc_dram(total));
      base = region->data();
    } else {
      FERRY_ASSIGN_OR_RETURN(own_memory, nic::DmaMemory::allocate(*nic, total, "ferry-tailwind-buffers"));
      base = own_memory.data();
    }
    slots.resize(options.buffers);
    for (size_t i = 0; i < slots.size(); ++i) {
      SlotRecord r{};
      std::memcpy(&r, base + i * kSlotBytes, sizeof r);
      const bool valid = r.magic == kSlotMagic && r.crc == slot_crc(r) && r.buffer_bytes == options.buffer_bytes;
      if (options.recover && valid && r.state == kSlotOpen) {
        slots[i].open = true;
        slots[i].log_id = r.log_id;
        slots[i].segment_id = r.segment_id;
        slots[i].replica_version = r.replica_version;
        continue;
      }
      if (options.recover && valid && r.state == kSlotClosed && r.close_bytes <= options.buffer_bytes) {
        // Closed before the crash, never flushed: flush it now, before
        // anything is served (what backup power would have done).
        Slot& s = slots[i];
        s.closed = true;
        s.log_id = r.log_id;
        s.segment_id = r.segment_id;
        s.replica_version = r.replica_version;
        s.close_bytes = r.close_bytes;
        s.close_checksum = r.close_checksum;
        std::unique_lock lock(mu);
        FERRY_RETURN_IF_ERROR(flush_slot(i, lock));
        continue;
      }
      // A fresh pool, or a free slot after a restart: pre-zeroed (§3.2).
      zero_buffer(i);
      write_slot(i);
    }
    const uint64_t flushable = options.storage_write_mb_per_s * 1'000'000ULL * options.power_holdup_ms / 1000;
    max_open = static_cast<uint32_t>(std::clamp<uint64_t>(flushable / options.buffer_bytes, 1, options.buffers));
    counters.max_open_buffers = max_open;
    update_gauges();
    if (options.flush_in_background) {
      pace_bytes = options.flush_chunk_bytes;
      store->set_paced_writes(pace_bytes);
      // Tagged as the host's storage, not its CPU: a simulator can slow the
      // disk (weight "<nic>/storage") apart from the RPC workers.
      flusher = rt->spawn(
          options.name + "/flusher", nic->name() + "/storage", [this] { flusher_main(); }, options.flusher_cpu);
    }
    return ok_status();
  }
};

Backup::Backup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Backup::~Backup() = default;

Result<std::unique_ptr<Backup>> Backup::create(nic::Nic& nic, pm::PersistenceDomain* domain,
                                               const BackupOptions& options) {
  if (options.buffers == 0) return invalid_argument("backup: buffers must be at least 1");
  if (options.buffer_bytes < kSegmentHeaderAppendBytes * 2 || options.buffer_bytes > UINT32_MAX ||
      options.buffer_bytes % 64 != 0) {
    return invalid_argument("backup: buffer_bytes must be a multiple of 64 between 128 B and 4 GiB");
  }
  if (options.media == BufferMedia::kPm && (domain == nullptr || options.pm_path.empty())) {
    return invalid_argument("backup: PM buffers need the host's persistence domain and a pm_path");
  }
  if (options.storage_dir.empty()) return invalid_argument("backup: storage_dir is required");
  if (options.storage_write_mb_per_s == 0 || options.power_holdup_ms == 0) {
    return invalid_argument("backup: storage_write_mb_per_s and power_holdup_ms must be positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->nic = &nic;
  impl->domain = domain;
  impl->options = options;
  impl->rt = options.runtime != nullptr ? options.runtime : &Runtime::threads();
  FERRY_ASSIGN_OR_RETURN(impl->store, SegmentStore::open(options.storage_dir, options.storage_mode));
  FERRY_RETURN_IF_ERROR(impl->init());
  return std::unique_ptr<Backup>(new Backup(std::move(impl)));
}

Result<nic::QueuePair*> Backup::Impl::new_link_locked(uint64_t log_id) {
  FERRY_RETURN_IF_ERROR(refuse_if_fenced(log_id));
  for (const auto& s : slots) {
    if (s.open && s.log_id == log_id && s.mr != nullptr) {
      return failed_precondition("log " + std::to_string(log_id) + " has buffers open on " + options.name +
                                 " through its current connection");
    }
  }
  cut_link_locked(log_id);  // the replaced connection (not a fence: the log goes on)
  links.erase(log_id);
  Link link;
  FERRY_ASSIGN_OR_RETURN(link.pd, nic->alloc_pd());
  nic::CqInitAttr cq_attr;
  cq_attr.cqe = 16;
  FERRY_ASSIGN_OR_RETURN(link.cq, nic->create_cq(cq_attr));
  nic::QpInitAttr qp_attr;
  qp_attr.send_cq = link.cq.get();
  qp_attr.recv_cq = link.cq.get();
  qp_attr.cap.max_send_wr = 1;
  qp_attr.cap.max_recv_wr = 1;
  FERRY_ASSIGN_OR_RETURN(link.qp, nic->create_qp(*link.pd, qp_attr));
  nic::QueuePair* qp = link.qp.get();
  links.emplace(log_id, std::move(link));
  return qp;
}

Status Backup::connect(uint64_t log_id, nic::QueuePair& primary_qp, const nic::Nic& primary_nic,
                       const nic::ConnectOptions& options) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  FERRY_ASSIGN_OR_RETURN(nic::QueuePair * qp, m.new_link_locked(log_id));
  nic::ConnectOptions o = options;
  o.access_flags = nic::kAccessRemoteWrite | nic::kAccessFlushGlobal | nic::kAccessFlushPersistent;
  Status st = nic::connect_qps(primary_qp, primary_nic, *qp, *m.nic, o);
  if (!st.ok()) m.links.erase(log_id);
  return st;
}

Status Backup::serve(cm::Listener& listener, std::string_view service) {
  Impl& m = *impl_;
  cm::Service svc;
  svc.nic = m.nic;
  svc.qp.access_flags = nic::kAccessRemoteWrite | nic::kAccessFlushGlobal | nic::kAccessFlushPersistent;
  svc.accept = [&m](const cm::Request& req) -> Result<cm::Accepted> {
    FERRY_ASSIGN_OR_RETURN(uint64_t log_id, detail::decode_data_path_request(req.private_data));
    std::lock_guard lock(m.mu);
    FERRY_ASSIGN_OR_RETURN(nic::QueuePair * qp, m.new_link_locked(log_id));
    cm::Accepted a;
    a.qp = qp;
    return a;
  };
  svc.done = [&m](nic::QueuePair& qp, const cm::Connection&, const Status& status) {
    if (status.ok()) return;
    // The handshake failed: drop the link unless a newer one replaced it.
    std::lock_guard lock(m.mu);
    for (auto it = m.links.begin(); it != m.links.end(); ++it) {
      if (it->second.qp.get() == &qp) {
        m.links.erase(it);
        return;
      }
    }
  };
  FERRY_RETURN_IF_ERROR(listener.serve(service, std::move(svc)));
  std::lock_guard lock(m.mu);
  m.served.emplace_back(&listener, std::string(service));
  return ok_status();
}

void Backup::fence(uint64_t log_id) {
  std::lock_guard lock(impl_->mu);
  impl_->fence_locked(log_id);
}

Result<OpenedBuffer> Backup::open(uint64_t log_id, uint64_t segment_id, uint64_t replica_version) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  FERRY_RETURN_IF_ERROR(m.refuse_if_fenced(log_id));
  if (m.find_open(log_id, segment_id) >= 0) {
    return already_exists("log " + std::to_string(log_id) + " segment " + std::to_string(segment_id) +
                          " is already open on " + m.options.name);
  }
  if (m.unflushed_count() >= m.max_open) {
    ++m.counters.opens_refused;
    return resource_exhausted(m.options.name + " refuses to open a buffer: " + std::to_string(m.max_open) +
                              " unflushed buffers is what its storage can absorb on backup power");
  }
  auto free_slot = std::find_if(m.slots.begin(), m.slots.end(), [](const Impl::Slot& s) { return !s.in_use(); });
  if (free_slot == m.slots.end()) {
    ++m.counters.opens_refused;
    return resource_exhausted(m.options.name + " has no free buffer");
  }
  const size_t i = static_cast<size_t>(free_slot - m.slots.begin());
  Impl::Slot& s = *free_slot;
  OpenedBuffer opened;
  opened.addr = reinterpret_cast<uint64_t>(m.buffer_at(i));
  opened.bytes = static_cast<uint32_t>(m.options.buffer_bytes);
  auto link = m.links.find(log_id);
  if (link != m.links.end()) {
    // Only this primary's QP (its PD) can reach the buffer, and only while it is open.
    FERRY_ASSIGN_OR_RETURN(s.mr, m.nic->reg_mr(*link->second.pd, m.buffer_at(i), m.options.buffer_bytes,
                                               nic::kAccessLocalWrite | nic::kAccessRemoteWrite |
                                                   nic::kAccessFlushGlobal | nic::kAccessFlushPersistent));
    opened.rkey = s.mr->rkey();
  }
  s.open = true;
  s.log_id = log_id;
  s.segment_id = segment_id;
  s.replica_version = replica_version;
  m.write_slot(i);
  ++m.counters.opens;
  m.update_gauges();
  return opened;
}

Status Backup::close(uint64_t log_id, uint64_t segment_id, uint64_t offset, uint32_t checksum) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  FERRY_RETURN_IF_ERROR(m.refuse_if_fenced(log_id));
  const int i = m.find_open(log_id, segment_id);
  if (i < 0) return m.not_open(log_id, segment_id);
  if (offset > m.options.buffer_bytes) return invalid_argument("close offset past the buffer");
  const size_t slot = static_cast<size_t>(i);
  Impl::Slot& s = m.slots[slot];
  s.mr.reset();  // no more remote writes into it
  // Closed on record (offset and checksum persisted) before anything else:
  // from here a crash leaves a closed buffer that a restart flushes.
  s.open = false;
  s.closed = true;
  s.close_bytes = offset;
  s.close_checksum = checksum;
  m.write_slot(slot);
  ++m.counters.closes;
  m.update_gauges();
  if (m.options.flush_in_background) {
    m.flush_queue.push_back(slot);
    m.flush_cv.notify_one();
    return ok_status();
  }
  return m.flush_slot(slot, lock);
}

Status Backup::set_version(uint64_t log_id, uint64_t segment_id, uint64_t replica_version) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  FERRY_RETURN_IF_ERROR(m.refuse_if_fenced(log_id));
  const int i = m.find_open(log_id, segment_id);
  if (i < 0) return m.not_open(log_id, segment_id);
  m.slots[static_cast<size_t>(i)].replica_version = replica_version;
  m.write_slot(static_cast<size_t>(i));
  ++m.counters.version_changes;
  return ok_status();
}

Status Backup::replicate(uint64_t log_id, uint64_t segment_id, uint64_t offset, std::span<const uint8_t> bytes) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  FERRY_RETURN_IF_ERROR(m.refuse_if_fenced(log_id));
  const int i = m.find_open(log_id, segment_id);
  if (i < 0) return m.not_open(log_id, segment_id);
  if (offset > m.options.buffer_bytes || bytes.size() > m.options.buffer_bytes - offset) {
    return invalid_argument("replicate past the end of the buffer");
  }
  uint8_t* dst = m.buffer_at(static_cast<size_t>(i)) + offset;
  if (m.region != nullptr) {
    m.region->store_persist(dst, bytes.data(), bytes.size());
  } else {
    std::memcpy(dst, bytes.data(), bytes.size());
  }
  ++m.counters.replicated_rpcs;
  m.counters.replicated_bytes += bytes.size();
  return ok_status();
}

std::vector<ReplicaInfo> Backup::find(uint64_t log_id) {
  std::lock_guard lock(impl_->mu);
  return impl_->find_locked(log_id);
}

std::vector<ReplicaInfo> Backup::fence_and_find(uint64_t log_id) {
  std::lock_guard lock(impl_->mu);
  impl_->fence_locked(log_id);  // first: no WRITE lands after the scan
  return impl_->find_locked(log_id);
}

std::vector<ReplicaInfo> Backup::Impl::find_locked(uint64_t log_id) {
  Impl& m = *this;
  ++m.counters.finds;
  std::vector<ReplicaInfo> out;
  const uint64_t scan0 = thread_cpu_time_ns();
  for (size_t i = 0; i < m.slots.size(); ++i) {
    const Impl::Slot& s = m.slots[i];
    if (!s.open || s.log_id != log_id) continue;
    const ScanResult scan = scan_buffer({m.buffer_at(i), m.options.buffer_bytes});
    ++m.counters.open_buffers_scanned;
    ReplicaInfo r;
    r.segment_id = s.segment_id;
    r.replica_version = s.replica_version;
    r.valid_bytes = scan.valid_bytes;
    r.checksum = scan.checksum;
    r.stop = scan.stop;
    r.zero_after_valid = scan.zero_after_valid;
    out.push_back(r);
  }
  const uint64_t verify0 = thread_cpu_time_ns();
  m.counters.scan_ns += verify0 - scan0;
  for (size_t i = 0; i < m.slots.size(); ++i) {  // closed, not yet flushed: served from the buffer
    const Impl::Slot& s = m.slots[i];
    if (!s.closed || s.log_id != log_id) continue;
    ReplicaInfo r;
    r.segment_id = s.segment_id;
    r.replica_version = s.replica_version;
    r.closed = true;
    r.valid_bytes = s.close_bytes;
    r.checksum = s.close_checksum;
    r.corrupted = !verify_closed({m.buffer_at(i), m.options.buffer_bytes}, log_id, s.segment_id, s.close_bytes,
                                 s.close_checksum)
                       .ok();
    out.push_back(r);
  }
  for (const StoredSegment& meta : m.store->list(log_id)) {
    if (m.find_closed(log_id, meta.segment_id) >= 0) continue;  // its flush is under way: reported above
    ReplicaInfo r;
    r.segment_id = meta.segment_id;
    r.replica_version = meta.replica_version;
    r.closed = true;
    r.valid_bytes = meta.bytes;
    r.checksum = meta.checksum;
    auto loaded = m.store->read(log_id, meta.segment_id);
    if (!loaded.ok() ||
        !verify_closed(loaded->bytes, log_id, meta.segment_id, meta.bytes, meta.checksum).ok()) {
      r.corrupted = true;  // §3.3.2: recovery must use another replica
    } else {
      m.loaded[{log_id, meta.segment_id}] = std::move(loaded->bytes);
    }
    out.push_back(r);
  }
  for (const ReplicaInfo& r : out) m.counters.closed_verified += r.closed ? 1 : 0;
  m.counters.verify_ns += thread_cpu_time_ns() - verify0;
  std::stable_sort(out.begin(), out.end(),
                   [](const ReplicaInfo& a, const ReplicaInfo& b) { return a.segment_id < b.segment_id; });
  return out;
}

Result<std::vector<uint8_t>> Backup::read(uint64_t log_id, uint64_t segment_id, bool closed, uint64_t offset,
                                          uint32_t max_bytes) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  ++m.counters.reads;
  std::span<const uint8_t> source;
  const int unflushed = closed ? m.find_closed(log_id, segment_id) : -1;
  if (unflushed >= 0) {
    source = {m.buffer_at(static_cast<size_t>(unflushed)), m.slots[static_cast<size_t>(unflushed)].close_bytes};
  } else if (closed) {
    auto it = m.loaded.find({log_id, segment_id});
    if (it == m.loaded.end()) {
      FERRY_ASSIGN_OR_RETURN(auto loaded, m.store->read(log_id, segment_id));
      it = m.loaded.emplace(std::make_pair(log_id, segment_id), std::move(loaded.bytes)).first;
    }
    source = it->second;
  } else {
    const int i = m.find_open(log_id, segment_id);
    if (i < 0) return m.not_open(log_id, segment_id);
    source = {m.buffer_at(static_cast<size_t>(i)), m.options.buffer_bytes};
  }
  if (offset > source.size()) return invalid_argument("read offset past the replica");
  const size_t n = std::min<size_t>(max_bytes, source.size() - offset);
  return std::vector<uint8_t>(source.begin() + static_cast<ptrdiff_t>(offset),
                              source.begin() + static_cast<ptrdiff_t>(offset + n));
}

Status Backup::free(uint64_t log_id, uint64_t segment_id) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  bool found = false;
  int i = m.find_open(log_id, segment_id);
  if (i < 0) i = m.find_closed(log_id, segment_id);
  if (i >= 0) {
    Impl::Slot& s = m.slots[static_cast<size_t>(i)];
    found = true;
    if (s.flushing) {
      s.free_after_flush = true;  // the flusher drops the stored copy and frees the buffer
    } else {
      s.mr.reset();
      m.zero_buffer(static_cast<size_t>(i));
      s.open = false;
      s.closed = false;  // a queued flush skips it
      m.write_slot(static_cast<size_t>(i));
    }
  }
  m.loaded.erase({log_id, segment_id});
  const Status removed = m.store->remove(log_id, segment_id);
  if (removed.ok()) {
    found = true;
  } else if (removed.code() != Code::kNotFound) {
    return removed;
  }
  if (!found) return not_found("log " + std::to_string(log_id) + " segment " + std::to_string(segment_id) +
                               " is not on " + m.options.name);
  ++m.counters.frees;
  m.update_gauges();
  return ok_status();
}

const BackupOptions& Backup::options() const { return impl_->options; }

BackupCounters Backup::counters() const {
  std::lock_guard lock(impl_->mu);
  return impl_->counters;
}

std::optional<BackupCounters> Backup::try_counters() const {
  std::unique_lock lock(impl_->mu, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  return impl_->counters;
}

void Backup::wait_flushed() const {
  std::unique_lock lock(impl_->mu);
  impl_->flushed_cv.wait(lock, [&] {
    return impl_->stop_flusher ||
           (impl_->flush_queue.empty() &&
            std::none_of(impl_->slots.begin(), impl_->slots.end(), [](const Impl::Slot& s) { return s.flushing || s.zeroing; }));
  });
}

std::span<const uint8_t> Backup::buffer(uint64_t log_id, uint64_t segment_id) const {
  std::lock_guard lock(impl_->mu);
  const int i = impl_->find_open(log_id, segment_id);
  if (i < 0) return {};
  return {impl_->buffer_at(static_cast<size_t>(i)), impl_->options.buffer_bytes};
}

pm::Region* Backup::region() const { return impl_->region; }

}  // namespace ferry::tailwind
