// A client session: its calls, what commits each one, and (with delegation)
// carrying other sessions' calls on the links it owns.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "client_impl.h"

namespace ferry::rpc {

namespace {

Status status_of(RpcError e) {
  switch (e) {
    case RpcError::kUnknownType: return not_found("rpc: the server has no handler for this type");
    case RpcError::kNotNilext: return invalid_argument("rpc: the server refused a nilext request of this type");
    case RpcError::kMalformed: return invalid_argument("rpc: the server found the request malformed");
    case RpcError::kTooLarge: return resource_exhausted("rpc: the reply exceeded max_response_bytes");
  }
  return internal_error("rpc: unknown error response");
}

}  // namespace

Session::Session(uint32_t index, std::unique_ptr<Impl> impl) : index_(index), impl_(std::move(impl)) {}
Session::~Session() = default;

uint8_t* Session::Impl::request_area(uint32_t slot) {
  const Client::Impl& c = *client;
  const size_t per_slot = static_cast<size_t>(c.max_request_bytes) + c.max_response_bytes;
  return c.arena.data() + c.slots_offset + (static_cast<size_t>(index) * c.options.max_inflight + slot) * per_slot;
}

uint8_t* Session::Impl::response_area(uint32_t slot) { return request_area(slot) + client->max_request_bytes; }

uint32_t Session::inflight() const { return impl_->in_use; }

SessionCounters Session::counters() const {
  const SessionCounterSet& k = impl_->counters;
  return SessionCounters{k.calls, k.committed, k.failed, k.delegated, k.carried, k.stray_responses};
}

Status Session::call_async(uint16_t type, uint64_t route, std::span<const uint8_t> payload, bool nilext,
                           Callback done) {
  Impl& s = *impl_;
  Client::Impl& c = *s.client;
  if (payload.size() + kRequestHeaderBytes > c.max_request_bytes) {
    return invalid_argument("rpc: payload of " + std::to_string(payload.size()) + " bytes exceeds the server's " +
                            std::to_string(c.max_request_bytes) + "-byte requests (32 of them header)");
  }
  if (nilext && !c.nilext_types[type]) {
    return invalid_argument("rpc: type " + std::to_string(type) + " cannot be nilext (it returns state or is not idempotent)");
  }
  const uint32_t worker = static_cast<uint32_t>(route % c.workers);
  Link& link = c.link_for(s.index, worker);
  if (link.failed) return unavailable("rpc: the connection to worker " + std::to_string(worker) + " failed");
  if (s.free_slots.empty()) {
    return resource_exhausted("rpc: " + std::to_string(c.options.max_inflight) + " calls in flight; poll() first");
  }
  const uint32_t k = s.free_slots.back();
  s.free_slots.pop_back();
  ++s.in_use;
  Slot& slot = s.slots[k];
  slot.busy = true;
  slot.finished = false;
  slot.worker = worker;
  slot.generation++;
  slot.id = (static_cast<uint64_t>(slot.generation) << 32) | (static_cast<uint64_t>(s.index) << 16) | k;
  slot.done = std::move(done);
  // What commits it, and what must still arrive before the slot is reused.
  const bool oq = c.mode == Mode::kOrderedQueue;
  if (nilext && oq && c.durable) {
    slot.expect = Commit::kPersistentAck;
    slot.waiting = Slot::kNeedRead;  // the SEND before it is unsignaled
  } else if (nilext && oq) {
    slot.expect = Commit::kHardwareAck;
    slot.waiting = Slot::kNeedSend;
  } else if (nilext && c.mode == Mode::kDeferredExec) {
    slot.expect = Commit::kSoftwareAck;
    slot.waiting = Slot::kNeedSend | Slot::kNeedResponse;
  } else {
    slot.expect = Commit::kReply;
    slot.waiting = Slot::kNeedSend | Slot::kNeedResponse;
  }
  uint8_t* out = s.request_area(k);
  if (!payload.empty()) std::memcpy(out + kRequestHeaderBytes, payload.data(), payload.size());
  const uint32_t size = seal_request(std::span<uint8_t>(out, c.max_request_bytes), type,
                                     nilext ? kRequestNilext : 0, slot.id, s.index, static_cast<uint32_t>(payload.size()));
  s.counters.calls.inc();
  if (link.owner == s.index) {
    if (Status st = s.post(link, s.index, k, size, nilext); !st.ok()) {
      slot.done = nullptr;
      slot.busy = false;
      slot.waiting = 0;
      s.free_slots.push_back(k);
      --s.in_use;
      return st;
    }
    return ok_status();
  }
  // Delegation: the link's owner posts it.
  Session::Impl& owner = *c.sessions[link.owner]->impl_;
  const bool pushed = owner.inbox.push(Delegated{s.index, k, worker, size, static_cast<uint8_t>(nilext)});
  FERRY_ASSERT(pushed, "rpc: an owner's inbox holds every session's slots; it cannot be full");
  s.counters.delegated.inc();
  return ok_status();
}

Status Session::Impl::post(Link& link, uint32_t initiator, uint32_t slot, uint32_t size, bool nilext) {
  Client::Impl& c = *client;
  Session::Impl& init = *c.sessions[initiator]->impl_;
  const uint8_t* bytes = init.request_area(slot);
  const nic::Sge sge = c.mr->sge(static_cast<size_t>(bytes - c.arena.data()), size);
  nic::SendWr wrs[2];
  wrs[0].opcode = nic::WrOpcode::kSend;
  wrs[0].sg_list = std::span<const nic::Sge>(&sge, 1);
  wrs[0].wr_id = send_wr_id(kWrSend, initiator, slot);
  uint32_t n = 1;
  nic::Sge read_sge;
  if (nilext && c.mode == Mode::kOrderedQueue && c.durable) {
    // JUNE BERRY-D: the SEND unsignaled, a 1-byte READ on the same QP behind
    // it, one doorbell; the READ cannot complete before the SEND's data is
    // out of the server NIC's buffer (durable, DDIO off).
    wrs[0].flags = 0;
    read_sge = c.mr->sge(c.scratch_offset + static_cast<size_t>(index) * 64, 1);
    wrs[1].opcode = nic::WrOpcode::kRdmaRead;
    wrs[1].flags = nic::kSendSignaled;
    wrs[1].sg_list = std::span<const nic::Sge>(&read_sge, 1);
    wrs[1].remote_addr = link.endpoint.flush_addr;
    wrs[1].rkey = link.endpoint.flush_rkey;
    wrs[1].wr_id = send_wr_id(kWrRead, initiator, slot);
    n = 2;
  } else {
    wrs[0].flags = nic::kSendSignaled;
  }
  Status st = link.qp->post_send(std::span<const nic::SendWr>(wrs, n));
  if (!st.ok() && st.code() != Code::kResourceExhausted) link.failed = true;
  return st;
}

size_t Session::poll() {
  Impl& s = *impl_;
  Client::Impl& c = *s.client;
  size_t events = 0;
  // Other sessions' requests for the links this one owns.
  Delegated d;
  while (s.inbox.pop(&d)) {
    ++events;
    s.counters.carried.inc();
    Link& link = c.link_for(index_, d.worker);
    Status st = link.failed ? unavailable("link failed") : s.post(link, d.initiator, d.slot, d.size, d.nilext != 0);
    if (!st.ok()) {
      Event e{};
      e.type = Event::kPostFailed;
      e.slot = d.slot;
      s.route(d.initiator, e, {});
    }
  }
  nic::WorkCompletion wcs[32];
  auto n = s.cq->poll(std::span<nic::WorkCompletion>(wcs, 32));
  if (n.ok()) {
    for (uint32_t i = 0; i < n.value(); ++i) s.on_completion(wcs[i]);
    events += n.value();
  }
  // News from owners about this session's delegated calls.
  Event e;
  while (s.results.pop(&e)) {
    ++events;
    s.apply(e, std::span<const uint8_t>(s.response_area(e.slot), e.type == Event::kResponse ? e.len : 0));
  }
  return events;
}

void Session::Impl::on_completion(const nic::WorkCompletion& wc) {
  Client::Impl& c = *client;
  const uint64_t kind = wc.wr_id >> 56;
  if (kind == kWrRecv) {
    const uint32_t link_index = static_cast<uint32_t>((wc.wr_id >> 24) & 0xFFFFFFFF);
    const uint32_t buffer = static_cast<uint32_t>(wc.wr_id & 0xFFFFFF);
    Link& link = *c.links[link_index];
    if (wc.status != nic::WcStatus::kSuccess) {
      link.failed = true;  // flushed: the QP is in error
      return;
    }
    on_response(link, buffer, wc.byte_len);
    return;
  }
  const uint32_t initiator = static_cast<uint32_t>((wc.wr_id >> 40) & 0xFFFF);
  const uint32_t slot = static_cast<uint32_t>((wc.wr_id >> 24) & 0xFFFF);
  if (wc.status != nic::WcStatus::kSuccess) {
    // Which link? The QP number names it; mark it failed.
    for (auto& l : c.links) {
      if (l->qp->qp_num() == wc.qp_num) l->failed = true;
    }
  }
  Event e{};
  e.type = kind == kWrRead ? Event::kReadDone : Event::kSendDone;
  e.slot = slot;
  e.wc_status = static_cast<uint8_t>(wc.status);
  route(initiator, e, {});
}

void Session::Impl::on_response(Link& link, uint32_t buffer, uint32_t byte_len) {
  Client::Impl& c = *client;
  uint8_t* bytes = c.arena.data() + link.recv_offset + static_cast<size_t>(buffer) * c.max_response_bytes;
  ResponseView v;
  const bool parsed = byte_len <= c.max_response_bytes &&
                      parse_response(std::span<const uint8_t>(bytes, byte_len), &v);
  const uint32_t initiator = parsed ? static_cast<uint32_t>((v.request_id >> 16) & 0xFFFF) : UINT32_MAX;
  const uint32_t slot = parsed ? static_cast<uint32_t>(v.request_id & 0xFFFF) : UINT32_MAX;
  if (!parsed || initiator != v.origin || initiator >= c.sessions.size() || slot >= c.options.max_inflight) {
    counters.stray_responses.inc();
  } else {
    Event e{};
    e.type = Event::kResponse;
    e.request_id = v.request_id;
    e.slot = slot;
    e.kind = static_cast<uint8_t>(v.kind);
    e.app_status = v.status;
    e.len = static_cast<uint32_t>(v.payload.size());
    route(initiator, e, v.payload);
  }
  // The buffer goes back to the QP's receive queue.
  const nic::Sge sge = c.mr->sge(static_cast<size_t>(bytes - c.arena.data()), c.max_response_bytes);
  if (!link.qp->post_recv(nic::RecvWr{recv_wr_id(link.index, buffer), std::span<const nic::Sge>(&sge, 1)}).ok()) {
    link.failed = true;
  }
}

void Session::Impl::route(uint32_t initiator, const Event& e, std::span<const uint8_t> payload) {
  if (initiator == index) {
    apply(e, payload);
    return;
  }
  Client::Impl& c = *client;
  if (initiator >= c.sessions.size()) return;
  Session::Impl& other = *c.sessions[initiator]->impl_;
  if (e.type == Event::kResponse && !payload.empty()) {
    // The initiator's slot is waiting for this response and untouched until
    // the event below is published.
    std::memcpy(other.response_area(e.slot), payload.data(), std::min<size_t>(payload.size(), c.max_response_bytes));
  }
  const bool pushed = other.results.push(e);
  FERRY_ASSERT(pushed, "rpc: a session's results queue holds every event of its slots");
}

void Session::Impl::apply(const Event& e, std::span<const uint8_t> payload) {
  if (e.slot >= slots.size()) return;
  Slot& s = slots[e.slot];
  if (!s.busy) {
    if (e.type == Event::kResponse) counters.stray_responses.inc();
    return;
  }
  const auto wc_status = static_cast<nic::WcStatus>(e.wc_status);
  switch (e.type) {
    case Event::kPostFailed:
      if (!s.finished) finish(s, CallResult{unavailable("rpc: the connection to the worker failed"), Commit::kNone, 0, {}});
      s.waiting = 0;
      break;
    case Event::kSendDone:
    case Event::kReadDone: {
      const uint8_t need = e.type == Event::kReadDone ? Slot::kNeedRead : Slot::kNeedSend;
      if (wc_status != nic::WcStatus::kSuccess) {
        if (!s.finished) {
          finish(s, CallResult{unavailable(std::string("rpc: ") + (e.type == Event::kReadDone ? "READ" : "SEND") +
                                           " failed: " + std::string(nic::wc_status_name(wc_status))),
                               Commit::kNone, 0, {}});
        }
        s.waiting = 0;  // the QP is in error: nothing else will arrive
        break;
      }
      s.waiting &= static_cast<uint8_t>(~need);
      if (!s.finished && (s.expect == Commit::kHardwareAck || s.expect == Commit::kPersistentAck) &&
          (s.waiting & (Slot::kNeedSend | Slot::kNeedRead)) == 0) {
        finish(s, CallResult{ok_status(), s.expect, 0, {}});
      }
      break;
    }
    case Event::kResponse: {
      if (e.request_id != s.id || (s.waiting & Slot::kNeedResponse) == 0) {
        counters.stray_responses.inc();
        return;
      }
      s.waiting &= static_cast<uint8_t>(~Slot::kNeedResponse);
      if (s.finished) break;
      const auto kind = static_cast<ResponseKind>(e.kind);
      if (kind == ResponseKind::kError) {
        finish(s, CallResult{status_of(static_cast<RpcError>(e.app_status)), Commit::kNone, 0, {}});
      } else if (kind == ResponseKind::kAck) {
        finish(s, CallResult{ok_status(), Commit::kSoftwareAck, 0, {}});
      } else {
        finish(s, CallResult{ok_status(), Commit::kReply, e.app_status, payload.first(std::min<size_t>(e.len, payload.size()))});
      }
      break;
    }
    default: return;
  }
  if (s.waiting == 0) release(e.slot);
}

void Session::Impl::finish(Slot& s, const CallResult& r) {
  s.finished = true;
  if (r.status.ok()) {
    counters.committed.inc();
  } else {
    counters.failed.inc();
  }
  Callback cb = std::move(s.done);
  s.done = nullptr;
  if (cb) cb(r);
}

void Session::Impl::release(uint32_t slot) {
  Slot& s = slots[slot];
  s.busy = false;
  s.done = nullptr;
  free_slots.push_back(slot);
  --in_use;
}

Result<CallReply> Session::call(uint16_t type, uint64_t route, std::span<const uint8_t> payload, bool nilext) {
  Impl& s = *impl_;
  Client::Impl& c = *s.client;
  struct Outcome {
    bool done = false;
    Status status;
    CallReply reply;
  };
  auto outcome = std::make_shared<Outcome>();
  Runtime& rt = c.options.runtime != nullptr ? *c.options.runtime : Runtime::threads();
  const Clock& clock = rt.clock();
  const uint64_t deadline = clock.now_ns() + c.options.timeout_ns;
  // Nothing to poll: under the simulator park this fiber (the scheduler steps
  // the engine); with threads step a manual engine this thread may drive,
  // else yield now and then to an oversubscribed host's engine and workers.
  uint32_t idle = 0;
  auto wait = [&] {
    if (rt.simulated()) {
      rt.idle_until(deadline + 1);  // so that the timeout below fires at its virtual time
    } else if (c.engine != nullptr && c.engine->may_step()) {
      c.engine->step();
    } else if (++idle >= 256) {
      rt.idle();
    }
  };
  // Room for the call: poll while every slot is busy.
  while (true) {
    Status st = call_async(type, route, payload, nilext, [outcome](const CallResult& r) {
      outcome->done = true;
      outcome->status = r.status;
      outcome->reply.commit = r.commit;
      outcome->reply.app_status = r.app_status;
      outcome->reply.payload.assign(r.payload.begin(), r.payload.end());
    });
    if (st.ok()) break;
    if (st.code() != Code::kResourceExhausted) return st;
    if (poll() == 0) wait();
    if (clock.now_ns() > deadline) return timed_out("rpc: no free call slot");
  }
  idle = 0;
  while (!outcome->done) {
    if (poll() != 0) {
      idle = 0;
    } else {
      wait();
    }
    if (!outcome->done && rt.cancelled()) {
      // A simulated crash of the caller: it stops waiting (the call may still execute).
      return unavailable("rpc: the caller was cancelled (its client crashed); the call may still execute");
    }
    if (!outcome->done && clock.now_ns() > deadline) {
      return timed_out("rpc: no commit within " + std::to_string(c.options.timeout_ns / 1'000'000) + " ms");
    }
  }
  if (!outcome->status.ok()) return outcome->status;
  return std::move(outcome->reply);
}

}  // namespace ferry::rpc
