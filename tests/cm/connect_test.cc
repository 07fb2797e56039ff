// Connections made through the CM carry traffic: the handshake exchanges
// the right QP numbers, PSNs and path MTU, the private data arrives on both
// sides, and WRITE, READ and SEND/RECV then work in both directions. Run over
// UDP between two threaded Engines (as two processes) and in process on one.
#include <set>
#include <thread>

#include "cm_test_util.h"

namespace ferry::cm::testing {
namespace {

using nic::QpState;
using nic::WcOpcode;
using nic::WcStatus;
using nic::WrOpcode;

class CmConnectTest : public ::testing::TestWithParam<Attachment>, public CmFixture {
 protected:
  CmConnectTest() : CmFixture(GetParam()) {}
};

INSTANTIATE_TEST_SUITE_P(Attachments, CmConnectTest, ::testing::Values(Attachment::kUdp, Attachment::kInProcess),
                         attachment_name);

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 13);
}

// Posts one signaled WR on `qp` and expects its completion on `cq`.
void run_one(nic::QueuePair& qp, nic::CompletionQueue& cq, const nic::SendWr& wr, WcOpcode expect) {
  ASSERT_TRUE(qp.post_send(wr).ok());
  const nic::WorkCompletion wc = poll_one(cq);
  ASSERT_EQ(wc.status, WcStatus::kSuccess) << nic::wc_status_name(wc.status);
  ASSERT_EQ(wc.opcode, expect);
  ASSERT_EQ(wc.wr_id, wr.wr_id);
}

TEST_P(CmConnectTest, EchoExchangesRegionsThenWritesReadsAndSendsFlowBothWays) {
  start_listener();
  ASSERT_TRUE(listener_->serve("echo", echo_service()).ok());

  // Receives first, so that the server's SEND cannot find the QP without one.
  nic::QueuePair& cqp = client_.add_qp();
  ASSERT_TRUE(init_qp(cqp).ok());
  for (int i = 0; i < 4; ++i) {
    const nic::Sge sge = client_.mr->sge(65536 + 64 * i, 64);
    ASSERT_TRUE(cqp.post_recv(nic::RecvWr{static_cast<uint64_t>(i), std::span<const nic::Sge>(&sge, 1)}).ok());
  }
  ConnectOptions options;
  options.first_psn = 0xFFFFF0;  // near the 24-bit wrap, so PSNs wrap during the test
  Result<Connection> conn = connect_client(cqp, "echo", options);
  ASSERT_TRUE(conn.ok()) << conn.status().to_string();
  EXPECT_EQ(cqp.state(), QpState::kRts);

  // Both sides learned the other's QP and region.
  Result<RegionInfo> server_region = private_data_as<RegionInfo>(conn->private_data);
  ASSERT_TRUE(server_region.ok()) << server_region.status().to_string();
  EXPECT_EQ(server_region.value(), server_.region());
  const std::vector<Done> done = wait_done(1);
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].status.ok()) << done[0].status.to_string();
  nic::QueuePair& sqp = *done[0].qp;
  EXPECT_EQ(sqp.state(), QpState::kRts);
  EXPECT_EQ(conn->peer.qp_num, sqp.qp_num());
  EXPECT_EQ(done[0].connection.peer.qp_num, cqp.qp_num());
  Result<RegionInfo> client_region = private_data_as<RegionInfo>(done[0].connection.private_data);
  ASSERT_TRUE(client_region.ok());
  EXPECT_EQ(client_region.value(), client_.region());
  EXPECT_EQ(done[0].connection.peer_address.rfind("127.0.0.1:", 0), 0u) << done[0].connection.peer_address;

  // Each side receives from the PSN the other sends from, on one path MTU.
  EXPECT_EQ(cqp.attributes().sq_psn, 0xFFFFF0u);
  EXPECT_EQ(sqp.attributes().rq_psn, 0xFFFFF0u);
  EXPECT_EQ(cqp.attributes().rq_psn, conn->peer.first_psn);
  EXPECT_EQ(sqp.attributes().sq_psn, conn->peer.first_psn);
  EXPECT_EQ(cqp.attributes().path_mtu, sqp.attributes().path_mtu);
  EXPECT_EQ(cqp.attributes().dest_nic, conn->dest_nic);
  EXPECT_EQ(sqp.attributes().dest_nic, done[0].connection.dest_nic);

  const RegionInfo& sr = server_region.value();
  const RegionInfo& cr = client_region.value();
  // Client -> server: WRITE 8 KiB (several packets), READ it back elsewhere.
  fill(client_.at(0), 8192, 1);
  run_one(cqp, *client_.cq, make_wr(1, WrOpcode::kRdmaWrite, client_.mr->sge(0, 8192), sr.addr + 4096, sr.rkey),
          WcOpcode::kRdmaWrite);
  ASSERT_EQ(std::memcmp(server_.at(4096), client_.at(0), 8192), 0);
  run_one(cqp, *client_.cq, make_wr(2, WrOpcode::kRdmaRead, client_.mr->sge(16384, 8192), sr.addr + 4096, sr.rkey),
          WcOpcode::kRdmaRead);
  ASSERT_EQ(std::memcmp(client_.at(16384), client_.at(0), 8192), 0);

  // Server -> client, with the client's region from the REQ.
  fill(server_.at(32768), 3000, 7);
  run_one(sqp, *server_.cq,
          make_wr(3, WrOpcode::kRdmaWrite, server_.mr->sge(32768, 3000), cr.addr + 131072, cr.rkey),
          WcOpcode::kRdmaWrite);
  ASSERT_EQ(std::memcmp(client_.at(131072), server_.at(32768), 3000), 0);
  run_one(sqp, *server_.cq, make_wr(4, WrOpcode::kRdmaRead, server_.mr->sge(40960, 3000), cr.addr + 131072, cr.rkey),
          WcOpcode::kRdmaRead);
  ASSERT_EQ(std::memcmp(server_.at(40960), server_.at(32768), 3000), 0);

  // SEND/RECV both ways; the receiver sees the sender's QP as its source.
  std::memcpy(client_.at(200000), "ping from client", 16);
  ASSERT_TRUE(cqp.post_send(make_wr(5, WrOpcode::kSend, client_.mr->sge(200000, 16))).ok());
  nic::WorkCompletion wc = poll_one(*server_.cq);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  ASSERT_EQ(wc.opcode, WcOpcode::kRecv);
  EXPECT_EQ(wc.byte_len, 16u);
  EXPECT_EQ(wc.src_qp, cqp.qp_num());
  EXPECT_EQ(std::memcmp(server_.at(65536 + 64 * wc.wr_id), "ping from client", 16), 0);
  wc = poll_one(*client_.cq);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  ASSERT_EQ(wc.opcode, WcOpcode::kSend);

  std::memcpy(server_.at(200000), "pong from server", 16);
  ASSERT_TRUE(sqp.post_send(make_wr(6, WrOpcode::kSend, server_.mr->sge(200000, 16))).ok());
  wc = poll_one(*client_.cq);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  ASSERT_EQ(wc.opcode, WcOpcode::kRecv);
  EXPECT_EQ(wc.src_qp, sqp.qp_num());
  EXPECT_EQ(std::memcmp(client_.at(65536 + 64 * wc.wr_id), "pong from server", 16), 0);
  wc = poll_one(*server_.cq);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  ASSERT_EQ(wc.opcode, WcOpcode::kSend);

  const ListenerStats stats = listener_->stats();
  EXPECT_EQ(stats.connections, 1u);
  EXPECT_EQ(stats.established, 1u);
  EXPECT_EQ(stats.failed, 0u);
}

TEST_P(CmConnectTest, ManyClientsConnectConcurrentlyEachGetsItsOwnQp) {
  constexpr int kClients = 16;
  start_listener();
  ASSERT_TRUE(listener_->serve("echo", echo_service(0)).ok());
  struct Outcome {
    Status status;
    uint32_t client_qp = 0;
    uint32_t server_qp = 0;
  };
  std::vector<Outcome> outcomes(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      nic::CompletionQueue& cq = client_.add_cq();
      nic::QueuePair& qp = client_.add_qp(&cq);
      Result<Connection> conn = connect_client(qp);
      outcomes[i].client_qp = qp.qp_num();
      if (!conn.ok()) {
        outcomes[i].status = conn.status();
        return;
      }
      outcomes[i].server_qp = conn->peer.qp_num;
      Result<RegionInfo> sr = private_data_as<RegionInfo>(conn->private_data);
      if (!sr.ok()) {
        outcomes[i].status = sr.status();
        return;
      }
      // Prove the QP is this client's own: write its number into its slot.
      const uint64_t value = 0x1000 + static_cast<uint64_t>(i);
      std::memcpy(client_.at(8 * i), &value, 8);
      const nic::Sge sge = client_.mr->sge(8 * i, 8);
      outcomes[i].status = qp.post_send(make_wr(i, WrOpcode::kRdmaWrite, sge, sr->addr + 8 * i, sr->rkey));
      if (!outcomes[i].status.ok()) return;
      const nic::WorkCompletion wc = poll_one(cq);
      if (wc.status != WcStatus::kSuccess) {
        outcomes[i].status = internal_error(std::string(nic::wc_status_name(wc.status)));
      }
    });
  }
  for (std::thread& t : threads) t.join();

  std::set<uint32_t> server_qps;
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(outcomes[i].status.ok()) << "client " << i << ": " << outcomes[i].status.to_string();
    server_qps.insert(outcomes[i].server_qp);
    uint64_t seen;
    std::memcpy(&seen, server_.at(8 * i), 8);
    EXPECT_EQ(seen, 0x1000 + static_cast<uint64_t>(i)) << "client " << i;
  }
  EXPECT_EQ(server_qps.size(), static_cast<size_t>(kClients)) << "two clients share a server QP";

  // Every accepted request finished once, in RTS, paired with its client.
  const std::vector<Done> done = wait_done(kClients);
  ASSERT_EQ(done.size(), static_cast<size_t>(kClients));
  std::set<uint32_t> done_qps;
  for (const Done& d : done) {
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    EXPECT_EQ(d.qp->state(), QpState::kRts);
    done_qps.insert(d.qp->qp_num());
    const auto it = std::find_if(outcomes.begin(), outcomes.end(),
                                 [&](const Outcome& o) { return o.client_qp == d.connection.peer.qp_num; });
    ASSERT_NE(it, outcomes.end());
    EXPECT_EQ(it->server_qp, d.qp->qp_num());
  }
  EXPECT_EQ(done_qps, server_qps);
  EXPECT_EQ(listener_->stats().established, static_cast<uint64_t>(kClients));
}

TEST_P(CmConnectTest, PathMtuIsTheSmallerOfTheTwoOffers) {
  start_listener();
  Service s = echo_service(0);
  s.qp.path_mtu = 1024;
  ASSERT_TRUE(listener_->serve("echo", std::move(s)).ok());
  nic::QueuePair& qp = client_.add_qp();
  ConnectOptions options;
  options.qp.path_mtu = 2048;
  Result<Connection> conn = connect_client(qp, "echo", options);
  ASSERT_TRUE(conn.ok()) << conn.status().to_string();
  EXPECT_EQ(conn->peer.path_mtu, 1024u);
  EXPECT_EQ(qp.attributes().path_mtu, 1024u);
  const std::vector<Done> done = wait_done(1);
  ASSERT_TRUE(done[0].status.ok());
  EXPECT_EQ(done[0].qp->attributes().path_mtu, 1024u);

  // A 5000-byte WRITE crosses the 1024-byte MTU: five packets, all placed.
  const RegionInfo sr = private_data_as<RegionInfo>(conn->private_data).value();
  fill(client_.at(0), 5000, 3);
  run_one(qp, *client_.cq, make_wr(1, WrOpcode::kRdmaWrite, client_.mr->sge(0, 5000), sr.addr, sr.rkey),
          WcOpcode::kRdmaWrite);
  EXPECT_EQ(std::memcmp(server_.at(0), client_.at(0), 5000), 0);
}

}  // namespace
}  // namespace ferry::cm::testing
