// One NIC's UDP socket: framing into a bounded TX queue, sendmmsg/recvmmsg
// batches (udp_transport.h), and the Nic accessors for the UDP attachment.
#include "udp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "nic_core.h"

namespace ferry::nic::detail {

namespace {
sockaddr_in to_sockaddr(const UdpEndpoint& ep) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(ep.ipv4);
  sa.sin_port = htons(ep.port);
  return sa;
}

Status errno_status(const std::string& what) {
  return unavailable(what + ": " + std::strerror(errno));
}

// Asks for `bytes` of socket buffer; as root the FORCE variants pass the
// sysctl cap. Either way the kernel may give less, which only means more
// loss under load (the transport recovers), so failures are not errors.
void size_buffer(int fd, int option, int force_option, uint32_t bytes) {
  const int value = static_cast<int>(std::min<uint32_t>(bytes, 1u << 30));
  if (setsockopt(fd, SOL_SOCKET, force_option, &value, sizeof(value)) != 0) {
    (void)setsockopt(fd, SOL_SOCKET, option, &value, sizeof(value));
  }
}
}  // namespace

Result<std::unique_ptr<UdpPort>> UdpPort::open(const UdpOptions& options, size_t rx_batch) {
  if (options.bind.ipv4 == 0) {
    return invalid_argument("udp: bind address 0.0.0.0 is not allowed; the GID and the ICRC need the NIC's address");
  }
  if (options.tx_queue_datagrams < 4 || options.tx_queue_datagrams > (1u << 16)) {
    return invalid_argument("udp: tx_queue_datagrams must be in 4..65536");
  }
  std::string interface;
  FERRY_ASSIGN_OR_RETURN(const uint32_t if_mtu, udp::interface_mtu(options.bind.ipv4, &interface));
  FERRY_ASSIGN_OR_RETURN(uint32_t path_mtu, udp::path_mtu_for_interface(if_mtu));
  if (options.max_path_mtu < 256) return invalid_argument("udp: max_path_mtu below 256");
  while (path_mtu > options.max_path_mtu) path_mtu >>= 1;

  std::unique_ptr<UdpPort> port(new UdpPort());
  port->interface_ = interface;
  port->path_mtu_ = path_mtu;
  port->fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (port->fd_ < 0) return errno_status("udp: socket");
  // DF set and path-MTU discovery on: a datagram is never fragmented, and
  // Linux then sends IP identification 0 from an unconnected socket -- the
  // header the ICRC's pseudo-header assumes (udp.h).
  const int pmtu = IP_PMTUDISC_DO;
  if (setsockopt(port->fd_, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)) != 0) {
    return errno_status("udp: IP_MTU_DISCOVER");
  }
  size_buffer(port->fd_, SO_SNDBUF, SO_SNDBUFFORCE, options.socket_buffer_bytes);
  size_buffer(port->fd_, SO_RCVBUF, SO_RCVBUFFORCE, options.socket_buffer_bytes);
  const sockaddr_in sa = to_sockaddr(options.bind);
  if (bind(port->fd_, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
    return errno_status("udp: bind " + options.bind.to_string());
  }
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(port->fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0) return errno_status("udp: getsockname");
  port->local_ = UdpEndpoint{ntohl(bound.sin_addr.s_addr), ntohs(bound.sin_port)};

  const size_t slots = options.tx_queue_datagrams;
  port->tx_slots_.resize(slots);
  port->tx_request_high_water_ = slots * 3 / 4;
  port->tx_response_high_water_ = slots * 7 / 8;
  port->tx_hdrs_.resize(kSendBatch);
  port->tx_iovs_.resize(kSendBatch);
  rx_batch = std::clamp<size_t>(rx_batch, 1, 1024);
  port->rx_memory_.resize(rx_batch * kRxSlotBytes);
  port->rx_hdrs_.resize(rx_batch);
  port->rx_iovs_.resize(rx_batch);
  port->rx_from_.resize(rx_batch);
  return port;
}

UdpPort::~UdpPort() {
  if (fd_ >= 0) close(fd_);
}

bool UdpPort::enqueue(const Packet& p, const UdpEndpoint& to) {
  if (tx_size_ == tx_slots_.size()) flush();
  if (tx_size_ == tx_slots_.size()) return false;
  TxSlot& slot = tx_slots_[(tx_head_ + tx_size_) % tx_slots_.size()];
  const size_t n = udp::frame_datagram(p.header_bytes(), p.payload_bytes(), local_, to, slot.bytes);
  FERRY_ASSERT(n != 0, "a packet from the NIC core does not fit a datagram");
  slot.length = static_cast<uint32_t>(n);
  slot.to = to_sockaddr(to);
  ++tx_size_;
  if (tx_size_ > counters_.tx_queue_max.get()) counters_.tx_queue_max.add(tx_size_ - counters_.tx_queue_max.get());
  return true;
}

size_t UdpPort::flush() {
  while (tx_size_ != 0) {
    if (tx_paused_) {
      counters_.tx_eagain.inc();
      break;
    }
    // One sendmmsg over the contiguous run of queued slots (up to the ring's end).
    const size_t run = std::min({tx_size_, tx_slots_.size() - tx_head_, kSendBatch});
    for (size_t i = 0; i < run; ++i) {
      TxSlot& slot = tx_slots_[tx_head_ + i];
      tx_iovs_[i] = iovec{slot.bytes, slot.length};
      msghdr& m = tx_hdrs_[i].msg_hdr;
      m = msghdr{};
      m.msg_name = &slot.to;
      m.msg_namelen = sizeof(slot.to);
      m.msg_iov = &tx_iovs_[i];
      m.msg_iovlen = 1;
    }
    const int sent = sendmmsg(fd_, tx_hdrs_.data(), static_cast<unsigned>(run), MSG_DONTWAIT);
    if (sent > 0) {
      counters_.tx_datagrams.add(static_cast<uint64_t>(sent));
      tx_head_ = (tx_head_ + static_cast<size_t>(sent)) % tx_slots_.size();
      tx_size_ -= static_cast<size_t>(sent);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
      // The socket is full: pace to its capacity, retry on the next pass
      // (or when the engine, asleep, sees POLLOUT).
      counters_.tx_eagain.inc();
      break;
    }
    // Refused for good (EMSGSIZE after a route's MTU shrank, EPERM from a
    // firewall, ...): drop the head datagram, like a lossy link; the
    // transport's retransmission recovers or gives up with RETRY_EXC_ERR.
    counters_.tx_errors.inc();
    tx_head_ = (tx_head_ + 1) % tx_slots_.size();
    --tx_size_;
  }
  return tx_size_;
}

size_t UdpPort::receive(std::span<RxDatagram> out) {
  const size_t n = std::min(out.size(), rx_hdrs_.size());
  if (n == 0) return 0;
  if (skip_next_rx_) {
    skip_next_rx_ = false;
    counters_.rx_skipped.inc();
    return 0;
  }
  for (size_t i = 0; i < n; ++i) {
    rx_iovs_[i] = iovec{rx_memory_.data() + i * kRxSlotBytes, kRxSlotBytes};
    msghdr& m = rx_hdrs_[i].msg_hdr;
    m = msghdr{};
    m.msg_name = &rx_from_[i];
    m.msg_namelen = sizeof(rx_from_[i]);
    m.msg_iov = &rx_iovs_[i];
    m.msg_iovlen = 1;
  }
  int got;
  do {
    got = recvmmsg(fd_, rx_hdrs_.data(), static_cast<unsigned>(n), MSG_DONTWAIT, nullptr);
  } while (got < 0 && errno == EINTR);
  counters_.rx_calls.inc();
  if (got <= 0) {
    counters_.rx_empty_calls.inc();
    return 0;  // EAGAIN: nothing there
  }
  for (int i = 0; i < got; ++i) {
    const mmsghdr& h = rx_hdrs_[i];
    const sockaddr_in& from = rx_from_[i];
    RxDatagram& d = out[i];
    const size_t len = std::min<size_t>(h.msg_len, kRxSlotBytes);
    d.bytes = std::span<const uint8_t>(rx_memory_.data() + i * kRxSlotBytes, len);
    d.truncated = (h.msg_hdr.msg_flags & MSG_TRUNC) != 0 || h.msg_hdr.msg_namelen != sizeof(sockaddr_in) ||
                  from.sin_family != AF_INET;
    d.from = UdpEndpoint{ntohl(from.sin_addr.s_addr), ntohs(from.sin_port)};
  }
  return static_cast<size_t>(got);
}

UdpCounters UdpPort::snapshot() const {
  UdpCounters c;
  c.rx_datagrams = counters_.rx_datagrams;
  c.rx_malformed = counters_.rx_malformed;
  c.rx_bad_icrc = counters_.rx_bad_icrc;
  c.rx_unknown_qp = counters_.rx_unknown_qp;
  c.rx_calls = counters_.rx_calls;
  c.rx_empty_calls = counters_.rx_empty_calls;
  c.rx_skipped = counters_.rx_skipped;
  c.rx_unconnected = counters_.rx_unconnected;
  c.tx_datagrams = counters_.tx_datagrams;
  c.tx_eagain = counters_.tx_eagain;
  c.tx_backpressure = counters_.tx_backpressure;
  c.tx_queue_full = counters_.tx_queue_full;
  c.tx_errors = counters_.tx_errors;
  c.tx_queue_max = counters_.tx_queue_max;
  c.tx_queue_capacity = tx_slots_.size();
  return c;
}

}  // namespace ferry::nic::detail

namespace ferry::nic::detail {

Gid NicCore::gid() const {
  return udp_ ? Gid::from_ipv4(udp_->local().ipv4) : Gid::in_process(address_);
}

std::optional<UdpEndpoint> NicCore::udp_endpoint() const {
  if (udp_ == nullptr) return std::nullopt;
  return udp_->local();
}

uint32_t NicCore::max_path_mtu() const { return udp_ ? udp_->path_mtu() : wire::kMaxPayloadBytes; }

UdpCounters NicCore::udp_counters() const { return udp_ ? udp_->snapshot() : UdpCounters{}; }

}  // namespace ferry::nic::detail
