// GroupClient: the synchronous forms and the wait loop shared by HyperLoop
// and the Naive-RDMA baseline, and argument checks.
#include "ferry/hyperloop/group.h"

#include <charconv>
#include <memory>

#include "ferry/common/clock.h"
#include "ferry/common/cpu.h"
#include "ferry/nic/verbs.h"

namespace ferry::hyperloop {

namespace {
std::string hex(uint64_t v) {
  char buf[16];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v, 16).ptr);
}
}  // namespace

namespace detail {

void add_traffic(WireBytes& w, const nic::QueuePair& qp, QpRole role) {
  const nic::QpTraffic t = qp.traffic();
  if (role == QpRole::kLoopback) {
    w.loopback_packets += t.total_packets();
    return;
  }
  using nic::PacketKind;
  auto payload = [&](PacketKind k) { return t.payload_bytes[static_cast<int>(k)]; };
  for (int k = 0; k < nic::kPacketKinds; ++k) w.headers += t.header_bytes[k];
  w.packets += t.total_packets();
  const uint64_t writes = payload(PacketKind::kWrite);
  const uint64_t sends = payload(PacketKind::kSend);
  switch (role) {
    case QpRole::kData:
      w.payload += writes;
      w.metadata += sends;
      break;
    case QpRole::kAcknowledge:
      w.metadata += writes + sends;
      break;
    case QpRole::kRearm:
      w.rearm += writes;
      w.metadata += sends;
      break;
    case QpRole::kResponder:
    case QpRole::kLoopback:
      break;
  }
  w.payload += payload(PacketKind::kReadResponse);  // READ data a responder returned (a 0-byte flush READ: none)
}

}  // namespace detail

std::string_view primitive_name(Primitive p) {
  switch (p) {
    case Primitive::kWrite: return "gwrite";
    case Primitive::kCas: return "gcas";
    case Primitive::kMemcpy: return "gmemcpy";
    case Primitive::kFlush: return "gflush";
  }
  return "?";
}

Status check_range(const char* what, uint64_t offset, uint64_t size, size_t region_bytes) {
  if (offset > region_bytes || size > region_bytes - offset) {
    return out_of_range(std::string(what) + ": [" + std::to_string(offset) + ", " + std::to_string(offset) + "+" +
                        std::to_string(size) + ") is outside the " + std::to_string(region_bytes) + "-byte region");
  }
  return ok_status();
}

Status check_write_args(uint64_t offset, uint32_t size, const GroupOptions& options) {
  if (size == 0) return invalid_argument("gwrite: size must be at least 1 byte");
  return check_range("gwrite", offset, size, options.region_bytes);
}

Status check_cas_args(uint64_t offset, uint8_t execute_map, const GroupOptions& options) {
  if (offset % 8 != 0) {
    return invalid_argument("gcas: offset " + std::to_string(offset) + " is not 8-byte aligned (RDMA atomics need it)");
  }
  FERRY_RETURN_IF_ERROR(check_range("gcas", offset, 8, options.region_bytes));
  if ((execute_map >> options.replicas) != 0) {
    return invalid_argument("gcas: execute map 0x" + hex(execute_map) + " names replicas beyond the group's " +
                            std::to_string(options.replicas));
  }
  return ok_status();
}

Status check_memcpy_args(uint64_t src_offset, uint64_t dst_offset, uint32_t size, const GroupOptions& options) {
  if (size == 0) return invalid_argument("gmemcpy: size must be at least 1 byte");
  FERRY_RETURN_IF_ERROR(check_range("gmemcpy source", src_offset, size, options.region_bytes));
  FERRY_RETURN_IF_ERROR(check_range("gmemcpy destination", dst_offset, size, options.region_bytes));
  if (src_offset < dst_offset + size && dst_offset < src_offset + size) {
    return invalid_argument("gmemcpy: source [" + std::to_string(src_offset) + ", +" + std::to_string(size) +
                            ") and destination [" + std::to_string(dst_offset) + ", +" + std::to_string(size) +
                            ") overlap");
  }
  return ok_status();
}

Status validate_group_options(const GroupOptions& o) {
  if (o.replicas < 1 || o.replicas > kMaxReplicas) {
    return invalid_argument("group: replicas must be 1.." + std::to_string(kMaxReplicas) + ", not " +
                            std::to_string(o.replicas));
  }
  if (o.region_bytes < 4096 || o.region_bytes > (uint64_t{1} << 40)) {
    return invalid_argument("group: region_bytes must be 4 KiB .. 1 TiB, not " + std::to_string(o.region_bytes));
  }
  if (o.ring_ops < 8 || o.ring_ops > 1024 || (o.ring_ops & (o.ring_ops - 1)) != 0) {
    return invalid_argument("group: ring_ops must be a power of two in 8..1024, not " + std::to_string(o.ring_ops));
  }
  if (o.window < 1 || o.window > o.ring_ops / 4) {
    return invalid_argument("group: window must be 1..ring_ops/4 (" + std::to_string(o.ring_ops / 4) + "), not " +
                            std::to_string(o.window));
  }
  return ok_status();
}

GroupClient::~GroupClient() = default;

namespace {
// Shared with the callback, which may outlive a synchronous call that timed out.
struct SyncState {
  OpResult result;
  bool done = false;
};
}  // namespace

size_t GroupClient::poll() {
  if (engine_ != nullptr && !engine_->threaded()) engine_->step();
  return poll_completions();
}

Status GroupClient::wait_until(const std::function<bool()>& pred) {
  auto check = [&] {
    poll_completions();
    return pred();
  };
  if (check()) return ok_status();
  const bool manual = engine_ != nullptr && !engine_->threaded();
  if (manual && dynamic_cast<const FakeClock*>(&engine_->clock()) != nullptr) {
    Status s = engine_->run_until(check, options_.op_timeout_ns);
    if (!s.ok()) return timed_out("group operation did not complete: " + s.message());
    return ok_status();
  }
  const uint64_t start = SteadyClock::instance().now_ns();
  for (uint64_t spins = 1;; ++spins) {
    if (manual) {
      engine_->step();
    } else {
      cpu_relax();
    }
    if (check()) return ok_status();
    if ((spins & 255) == 0 && SteadyClock::instance().now_ns() - start > options_.op_timeout_ns) {
      return timed_out("group operation did not complete within " + std::to_string(options_.op_timeout_ns / 1000000) +
                       " ms");
    }
  }
}

Result<OpResult> GroupClient::run_sync(const std::function<Status(Callback)>& submit) {
  auto st = std::make_shared<SyncState>();
  FERRY_RETURN_IF_ERROR(submit([st](const OpResult& r) {
    st->result = r;
    st->done = true;
  }));
  FERRY_RETURN_IF_ERROR(wait_until([&] { return st->done; }));
  return st->result;
}

Status GroupClient::gwrite(GroupId gid, uint64_t offset, uint32_t size, bool flush) {
  FERRY_ASSIGN_OR_RETURN(OpResult r, run_sync([&](Callback done) {
    return gwrite_async(gid, offset, size, flush, std::move(done));
  }));
  return r.status;
}

Result<CasResult> GroupClient::gcas(GroupId gid, uint64_t offset, uint64_t old_value, uint64_t new_value,
                                    uint8_t execute_map, bool flush) {
  FERRY_ASSIGN_OR_RETURN(OpResult r, run_sync([&](Callback done) {
    return gcas_async(gid, offset, old_value, new_value, execute_map, flush, std::move(done));
  }));
  if (!r.status.ok()) return r.status;
  return r.cas;
}

Status GroupClient::gmemcpy(GroupId gid, uint64_t src_offset, uint64_t dst_offset, uint32_t size, bool flush) {
  FERRY_ASSIGN_OR_RETURN(OpResult r, run_sync([&](Callback done) {
    return gmemcpy_async(gid, src_offset, dst_offset, size, flush, std::move(done));
  }));
  return r.status;
}

Status GroupClient::gflush(GroupId gid) {
  FERRY_ASSIGN_OR_RETURN(OpResult r, run_sync([&](Callback done) { return gflush_async(gid, std::move(done)); }));
  return r.status;
}

Status GroupClient::drain(GroupId gid) {
  FERRY_RETURN_IF_ERROR(outstanding(gid).status());
  return wait_until([&] {
    auto n = outstanding(gid);
    return !n.ok() || n.value() == 0;
  });
}

}  // namespace ferry::hyperloop
