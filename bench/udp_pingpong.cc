#include "udp_pingpong.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "ferry/common/cpu.h"
#include "report.h"

namespace ferry::bench {

namespace {

// Datagram header: seq (4 bytes), chunk index (2), mode (1), reserved (1).
constexpr size_t kHeaderBytes = 8;
constexpr size_t kModeOffset = 6;
constexpr uint8_t kModePoll = 'P';
constexpr uint8_t kModeBlock = 'B';
constexpr uint64_t kEchoSpinNs = 20'000'000;  // the echo keeps polling this long after a "poll" datagram

std::atomic<bool> echo_stop{false};
void on_stop_signal(int) { echo_stop.store(true, std::memory_order_relaxed); }

sockaddr_in to_sockaddr(const nic::UdpEndpoint& ep) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ep.ipv4);
  a.sin_port = htons(ep.port);
  return a;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

const char* udp_wait_name(UdpWait w) { return w == UdpWait::kPoll ? "poll" : "block"; }

int run_udp_echo(const UdpEchoOptions& o, std::ostream& out, std::ostream& err) {
  // A helper of one benchmark run: it goes when the benchmark goes.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  const pid_t parent = getppid();
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked recvfrom returns EINTR
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  if (parent == 1) return 0;  // the parent died before PR_SET_PDEATHSIG took effect

  auto bind = nic::UdpEndpoint::parse(o.bind);
  if (!bind.ok()) {
    err << "ferry bench udp-echo: --bind: " << bind.status().message() << "\n";
    return 2;
  }
  if (o.cpu >= 0) {
    const Status s = pin_current_thread(o.cpu);
    if (!s.ok()) {
      err << "ferry bench udp-echo: --cpu " << o.cpu << ": " << s.message() << "\n";
      return 2;
    }
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err << "ferry bench udp-echo: socket: " << errno_text() << "\n";
    return 1;
  }
  sockaddr_in addr = to_sockaddr(bind.value());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    err << "ferry bench udp-echo: cannot bind " << bind.value().to_string() << ": " << errno_text() << "\n";
    return 1;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const nic::UdpEndpoint bound{ntohl(addr.sin_addr.s_addr), ntohs(addr.sin_port)};
  // Blocking receives wake up now and then to notice a stop request that
  // arrived just before the call (a signal is not queued for a later call).
  timeval tv{0, 100'000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (!o.port_file.empty()) {
    const std::string tmp = o.port_file + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr || std::fprintf(f, "%u\n", bound.port) < 0 || std::fclose(f) != 0 ||
        std::rename(tmp.c_str(), o.port_file.c_str()) != 0) {
      err << "ferry bench udp-echo: cannot write " << o.port_file << ": " << errno_text() << "\n";
      return 1;
    }
  }
  out << fmt::format("event=ready udp={} port={} pid={} cpu={}\n", bound.to_string(), bound.port, getpid(), o.cpu)
      << std::flush;

  std::vector<uint8_t> buf(65536);
  uint64_t echoed = 0;
  const Clock& clock = timing_clock();
  while (!echo_stop.load(std::memory_order_relaxed)) {
    sockaddr_in from{};
    socklen_t from_len = sizeof(from);
    ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0) continue;  // timeout or EINTR: look at the stop flag
    // Echo; after a "poll" datagram keep polling without blocking.
    for (;;) {
      (void)sendto(fd, buf.data(), static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), from_len);
      ++echoed;
      if (static_cast<size_t>(n) <= kModeOffset || buf[kModeOffset] != kModePoll) break;
      const uint64_t since = clock.now_ns();
      n = -1;
      while (n < 0 && clock.now_ns() - since < kEchoSpinNs && !echo_stop.load(std::memory_order_relaxed)) {
        from_len = sizeof(from);
        n = recvfrom(fd, buf.data(), buf.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &from_len);
        if (n < 0) cpu_relax();
      }
      if (n < 0) break;
    }
  }
  out << fmt::format("event=stop echoed={}\n", echoed) << std::flush;
  close(fd);
  return 0;
}

Result<UdpPingPong> udp_pingpong_rtt(const nic::UdpEndpoint& echo, uint32_t size, uint32_t max_datagram, UdpWait wait,
                                     uint64_t round_trips, double max_seconds) {
  const uint32_t payload = std::max<uint32_t>(size, kHeaderBytes);
  const uint32_t chunk = std::clamp<uint32_t>(max_datagram, kHeaderBytes, 65507);
  UdpPingPong r;
  r.datagrams = (payload + chunk - 1) / chunk;
  r.datagram_bytes = std::min(payload, chunk);
  if (r.datagrams > 65535) return invalid_argument("udp ping-pong: too many datagrams per message");

  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return unavailable("udp ping-pong: socket: " + errno_text());
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  sockaddr_in to = to_sockaddr(echo);
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    return unavailable("udp ping-pong: connect " + echo.to_string() + ": " + errno_text());
  }
  const int rcvbuf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  constexpr uint64_t kLossNs = 200'000'000;
  timeval tv{0, static_cast<suseconds_t>(kLossNs / 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

  std::vector<uint8_t> tx(payload, 0x5A), rx(65536);
  const Clock& clock = timing_clock();
  const uint8_t mode = wait == UdpWait::kPoll ? kModePoll : kModeBlock;
  uint32_t seq = 0;
  // One round trip: every chunk out, every chunk back. False when a
  // datagram did not come back in time (the round trip is abandoned).
  auto round_trip = [&](uint8_t mode_byte) -> Result<bool> {
    ++seq;
    for (uint32_t c = 0; c < r.datagrams; ++c) {
      uint8_t* d = tx.data() + static_cast<size_t>(c) * chunk;
      const size_t n = std::min<size_t>(chunk, payload - static_cast<size_t>(c) * chunk);
      std::memcpy(d, &seq, 4);
      const uint16_t index = static_cast<uint16_t>(c);
      std::memcpy(d + 4, &index, 2);
      d[kModeOffset] = mode_byte;
      if (send(fd, d, std::max(n, kHeaderBytes), 0) < 0) {
        if (errno == ECONNREFUSED) return unavailable("udp ping-pong: the echo at " + echo.to_string() + " is gone");
        return unavailable("udp ping-pong: send: " + errno_text());
      }
    }
    uint32_t got = 0;
    const uint64_t start = clock.now_ns();
    uint64_t spins = 0;
    while (got < r.datagrams) {
      const ssize_t n = recv(fd, rx.data(), rx.size(), mode_byte == kModePoll ? MSG_DONTWAIT : 0);
      if (n < 0) {
        if (errno == ECONNREFUSED) return unavailable("udp ping-pong: the echo at " + echo.to_string() + " is gone");
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return unavailable("udp ping-pong: recv: " + errno_text());
        }
        if (mode_byte != kModePoll || (++spins & 1023) == 0) {
          if (clock.now_ns() - start > kLossNs) return false;
        }
        continue;
      }
      uint32_t rseq = 0;
      if (n >= 4) std::memcpy(&rseq, rx.data(), 4);
      if (rseq == seq) ++got;  // stale answers of an abandoned round trip are dropped
    }
    return true;
  };

  for (int i = 0; i < 100; ++i) {
    FERRY_ASSIGN_OR_RETURN(const bool ok, round_trip(mode));
    if (!ok) ++r.lost;
  }
  const uint64_t begin = clock.now_ns();
  const uint64_t end = begin + static_cast<uint64_t>(max_seconds * 1e9);
  uint64_t now = begin;
  while (r.rtt.count() < round_trips && now < end) {
    const uint64_t t0 = clock.now_ns();
    FERRY_ASSIGN_OR_RETURN(const bool ok, round_trip(mode));
    now = clock.now_ns();
    if (ok) {
      r.rtt.record(now - t0);
    } else if (++r.lost > 100) {
      return unavailable("udp ping-pong: more than 100 round trips to " + echo.to_string() + " lost");
    }
  }
  r.seconds = static_cast<double>(now - begin) / 1e9;
  // Leave the echo blocking again, not polling on its CPU for 20 ms.
  if (mode == kModePoll) (void)round_trip(kModeBlock);
  return r;
}

}  // namespace ferry::bench
