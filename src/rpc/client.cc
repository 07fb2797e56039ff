// RPC client machine: the registered arena, one QP per (session, worker) or,
// with delegation, per worker, connected to the server's workers.
#include "ferry/rpc/client.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "client_impl.h"

namespace ferry::rpc {

namespace {

uint32_t pow2_at_least(uint64_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

const char* commit_name(Commit c) {
  switch (c) {
    case Commit::kNone: return "none";
    case Commit::kReply: return "reply";
    case Commit::kSoftwareAck: return "software-ack";
    case Commit::kHardwareAck: return "hardware-ack";
    case Commit::kPersistentAck: return "persistent-ack";
  }
  return "?";
}

Result<std::unique_ptr<Client>> Client::create(nic::Engine& engine, nic::Nic& nic, Server& server,
                                                const ClientOptions& options) {
  if (options.sessions == 0 || options.sessions > 1024) return invalid_argument("rpc client: sessions must be 1..1024");
  if (options.max_inflight == 0 || options.max_inflight > 4096) {
    return invalid_argument("rpc client: max_inflight must be 1..4096");
  }
  if (server.workers() == 0) return failed_precondition("rpc client: the server has no workers");
  auto impl = std::make_unique<Impl>();
  Impl& c = *impl;
  c.engine = &engine;
  c.nic = &nic;
  c.server = &server;
  c.options = options;
  c.mode = server.mode();
  c.durable = server.durable();
  c.workers = server.workers();
  c.max_request_bytes = server.options().max_request_bytes;
  c.max_response_bytes = server.options().max_response_bytes;
  c.nilext_types.resize(65536);
  for (uint32_t t = 0; t < 65536; ++t) c.nilext_types[t] = server.nilext_allowed(static_cast<uint16_t>(t));
  auto pd = nic.alloc_pd();
  if (!pd.ok()) return pd.status();
  c.pd = std::move(pd.value());

  const uint32_t S = options.sessions;
  const uint32_t W = c.workers;
  const uint32_t nlinks = options.delegation ? W : S * W;
  const uint32_t through = c.through_link();
  const size_t per_slot = static_cast<size_t>(c.max_request_bytes) + c.max_response_bytes;
  c.slots_offset = 0;
  c.scratch_offset = static_cast<size_t>(S) * options.max_inflight * per_slot;
  size_t recv_offset = c.scratch_offset + static_cast<size_t>(S) * 64;
  c.arena_bytes = recv_offset + static_cast<size_t>(nlinks) * through * c.max_response_bytes;
  const size_t alloc = (c.arena_bytes + 4095) / 4096 * 4096;
  void* mem = std::aligned_alloc(4096, alloc);
  if (mem == nullptr) return resource_exhausted("rpc client: arena of " + std::to_string(alloc) + " bytes");
  std::memset(mem, 0, alloc);
  c.arena = std::unique_ptr<uint8_t[], void (*)(void*)>(static_cast<uint8_t*>(mem), std::free);
  auto mr = nic.reg_mr(*c.pd, c.arena.get(), c.arena_bytes, nic::kAccessLocalWrite);
  if (!mr.ok()) return mr.status();
  c.mr = std::move(mr.value());

  // Sessions and their CQs: each polls the links it owns.
  for (uint32_t s = 0; s < S; ++s) {
    const uint32_t owned = options.delegation ? (W + S - 1 - s) / S : W;
    auto si = std::make_unique<Session::Impl>(pow2_at_least(static_cast<uint64_t>(S) * options.max_inflight + 1),
                                              pow2_at_least(4ull * options.max_inflight + 1));
    si->client = &c;
    si->index = s;
    nic::CqInitAttr ca;
    ca.cqe = pow2_at_least(static_cast<uint64_t>(owned) * through * 3 + 64);
    auto cq = nic.create_cq(ca);
    if (!cq.ok()) return cq.status();
    si->cq = std::move(cq.value());
    si->slots.resize(options.max_inflight);
    for (uint32_t k = options.max_inflight; k > 0; --k) si->free_slots.push_back(k - 1);
    c.sessions.push_back(std::unique_ptr<Session>(new Session(s, std::move(si))));
  }
  // Links: created, connected and given their receive buffers.
  for (uint32_t l = 0; l < nlinks; ++l) {
    auto link = std::make_unique<Link>();
    link->index = l;
    link->worker = options.delegation ? l : l % W;
    link->owner = options.delegation ? l % S : l / W;
    link->recv_depth = through;
    link->recv_offset = recv_offset + static_cast<size_t>(l) * through * c.max_response_bytes;
    nic::QpInitAttr a;
    a.send_cq = a.recv_cq = c.sessions[link->owner]->impl_->cq.get();
    a.cap.max_send_wr = pow2_at_least(2ull * through + 2);
    a.cap.max_recv_wr = pow2_at_least(through);
    a.cap.max_send_sge = 1;
    auto qp = nic.create_qp(*c.pd, a);
    if (!qp.ok()) return qp.status();
    link->qp = std::move(qp.value());
    auto ep = server.connect(link->worker, *link->qp, nic, options.connect);
    if (!ep.ok()) return ep.status();
    link->endpoint = ep.value();
    for (uint32_t b = 0; b < through; ++b) {
      const nic::Sge sge = c.mr->sge(link->recv_offset + static_cast<size_t>(b) * c.max_response_bytes,
                                     c.max_response_bytes);
      if (Status st = link->qp->post_recv(nic::RecvWr{recv_wr_id(l, b), std::span<const nic::Sge>(&sge, 1)});
          !st.ok()) {
        return st;
      }
    }
    c.links.push_back(std::move(link));
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  // QPs before the CQs they complete into (the sessions').
  impl_->links.clear();
}

Session& Client::session(uint32_t i) {
  FERRY_ASSERT(i < impl_->sessions.size(), "rpc client: no such session");
  return *impl_->sessions[i];
}

uint32_t Client::sessions() const { return static_cast<uint32_t>(impl_->sessions.size()); }
const ClientOptions& Client::options() const { return impl_->options; }
uint32_t Client::queue_pairs() const { return static_cast<uint32_t>(impl_->links.size()); }

}  // namespace ferry::rpc
