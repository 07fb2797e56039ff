// Internals shared by the two sides of the connection manager: TCP sockets
// with deadlines (tcp.cc) and the QP transitions and endpoint resolution of
// the handshake (qp_setup.cc).
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/cm/cm.h"

namespace ferry::cm::detail {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

// Milliseconds left until `deadline` for poll(): at least 0, rounded up so
// a poll never returns just before its deadline and spins.
int ms_until(Deadline deadline);

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

// "host:port" -> an IPv4 socket address (getaddrinfo, so names resolve).
// kInvalidArgument for text that is not host:port or a port out of range,
// kUnavailable if the name does not resolve.
Result<sockaddr_in> parse_tcp_address(std::string_view address);
std::string to_string(const sockaddr_in& address);

// A non-blocking listening socket bound to `address` (SO_REUSEADDR, so a
// restarted listener is not refused for TIME_WAIT connections; a port with a
// live listener is still "Address already in use"). *bound: the address
// with the port resolved.
Result<Fd> listen_tcp(std::string_view address, int backlog, sockaddr_in* bound);

// A connected, non-blocking TCP socket (TCP_NODELAY). kUnavailable with the
// OS's reason ("cannot connect to 10.0.0.2:7000: Connection refused"),
// kTimedOut past the deadline. *peer: the address connected to.
Result<Fd> connect_tcp(std::string_view address, Deadline deadline, std::string* peer);

// Sends every byte of `bytes` before the deadline (MSG_NOSIGNAL: a closed
// peer is an error, not SIGPIPE).
Status send_all(int fd, std::span<const uint8_t> bytes, Deadline deadline, std::string_view peer);

// Reads one whole frame and decodes it, before the deadline. kUnavailable if
// the peer closes first, kTimedOut, or decode's errors.
Result<Message> receive_message(int fd, Deadline deadline, std::string_view peer);

// ---- QP setup (qp_setup.cc) ----

// The largest path MTU this side accepts: options.path_mtu, capped by what
// the NIC carries.
uint32_t offered_path_mtu(const nic::Nic& nic, const QpOptions& options);

// Identifies `engine`'s fabric among the Engines of every process a CM
// peer may be in (QpEndpoint::fabric_id): a mix of the process id and the
// Engine's address. Never 0.
uint64_t fabric_id(const nic::Engine& engine);

// What a peer needs to reach `qp` on `nic`.
QpEndpoint local_endpoint(const nic::Nic& nic, const nic::QueuePair& qp, uint32_t first_psn, uint32_t path_mtu);

// The first PSN to use: `chosen`, or a random 24-bit one.
uint32_t pick_first_psn(const std::optional<uint32_t>& chosen);

// The QpAttr::dest_nic through which `nic` reaches `peer`: Nic::resolve of
// its UDP endpoint, or for an in-process NIC (udp_port 0) the fabric address
// in its synthetic GID, which must be a NIC of `nic`'s own Engine (same
// fabric_id).
// kFailedPrecondition when `nic` cannot reach it, kInvalidArgument for a GID
// that is neither form.
Result<uint32_t> resolve_peer(nic::Nic& nic, const QpEndpoint& peer);

// The fabric address an in-process NIC's synthetic GID (Gid::in_process)
// carries; kInvalidArgument for any other GID. The inverse of
// nic::Gid::in_process, written from its documented format.
Result<uint32_t> in_process_address(const nic::Gid& gid);

// RESET -> INIT (INIT is left as it is); kFailedPrecondition in any other state.
Status to_init(nic::QueuePair& qp, const QpOptions& options);
// INIT -> RTR toward `peer` at `dest_nic`, receiving from peer.first_psn.
Status to_rtr(nic::QueuePair& qp, uint32_t dest_nic, const QpEndpoint& peer, uint32_t path_mtu,
              const QpOptions& options);
// RTR -> RTS, sending from `first_psn`.
Status to_rts(nic::QueuePair& qp, uint32_t first_psn, const QpOptions& options);
// Any state -> ERROR (after a failed handshake: flushes whatever was posted).
void to_error(nic::QueuePair& qp);

}  // namespace ferry::cm::detail
