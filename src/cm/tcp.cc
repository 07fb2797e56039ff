// TCP for the connection manager: address parsing, listening, connecting
// and whole-frame I/O, every blocking step bounded by a deadline (poll on a
// non-blocking socket), so that nothing waits on a silent peer forever.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>
#include <vector>

#include "cm_internal.h"

namespace ferry::cm::detail {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

Status set_nonblocking_nodelay(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return unavailable("fcntl(O_NONBLOCK): " + errno_text(errno));
  }
  // The handshake is a few small messages, each waited for: never let Nagle
  // hold one back for the previous one's ACK.
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return ok_status();
}

// Waits for `events` on fd until the deadline. kTimedOut when it passes.
Status wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, ms_until(deadline));
    if (n > 0) return ok_status();
    if (n == 0) {
      if (SteadyClock::now() >= deadline) return timed_out("timed out");
      continue;
    }
    if (errno != EINTR) return unavailable("poll: " + errno_text(errno));
  }
}

Status receive_exactly(int fd, uint8_t* out, size_t n, Deadline deadline, std::string_view peer,
                       std::string_view what) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = recv(fd, out + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      return unavailable(std::string(peer) + " closed the connection while we waited for " + std::string(what));
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return unavailable("reading from " + std::string(peer) + ": " + errno_text(errno));
    }
    if (Status s = wait_for(fd, POLLIN, deadline); !s.ok()) {
      if (s.code() == Code::kTimedOut) {
        return timed_out("timed out waiting for " + std::string(what) + " from " + std::string(peer));
      }
      return s;
    }
  }
  return ok_status();
}

}  // namespace

int ms_until(Deadline deadline) {
  const auto left = deadline - SteadyClock::now();
  if (left <= SteadyClock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT32_MAX ? INT32_MAX : static_cast<int>(ms);
}

void Fd::reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Result<sockaddr_in> parse_tcp_address(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return invalid_argument("'" + std::string(address) + "' is not host:port");
  }
  const std::string host(address.substr(0, colon));
  const std::string_view port_text = address.substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return invalid_argument("'" + std::string(address) + "': '" + std::string(port_text) + "' is not a TCP port");
  }
  sockaddr_in out{};
  out.sin_family = AF_INET;
  out.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &out.sin_addr) == 1) return out;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    return unavailable("cannot resolve '" + host + "': " + (rc != 0 ? gai_strerror(rc) : "no IPv4 address"));
  }
  out.sin_addr = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return out;
}

std::string to_string(const sockaddr_in& address) {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &address.sin_addr, buf, sizeof(buf));
  return std::string(buf) + ":" + std::to_string(ntohs(address.sin_port));
}

Result<Fd> listen_tcp(std::string_view address, int backlog, sockaddr_in* bound) {
  FERRY_ASSIGN_OR_RETURN(sockaddr_in addr, parse_tcp_address(address));
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return unavailable("socket: " + errno_text(errno));
  const int one = 1;
  (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return unavailable("cannot listen on " + to_string(addr) + ": " + errno_text(errno));
  }
  if (listen(fd.get(), backlog) != 0) {
    return unavailable("cannot listen on " + to_string(addr) + ": " + errno_text(errno));
  }
  socklen_t len = sizeof(*bound);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(bound), &len) != 0) {
    return unavailable("getsockname: " + errno_text(errno));
  }
  return fd;
}

Result<Fd> connect_tcp(std::string_view address, Deadline deadline, std::string* peer) {
  FERRY_ASSIGN_OR_RETURN(const sockaddr_in addr, parse_tcp_address(address));
  *peer = to_string(addr);
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return unavailable("socket: " + errno_text(errno));
  FERRY_RETURN_IF_ERROR(set_nonblocking_nodelay(fd.get()));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    // EINTR: the connection proceeds asynchronously, as for EINPROGRESS.
    if (errno != EINPROGRESS && errno != EINTR) {
      return unavailable("cannot connect to " + *peer + ": " + errno_text(errno));
    }
    if (Status s = wait_for(fd.get(), POLLOUT, deadline); !s.ok()) {
      if (s.code() == Code::kTimedOut) {
        return timed_out("cannot connect to " + *peer + ": no answer before the deadline");
      }
      return s;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) return unavailable("cannot connect to " + *peer + ": " + errno_text(err));
  }
  return fd;
}

Status send_all(int fd, std::span<const uint8_t> bytes, Deadline deadline, std::string_view peer) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return unavailable("sending to " + std::string(peer) + ": " + errno_text(errno));
    }
    if (Status s = wait_for(fd, POLLOUT, deadline); !s.ok()) {
      if (s.code() == Code::kTimedOut) return timed_out("sending to " + std::string(peer) + ": timed out");
      return s;
    }
  }
  return ok_status();
}

Result<Message> receive_message(int fd, Deadline deadline, std::string_view peer) {
  std::array<uint8_t, kFrameHeaderBytes> header;
  FERRY_RETURN_IF_ERROR(receive_exactly(fd, header.data(), header.size(), deadline, peer, "an answer"));
  Result<uint32_t> length = decode_length(header);
  if (!length.ok()) {
    return Status(length.status().code(), "from " + std::string(peer) + ": " + length.status().message());
  }
  std::vector<uint8_t> body(length.value());
  FERRY_RETURN_IF_ERROR(receive_exactly(fd, body.data(), body.size(), deadline, peer, "the rest of a message"));
  Result<Message> message = decode(body);
  if (!message.ok()) {
    return Status(message.status().code(), "from " + std::string(peer) + ": " + message.status().message());
  }
  return message;
}

}  // namespace ferry::cm::detail
