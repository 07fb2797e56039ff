// The Naive-RDMA replica path (naive_node.h): what a replica's CPU does for
// every operation. Allocation-free once running.
#include "naive_node.h"

#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "ferry/common/cpu.h"

namespace ferry::hyperloop::detail {

Result<Buffer> alloc_buffer(size_t bytes) {
  const size_t rounded = (bytes + 4095) & ~size_t{4095};
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, rounded));
  if (p == nullptr) return resource_exhausted("naive: out of memory for a " + std::to_string(bytes) + "-byte ring");
  std::memset(p, 0, rounded);
  return Buffer(p);
}

Status create_naive_queues(NaiveNode& r, bool event_mode) {
  // Every CQ that takes receives holds all of its QP's posted RECVs, so even
  // a QP failure (which flushes them all) cannot overrun it.
  const uint32_t cq_depth = 2 * r.ring_ops;
  nic::Nic& rnic = *r.nic;
  const size_t ring_bytes = size_t{r.ring_ops} * (kRecvSlotBytes + kForwardSlotBytes);
  if (rnic.engine() != nullptr) {
    FERRY_ASSIGN_OR_RETURN(r.rings_heap, alloc_buffer(ring_bytes));
    r.rings = r.rings_heap.get();
  } else {
    FERRY_ASSIGN_OR_RETURN(r.rings_shared, nic::SharedMemory::create(ring_bytes, "ferry-naive-rings"));
    r.rings = r.rings_shared.data();
  }
  FERRY_ASSIGN_OR_RETURN(r.rings_mr, rnic.reg_mr(*r.pd, r.rings, ring_bytes, nic::kAccessLocalWrite));
  nic::CqInitAttr recv_attr;
  recv_attr.cqe = cq_depth;
  if (event_mode) {
    FERRY_ASSIGN_OR_RETURN(r.channel, rnic.create_comp_channel());
    recv_attr.channel = r.channel.get();
  }
  FERRY_ASSIGN_OR_RETURN(r.recv_cq, rnic.create_cq(recv_attr));
  nic::CqInitAttr count_attr;
  count_attr.count_only = true;
  FERRY_ASSIGN_OR_RETURN(r.send_cq, rnic.create_cq(count_attr));
  nic::QpInitAttr ua;
  ua.send_cq = r.send_cq.get();
  ua.recv_cq = r.recv_cq.get();
  ua.cap.max_send_wr = 1;  // up sends nothing
  ua.cap.max_recv_wr = r.ring_ops;
  FERRY_ASSIGN_OR_RETURN(r.up, rnic.create_qp(*r.pd, ua));
  nic::QpInitAttr da;
  da.send_cq = r.send_cq.get();
  da.recv_cq = r.send_cq.get();  // down receives nothing
  da.cap.max_send_wr = r.ring_ops;
  da.cap.max_recv_wr = 1;
  FERRY_ASSIGN_OR_RETURN(r.down, rnic.create_qp(*r.pd, da));
  return ok_status();
}

void naive_persist(NaiveNode& r, uint8_t* p, size_t n) {
  if (r.pm_region != nullptr) {
    r.pm_region->persist(p, n);
    return;
  }
  // A region file mapped shared (DAX or tmpfs): msync writes it back (a
  // no-op on tmpfs, which has nothing behind it).
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  (void)::msync(reinterpret_cast<void*>(start), end - start, MS_SYNC);
}

// ---- the hop: what one node posts for one operation ----------------------

// One hop with one doorbell: the gwrite's data WRITE, the flush point if the
// operation flushes, and the header SEND -- signaled so the send ring's slots
// free, fenced behind the flush point so it lands only after the next node's
// NIC drained its write buffer. `data` is used by gwrite only.
size_t build_hop(const NaiveHeader& h, bool flush_verb, const nic::Sge& data, const nic::Sge& header,
                 uint64_t target_iova, uint32_t target_rkey, std::span<nic::SendWr, 3> wrs) {
  size_t n = 0;
  if (h.primitive == Primitive::kWrite) {
    nic::SendWr& w = wrs[n++];
    w = nic::SendWr{};
    w.wr_id = h.seq;
    w.opcode = nic::WrOpcode::kRdmaWrite;
    w.sg_list = std::span<const nic::Sge>(&data, 1);
    w.remote_addr = target_iova + h.offset;
    w.rkey = target_rkey;
  }
  if (h.flush) {
    nic::SendWr& f = wrs[n++];
    f = nic::SendWr{};
    f.wr_id = h.seq;
    f.remote_addr = target_iova + h.offset;
    f.rkey = target_rkey;
    if (flush_verb) {
      f.opcode = nic::WrOpcode::kFlush;
      f.flush_persistent = true;
      // gwrite: its range. gflush: everything DMA put in the region. The CPU
      // primitives: drain only (length 0); the replica's CPU persists its change.
      if (h.primitive == Primitive::kWrite) f.flush_length = h.size;
      f.flush_whole_mr = h.primitive == Primitive::kFlush;
    } else {
      f.opcode = nic::WrOpcode::kRdmaRead;  // 0 bytes: drains the responder's NIC buffer, reads nothing
    }
  }
  nic::SendWr& s = wrs[n++];
  s = nic::SendWr{};
  s.wr_id = h.seq;
  s.opcode = nic::WrOpcode::kSend;
  s.flags = static_cast<uint8_t>(nic::kSendSignaled | (h.flush ? nic::kSendFence : 0));
  s.sg_list = std::span<const nic::Sge>(&header, 1);
  return n;
}

// ---- the replica path (replica threads; allocation-free) ------------------

Status post_recv_slot(NaiveNode& r, uint64_t slot) {
  const nic::Sge sge = r.rings_mr->sge(r.recv_offset(slot), kRecvSlotBytes);
  nic::RecvWr wr;
  wr.wr_id = slot;
  wr.sg_list = std::span<const nic::Sge>(&sge, 1);
  return r.up->post_recv(wr);
}

// Send-queue slots free when a later signaled WR completes, which the NIC
// does on its own; a full ring means waiting for that, not an error. (The
// ring holds 4 WRs per operation of the window, so this is rare.)
Status post_send_waiting(nic::QueuePair& qp, std::span<const nic::SendWr> wrs, const std::atomic<bool>& stop) {
  for (uint32_t spins = 1;; ++spins) {
    Status s = qp.post_send(wrs);
    if (s.code() != Code::kResourceExhausted || stop.load(std::memory_order_relaxed)) return s;
    if (spins % 64 == 0) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
}

void apply(NaiveNode& r, NaiveHeader& h) {
  uint8_t* base = r.region_base;
  switch (h.primitive) {
    case Primitive::kWrite:
      break;  // the data arrived by RDMA WRITE, placed before the header (RC order)
    case Primitive::kCas:
      if ((h.execute_map & (1u << r.index)) != 0) {
        // atomic_ref: atomic against NIC atomics on the same word, as a real CPU CAS is.
        uint64_t seen = h.old_value;
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + h.offset))
            .compare_exchange_strong(seen, h.new_value, std::memory_order_seq_cst);
        h.results[r.index] = seen;
        if (h.flush) {
          naive_persist(r, base + h.offset, 8);
        } else {
          r.dirty.add(h.offset, 8);
        }
      }
      break;
    case Primitive::kMemcpy:
      std::memcpy(base + h.offset, base + h.src_offset, h.size);  // the parser rejected overlap
      if (h.flush) {
        naive_persist(r, base + h.offset, h.size);
      } else {
        r.dirty.add(h.offset, h.size);
      }
      break;
    case Primitive::kFlush:
      // DMA writes were drained by the flush point before the header came;
      // what the CPU changed it persists itself.
      r.dirty.persist(base, r.region_bytes, [&](uint8_t* p, size_t n) { naive_persist(r, p, n); });
      break;
  }
}

Status forward(NaiveNode& r, const NaiveHeader& h, const std::atomic<bool>& stop) {
  // A forward slot is reused ring_ops operations later; its SEND was
  // delivered before its operation completed, and the client keeps at most
  // ring_ops/4 operations outstanding, so nothing still reads it then.
  const size_t slot = r.forward_offset(r.forwarded++);
  encode_naive_header(h, std::span<uint8_t>(r.rings + slot, kForwardSlotBytes));
  nic::SendWr wrs[3];
  size_t n = 0;
  nic::Sge results;
  nic::Sge data;
  nic::Sge header;
  if (r.tail) {
    nic::SendWr& w = wrs[n++];
    w.wr_id = h.seq;
    w.opcode = nic::WrOpcode::kRdmaWriteWithImm;
    w.flags = nic::kSendSignaled;
    w.imm_data = static_cast<uint32_t>(h.seq);
    w.remote_addr = r.next_iova + (h.seq % r.ring_ops) * kAckSlotBytes;
    w.rkey = r.next_rkey;
    if (h.primitive == Primitive::kCas) {
      results = r.rings_mr->sge(slot + detail::kNaiveResultsOffset, 8 * r.replicas);
      w.sg_list = std::span<const nic::Sge>(&results, 1);
    }
  } else {
    data = r.region_mr->sge(h.offset, h.size);
    header = r.rings_mr->sge(slot, kNaiveHeaderBytes);
    n = build_hop(h, r.flush_verb, data, header, r.next_iova, r.next_rkey, std::span<nic::SendWr, 3>(wrs));
  }
  return post_send_waiting(*r.down, std::span<const nic::SendWr>(wrs, n), stop);
}

void handle_recv(NaiveNode& r, const nic::WorkCompletion& wc, const std::atomic<bool>& stop) {
  if (wc.status != nic::WcStatus::kSuccess || wc.wr_id >= r.ring_ops) {
    // The up QP failed (its receives flush): the chain is broken here. The
    // client sees its own QPs fail or its operations time out.
    r.errors.fetch_add(1, std::memory_order_relaxed);
    r.failed = true;
    return;
  }
  const uint64_t slot = wc.wr_id;
  const size_t length = std::min<size_t>(wc.byte_len, kRecvSlotBytes);
  auto parsed =
      detail::parse_naive_header(std::span<const uint8_t>(r.rings + r.recv_offset(slot), length), r.region_bytes);
  // The header is copied out (or rejected): the slot can take the next message.
  if (!post_recv_slot(r, slot).ok()) {
    r.errors.fetch_add(1, std::memory_order_relaxed);
    r.failed = true;
    return;
  }
  if (!parsed.ok() || parsed.value().replicas != r.replicas) {
    // Untrusted input: drop and count. The operation never completes, which
    // the client notices (timeout, then an out-of-order acknowledgment).
    r.malformed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  NaiveHeader h = parsed.value();
  apply(r, h);
  if (!forward(r, h, stop).ok()) {
    r.errors.fetch_add(1, std::memory_order_relaxed);
    r.failed = true;
    return;
  }
  r.ops.fetch_add(1, std::memory_order_relaxed);
}

// Handles what the replica's receive CQ holds; true if there was anything.
bool serve(NaiveNode& r, const std::atomic<bool>& stop) {
  if (r.failed) return false;
  nic::WorkCompletion wcs[kPollBatch];
  auto n = r.recv_cq->poll(wcs);
  if (!n.ok()) {  // overrun: cannot happen with the CQ sized for every posted RECV
    r.errors.fetch_add(1, std::memory_order_relaxed);
    r.failed = true;
    return false;
  }
  for (uint32_t i = 0; i < n.value(); ++i) handle_recv(r, wcs[i], stop);
  return n.value() != 0;
}

void finish_worker(Worker& w) {
  w.cpu_ns.store(thread_cpu_time_ns(), std::memory_order_relaxed);
  w.exited.store(true, std::memory_order_release);
}

void name_thread(const std::string& name) { (void)pthread_setname_np(pthread_self(), name.substr(0, 15).c_str()); }

// kEvent: block on the completion channel when there is nothing to do (as
// ibv_get_cq_event does), or until `stop_fd` -- written once at shutdown and
// never drained, so it wakes every thread -- becomes readable.
void run_event_replica(NaiveNode& r, const std::atomic<bool>& stop, int stop_fd, int cpu, Worker& w) {
  if (cpu >= 0) (void)pin_current_thread(cpu);  // the CPU was checked at create()
  name_thread("naive-r" + std::to_string(r.index));
  while (!stop.load(std::memory_order_acquire)) {
    if (serve(r, stop)) continue;
    if (!r.failed) {
      // Arm, then poll again: a completion that arrived before arming
      // raised no event.
      (void)r.recv_cq->req_notify(false);
      if (serve(r, stop)) continue;
    }
    pollfd fds[2] = {{r.channel->fd(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) > 0 && (fds[0].revents & POLLIN) != 0) (void)r.channel->get_event(0);
  }
  finish_worker(w);
}


}  // namespace ferry::hyperloop::detail
