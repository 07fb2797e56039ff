// RoCEv2 over UDP, deterministic: two manual Engines on one FakeClock, each
// NIC on 127.0.0.1 with an ephemeral port, stepped in turn by the test. Also
// the pure parts: ICRC known answers, GIDs, path MTU, receive validation
// against datagrams from a raw socket.
#include "ferry/nic/udp.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "ferry/common/rng.h"
#include "nic_test_util.h"
#include "test_seed.h"

namespace ferry::nic::testing {
namespace {

constexpr uint32_t kLoopback = 0x7F000001;

std::vector<uint8_t> hex(std::string_view text) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < text.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(std::string(text.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// ---- ICRC, GIDs, path MTU -------------------------------------------------------------

TEST(UdpIcrcTest, IsaLCrc32IsTheReflectedIeeeCrc) {
  const std::string_view check = "123456789";
  const auto* bytes = reinterpret_cast<const uint8_t*>(check.data());
  EXPECT_EQ(udp::crc32(0, std::span<const uint8_t>(bytes, check.size())), 0xCBF43926u);
  // Chaining continues the CRC, as the ICRC's two-part computation needs.
  const uint32_t head = udp::crc32(0, std::span<const uint8_t>(bytes, 4));
  EXPECT_EQ(udp::crc32(head, std::span<const uint8_t>(bytes + 4, 5)), 0xCBF43926u);
}

TEST(UdpIcrcTest, MatchesAConnectX4CapturedCnp) {
  // A RoCEv2 CNP captured on a ConnectX-4 Lx (scapy's RoCE regression test):
  // IPv4 10.0.17.1 -> 10.0.18.1, id 0x718c, DF, TOS 0xc2, TTL 64; UDP 0 -> 4791;
  // BTH opcode 0x81, BECN set, DestQP 0x118; 16 zero bytes; ICRC 82 fd 00 2a.
  const std::vector<uint8_t> udp_payload = hex(
      "8100ffff40000118000000000000000000000000000000000000000082fd002a");
  const UdpEndpoint src{0x0A001101, 0};
  const UdpEndpoint dst{0x0A001201, kRoceV2UdpPort};
  const std::span<const uint8_t> body(udp_payload.data(), udp_payload.size() - udp::kIcrcBytes);
  const uint32_t crc = udp::icrc(src, dst, body, 0x718c);
  const uint8_t* wire_icrc = udp_payload.data() + body.size();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(static_cast<uint8_t>(crc >> (8 * i)), wire_icrc[i]) << "byte " << i;
  // The masked fields are masked: BECN, TOS and TTL do not enter the CRC,
  // the IP identification does.
  std::vector<uint8_t> flipped(body.begin(), body.end());
  flipped[4] = 0x00;  // clear BECN
  EXPECT_EQ(udp::icrc(src, dst, flipped, 0x718c), crc);
  EXPECT_NE(udp::icrc(src, dst, body, 0x718d), crc);
}

TEST(UdpIcrcTest, MatchesScapysUcSendOnly) {
  // scapy's RoCE example: 192.168.0.7 -> itself, id 1144, DF; UDP 49152 ->
  // 4791; UC SEND_ONLY (0x24), MigReq, PadCnt 2, DestQP 211, PSN 13571856,
  // 18 payload bytes and 2 pad bytes; ICRC 78 f3 53 f3.
  const std::vector<uint8_t> body = hex(
      "2460ffff000000d300cf1710"
      "4630818be28935d90e9a95505401be885e500000");
  const UdpEndpoint ep{0xC0A80007, 49152};
  const uint32_t crc = udp::icrc(ep, UdpEndpoint{0xC0A80007, kRoceV2UdpPort}, body, 1144);
  EXPECT_EQ(crc, 0xF353F378u);  // wire bytes 78 f3 53 f3, least significant first
}

TEST(UdpIcrcTest, MatchesTheWorkedExampleOfWireFormatMd) {
  // docs/wire-format.md, "RoCEv2 over UDP": the 5-byte WRITE_ONLY ("hello")
  // from 10.0.0.1:4791 to 10.0.0.2:4791 ends in ICRC ad c8 05 b5.
  const std::vector<uint8_t> packet = hex("0a70ffff000010018000006400007f0000001000000102030000000568656c6c6f");
  uint8_t dgram[udp::kMaxDatagramBytes];
  const size_t n = udp::frame_datagram(std::span<const uint8_t>(packet.data(), 28),
                                       std::span<const uint8_t>(packet.data() + 28, 5),
                                       UdpEndpoint{0x0A000001, kRoceV2UdpPort}, UdpEndpoint{0x0A000002, kRoceV2UdpPort},
                                       dgram);
  ASSERT_EQ(n, 40u);
  EXPECT_EQ(std::vector<uint8_t>(dgram + 33, dgram + 40), hex("000000adc805b5"));
}

TEST(UdpIcrcTest, FramedDatagramsParseBackAndEveryBitFlipIsCaught) {
  wire::Headers h;
  h.bth.opcode = wire::kWriteOnly;
  h.bth.dest_qp = 0x1234;
  h.bth.psn = 77;
  h.bth.ack_req = true;
  h.reth = wire::Reth{0x1000, 0x55, 5};
  h.bth.pad_count = wire::pad_for(5);
  uint8_t header[wire::kMaxHeaderBytes];
  const size_t hlen = wire::serialize_headers(h, header);
  const uint8_t payload[5] = {'h', 'e', 'l', 'l', 'o'};
  const UdpEndpoint a{kLoopback, 1000}, b{kLoopback, 2000};
  uint8_t dgram[udp::kMaxDatagramBytes];
  const size_t n = udp::frame_datagram(std::span<const uint8_t>(header, hlen), payload, a, b, dgram);
  ASSERT_EQ(n, hlen + 5 + 3 + udp::kIcrcBytes);
  udp::ParsedDatagram d;
  ASSERT_EQ(udp::parse_datagram(std::span<const uint8_t>(dgram, n), a, b, &d), udp::RxVerdict::kOk);
  EXPECT_EQ(d.headers.bth.dest_qp, 0x1234u);
  EXPECT_EQ(d.header_len, hlen);
  ASSERT_EQ(d.payload.size(), 5u);
  EXPECT_EQ(std::memcmp(d.payload.data(), payload, 5), 0);
  // The pseudo-header binds the datagram to its endpoints.
  EXPECT_EQ(udp::parse_datagram(std::span<const uint8_t>(dgram, n), UdpEndpoint{kLoopback, 1001}, b, &d),
            udp::RxVerdict::kBadIcrc);
  // Any flipped bit outside the masked BTH byte 4 fails the ICRC.
  for (size_t bit = 0; bit < n * 8; ++bit) {
    if (bit / 8 == 4) continue;
    dgram[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_NE(udp::parse_datagram(std::span<const uint8_t>(dgram, n), a, b, &d), udp::RxVerdict::kOk) << bit;
    dgram[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

TEST(UdpIcrcTest, DatagramsTooShortOrTooLongAreMalformed) {
  udp::ParsedDatagram d;
  const UdpEndpoint a{kLoopback, 1}, b{kLoopback, 2};
  std::vector<uint8_t> bytes(udp::kMinDatagramBytes - 1, 0);
  EXPECT_EQ(udp::parse_datagram(bytes, a, b, &d), udp::RxVerdict::kMalformed);
  bytes.assign(udp::kMaxDatagramBytes + 1, 0);
  EXPECT_EQ(udp::parse_datagram(bytes, a, b, &d), udp::RxVerdict::kMalformed);
  EXPECT_EQ(udp::parse_datagram({}, a, b, &d), udp::RxVerdict::kMalformed);
}

TEST(GidTest, Ipv4MappedFormatsParsesAndRoundTrips) {
  const Gid g = Gid::from_ipv4(kLoopback);
  EXPECT_EQ(g.to_string(), "::ffff:127.0.0.1");
  EXPECT_TRUE(g.is_ipv4_mapped());
  EXPECT_EQ(g.ipv4(), kLoopback);
  auto parsed = Gid::parse("::ffff:127.0.0.1");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed.value(), g);
  auto dotted = Gid::parse("10.1.2.3");
  ASSERT_TRUE(dotted.ok());
  EXPECT_EQ(dotted->to_string(), "::ffff:10.1.2.3");
  auto full = Gid::parse("0000:0000:0000:0000:0000:ffff:0a01:0203");
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full.value(), dotted.value());
  auto ll = Gid::parse("fe80::1");
  ASSERT_TRUE(ll.ok());
  EXPECT_FALSE(ll->is_ipv4_mapped());
  for (const char* bad : {"", "xyz", "1.2.3", "1.2.3.256", "::ffff:1.2.3.4.5", "fe80:::1", "1:2:3:4:5:6:7:8:9"}) {
    EXPECT_EQ(Gid::parse(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(GidTest, InProcessGidsAreLinkLocalEui64OfTheFabricAddress) {
  EXPECT_EQ(Gid::in_process(1).to_string(), "fe80::ff:fe00:1");
  EXPECT_EQ(Gid::in_process(0x123456).to_string(), "fe80::ff:fe12:3456");
  EXPECT_FALSE(Gid::in_process(7).is_ipv4_mapped());
  EXPECT_NE(Gid::in_process(1), Gid::in_process(2));
}

TEST(GidTest, UdpEndpointsParseAndComeFromMappedGidsOnly) {
  auto ep = UdpEndpoint::parse("10.0.0.2:5000");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->ipv4, 0x0A000002u);
  EXPECT_EQ(ep->port, 5000);
  EXPECT_EQ(ep->to_string(), "10.0.0.2:5000");
  auto default_port = UdpEndpoint::parse("10.0.0.2");
  ASSERT_TRUE(default_port.ok());
  EXPECT_EQ(default_port->port, kRoceV2UdpPort);
  for (const char* bad : {"10.0.0.2:", "10.0.0.2:70000", "10.0.0.2:x", "host:1", ":1"}) {
    EXPECT_EQ(UdpEndpoint::parse(bad).status().code(), Code::kInvalidArgument) << bad;
  }
  auto from = UdpEndpoint::from_gid(Gid::from_ipv4(0x0A000002), 99);
  ASSERT_TRUE(from.ok());
  EXPECT_EQ(from.value(), (UdpEndpoint{0x0A000002, 99}));
  EXPECT_EQ(UdpEndpoint::from_gid(Gid::in_process(3)).status().code(), Code::kInvalidArgument);
}

TEST(UdpPathMtuTest, InterfaceMtuMinusOverheadRoundedDownToAnIbMtu) {
  EXPECT_EQ(udp::kPathOverheadBytes, 72u);  // IPv4 20 + UDP 8 + BTH/AtomicETH 40 + ICRC 4
  const std::pair<uint32_t, uint32_t> cases[] = {
      {65536, 4096}, {9000, 4096}, {4096 + 72, 4096}, {4096 + 71, 2048}, {1500, 1024},
      {1400, 1024},  {1024 + 72, 1024}, {1024 + 71, 512}, {256 + 72, 256}};
  for (const auto& [if_mtu, path_mtu] : cases) {
    auto r = udp::path_mtu_for_interface(if_mtu);
    ASSERT_TRUE(r.ok()) << if_mtu;
    EXPECT_EQ(r.value(), path_mtu) << if_mtu;
  }
  EXPECT_EQ(udp::path_mtu_for_interface(256 + 71).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(udp::path_mtu_for_interface(0).status().code(), Code::kInvalidArgument);
}

TEST(UdpPathMtuTest, LoopbackMtuIsReadFromTheInterface) {
  std::string name;
  auto mtu = udp::interface_mtu(kLoopback, &name);
  ASSERT_TRUE(mtu.ok()) << mtu.status().to_string();
  std::ifstream sys("/sys/class/net/" + name + "/mtu");
  uint32_t expected = 0;
  sys >> expected;
  EXPECT_EQ(mtu.value(), expected);
  // 192.0.2.1 (TEST-NET-1) is on no interface.
  EXPECT_EQ(udp::interface_mtu(0xC0000201).status().code(), Code::kNotFound);
  // Every address of the loopback network is the loopback interface's.
  std::string other;
  auto mtu2 = udp::interface_mtu(0x7F420002, &other);  // 127.66.0.2
  ASSERT_TRUE(mtu2.ok()) << mtu2.status().to_string();
  EXPECT_EQ(other, name);
  EXPECT_EQ(mtu2.value(), expected);
}

// ---- two engines over UDP ----------------------------------------------------------------

class UdpPairTest : public ::testing::Test {
 protected:
  explicit UdpPairTest(const FaultModel& faults = {}) {
    for (int i = 0; i < 2; ++i) {
      EngineOptions o;
      o.threaded = false;
      o.clock = &clock_;
      o.faults = faults;
      o.faults.seed = faults.seed + static_cast<uint64_t>(i);
      engines_[i] = std::make_unique<Engine>(o);
    }
  }
  ~UdpPairTest() override {
    qps_.clear();
    for (auto& h : hosts_) {
      h->mr.reset();
      h->cq.reset();
      h->pd.reset();
    }
  }

  static NicOptions udp_nic(uint32_t tx_queue = 256, uint32_t max_path_mtu = 4096) {
    NicOptions n;
    n.udp.enabled = true;
    n.udp.bind = UdpEndpoint{kLoopback, 0};
    n.udp.tx_queue_datagrams = tx_queue;
    n.udp.max_path_mtu = max_path_mtu;
    return n;
  }

  Host& add_host(int engine, const NicOptions& options = udp_nic()) {
    auto host = std::make_unique<Host>();
    auto nic = engines_[engine]->add_nic(options);
    EXPECT_TRUE(nic.ok()) << nic.status().to_string();
    host->nic = nic.value();
    host->pd = host->nic->alloc_pd().value();
    CqInitAttr cq_attr;
    cq_attr.cqe = 4096;
    host->cq = host->nic->create_cq(cq_attr).value();
    host->mem_bytes = 4 << 20;
    host->mem = aligned_bytes(host->mem_bytes);
    host->mr = host->nic->reg_mr(*host->pd, host->mem.get(), host->mem_bytes, kAccessAll).value();
    host_engine_[host.get()] = engine;
    hosts_.push_back(std::move(host));
    return *hosts_.back();
  }

  QueuePair& add_qp(Host& h, uint32_t depth = 256) {
    QpInitAttr attr;
    attr.send_cq = h.cq.get();
    attr.recv_cq = h.cq.get();
    attr.cap.max_send_wr = depth;
    attr.cap.max_recv_wr = depth;
    auto qp = h.nic->create_qp(*h.pd, attr);
    EXPECT_TRUE(qp.ok()) << qp.status().to_string();
    qps_.push_back(std::move(qp).value());
    return *qps_.back();
  }

  // Connects qa (on a) and qb (on b) through each engine's resolve() of the
  // other NIC's endpoint: what two processes do after exchanging GID, port
  // and QP number out of band.
  void connect(QueuePair& qa, Host& a, QueuePair& qb, Host& b, ConnectOptions o = {}) {
    Engine& ea = *engines_[host_engine_[&a]];
    Engine& eb = *engines_[host_engine_[&b]];
    auto b_addr = ea.resolve(*b.nic->udp_endpoint());
    auto a_addr = eb.resolve(*a.nic->udp_endpoint());
    ASSERT_TRUE(b_addr.ok() && a_addr.ok());
    ASSERT_TRUE(Fabric::is_remote(b_addr.value()));
    ASSERT_TRUE(connect_qp(qa, b_addr.value(), qb.qp_num(), o.b_psn, o.a_psn, o).ok());
    ASSERT_TRUE(connect_qp(qb, a_addr.value(), qa.qp_num(), o.a_psn, o.b_psn, o).ok());
  }

  // Steps both engines until pred() holds. When neither has work, simulated
  // time jumps to the next deadline -- but first both keep stepping for a
  // moment of real time: loopback usually delivers a datagram before
  // sendmmsg returns, yet the kernel may defer it to ksoftirqd.
  Status run_until(const std::function<bool()>& pred, uint64_t max_sim_ns = 60'000'000'000ULL) {
    const uint64_t start = clock_.now_ns();
    for (;;) {
      if (pred()) return ok_status();
      bool work = engines_[0]->step();
      work |= engines_[1]->step();
      if (work) continue;
      const auto grace_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
      while (!work && std::chrono::steady_clock::now() < grace_end) {
        work = engines_[0]->step();
        work |= engines_[1]->step();
      }
      if (work) continue;
      const uint64_t deadline = std::min(engines_[0]->next_deadline_ns(), engines_[1]->next_deadline_ns());
      if (deadline == UINT64_MAX) return pred() ? ok_status() : timed_out("both engines idle, condition false");
      if (deadline - start > max_sim_ns) return timed_out("simulated time limit");
      clock_.advance_to(std::max(deadline, clock_.now_ns()));
    }
  }

  // Runs both engines until neither has anything left to do (datagrams in
  // flight included), for checks of counters that must balance.
  void settle() {
    (void)run_until([] { return false; });
  }

  std::vector<WorkCompletion> poll_n(CompletionQueue& cq, size_t n) {
    std::vector<WorkCompletion> out;
    const Status s = run_until([&] {
      WorkCompletion wc[64];
      auto got = cq.poll(wc);
      EXPECT_TRUE(got.ok());
      if (got.ok()) out.insert(out.end(), wc, wc + got.value());
      return out.size() >= n;
    });
    EXPECT_TRUE(s.ok()) << s.to_string() << " (" << out.size() << " of " << n << " completions)";
    return out;
  }

  static SendWr wr(WrOpcode op, uint64_t id, const Sge* sge, uint64_t remote = 0, uint32_t rkey = 0) {
    SendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.flags = kSendSignaled;
    w.sg_list = std::span<const Sge>(sge, sge ? 1 : 0);
    w.remote_addr = remote;
    w.rkey = rkey;
    return w;
  }

  FakeClock clock_;
  std::unique_ptr<Engine> engines_[2];
  std::vector<std::unique_ptr<Host>> hosts_;
  std::map<const Host*, int> host_engine_;
  std::vector<std::unique_ptr<QueuePair>> qps_;
};

TEST_F(UdpPairTest, UdpNicHasAMappedGidAnEphemeralPortAndLoopbacksPathMtu) {
  Host& a = add_host(0);
  Host& plain = add_host(0, NicOptions{});
  const auto ep = a.nic->udp_endpoint();
  ASSERT_TRUE(ep.has_value());
  EXPECT_EQ(ep->ipv4, kLoopback);
  EXPECT_NE(ep->port, 0);
  EXPECT_EQ(a.nic->gid().to_string(), "::ffff:127.0.0.1");
  EXPECT_EQ(a.nic->max_path_mtu(), 4096u);
  EXPECT_FALSE(plain.nic->udp_endpoint().has_value());
  EXPECT_EQ(plain.nic->gid(), Gid::in_process(plain.nic->address()));
  EXPECT_EQ(plain.nic->udp_counters().tx_queue_capacity, 0u);
  EXPECT_EQ(a.nic->udp_counters().tx_queue_capacity, 256u);
}

TEST_F(UdpPairTest, BadBindAddressesAreRefusedAndAddNothing) {
  NicOptions any = udp_nic();
  any.udp.bind.ipv4 = 0;
  EXPECT_EQ(engines_[0]->add_nic(any).status().code(), Code::kInvalidArgument);
  NicOptions foreign = udp_nic();
  foreign.udp.bind.ipv4 = 0xC0000201;  // TEST-NET-1: on no interface
  EXPECT_EQ(engines_[0]->add_nic(foreign).status().code(), Code::kNotFound);
  Host& a = add_host(0);
  NicOptions taken = udp_nic();
  taken.udp.bind = *a.nic->udp_endpoint();
  auto dup = engines_[1]->add_nic(taken);
  EXPECT_EQ(dup.status().code(), Code::kUnavailable) << dup.status().to_string();
  // The failures attached nothing: the next NIC is address 0 of engine 1.
  Host& b = add_host(1);
  EXPECT_EQ(b.nic->address(), 0u);
}

TEST_F(UdpPairTest, ResolveNamesEndpointsOnceAndLocalOnesInProcess) {
  Host& a = add_host(0);
  Host& b = add_host(1);
  Engine& e = *engines_[0];
  const UdpEndpoint b_ep = *b.nic->udp_endpoint();
  auto r1 = e.resolve(b_ep);
  auto r2 = e.resolve(b_ep);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(r1.value(), r2.value());
  EXPECT_TRUE(Fabric::is_remote(r1.value()));
  EXPECT_EQ(e.remote_endpoint(r1.value()).value(), b_ep);
  auto own = e.resolve(*a.nic->udp_endpoint());
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own.value(), a.nic->address());
  EXPECT_EQ(e.resolve(UdpEndpoint{0, 4791}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(e.resolve(UdpEndpoint{kLoopback, 0}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(e.remote_endpoint(0).status().code(), Code::kNotFound);
}

TEST_F(UdpPairTest, ModifyRefusesRoutesAndMtusTheNicCannotCarry) {
  Host& plain = add_host(0, NicOptions{});
  Host& small = add_host(0, udp_nic(256, 1024));
  Host& b = add_host(1);
  const uint32_t b_addr = engines_[0]->resolve(*b.nic->udp_endpoint()).value();
  QueuePair& qb = add_qp(b);
  // An in-process NIC cannot reach a remote endpoint.
  QueuePair& qp = add_qp(plain);
  Status s = connect_qp(qp, b_addr, qb.qp_num(), 1, 2);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("no UDP socket"), std::string::npos) << s.to_string();
  // An address nobody resolved.
  QueuePair& qs = add_qp(small);
  s = connect_qp(qs, Fabric::kRemoteAddressBase + 99, qb.qp_num(), 1, 2);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  // A path MTU above the NIC's (capped to 1024 here).
  EXPECT_EQ(small.nic->max_path_mtu(), 1024u);
  QueuePair& qs2 = add_qp(small);
  ConnectOptions o;
  o.path_mtu = 2048;
  s = connect_qp(qs2, b_addr, qb.qp_num(), 1, 2, o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("path_mtu 2048 exceeds 1024"), std::string::npos) << s.to_string();
  EXPECT_EQ(qs2.state(), QpState::kInit);
  QueuePair& qs3 = add_qp(small);
  o.path_mtu = 1024;
  EXPECT_TRUE(connect_qp(qs3, b_addr, qb.qp_num(), 1, 2, o).ok());
}

TEST_F(UdpPairTest, WriteReadSendAndAtomicsCrossTheSocketsWithTheRightData) {
  Host& a = add_host(0);
  Host& b = add_host(1);
  QueuePair& qa = add_qp(a);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);

  // WRITE 64 B, then a 1 MiB WRITE (256 packets), then READ it back.
  for (size_t i = 0; i < (1u << 20) + 64; ++i) a.mem[i] = static_cast<uint8_t>(i * 7 + 3);
  const Sge small = a.sge(0, 64);
  const Sge big = a.sge(64, 1u << 20);
  ASSERT_TRUE(qa.post_send(wr(WrOpcode::kRdmaWrite, 1, &small, b.va(0), b.mr->rkey())).ok());
  ASSERT_TRUE(qa.post_send(wr(WrOpcode::kRdmaWrite, 2, &big, b.va(4096), b.mr->rkey())).ok());
  const Sge back = a.sge(2u << 20, 1u << 20);
  ASSERT_TRUE(qa.post_send(wr(WrOpcode::kRdmaRead, 3, &back, b.va(4096), b.mr->rkey())).ok());
  auto wcs = poll_n(*a.cq, 3);
  ASSERT_EQ(wcs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess) << wc_status_name(wcs[i].status);
    EXPECT_EQ(wcs[i].wr_id, i + 1);
  }
  EXPECT_EQ(wcs[2].opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(wcs[2].byte_len, 1u << 20);
  EXPECT_EQ(std::memcmp(b.at(0), a.at(0), 64), 0);
  EXPECT_EQ(std::memcmp(b.at(4096), a.at(64), 1u << 20), 0);
  EXPECT_EQ(std::memcmp(a.at(2u << 20), a.at(64), 1u << 20), 0);

  // SEND_WITH_IMM into a posted RECV (3000 B: a FIRST and a LAST packet).
  const Sge recv = b.sge(3u << 20, 4096);
  ASSERT_TRUE(qb.post_recv(RecvWr{77, std::span<const Sge>(&recv, 1)}).ok());
  const Sge msg = a.sge(100, 3000);
  SendWr send = wr(WrOpcode::kSendWithImm, 4, &msg);
  send.imm_data = 0xC0FFEE;
  ASSERT_TRUE(qa.post_send(send).ok());
  wcs = poll_n(*b.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[0].wr_id, 77u);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(wcs[0].byte_len, 3000u);
  EXPECT_TRUE(wcs[0].has_imm);
  EXPECT_EQ(wcs[0].imm_data, 0xC0FFEEu);
  EXPECT_EQ(std::memcmp(b.at(3u << 20), a.at(100), 3000), 0);
  EXPECT_EQ(poll_n(*a.cq, 1).at(0).status, WcStatus::kSuccess);

  // CMP_AND_SWP then FETCH_AND_ADD on one word at B.
  uint64_t word = 40;
  std::memcpy(b.at(8192 + (1u << 20)), &word, 8);
  const uint64_t target = b.va(8192 + (1u << 20));
  const Sge r1 = a.sge(3u << 20, 8), r2 = a.sge((3u << 20) + 8, 8);
  SendWr cas = wr(WrOpcode::kAtomicCmpAndSwp, 5, &r1, target, b.mr->rkey());
  cas.compare_add = 40;
  cas.swap = 100;
  SendWr faa = wr(WrOpcode::kAtomicFetchAndAdd, 6, &r2, target, b.mr->rkey());
  faa.compare_add = 5;
  const SendWr both[2] = {cas, faa};
  ASSERT_TRUE(qa.post_send(both).ok());
  wcs = poll_n(*a.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
  uint64_t got_cas, got_faa, now;
  std::memcpy(&got_cas, a.at(3u << 20), 8);
  std::memcpy(&got_faa, a.at((3u << 20) + 8), 8);
  std::memcpy(&now, b.at(8192 + (1u << 20)), 8);
  EXPECT_EQ(got_cas, 40u);
  EXPECT_EQ(got_faa, 100u);
  EXPECT_EQ(now, 105u);

  // It all went over the sockets, none through either in-process fabric,
  // and nothing was dropped as invalid.
  settle();
  for (int e = 0; e < 2; ++e) EXPECT_EQ(engines_[e]->fabric().counters().delivered.get(), 0u);
  const UdpCounters ca = a.nic->udp_counters(), cb = b.nic->udp_counters();
  EXPECT_GT(ca.tx_datagrams, 256u);
  EXPECT_EQ(ca.tx_datagrams, cb.rx_datagrams);
  EXPECT_EQ(cb.tx_datagrams, ca.rx_datagrams);
  for (const UdpCounters& c : {ca, cb}) {
    EXPECT_EQ(c.rx_malformed + c.rx_bad_icrc + c.rx_unknown_qp + c.rx_unconnected, 0u);
    EXPECT_EQ(c.tx_queue_full + c.tx_errors, 0u);
    EXPECT_LE(c.tx_queue_max, c.tx_queue_capacity);
  }
}

TEST_F(UdpPairTest, ManyOutstandingWritesAndReadsOnSeveralQpsCompleteInOrder) {
  Host& a = add_host(0);
  Host& b = add_host(1);
  constexpr int kQps = 4;
  constexpr int kOps = 256;  // per QP, 64 outstanding
  constexpr uint32_t kBytes = 6000;  // two packets at 4096
  QueuePair* qas[kQps];
  for (int q = 0; q < kQps; ++q) {
    qas[q] = &add_qp(a, 64);
    QueuePair& qb = add_qp(b, 64);
    connect(*qas[q], a, qb, b);
  }
  for (size_t i = 0; i < a.mem_bytes; ++i) a.mem[i] = static_cast<uint8_t>(i * 13 + 1);
  int posted[kQps] = {}, done[kQps] = {};
  int total_done = 0;
  const Status s = run_until([&] {
    for (int q = 0; q < kQps; ++q) {
      while (posted[q] < kOps && posted[q] - done[q] < 64) {
        const int i = posted[q];
        const size_t off = static_cast<size_t>(q) * 600'000 + static_cast<size_t>(i % 64) * 8192;
        const Sge sge = a.sge(off, kBytes);
        // Odd ops READ back what an even op wrote into the same slot.
        const bool read = i % 2 == 1;
        const Sge rsge = a.sge(2'500'000 + off / 2, kBytes);
        SendWr w = wr(read ? WrOpcode::kRdmaRead : WrOpcode::kRdmaWrite, static_cast<uint64_t>(q) << 32 | i,
                      read ? &rsge : &sge, b.va(off), b.mr->rkey());
        if (!qas[q]->post_send(w).ok()) break;
        ++posted[q];
      }
    }
    WorkCompletion wc[64];
    auto got = a.cq->poll(wc);
    EXPECT_TRUE(got.ok());
    for (uint32_t k = 0; k < got.value(); ++k) {
      EXPECT_EQ(wc[k].status, WcStatus::kSuccess);
      const int q = static_cast<int>(wc[k].wr_id >> 32);
      EXPECT_EQ(static_cast<int>(wc[k].wr_id & 0xFFFFFFFF), done[q]) << "completions out of order on QP " << q;
      ++done[q];
      ++total_done;
    }
    return total_done == kQps * kOps;
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int q = 0; q < kQps; ++q) {
    const size_t off = static_cast<size_t>(q) * 600'000 + 63 * 8192;
    EXPECT_EQ(std::memcmp(b.at(off - 8192), a.at(off - 8192), kBytes), 0);
  }
  const UdpCounters ca = a.nic->udp_counters();
  EXPECT_LE(ca.tx_queue_max, ca.tx_queue_capacity);
}

// ---- the bounded TX queue ------------------------------------------------------------

TEST_F(UdpPairTest, AFullSocketFillsTheTxQueueToItsBoundThenRequestsWaitAndAllComplete) {
  Host& a = add_host(0, udp_nic(16));
  Host& b = add_host(1);
  QueuePair& qa = add_qp(a);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  for (size_t i = 0; i < 200 * 4096; ++i) a.mem[i] = static_cast<uint8_t>(i ^ 0x5A);
  // The socket refuses everything: requests pile up in the TX queue until
  // its high-water mark, then the requester is back-pressured.
  engines_[0]->fabric().set_udp_tx_paused(a.nic->address(), true);
  for (int i = 0; i < 200; ++i) {
    const Sge sge = a.sge(static_cast<size_t>(i) * 4096, 4096);
    ASSERT_TRUE(qa.post_send(wr(WrOpcode::kRdmaWrite, static_cast<uint64_t>(i), &sge, b.va(i * 4096ul),
                                b.mr->rkey()))
                    .ok());
  }
  for (int i = 0; i < 20; ++i) {
    engines_[0]->step();
    engines_[1]->step();
  }
  UdpCounters c = a.nic->udp_counters();
  EXPECT_EQ(c.tx_queue_capacity, 16u);
  EXPECT_EQ(c.tx_queue_max, 12u);  // 3/4: requests stop at the high-water mark
  EXPECT_GT(c.tx_backpressure, 0u);
  EXPECT_GT(c.tx_eagain, 0u);
  EXPECT_EQ(c.tx_datagrams, 0u);
  EXPECT_EQ(b.nic->udp_counters().rx_datagrams, 0u);
  // Room again: everything completes, exactly once, in order, with its data.
  engines_[0]->fabric().set_udp_tx_paused(a.nic->address(), false);
  auto wcs = poll_n(*a.cq, 200);
  ASSERT_EQ(wcs.size(), 200u);
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess);
    EXPECT_EQ(wcs[i].wr_id, i);
  }
  EXPECT_EQ(std::memcmp(b.at(0), a.at(0), 200 * 4096), 0);
  c = a.nic->udp_counters();
  EXPECT_LE(c.tx_queue_max, c.tx_queue_capacity);
}

TEST_F(UdpPairTest, ResponsesFindingTheTxQueueFullAreDroppedCountedAndRecovered) {
  Host& a = add_host(0);
  Host& b = add_host(1, udp_nic(8));
  constexpr int kQps = 24;
  QueuePair* qas[kQps];
  ConnectOptions o;
  o.timeout = 8;  // ~1 ms local ACK timeout: recovery by retransmission
  for (int q = 0; q < kQps; ++q) {
    qas[q] = &add_qp(a, 8);
    QueuePair& qb = add_qp(b, 8);
    connect(*qas[q], a, qb, b, o);
  }
  // B cannot send: each QP's WRITE gets an ACK that has to queue; 8 fit.
  engines_[1]->fabric().set_udp_tx_paused(b.nic->address(), true);
  for (int q = 0; q < kQps; ++q) {
    a.mem[q * 64] = static_cast<uint8_t>(q + 1);
    const Sge sge = a.sge(q * 64, 64);
    ASSERT_TRUE(qas[q]->post_send(wr(WrOpcode::kRdmaWrite, q, &sge, b.va(q * 64), b.mr->rkey())).ok());
  }
  ASSERT_TRUE(run_until([&] { return b.nic->udp_counters().rx_datagrams >= kQps; }).ok());
  UdpCounters cb = b.nic->udp_counters();
  EXPECT_EQ(cb.tx_queue_max, 8u);
  // At least the 16 ACKs that found no room (more if a retransmission beat
  // the check: the kernel may defer loopback delivery past the grace period).
  EXPECT_GE(cb.tx_queue_full, static_cast<uint64_t>(kQps - 8));
  engines_[1]->fabric().set_udp_tx_paused(b.nic->address(), false);
  auto wcs = poll_n(*a.cq, kQps);
  ASSERT_EQ(wcs.size(), static_cast<size_t>(kQps));
  std::set<uint64_t> ids;
  for (const auto& wc : wcs) {
    EXPECT_EQ(wc.status, WcStatus::kSuccess);
    ids.insert(wc.wr_id);
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kQps));  // each exactly once
  for (int q = 0; q < kQps; ++q) EXPECT_EQ(b.mem[q * 64], q + 1);
  EXPECT_GT(a.nic->counters().ack_timeouts, 0u);  // the dropped ACKs were recovered by the timer
  EXPECT_LE(b.nic->udp_counters().tx_queue_max, 8u);
}

// ---- faults on the UDP path ----------------------------------------------------------

class UdpFaultTest : public UdpPairTest {
 protected:
  static FaultModel faults() {
    FaultModel f;
    f.seed = ferry::testing::seed_from_env().value_or(0x5EED);
    f.drop = 0.03;
    f.duplicate = 0.03;
    f.delay = 0.03;
    f.delay_max_ns = 200'000;
    return f;
  }
  UdpFaultTest() : UdpPairTest(faults()) {}
};

TEST_F(UdpFaultTest, EveryOperationCompletesExactlyOnceWithTheRightData) {
  const uint64_t seed = faults().seed;
  ferry::testing::print_seed(seed);
  Host& a = add_host(0);
  Host& b = add_host(1);
  QueuePair& qa = add_qp(a, 64);
  QueuePair& qb = add_qp(b, 64);
  ConnectOptions o;
  o.timeout = 8;
  connect(qa, a, qb, b, o);
  Rng rng(seed);
  for (size_t i = 0; i < (1u << 20); ++i) a.mem[i] = static_cast<uint8_t>(rng.next());
  for (int i = 0; i < 64; ++i) {
    const Sge r = b.sge((2u << 20) + i * 16384ul, 16384);
    ASSERT_TRUE(qb.post_recv(RecvWr{static_cast<uint64_t>(i), std::span<const Sge>(&r, 1)}).ok());
  }
  constexpr int kOps = 300;
  int posted = 0, done = 0, sends = 0;
  std::vector<uint32_t> lengths(kOps);
  std::vector<WrOpcode> ops(kOps);
  const uint64_t counter_va = b.va(3u << 20);
  const Status s = run_until([&] {
    while (posted < kOps && posted - done < 32) {
      const int i = posted;
      const uint32_t len = static_cast<uint32_t>(rng.between(1, 12000));
      const size_t off = static_cast<size_t>(i % 64) * 16384;
      WrOpcode op;
      switch (i % 4) {
        case 0: op = WrOpcode::kRdmaWrite; break;
        case 1: op = WrOpcode::kRdmaRead; break;
        case 2: op = sends < 64 ? WrOpcode::kSend : WrOpcode::kRdmaWrite; break;
        default: op = WrOpcode::kAtomicFetchAndAdd; break;
      }
      if (op == WrOpcode::kSend) ++sends;
      ops[i] = op;
      lengths[i] = op == WrOpcode::kAtomicFetchAndAdd ? 8 : len;
      const Sge sge = op == WrOpcode::kRdmaRead ? a.sge((1u << 20) + off, len)
                      : op == WrOpcode::kAtomicFetchAndAdd ? a.sge((3u << 20) + i * 8ul, 8)
                                                           : a.sge(off, len);
      SendWr w = wr(op, static_cast<uint64_t>(i), &sge, op == WrOpcode::kAtomicFetchAndAdd ? counter_va : b.va(off),
                    b.mr->rkey());
      w.compare_add = 1;
      EXPECT_TRUE(qa.post_send(w).ok());
      ++posted;
    }
    WorkCompletion wc[32];
    auto got = a.cq->poll(wc);
    EXPECT_TRUE(got.ok());
    for (uint32_t k = 0; k < got.value(); ++k) {
      EXPECT_EQ(wc[k].status, WcStatus::kSuccess) << "wr " << wc[k].wr_id;
      EXPECT_EQ(wc[k].wr_id, static_cast<uint64_t>(done)) << "a completion missing or repeated";
      ++done;
    }
    return done == kOps;
  });
  ASSERT_TRUE(s.ok()) << s.to_string() << " after " << done << " completions; seed " << seed;
  // Exactly once: every FETCH_AND_ADD added 1 once, and each saw a distinct
  // earlier value.
  uint64_t counter;
  std::memcpy(&counter, b.at(3u << 20), 8);
  std::set<uint64_t> seen;
  int faas = 0;
  for (int i = 0; i < kOps; ++i) {
    if (ops[i] != WrOpcode::kAtomicFetchAndAdd) continue;
    ++faas;
    uint64_t v;
    std::memcpy(&v, a.at((3u << 20) + i * 8ul), 8);
    seen.insert(v);
  }
  EXPECT_EQ(counter, static_cast<uint64_t>(faas));
  EXPECT_EQ(seen.size(), static_cast<size_t>(faas));
  // Every SEND landed once, in order, in the RECVs.
  auto recvs = poll_n(*b.cq, static_cast<size_t>(sends));
  ASSERT_EQ(recvs.size(), static_cast<size_t>(sends));
  int k = 0;
  for (int i = 0; i < kOps; ++i) {
    if (ops[i] != WrOpcode::kSend) continue;
    EXPECT_EQ(recvs[k].wr_id, static_cast<uint64_t>(k));
    EXPECT_EQ(recvs[k].byte_len, lengths[i]);
    ++k;
  }
  // The last WRITE/READ of each slot holds the data (writes to B, READs to A).
  std::vector<int> last(64, -1);
  for (int i = 0; i < kOps; ++i) {
    if (ops[i] == WrOpcode::kRdmaWrite) last[i % 64] = i;
  }
  for (int slot = 0; slot < 64; ++slot) {
    if (last[slot] < 0) continue;
    const size_t off = static_cast<size_t>(slot) * 16384;
    EXPECT_EQ(std::memcmp(b.at(off), a.at(off), lengths[last[slot]]), 0) << "slot " << slot;
  }
  const FabricCounters& f = engines_[0]->fabric().counters();
  EXPECT_GT(f.dropped_fault.get(), 0u);
  EXPECT_GT(f.duplicated_fault.get(), 0u);
  EXPECT_GT(f.delayed_fault.get(), 0u);
}

// ---- receive validation against a raw socket -------------------------------------------

class RawSocket {
 public:
  RawSocket() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(kLoopback);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    socklen_t len = sizeof(sa);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    local_ = UdpEndpoint{kLoopback, ntohs(sa.sin_port)};
  }
  ~RawSocket() { close(fd_); }
  const UdpEndpoint& local() const { return local_; }
  void send(const UdpEndpoint& to, std::span<const uint8_t> bytes) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(to.ipv4);
    sa.sin_port = htons(to.port);
    ASSERT_EQ(sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)),
              static_cast<ssize_t>(bytes.size()));
  }

 private:
  int fd_;
  UdpEndpoint local_;
};

// A WRITE_ONLY of `payload` to (dest_qp, psn), framed for src -> dst.
std::vector<uint8_t> write_datagram(uint32_t dest_qp, uint32_t psn, uint64_t va, uint32_t rkey,
                                    std::span<const uint8_t> payload, const UdpEndpoint& src,
                                    const UdpEndpoint& dst) {
  wire::Headers h;
  h.bth.opcode = wire::kWriteOnly;
  h.bth.dest_qp = dest_qp;
  h.bth.psn = psn;
  h.bth.ack_req = true;
  h.reth = wire::Reth{va, rkey, static_cast<uint32_t>(payload.size())};
  h.bth.pad_count = wire::pad_for(payload.size());
  uint8_t header[wire::kMaxHeaderBytes];
  const size_t hlen = wire::serialize_headers(h, header);
  std::vector<uint8_t> out(udp::kMaxDatagramBytes);
  out.resize(udp::frame_datagram(std::span<const uint8_t>(header, hlen), payload, src, dst, out));
  return out;
}

TEST_F(UdpPairTest, BadDatagramsAreCountedEachInItsCounterAndDisturbNothing) {
  Host& a = add_host(0);
  Host& b = add_host(1);
  QueuePair& qa = add_qp(a);
  QueuePair& qb = add_qp(b);
  ConnectOptions o;
  connect(qa, a, qb, b, o);
  const UdpEndpoint b_ep = *b.nic->udp_endpoint();
  RawSocket raw;
  const uint8_t payload[8] = {0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE};
  uint64_t sent = 0;
  auto deliver = [&](std::span<const uint8_t> bytes) {
    raw.send(b_ep, bytes);
    ++sent;
    ASSERT_TRUE(run_until([&] { return b.nic->udp_counters().rx_datagrams == sent; }).ok());
  };
  // Garbage: short (malformed), longer (its last four bytes are no ICRC).
  const uint8_t tiny[7] = {1, 2, 3, 4, 5, 6, 7};
  deliver(tiny);
  std::vector<uint8_t> junk(300);
  Rng rng(7);
  for (auto& x : junk) x = static_cast<uint8_t>(rng.next());
  deliver(junk);
  // A truncated BTH: 8 bytes of a valid packet.
  const auto good_for_qb = write_datagram(qb.qp_num(), o.a_psn, b.va(0), b.mr->rkey(), payload, raw.local(), b_ep);
  deliver(std::span<const uint8_t>(good_for_qb.data(), 8));
  // Headers cut short behind a valid ICRC: a WRITE_ONLY of only BTH + 4 bytes.
  {
    std::vector<uint8_t> cut(good_for_qb.begin(), good_for_qb.begin() + 16);
    std::vector<uint8_t> framed(udp::kMaxDatagramBytes);
    framed.resize(udp::frame_datagram(std::span<const uint8_t>(cut.data(), 12),
                                      std::span<const uint8_t>(cut.data() + 12, 4), raw.local(), b_ep, framed));
    deliver(framed);
  }
  // A bad ICRC: the valid packet with one payload bit flipped.
  auto corrupted = good_for_qb;
  corrupted[30] ^= 0x10;
  deliver(corrupted);
  // A valid packet for a QP that does not exist.
  deliver(write_datagram(qb.qp_num() ^ 0x400000, o.a_psn, b.va(0), b.mr->rkey(), payload, raw.local(), b_ep));
  // A valid packet for qb from the wrong source, unresolved and then resolved at B.
  deliver(good_for_qb);
  ASSERT_TRUE(engines_[1]->resolve(raw.local()).ok());
  deliver(good_for_qb);
  // A valid packet with qa's address but from a different port.
  const UdpEndpoint a_ep = *a.nic->udp_endpoint();
  deliver(write_datagram(qb.qp_num(), o.a_psn, b.va(0), b.mr->rkey(), payload, a_ep, b_ep));

  const UdpCounters c = b.nic->udp_counters();
  EXPECT_EQ(c.rx_datagrams, 9u);
  EXPECT_EQ(c.rx_malformed, 3u);   // 7 bytes, truncated BTH, cut headers
  EXPECT_EQ(c.rx_bad_icrc, 3u);    // junk, flipped bit, a's address from the raw socket's port
  EXPECT_EQ(c.rx_unknown_qp, 1u);
  EXPECT_EQ(c.rx_unconnected, 2u);
  // Nothing reached the NIC core or its memory; the QPs work as before.
  EXPECT_EQ(b.nic->counters().rx_packets, 0u);
  EXPECT_NE(b.mem[0], 0xEE);
  EXPECT_EQ(qb.state(), QpState::kRts);
  const Sge sge = a.sge(0, 8);
  a.mem[0] = 0x42;
  ASSERT_TRUE(qa.post_send(wr(WrOpcode::kRdmaWrite, 9, &sge, b.va(0), b.mr->rkey())).ok());
  auto wcs = poll_n(*a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(b.mem[0], 0x42);
  EXPECT_EQ(a.nic->udp_counters().rx_malformed + a.nic->udp_counters().rx_bad_icrc, 0u);
}

TEST_F(UdpPairTest, OnTheWireTheIcrcCoversTheRealIpHeader) {
  // Capture a datagram on the loopback interface (needs CAP_NET_RAW) and
  // check the assumption the ICRC rests on: Linux sends Ferry's datagrams
  // with IP identification 0 and DF, so a receiver that sees the real IP
  // header (an RNIC, rxe) computes the same ICRC.
  Host& a = add_host(0);
  Host& b = add_host(1);
  QueuePair& qa = add_qp(a);
  QueuePair& qb = add_qp(b);
  connect(qa, a, qb, b);
  // Protocol 0: the socket queues nothing until it is bound below, after the
  // filter is attached. Bound first (as this test was until CI failed it),
  // loopback traffic from tests running in parallel fills its queue while
  // the hosts start and the one datagram is dropped: under a UDP flood on
  // lo that version failed 10 runs in 30, this one none.
  const int cap = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (cap < 0) GTEST_SKIP() << "no CAP_NET_RAW: " << std::strerror(errno);
  // Only UDP to b's port passes the filter.
  {
    const uint16_t port = b.nic->udp_endpoint()->port;
    sock_filter code[] = {
        {0x28, 0, 0, 12},                       // ldh [12]: ethertype
        {0x15, 0, 7, ETHERTYPE_IP},             // not IPv4: drop
        {0x30, 0, 0, 23},                       // ldb [23]: IP protocol
        {0x15, 0, 5, IPPROTO_UDP},              // not UDP: drop
        {0x28, 0, 0, 20},                       // ldh [20]: flags + fragment offset
        {0x45, 3, 0, 0x1fff},                   // a later fragment: drop
        {0xb1, 0, 0, 14},                       // ldxb 4*([14]&0xf): IP header length
        {0x48, 0, 0, 16},                       // ldh [x+16]: UDP destination port
        {0x15, 1, 0, port},                     // b's port: keep
        {0x06, 0, 0, 0},                        // drop
        {0x06, 0, 0, 0xffff},                   // keep
    };
    // (Jump offsets count from the next instruction: drop is 9, keep is 10.)
    sock_fprog prog{static_cast<unsigned short>(sizeof(code) / sizeof(code[0])), code};
    ASSERT_EQ(setsockopt(cap, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)), 0) << std::strerror(errno);
  }
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_IP);
  ll.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
  ASSERT_EQ(bind(cap, reinterpret_cast<sockaddr*>(&ll), sizeof(ll)), 0) << std::strerror(errno);
  timeval tv{2, 0};
  setsockopt(cap, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const Sge sge = a.sge(0, 77);
  ASSERT_TRUE(qa.post_send(wr(WrOpcode::kRdmaWrite, 1, &sge, b.va(0), b.mr->rkey())).ok());
  ASSERT_EQ(poll_n(*a.cq, 1).size(), 1u);
  const UdpEndpoint a_ep = *a.nic->udp_endpoint(), b_ep = *b.nic->udp_endpoint();
  uint8_t frame[9000];
  for (;;) {
    const ssize_t n = recv(cap, frame, sizeof(frame), 0);
    ASSERT_GT(n, 0) << "the datagram to " << b_ep.to_string() << " was not captured";
    const uint8_t* ip = frame + sizeof(ether_header);
    const size_t ihl = (ip[0] & 0xF) * 4u;
    const uint8_t* udp_header = ip + ihl;
    if (ip[9] != IPPROTO_UDP || (udp_header[2] << 8 | udp_header[3]) != b_ep.port) continue;
    const uint16_t id = static_cast<uint16_t>(ip[4] << 8 | ip[5]);
    EXPECT_EQ(ihl, udp::kIpv4HeaderBytes);
    EXPECT_EQ(id, 0);
    EXPECT_EQ(ip[6] & 0x40, 0x40) << "DF";
    const size_t udp_len = static_cast<size_t>(udp_header[4] << 8 | udp_header[5]);
    const std::span<const uint8_t> payload(udp_header + udp::kUdpHeaderBytes, udp_len - udp::kUdpHeaderBytes);
    const uint32_t crc = udp::icrc(a_ep, b_ep, payload.first(payload.size() - udp::kIcrcBytes), id);
    const uint8_t* carried = payload.data() + payload.size() - udp::kIcrcBytes;
    for (int i = 0; i < 4; ++i) EXPECT_EQ(carried[i], static_cast<uint8_t>(crc >> (8 * i)));
    EXPECT_EQ(payload[0], wire::kWriteOnly);
    break;
  }
  close(cap);
}

TEST_F(UdpPairTest, InjectedDatagramFromThePeerIsDeliveredLikeOneFromTheSocket) {
  Host& a = add_host(0);
  Host& b = add_host(1);
  QueuePair& qa = add_qp(a);
  QueuePair& qb = add_qp(b);
  ConnectOptions o;
  connect(qa, a, qb, b, o);
  const uint8_t payload[5] = {'h', 'e', 'l', 'l', 'o'};
  const UdpEndpoint a_ep = *a.nic->udp_endpoint(), b_ep = *b.nic->udp_endpoint();
  const auto dgram = write_datagram(qb.qp_num(), o.a_psn, b.va(64), b.mr->rkey(), payload, a_ep, b_ep);
  engines_[1]->fabric().inject_datagram(b.nic->address(), dgram, a_ep, clock_.now_ns());
  EXPECT_EQ(std::memcmp(b.at(64), "hello", 5), 0);
  EXPECT_EQ(b.nic->counters().rx_packets, 1u);
  // B's ACK reaches qa, which never sent that PSN: it ignores it.
  ASSERT_TRUE(run_until([&] { return a.nic->udp_counters().rx_datagrams == 1; }).ok());
  EXPECT_EQ(qa.state(), QpState::kRts);
}

}  // namespace
}  // namespace ferry::nic::testing
