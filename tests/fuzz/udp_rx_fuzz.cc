// libFuzzer target: the RoCEv2-over-UDP receive path -- datagram validation
// (length, ICRC, headers), QP lookup, the source-address check -- and behind
// it the NIC core, fed with arbitrary datagrams.
//
// A manual Engine on a FakeClock holds NIC B, bound to 127.0.0.1 with an
// ephemeral port, with QP qb connected to a peer P: a real UDP socket of
// this process (so B's answers have somewhere to go; it is drained and
// ignored). Each input is a list of datagrams handed to B as if received on
// its socket (Fabric::inject_datagram), claiming to come from P or from
// another port. Most random datagrams die at the ICRC; a ctl bit appends a
// correct ICRC so that the headers and the core are fuzzed too.
//
// Every input starts from the same state: qb reset and reconnected, RECVs
// reposted, memory refilled. The registered memory sits between guard zones
// checked after every input, and every datagram must be accounted for: each
// is either dropped in exactly one UDP counter or handed to the core.
//
// Input: [mode] then records [ctl][len lo][len hi][len bytes]...
//   mode bit 0..4: qb posts WRITE / READ / CMP_AND_SWP / FETCH_AND_ADD / SEND to P
//   mode bit 5..6: path MTU 256 / 1024 / 4096 / 4096
//   ctl bit 0: BTH DestQP := qb          bit 1: append a correct ICRC (else the last 4 bytes are the ICRC)
//   ctl bit 2: from P's address, another port (unconnected)   bit 3: BTH P_Key := default
//   ctl bit 4: PSN := qb's first expected PSN + int8 offset    bit 5: pad count := the payload's
//   ctl bit 6: RETH/AtomicETH VA := inside B's MR, rkey := B's  bit 7: run to idle before this datagram
//
// Run: ./udp_rx_fuzz -max_total_time=60 ../tests/fuzz/corpus/udp_rx_fuzz
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/udp.h"
#include "ferry/nic/verbs.h"
#include "ferry/nic/wire.h"
#include "fuzz_bytes.h"

namespace {

using namespace ferry;
using namespace ferry::nic;
using namespace ferry::fuzz;

#define FUZZ_CHECK(cond)            \
  do {                              \
    if (!(cond)) __builtin_trap();  \
  } while (0)

constexpr uint32_t kLoopback = 0x7F000001;
constexpr size_t kMemBytes = 64 * 1024;
constexpr size_t kGuardBytes = 4096;
constexpr uint8_t kGuardFill = 0xA5;
constexpr uint8_t kMemFill = 0x3C;
constexpr uint32_t kRecvCount = 8;
constexpr uint32_t kRecvBytes = 1024;
constexpr size_t kMaxDatagrams = 64;
constexpr uint32_t kPeerPsn = 0x10;  // first PSN P sends = first PSN qb expects
constexpr uint32_t kQbPsn = 0x20;
constexpr uint32_t kPeerQpn = 0x000123;
constexpr uint64_t kRunLimitNs = 2'000'000'000ULL;

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// A bound UDP socket standing for the peer P.
struct PeerSocket {
  int fd = -1;
  UdpEndpoint ep;
  PeerSocket() {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(kLoopback);
    FUZZ_CHECK(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    socklen_t len = sizeof(sa);
    FUZZ_CHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    ep = UdpEndpoint{kLoopback, ntohs(sa.sin_port)};
  }
  ~PeerSocket() { close(fd); }
  void drain() {
    uint8_t buf[udp::kMaxDatagramBytes + 64];
    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
    }
  }
};

struct World {
  FakeClock clock;
  PeerSocket peer;
  std::unique_ptr<Engine> engine;
  Nic* nic = nullptr;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<uint8_t, FreeDeleter> block;
  uint8_t* mem = nullptr;
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<QueuePair> qp;
  uint32_t peer_address = 0;
  bool broken = false;

  World() {
    EngineOptions options;
    options.threaded = false;
    options.clock = &clock;
    engine = std::make_unique<Engine>(options);
    NicOptions nic_options;
    nic_options.udp.enabled = true;
    nic_options.udp.bind = UdpEndpoint{kLoopback, 0};
    nic_options.udp.socket_buffer_bytes = 256 << 10;
    nic = engine->add_nic(nic_options).value();
    peer_address = engine->resolve(peer.ep).value();
    pd = nic->alloc_pd().value();
    CqInitAttr cq_attr;
    cq_attr.cqe = 1024;
    cq = nic->create_cq(cq_attr).value();
    block.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, kMemBytes + 2 * kGuardBytes)));
    FUZZ_CHECK(block != nullptr);
    mem = block.get() + kGuardBytes;
    std::memset(block.get(), kGuardFill, kGuardBytes);
    std::memset(mem + kMemBytes, kGuardFill, kGuardBytes);
    mr = nic->reg_mr(*pd, mem, kMemBytes, kAccessAll).value();
    QpInitAttr qp_attr;
    qp_attr.send_cq = cq.get();
    qp_attr.recv_cq = cq.get();
    qp_attr.cap.max_send_sge = 2;
    qp_attr.cap.max_recv_sge = 2;
    qp_attr.cap.max_send_wr = 16;
    qp_attr.cap.max_recv_wr = 16;
    qp = nic->create_qp(*pd, qp_attr).value();
  }

  ~World() {
    qp.reset();
    mr.reset();
    cq.reset();
    pd.reset();
    engine.reset();
  }

  bool guards_intact() const {
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (block.get()[i] != kGuardFill || mem[kMemBytes + i] != kGuardFill) return false;
    }
    return true;
  }
  uint64_t va(size_t offset) const { return reinterpret_cast<uint64_t>(mem) + offset; }

  void drain() {
    (void)engine->run_until_idle(kRunLimitNs);
    peer.drain();
    WorkCompletion wc[64];
    for (;;) {
      auto n = cq->poll(wc);
      if (!n.ok()) {
        broken = true;
        break;
      }
      if (n.value() == 0) break;
    }
    while (nic->poll_async_event().has_value()) {
    }
  }

  bool reset_and_connect(uint32_t path_mtu) {
    drain();
    QpAttr reset;
    reset.state = QpState::kReset;
    if (!qp->modify(reset, kQpState).ok()) return false;
    std::memset(mem, kMemFill, kMemBytes);
    ConnectOptions o;
    o.path_mtu = path_mtu;
    o.timeout = 8;
    o.retry_cnt = 2;
    o.rnr_retry = 2;
    o.max_rd_atomic = 4;
    if (!connect_qp(*qp, peer_address, kPeerQpn, kPeerPsn, kQbPsn, o).ok()) return false;
    for (uint32_t i = 0; i < kRecvCount; ++i) {
      const Sge sges[2] = {mr->sge(i * kRecvBytes, i + 1 == kRecvCount ? 100 : kRecvBytes),
                           mr->sge(kRecvCount * kRecvBytes, 2000)};
      const RecvWr wr{1000 + i, std::span<const Sge>(sges, i + 1 == kRecvCount ? 2 : 1)};
      if (!qp->post_recv(wr).ok()) return false;
    }
    return true;
  }

  // Requests qb sends to P before the datagrams arrive, so that responses
  // have something to answer.
  void post_requests(uint8_t mode) {
    const size_t base = 32 * 1024;
    std::vector<SendWr> wrs;
    const Sge write_sge = mr->sge(base, 3000);
    const Sge read_sge = mr->sge(base + 4096, 5000);
    const Sge atomic_sge = mr->sge(base + 16384, 8);
    const Sge atomic_sge2 = mr->sge(base + 16392, 8);
    const Sge send_sge = mr->sge(base + 20000, 700);
    const WrOpcode ops[5] = {WrOpcode::kRdmaWrite, WrOpcode::kRdmaRead, WrOpcode::kAtomicCmpAndSwp,
                             WrOpcode::kAtomicFetchAndAdd, WrOpcode::kSendWithImm};
    const Sge* sges[5] = {&write_sge, &read_sge, &atomic_sge, &atomic_sge2, &send_sge};
    for (int i = 0; i < 5; ++i) {
      if (!(mode & (1u << i))) continue;
      SendWr wr;
      wr.wr_id = static_cast<uint64_t>(i + 1);
      wr.opcode = ops[i];
      wr.flags = kSendSignaled;
      wr.sg_list = std::span<const Sge>(sges[i], 1);
      wr.remote_addr = 0x10000 + static_cast<uint64_t>(i) * 0x1000;  // P's memory: any VA
      wr.rkey = 0x77;
      wr.compare_add = 1;
      wrs.push_back(wr);
    }
    if (!wrs.empty()) (void)qp->post_send(wrs);
  }
};

World* world() {
  static std::unique_ptr<World> w;
  if (w == nullptr || w->broken) {
    w.reset();
    w = std::make_unique<World>();
  }
  return w.get();
}

// Applies the ctl bits that rewrite header fields; `len` excludes the ICRC.
void steer(World& w, uint8_t ctl, uint8_t* bytes, size_t len) {
  if (len < wire::kBthBytes) return;
  if (ctl & 0x01) put24(bytes + 5, w.qp->qp_num());
  if (ctl & 0x08) {
    bytes[2] = 0xFF;
    bytes[3] = 0xFF;
  }
  if (ctl & 0x10) put24(bytes + 9, wire::psn_add(kPeerPsn, static_cast<uint32_t>(static_cast<int8_t>(bytes[11]))));
  const uint8_t headers = wire::opcode_info(bytes[0]).headers;
  const size_t hlen = wire::header_length(bytes[0]);
  if ((ctl & 0x20) && hlen != 0 && hlen <= len) {
    bytes[1] = static_cast<uint8_t>((bytes[1] & ~0x30) | (wire::pad_for(len - hlen) << 4));
  }
  if (ctl & 0x40) {
    size_t at = 0;
    if (headers & wire::kHasReth) at = wire::kBthBytes + ((headers & wire::kHasFeth) ? wire::kFethBytes : 0);
    if (headers & wire::kHasAtomicEth) at = wire::kBthBytes;
    if (at != 0 && at + 12 <= len) {
      put64(bytes + at, w.va(get64(bytes + at) % kMemBytes));
      put32(bytes + at + 8, w.mr->rkey());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  World& w = *world();
  const uint8_t mode = data[0];
  static constexpr uint32_t kMtus[4] = {256, 1024, 4096, 4096};
  if (!w.reset_and_connect(kMtus[(mode >> 5) & 3])) {
    w.broken = true;
    return 0;
  }
  w.post_requests(mode);
  // Send qb's requests (no simulated time passes, so no retry timer fires).
  for (int i = 0; i < 4; ++i) w.engine->step();

  const UdpCounters before = w.nic->udp_counters();
  const uint64_t core_before = w.nic->counters().rx_packets;
  const UdpEndpoint local = *w.nic->udp_endpoint();
  const UdpEndpoint stranger{w.peer.ep.ipv4, static_cast<uint16_t>(w.peer.ep.port ^ 0x5A5A)};
  std::vector<uint8_t> dgram(udp::kMaxDatagramBytes + 64);
  size_t pos = 1;
  size_t count = 0;
  while (pos + 3 <= size && count < kMaxDatagrams) {
    const uint8_t ctl = data[pos];
    size_t len = static_cast<size_t>(data[pos + 1]) | static_cast<size_t>(data[pos + 2]) << 8;
    pos += 3;
    len = std::min({len, size - pos, dgram.size() - udp::kIcrcBytes});
    std::memcpy(dgram.data(), data + pos, len);
    pos += len;
    const UdpEndpoint& from = (ctl & 0x04) ? stranger : w.peer.ep;
    size_t total = len;
    if (ctl & 0x02) {
      steer(w, ctl, dgram.data(), len);
      if (len >= wire::kBthBytes) {
        const uint32_t crc = udp::icrc(from, local, std::span<const uint8_t>(dgram.data(), len));
        for (size_t i = 0; i < udp::kIcrcBytes; ++i) dgram[len + i] = static_cast<uint8_t>(crc >> (8 * i));
        total = len + udp::kIcrcBytes;
      }
    } else if (len > udp::kIcrcBytes) {
      steer(w, ctl, dgram.data(), len - udp::kIcrcBytes);
    }
    if (ctl & 0x80) (void)w.engine->run_until_idle(kRunLimitNs);
    w.engine->fabric().inject_datagram(w.nic->address(), std::span<const uint8_t>(dgram.data(), total), from,
                                       w.clock.now_ns());
    ++count;
  }
  w.drain();
  // Every datagram is accounted for exactly once: dropped in one counter or
  // handed to the core (the core's rx_packets).
  const UdpCounters after = w.nic->udp_counters();
  const uint64_t dropped = (after.rx_malformed - before.rx_malformed) + (after.rx_bad_icrc - before.rx_bad_icrc) +
                           (after.rx_unknown_qp - before.rx_unknown_qp) +
                           (after.rx_unconnected - before.rx_unconnected);
  const uint64_t delivered = w.nic->counters().rx_packets - core_before;
  FUZZ_CHECK(after.rx_datagrams - before.rx_datagrams == count);
  FUZZ_CHECK(dropped + delivered == count);
  FUZZ_CHECK(after.tx_queue_max <= after.tx_queue_capacity);
  FUZZ_CHECK(w.guards_intact());
  if (std::getenv("UDP_RX_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "udp_rx_fuzz: %zu datagrams: malformed %lu bad_icrc %lu unknown_qp %lu unconnected %lu "
                 "delivered %lu\n",
                 count, after.rx_malformed - before.rx_malformed, after.rx_bad_icrc - before.rx_bad_icrc,
                 after.rx_unknown_qp - before.rx_unknown_qp, after.rx_unconnected - before.rx_unconnected, delivered);
  }
  return 0;
}
