// What goes wrong, and what each side is told: nobody listening, a silent
// listener, an unknown service, a refusing AcceptFn, a port in use; and on
// the listener, peers that send garbage, too much, another version, nothing,
// or vanish after the REP -- each dropped while other clients are served,
// each accepted QP finished with a DoneFn saying why.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_internal.h"
#include "cm_test_util.h"

namespace ferry::cm::testing {
namespace {

using nic::QpState;

class CmErrorsTest : public ::testing::Test, public CmFixture {
 protected:
  // After a misbehaving peer, an honest client still connects.
  void expect_still_serving() {
    nic::QueuePair& qp = client_.add_qp();
    Result<Connection> conn = connect_client(qp);
    ASSERT_TRUE(conn.ok()) << conn.status().to_string();
    EXPECT_EQ(qp.state(), QpState::kRts);
  }

  // A REQ for "echo" from the client's new QP, as connect() would send it.
  std::vector<uint8_t> req_frame(nic::QueuePair& qp) {
    Req req;
    req.service = "echo";
    req.endpoint = detail::local_endpoint(*client_.nic, qp, 100, 4096);
    return encode(req).value();
  }
};

// A bound socket that does not listen: connecting to its port is refused,
// and no other test can take the port meanwhile.
struct ClosedPort {
  int fd = -1;
  uint16_t port = 0;
  ClosedPort() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(kLoopback);
    EXPECT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0);
    socklen_t len = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~ClosedPort() { ::close(fd); }
};

TEST_F(CmErrorsTest, NobodyListeningIsRefusedAtOnceAndTheQpIsUntouched) {
  ClosedPort closed;
  nic::QueuePair& qp = client_.add_qp();
  ConnectOptions options;
  options.timeout_ms = 60'000;  // a refusal must not wait for it
  const std::string address = "127.0.0.1:" + std::to_string(closed.port);
  Result<Connection> conn =
      connect(address, "echo", *client_.nic, qp, {}, options);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), Code::kUnavailable);
  EXPECT_EQ(conn.status().message(), "cannot connect to " + address + ": Connection refused");
  EXPECT_EQ(qp.state(), QpState::kReset);  // a retry can use it as it is
}

TEST_F(CmErrorsTest, ASilentListenerTimesOut) {
  // Listens (the kernel completes the TCP handshake) but never answers.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(kLoopback);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  nic::QueuePair& qp = client_.add_qp();
  ConnectOptions options;
  options.timeout_ms = 200;
  Result<Connection> conn = connect("127.0.0.1:" + std::to_string(ntohs(a.sin_port)), "echo",
                                    *client_.nic, qp, {}, options);
  ::close(fd);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), Code::kTimedOut);
  EXPECT_NE(conn.status().message().find("service 'echo'"), std::string::npos) << conn.status().message();
  EXPECT_EQ(qp.state(), QpState::kReset);
}

TEST_F(CmErrorsTest, MalformedAddressesAreInvalidArguments) {
  nic::QueuePair& qp = client_.add_qp();
  for (const char* address : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", ":7000", "127.0.0.1:7x"}) {
    Result<Connection> conn = connect(address, "echo", *client_.nic, qp);
    ASSERT_FALSE(conn.ok()) << address;
    EXPECT_EQ(conn.status().code(), Code::kInvalidArgument) << address << ": " << conn.status().to_string();
  }
  Result<std::unique_ptr<Listener>> l = Listener::start("nonsense");
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kInvalidArgument);
}

TEST_F(CmErrorsTest, UnknownServiceIsRejectedWithItsName) {
  start_listener();
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());
  nic::QueuePair& qp = client_.add_qp();
  Result<Connection> conn = connect_client(qp, "no-such-service");
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), Code::kNotFound);
  EXPECT_NE(conn.status().message().find("'no-such-service' at " + listener_->address()), std::string::npos)
      << conn.status().message();
  EXPECT_EQ(qp.state(), QpState::kReset);
  EXPECT_EQ(listener_->stats().rejected, 1u);
  expect_still_serving();
}

TEST_F(CmErrorsTest, AnAcceptFnFailureReachesTheClientWithItsCodeAndReason) {
  start_listener();
  Service s = echo_service();
  s.accept = [](const Request& request) -> Result<Accepted> {
    return resource_exhausted("no free QPs for tenant " + std::to_string(request.private_data.size()));
  };
  ASSERT_TRUE(listener_->serve("full", std::move(s)).ok());
  nic::QueuePair& qp = client_.add_qp();
  Result<Connection> conn = connect_client(qp, "full");
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), Code::kResourceExhausted);
  EXPECT_NE(conn.status().message().find("refused the connection: no free QPs for tenant 16"), std::string::npos)
      << conn.status().message();
  EXPECT_EQ(qp.state(), QpState::kReset);
  EXPECT_EQ(done_count(), 0u);  // nothing was accepted, so no DoneFn
}

TEST_F(CmErrorsTest, ASecondListenerOnTheSamePortIsToldItIsInUse) {
  start_listener();
  Result<std::unique_ptr<Listener>> second = Listener::start(listener_->address());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_EQ(second.status().message(), "cannot listen on " + listener_->address() + ": Address already in use");
}

TEST_F(CmErrorsTest, ServeRefusesBadNamesIncompleteServicesAndDuplicates) {
  start_listener();
  EXPECT_EQ(listener_->serve("two words", echo_service()).code(), Code::kInvalidArgument);
  EXPECT_EQ(listener_->serve("echo", Service{}).code(), Code::kInvalidArgument);
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());
  EXPECT_EQ(listener_->serve("echo", echo_service()).code(), Code::kAlreadyExists);
  EXPECT_EQ(listener_->unserve("other").code(), Code::kNotFound);
}

TEST_F(CmErrorsTest, AnUnservedServiceIsUnknown) {
  start_listener();
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());
  expect_still_serving();
  ASSERT_TRUE(listener_->unserve("echo").ok());
  nic::QueuePair& qp = client_.add_qp();
  Result<Connection> conn = connect_client(qp);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), Code::kNotFound);
}

// Sends `bytes` as a peer would, expects a REJ for `reason`, then the
// listener's FIN; then an honest client still connects.
void expect_rejected_and_dropped(uint16_t port, std::span<const uint8_t> bytes,
                                 RejectReason reason) {
  const int fd = raw_connect(port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(raw_send(fd, bytes));
  Result<Message> answer = raw_read_message(fd);
  ASSERT_TRUE(answer.ok()) << answer.status().to_string();
  const Rej* rej = std::get_if<Rej>(&answer.value());
  ASSERT_NE(rej, nullptr) << message_name(answer.value());
  EXPECT_EQ(rej->reason, reason) << rej->text;
  bool closed = false;
  raw_read_until_close(fd, &closed);
  EXPECT_TRUE(closed) << "the listener kept a broken connection open";
  ::close(fd);
}

TEST_F(CmErrorsTest, GarbageAndOversizedFramesAreDroppedWhileOthersAreServed) {
  start_listener();
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());
  const std::string http = "GET / HTTP/1.1\r\nHost: cm\r\n\r\n";
  expect_rejected_and_dropped(listener_->port(),
                              {reinterpret_cast<const uint8_t*>(http.data()), http.size()}, RejectReason::kBadMessage);
  expect_still_serving();
  const uint8_t too_long[] = {0x7F, 0xFF, 0xFF, 0xFF, 1, 1, 0, 0};
  expect_rejected_and_dropped(listener_->port(), too_long, RejectReason::kBadMessage);
  // A well-framed body of another version, and one of an unknown type.
  const uint8_t other_version[] = {0, 0, 0, 4, kWireVersion + 1, 4, 0, 0};
  expect_rejected_and_dropped(listener_->port(), other_version, RejectReason::kUnsupportedVersion);
  const uint8_t unknown_type[] = {0, 0, 0, 4, kWireVersion, 77, 0, 0};
  expect_rejected_and_dropped(listener_->port(), unknown_type, RejectReason::kBadMessage);
  // An RTU before any REQ is out of turn.
  const std::vector<uint8_t> rtu = encode(Rtu{}).value();
  expect_rejected_and_dropped(listener_->port(), rtu, RejectReason::kBadMessage);
  expect_still_serving();
  EXPECT_EQ(listener_->stats().malformed, 5u);
  const std::vector<Done> done = wait_done(2);  // the two honest clients
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].status.ok() && done[1].status.ok());
}

TEST_F(CmErrorsTest, ASilentPeerTimesOutWithoutDelayingOthers) {
  ListenerOptions options;
  options.request_timeout_ms = 300;
  start_listener(options);
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());
  const int silent = raw_connect(listener_->port());
  ASSERT_GE(silent, 0);
  // Served while the silent connection is still open.
  expect_still_serving();
  bool closed = false;
  const std::vector<uint8_t> got = raw_read_until_close(silent, &closed);
  ::close(silent);
  EXPECT_TRUE(closed);
  EXPECT_TRUE(got.empty());  // dropped without a word
  EXPECT_EQ(listener_->stats().timed_out, 1u);
  ASSERT_EQ(wait_done(1).size(), 1u);
  EXPECT_EQ(listener_->stats().established, 1u);
}

TEST_F(CmErrorsTest, NoRtuAfterTheRepFailsTheServerQpWithATimeout) {
  ListenerOptions options;
  options.rtu_timeout_ms = 300;
  start_listener(options);
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());
  nic::QueuePair& qp = client_.add_qp();
  const int fd = raw_connect(listener_->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(raw_send(fd, req_frame(qp)));
  Result<Message> rep = raw_read_message(fd);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  ASSERT_TRUE(std::holds_alternative<Rep>(rep.value()));
  // ... and no RTU: the server's QP waited in RTR, then failed.
  const std::vector<Done> done = wait_done(1);
  ::close(fd);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), Code::kTimedOut) << done[0].status.to_string();
  EXPECT_EQ(done[0].qp->state(), QpState::kError);
  EXPECT_EQ(listener_->stats().failed, 1u);
}

TEST_F(CmErrorsTest, APeerThatHangsUpAfterTheRepFailsTheServerQp) {
  start_listener();
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());
  nic::QueuePair& qp = client_.add_qp();
  const int fd = raw_connect(listener_->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(raw_send(fd, req_frame(qp)));
  ASSERT_TRUE(raw_read_message(fd).ok());
  ::close(fd);
  const std::vector<Done> done = wait_done(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), Code::kUnavailable) << done[0].status.to_string();
  EXPECT_EQ(done[0].qp->state(), QpState::kError);
  EXPECT_EQ(listener_->stats().closed_early, 1u);
}

TEST_F(CmErrorsTest, DestroyingTheListenerMidHandshakeFinishesTheAcceptedQp) {
  start_listener();
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());
  nic::QueuePair& qp = client_.add_qp();
  const int fd = raw_connect(listener_->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(raw_send(fd, req_frame(qp)));
  ASSERT_TRUE(raw_read_message(fd).ok());  // the server QP is in RTR now
  listener_.reset();                       // joins the thread
  bool closed = false;
  raw_read_until_close(fd, &closed);
  ::close(fd);
  EXPECT_TRUE(closed);
  ASSERT_EQ(done_count(), 1u);
  const std::vector<Done> done = wait_done(1);
  EXPECT_EQ(done[0].status.code(), Code::kUnavailable) << done[0].status.to_string();
  EXPECT_EQ(done[0].qp->state(), QpState::kError);
}

TEST_F(CmErrorsTest, AnInProcessPeerOfAnotherEngineIsRefused) {
  // The client's NIC is in process on a third Engine: its GID names a fabric
  // address (0) that the server's Engine also has, but it is not that NIC.
  nic::EngineOptions eo;
  eo.spin_ns = 20'000;
  auto other_engine = std::make_unique<nic::Engine>(eo);
  Host other;
  make_host(other, *other_engine, /*udp=*/false, "in-process");
  start_listener();
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());
  nic::QueuePair& qp = other.add_qp();
  Result<Connection> conn = connect(listener_->address(), "echo", *other.nic, qp);
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), Code::kFailedPrecondition) << conn.status().to_string();
  EXPECT_NE(conn.status().message().find("not on this Engine"), std::string::npos) << conn.status().message();
  const std::vector<Done> done = wait_done(1);  // the server's QP was accepted, then failed
  EXPECT_EQ(done[0].status.code(), Code::kFailedPrecondition);
  listener_.reset();
  other.tear_down();
}

TEST_F(CmErrorsTest, ConnectRefusesAQpThatIsAlreadyConnected) {
  start_listener();
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());
  nic::QueuePair& qp = client_.add_qp();
  ASSERT_TRUE(connect_client(qp).ok());
  Result<Connection> again = connect_client(qp);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(qp.state(), QpState::kRts);
}

}  // namespace
}  // namespace ferry::cm::testing
