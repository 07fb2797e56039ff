// NaiveReplica: a Naive-RDMA replica in its own process
// (include/ferry/hyperloop/replica.h). Queues and the CPU path are
// naive_node.cc's; the wiring is HyperLoop's (wiring.h) on the naive.* services.
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "ferry/common/cpu.h"
#include "ferry/hyperloop/replica.h"
#include "naive_node.h"
#include "wiring.h"

namespace ferry::hyperloop {

struct NaiveReplica::Impl {
  ReplicaSpec spec;
  bool poll_mode = false;
  int cpu = -1;
  nic::Nic* nic = nullptr;
  std::unique_ptr<nic::ProtectionDomain> pd;
  std::unique_ptr<nic::MemoryRegion> region_mr;
  std::unique_ptr<detail::NaiveNode> node;
  std::atomic<bool> downstream_done{false};  // status() may ask from another thread
  std::unique_ptr<detail::LinkSet> up;        // the up service, open once downstream is done

  std::atomic<bool> stop{false};
  int stop_fd = -1;
  detail::Worker worker;

  detail::UpReply up_reply;

  ~Impl() {
    stop.store(true, std::memory_order_release);
    if (stop_fd >= 0) {
      const uint64_t one = 1;
      (void)!::write(stop_fd, &one, sizeof one);
    }
    if (worker.thread.joinable()) worker.thread.join();
    if (up) up->unserve();
    node.reset();
    region_mr.reset();
    pd.reset();
    if (stop_fd >= 0) ::close(stop_fd);
  }

  std::string who() const { return "naive replica " + std::to_string(spec.index) + " of group " + spec.group; }

  void run_poll() {
    if (cpu >= 0) (void)pin_current_thread(cpu);
    detail::name_thread("naive-poll");
    while (!stop.load(std::memory_order_acquire)) {
      if (!detail::serve(*node, stop)) cpu_relax();
    }
    detail::finish_worker(worker);
  }
};

NaiveReplica::NaiveReplica(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NaiveReplica::~NaiveReplica() = default;

Result<std::unique_ptr<NaiveReplica>> NaiveReplica::create(nic::Nic& nic, std::span<uint8_t> region,
                                                           const ReplicaSpec& spec, bool poll_mode, int cpu) {
  FERRY_RETURN_IF_ERROR(detail::check_replica_args(spec, region.size()));
  const GroupOptions& o = spec.options;
  auto impl = std::make_unique<Impl>();
  Impl& r = *impl;
  r.spec = spec;
  r.poll_mode = poll_mode;
  r.cpu = cpu;
  r.nic = &nic;
  r.stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (r.stop_fd < 0) return internal_error("naive replica: eventfd failed");
  FERRY_ASSIGN_OR_RETURN(r.pd, nic.alloc_pd());
  FERRY_ASSIGN_OR_RETURN(r.region_mr, nic.reg_mr(*r.pd, region.data(), o.region_bytes, nic::kAccessAll));
  r.node = std::make_unique<detail::NaiveNode>();
  detail::NaiveNode& n = *r.node;
  n.index = spec.index;
  n.replicas = o.replicas;
  n.ring_ops = o.ring_ops;
  n.region_bytes = o.region_bytes;
  n.tail = spec.index + 1 == o.replicas;
  n.flush_verb = o.flush_verb;
  n.nic = &nic;
  n.pd = r.pd.get();
  n.region_mr = r.region_mr.get();
  n.region_base = region.data();
  FERRY_RETURN_IF_ERROR(detail::create_naive_queues(n, !poll_mode));
  cm::QpOptions up;
  up.access_flags = detail::kLinkAccess;
  FERRY_RETURN_IF_ERROR(cm::init_qp(*n.up, up));
  for (uint64_t slot = 0; slot < o.ring_ops; ++slot) FERRY_RETURN_IF_ERROR(detail::post_recv_slot(n, slot));
  r.up_reply.rkey = r.region_mr->rkey();
  r.up_reply.count = 1;
  r.up_reply.region_iova[0] = r.region_mr->iova();
  r.up = std::make_unique<detail::LinkSet>(r.who(), o, spec.index == 0 ? detail::kClientSender : spec.index - 1);
  return std::unique_ptr<NaiveReplica>(new NaiveReplica(std::move(impl)));
}

Status NaiveReplica::serve(cm::Listener& listener) {
  Impl& r = *impl_;
  return r.up->serve(listener, detail::naive_up_service(r.spec.group), *r.nic, *r.node->up);
}

Status NaiveReplica::connect_downstream(std::string_view address) {
  Impl& r = *impl_;
  if (r.downstream_done) return failed_precondition(r.who() + ": downstream already connected");
  detail::NaiveNode& n = *r.node;
  const std::vector<uint8_t> hello = cm::private_data_of(detail::hello_of(r.spec.options, r.spec.index));
  const std::string service = n.tail ? detail::naive_ack_service(r.spec.group) : detail::naive_up_service(r.spec.group);
  Result<cm::Connection> conn =
      detail::connect_retrying(address, service, *r.nic, *n.down, hello, r.spec.connect_timeout_ms);
  if (!conn.ok()) {
    return Status(conn.status().code(),
                  r.who() + ": connecting downstream to " + std::string(address) + ": " + conn.status().message());
  }
  const std::span<const uint8_t> pd(conn.value().private_data);
  detail::UpReply reply = r.up_reply;
  if (n.tail) {
    FERRY_ASSIGN_OR_RETURN(const detail::AckReply ack, detail::parse_ack_reply(pd, detail::kAckSlotBytes, r.who()));
    n.next_iova = ack.slots;
    n.next_rkey = ack.rkey;
  } else {
    FERRY_ASSIGN_OR_RETURN(const detail::UpReply up,
                           detail::parse_up_reply(pd, r.spec.options.replicas - r.spec.index - 1, r.who()));
    n.next_iova = up.region_iova[0];
    n.next_rkey = up.rkey;
    reply.count = 1 + up.count;
    for (uint32_t i = 0; i < up.count; ++i) reply.region_iova[1 + i] = up.region_iova[i];
  }
  r.downstream_done = true;
  r.up_reply = reply;
  if (r.poll_mode) {
    r.worker.thread = std::thread([&r] { r.run_poll(); });
  } else {
    r.worker.thread = std::thread([&r] { detail::run_event_replica(*r.node, r.stop, r.stop_fd, r.cpu, r.worker); });
  }
  r.up->open({cm::private_data_of(reply)});
  return ok_status();
}

ReplicaStatus NaiveReplica::status() const {
  ReplicaStatus s;
  s.ready = impl_->downstream_done;
  s.upstream_links = impl_->up->connected();
  s.last_error = impl_->up->last_error();
  return s;
}

uint64_t NaiveReplica::ops() const { return impl_->node->ops.load(std::memory_order_relaxed); }

uint64_t NaiveReplica::cpu_ns() const {
  const detail::Worker& w = impl_->worker;
  if (w.exited.load(std::memory_order_acquire)) return w.cpu_ns.load(std::memory_order_relaxed);
  if (!w.thread.joinable()) return 0;
  return thread_cpu_time_ns(const_cast<std::thread&>(w.thread).native_handle());
}

}  // namespace ferry::hyperloop
