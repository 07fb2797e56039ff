// The NIC daemon: applications attached through its socket and shared
// memory get the verbs semantics of an in-process NIC; a client's death
// releases what it held; the daemon's death is a device-fatal error.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "ferry/nicd/nicd.h"
#include "protocol.h"

namespace ferry::nicd {
namespace {

using namespace std::chrono_literals;

std::string temp_socket(const char* tag) {
  return "/tmp/ferry-nicd-test-" + std::to_string(getpid()) + "-" + tag + ".sock";
}

DaemonOptions daemon_options(const std::string& path) {
  DaemonOptions o;
  o.socket_path = path;
  o.bind = nic::UdpEndpoint{0x7F000001, 0};  // ephemeral: parallel runs cannot collide
  o.spin_ns = 20'000;                        // sleeps often: posts must wake it
  o.arena_bytes = 8u << 20;
  return o;
}

OpenOptions open_options(const std::string& path) {
  OpenOptions o;
  o.socket_path = path;
  o.client_name = "test";
  return o;
}

// A QP with its CQ and a shared buffer, on one NIC.
struct Endpoint {
  std::unique_ptr<nic::ProtectionDomain> pd;
  std::unique_ptr<nic::CompletionQueue> cq;
  std::unique_ptr<nic::QueuePair> qp;
  SharedMemory memory;
  std::unique_ptr<nic::MemoryRegion> mr;

  void init(nic::Nic& nic, size_t bytes = 1 << 16) {
    pd = nic.alloc_pd().value();
    nic::CqInitAttr ca;
    ca.cqe = 256;
    cq = nic.create_cq(ca).value();
    nic::QpInitAttr qa;
    qa.send_cq = cq.get();
    qa.recv_cq = cq.get();
    qa.cap.max_send_wr = 64;
    qa.cap.max_recv_wr = 64;
    qp = nic.create_qp(*pd, qa).value();
    memory = SharedMemory::create(bytes, "nicd-test").value();
    mr = nic.reg_mr(*pd, memory.data(), memory.size(),
                    nic::kAccessLocalWrite | nic::kAccessRemoteWrite | nic::kAccessRemoteRead | nic::kAccessRemoteAtomic)
             .value();
  }
  ~Endpoint() {
    mr.reset();
    qp.reset();
    cq.reset();
    pd.reset();
  }
};

void connect(nic::QueuePair& qp, uint32_t dest_nic, uint32_t dest_qpn, uint8_t timeout = 14, uint8_t retry = 7) {
  nic::QpAttr a;
  a.state = nic::QpState::kInit;
  a.access_flags = nic::kAccessRemoteWrite | nic::kAccessRemoteRead | nic::kAccessRemoteAtomic;
  ASSERT_TRUE(qp.modify(a, nic::kQpState | nic::kQpAccessFlags).ok());
  a.state = nic::QpState::kRtr;
  a.dest_nic = dest_nic;
  a.dest_qp_num = dest_qpn;
  a.path_mtu = 1024;
  a.rq_psn = 0;
  ASSERT_TRUE(qp.modify(a, nic::kQpState | nic::kQpPathMtu | nic::kQpDest | nic::kQpRqPsn |
                               nic::kQpMaxDestRdAtomic | nic::kQpMinRnrTimer).ok());
  a.state = nic::QpState::kRts;
  a.sq_psn = 0;
  a.timeout = timeout;
  a.retry_cnt = retry;
  ASSERT_TRUE(qp.modify(a, nic::kQpState | nic::kQpSqPsn | nic::kQpTimeout | nic::kQpRetryCnt | nic::kQpRnrRetry |
                               nic::kQpMaxRdAtomic).ok());
}

nic::WorkCompletion wait_completion(nic::CompletionQueue& cq, std::chrono::milliseconds limit = 5000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  nic::WorkCompletion wc;
  while (std::chrono::steady_clock::now() < deadline) {
    auto n = cq.poll(std::span<nic::WorkCompletion>(&wc, 1));
    EXPECT_TRUE(n.ok()) << n.status().message();
    if (!n.ok()) break;
    if (n.value() == 1) return wc;
    std::this_thread::sleep_for(50us);  // let the engine fall asleep now and then
  }
  ADD_FAILURE() << "no completion within " << limit.count() << " ms";
  wc.status = nic::WcStatus::kGeneralErr;
  return wc;
}

// A signaled one-sided WR gathering `*sge` (which must outlive the post).
nic::SendWr rdma(nic::WrOpcode opcode, const nic::Sge* sge, uint64_t remote_addr, uint32_t rkey) {
  nic::SendWr w;
  w.opcode = opcode;
  w.flags = nic::kSendSignaled;
  w.sg_list = std::span<const nic::Sge>(sge, 1);
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  return w;
}

TEST(Nicd, OpenWithoutDaemonSaysWhere) {
  auto dev = Device::open(open_options("/tmp/ferry-nicd-test-nobody-here.sock"));
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), Code::kUnavailable);
  EXPECT_NE(dev.status().message().find("nobody-here"), std::string::npos) << dev.status().message();
}

TEST(Nicd, SecondDaemonOnALiveSocketIsRefused) {
  const std::string path = temp_socket("twice");
  auto d = Daemon::start(daemon_options(path));
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto again = Daemon::start(daemon_options(path));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists);
}

// Two applications of one daemon: WRITE, READ, SEND/RECV and an atomic land
// in the other's shared pages, through rings in the daemon's memory files.
TEST(Nicd, TwoClientsOfOneDaemonTalk) {
  const std::string path = temp_socket("two");
  auto d = Daemon::start(daemon_options(path));
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto a_dev = Device::open(open_options(path)).value();
  auto b_dev = Device::open(open_options(path)).value();
  Endpoint a, b;
  a.init(a_dev->nic());
  b.init(b_dev->nic());
  EXPECT_EQ(a_dev->nic().address(), b_dev->nic().address());
  connect(*a.qp, a_dev->nic().address(), b.qp->qp_num());
  connect(*b.qp, b_dev->nic().address(), a.qp->qp_num());

  // WRITE a -> b.
  for (int i = 0; i < 64; ++i) a.memory.data()[i] = static_cast<uint8_t>(i + 1);
  nic::Sge sge = a.mr->sge(0, 64);
  nic::SendWr w = rdma(nic::WrOpcode::kRdmaWrite, &sge, b.mr->iova() + 128, b.mr->rkey());
  for (int round = 0; round < 50; ++round) {
    w.wr_id = static_cast<uint64_t>(round);
    ASSERT_TRUE(a.qp->post_send(w).ok());
    const auto wc = wait_completion(*a.cq);
    ASSERT_EQ(wc.status, nic::WcStatus::kSuccess);
    EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(round));
    if (round % 10 == 0) std::this_thread::sleep_for(2ms);  // the engine parks: the next post must wake it
  }
  EXPECT_EQ(std::memcmp(b.memory.data() + 128, a.memory.data(), 64), 0);

  // READ b -> a.
  std::memset(b.memory.data() + 4096, 0x5A, 100);
  nic::Sge rs = a.mr->sge(8192, 100);
  nic::SendWr r = rdma(nic::WrOpcode::kRdmaRead, &rs, b.mr->iova() + 4096, b.mr->rkey());
  ASSERT_TRUE(a.qp->post_send(r).ok());
  ASSERT_EQ(wait_completion(*a.cq).status, nic::WcStatus::kSuccess);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.memory.data()[8192 + i], 0x5A);

  // SEND a -> b into a posted RECV.
  nic::Sge rsge = b.mr->sge(16384, 256);
  nic::RecvWr rw;
  rw.wr_id = 77;
  rw.sg_list = std::span<const nic::Sge>(&rsge, 1);
  ASSERT_TRUE(b.qp->post_recv(rw).ok());
  std::memcpy(a.memory.data() + 300, "hello daemon", 12);
  nic::Sge ssge = a.mr->sge(300, 12);
  nic::SendWr s;
  s.opcode = nic::WrOpcode::kSend;
  s.flags = nic::kSendSignaled;
  s.sg_list = std::span<const nic::Sge>(&ssge, 1);
  ASSERT_TRUE(a.qp->post_send(s).ok());
  ASSERT_EQ(wait_completion(*a.cq).status, nic::WcStatus::kSuccess);
  const auto rc = wait_completion(*b.cq);
  ASSERT_EQ(rc.status, nic::WcStatus::kSuccess);
  EXPECT_EQ(rc.wr_id, 77u);
  EXPECT_EQ(rc.byte_len, 12u);
  EXPECT_EQ(std::memcmp(b.memory.data() + 16384, "hello daemon", 12), 0);

  // FETCH_ADD on b's word.
  auto* word = reinterpret_cast<uint64_t*>(b.memory.data() + 512);
  *word = 40;
  nic::Sge asge = a.mr->sge(1024, 8);
  nic::SendWr at;
  at.opcode = nic::WrOpcode::kAtomicFetchAndAdd;
  at.flags = nic::kSendSignaled;
  at.sg_list = std::span<const nic::Sge>(&asge, 1);
  at.remote_addr = b.mr->iova() + 512;
  at.rkey = b.mr->rkey();
  at.compare_add = 2;
  ASSERT_TRUE(a.qp->post_send(at).ok());
  ASSERT_EQ(wait_completion(*a.cq).status, nic::WcStatus::kSuccess);
  EXPECT_EQ(*word, 42u);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(a.memory.data() + 1024), 40u);

  const auto census = d.value()->census();
  EXPECT_EQ(census.qps, 2u);
  EXPECT_EQ(census.mrs, 2u);
}

// A daemon client's SRQ (ordinary and multi-packet): its receive ring must be
// in the client's arena, where post_srq_recv writes the WQEs. (It was once
// allocated in the daemon's heap, so CREATE_SRQ replied with a ring the
// client could not reach and failed.)
TEST(Nicd, SharedReceiveQueuesOfADaemonClient) {
  const std::string path = temp_socket("srq");
  auto d = Daemon::start(daemon_options(path));
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto a_dev = Device::open(open_options(path)).value();
  auto b_dev = Device::open(open_options(path)).value();
  for (const bool multi_packet : {false, true}) {
    SCOPED_TRACE(multi_packet ? "multi-packet SRQ" : "ordinary SRQ");
    Endpoint a, b;
    a.init(a_dev->nic());
    b.init(b_dev->nic());
    nic::SrqInitAttr sa;
    sa.max_wr = 16;
    sa.max_sge = 1;
    if (multi_packet) {
      sa.mp_strides = 64;
      sa.mp_stride_bytes = 64;
      sa.mp_max_message_bytes = 256;
    }
    auto srq = b_dev->nic().create_srq(*b.pd, sa);
    ASSERT_TRUE(srq.ok()) << srq.status().to_string();
    nic::QpInitAttr qa;
    qa.send_cq = b.cq.get();
    qa.recv_cq = b.cq.get();
    qa.srq = srq.value().get();
    qa.cap.max_send_wr = 8;
    auto on_srq = b_dev->nic().create_qp(*b.pd, qa);
    ASSERT_TRUE(on_srq.ok()) << on_srq.status().to_string();
    connect(*a.qp, a_dev->nic().address(), on_srq.value()->qp_num());
    connect(*on_srq.value(), b_dev->nic().address(), a.qp->qp_num());
    const uint32_t buffer = multi_packet ? 64 * 64 : 256;
    for (uint32_t i = 0; i < 4; ++i) {
      nic::Sge rsge = b.mr->sge(i * buffer, buffer);
      ASSERT_TRUE(srq.value()->post_recv(nic::RecvWr{100 + i, std::span<const nic::Sge>(&rsge, 1)}).ok());
    }
    for (uint32_t m = 0; m < 3; ++m) {
      const std::string text = "message " + std::to_string(m);
      std::memcpy(a.memory.data() + 1024 * m, text.data(), text.size());
      nic::Sge ssge = a.mr->sge(1024 * m, static_cast<uint32_t>(text.size()));
      nic::SendWr s;
      s.opcode = nic::WrOpcode::kSend;
      s.flags = nic::kSendSignaled;
      s.sg_list = std::span<const nic::Sge>(&ssge, 1);
      ASSERT_TRUE(a.qp->post_send(s).ok());
      ASSERT_EQ(wait_completion(*a.cq).status, nic::WcStatus::kSuccess);
      const auto rc = wait_completion(*b.cq);
      ASSERT_EQ(rc.status, nic::WcStatus::kSuccess);
      EXPECT_EQ(rc.byte_len, text.size());
      // Ordinary: one buffer per message. Multi-packet: back to back at the
      // 64-byte stride of the first buffer.
      const size_t at = multi_packet ? 64 * m : static_cast<size_t>(buffer) * m;
      EXPECT_EQ(std::memcmp(b.memory.data() + at, text.data(), text.size()), 0) << "message " << m;
    }
    on_srq.value().reset();
  }
}

// Completion channels are the daemon's eventfds: a blocked get_event wakes.
TEST(Nicd, CompletionChannelWakesAcrossTheSocket) {
  const std::string path = temp_socket("channel");
  auto d = Daemon::start(daemon_options(path));
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto dev = Device::open(open_options(path)).value();
  nic::Nic& nic = dev->nic();
  auto channel = nic.create_comp_channel().value();
  auto pd = nic.alloc_pd().value();
  nic::CqInitAttr ca;
  ca.cqe = 16;
  ca.channel = channel.get();
  auto cq = nic.create_cq(ca).value();
  nic::QpInitAttr qa;
  qa.send_cq = cq.get();
  qa.recv_cq = cq.get();
  auto qp = nic.create_qp(*pd, qa).value();
  connect(*qp, nic.address(), qp->qp_num());  // loopback onto itself
  auto mem = SharedMemory::create(4096).value();
  auto mr = nic.reg_mr(*pd, mem.data(), 4096, nic::kAccessLocalWrite | nic::kAccessRemoteWrite).value();
  ASSERT_TRUE(cq->req_notify(false).ok());
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    auto ev = channel->get_event(5000);
    EXPECT_TRUE(ev.ok()) << ev.status().message();
    if (ev.ok()) {
      EXPECT_EQ(ev.value(), cq.get());
    }
    woke = true;
  });
  std::this_thread::sleep_for(20ms);
  nic::Sge sge = mr->sge(0, 8);
  nic::SendWr w = rdma(nic::WrOpcode::kRdmaWrite, &sge, mr->iova() + 64, mr->rkey());
  ASSERT_TRUE(qp->post_send(w).ok());
  waiter.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(wait_completion(*cq).status, nic::WcStatus::kSuccess);
  qp.reset();
  cq.reset();
  mr.reset();
}

TEST(Nicd, MemoryTheDaemonCannotMapIsRefused) {
  const std::string path = temp_socket("private");
  auto d = Daemon::start(daemon_options(path));
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto dev = Device::open(open_options(path)).value();
  auto pd = dev->nic().alloc_pd().value();
  std::vector<uint8_t> heap(4096);
  auto mr = dev->nic().reg_mr(*pd, heap.data(), heap.size(), nic::kAccessLocalWrite);
  ASSERT_FALSE(mr.ok());
  EXPECT_EQ(mr.status().code(), Code::kInvalidArgument);
  EXPECT_NE(mr.status().message().find("SharedMemory"), std::string::npos) << mr.status().message();
}

// Daemons on two "hosts" (two UDP sockets on loopback): QPs connect through
// resolved endpoints, and a WRITE and a READ cross the RoCEv2 wire.
// A process that frees its shared memory and maps new memory (which the
// kernel may place at the same address) can register it: the daemon's
// mapping of the freed memory is dropped, and only once nothing uses it.
TEST(Nicd, FreedSharedMemoryMakesRoomForNewMemory) {
  const std::string path = temp_socket("reuse");
  auto d = Daemon::start(daemon_options(path));
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto dev = Device::open(open_options(path));
  ASSERT_TRUE(dev.ok()) << dev.status().message();
  nic::Nic& nic = dev.value()->nic();
  auto pd = nic.alloc_pd().value();
  for (int round = 0; round < 8; ++round) {
    auto mem = SharedMemory::create(1 << 20, "reuse").value();
    auto mr = nic.reg_mr(*pd, mem.data(), mem.size(), nic::kAccessLocalWrite);
    ASSERT_TRUE(mr.ok()) << "round " << round << ": " << mr.status().message();
  }  // each round's MR, then its memory, are gone before the next
  EXPECT_LE(d.value()->census().segments, 3u) << "the daemon keeps mappings of freed memory";
  // Memory still registered is not dropped under its MR.
  auto kept = SharedMemory::create(1 << 20, "kept").value();
  auto kept_mr = nic.reg_mr(*pd, kept.data(), kept.size(), nic::kAccessLocalWrite).value();
  auto other = SharedMemory::create(1 << 20, "other").value();
  ASSERT_TRUE(nic.reg_mr(*pd, other.data(), other.size(), nic::kAccessLocalWrite).ok());
  EXPECT_EQ(kept_mr->length(), kept.size());
}

TEST(Nicd, TwoDaemonsOverUdp) {
  const std::string p1 = temp_socket("udp1"), p2 = temp_socket("udp2");
  auto d1 = Daemon::start(daemon_options(p1));
  auto d2 = Daemon::start(daemon_options(p2));
  ASSERT_TRUE(d1.ok() && d2.ok());
  auto x_dev = Device::open(open_options(p1)).value();
  auto y_dev = Device::open(open_options(p2)).value();
  Endpoint x, y;
  x.init(x_dev->nic());
  y.init(y_dev->nic());
  const uint32_t to_y = x_dev->nic().resolve(*y_dev->nic().udp_endpoint()).value();
  const uint32_t to_x = y_dev->nic().resolve(*x_dev->nic().udp_endpoint()).value();
  connect(*x.qp, to_y, y.qp->qp_num());
  connect(*y.qp, to_x, x.qp->qp_num());
  for (int i = 0; i < 3000; ++i) x.memory.data()[i] = static_cast<uint8_t>(i * 7);
  nic::Sge sge = x.mr->sge(0, 3000);  // three packets at MTU 1024
  nic::SendWr w = rdma(nic::WrOpcode::kRdmaWrite, &sge, y.mr->iova(), y.mr->rkey());
  ASSERT_TRUE(x.qp->post_send(w).ok());
  ASSERT_EQ(wait_completion(*x.cq).status, nic::WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(y.memory.data(), x.memory.data(), 3000), 0);
  nic::Sge rs = y.mr->sge(8192, 3000);
  nic::SendWr r = rdma(nic::WrOpcode::kRdmaRead, &rs, x.mr->iova(), x.mr->rkey());
  ASSERT_TRUE(y.qp->post_send(r).ok());
  ASSERT_EQ(wait_completion(*y.cq).status, nic::WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(y.memory.data() + 8192, x.memory.data(), 3000), 0);
  EXPECT_GT(x_dev->nic().udp_counters().tx_datagrams, 0u);
}

// A client process that dies holding a QP, a CQ and an MR: the daemon
// releases all of it, and the peer's next WRITE to the dead QP fails.
TEST(Nicd, DeadClientIsReleased) {
  const std::string path = temp_socket("dead-client");
  // Fork while this process has one thread (a child of a multithreaded
  // process may not start threads of its own under TSan); the child waits
  // for the number of the QP it is to connect to.
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: attach, make a QP toward a's, report its number and rkey, wait to be killed.
    uint32_t a_qpn = 0;
    if (read(to_child[0], &a_qpn, sizeof(a_qpn)) != static_cast<ssize_t>(sizeof(a_qpn))) _exit(2);
    auto cdev = Device::open(open_options(path));
    if (!cdev.ok()) _exit(2);
    auto* e = new Endpoint();
    e->init(cdev.value()->nic());
    uint64_t msg[3] = {e->qp->qp_num(), e->mr->rkey(), e->mr->iova()};
    connect(*e->qp, cdev.value()->nic().address(), a_qpn);
    (void)!write(from_child[1], msg, sizeof(msg));
    char c;
    (void)!read(to_child[0], &c, 1);
    _exit(0);
  }
  auto d = Daemon::start(daemon_options(path));
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto dev = Device::open(open_options(path)).value();
  Endpoint a;
  a.init(dev->nic());
  const uint32_t a_qpn = a.qp->qp_num();
  ASSERT_EQ(write(to_child[1], &a_qpn, sizeof(a_qpn)), static_cast<ssize_t>(sizeof(a_qpn)));
  uint64_t msg[3] = {};
  ASSERT_EQ(read(from_child[0], msg, sizeof(msg)), static_cast<ssize_t>(sizeof(msg)));
  connect(*a.qp, dev->nic().address(), static_cast<uint32_t>(msg[0]), /*timeout=*/8, /*retry=*/2);
  // While the child lives, a's WRITE lands in its memory.
  nic::Sge sge = a.mr->sge(0, 64);
  nic::SendWr w = rdma(nic::WrOpcode::kRdmaWrite, &sge, msg[2], static_cast<uint32_t>(msg[1]));
  ASSERT_TRUE(a.qp->post_send(w).ok());
  ASSERT_EQ(wait_completion(*a.cq).status, nic::WcStatus::kSuccess);
  EXPECT_EQ(d.value()->census().qps, 2u);
  EXPECT_EQ(d.value()->census().mrs, 2u);

  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (d.value()->clients_released() < 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(d.value()->clients_released(), 1u);
  const auto census = d.value()->census();
  EXPECT_EQ(census.qps, 1u) << "the dead client's QP is still there";
  EXPECT_EQ(census.mrs, 1u) << "the dead client's MR is still registered";
  EXPECT_EQ(census.segments, 2u) << "only the survivor's arena and buffer remain mapped";
  // The peer's next WRITE finds nobody: retries run out.
  ASSERT_TRUE(a.qp->post_send(w).ok());
  const auto wc = wait_completion(*a.cq, 10000ms);
  EXPECT_EQ(wc.status, nic::WcStatus::kRetryExcErr) << nic::wc_status_name(wc.status);
  close(to_child[0]);
  close(to_child[1]);
  close(from_child[0]);
  close(from_child[1]);
}

// The daemon runs in a child process and is killed: the application gets
// kUnavailable from poll and post, a DEVICE_FATAL event, a woken
// get_event, and tears its objects down without hanging.
TEST(Nicd, DaemonDeathIsDeviceFatal) {
  const std::string path = temp_socket("dead-daemon");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto d = Daemon::start(daemon_options(path));
    const char c = d.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    for (;;) pause();
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  auto dev = Device::open(open_options(path)).value();
  nic::Nic& nic = dev->nic();
  auto channel = nic.create_comp_channel().value();
  Endpoint a;
  a.init(nic);
  nic::CqInitAttr ca;
  ca.cqe = 16;
  ca.channel = channel.get();
  auto cq2 = nic.create_cq(ca).value();
  ASSERT_TRUE(cq2->req_notify(false).ok());
  connect(*a.qp, nic.address(), a.qp->qp_num());
  std::atomic<int> waiter_code{-1};
  std::thread waiter([&] {
    auto ev = channel->get_event(-1);  // forever: only the death can end it
    waiter_code = static_cast<int>(ev.status().code());
  });
  std::this_thread::sleep_for(20ms);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  waiter.join();
  EXPECT_EQ(waiter_code.load(), static_cast<int>(Code::kUnavailable));
  EXPECT_FALSE(nic.alive());
  nic::WorkCompletion wc;
  auto polled = a.cq->poll(std::span<nic::WorkCompletion>(&wc, 1));
  ASSERT_FALSE(polled.ok());
  EXPECT_EQ(polled.status().code(), Code::kUnavailable);
  nic::Sge sge = a.mr->sge(0, 8);
  nic::SendWr w;
  w.opcode = nic::WrOpcode::kRdmaWrite;
  w.sg_list = std::span<const nic::Sge>(&sge, 1);
  EXPECT_EQ(a.qp->post_send(w).code(), Code::kUnavailable);
  auto ev = nic.poll_async_event();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->type, nic::AsyncEventType::kDeviceFatal);
  EXPECT_EQ(nic.alloc_pd().status().code(), Code::kUnavailable);
  // The application's own memory is intact.
  a.memory.data()[0] = 1;
  cq2.reset();
  close(ready[0]);
  close(ready[1]);
}

// A client that speaks nonsense is disconnected; one that names another's
// objects is refused; the daemon goes on serving.
TEST(Nicd, BadRequestsHurtOnlyTheSender) {
  const std::string path = temp_socket("bad");
  auto d = Daemon::start(daemon_options(path));
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto good = Device::open(open_options(path)).value();
  Endpoint a;
  a.init(good->nic());

  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  // HELLO, then destroy the other client's QP by number.
  proto::Writer hello;
  hello.u32(proto::kVersion);
  hello.str("intruder");
  ASSERT_TRUE(proto::send_message(s, proto::frame(static_cast<uint16_t>(proto::Op::kHello), 1, hello), nullptr, 0));
  uint8_t buf[proto::kMaxMessageBytes];
  int fds[8];
  size_t nfds = 0;
  ASSERT_GT(proto::recv_message(s, buf, sizeof(buf), fds, 8, &nfds), 0);
  for (size_t i = 0; i < nfds; ++i) close(fds[i]);
  proto::Writer destroy;
  destroy.u32(a.qp->qp_num());
  ASSERT_TRUE(proto::send_message(s, proto::frame(static_cast<uint16_t>(proto::Op::kDestroyQp), 2, destroy), nullptr, 0));
  const ssize_t n = proto::recv_message(s, buf, sizeof(buf), fds, 8, &nfds);
  ASSERT_GT(n, static_cast<ssize_t>(sizeof(proto::Header)));
  proto::Reader r(buf + sizeof(proto::Header), static_cast<size_t>(n) - sizeof(proto::Header));
  EXPECT_EQ(proto::get_status(r).code(), Code::kNotFound);
  EXPECT_EQ(d.value()->census().qps, 1u);
  // Garbage: the daemon hangs up on it.
  const uint8_t junk[7] = {1, 2, 3, 4, 5, 6, 7};
  ASSERT_EQ(send(s, junk, sizeof(junk), MSG_NOSIGNAL), 7);
  EXPECT_EQ(recv(s, buf, sizeof(buf), 0), 0);
  close(s);
  // The good client is unaffected.
  connect(*a.qp, good->nic().address(), a.qp->qp_num());
  nic::Sge sge = a.mr->sge(0, 8);
  nic::SendWr w = rdma(nic::WrOpcode::kRdmaWrite, &sge, a.mr->iova() + 64, a.mr->rkey());
  ASSERT_TRUE(a.qp->post_send(w).ok());
  EXPECT_EQ(wait_completion(*a.cq).status, nic::WcStatus::kSuccess);
}

}  // namespace
}  // namespace ferry::nicd
