// LogKv deployed (logkv_deploy.h): the coordinator, storage servers and a
// client, each on its own NIC, wired only through the connection manager
// over TCP (as separate processes are; `ferry logkv` runs the same code one
// member per process, tests/cli/logkv_cluster.sh). A server crash must be
// noticed by the heartbeat alone, its tablets recovered on the others from
// their backups by RPC, and every acknowledged write read back -- in both
// replication modes.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/common/rng.h"
#include "ferry/nic/engine.h"
#include "ferry/store/logkv_deploy.h"
#include "test_seed.h"

namespace ferry::store::logkv {
namespace logkv_deploy_test {

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
std::string as_string(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// Members on one threaded engine, each its own NIC and CM listener on
// loopback; the deployment names the listeners' addresses.
class DeployedCluster {
 public:
  DeployedCluster(tailwind::Replication mode, uint32_t servers) {
    nic::EngineOptions eo;
    eo.spin_ns = 20'000;
    engine_ = std::make_unique<nic::Engine>(eo);
    dir_ = std::filesystem::temp_directory_path() / ("ferry-logkv-deploy-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(counter_++));
    d_.server.replication = mode;
    d_.server.replicas = servers > 3 ? 2 : 1;  // a log keeps its replicas after one server is gone
    d_.server.workers = 1;
    d_.server.segment_bytes = 64 << 10;
    d_.server.backup_buffers = 16;
    d_.server.media = tailwind::BufferMedia::kDram;
    d_.server.flush = false;
    d_.tables = {"usertable"};
    d_.heartbeat_ms = 50;
    d_.missed_beats = 6;
    d_.connect_timeout_ms = 20000;
    coordinator_nic_ = add_nic("coordinator");
    coordinator_listener_ = listen();
    d_.coordinator.listen = coordinator_listener_->address();
    for (uint32_t i = 0; i < servers; ++i) {
      server_nics_.push_back(add_nic("server-" + std::to_string(i)));
      server_listeners_.push_back(listen());
      MemberAddress m;
      m.listen = server_listeners_.back()->address();
      m.dir = (dir_ / ("server-" + std::to_string(i))).string();
      d_.servers.push_back(m);
    }
    client_nic_ = add_nic("client");
  }

  ~DeployedCluster() {
    client_.reset();
    servers_.clear();
    coordinator_.reset();
    server_listeners_.clear();
    coordinator_listener_.reset();
    engine_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  Deployment& deployment() { return d_; }

  // Starts the coordinator and every server (in parallel: each waits for
  // the others' listeners), then a client.
  void start() {
    auto events = [this](const std::string& line) {
      std::lock_guard lk(events_mu_);
      events_.push_back(line);
    };
    auto c = CoordinatorService::start(*coordinator_nic_, *coordinator_listener_, d_, events);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    coordinator_ = std::move(c).value();
    servers_.resize(d_.servers.size());
    std::vector<Status> outcomes(d_.servers.size());
    std::vector<std::thread> starts;
    for (uint32_t i = 0; i < d_.servers.size(); ++i) {
      starts.emplace_back([&, i] {
        auto s = StorageServer::start(*server_nics_[i], *server_listeners_[i], d_, i, events);
        if (s.ok()) {
          servers_[i] = std::move(s).value();
        } else {
          outcomes[i] = s.status();
        }
      });
    }
    for (auto& t : starts) t.join();
    for (uint32_t i = 0; i < outcomes.size(); ++i) ASSERT_TRUE(outcomes[i].ok()) << i << ": " << outcomes[i].to_string();
    ASSERT_TRUE(coordinator_->wait_ready(20000)) << "the coordinator never saw every server";
    auto cl = Client::connect(*client_nic_, d_);
    ASSERT_TRUE(cl.ok()) << cl.status().to_string();
    client_ = std::move(cl).value();
  }

  CoordinatorService& coordinator() { return *coordinator_; }
  StorageServer& server(uint32_t i) { return *servers_.at(i); }
  Client& client() { return *client_; }
  nic::Nic& server_nic(uint32_t i) { return *server_nics_.at(i); }
  cm::Listener& server_listener(uint32_t i) { return *server_listeners_.at(i); }
  void crash(uint32_t i) { servers_.at(i)->crash(); }
  std::string events() {
    std::lock_guard lk(events_mu_);
    std::string all;
    for (const auto& e : events_) all += e + "\n";
    return all;
  }

 private:
  nic::Nic* add_nic(const std::string& name) {
    auto n = engine_->add_nic({.name = name});
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    return n.value();
  }
  std::unique_ptr<cm::Listener> listen() {
    auto l = cm::Listener::start("127.0.0.1:0");
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    return std::move(l).value();
  }

  static inline std::atomic<uint32_t> counter_{0};
  std::unique_ptr<nic::Engine> engine_;
  std::filesystem::path dir_;
  Deployment d_;
  nic::Nic* coordinator_nic_ = nullptr;
  nic::Nic* client_nic_ = nullptr;
  std::vector<nic::Nic*> server_nics_;
  std::unique_ptr<cm::Listener> coordinator_listener_;
  std::vector<std::unique_ptr<cm::Listener>> server_listeners_;
  std::unique_ptr<CoordinatorService> coordinator_;
  std::vector<std::unique_ptr<StorageServer>> servers_;
  std::unique_ptr<Client> client_;
  std::mutex events_mu_;
  std::vector<std::string> events_;
};

// key -> (version, value); a key absent from it was deleted or never written.
using Model = std::map<std::string, std::pair<uint64_t, std::string>>;

void write_workload(Client& client, uint64_t table, uint64_t seed, uint32_t ops, Model* model,
                    std::vector<std::string>* deleted) {
  Rng rng(seed);
  for (uint32_t op = 0; op < ops; ++op) {
    const std::string key = "user" + std::to_string(rng.below(ops / 2 + 1));
    if (rng.below(8) == 0 && model->count(key) != 0) {
      Status st = client.remove(0, table, as_bytes(key));
      ASSERT_TRUE(st.ok()) << key << ": " << st.to_string();
      model->erase(key);
      deleted->push_back(key);
      continue;
    }
    const std::string value(16 + rng.below(300), static_cast<char>('a' + rng.below(26)));
    auto v = client.put(0, table, as_bytes(key), as_bytes(value));
    ASSERT_TRUE(v.ok()) << key << ": " << v.status().to_string();
    (*model)[key] = {v.value(), value};
  }
}

void expect_matches(Client& client, uint64_t table, const Model& model, const std::vector<std::string>& deleted) {
  for (const auto& [key, vv] : model) {
    auto got = client.get(0, table, as_bytes(key));
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().to_string();
    EXPECT_EQ(got->version, vv.first) << key;
    EXPECT_EQ(as_string(got->value), vv.second) << key;
  }
  for (const auto& key : deleted) {
    if (model.count(key) != 0) continue;
    EXPECT_EQ(client.get(0, table, as_bytes(key)).status().code(), Code::kNotFound) << key << " came back";
  }
}

class DeployTest : public ::testing::TestWithParam<tailwind::Replication> {};

TEST_P(DeployTest, ServesAcrossConnectionsAndRecoversACrashFoundByTheHeartbeat) {
  const uint64_t seed = ferry::testing::test_seed(0xdec0de);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: FERRY_SEED=" + std::to_string(seed) + ")");
  DeployedCluster cluster(GetParam(), 4);
  ASSERT_NO_FATAL_FAILURE(cluster.start());
  auto table = cluster.client().table(0, "usertable");
  ASSERT_TRUE(table.ok()) << table.status().to_string();
  const uint64_t t = table->table_id;
  Model model;
  std::vector<std::string> deleted;
  ASSERT_NO_FATAL_FAILURE(write_workload(cluster.client(), t, seed, 1500, &model, &deleted));
  ASSERT_NO_FATAL_FAILURE(expect_matches(cluster.client(), t, model, deleted));
  // Segments rolled (64 KB segments): replication crossed opens and closes.
  EXPECT_GT(cluster.server(1).server().log().counters().segments_opened, 1u);

  // Server 1 stops; nobody tells the coordinator.
  const TableMap before = *table;
  cluster.crash(1);
  ASSERT_TRUE(cluster.coordinator().wait_recoveries(1, 60000)) << cluster.events();
  const CoordinatorStatus st = cluster.coordinator().status();
  EXPECT_TRUE(st.crashed[1]);
  EXPECT_EQ(st.recovery_failures, 0u) << cluster.events();
  for (uint32_t owner : st.tables.at(0).owners) EXPECT_NE(owner, 1u);
  EXPECT_NE(std::count(before.owners.begin(), before.owners.end(), 1u), 0) << "server 1 owned no tablet: test is vacuous";
  EXPECT_NE(cluster.events().find("event=recovered server=1"), std::string::npos) << cluster.events();

  // Every acknowledged write is back, served by the others; writes go on.
  ASSERT_NO_FATAL_FAILURE(expect_matches(cluster.client(), t, model, deleted));
  ASSERT_NO_FATAL_FAILURE(write_workload(cluster.client(), t, seed + 1, 600, &model, &deleted));
  ASSERT_NO_FATAL_FAILURE(expect_matches(cluster.client(), t, model, deleted));
}

TEST_P(DeployTest, TablesCreatedByClientsAndACrashedServerCannotRejoin) {
  DeployedCluster cluster(GetParam(), 3);
  ASSERT_NO_FATAL_FAILURE(cluster.start());
  auto created = cluster.client().create_table(0, "accounts");
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  EXPECT_EQ(cluster.client().create_table(0, "accounts").status().code(), Code::kAlreadyExists);
  EXPECT_EQ(cluster.client().table(0, "nosuch").status().code(), Code::kNotFound);
  auto v = cluster.client().put(0, created->table_id, as_bytes("k"), as_bytes("v1"));
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  // A conditional PUT through the deployed path.
  EXPECT_EQ(cluster.client().put(0, created->table_id, as_bytes("k"), as_bytes("v2"), v.value() + 100).status().code(),
            Code::kFailedPrecondition);

  cluster.crash(2);
  ASSERT_TRUE(cluster.coordinator().wait_recoveries(1, 60000)) << cluster.events();
  auto got = cluster.client().get(0, created->table_id, as_bytes("k"));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(as_string(got->value), "v1");
  // Server 2 started again (its NIC and listener are still there): refused.
  Deployment d = cluster.deployment();
  d.connect_timeout_ms = 5000;
  auto again = StorageServer::start(cluster.server_nic(2), cluster.server_listener(2), d, 2);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("cannot rejoin"), std::string::npos) << again.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Modes, DeployTest,
                         ::testing::Values(tailwind::Replication::kTailwind, tailwind::Replication::kRpc),
                         [](const auto& info) { return std::string(tailwind::replication_name(info.param)); });

TEST(DeploymentCheck, RefusesWhatCannotWork) {
  Deployment d;
  d.coordinator.listen = "127.0.0.1:7000";
  d.server.media = tailwind::BufferMedia::kDram;
  for (int i = 0; i < 3; ++i) d.servers.push_back({"", "127.0.0.1:" + std::to_string(7001 + i), "/tmp/x" + std::to_string(i)});
  d.server.replicas = 2;
  EXPECT_TRUE(check_deployment(d).ok());
  Deployment bad = d;
  bad.server.replicas = 3;
  EXPECT_EQ(check_deployment(bad).code(), Code::kInvalidArgument);
  bad = d;
  bad.server.media = tailwind::BufferMedia::kPm;
  EXPECT_NE(check_deployment(bad).message().find("dram"), std::string::npos);
  bad = d;
  bad.servers[2].listen = bad.servers[0].listen;
  EXPECT_NE(check_deployment(bad).message().find("used twice"), std::string::npos);
  bad = d;
  bad.servers[1].dir.clear();
  EXPECT_EQ(check_deployment(bad).code(), Code::kInvalidArgument);
  bad = d;
  bad.tables = {"a", "a"};
  EXPECT_EQ(check_deployment(bad).code(), Code::kInvalidArgument);
}

}  // namespace logkv_deploy_test
}  // namespace ferry::store::logkv
