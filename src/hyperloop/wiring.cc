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

Result<UpReply> parse_up_reply(std::span<const uint8_t> bytes, uint32_t expected, std::string_view who) {
  FERRY_ASSIGN_OR_RETURN(const UpReply up, cm::private_data_as<UpReply>(bytes));
  if (up.magic != kWiringMagic || up.count != expected || up.count > kMaxReplicas) {
    return invalid_argument(std::string(who) + ": the peer reported a chain of " + std::to_string(up.count) +
                            " replicas from there on, expected " + std::to_string(expected));
  }
  return up;
}

Result<AckReply> parse_ack_reply(std::span<const uint8_t> bytes, uint32_t stride, std::string_view who) {
  FERRY_ASSIGN_OR_RETURN(const AckReply ack, cm::private_data_as<AckReply>(bytes));
  if (ack.magic != kWiringMagic || (stride != 0 && ack.stride != stride)) {
    return invalid_argument(std::string(who) + ": the client's acknowledgement ring is not of this system");
  }
  return ack;
}

LinkSet::LinkSet(std::string who, const GroupOptions& options, uint32_t expected_sender)
    : who_(std::move(who)), options_(options), expected_sender_(expected_sender) {}

LinkSet::~LinkSet() { unserve(); }

Status LinkSet::serve(cm::Listener& listener, const std::string& service, nic::Nic& nic, nic::QueuePair& qp) {
  size_t index = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (listener_ != nullptr && listener_ != &listener) return failed_precondition(who_ + " already serves a listener");
    index = links_.size();
    links_.push_back(Link{service, &qp, {}, 0});
  }
  cm::Service s;
  s.nic = &nic;
  s.qp.access_flags = kLinkAccess;
  s.accept = [this, index](const cm::Request& request) { return accept(index, request); };
  s.done = [this, index](nic::QueuePair&, const cm::Connection&, const Status& status) { done(index, status); };
  Status st = listener.serve(service, std::move(s));
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok()) {
    links_.pop_back();
    return st;
  }
  listener_ = &listener;
  return ok_status();
}

void LinkSet::open(std::vector<std::vector<uint8_t>> replies) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < links_.size() && i < replies.size(); ++i) links_[i].reply = std::move(replies[i]);
  open_ = true;
}

void LinkSet::unserve() {
  std::vector<std::string> services;
  cm::Listener* listener = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    listener = listener_;
    listener_ = nullptr;
    for (const Link& l : links_) services.push_back(l.service);
  }
  // Outside the lock: unserve waits for a callback in progress, which takes it.
  if (listener != nullptr) {
    for (const std::string& s : services) (void)listener->unserve(s);
  }
}

Result<cm::Accepted> LinkSet::accept(size_t link, const cm::Request& request) {
  FERRY_ASSIGN_OR_RETURN(const ChainHello hello, cm::private_data_as<ChainHello>(request.private_data));
  std::lock_guard<std::mutex> lock(mu_);
  const std::string name = who_ + " (" + links_[link].service + ")";
  if (Status s = check_hello(hello, options_, expected_sender_, name); !s.ok()) {
    last_error_ = s.message();
    return s;
  }
  if (!open_) return unavailable(name + " is not ready yet: its downstream is still connecting");
  Link& l = links_[link];
  if (l.state != 0) {
    last_error_ = name + ": refused " + request.peer_address + ": already connected";
    return failed_precondition(last_error_ + " (a member serves one group session; restart it for another)");
  }
  l.state = 1;
  cm::Accepted a;
  a.qp = l.qp;
  a.private_data = l.reply;
  return a;
}

void LinkSet::done(size_t link, const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  links_[link].state = status.ok() ? 2 : 3;
  if (!status.ok()) last_error_ = who_ + " (" + links_[link].service + "): handshake failed: " + status.message();
}

uint32_t LinkSet::connected() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t n = 0;
  for (const Link& l : links_) n += l.state == 2 ? 1 : 0;
  return n;
}

std::string LinkSet::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

Status LinkSet::wait_connected(uint32_t timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      bool all = true;
      for (const Link& l : links_) {
        if (l.state == 3) return unavailable(last_error_);
        all = all && l.state == 2;
      }
      if (all) return ok_status();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return timed_out(who_ + ": the peer never completed its connection");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
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
