#include "wiring.h"

#include <chrono>
#include <thread>

namespace ferry::hyperloop::detail {

namespace {
std::string service_name(std::string_view group, Chain c, const char* side) {
  return "hyperloop." + std::string(group) + "." + chain_name(c) + "." + side;
}
}  // namespace

std::string up_service(std::string_view group, Chain c) { return service_name(group, c, "up"); }
std::string ack_service(std::string_view group, Chain c) { return service_name(group, c, "ack"); }
std::string naive_up_service(std::string_view group) { return "naive." + std::string(group) + ".up"; }
std::string naive_ack_service(std::string_view group) { return "naive." + std::string(group) + ".ack"; }

Status check_group_name(std::string_view group) {
  if (group.empty() || group.size() > 64) return invalid_argument("group name must be 1..64 characters");
  for (char ch : group) {
    if (ch <= ' ' || ch > '~') {
      return invalid_argument("group name '" + std::string(group) + "' may hold only printable ASCII without spaces");
    }
  }
  return ok_status();
}

Status check_connect_args(bool has_nic, const RemoteGroupOptions& options, bool taken) {
  if (!has_nic) return failed_precondition("connect_group: this client was created on an Engine; create it on a NIC");
  if (options.listener == nullptr) return invalid_argument("connect_group: a listener is needed for the tail");
  if (options.head.empty()) return invalid_argument("connect_group: no address for replica 0 (head)");
  FERRY_RETURN_IF_ERROR(validate_group_options(options.options));
  FERRY_RETURN_IF_ERROR(check_group_name(options.group));
  if (taken) return already_exists("connect_group: group " + options.group + " is already connected");
  return ok_status();
}

Status check_replica_args(const ReplicaSpec& spec, size_t region_bytes) {
  FERRY_RETURN_IF_ERROR(validate_group_options(spec.options));
  FERRY_RETURN_IF_ERROR(check_group_name(spec.group));
  if (spec.index >= spec.options.replicas) {
    return invalid_argument("replica index " + std::to_string(spec.index) + " is not in a chain of " +
                            std::to_string(spec.options.replicas));
  }
  if (region_bytes < spec.options.region_bytes) {
    return invalid_argument("replica region is " + std::to_string(region_bytes) + " bytes, the group needs " +
                            std::to_string(spec.options.region_bytes));
  }
  return ok_status();
}

ChainHello hello_of(const GroupOptions& options, uint32_t sender) {
  ChainHello h;
  h.sender = sender;
  h.replicas = options.replicas;
  h.ring_ops = options.ring_ops;
  h.window = options.window;
  h.flush_verb = options.flush_verb ? 1 : 0;
  h.region_bytes = options.region_bytes;
  return h;
}

Status check_hello(const ChainHello& h, const GroupOptions& own, uint32_t expected_sender, std::string_view who) {
  auto sender_name = [](uint32_t s) { return s == kClientSender ? std::string("the client") : "replica " + std::to_string(s); };
  if (h.magic != kWiringMagic) return invalid_argument(std::string(who) + ": the peer is not a HyperLoop group member");
  if (h.sender != expected_sender) {
    return invalid_argument(std::string(who) + ": " + sender_name(h.sender) + " connected where " +
                            sender_name(expected_sender) + " was expected (check the chain order)");
  }
  auto differ = [&](const char* what, uint64_t theirs, uint64_t ours) {
    return invalid_argument(std::string(who) + ": " + sender_name(h.sender) + " has " + what + " = " +
                            std::to_string(theirs) + ", this side " + std::to_string(ours) +
                            " (every member needs the same group options)");
  };
  if (h.replicas != own.replicas) return differ("replicas", h.replicas, own.replicas);
  if (h.ring_ops != own.ring_ops) return differ("ring_ops", h.ring_ops, own.ring_ops);
  if (h.window != own.window) return differ("window", h.window, own.window);
  if (h.flush_verb != (own.flush_verb ? 1u : 0u)) return differ("flush_verb", h.flush_verb, own.flush_verb ? 1 : 0);
  if (h.region_bytes != own.region_bytes) return differ("region_bytes", h.region_bytes, own.region_bytes);
  return ok_status();
}

Result<cm::Connection> connect_retrying(std::string_view address, std::string_view service, nic::Nic& nic,
                                        nic::QueuePair& qp, std::span<const uint8_t> private_data,
                                        uint32_t timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  cm::ConnectOptions options;
  options.qp.access_flags = kLinkAccess;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    options.timeout_ms = static_cast<uint32_t>(std::max<int64_t>(left, 100));
    Result<cm::Connection> c = cm::connect(address, service, nic, qp, private_data, options);
    if (c.ok()) return c;
    const Code code = c.status().code();
    // Not there yet (refused, or the service is not served yet), or there but
    // not ready (its own downstream is still connecting): the QP is as it was.
    const bool retry = (code == Code::kUnavailable || code == Code::kNotFound) &&
                       (qp.state() == nic::QpState::kReset || qp.state() == nic::QpState::kInit);
    if (!retry || Clock::now() + std::chrono::milliseconds(20) >= deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      return Status(code, c.status().message() + (retry ? " (gave up after " + std::to_string(waited) + " ms)" : ""));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ferry::hyperloop::detail
