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
#include "ferry/cm/cm.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/nic/connect.h"
#include "host.h"
#include "naive_node.h"
#include "naive_wire.h"
#include "wiring.h"

namespace ferry::hyperloop {

namespace {

using detail::alloc_buffer;
using detail::Buffer;
using detail::Host;
using detail::kAckSlotBytes;
using detail::kHeaderSlotBytes;
using detail::kNaiveHeaderBytes;
using detail::kPollBatch;
using detail::NaiveHeader;
using detail::finish_worker;
using detail::name_thread;
using detail::post_recv_slot;
using detail::run_event_replica;
using detail::serve;
using detail::Worker;
using Node = detail::NaiveNode;  // one replica (naive_node.h)

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

  // Memory of a group connected across processes: destroyed last.
  nic::SharedMemory remote_client_mem;
  nic::SharedMemory remote_rings;
  // The client's side: in process `client` (an emulated host) owns the PD
  // and the client memory, across processes the group does.
  nic::Nic* cnic = nullptr;
  nic::ProtectionDomain* cpd = nullptr;
  std::unique_ptr<Host> client;
  std::unique_ptr<nic::ProtectionDomain> remote_pd;
  std::unique_ptr<nic::MemoryRegion> remote_client_mr;
  std::span<uint8_t> client_mem;
  nic::MemoryRegion* client_mr = nullptr;
  uint8_t* rings = nullptr;  // ring_ops header slots, then ring_ops ack slots
  Buffer rings_heap;
  std::unique_ptr<nic::MemoryRegion> rings_mr;
  // Replica 0's region: where the head's gWRITE data and flush points go.
  uint64_t head_iova = 0;
  uint32_t head_rkey = 0;
  std::string remote_name;           // across processes: the group's name
  std::unique_ptr<detail::LinkSet> acks;  // the tail's ack service, served until connected
  std::unique_ptr<nic::CompletionQueue> send_cq;  // head's signaled SENDs (errors surface here)
  std::unique_ptr<nic::CompletionQueue> ack_cq;   // the tail's WRITE_WITH_IMM acknowledgments
  std::unique_ptr<nic::QueuePair> head;
  std::unique_ptr<nic::QueuePair> ack;

  uint64_t next_seq = 0;
  std::deque<Pending> pending;  // submission order == completion order
  Status failure;               // ok until the group fails

  std::vector<std::unique_ptr<Node>> replicas;

  ~Group() {
    unserve();
    replicas.clear();
    head.reset();
    ack.reset();
    send_cq.reset();
    ack_cq.reset();
    rings_mr.reset();
    remote_client_mr.reset();
    remote_pd.reset();
  }
  void unserve() {
    if (acks) acks->unserve();
  }

  size_t header_offset(uint64_t seq) const { return (seq % options.ring_ops) * kHeaderSlotBytes; }
  size_t ack_offset(uint64_t seq) const {
    return size_t{options.ring_ops} * kHeaderSlotBytes + (seq % options.ring_ops) * kAckSlotBytes;
  }
  std::string name() const { return "group " + std::to_string(id); }
};

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
  std::vector<Node*> poll_list;
  std::atomic<uint64_t> poll_generation{0};

  Group* find(GroupId gid) const { return gid < groups.size() ? groups[gid].get() : nullptr; }

  void run_poller(Worker& w);
  Status build_group(Group& g);
  Status build_client_side(Group& g);
  Status connect_remote(Group& g, const RemoteGroupOptions& ro);
  nic::Nic* nic = nullptr;  // a client created on a NIC: its groups connect to replica processes
  size_t poll_group(Group& g);
  size_t fail_group(Group& g, Status status);
  Status submit(Group& g, NaiveHeader h, Callback done,
                const std::function<Status(const std::function<bool()>&)>& wait);
};

void NaiveClient::Impl::run_poller(Worker& w) {
  if (options.replica_cpu >= 0) (void)pin_current_thread(options.replica_cpu);
  name_thread("naive-poll");
  std::vector<Node*> list;
  uint64_t seen = UINT64_MAX;
  while (!stop.load(std::memory_order_acquire)) {
    const uint64_t generation = poll_generation.load(std::memory_order_acquire);
    if (generation != seen) {
      std::lock_guard<std::mutex> lock(poll_mu);
      list = poll_list;
      seen = generation;
    }
    bool busy = false;
    for (Node* r : list) busy |= serve(*r, stop);
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
  auto client = std::unique_ptr<NaiveClient>(new NaiveClient(&engine, options));
  client->impl_->stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (client->impl_->stop_fd < 0) return internal_error("naive: eventfd failed");
  return client;
}

NaiveClient::NaiveClient(nic::Engine* engine, const NaiveOptions& options)
    : GroupClient(engine, options.client), impl_(std::make_unique<Impl>()) {
  impl_->engine = engine;
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

// The client's rings, CQs and QPs on g.cnic / g.cpd (both kinds of group).
Status NaiveClient::Impl::build_client_side(Group& g) {
  const GroupOptions& o = g.options;
  const uint32_t cq_depth = 2 * o.ring_ops;
  nic::Nic& cnic = *g.cnic;
  const size_t ring_bytes = size_t{o.ring_ops} * (kHeaderSlotBytes + kAckSlotBytes);
  if (g.remote_name.empty()) {
    FERRY_ASSIGN_OR_RETURN(g.rings_heap, alloc_buffer(ring_bytes));
    g.rings = g.rings_heap.get();
  } else {
    FERRY_ASSIGN_OR_RETURN(g.remote_rings, nic::SharedMemory::create(ring_bytes, "ferry-naive-client"));
    g.rings = g.remote_rings.data();
  }
  FERRY_ASSIGN_OR_RETURN(g.rings_mr,
                         cnic.reg_mr(*g.cpd, g.rings, ring_bytes, nic::kAccessLocalWrite | nic::kAccessRemoteWrite));
  nic::CqInitAttr cq_attr;
  cq_attr.cqe = cq_depth;
  FERRY_ASSIGN_OR_RETURN(g.send_cq, cnic.create_cq(cq_attr));
  FERRY_ASSIGN_OR_RETURN(g.ack_cq, cnic.create_cq(cq_attr));
  nic::QpInitAttr qa;
  qa.send_cq = g.send_cq.get();
  qa.recv_cq = g.send_cq.get();     // head receives nothing
  qa.cap.max_send_wr = o.ring_ops;  // <= 3 WRs per operation, <= ring_ops/4 operations in flight
  qa.cap.max_recv_wr = 1;
  FERRY_ASSIGN_OR_RETURN(g.head, cnic.create_qp(*g.cpd, qa));
  qa.send_cq = g.send_cq.get();  // ack sends nothing
  qa.recv_cq = g.ack_cq.get();
  qa.cap.max_send_wr = 1;
  qa.cap.max_recv_wr = o.ring_ops;
  FERRY_ASSIGN_OR_RETURN(g.ack, cnic.create_qp(*g.cpd, qa));
  return ok_status();
}

Status NaiveClient::Impl::build_group(Group& g) {
  const GroupOptions& o = g.options;
  const std::string prefix = "g" + std::to_string(g.id) + "-";
  FERRY_ASSIGN_OR_RETURN(g.client, detail::make_host(*engine, prefix + "client", o, /*pm=*/false));
  g.cnic = g.client->nic;
  g.cpd = g.client->pd.get();
  g.client_mem = std::span<uint8_t>(g.client->base(), g.client->region->size());
  g.client_mr = g.client->mr.get();
  for (uint32_t i = 0; i < o.replicas; ++i) {
    auto r = std::make_unique<Node>();
    r->index = i;
    r->replicas = o.replicas;
    r->ring_ops = o.ring_ops;
    r->region_bytes = o.region_bytes;
    r->tail = i + 1 == o.replicas;
    r->flush_verb = o.flush_verb;
    FERRY_ASSIGN_OR_RETURN(r->host,
                           detail::make_host(*engine, prefix + "r" + std::to_string(i), o, o.media == pm::Media::kPm));
    r->nic = r->host->nic;
    r->pd = r->host->pd.get();
    r->region_mr = r->host->mr.get();
    r->region_base = r->host->base();
    r->pm_region = r->host->region;
    g.replicas.push_back(std::move(r));
  }
  FERRY_RETURN_IF_ERROR(build_client_side(g));
  nic::Nic& cnic = *g.cnic;
  for (auto& rp : g.replicas) FERRY_RETURN_IF_ERROR(detail::create_naive_queues(*rp, options.mode == NaiveMode::kEvent));
  g.head_iova = g.replicas[0]->region_mr->iova();
  g.head_rkey = g.replicas[0]->region_mr->rkey();

  // The chain: client head -> R0 up, R_i down -> R_{i+1} up, tail down -> client ack.
  FERRY_RETURN_IF_ERROR(nic::connect_qps(*g.head, cnic, *g.replicas[0]->up, *g.replicas[0]->nic));
  for (uint32_t i = 0; i < o.replicas; ++i) {
    Node& r = *g.replicas[i];
    if (r.tail) {
      FERRY_RETURN_IF_ERROR(nic::connect_qps(*r.down, *r.nic, *g.ack, cnic));
      r.next_iova = g.rings_mr->iova() + size_t{o.ring_ops} * kHeaderSlotBytes;
      r.next_rkey = g.rings_mr->rkey();
    } else {
      Node& next = *g.replicas[i + 1];
      FERRY_RETURN_IF_ERROR(nic::connect_qps(*r.down, *r.nic, *next.up, *next.nic));
      r.next_iova = next.region_mr->iova();
      r.next_rkey = next.region_mr->rkey();
    }
    for (uint64_t slot = 0; slot < o.ring_ops; ++slot) FERRY_RETURN_IF_ERROR(post_recv_slot(r, slot));
  }
  // The tail's WRITE_WITH_IMM consumes a RECV; its payload goes to the ack ring.
  for (uint32_t i = 0; i < o.ring_ops; ++i) FERRY_RETURN_IF_ERROR(g.ack->post_recv(nic::RecvWr{}));
  return ok_status();
}

// A group whose replicas are NaiveReplicas in other processes: the tail
// connects to the client's ack service, the client to the head.
Status NaiveClient::Impl::connect_remote(Group& g, const RemoteGroupOptions& ro) {
  const GroupOptions& o = g.options;
  FERRY_RETURN_IF_ERROR(detail::attach_client_memory(g, *nic, "ferry-naive-client"));
  nic::Nic& cnic = *g.cnic;
  FERRY_RETURN_IF_ERROR(build_client_side(g));  // g.remote_name is set: shared memory, not heap
  cm::QpOptions link;
  link.access_flags = detail::kLinkAccess;
  FERRY_RETURN_IF_ERROR(cm::init_qp(*g.ack, link));
  for (uint32_t i = 0; i < o.ring_ops; ++i) FERRY_RETURN_IF_ERROR(g.ack->post_recv(nic::RecvWr{}));

  detail::AckReply reply;
  reply.slots = g.rings_mr->iova() + size_t{o.ring_ops} * kHeaderSlotBytes;
  reply.rkey = g.rings_mr->rkey();
  reply.stride = kAckSlotBytes;
  g.acks = std::make_unique<detail::LinkSet>("naive client of group " + ro.group, o, o.replicas - 1);
  FERRY_RETURN_IF_ERROR(g.acks->serve(*ro.listener, detail::naive_ack_service(ro.group), cnic, *g.ack));
  g.acks->open({cm::private_data_of(reply)});

  const std::vector<uint8_t> hello = cm::private_data_of(detail::hello_of(o, detail::kClientSender));
  FERRY_ASSIGN_OR_RETURN(cm::Connection conn, detail::connect_retrying(ro.head, detail::naive_up_service(ro.group),
                                                                        cnic, *g.head, hello, ro.timeout_ms));
  FERRY_ASSIGN_OR_RETURN(const detail::UpReply up,
                         detail::parse_up_reply(conn.private_data, o.replicas, "naive client of group " + ro.group));
  g.head_iova = up.region_iova[0];
  g.head_rkey = up.rkey;
  FERRY_RETURN_IF_ERROR(g.acks->wait_connected(ro.timeout_ms));
  g.unserve();
  return ok_status();
}

Result<std::unique_ptr<NaiveClient>> NaiveClient::create(nic::Nic& nic, const NaiveOptions& options) {
  auto client = std::unique_ptr<NaiveClient>(new NaiveClient(nic.engine(), options));
  client->impl_->nic = &nic;
  return client;
}

Result<GroupId> NaiveClient::connect_group(const RemoteGroupOptions& options) {
  return detail::add_connected_group(impl_->groups, impl_->nic != nullptr, options,
                                     [&](Group& g) { return impl_->connect_remote(g, options); });
}

Result<GroupId> NaiveClient::create_group(const GroupOptions& options) {
  if (impl_->engine == nullptr) {
    return failed_precondition("create_group: this client's NIC is daemon-attached; connect_group instead");
  }
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
      Node* rp = r.get();
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
  return g->client_mem;
}

Result<ReplicaView> NaiveClient::replica(GroupId gid, uint32_t index) {
  Group* g = impl_->find(gid);
  if (g == nullptr) return unknown_group(gid);
  if (index >= g->options.replicas) {
    return out_of_range(g->name() + " has " + std::to_string(g->options.replicas) + " replicas; no replica " +
                        std::to_string(index));
  }
  if (!g->remote_name.empty()) return failed_precondition("replica " + std::to_string(index) + " runs in another process");
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
  detail::encode_naive_header(h, std::span<uint8_t>(g.rings + slot, kHeaderSlotBytes));
  const nic::Sge data = g.client_mr->sge(h.offset, h.size);
  const nic::Sge header = g.rings_mr->sge(slot, kNaiveHeaderBytes);
  nic::SendWr wrs[3];
  const size_t n = build_hop(h, g.options.flush_verb, data, header, g.head_iova, g.head_rkey,
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
    if (engine != nullptr && !engine->threaded()) {
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
          std::span<const uint8_t>(g.rings + g.ack_offset(p.seq), kAckSlotBytes), g.options.replicas);
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
