// RPC server: options, handler registry, the workers' queues and threads,
// and connection setup.
#include "ferry/rpc/server.h"

#include <cstdlib>
#include <cstring>

#include "connect_wire.h"
#include "ferry/common/align.h"
#include "ferry/common/cpu.h"
#include "ferry/common/tsc.h"
#include "ferry/nic/connect.h"
#include "ferry/pm/domain.h"
#include "server_impl.h"

namespace ferry::rpc {

namespace {

bool pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

constexpr uint32_t kResponseSlots = 256;
constexpr uint32_t kServerSendDepth = 256;
constexpr uint32_t kMaxInline = 192;
constexpr uint32_t kMaxSendsOutstanding = 1024;
constexpr uint32_t kIdlePollsBeforeYield = 256;

Status validate(const ServerOptions& o) {
  if (o.workers == 0 || o.workers > 64) return invalid_argument("rpc server: workers must be 1..64");
  if (o.max_request_bytes < kRequestHeaderBytes || o.max_request_bytes > (1u << 20)) {
    return invalid_argument("rpc server: max_request_bytes must be in 32..1048576 (a request has a 32-byte header)");
  }
  if (o.max_response_bytes < kResponseHeaderBytes || o.max_response_bytes > (1u << 20)) {
    return invalid_argument("rpc server: max_response_bytes must be in 24..1048576 (a response has a 24-byte header)");
  }
  if (o.buffers == 0 || o.buffers > 65536) return invalid_argument("rpc server: buffers must be 1..65536");
  if (o.max_connections == 0 || o.max_connections > 65536) {
    return invalid_argument("rpc server: max_connections must be 1..65536");
  }
  if (o.multi_packet) {
    if (!pow2(o.stride_bytes) || o.stride_bytes < 64 || o.stride_bytes > 8192) {
      return invalid_argument("rpc server: stride_bytes must be a power of two in 64..8192");
    }
    if (o.buffer_bytes % o.stride_bytes != 0 || !pow2(o.buffer_bytes / o.stride_bytes) ||
        o.buffer_bytes / o.stride_bytes > 32768) {
      return invalid_argument("rpc server: buffer_bytes must be a power-of-two number (up to 32768) of strides");
    }
    if (o.max_request_bytes > o.buffer_bytes) {
      return invalid_argument("rpc server: max_request_bytes must fit one buffer (buffer_bytes)");
    }
  }
  if (o.durable_region != nullptr) {
    if (o.mode != Mode::kOrderedQueue) return invalid_argument("rpc server: durable mode is Ordered Queue only");
    if (o.durable_region->media() != pm::Media::kPm) return invalid_argument("rpc server: durable_region must be PM");
    const pm::PlatformConfig& platform = o.durable_region->domain().config();
    if (platform.ddio && !platform.eadr) {
      // H3: the READ behind a SEND drains the NIC's writes into the CPU
      // cache, which a power failure loses: the persistent ACK would not be.
      return failed_precondition(
          "rpc server: durable mode needs a platform where drained DMA is durable, and this one has DDIO on "
          "without eADR (NIC writes land in the volatile CPU cache); turn DDIO off (hint H3) or use eADR");
    }
    if (o.req_to_execute_group == 0) return invalid_argument("rpc server: req_to_execute_group must be at least 1");
  } else if (o.recover) {
    return invalid_argument("rpc server: recover needs a durable_region");
  }
  return ok_status();
}

}  // namespace

std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::kRawRpc: return "rawrpc";
    case Mode::kDeferredExec: return "deferred";
    case Mode::kOrderedQueue: return "oq";
  }
  return "?";
}

Result<Mode> parse_mode(std::string_view name) {
  if (name == "rawrpc" || name == "raw") return Mode::kRawRpc;
  if (name == "deferred" || name == "deferredexec") return Mode::kDeferredExec;
  if (name == "oq" || name == "ordered-queue") return Mode::kOrderedQueue;
  return invalid_argument("unknown rpc mode '" + std::string(name) + "' (rawrpc, deferred, oq)");
}

void Reply::append(std::span<const uint8_t> bytes) {
  if (!bytes.empty() && size_ + bytes.size() <= space_.size()) std::memcpy(space_.data() + size_, bytes.data(), bytes.size());
  size_ += bytes.size();  // beyond capacity: reported as kTooLarge, nothing written
}

WorkerCounters& WorkerCounters::operator+=(const WorkerCounters& o) {
  requests += o.requests;
  nilext += o.nilext;
  replies += o.replies;
  acks += o.acks;
  errors += o.errors;
  dropped += o.dropped;
  recv_errors += o.recv_errors;
  fillers += o.fillers;
  reposts += o.reposts;
  out_of_order += o.out_of_order;
  recovered += o.recovered;
  recovery_skipped += o.recovery_skipped;
  admission_refusals += o.admission_refusals;
  stall_probes += o.stall_probes;
  busy_ns += o.busy_ns;
  return *this;
}

Result<std::unique_ptr<Server>> Server::create(nic::Engine& engine, nic::Nic& nic, const ServerOptions& options) {
  if (nic.engine() != nullptr && nic.engine() != &engine) {
    return invalid_argument("rpc server: the NIC is not run by that engine");
  }
  return create(nic, options);
}

Result<std::unique_ptr<Server>> Server::create(nic::Nic& nic, const ServerOptions& options) {
  if (Status s = validate(options); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->engine = nic.engine();
  impl->nic = &nic;
  impl->options = options;
  impl->runtime = options.runtime != nullptr ? options.runtime : &Runtime::threads();
  impl->clock = options.clock != nullptr     ? options.clock
                : impl->runtime->simulated() ? &impl->runtime->clock()
                : Tsc::invariant()           ? static_cast<const Clock*>(&TscClock::instance())
                                             : &SteadyClock::instance();
  if (!options.multi_packet) {
    // One request per RECV: the buffer is the largest request.
    impl->options.buffer_bytes = round_up(options.max_request_bytes, 64);
    impl->options.stride_bytes = impl->options.buffer_bytes;
  }
  if (options.durable_region != nullptr) {
    const DurableLayout layout{impl->options.buffers, impl->options.buffer_bytes, impl->options.stride_bytes};
    const size_t need = options.durable_offset + static_cast<size_t>(options.workers) * layout.area_bytes();
    if (options.durable_offset % 256 != 0 || need > options.durable_region->size()) {
      return invalid_argument("rpc server: durable_region needs " + std::to_string(need) +
                              " bytes from a 256-byte aligned durable_offset");
    }
  }
  auto pd = nic.alloc_pd();
  if (!pd.ok()) return pd.status();
  impl->pd = std::move(pd.value());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  // No CM callback may run once the server's state starts to go.
  if (impl_->listener != nullptr) {
    for (const auto& name : impl_->services) (void)impl_->listener->unserve(name);
  }
  stop();
}

Status Server::register_handler(uint16_t type, HandlerInfo info, Handler handler) {
  if (impl_->started) return failed_precondition("rpc server: register handlers before start()");
  if (!handler) return invalid_argument("rpc server: empty handler");
  if (impl_->handlers.find(type) != nullptr)
    return {Code::kAlreadyExists, "rpc server: type " + std::to_string(type) + " has a handler"};
  if (info.nilext && !info.replay_safe && impl_->options.durable_region != nullptr) {
    return invalid_argument("rpc server: nilext handler '" + info.name +
                            "' on a durable server must declare replay_safe: recovery may run any suffix of the "
                            "executed nilext requests again (docs/juneberry.md)");
  }
  impl_->handlers.add(type, std::move(info), std::move(handler));
  return ok_status();
}

Status Server::set_admission(Admission admission) {
  if (impl_->started) return failed_precondition("rpc server: set_admission before start()");
  if (!admission.reserve || !admission.restore || !admission.release) {
    return invalid_argument("rpc server: an Admission needs reserve, restore and release");
  }
  impl_->admission = std::move(admission);
  return ok_status();
}

Status Server::start() {
  Impl& s = *impl_;
  if (s.started) return failed_precondition("rpc server: already started");
  if (s.handlers.empty()) return failed_precondition("rpc server: no handlers registered");
  const ServerOptions& o = s.options;
  const bool mp = o.multi_packet;
  const uint32_t strides = mp ? o.buffer_bytes / o.stride_bytes : 1;
  for (uint32_t i = 0; i < o.workers; ++i) {
    auto w = std::make_unique<Worker>();
    w->index = i;
    w->server = &s;
    w->strides = strides;
    w->stride_bytes = o.stride_bytes;
    w->idle_commit_ns = uint64_t{o.req_to_execute_idle_us} * 1000;
    const uint64_t positions = static_cast<uint64_t>(o.buffers) * strides;
    nic::CqInitAttr ca;
    ca.cqe = static_cast<uint32_t>(positions + o.buffers + kMaxSendsOutstanding);
    auto cq = s.nic->create_cq(ca);
    if (!cq.ok()) return cq.status();
    w->cq = std::move(cq.value());
    nic::SrqInitAttr sa;
    sa.max_wr = o.buffers;
    sa.max_sge = 1;
    if (mp) {
      sa.mp_strides = strides;
      sa.mp_stride_bytes = o.stride_bytes;
      sa.mp_max_message_bytes = round_up(o.max_request_bytes, o.stride_bytes);
    }
    auto srq = s.nic->create_srq(*s.pd, sa);
    if (!srq.ok()) return srq.status();
    w->srq = std::move(srq.value());
    const size_t ring_bytes = static_cast<size_t>(o.buffers) * o.buffer_bytes;
    if (o.durable_region != nullptr) {
      const DurableLayout layout = durable_layout();
      w->area = o.durable_region->data() + o.durable_offset + i * layout.area_bytes();
      w->control = reinterpret_cast<DurableControl*>(w->area);
      w->buffer_base = w->area + kDurableControlBytes;
      auto fmr = s.nic->reg_mr(*s.pd, w->area, kDurableControlBytes, nic::kAccessRemoteRead);
      if (!fmr.ok()) return fmr.status();
      w->flush_mr = std::move(fmr.value());
    } else {
      auto mem = nic::DmaMemory::allocate(*s.nic, ring_bytes, "ferry-rpc-recv");
      if (!mem.ok()) return mem.status();
      w->dram_buffers = std::move(mem).value();
      w->buffer_base = w->dram_buffers.data();
    }
    auto bmr = s.nic->reg_mr(*s.pd, w->buffer_base, ring_bytes, nic::kAccessLocalWrite);
    if (!bmr.ok()) return bmr.status();
    w->buffer_mr = std::move(bmr.value());
    w->positions.assign(positions, PositionState{});
    w->starts.assign(o.buffers, {});
    w->tokens.assign(o.buffers, 0);
    auto rmem = nic::DmaMemory::allocate(*s.nic, static_cast<size_t>(kResponseSlots) * o.max_response_bytes,
                                         "ferry-rpc-responses");
    if (!rmem.ok()) return rmem.status();
    w->response_memory = std::move(rmem).value();
    auto rmr = s.nic->reg_mr(*s.pd, w->response_memory.data(), w->response_memory.size(), nic::kAccessLocalWrite);
    if (!rmr.ok()) return rmr.status();
    w->response_mr = std::move(rmr.value());
    for (uint32_t k = kResponseSlots; k > 0; --k) w->free_slots.push_back(k - 1);
    s.workers.push_back(std::move(w));
  }
  if (o.durable_region != nullptr) {
    s.recovery.clear();
    for (auto& w : s.workers) {
      if (o.recover) {
        if (Status st = s.recover_durable_area(*w); !st.ok()) return st;
      }
      if (Status st = s.init_durable_area(*w); !st.ok()) return st;
    }
  }
  for (auto& w : s.workers) {
    // As many as Admission lets (all, without one); the rest as room frees.
    if (Status st = s.post_buffers(*w); !st.ok()) return st;
  }
  s.started = true;
  s.running.store(true, std::memory_order_release);
  if (o.threaded) {
    for (auto& w : s.workers) {
      Worker* wp = w.get();
      const int cpu = o.worker_cpus.empty() ? -1 : o.worker_cpus[wp->index % o.worker_cpus.size()];
      Runtime& rt = *s.runtime;
      std::string name = s.nic->name() + "/rpc-worker-" + std::to_string(wp->index);
      wp->thread = rt.spawn(
          std::move(name), s.nic->name(),
          [this, wp] {
            Impl& s = *impl_;
            Runtime& rt = *s.runtime;
            // A fiber must give the scheduler back on every empty poll; a thread
            // spins a while first (the CQ usually fills again within a few polls).
            const uint32_t spin = rt.simulated() ? 0 : kIdlePollsBeforeYield;
            uint32_t idle = 0;
            while (s.running.load(std::memory_order_acquire)) {
              if (s.poll(*wp) != 0) {
                idle = 0;
              } else if (++idle < spin) {
                cpu_relax();
              } else {
                rt.idle();  // let other threads of an oversubscribed host (or other fibers) run
              }
            }
          },
          cpu);
    }
  }
  return ok_status();
}

void Server::stop() {
  impl_->running.store(false, std::memory_order_release);
  for (auto& w : impl_->workers) {
    if (w->thread.joinable()) w->thread.join();
  }
}

void Server::halt() {
  impl_->halted.store(true, std::memory_order_seq_cst);
  impl_->running.store(false, std::memory_order_release);  // the workers leave their loops; stop() joins them
}

size_t Server::poll_worker(uint32_t w) {
  FERRY_ASSERT(!impl_->options.threaded, "poll_worker: the server runs its own worker threads");
  FERRY_ASSERT(w < impl_->workers.size(), "poll_worker: no such worker (start() first)");
  return impl_->poll(*impl_->workers[w]);
}

Result<Connection*> Server::Impl::new_connection(Worker& wk) {
  {
    std::lock_guard<std::mutex> lock(wk.mu);  // sim-seam: never held across a wait
    if (wk.owned_conns.size() >= options.max_connections) {
      return resource_exhausted("rpc server: worker " + std::to_string(wk.index) + " has max_connections QPs");
    }
  }
  nic::QpInitAttr a;
  a.send_cq = wk.cq.get();
  a.recv_cq = wk.cq.get();
  a.srq = wk.srq.get();
  a.cap.max_send_wr = kServerSendDepth;
  a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = 1;
  a.cap.max_inline_data = kMaxInline;
  auto qp = nic->create_qp(*pd, a);
  if (!qp.ok()) return qp.status();
  auto conn = std::make_unique<Connection>();
  conn->qp = std::move(qp.value());
  conn->qpn = conn->qp->qp_num();
  Connection* c = conn.get();
  // Known to the worker before any request can arrive on it; owned from
  // here on (a connection that fails stays, in ERROR, until the server
  // goes: the worker may have cached its address).
  std::lock_guard<std::mutex> lock(wk.mu);  // sim-seam: never held across a wait
  wk.shared_conns[c->qpn] = c;
  wk.owned_conns.push_back(std::move(conn));
  return c;
}

WorkerEndpoint Server::Impl::endpoint(Worker& wk) const {
  WorkerEndpoint e;
  e.worker = wk.index;
  if (wk.flush_mr) {
    e.flush_addr = wk.flush_mr->iova();
    e.flush_rkey = wk.flush_mr->rkey();
  }
  return e;
}

Result<WorkerEndpoint> Server::connect(uint32_t w, nic::QueuePair& client_qp, const nic::Nic& client_nic,
                                       const nic::ConnectOptions& options) {
  Impl& s = *impl_;
  if (!s.started) return failed_precondition("rpc server: connect() before start()");
  if (w >= s.workers.size()) return invalid_argument("rpc server: no worker " + std::to_string(w));
  Worker& wk = *s.workers[w];
  FERRY_ASSIGN_OR_RETURN(Connection * conn, s.new_connection(wk));
  FERRY_RETURN_IF_ERROR(nic::connect_qps(client_qp, client_nic, *conn->qp, *s.nic, options));
  return s.endpoint(wk);
}

ServerInfo Server::info() const {
  ServerInfo i;
  i.mode = impl_->options.mode;
  i.durable = durable();
  i.workers = impl_->options.workers;
  i.max_request_bytes = impl_->options.max_request_bytes;
  i.max_response_bytes = impl_->options.max_response_bytes;
  for (uint16_t t : impl_->handlers.types()) {
    if (nilext_allowed(t)) i.nilext_types.push_back(t);
  }
  return i;
}

Status Server::serve(cm::Listener& listener, std::string_view service) {
  Impl& s = *impl_;
  if (!s.started) return failed_precondition("rpc server: serve() before start()");
  if (s.listener != nullptr && s.listener != &listener) {
    return failed_precondition("rpc server: already serving on another listener");
  }
  const std::vector<uint8_t> info = detail::encode_server_info(this->info());
  cm::Service svc;
  svc.nic = s.nic;
  svc.accept = [this, info](const cm::Request& req) -> Result<cm::Accepted> {
    Impl& s = *impl_;
    FERRY_ASSIGN_OR_RETURN(uint32_t w, detail::decode_connect_request(req.private_data));
    if (w >= s.workers.size()) {
      return invalid_argument("rpc server: no worker " + std::to_string(w) + " (it has " +
                              std::to_string(s.workers.size()) + ")");
    }
    Worker& wk = *s.workers[w];
    FERRY_ASSIGN_OR_RETURN(Connection * conn, s.new_connection(wk));
    cm::Accepted a;
    a.qp = conn->qp.get();
    a.private_data = detail::encode_connect_reply(s.endpoint(wk), info);
    return a;
  };
  FERRY_RETURN_IF_ERROR(listener.serve(service, std::move(svc)));
  s.listener = &listener;
  s.services.emplace_back(service);
  return ok_status();
}

const ServerOptions& Server::options() const { return impl_->options; }
Mode Server::mode() const { return impl_->options.mode; }
uint32_t Server::workers() const { return impl_->options.workers; }
bool Server::durable() const { return impl_->options.durable_region != nullptr; }

DurableLayout Server::durable_layout() const {
  return DurableLayout{impl_->options.buffers, impl_->options.buffer_bytes, impl_->options.stride_bytes};
}

bool Server::nilext_allowed(uint16_t type) const {
  const HandlerEntry* h = impl_->handlers.find(type);
  return h != nullptr && h->info.nilext;
}

WorkerCounters Server::counters(uint32_t w) const {
  WorkerCounters c;
  if (w >= impl_->workers.size()) return c;
  const WorkerCounterSet& k = impl_->workers[w]->counters;
  c.requests = k.requests;
  c.nilext = k.nilext;
  c.replies = k.replies;
  c.acks = k.acks;
  c.errors = k.errors;
  c.dropped = k.dropped;
  c.recv_errors = k.recv_errors;
  c.fillers = k.fillers;
  c.reposts = k.reposts;
  c.out_of_order = k.out_of_order;
  c.recovered = k.recovered;
  c.recovery_skipped = k.recovery_skipped;
  c.admission_refusals = k.admission_refusals;
  c.stall_probes = k.stall_probes;
  c.busy_ns = static_cast<uint64_t>(static_cast<double>(k.busy_ticks.get()) * Tsc::ns_per_tick());
  return c;
}

uint32_t Server::posted_buffers(uint32_t w) const {
  if (w >= impl_->workers.size()) return 0;
  return static_cast<uint32_t>(impl_->workers[w]->posted_gauge.load(std::memory_order_relaxed));
}

WorkerCounters Server::counters() const {
  WorkerCounters sum;
  for (uint32_t w = 0; w < impl_->workers.size(); ++w) sum += counters(w);
  return sum;
}

std::vector<ScanStats> Server::recovery_stats() const { return impl_->recovery; }

}  // namespace ferry::rpc
