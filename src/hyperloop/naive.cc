// The Naive-RDMA baseline (HyperLoop §6): replica CPU threads receive each
// operation, apply it and forward it. The network operations per hop are
// HyperLoop's, so that what a comparison measures is CPU versus NIC
// triggering and nothing else:
//
//   client `head` --> R0 `up`;  R_i `down` --> R_{i+1} `up`;  R_{N-1} `down` --> client `ack`
//
//   gwrite   WRITE data [+ flush point] + SEND header
//   gcas     [flush point] + SEND header; each replica's CPU runs the CAS
//   gmemcpy  [flush point] + SEND header; each replica's CPU copies
//   gflush   flush point + SEND header; each replica's CPU persists what it
//            changed since its last gflush
//   tail     WRITE_WITH_IMM to the client: imm = seq, payload = the gcas
//            result map (nothing for the other primitives)
//
// The flush point is a 0-byte READ (or an IBTA FLUSH with flush_verb) and
// the SEND behind it is fenced: it leaves only when the READ response came
// back, i.e. after the next node's NIC drained its write buffer
// (pm/domain.h). So when a replica's CPU sees a flushed operation, every
// earlier DMA into its region is durable, and the CPU makes its own change
// durable after that -- never under a DMA write still in the NIC buffer.
// HyperLoop's gCAS and gMEMCPY flush on the replica's own NIC; the Naive
// replica has no NIC step there, so the upstream hop carries the flush point.
#include "ferry/hyperloop/naive.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/cpu.h"
#include "ferry/nic/connect.h"
#include "host.h"
#include "naive_wire.h"

namespace ferry::hyperloop {

namespace {

using detail::Host;
using detail::kNaiveHeaderBytes;
using detail::NaiveHeader;

// A replica's receive slot is larger than a header so that an oversized
// message is delivered, parsed and rejected, instead of failing the QP with
// a local length error (which would take the chain down).
constexpr size_t kRecvSlotBytes = 256;
constexpr size_t kForwardSlotBytes = 128;  // a header, cache-line multiple
constexpr size_t kHeaderSlotBytes = 128;   // the client's header ring
constexpr size_t kAckSlotBytes = 64;       // the tail writes 8 bytes per replica here
constexpr size_t kDirtyRangesMax = 64;
constexpr uint32_t kPollBatch = 16;

static_assert(kNaiveHeaderBytes <= kForwardSlotBytes && kNaiveHeaderBytes <= kHeaderSlotBytes &&
                  kNaiveHeaderBytes < kRecvSlotBytes,
              "a header fits every ring slot");
static_assert(8 * kMaxReplicas <= kAckSlotBytes, "the result map fits an ack slot");

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Result<Buffer> alloc_buffer(size_t bytes) {
  const size_t rounded = (bytes + 4095) & ~size_t{4095};
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, rounded));
  if (p == nullptr) return resource_exhausted("naive: out of memory for a " + std::to_string(bytes) + "-byte ring");
  std::memset(p, 0, rounded);
  return Buffer(p);
}

// Ranges a replica's CPU changed (gcas, gmemcpy without flush) since its last
// gflush, which persists them. Fixed capacity so the replica path never
// allocates; on overflow the next gflush persists the whole region.
class DirtyRanges {
 public:
  void add(uint64_t offset, uint64_t size) {
    if (all_) return;
    if (count_ > 0) {
      Range& last = ranges_[count_ - 1];
      if (offset <= last.offset + last.size && last.offset <= offset + size) {  // overlaps or touches: merge
        const uint64_t end = std::max(last.offset + last.size, offset + size);
        last.offset = std::min(last.offset, offset);
        last.size = end - last.offset;
        return;
      }
    }
    if (count_ == kDirtyRangesMax) {
      all_ = true;
      return;
    }
    ranges_[count_++] = Range{offset, size};
  }

  void persist(pm::Region& region) {
    if (all_) {
      region.persist(region.data(), region.size());
    } else {
      for (size_t i = 0; i < count_; ++i) region.persist(region.data() + ranges_[i].offset, ranges_[i].size);
    }
    count_ = 0;
    all_ = false;
  }

 private:
  struct Range {
    uint64_t offset;
    uint64_t size;
  };
  std::array<Range, kDirtyRangesMax> ranges_{};
  size_t count_ = 0;
  bool all_ = false;
};

// One replica of a group. Declaration order is teardown order reversed:
// QPs go before the CQs they use, CQs before their channel, the ring MR
// before its memory, and everything before the host (its PD and domain).
struct Replica {
  uint32_t index = 0;
  uint32_t replicas = 0;
  uint32_t ring_ops = 0;
  size_t region_bytes = 0;
  bool tail = false;
  bool flush_verb = false;

  std::unique_ptr<Host> host;
  Buffer rings;  // ring_ops receive slots, then ring_ops forward slots
  std::unique_ptr<nic::MemoryRegion> rings_mr;
  std::unique_ptr<nic::CompletionChannel> channel;  // kEvent only
  std::unique_ptr<nic::CompletionQueue> recv_cq;    // receives from upstream
  // Count-only: the signaled WR of each forwarded operation lands here so
  // the send ring's slots free; nobody needs the completions themselves.
  std::unique_ptr<nic::CompletionQueue> send_cq;
  std::unique_ptr<nic::QueuePair> up;
  std::unique_ptr<nic::QueuePair> down;

  // Where `down` writes: the next replica's region, or (tail) the client's
  // ack ring.
  uint64_t next_iova = 0;
  uint32_t next_rkey = 0;

  // Owned by the thread that serves this replica.
  uint64_t forwarded = 0;
  DirtyRanges dirty;
  bool failed = false;

  // Read by anyone (diagnostics).
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> malformed{0};
  std::atomic<uint64_t> errors{0};

  size_t recv_offset(uint64_t slot) const { return (slot % ring_ops) * kRecvSlotBytes; }
  size_t forward_offset(uint64_t n) const {
    return size_t{ring_ops} * kRecvSlotBytes + (n % ring_ops) * kForwardSlotBytes;
  }
};

struct Pending {
  uint64_t seq = 0;
  Primitive primitive = Primitive::kWrite;
  uint8_t execute_map = 0;
  uint64_t old_value = 0;
  Callback done;
};

// One group: the client host and its QPs, and the replicas. Replicas are
// declared last so they are torn down first; the client's QPs go before its
// CQs, ring MR and host.
struct Group {
  GroupId id = 0;
  GroupOptions options;

  std::unique_ptr<Host> client;
  Buffer rings;  // ring_ops header slots, then ring_ops ack slots
  std::unique_ptr<nic::MemoryRegion> rings_mr;
  std::unique_ptr<nic::CompletionQueue> send_cq;  // head's signaled SENDs (errors surface here)
  std::unique_ptr<nic::CompletionQueue> ack_cq;   // the tail's WRITE_WITH_IMM acknowledgments
  std::unique_ptr<nic::QueuePair> head;
  std::unique_ptr<nic::QueuePair> ack;

  uint64_t next_seq = 0;
  std::deque<Pending> pending;  // submission order == completion order
  Status failure;               // ok until the group fails

  std::vector<std::unique_ptr<Replica>> replicas;

  size_t header_offset(uint64_t seq) const { return (seq % options.ring_ops) * kHeaderSlotBytes; }
  size_t ack_offset(uint64_t seq) const {
    return size_t{options.ring_ops} * kHeaderSlotBytes + (seq % options.ring_ops) * kAckSlotBytes;
  }
  std::string name() const { return "group " + std::to_string(id); }
};

// One replica application thread. cpu_ns is what it used, stored as it exits.
struct Worker {
  std::thread thread;
  std::atomic<bool> exited{false};
  std::atomic<uint64_t> cpu_ns{0};
};

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

Status post_recv_slot(Replica& r, uint64_t slot) {
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

void apply(Replica& r, NaiveHeader& h) {
  pm::Region& region = *r.host->region;
  uint8_t* base = region.data();
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
          region.persist(base + h.offset, 8);
        } else {
          r.dirty.add(h.offset, 8);
        }
      }
      break;
    case Primitive::kMemcpy:
      std::memcpy(base + h.offset, base + h.src_offset, h.size);  // the parser rejected overlap
      if (h.flush) {
        region.persist(base + h.offset, h.size);
      } else {
        r.dirty.add(h.offset, h.size);
      }
      break;
    case Primitive::kFlush:
      // DMA writes were drained by the flush point before the header came;
      // what the CPU changed it persists itself.
      r.dirty.persist(region);
      break;
  }
}

Status forward(Replica& r, const NaiveHeader& h, const std::atomic<bool>& stop) {
  // A forward slot is reused ring_ops operations later; its SEND was
  // delivered before its operation completed, and the client keeps at most
  // ring_ops/4 operations outstanding, so nothing still reads it then.
  const size_t slot = r.forward_offset(r.forwarded++);
  encode_naive_header(h, std::span<uint8_t>(r.rings.get() + slot, kForwardSlotBytes));
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
    data = r.host->mr->sge(h.offset, h.size);
    header = r.rings_mr->sge(slot, kNaiveHeaderBytes);
    n = build_hop(h, r.flush_verb, data, header, r.next_iova, r.next_rkey, std::span<nic::SendWr, 3>(wrs));
  }
  return post_send_waiting(*r.down, std::span<const nic::SendWr>(wrs, n), stop);
}

void handle_recv(Replica& r, const nic::WorkCompletion& wc, const std::atomic<bool>& stop) {
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
      detail::parse_naive_header(std::span<const uint8_t>(r.rings.get() + r.recv_offset(slot), length), r.region_bytes);
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
bool serve(Replica& r, const std::atomic<bool>& stop) {
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
void run_event_replica(Replica& r, const std::atomic<bool>& stop, int stop_fd, int cpu, Worker& w) {
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

}  // namespace

// ---- NaiveClient ------------------------------------------------------------

struct NaiveClient::Impl {
  nic::Engine* engine = nullptr;
  NaiveOptions options;
  std::vector<std::unique_ptr<Group>> groups;  // GroupId = index

  std::atomic<bool> stop{false};
  int stop_fd = -1;  // eventfd: readable once the client shuts down (wakes kEvent threads)
  std::vector<std::unique_ptr<Worker>> workers;

  // kPoll: the replicas the polling thread serves. It copies the list when
  // `generation` moves (group creation), so the hot loop takes no lock.
  std::mutex poll_mu;
  std::vector<Replica*> poll_list;
  std::atomic<uint64_t> poll_generation{0};

  Group* find(GroupId gid) const { return gid < groups.size() ? groups[gid].get() : nullptr; }

  void run_poller(Worker& w);
  Status build_group(Group& g);
  size_t poll_group(Group& g);
  size_t fail_group(Group& g, Status status);
  Status submit(Group& g, NaiveHeader h, Callback done,
                const std::function<Status(const std::function<bool()>&)>& wait);
};

void NaiveClient::Impl::run_poller(Worker& w) {
  if (options.replica_cpu >= 0) (void)pin_current_thread(options.replica_cpu);
  name_thread("naive-poll");
  std::vector<Replica*> list;
  uint64_t seen = UINT64_MAX;
  while (!stop.load(std::memory_order_acquire)) {
    const uint64_t generation = poll_generation.load(std::memory_order_acquire);
    if (generation != seen) {
      std::lock_guard<std::mutex> lock(poll_mu);
      list = poll_list;
      seen = generation;
    }
    bool busy = false;
    for (Replica* r : list) busy |= serve(*r, stop);
    // A busy poller never gives its core away (as a DPDK/RDMA poll-mode
    // thread): under load the scheduler time-slices it, which is the cost
    // the paper measures.
    if (!busy) cpu_relax();
  }
  finish_worker(w);
}

static Status unknown_group(GroupId gid) { return not_found("unknown group " + std::to_string(gid)); }

Result<std::unique_ptr<NaiveClient>> NaiveClient::create(nic::Engine& engine, const NaiveOptions& options) {
  if (!engine.threaded() && dynamic_cast<const FakeClock*>(&engine.clock()) != nullptr) {
    return invalid_argument(
        "naive: replica threads run in real time; use a threaded engine or a manual one on a real clock, not a "
        "FakeClock");
  }
  if (options.mode != NaiveMode::kEvent && options.mode != NaiveMode::kPoll) {
    return invalid_argument("naive: unknown mode " + std::to_string(static_cast<int>(options.mode)));
  }
  if (options.replica_cpu < -1 || options.replica_cpu >= available_cpus()) {
    return invalid_argument("naive: replica_cpu " + std::to_string(options.replica_cpu) + " is not a CPU (0.." +
                            std::to_string(available_cpus() - 1) + ", or -1)");
  }
  auto client = std::unique_ptr<NaiveClient>(new NaiveClient(engine, options));
  client->impl_->stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (client->impl_->stop_fd < 0) return internal_error("naive: eventfd failed");
  return client;
}

NaiveClient::NaiveClient(nic::Engine& engine, const NaiveOptions& options)
    : GroupClient(&engine, options.client), impl_(std::make_unique<Impl>()) {
  impl_->engine = &engine;
  impl_->options = options;
}

NaiveClient::~NaiveClient() {
  // Threads first: they use the replicas' QPs and CQs, which go with the groups.
  impl_->stop.store(true, std::memory_order_release);
  if (impl_->stop_fd >= 0) {
    const uint64_t one = 1;
    (void)!::write(impl_->stop_fd, &one, sizeof(one));
  }
  for (auto& w : impl_->workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  impl_->groups.clear();
  if (impl_->stop_fd >= 0) ::close(impl_->stop_fd);
}

std::string_view NaiveClient::system() const {
  return impl_->options.mode == NaiveMode::kEvent ? "naive-event" : "naive-poll";
}

Status NaiveClient::Impl::build_group(Group& g) {
  const GroupOptions& o = g.options;
  const std::string prefix = "g" + std::to_string(g.id) + "-";
  FERRY_ASSIGN_OR_RETURN(g.client, detail::make_host(*engine, prefix + "client", o, /*pm=*/false));
  for (uint32_t i = 0; i < o.replicas; ++i) {
    auto r = std::make_unique<Replica>();
    r->index = i;
    r->replicas = o.replicas;
    r->ring_ops = o.ring_ops;
    r->region_bytes = o.region_bytes;
    r->tail = i + 1 == o.replicas;
    r->flush_verb = o.flush_verb;
    FERRY_ASSIGN_OR_RETURN(r->host,
                           detail::make_host(*engine, prefix + "r" + std::to_string(i), o, o.media == pm::Media::kPm));
    g.replicas.push_back(std::move(r));
  }

  // Every CQ that takes receives holds all of its QP's posted RECVs, so even
  // a QP failure (which flushes them all) cannot overrun it.
  const uint32_t cq_depth = 2 * o.ring_ops;

  // Client: the header ring (SEND source) and the ack ring (tail's target).
  nic::Nic& cnic = *g.client->nic;
  FERRY_ASSIGN_OR_RETURN(g.rings, alloc_buffer(size_t{o.ring_ops} * (kHeaderSlotBytes + kAckSlotBytes)));
  FERRY_ASSIGN_OR_RETURN(
      g.rings_mr, cnic.reg_mr(*g.client->pd, g.rings.get(), size_t{o.ring_ops} * (kHeaderSlotBytes + kAckSlotBytes),
                              nic::kAccessLocalWrite | nic::kAccessRemoteWrite));
  nic::CqInitAttr cq_attr;
  cq_attr.cqe = cq_depth;
  FERRY_ASSIGN_OR_RETURN(g.send_cq, cnic.create_cq(cq_attr));
  FERRY_ASSIGN_OR_RETURN(g.ack_cq, cnic.create_cq(cq_attr));
  nic::QpInitAttr qa;
  qa.send_cq = g.send_cq.get();
  qa.recv_cq = g.send_cq.get();     // head receives nothing
  qa.cap.max_send_wr = o.ring_ops;  // <= 3 WRs per operation, <= ring_ops/4 operations in flight
  qa.cap.max_recv_wr = 1;
  FERRY_ASSIGN_OR_RETURN(g.head, cnic.create_qp(*g.client->pd, qa));
  qa.send_cq = g.send_cq.get();  // ack sends nothing
  qa.recv_cq = g.ack_cq.get();
  qa.cap.max_send_wr = 1;
  qa.cap.max_recv_wr = o.ring_ops;
  FERRY_ASSIGN_OR_RETURN(g.ack, cnic.create_qp(*g.client->pd, qa));

  for (auto& rp : g.replicas) {
    Replica& r = *rp;
    nic::Nic& rnic = *r.host->nic;
    const size_t ring_bytes = size_t{o.ring_ops} * (kRecvSlotBytes + kForwardSlotBytes);
    FERRY_ASSIGN_OR_RETURN(r.rings, alloc_buffer(ring_bytes));
    FERRY_ASSIGN_OR_RETURN(r.rings_mr, rnic.reg_mr(*r.host->pd, r.rings.get(), ring_bytes, nic::kAccessLocalWrite));
    nic::CqInitAttr recv_attr;
    recv_attr.cqe = cq_depth;
    if (options.mode == NaiveMode::kEvent) {
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
    ua.cap.max_recv_wr = o.ring_ops;
    FERRY_ASSIGN_OR_RETURN(r.up, rnic.create_qp(*r.host->pd, ua));
    nic::QpInitAttr da;
    da.send_cq = r.send_cq.get();
    da.recv_cq = r.send_cq.get();  // down receives nothing
    da.cap.max_send_wr = o.ring_ops;
    da.cap.max_recv_wr = 1;
    FERRY_ASSIGN_OR_RETURN(r.down, rnic.create_qp(*r.host->pd, da));
  }

  // The chain: client head -> R0 up, R_i down -> R_{i+1} up, tail down -> client ack.
  FERRY_RETURN_IF_ERROR(nic::connect_qps(*g.head, cnic, *g.replicas[0]->up, *g.replicas[0]->host->nic));
  for (uint32_t i = 0; i < o.replicas; ++i) {
    Replica& r = *g.replicas[i];
    if (r.tail) {
      FERRY_RETURN_IF_ERROR(nic::connect_qps(*r.down, *r.host->nic, *g.ack, cnic));
      r.next_iova = g.rings_mr->iova() + size_t{o.ring_ops} * kHeaderSlotBytes;
      r.next_rkey = g.rings_mr->rkey();
    } else {
      Replica& next = *g.replicas[i + 1];
      FERRY_RETURN_IF_ERROR(nic::connect_qps(*r.down, *r.host->nic, *next.up, *next.host->nic));
      r.next_iova = next.host->mr->iova();
      r.next_rkey = next.host->mr->rkey();
    }
    for (uint64_t slot = 0; slot < o.ring_ops; ++slot) FERRY_RETURN_IF_ERROR(post_recv_slot(r, slot));
  }
  // The tail's WRITE_WITH_IMM consumes a RECV; its payload goes to the ack ring.
  for (uint32_t i = 0; i < o.ring_ops; ++i) FERRY_RETURN_IF_ERROR(g.ack->post_recv(nic::RecvWr{}));
  return ok_status();
}

Result<GroupId> NaiveClient::create_group(const GroupOptions& options) {
  FERRY_RETURN_IF_ERROR(validate_group_options(options));
  auto g = std::make_unique<Group>();
  g->id = static_cast<GroupId>(impl_->groups.size());
  g->options = options;
  Status built = impl_->build_group(*g);
  if (!built.ok()) {
    return Status(built.code(), "naive: creating group " + std::to_string(g->id) + ": " + built.message());
  }
  Group& group = *g;
  impl_->groups.push_back(std::move(g));

  if (impl_->options.mode == NaiveMode::kEvent) {
    for (auto& r : group.replicas) {
      auto w = std::make_unique<Worker>();
      Worker* wp = w.get();
      Replica* rp = r.get();
      const int cpu = impl_->options.replica_cpu;
      const int stop_fd = impl_->stop_fd;
      w->thread = std::thread([rp, wp, cpu, stop_fd, this] { run_event_replica(*rp, impl_->stop, stop_fd, cpu, *wp); });
      impl_->workers.push_back(std::move(w));
    }
  } else {
    {
      std::lock_guard<std::mutex> lock(impl_->poll_mu);
      for (auto& r : group.replicas) impl_->poll_list.push_back(r.get());
    }
    impl_->poll_generation.fetch_add(1, std::memory_order_acq_rel);
    if (impl_->workers.empty()) {  // one polling thread for every group, started with the first
      auto w = std::make_unique<Worker>();
      Worker* wp = w.get();
      w->thread = std::thread([wp, this] { impl_->run_poller(*wp); });
      impl_->workers.push_back(std::move(w));
    }
  }
  return group.id;
}

Result<std::span<uint8_t>> NaiveClient::client_memory(GroupId gid) {
  Group* g = impl_->find(gid);
  if (g == nullptr) return unknown_group(gid);
  return std::span<uint8_t>(g->client->base(), g->client->region->size());
}

Result<ReplicaView> NaiveClient::replica(GroupId gid, uint32_t index) {
  Group* g = impl_->find(gid);
  if (g == nullptr) return unknown_group(gid);
  if (index >= g->replicas.size()) {
    return out_of_range(g->name() + " has " + std::to_string(g->replicas.size()) + " replicas; no replica " +
                        std::to_string(index));
  }
  Host& host = *g->replicas[index]->host;
  return ReplicaView{host.domain.get(), host.region};
}

Result<GroupOptions> NaiveClient::group_options(GroupId gid) const {
  Group* g = impl_->find(gid);
  if (g == nullptr) return unknown_group(gid);
  return g->options;
}

Result<WireBytes> NaiveClient::wire_bytes(GroupId gid) const {
  Group* g = impl_->find(gid);
  if (g == nullptr) return unknown_group(gid);
  using detail::QpRole;
  WireBytes w;
  // The client's SEND carries the header (metadata) and the replicas forward
  // it; gWRITE data moves by WRITE on the same QPs.
  detail::add_traffic(w, *g->head, QpRole::kData);
  detail::add_traffic(w, *g->ack, QpRole::kResponder);
  for (const auto& r : g->replicas) {
    detail::add_traffic(w, *r->up, QpRole::kResponder);
    detail::add_traffic(w, *r->down, r->tail ? QpRole::kAcknowledge : QpRole::kData);
  }
  return w;
}

Result<uint32_t> NaiveClient::outstanding(GroupId gid) const {
  Group* g = impl_->find(gid);
  if (g == nullptr) return unknown_group(gid);
  return static_cast<uint32_t>(g->pending.size());
}

uint64_t NaiveClient::replica_cpu_ns() const {
  uint64_t total = 0;
  for (const auto& w : impl_->workers) {
    // Read the live clock first: if the thread exits after, the value read
    // is still what it had used by then; if before, `exited` says so.
    const uint64_t live = thread_cpu_time_ns(w->thread.native_handle());
    total += w->exited.load(std::memory_order_acquire) ? w->cpu_ns.load(std::memory_order_relaxed) : live;
  }
  return total;
}

// ---- client: submission ------------------------------------------------------

Status NaiveClient::Impl::submit(Group& g, NaiveHeader h, Callback done,
                                 const std::function<Status(const std::function<bool()>&)>& wait) {
  auto failed = [&] { return failed_precondition(g.name() + " failed earlier: " + g.failure.to_string()); };
  if (!g.failure.ok()) return failed();
  // A callback run while waiting may submit too, hence the loop.
  while (g.pending.size() >= g.options.window) {
    FERRY_RETURN_IF_ERROR(wait([&] { return g.pending.size() < g.options.window || !g.failure.ok(); }));
    if (!g.failure.ok()) return failed();
  }

  h.replicas = static_cast<uint8_t>(g.options.replicas);
  h.seq = g.next_seq;
  FERRY_ASSERT(detail::validate_naive_header(h, g.options.region_bytes).ok(), "naive: built a bad header");
  const size_t slot = g.header_offset(h.seq);
  detail::encode_naive_header(h, std::span<uint8_t>(g.rings.get() + slot, kHeaderSlotBytes));
  const nic::Sge data = g.client->mr->sge(h.offset, h.size);
  const nic::Sge header = g.rings_mr->sge(slot, kNaiveHeaderBytes);
  const Replica& head = *g.replicas[0];
  nic::SendWr wrs[3];
  const size_t n = build_hop(h, g.options.flush_verb, data, header, head.host->mr->iova(), head.host->mr->rkey(),
                             std::span<nic::SendWr, 3>(wrs));
  const std::span<const nic::SendWr> batch(wrs, n);

  // A full send ring frees as the NIC completes earlier SENDs; wait for it
  // without running callbacks (a callback could submit and take this seq).
  Status posted = g.head->post_send(batch);
  const uint64_t start = SteadyClock::instance().now_ns();
  while (posted.code() == Code::kResourceExhausted) {
    if (SteadyClock::instance().now_ns() - start > options.client.op_timeout_ns) {
      return timed_out(g.name() + ": the client's send queue stayed full: " + posted.message());
    }
    if (!engine->threaded()) {
      engine->step();
    } else {
      cpu_relax();
    }
    posted = g.head->post_send(batch);
  }
  if (!posted.ok()) {
    return internal_error(g.name() + ": posting " + std::string(primitive_name(h.primitive)) +
                          " failed: " + posted.to_string());
  }
  ++g.next_seq;
  g.pending.push_back(Pending{h.seq, h.primitive, h.execute_map, h.old_value, std::move(done)});
  return ok_status();
}

Status NaiveClient::gwrite_async(GroupId gid, uint64_t offset, uint32_t size, bool flush, Callback done) {
  Group* g = impl_->find(gid);
  if (g == nullptr) return unknown_group(gid);
  FERRY_RETURN_IF_ERROR(check_write_args(offset, size, g->options));
  if (size > detail::kNaiveMaxWriteBytes) {
    return invalid_argument("gwrite: " + std::to_string(size) + " bytes exceed the NIC's 2 GiB message limit");
  }
  NaiveHeader h;
  h.primitive = Primitive::kWrite;
  h.flush = flush;
  h.offset = offset;
  h.size = size;
  return impl_->submit(*g, h, std::move(done), [this](const std::function<bool()>& pred) { return wait_until(pred); });
}

Status NaiveClient::gcas_async(GroupId gid, uint64_t offset, uint64_t old_value, uint64_t new_value,
                               uint8_t execute_map, bool flush, Callback done) {
  Group* g = impl_->find(gid);
  if (g == nullptr) return unknown_group(gid);
  FERRY_RETURN_IF_ERROR(check_cas_args(offset, execute_map, g->options));
  NaiveHeader h;
  h.primitive = Primitive::kCas;
  h.flush = flush;
  h.offset = offset;
  h.size = 8;
  h.execute_map = execute_map;
  h.old_value = old_value;
  h.new_value = new_value;
  return impl_->submit(*g, h, std::move(done), [this](const std::function<bool()>& pred) { return wait_until(pred); });
}

Status NaiveClient::gmemcpy_async(GroupId gid, uint64_t src_offset, uint64_t dst_offset, uint32_t size, bool flush,
                                  Callback done) {
  Group* g = impl_->find(gid);
  if (g == nullptr) return unknown_group(gid);
  FERRY_RETURN_IF_ERROR(check_memcpy_args(src_offset, dst_offset, size, g->options));
  NaiveHeader h;
  h.primitive = Primitive::kMemcpy;
  h.flush = flush;
  h.offset = dst_offset;
  h.src_offset = src_offset;
  h.size = size;
  return impl_->submit(*g, h, std::move(done), [this](const std::function<bool()>& pred) { return wait_until(pred); });
}

Status NaiveClient::gflush_async(GroupId gid, Callback done) {
  Group* g = impl_->find(gid);
  if (g == nullptr) return unknown_group(gid);
  NaiveHeader h;
  h.primitive = Primitive::kFlush;
  h.flush = true;
  return impl_->submit(*g, h, std::move(done), [this](const std::function<bool()>& pred) { return wait_until(pred); });
}

// ---- client: completions -----------------------------------------------------

size_t NaiveClient::Impl::fail_group(Group& g, Status status) {
  g.failure = std::move(status);
  std::deque<Pending> failed;
  failed.swap(g.pending);
  for (Pending& p : failed) {
    OpResult r;
    r.status = g.failure;
    r.primitive = p.primitive;
    r.seq = p.seq;
    if (p.done) p.done(r);
  }
  return failed.size();
}

size_t NaiveClient::Impl::poll_group(Group& g) {
  if (!g.failure.ok()) return 0;
  // The head's SENDs: only their status matters (the ring slots free in the NIC).
  nic::WorkCompletion wcs[kPollBatch];
  auto sent = g.send_cq->poll(wcs);
  if (!sent.ok()) return fail_group(g, unavailable(g.name() + ": client send CQ: " + sent.status().message()));
  for (uint32_t i = 0; i < sent.value(); ++i) {
    if (wcs[i].status != nic::WcStatus::kSuccess) {
      return fail_group(g,
                        unavailable(g.name() + ": sending operation " + std::to_string(wcs[i].wr_id) +
                                    " to the head replica failed: " + std::string(nic::wc_status_name(wcs[i].status))));
    }
  }
  // Acknowledgments, one at a time: a callback may poll again (a synchronous
  // call inside it), and each must find the state it left.
  size_t ran = 0;
  for (;;) {
    nic::WorkCompletion wc;
    auto got = g.ack_cq->poll(std::span<nic::WorkCompletion>(&wc, 1));
    if (!got.ok()) return ran + fail_group(g, unavailable(g.name() + ": ack CQ: " + got.status().message()));
    if (got.value() == 0) break;
    if (wc.status != nic::WcStatus::kSuccess) {
      return ran + fail_group(g, unavailable(g.name() + ": the tail's acknowledgment failed: " +
                                             std::string(nic::wc_status_name(wc.status))));
    }
    if (g.pending.empty() || wc.opcode != nic::WcOpcode::kRecvRdmaWithImm ||
        wc.imm_data != static_cast<uint32_t>(g.pending.front().seq)) {
      // A replica dropped an operation (malformed header) or the chain
      // reordered: either way the group's replicas no longer agree.
      return ran +
             fail_group(g, data_loss(g.name() + ": acknowledgment for operation " + std::to_string(wc.imm_data) +
                                     (g.pending.empty() ? std::string(" with none outstanding")
                                                        : ", expected " + std::to_string(g.pending.front().seq))));
    }
    Status reposted = g.ack->post_recv(nic::RecvWr{});
    if (!reposted.ok()) return ran + fail_group(g, internal_error(g.name() + ": " + reposted.message()));
    Pending p = std::move(g.pending.front());
    g.pending.pop_front();
    OpResult r;
    r.primitive = p.primitive;
    r.seq = p.seq;
    if (p.primitive == Primitive::kCas) {
      const auto results = detail::decode_naive_results(
          std::span<const uint8_t>(g.rings.get() + g.ack_offset(p.seq), kAckSlotBytes), g.options.replicas);
      r.cas.executed = p.execute_map;
      for (uint32_t i = 0; i < g.options.replicas; ++i) {
        if ((p.execute_map & (1u << i)) == 0) continue;
        r.cas.original[i] = results[i];
        if (results[i] == p.old_value) r.cas.succeeded = static_cast<uint8_t>(r.cas.succeeded | (1u << i));
      }
    }
    ++ran;
    if (p.done) p.done(r);
    if (!g.failure.ok()) break;
  }
  return ran;
}

size_t NaiveClient::poll_completions() {
  size_t ran = 0;
  // By index: a callback may create a group.
  for (size_t i = 0; i < impl_->groups.size(); ++i) ran += impl_->poll_group(*impl_->groups[i]);
  return ran;
}

}  // namespace ferry::hyperloop
