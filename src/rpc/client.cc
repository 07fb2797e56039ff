// RPC client machine: the registered arena, one QP per (session, worker) or,
// with delegation, per worker, connected to the server's workers.
#include "ferry/rpc/client.h"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "client_impl.h"
#include "connect_wire.h"
#include "ferry/cm/cm.h"

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

namespace {

Status check_options(const ClientOptions& options) {
  if (options.sessions == 0 || options.sessions > 1024) return invalid_argument("rpc client: sessions must be 1..1024");
  if (options.max_inflight == 0 || options.max_inflight > 4096) {
    return invalid_argument("rpc client: max_inflight must be 1..4096");
  }
  return ok_status();
}

}  // namespace

// Builds the client machine's queues on `nic` for a server described by
// `info`, connecting each link's QP (RESET) with `connect_link`.
using ConnectLink = std::function<Result<WorkerEndpoint>(uint32_t worker, nic::QueuePair& qp)>;
struct ClientBuilder {
  static Result<std::unique_ptr<Client::Impl>> build(nic::Nic& nic, const ServerInfo& info,
                                                     const ClientOptions& options, const ConnectLink& connect_link);
};

Result<std::unique_ptr<Client::Impl>> ClientBuilder::build(nic::Nic& nic, const ServerInfo& info,
                                                           const ClientOptions& options,
                                                           const ConnectLink& connect_link) {
  if (info.workers == 0) return failed_precondition("rpc client: the server has no workers");
  auto impl = std::make_unique<Client::Impl>();
  Client::Impl& c = *impl;
  c.engine = nic.engine();
  c.nic = &nic;
  c.options = options;
  c.mode = info.mode;
  c.durable = info.durable;
  c.workers = info.workers;
  c.max_request_bytes = info.max_request_bytes;
  c.max_response_bytes = info.max_response_bytes;
  c.nilext_types.resize(65536);
  for (uint16_t t : info.nilext_types) c.nilext_types[t] = true;
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
  auto arena = nic::DmaMemory::allocate(nic, c.arena_bytes, "ferry-rpc-client");
  if (!arena.ok()) return arena.status();
  c.arena = std::move(arena).value();
  auto mr = nic.reg_mr(*c.pd, c.arena.data(), c.arena_bytes, nic::kAccessLocalWrite);
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
    auto ep = connect_link(link->worker, *link->qp);
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
  return impl;
}

Result<std::unique_ptr<Client>> Client::create(nic::Engine& engine, nic::Nic& nic, Server& server,
                                                const ClientOptions& options) {
  FERRY_RETURN_IF_ERROR(check_options(options));
  if (nic.engine() != nullptr && nic.engine() != &engine) {
    return invalid_argument("rpc client: the NIC is not run by that engine");
  }
  // An in-process server's clients live under its runtime unless told
  // otherwise: when its workers are fibers, so are its callers.
  ClientOptions o = options;
  if (o.runtime == nullptr) o.runtime = server.options().runtime;
  FERRY_ASSIGN_OR_RETURN(auto impl, ClientBuilder::build(nic, server.info(), o, [&](uint32_t w, nic::QueuePair& qp) {
                           return server.connect(w, qp, nic, o.connect);
                         }));
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<std::unique_ptr<Client>> Client::connect(nic::Nic& nic, std::string_view address, std::string_view service,
                                                 const ClientOptions& options, const ServerInfo* expect) {
  FERRY_RETURN_IF_ERROR(check_options(options));
  cm::ConnectOptions co;
  co.qp.path_mtu = options.connect.path_mtu;
  co.qp.timeout = options.connect.timeout;
  co.qp.retry_cnt = options.connect.retry_cnt;
  co.qp.rnr_retry = options.connect.rnr_retry;
  co.qp.min_rnr_timer = options.connect.min_rnr_timer;
  co.qp.max_rd_atomic = options.connect.max_rd_atomic;
  const std::string where = std::string(service) + " at " + std::string(address);
  // The server's parameters size the queues: the caller's expectation, or
  // what a first handshake with worker 0 says (its QP then stays behind on
  // the server, idle: pass `expect` to avoid it).
  ServerInfo info;
  if (expect != nullptr) {
    info = *expect;
  } else {
    FERRY_ASSIGN_OR_RETURN(auto pd, nic.alloc_pd());
    nic::CqInitAttr ca;
    ca.cqe = 4;
    FERRY_ASSIGN_OR_RETURN(auto cq, nic.create_cq(ca));
    nic::QpInitAttr qa;
    qa.send_cq = qa.recv_cq = cq.get();
    FERRY_ASSIGN_OR_RETURN(auto probe, nic.create_qp(*pd, qa));
    auto conn = cm::connect(address, service, nic, *probe, detail::encode_connect_request(0), co);
    if (!conn.ok()) return Status(conn.status().code(), "rpc client: " + where + ": " + conn.status().message());
    auto reply = detail::decode_connect_reply(conn.value().private_data);
    if (!reply.ok()) return Status(reply.status().code(), "rpc client: " + where + ": " + reply.status().message());
    info = reply.value().info;
  }
  auto check = [&](const ServerInfo& have) -> Status {
    auto differs = [&](const char* what, uint64_t want, uint64_t got) -> Status {
      return failed_precondition("rpc client: " + where + " has " + what + " " + std::to_string(got) + ", expected " +
                                 std::to_string(want));
    };
    if (info.mode != have.mode) return differs("mode", static_cast<int>(info.mode), static_cast<int>(have.mode));
    if (info.durable != have.durable) return differs("durable", info.durable, have.durable);
    if (info.workers != have.workers) return differs("workers", info.workers, have.workers);
    if (info.max_request_bytes != have.max_request_bytes) {
      return differs("max_request_bytes", info.max_request_bytes, have.max_request_bytes);
    }
    if (info.max_response_bytes != have.max_response_bytes) {
      return differs("max_response_bytes", info.max_response_bytes, have.max_response_bytes);
    }
    if (info.nilext_types != have.nilext_types) {
      return differs("nilext types (count)", info.nilext_types.size(), have.nilext_types.size());
    }
    return ok_status();
  };
  FERRY_ASSIGN_OR_RETURN(auto impl, ClientBuilder::build(nic, info, options, [&](uint32_t w, nic::QueuePair& qp) -> Result<WorkerEndpoint> {
                           auto conn = cm::connect(address, service, nic, qp, detail::encode_connect_request(w), co);
                           if (!conn.ok()) {
                             return Status(conn.status().code(), "rpc client: " + where + ", worker " +
                                                                     std::to_string(w) + ": " + conn.status().message());
                           }
                           auto decoded = detail::decode_connect_reply(conn.value().private_data);
                           if (!decoded.ok()) {
                             return Status(decoded.status().code(), "rpc client: " + where + ": " + decoded.status().message());
                           }
                           const detail::ConnectReply& reply = decoded.value();
                           FERRY_RETURN_IF_ERROR(check(reply.info));
                           if (reply.endpoint.worker != w) {
                             return invalid_argument("rpc client: " + where + " connected worker " +
                                                     std::to_string(reply.endpoint.worker) + " for " + std::to_string(w));
                           }
                           return reply.endpoint;
                         }));
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
