// Durable Ordered Queue (JUNE BERRY-D, NSDI'25 §5.3): the worker's
// persisted positions, buffer invalidation before reuse, and recovery.
//
// Persist order, per request:   handler persists its effects
//                               -> ReqToExecute past the request (persisted)
//                               -> software response (non-nilext only)
// A nilext request nobody waits on moves ReqToExecute with the rest of its
// poll batch (one persist per batch, Server::Impl::execute_in_order).
// per buffer reuse:             ReqToExecute past the buffer (persisted)
//                               -> checksums of its requests zeroed (drained)
//                               -> Admission::release of the old token
//                               -> Admission::reserve, its token persisted
//                               -> SRQTail past the new posting (persisted)
//                               -> RECV posted
// So a scan from ReqToExecute to SRQTail sees every request a client may
// have been told is committed, and no request of an earlier lap.
#include <cstring>
#include <string>

#include "server_impl.h"

namespace ferry::rpc {

void Server::Impl::persist_req_to_execute(Worker& w, uint64_t position) {
  if (position <= w.persisted_rte) return;
  pm::Region& r = *options.durable_region;
  r.store_persist(&w.control->req_to_execute, &position, sizeof(position));
  w.persisted_rte = position;
  w.unpersisted = 0;
}

void Server::Impl::persist_srq_tail(Worker& w, uint64_t tail) {
  pm::Region& r = *options.durable_region;
  r.store_persist(&w.control->srq_tail, &tail, sizeof(tail));
}

void Server::Impl::persist_admission(Worker& w, uint64_t sequence, uint64_t token) {
  pm::Region& r = *options.durable_region;
  const DurableLayout layout{options.buffers, options.buffer_bytes, options.stride_bytes};
  const AdmissionEntry e{sequence, token};
  r.store_persist(w.area + layout.admission_entry_offset(sequence), &e, sizeof(e));
}

void Server::Impl::invalidate_buffer(Worker& w, uint64_t sequence) {
  pm::Region& r = *options.durable_region;
  static constexpr uint64_t kZero = 0;
  uint8_t* buffer = w.buffer_base + (sequence % options.buffers) * options.buffer_bytes;
  w.invalidate.clear();
  for (uint16_t stride : w.starts[sequence % options.buffers]) {
    w.invalidate.push_back(buffer + static_cast<size_t>(stride) * w.stride_bytes);
  }
  r.store_nt_many(w.invalidate, &kZero, sizeof(kZero));  // one call: the model's lock once per buffer
  r.drain();
}

Status Server::Impl::init_durable_area(Worker& w) {
  pm::Region& r = *options.durable_region;
  const DurableLayout layout{options.buffers, options.buffer_bytes, options.stride_bytes};
  // A failure in the middle of this must not make the old contents look
  // like requests, nor leave a control block recovery refuses: first an
  // empty scan range, then clean buffers, then the area marked not
  // initialized (one 8-byte store, atomic on PM), then the new control
  // block, whose magic comes last. ReqToExecute and SRQTail cannot go to 0
  // together in one store, and a failure that kept one and lost the other
  // (8-byte words persist independently) would leave them inconsistent.
  if (w.control->magic == kDurableMagic) {
    const uint64_t end = w.control->srq_tail * layout.strides();
    r.store(&w.control->req_to_execute, &end, sizeof(end));
    r.persist(&w.control->req_to_execute, sizeof(end));
  }
  // The buffers and the admission table after them.
  const size_t clear_bytes = layout.area_bytes() - kDurableControlBytes;
  static const std::vector<uint8_t> zeros(64 << 10, 0);
  for (size_t off = 0; off < clear_bytes; off += zeros.size()) {
    r.store_nt(w.buffer_base + off, zeros.data(), std::min(zeros.size(), clear_bytes - off));
  }
  r.drain();
  static constexpr uint64_t kNotInitialized = 0;
  r.store_persist(&w.control->magic, &kNotInitialized, sizeof(kNotInitialized));
  DurableControl c{};
  c.magic = kNotInitialized;
  c.version = kDurableVersion;
  c.worker = w.index;
  c.buffers = layout.buffers;
  c.buffer_bytes = layout.buffer_bytes;
  c.stride_bytes = layout.stride_bytes;
  c.req_to_execute = 0;
  c.srq_tail = 0;
  r.store(w.control, &c, sizeof(c));
  r.persist(w.control, sizeof(c));
  r.store_persist(&w.control->magic, &kDurableMagic, sizeof(kDurableMagic));
  w.persisted_rte = 0;
  return ok_status();
}

Status Server::Impl::recover_durable_area(Worker& w) {
  const DurableLayout layout{options.buffers, options.buffer_bytes, options.stride_bytes};
  std::span<const uint8_t> area(w.area, layout.area_bytes());
  // Buffers whose admission was restored (their requests may need it), and
  // the first restore error.
  std::vector<std::pair<uint64_t, uint64_t>> restored;
  Status restore_error;
  auto stats = scan_durable_area(area, layout, options.max_request_bytes, [&](uint64_t position, const RequestView& v) {
    if (!restore_error.ok()) return;
    const HandlerEntry* h = handlers.find(v.type);
    // Only a nilext request may have been committed without a response;
    // a non-nilext one at or after ReqToExecute was never answered, so it is
    // concurrent with what follows and is skipped (§5.3, Figure 5).
    if (!v.nilext || h == nullptr || !h->info.nilext) {
      w.counters.recovery_skipped.inc();
      return;
    }
    // What the service set aside for this buffer before the failure, set
    // aside again before any of its requests run.
    const uint64_t sequence = position / layout.strides();
    uint64_t token = 0;
    if (admission.restore) {
      if (restored.empty() || restored.back().first != sequence) {
        auto t = durable_admission_token(area, layout, sequence);
        if (!t.ok()) {
          restore_error = t.status();
          return;
        }
        if (t.value() != 0) {
          if (Status st = admission.restore(w.index, sequence, t.value()); !st.ok()) {
            restore_error = st;
            return;
          }
        }
        restored.emplace_back(sequence, t.value());
      }
      token = restored.back().second;
    }
    std::vector<uint8_t> scratch(options.max_response_bytes);
    Reply reply(std::span<uint8_t>(scratch.data(), scratch.size()));
    Request req;
    req.type = v.type;
    req.nilext = true;
    req.worker = w.index;
    req.position = position;
    req.payload = v.payload;
    req.recovering = true;
    req.admission_token = token;
    if (options.on_execute) options.on_execute(req);
    h->handler(req, reply);
    w.counters.recovered.inc();
    w.counters.requests.inc();
    w.counters.nilext.inc();
  });
  // Those buffers are gone once the area starts afresh.
  for (const auto& [sequence, token] : restored) {
    if (token != 0) admission.release(w.index, sequence, token);
  }
  if (!restore_error.ok()) {
    return Status(restore_error.code(), "worker " + std::to_string(w.index) + ": recovery: " + restore_error.message());
  }
  if (!stats.ok()) {
    if (stats.status().code() == Code::kNotFound) {  // never initialized: nothing to recover
      recovery.push_back(ScanStats{});
      return ok_status();
    }
    return Status(stats.status().code(), "worker " + std::to_string(w.index) + ": " + stats.status().message());
  }
  recovery.push_back(stats.value());
  return ok_status();
}

}  // namespace ferry::rpc
