// The physical reference for the RoCEv2-over-UDP wire: a plain UDP
// ping-pong between two processes, the same payload each way, in datagrams
// of at most the path MTU (as the NIC segments a message into packets).
//
// The echo side is `ferry bench udp-echo`, a separate process started with
// posix_spawn (bench/child_process.h); the measuring side is
// udp_pingpong_rtt() on the calling thread.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "ferry/common/histogram.h"
#include "ferry/common/status.h"
#include "ferry/nic/types.h"

namespace ferry::bench {

struct UdpEchoOptions {
  std::string bind = "127.0.0.1:0";  // port 0: ephemeral
  std::string port_file;             // if set, the bound port is written here (then renamed into place)
  int cpu = -1;                      // pin the echo process (-1: no pinning)
};

// `ferry bench udp-echo`: sends every datagram back to where it came from.
// Prints `event=ready udp=IP:PORT pid=N` when bound; stops on SIGINT/SIGTERM
// or when its parent dies. Blocks in recvfrom; after a datagram marked
// "poll" it busy-polls (MSG_DONTWAIT) until none has come for 20 ms.
// Returns the exit code.
int run_udp_echo(const UdpEchoOptions& options, std::ostream& out, std::ostream& err);

// How each side waits for the next datagram.
enum class UdpWait {
  kBlock,  // blocking recv on both sides: a wakeup per datagram (netperf UDP_RR)
  kPoll,   // both sides busy-poll with MSG_DONTWAIT: no wakeups, the floor
};
const char* udp_wait_name(UdpWait w);

struct UdpPingPong {
  Histogram rtt;                // ns, one per completed round trip
  uint64_t lost = 0;            // round trips abandoned (a datagram missing after 200 ms)
  uint32_t datagrams = 0;       // each way, per round trip
  uint32_t datagram_bytes = 0;  // UDP payload of each (the last may be shorter)
  double seconds = 0;           // measured part
};

// Round trips of `size` bytes (at least 8: the header) to the echo at
// `echo` and back, in datagrams of at most `max_datagram` bytes; stops after
// `round_trips` or `max_seconds`, whichever first (100 unmeasured round trips
// before). Runs on the calling thread, wherever it is pinned. kUnavailable
// if the echo stops answering.
Result<UdpPingPong> udp_pingpong_rtt(const nic::UdpEndpoint& echo, uint32_t size, uint32_t max_datagram, UdpWait wait,
                                     uint64_t round_trips, double max_seconds);

}  // namespace ferry::bench
