// The passive side of the handshake: one thread, one poll() loop over the
// listening socket and every connection, each connection a small state
// machine (AWAIT_REQ -> AWAIT_RTU -> CLOSING) with its own deadline, so that
// handshakes proceed concurrently and a silent peer delays nobody.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "cm_internal.h"

namespace ferry::cm {

namespace {

using detail::Deadline;
using detail::Fd;
using detail::SteadyClock;

struct ServiceEntry {
  std::string name;
  Service service;
  bool removed = false;  // guarded by Listener::Impl::dispatch_mu_
};

struct Handshake {
  enum class State : uint8_t {
    kAwaitReq,  // reading the REQ
    kAwaitRtu,  // REP sent (QP in RTR), reading the RTU
    kClosing,   // sending what is queued (a REJ), then closing
    kClosed,    // to be erased
  };
  Fd fd;
  std::string peer_address;
  State state = State::kAwaitReq;
  Deadline deadline;
  // The frame being read: its 4-byte header, then its body.
  std::vector<uint8_t> in;  // sized to the part being read
  size_t in_have = 0;
  bool in_body = false;
  std::vector<uint8_t> out;
  size_t out_sent = 0;
  // Set once an AcceptFn returned a QP: from then on the handshake owes the
  // service one DoneFn.
  std::shared_ptr<ServiceEntry> service;
  nic::QueuePair* qp = nullptr;
  uint32_t first_psn = 0;
  Connection connection;
};

}  // namespace

class Listener::Impl {
 public:
  Impl(Fd listen_fd, Fd wake_fd, const sockaddr_in& bound, const ListenerOptions& options)
      : listen_fd_(std::move(listen_fd)), wake_fd_(std::move(wake_fd)), bound_(bound), options_(options) {
    thread_ = std::thread([this] { run(); });
  }

  ~Impl() {
    stop_.store(true, std::memory_order_seq_cst);
    const uint64_t one = 1;
    // The eventfd counter cannot overflow from one write; nothing to handle.
    (void)!write(wake_fd_.get(), &one, sizeof(one));
    thread_.join();
  }

  uint16_t port() const { return ntohs(bound_.sin_port); }
  std::string address() const { return detail::to_string(bound_); }

  Status serve(std::string_view name, Service service) {
    if (!valid_service_name(name)) {
      return invalid_argument("serve: service name '" + std::string(name.substr(0, 64)) +
                              "' must be 1..255 printable ASCII characters without spaces");
    }
    if (service.nic == nullptr || !service.accept) {
      return invalid_argument("serve '" + std::string(name) + "': a Service needs a NIC and an AcceptFn");
    }
    std::lock_guard<std::mutex> lock(services_mu_);
    if (services_.count(std::string(name)) != 0) {
      return Status(Code::kAlreadyExists,
                    "serve: service '" + std::string(name) + "' is already served at " + address());
    }
    auto entry = std::make_shared<ServiceEntry>();
    entry->name = std::string(name);
    entry->service = std::move(service);
    services_.emplace(entry->name, std::move(entry));
    return ok_status();
  }

  Status unserve(std::string_view name) {
    std::shared_ptr<ServiceEntry> entry;
    {
      std::lock_guard<std::mutex> lock(services_mu_);
      auto it = services_.find(std::string(name));
      if (it == services_.end()) return not_found("unserve: service '" + std::string(name) + "' is not served");
      entry = std::move(it->second);
      services_.erase(it);
    }
    // The listener thread touches a service only while holding dispatch_mu_
    // and after checking `removed`; a callback that unserves already holds it.
    if (std::this_thread::get_id() == thread_.get_id()) {
      entry->removed = true;
    } else {
      std::lock_guard<std::mutex> lock(dispatch_mu_);
      entry->removed = true;
    }
    return ok_status();
  }

  ListenerStats stats() const {
    ListenerStats s;
    s.connections = connections_.load(std::memory_order_relaxed);
    s.established = established_.load(std::memory_order_relaxed);
    s.rejected = rejected_.load(std::memory_order_relaxed);
    s.malformed = malformed_.load(std::memory_order_relaxed);
    s.timed_out = timed_out_.load(std::memory_order_relaxed);
    s.closed_early = closed_early_.load(std::memory_order_relaxed);
    s.failed = failed_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  void run();
  void accept_connections();
  void on_readable(Handshake& h);
  void on_writable(Handshake& h);
  void on_message(Handshake& h, std::span<const uint8_t> body);
  void on_req(Handshake& h, Req req);
  void on_rtu(Handshake& h);
  void on_deadline(Handshake& h);
  void on_peer_closed(Handshake& h, std::string_view why);
  // Queues a REJ and closes once it is sent.
  void reject(Handshake& h, RejectReason reason, Code code, std::string text);
  void queue(Handshake& h, const Message& message);
  // Ends an accepted handshake that did not reach RTS: QP to ERROR, DoneFn
  // with `why` (unless the service was unserved meanwhile).
  void fail_accepted(Handshake& h, const Status& why);
  void close(Handshake& h) {
    h.fd.reset();
    h.state = Handshake::State::kClosed;
  }

  Fd listen_fd_;
  Fd wake_fd_;  // eventfd: the destructor's wakeup
  const sockaddr_in bound_;
  const ListenerOptions options_;
  std::atomic<bool> stop_{false};

  mutable std::mutex services_mu_;
  std::map<std::string, std::shared_ptr<ServiceEntry>, std::less<>> services_;  // guarded by services_mu_
  // Held by the listener thread while it runs a service's callbacks or
  // modifies one of its QPs; unserve() takes it to wait those out.
  std::mutex dispatch_mu_;

  std::list<Handshake> handshakes_;  // listener thread only
  Deadline accept_paused_until_{};   // listener thread only

  std::atomic<uint64_t> connections_{0}, established_{0}, rejected_{0}, malformed_{0}, timed_out_{0},
      closed_early_{0}, failed_{0};
  std::thread thread_;
};

void Listener::Impl::run() {
  std::vector<pollfd> fds;
  std::vector<Handshake*> polled;
  while (!stop_.load(std::memory_order_seq_cst)) {
    fds.clear();
    polled.clear();
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    // At the limit, or out of descriptors, further connections wait in the
    // kernel's backlog.
    const bool room = handshakes_.size() < options_.max_connections;
    const bool paused = accept_paused_until_ > SteadyClock::now();
    fds.push_back({room && !paused ? listen_fd_.get() : -1, POLLIN, 0});
    Deadline next = paused ? accept_paused_until_ : Deadline::max();
    for (Handshake& h : handshakes_) {
      short events = POLLIN;
      if (h.out_sent < h.out.size()) events |= POLLOUT;
      fds.push_back({h.fd.get(), events, 0});
      polled.push_back(&h);
      next = std::min(next, h.deadline);
    }
    const int timeout_ms = next == Deadline::max() ? -1 : detail::ms_until(next);
    const int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) break;  // only EFAULT/EINVAL/ENOMEM: nothing left to serve with
    if (stop_.load(std::memory_order_seq_cst)) break;
    if (n > 0) {
      if (fds[1].revents & POLLIN) accept_connections();
      for (size_t i = 0; i < polled.size(); ++i) {
        Handshake& h = *polled[i];
        const short revents = fds[i + 2].revents;
        if (revents & POLLOUT) on_writable(h);
        if ((revents & (POLLIN | POLLHUP | POLLERR)) && h.state != Handshake::State::kClosed) on_readable(h);
      }
    }
    const Deadline now = SteadyClock::now();
    for (Handshake& h : handshakes_) {
      if (h.state != Handshake::State::kClosed && h.deadline <= now) on_deadline(h);
    }
    handshakes_.remove_if([](const Handshake& h) { return h.state == Handshake::State::kClosed; });
  }
  for (Handshake& h : handshakes_) {
    if (h.qp != nullptr) fail_accepted(h, unavailable("the listener at " + address() + " stopped"));
  }
  handshakes_.clear();
}

void Listener::Impl::accept_connections() {
  while (handshakes_.size() < options_.max_connections) {
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    Fd fd(accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      // Out of descriptors or memory, the pending connection stays readable:
      // polling it again at once would spin, so wait a little first. Other
      // errors (EAGAIN: none left; ECONNABORTED) concern one connection.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until_ = SteadyClock::now() + std::chrono::milliseconds(100);
      }
      return;
    }
    const int one = 1;
    (void)setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    connections_.fetch_add(1, std::memory_order_relaxed);
    Handshake& h = handshakes_.emplace_back();
    h.fd = std::move(fd);
    h.peer_address = detail::to_string(peer);
    h.deadline = SteadyClock::now() + std::chrono::milliseconds(options_.request_timeout_ms);
    h.in.resize(kFrameHeaderBytes);
  }
}

void Listener::Impl::on_readable(Handshake& h) {
  for (;;) {
    if (h.state == Handshake::State::kClosed) return;
    if (h.state == Handshake::State::kClosing) {
      // Nothing more is read: discard input until the peer's FIN, so that
      // closing with unread bytes does not reset the connection under the
      // REJ before the peer has read it.
      uint8_t sink[512];
      const ssize_t r = recv(h.fd.get(), sink, sizeof(sink), 0);
      if (r > 0 || (r < 0 && errno == EINTR)) continue;
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close(h);
      return;
    }
    const ssize_t r = recv(h.fd.get(), h.in.data() + h.in_have, h.in.size() - h.in_have, 0);
    if (r == 0) {
      on_peer_closed(h, "closed the connection");
      return;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      on_peer_closed(h, std::strerror(errno));
      return;
    }
    h.in_have += static_cast<size_t>(r);
    if (h.in_have < h.in.size()) continue;
    if (!h.in_body) {
      Result<uint32_t> length =
          decode_length(std::span<const uint8_t, kFrameHeaderBytes>(h.in.data(), kFrameHeaderBytes));
      if (!length.ok()) {
        // The stream cannot be resynchronized past a bad length.
        malformed_.fetch_add(1, std::memory_order_relaxed);
        fail_accepted(h, invalid_argument("the peer sent a malformed message: " + length.status().message()));
        reject(h, RejectReason::kBadMessage, Code::kInvalidArgument, length.status().message());
        continue;
      }
      h.in.assign(length.value(), 0);
      h.in_have = 0;
      h.in_body = true;
      continue;
    }
    const std::vector<uint8_t> body = std::move(h.in);
    h.in.assign(kFrameHeaderBytes, 0);
    h.in_have = 0;
    h.in_body = false;
    on_message(h, body);
  }
}

void Listener::Impl::on_writable(Handshake& h) {
  while (h.out_sent < h.out.size()) {
    const ssize_t n = send(h.fd.get(), h.out.data() + h.out_sent, h.out.size() - h.out_sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      on_peer_closed(h, std::strerror(errno));
      return;
    }
    h.out_sent += static_cast<size_t>(n);
  }
  h.out.clear();
  h.out_sent = 0;
  // A REJ is out: say so with a FIN, then wait for the peer's (on_readable).
  if (h.state == Handshake::State::kClosing) (void)shutdown(h.fd.get(), SHUT_WR);
}

void Listener::Impl::queue(Handshake& h, const Message& message) {
  Result<std::vector<uint8_t>> frame = encode(message);
  FERRY_ASSERT(frame.ok(), "the listener built an invalid ", message_name(message), ": ", frame.status().to_string());
  h.out.insert(h.out.end(), frame.value().begin(), frame.value().end());
  on_writable(h);
}

void Listener::Impl::reject(Handshake& h, RejectReason reason, Code code, std::string text) {
  h.state = Handshake::State::kClosing;
  // Give the REJ as long to leave as a REQ had to arrive.
  h.deadline = SteadyClock::now() + std::chrono::milliseconds(options_.request_timeout_ms);
  queue(h, Rej{reason, code, std::move(text)});
}

void Listener::Impl::on_message(Handshake& h, std::span<const uint8_t> body) {
  Result<Message> decoded = decode(body);
  if (!decoded.ok()) {
    malformed_.fetch_add(1, std::memory_order_relaxed);
    const Status& s = decoded.status();
    fail_accepted(h, invalid_argument("the peer sent a malformed message: " + s.message()));
    reject(h, s.code() == Code::kUnimplemented ? RejectReason::kUnsupportedVersion : RejectReason::kBadMessage,
           s.code(), s.message());
    return;
  }
  Message& m = decoded.value();
  if (h.state == Handshake::State::kAwaitReq) {
    if (Req* req = std::get_if<Req>(&m)) {
      on_req(h, std::move(*req));
      return;
    }
  } else if (h.state == Handshake::State::kAwaitRtu) {
    if (std::holds_alternative<Rtu>(m)) {
      on_rtu(h);
      return;
    }
    if (const Rej* rej = std::get_if<Rej>(&m)) {
      // The active side could not use our REP.
      fail_accepted(h, Status(rej->code, "the peer " + h.peer_address + " rejected the REP: " + rej->text));
      close(h);
      return;
    }
  }
  malformed_.fetch_add(1, std::memory_order_relaxed);
  const std::string what = "a " + std::string(message_name(m)) + " out of turn";
  fail_accepted(h, invalid_argument("the peer sent " + what));
  reject(h, RejectReason::kBadMessage, Code::kInvalidArgument, what);
}

void Listener::Impl::on_req(Handshake& h, Req req) {
  std::shared_ptr<ServiceEntry> entry;
  {
    std::lock_guard<std::mutex> lock(services_mu_);
    auto it = services_.find(req.service);
    if (it != services_.end()) entry = it->second;
  }
  std::unique_lock<std::mutex> dispatch(dispatch_mu_);
  if (entry == nullptr || entry->removed) {
    dispatch.unlock();
    rejected_.fetch_add(1, std::memory_order_relaxed);
    reject(h, RejectReason::kUnknownService, Code::kNotFound,
           "no service '" + req.service + "' at " + address());
    return;
  }
  const Service& service = entry->service;
  Request request;
  request.service = req.service;
  request.peer = req.endpoint;
  request.private_data = req.private_data;
  request.peer_address = h.peer_address;
  Result<Accepted> accepted = service.accept(request);
  if (!accepted.ok()) {
    dispatch.unlock();
    rejected_.fetch_add(1, std::memory_order_relaxed);
    reject(h, RejectReason::kServiceRefused, accepted.status().code(), accepted.status().message());
    return;
  }
  if (accepted->qp == nullptr) {
    dispatch.unlock();
    rejected_.fetch_add(1, std::memory_order_relaxed);
    reject(h, RejectReason::kLocalError, Code::kInternal, "the service's AcceptFn returned no QP");
    return;
  }
  h.service = entry;
  h.qp = accepted->qp;
  h.first_psn = detail::pick_first_psn(service.first_psn);
  h.connection.peer = req.endpoint;
  h.connection.private_data = std::move(req.private_data);
  h.connection.peer_address = h.peer_address;
  const uint32_t path_mtu = std::min(req.endpoint.path_mtu, detail::offered_path_mtu(*service.nic, service.qp));
  h.connection.peer.path_mtu = path_mtu;
  auto bring_up = [&]() -> Status {
    if (accepted->private_data.size() > kMaxPrivateDataBytes) {
      return invalid_argument("the AcceptFn's private data is " + std::to_string(accepted->private_data.size()) +
                              " bytes, at most " + std::to_string(kMaxPrivateDataBytes) + " allowed");
    }
    FERRY_ASSIGN_OR_RETURN(h.connection.dest_nic, detail::resolve_peer(*service.nic, req.endpoint));
    FERRY_RETURN_IF_ERROR(detail::to_init(*h.qp, service.qp));
    return detail::to_rtr(*h.qp, h.connection.dest_nic, req.endpoint, path_mtu, service.qp);
  };
  if (Status s = bring_up(); !s.ok()) {
    dispatch.unlock();
    rejected_.fetch_add(1, std::memory_order_relaxed);
    fail_accepted(h, s);
    reject(h, RejectReason::kLocalError, s.code(), s.message());
    return;
  }
  dispatch.unlock();
  Rep rep;
  rep.endpoint = detail::local_endpoint(*service.nic, *h.qp, h.first_psn, path_mtu);
  rep.private_data = std::move(accepted->private_data);
  h.state = Handshake::State::kAwaitRtu;
  h.deadline = SteadyClock::now() + std::chrono::milliseconds(options_.rtu_timeout_ms);
  queue(h, rep);
}

void Listener::Impl::on_rtu(Handshake& h) {
  {
    std::lock_guard<std::mutex> dispatch(dispatch_mu_);
    if (!h.service->removed) {
      const Service& service = h.service->service;
      Status s = detail::to_rts(*h.qp, h.first_psn, service.qp);
      if (s.ok()) {
        established_.fetch_add(1, std::memory_order_relaxed);
      } else {
        failed_.fetch_add(1, std::memory_order_relaxed);
        detail::to_error(*h.qp);
      }
      if (service.done) service.done(*h.qp, h.connection, s);
    }
  }
  h.qp = nullptr;  // nothing owed any more
  close(h);
}

void Listener::Impl::on_deadline(Handshake& h) {
  switch (h.state) {
    case Handshake::State::kAwaitReq:
      timed_out_.fetch_add(1, std::memory_order_relaxed);
      break;
    case Handshake::State::kAwaitRtu:
      timed_out_.fetch_add(1, std::memory_order_relaxed);
      fail_accepted(h, timed_out("no RTU from " + h.peer_address + " within " +
                                 std::to_string(options_.rtu_timeout_ms) + " ms of the REP"));
      break;
    case Handshake::State::kClosing:  // the REJ could not be sent in time
    case Handshake::State::kClosed:
      break;
  }
  close(h);
}

void Listener::Impl::on_peer_closed(Handshake& h, std::string_view why) {
  if (h.state == Handshake::State::kAwaitReq || h.state == Handshake::State::kAwaitRtu) {
    closed_early_.fetch_add(1, std::memory_order_relaxed);
  }
  fail_accepted(h, unavailable("the peer " + h.peer_address + " " + std::string(why) + " before its RTU"));
  close(h);
}

void Listener::Impl::fail_accepted(Handshake& h, const Status& why) {
  if (h.qp == nullptr) return;
  failed_.fetch_add(1, std::memory_order_relaxed);
  // dispatch_mu_ may be held by this thread already only inside on_req,
  // which releases it before calling here.
  std::lock_guard<std::mutex> dispatch(dispatch_mu_);
  if (!h.service->removed) {
    detail::to_error(*h.qp);
    if (h.service->service.done) h.service->service.done(*h.qp, h.connection, why);
  }
  h.qp = nullptr;
}

// ---- Listener ----

Listener::Listener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Listener::~Listener() = default;

Result<std::unique_ptr<Listener>> Listener::start(std::string_view address, const ListenerOptions& options) {
  sockaddr_in bound{};
  FERRY_ASSIGN_OR_RETURN(Fd listen_fd, detail::listen_tcp(address, options.backlog, &bound));
  Fd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return unavailable(std::string("eventfd: ") + std::strerror(errno));
  return std::unique_ptr<Listener>(
      new Listener(std::make_unique<Impl>(std::move(listen_fd), std::move(wake), bound, options)));
}

uint16_t Listener::port() const { return impl_->port(); }
std::string Listener::address() const { return impl_->address(); }
Status Listener::serve(std::string_view name, Service service) { return impl_->serve(name, std::move(service)); }
Status Listener::unserve(std::string_view name) { return impl_->unserve(name); }
ListenerStats Listener::stats() const { return impl_->stats(); }

}  // namespace ferry::cm
