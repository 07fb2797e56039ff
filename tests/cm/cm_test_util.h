// Test harness for the connection manager: threaded Engines whose NICs are
// UDP-attached on 127.0.0.1 (ephemeral ports), as two processes would be, or
// one Engine with two in-process NICs; an "echo"-style service that hands
// out a new QP per request and records every DoneFn.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"

namespace ferry::cm::testing {

constexpr uint32_t kLoopback = 0x7F000001;
constexpr size_t kMemBytes = 1 << 20;
// Where a test waits for something that must happen: a bound, not a timing
// assertion (it only turns a hang into a failure).
constexpr auto kPatience = std::chrono::seconds(20);

// What the tests exchange as private data: a region's address, rkey, size.
struct RegionInfo {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  friend bool operator==(const RegionInfo&, const RegionInfo&) = default;
};

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// One emulated host: a NIC with a PD, a CQ and one registered buffer.
struct Host {
  nic::Engine* engine = nullptr;
  nic::Nic* nic = nullptr;
  std::unique_ptr<nic::ProtectionDomain> pd;
  std::unique_ptr<nic::CompletionQueue> cq;
  std::unique_ptr<uint8_t[], FreeDeleter> mem;
  std::unique_ptr<nic::MemoryRegion> mr;
  std::mutex qps_mu;  // QPs may be created by the listener thread and test threads
  std::vector<std::unique_ptr<nic::QueuePair>> qps;
  std::vector<std::unique_ptr<nic::CompletionQueue>> extra_cqs;  // after qps: QPs go first

  uint8_t* at(size_t offset) const { return mem.get() + offset; }
  RegionInfo region() const { return RegionInfo{mr->iova(), mr->rkey(), static_cast<uint32_t>(mr->length())}; }

  // A QP on this host's CQ (or `cq`), in RESET.
  nic::QueuePair& add_qp(nic::CompletionQueue* cq_override = nullptr) {
    nic::QpInitAttr attr;
    attr.send_cq = cq_override ? cq_override : cq.get();
    attr.recv_cq = attr.send_cq;
    attr.cap.max_send_wr = 64;
    attr.cap.max_recv_wr = 64;
    auto qp = nic->create_qp(*pd, attr);
    EXPECT_TRUE(qp.ok()) << qp.status().to_string();
    std::lock_guard<std::mutex> lock(qps_mu);
    qps.push_back(std::move(qp.value()));
    return *qps.back();
  }

  // A further CQ (one per client thread), owned by the host.
  nic::CompletionQueue& add_cq() {
    nic::CqInitAttr attr;
    attr.cqe = 256;
    auto c = nic->create_cq(attr);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    std::lock_guard<std::mutex> lock(qps_mu);
    extra_cqs.push_back(std::move(c.value()));
    return *extra_cqs.back();
  }

  void tear_down() {
    qps.clear();
    extra_cqs.clear();
    mr.reset();
    cq.reset();
    pd.reset();
  }
};

enum class Attachment { kUdp, kInProcess };

inline void PrintTo(Attachment a, std::ostream* os) { *os << (a == Attachment::kUdp ? "UDP" : "in-process"); }

inline std::string attachment_name(const ::testing::TestParamInfo<Attachment>& info) {
  return info.param == Attachment::kUdp ? "TwoEnginesOverUdp" : "OneEngineInProcess";
}

// A server and a client host. Over UDP each has its own threaded Engine (as
// two processes would); in process both NICs are on one threaded Engine.
class CmFixture {
 public:
  explicit CmFixture(Attachment attachment = Attachment::kUdp) {
    nic::EngineOptions eo;
    eo.threaded = true;
    eo.spin_ns = 20'000;  // the tests mostly wait on TCP: let the engines sleep
    engines_.push_back(std::make_unique<nic::Engine>(eo));
    if (attachment == Attachment::kUdp) engines_.push_back(std::make_unique<nic::Engine>(eo));
    const bool udp = attachment == Attachment::kUdp;
    make_host(server_, *engines_.front(), udp, "server");
    make_host(client_, *engines_.back(), udp, "client");
  }

  virtual ~CmFixture() {
    // The listener calls into services (QPs, CQs): it goes first.
    listener_.reset();
    client_.tear_down();
    server_.tear_down();
    engines_.clear();
  }

  static void make_host(Host& h, nic::Engine& engine, bool udp, const std::string& name) {
    h.engine = &engine;
    nic::NicOptions no;
    no.name = name;
    no.udp.enabled = udp;
    no.udp.bind = nic::UdpEndpoint{kLoopback, 0};
    auto n = engine.add_nic(no);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    h.nic = n.value();
    h.pd = h.nic->alloc_pd().value();
    nic::CqInitAttr attr;
    attr.cqe = 1024;
    h.cq = h.nic->create_cq(attr).value();
    h.mem.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, kMemBytes)));
    std::memset(h.mem.get(), 0, kMemBytes);
    h.mr = h.nic->reg_mr(*h.pd, h.mem.get(), kMemBytes, nic::kAccessAll).value();
  }

  void start_listener(const ListenerOptions& options = {}) {
    auto l = Listener::start("127.0.0.1:0", options);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    listener_ = std::move(l.value());
  }

  // What the echo service's DoneFn saw, one entry per accepted request.
  struct Done {
    nic::QueuePair* qp;
    Connection connection;
    Status status;
  };

  // Serves `name` on the server host: every request gets a new QP, moved to
  // INIT with `recvs` receives of 64 bytes posted (at 64 KiB + 64 i), and the
  // server's region in the REP.
  Service echo_service(int recvs = 8) {
    Service s;
    s.nic = server_.nic;
    s.accept = [this, recvs](const Request& request) -> Result<Accepted> {
      {
        std::lock_guard<std::mutex> lock(done_mu_);
        requests_seen_.push_back(request);
      }
      nic::QueuePair& qp = server_.add_qp();
      FERRY_RETURN_IF_ERROR(init_qp(qp));
      for (int i = 0; i < recvs; ++i) {
        const nic::Sge sge = server_.mr->sge(65536 + 64 * i, 64);
        FERRY_RETURN_IF_ERROR(qp.post_recv(nic::RecvWr{static_cast<uint64_t>(i), std::span<const nic::Sge>(&sge, 1)}));
      }
      return Accepted{&qp, private_data_of(server_.region())};
    };
    s.done = [this](nic::QueuePair& qp, const Connection& connection, const Status& status) {
      std::lock_guard<std::mutex> lock(done_mu_);
      done_.push_back(Done{&qp, connection, status});
      done_cv_.notify_all();
    };
    return s;
  }

  // Waits until `n` DoneFns ran; a copy of them.
  std::vector<Done> wait_done(size_t n) {
    std::unique_lock<std::mutex> lock(done_mu_);
    const bool got = done_cv_.wait_for(lock, kPatience, [&] { return done_.size() >= n; });
    EXPECT_TRUE(got) << "only " << done_.size() << " of " << n << " handshakes finished";
    return done_;
  }
  size_t done_count() {
    std::lock_guard<std::mutex> lock(done_mu_);
    return done_.size();
  }

  Result<Connection> connect_client(nic::QueuePair& qp, const std::string& service = "echo",
                                    const ConnectOptions& options = {}) {
    return connect(listener_->address(), service, *client_.nic, qp,
                   private_data_of(client_.region()), options);
  }

 protected:
  std::vector<std::unique_ptr<nic::Engine>> engines_;
  Host server_;
  Host client_;
  std::unique_ptr<Listener> listener_;
  std::mutex done_mu_;  // guards requests_seen_ and done_
  std::vector<Request> requests_seen_;
  std::condition_variable done_cv_;
  std::vector<Done> done_;
};

// Polls `cq` for one completion, failing the test after kPatience.
inline nic::WorkCompletion poll_one(nic::CompletionQueue& cq) {
  nic::WorkCompletion wc{};
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < deadline) {
    auto n = cq.poll(std::span<nic::WorkCompletion>(&wc, 1));
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    if (!n.ok() || n.value() == 1) return wc;
    std::this_thread::yield();
  }
  ADD_FAILURE() << "no completion within the test's patience";
  wc.status = nic::WcStatus::kGeneralErr;
  return wc;
}

inline nic::SendWr make_wr(uint64_t id, nic::WrOpcode op, const nic::Sge& sge, uint64_t remote_addr = 0,
                           uint32_t rkey = 0) {
  nic::SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.flags = nic::kSendSignaled;
  wr.sg_list = std::span<const nic::Sge>(&sge, 1);
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}

// ---- raw TCP, for playing a misbehaving peer ----

// A connected blocking socket to 127.0.0.1:port; -1 on failure.
inline int raw_connect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(kLoopback);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool raw_send(int fd, std::span<const uint8_t> bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Reads until the peer closes (or kPatience passes); everything read. Sets
// *closed if the peer did close.
inline std::vector<uint8_t> raw_read_until_close(int fd, bool* closed) {
  std::vector<uint8_t> all;
  *closed = false;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    uint8_t buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *closed = true;
      return all;
    }
    all.insert(all.end(), buf, buf + n);
  }
  return all;
}

// Reads one frame (blocking, bounded by kPatience); nullopt-like error otherwise.
inline Result<Message> raw_read_message(int fd) {
  std::vector<uint8_t> got;
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  size_t need = kFrameHeaderBytes;
  bool body = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (got.size() == need) {
      if (body) return decode(std::span<const uint8_t>(got).subspan(kFrameHeaderBytes));
      FERRY_ASSIGN_OR_RETURN(const uint32_t length,
                             decode_length(std::span<const uint8_t, kFrameHeaderBytes>(got.data(), kFrameHeaderBytes)));
      need += length;
      body = true;
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    uint8_t buf[1];
    if (recv(fd, buf, 1, 0) != 1) return unavailable("closed");
    got.push_back(buf[0]);
  }
  return timed_out("no message");
}

}  // namespace ferry::cm::testing
