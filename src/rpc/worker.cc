// The worker's loop: poll the CQ, mark each receive completion at its SRQ
// position, execute strictly in position order (Rule 2, Figure 3 of the JUNE
// BERRY paper), reply as the mode says, repost executed buffers.
#include <algorithm>
#include <cstring>
#include <thread>

#include "ferry/common/tsc.h"
#include "server_impl.h"

namespace ferry::rpc {

namespace {

constexpr uint64_t kResponseWrFlag = 1ull << 63;  // send wr_id: a response slot to free (else inline)
constexpr uint64_t kProbeWrFlag = 1ull << 62;     // send wr_id: a stall probe (check_stall)
constexpr uint32_t kMaxInline = 192;
constexpr uint32_t kMaxSendsOutstanding = 1024;

}  // namespace

uint8_t* Server::Impl::position_bytes(Worker& w, uint64_t position) {
  const uint64_t sequence = position / w.strides;
  const uint64_t stride = position % w.strides;
  return w.buffer_base + (sequence % options.buffers) * options.buffer_bytes + stride * w.stride_bytes;
}

size_t Server::Impl::poll(Worker& w) {
  if (halted.load(std::memory_order_acquire)) return 0;  // a crashed host executes nothing more
  // Buffers Admission held back: room may have been freed since.
  if (w.posted < w.exec / w.strides + options.buffers) (void)post_buffers(w);
  nic::WorkCompletion wcs[32];
  auto n = w.cq->poll(std::span<nic::WorkCompletion>(wcs, 32));
  check_stall(w);
  if (!n.ok() || n.value() == 0) {
    // Idle for a while: the group commit of ReqToExecute need not wait (see
    // ServerOptions::req_to_execute_group). Not at every empty poll: under
    // load the CQ is empty between most arrivals.
    if (options.durable_region != nullptr && w.exec > w.persisted_rte) {
      const uint64_t now = clock->now_ns() | 1;  // never 0, which means "not idle"
      if (w.idle_since == 0) {
        w.idle_since = now;
      } else if (now - w.idle_since >= w.idle_commit_ns) {
        const uint64_t t0 = Tsc::now();
        persist_req_to_execute(w, w.exec);
        w.counters.busy_ticks.add(Tsc::now() - t0);
      }
    }
    return 0;
  }
  w.idle_since = 0;
  const uint64_t t0 = Tsc::now();
  for (uint32_t i = 0; i < n.value(); ++i) {
    const nic::WorkCompletion& wc = wcs[i];
    if (wc.opcode == nic::WcOpcode::kRecv || wc.opcode == nic::WcOpcode::kRecvRdmaWithImm) {
      record(w, wc);
    } else {
      on_send_done(w, wc);
    }
  }
  execute_in_order(w);
  w.counters.busy_ticks.add(Tsc::now() - t0);
  return n.value();
}

void Server::Impl::record(Worker& w, const nic::WorkCompletion& wc) {
  // wr_id is the buffer's sequence number; the stride is where the message
  // starts in it (0 on an ordinary SRQ).
  const uint64_t sequence = wc.wr_id;
  const uint64_t first = w.exec / w.strides;
  if (sequence < first || sequence >= w.posted || wc.stride_index >= w.strides) {
    w.counters.recv_errors.inc();  // not a position this worker has outstanding: cannot happen
    return;
  }
  const uint64_t position = sequence * w.strides + wc.stride_index;
  PositionState& p = w.positions[position % w.positions.size()];
  p.consumed = static_cast<uint16_t>(std::max<uint32_t>(1, wc.mp_strides_consumed));
  p.consumed = static_cast<uint16_t>(std::min<uint64_t>(p.consumed, w.strides - wc.stride_index));
  p.byte_len = wc.byte_len;
  p.qpn = wc.qp_num;
  if (wc.mp_filler) {
    p.state = PositionState::kFiller;
    w.counters.fillers.inc();
  } else if (wc.status != nic::WcStatus::kSuccess) {
    p.state = PositionState::kError;
    w.counters.recv_errors.inc();
  } else {
    p.state = PositionState::kMessage;
  }
  // Arrived after a later position did: the CQ order is not the SRQ order.
  if (w.any_seen && position < w.highest_seen) w.counters.out_of_order.inc();
  if (!w.any_seen || position > w.highest_seen) w.highest_seen = position;
  w.any_seen = true;
  if (!wc.mp_filler) w.starts[sequence % options.buffers].push_back(wc.stride_index);
}

void Server::Impl::check_stall(Worker& w) {
  const bool stalled = options.stall_probe_us != 0 && w.any_seen && w.highest_seen > w.exec &&
                       w.positions[w.exec % w.positions.size()].state == PositionState::kEmpty;
  if (!stalled) {
    w.stall_since = 0;
    return;
  }
  const uint64_t now = clock->now_ns() | 1;  // never 0, which means "not stalled"
  if (w.stall_since == 0) {
    w.stall_since = now;
    return;
  }
  if (now - w.stall_since < uint64_t{options.stall_probe_us} * 1000) return;
  w.stall_since = now;  // probe again a period later if it lasts
  {
    std::lock_guard<std::mutex> lock(w.mu);  // sim-seam: never held across a wait
    for (const auto& [qpn, c] : w.shared_conns) w.conns[qpn] = c;
  }
  nic::SendWr wr;
  wr.opcode = nic::WrOpcode::kRdmaWrite;  // zero-length: no memory, no rkey needed
  wr.flags = nic::kSendSignaled;
  wr.wr_id = kProbeWrFlag;
  for (const auto& [qpn, c] : w.conns) {
    if (halted.load(std::memory_order_relaxed)) break;
    if (c->qp->state() != nic::QpState::kRts || w.sends_outstanding >= kMaxSendsOutstanding) continue;
    if (c->qp->post_send(wr).ok()) ++w.sends_outstanding;
  }
  w.counters.stall_probes.inc();
}

void Server::Impl::on_send_done(Worker& w, const nic::WorkCompletion& wc) {
  if (w.sends_outstanding > 0) --w.sends_outstanding;
  if ((wc.wr_id & kResponseWrFlag) != 0) w.free_slots.push_back(static_cast<uint32_t>(wc.wr_id & ~kResponseWrFlag));
  // A failed response means the client's QP is gone; nothing to retry.
}

void Server::Impl::execute_in_order(Worker& w) {
  while (true) {
    PositionState& p = w.positions[w.exec % w.positions.size()];
    if (p.state == PositionState::kEmpty) break;  // the next request in buffer order has not landed
    const PositionState here = p;
    p = PositionState{};
    const uint64_t position = w.exec;
    if (here.state == PositionState::kMessage) handle(w, position, here);
    const uint64_t sequence = position / w.strides;
    w.exec = std::min<uint64_t>(position + here.consumed, (sequence + 1) * w.strides);
    if (w.exec % w.strides == 0) retire_buffer(w, sequence);
  }
  // ReqToExecute past the batch: a group commit, every req_to_execute_group
  // nilext requests (and when idle, in poll()). Until it is durable a power
  // failure makes recovery run those nilext requests again, in order --
  // harmless, since nilext requests are idempotent (§5.3: the non-idempotent
  // ones are software-controlled and persist it before their reply, in
  // handle()).
  if (options.durable_region != nullptr && w.unpersisted >= options.req_to_execute_group) {
    persist_req_to_execute(w, w.exec);
  }
}

Connection* Server::Impl::find_connection(Worker& w, uint32_t qpn) {
  auto it = w.conns.find(qpn);
  if (it != w.conns.end()) return it->second;
  std::lock_guard<std::mutex> lock(w.mu);  // sim-seam: never held across a wait
  auto s = w.shared_conns.find(qpn);
  if (s == w.shared_conns.end()) return nullptr;
  w.conns[qpn] = s->second;
  return s->second;
}

void Server::Impl::handle(Worker& w, uint64_t position, const PositionState& p) {
  const uint8_t* bytes = position_bytes(w, position);
  RequestView v;
  const RequestCheck check =
      parse_request(std::span<const uint8_t>(bytes, p.byte_len), /*exact=*/true, options.max_request_bytes, &v);
  if (check != RequestCheck::kValid) {
    // Nothing in it can be trusted, the request id included: count, drop.
    w.counters.dropped.inc();
    return;
  }
  Connection* c = find_connection(w, p.qpn);
  const bool oq = options.mode == Mode::kOrderedQueue;
  // Does the client wait for a software response? Not for a nilext request
  // in OQ mode: it committed at the ACK.
  const bool client_waits = !(oq && v.nilext);
  const HandlerEntry* h = handlers.find(v.type);
  auto error = [&](RpcError e) {
    w.counters.errors.inc();
    if (!client_waits || c == nullptr) {
      w.counters.dropped.inc();
      return;
    }
    const uint32_t slot = take_response_slot(w);
    uint8_t* out = w.response_memory.data() + static_cast<size_t>(slot) * options.max_response_bytes;
    const uint32_t size = write_response(std::span<uint8_t>(out, options.max_response_bytes), v.request_id, v.origin,
                                         ResponseKind::kError, static_cast<uint8_t>(e), 0);
    send_response(w, *c, slot, size);
  };
  if (h == nullptr) return error(RpcError::kUnknownType);
  if (v.nilext && !h->info.nilext) return error(RpcError::kNotNilext);
  if (v.nilext && options.mode == Mode::kDeferredExec && c != nullptr) {
    // DeferredExec: commit first with a software ACK, then execute.
    const uint32_t slot = take_response_slot(w);
    uint8_t* out = w.response_memory.data() + static_cast<size_t>(slot) * options.max_response_bytes;
    const uint32_t size = write_response(std::span<uint8_t>(out, options.max_response_bytes), v.request_id, v.origin,
                                         ResponseKind::kAck, 0, 0);
    send_response(w, *c, slot, size);
    w.counters.acks.inc();
  }
  const bool reply = client_waits && !(v.nilext && options.mode == Mode::kDeferredExec);
  const uint32_t slot = take_response_slot(w);
  uint8_t* out = w.response_memory.data() + static_cast<size_t>(slot) * options.max_response_bytes;
  Reply r(std::span<uint8_t>(out + kResponseHeaderBytes, options.max_response_bytes - kResponseHeaderBytes));
  Request req;
  req.type = v.type;
  req.nilext = v.nilext;
  req.worker = w.index;
  req.position = position;
  req.payload = v.payload;
  req.admission_token = w.tokens[(position / w.strides) % options.buffers];
  if (options.on_execute) options.on_execute(req);
  h->handler(req, r);
  w.counters.requests.inc();
  if (v.nilext) w.counters.nilext.inc();
  if (!reply || c == nullptr) {
    // Nobody waits on it (a nilext request committed by the NIC's ACK):
    // ReqToExecute passes it in a group commit (execute_in_order).
    ++w.unpersisted;
    w.free_slots.push_back(slot);
    return;
  }
  if (options.durable_region != nullptr) {
    // §5.3 ①②③: executed, ReqToExecute persisted past it, then the reply.
    // Every reply, a get's too: the worker has executed nilext requests
    // whose bytes may still be in the NIC's buffer (their READ not yet
    // served), and a reply can show their effects. Were ReqToExecute behind
    // them, a power failure that loses those bytes would make recovery run
    // the earlier requests again over what the reply showed, and skip the
    // lost ones: a committed read rolled back.
    persist_req_to_execute(w, position + p.consumed);
  }
  uint32_t size;
  if (r.size() > r.capacity()) {
    size = write_response(std::span<uint8_t>(out, options.max_response_bytes), v.request_id, v.origin,
                          ResponseKind::kError, static_cast<uint8_t>(RpcError::kTooLarge), 0);
    w.counters.errors.inc();
  } else {
    size = write_response(std::span<uint8_t>(out, options.max_response_bytes), v.request_id, v.origin,
                          ResponseKind::kReply, r.status(), static_cast<uint32_t>(r.size()));
  }
  send_response(w, *c, slot, size);
}

bool Server::Impl::wait_for_completions(Worker& w) {
  nic::WorkCompletion wcs[32];
  auto n = w.cq->poll(std::span<nic::WorkCompletion>(wcs, 32));
  if (n.ok()) {
    for (uint32_t i = 0; i < n.value(); ++i) {
      if (wcs[i].opcode == nic::WcOpcode::kRecv || wcs[i].opcode == nic::WcOpcode::kRecvRdmaWithImm) {
        record(w, wcs[i]);
      } else {
        on_send_done(w, wcs[i]);
      }
    }
  }
  // A manual engine is stepped by whoever drives it: this thread only if
  // the caller also drives the workers (one thread does both); a threaded
  // worker must not step it behind the caller's back.
  if (engine != nullptr && !engine->threaded() && !options.threaded) {
    engine->step();
  } else {
    runtime->idle();  // threads: yield; the simulator: park this worker's fiber
  }
  return n.ok();
}

uint32_t Server::Impl::take_response_slot(Worker& w) {
  // Every slot is waiting for its SEND to complete: collect completions
  // (receives are only marked, never executed from here).
  while (w.free_slots.empty() || w.sends_outstanding >= kMaxSendsOutstanding) {
    if (!wait_for_completions(w)) break;
  }
  FERRY_ASSERT(!w.free_slots.empty(), "rpc worker: no response slot (CQ in error)");
  const uint32_t slot = w.free_slots.back();
  w.free_slots.pop_back();
  return slot;
}

void Server::Impl::send_response(Worker& w, Connection& c, uint32_t slot, uint32_t size) {
  // A CM connection's QP stays in RTR until the listener has the client's
  // RTU, but the client sends from RTS, before its RTU arrives: wait for the
  // handshake to end (RTS, or ERROR if it fails; never RTR again). Posting
  // on RTR would be refused and the reply lost.
  while (c.qp->state() == nic::QpState::kRtr && running.load(std::memory_order_acquire)) wait_for_completions(w);
  if (halted.load(std::memory_order_seq_cst)) {
    w.free_slots.push_back(slot);  // the host crashed: what it would send now never leaves it
    w.counters.dropped.inc();
    return;
  }
  uint8_t* out = w.response_memory.data() + static_cast<size_t>(slot) * options.max_response_bytes;
  const nic::Sge sge = w.response_mr->sge(static_cast<size_t>(out - w.response_memory.data()), size);
  nic::SendWr wr;
  wr.opcode = nic::WrOpcode::kSend;
  wr.flags = nic::kSendSignaled;
  wr.sg_list = std::span<const nic::Sge>(&sge, 1);
  const bool inline_data = size <= kMaxInline;
  if (inline_data) {
    wr.flags |= nic::kSendInline;  // copied into the WQE: the slot is free at once
    wr.wr_id = 0;
  } else {
    wr.wr_id = kResponseWrFlag | slot;
  }
  while (true) {
    Status s = c.qp->post_send(wr);
    if (s.ok()) break;
    if (s.code() != Code::kResourceExhausted) {
      // The client's QP is in error (it went away): the response is moot.
      if (!inline_data) w.free_slots.push_back(slot);
      w.counters.dropped.inc();
      return;
    }
    wait_for_completions(w);  // send queue full: completions free it
  }
  ++w.sends_outstanding;
  if (inline_data) w.free_slots.push_back(slot);
  w.counters.replies.inc();
}

void Server::Impl::retire_buffer(Worker& w, uint64_t sequence) {
  // Every request in the buffer executed: it can take new ones. Durable: a
  // scan must start past it before its requests are invalidated and its
  // slot posted again (at most `buffers` lie between the two persisted
  // positions).
  if (options.durable_region != nullptr) {
    persist_req_to_execute(w, (sequence + 1) * w.strides);
    invalidate_buffer(w, sequence);
  }
  w.starts[sequence % options.buffers].clear();
  // No request of it runs again (durable: ReqToExecute is past it): what
  // the service set aside and its requests did not use goes back.
  uint64_t& token = w.tokens[sequence % options.buffers];
  if (admission.release && token != 0) admission.release(w.index, sequence, token);
  token = 0;
  w.posted_gauge.store(w.posted - w.exec / w.strides, std::memory_order_relaxed);
  (void)post_buffers(w);
}

Status Server::Impl::post_buffers(Worker& w) {
  const uint64_t target = w.exec / w.strides + options.buffers;
  while (w.posted < target) {
    const uint64_t sequence = w.posted;
    Status s = post_buffer(w, sequence);
    if (s.code() == Code::kResourceExhausted) {
      if (!w.admission_waiting) w.counters.admission_refusals.inc();  // once per wait, not per poll
      w.admission_waiting = true;
      return ok_status();  // asked again at the next poll
    }
    if (!s.ok()) return s;
    w.admission_waiting = false;
    if (sequence >= options.buffers) w.counters.reposts.inc();
  }
  return ok_status();
}

Status Server::Impl::post_buffer(Worker& w, uint64_t sequence) {
  FERRY_ASSERT(sequence == w.posted, "rpc worker: buffers are posted in sequence order");
  uint64_t token = 0;
  if (admission.reserve) {
    // Before the NIC can commit anything in it (Admission).
    auto t = admission.reserve(w.index, sequence);
    if (!t.ok()) return resource_exhausted("rpc worker: admission: " + t.status().message());
    token = t.value();
    FERRY_ASSERT(token != 0, "Admission::reserve returned the token 0");
  }
  if (options.durable_region != nullptr) {
    // Both before the NIC can use it: a scan that reaches the buffer finds
    // its token.
    persist_admission(w, sequence, token);
    persist_srq_tail(w, sequence + 1);
  }
  const size_t offset = (sequence % options.buffers) * options.buffer_bytes;
  const nic::Sge sge = w.buffer_mr->sge(offset, options.buffer_bytes);
  Status s = w.srq->post_recv(nic::RecvWr{sequence, std::span<const nic::Sge>(&sge, 1)});
  if (!s.ok()) {
    if (admission.release && token != 0) admission.release(w.index, sequence, token);
    return s.code() == Code::kResourceExhausted ? internal_error("rpc worker: SRQ full: " + s.message()) : s;
  }
  w.tokens[sequence % options.buffers] = token;
  ++w.posted;
  w.posted_gauge.store(w.posted - w.exec / w.strides, std::memory_order_relaxed);
  return s;
}

}  // namespace ferry::rpc
