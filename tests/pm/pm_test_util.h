// Test fixture for the persistence model: a client (DRAM) and a server whose
// host memory is a PersistenceDomain with one PM region registered for
// remote access, on a manual engine.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "ferry/common/clock.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"

namespace ferry::pm::testing {

using namespace ferry::nic;

inline constexpr size_t kRegionBytes = 64 * 1024;
inline constexpr int kManySeeds = 10'000;

// This process's directory for PM files; removed after the last test.
inline std::filesystem::path temp_dir() {
  return std::filesystem::temp_directory_path() / ("ferry-pm-test-" + std::to_string(getpid()));
}

inline std::string temp_path(const std::string& name) {
  std::filesystem::create_directories(temp_dir());
  return (temp_dir() / name).string();
}

class TempDirCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;  // nothing to remove if no test made a file
    std::filesystem::remove_all(temp_dir(), ignored);
  }
};
// One registration per test binary, whichever test files it links.
inline ::testing::Environment* const kTempDirCleanup = ::testing::AddGlobalTestEnvironment(new TempDirCleanup);

// A client (plain DRAM) and a server whose memory is a PersistenceDomain with
// one PM region registered for remote access, on a manual engine.
class PmTest : public ::testing::Test {
 protected:
  // path_mtu: the QPs' MTU (a multi-packet message is one buffered write per packet).
  void build(const PlatformConfig& config, uint32_t path_mtu = 4096) {
    domain_ = std::make_unique<PersistenceDomain>(config);
    const std::string path = temp_path(::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove(path);
    pm_ = domain_->map_pm(path, kRegionBytes, /*create=*/true).value();
    EngineOptions eo;
    eo.threaded = false;
    eo.clock = &clock_;
    engine_ = std::make_unique<Engine>(eo);
    client_ = engine_->add_nic({.name = "client"}).value();
    NicOptions server_opts;
    server_opts.name = "server";
    server_opts.memory = domain_.get();
    server_ = engine_->add_nic(server_opts).value();
    cpd_ = client_->alloc_pd().value();
    spd_ = server_->alloc_pd().value();
    client_mem_.assign(1 << 20, 0);
    cmr_ = client_->reg_mr(*cpd_, client_mem_.data(), client_mem_.size(), kAccessAll).value();
    smr_ = server_->reg_mr(*spd_, pm_->data(), pm_->size(), kAccessAll).value();
    ccq_ = client_->create_cq({}).value();
    scq_ = server_->create_cq({}).value();
    for (int i = 0; i < 2; ++i) {
      QpInitAttr a;
      a.send_cq = a.recv_cq = ccq_.get();
      cqp_[i] = client_->create_qp(*cpd_, a).value();
      QpInitAttr b;
      b.send_cq = b.recv_cq = scq_.get();
      sqp_[i] = server_->create_qp(*spd_, b).value();
      ConnectOptions o;
      o.path_mtu = path_mtu;
      ASSERT_TRUE(connect_qps(*cqp_[i], *client_, *sqp_[i], *server_, o).ok());
    }
  }
  void TearDown() override {
    for (int i = 0; i < 2; ++i) {
      cqp_[i].reset();
      sqp_[i].reset();
    }
    ccq_.reset();
    scq_.reset();
    cmr_.reset();
    smr_.reset();
    cpd_.reset();
    spd_.reset();
    engine_.reset();
    domain_.reset();
  }

  // Posts one signaled request and runs until its completion.
  WorkCompletion run_one(QueuePair& qp, const SendWr& wr) {
    EXPECT_TRUE(qp.post_send(wr).ok());
    WorkCompletion wc{};
    bool got = false;
    EXPECT_TRUE(engine_
                    ->run_until([&] {
                      auto n = ccq_->poll(std::span<WorkCompletion>(&wc, 1));
                      got = got || (n.ok() && n.value() == 1);
                      return got;
                    })
                    .ok());
    return wc;
  }
  // RDMA WRITE of `len` pattern bytes to PM offset `off` on QP `q`.
  void remote_write(size_t off, size_t len, uint8_t seed, int q = 0) {
    for (size_t i = 0; i < len; ++i) client_mem_[i] = static_cast<uint8_t>(seed + i * 3);
    const Sge sge = cmr_->sge(0, static_cast<uint32_t>(len));
    SendWr wr;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.flags = kSendSignaled;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    wr.remote_addr = smr_->iova() + off;
    wr.rkey = smr_->rkey();
    ASSERT_EQ(run_one(*cqp_[q], wr).status, WcStatus::kSuccess) << "the WRITE was acknowledged";
  }
  // RDMA atomic (kAtomicCmpAndSwp or kAtomicFetchAndAdd) on the PM word at
  // `off`; returns the original value the requester received.
  uint64_t remote_atomic(WrOpcode opcode, size_t off, uint64_t compare_add, uint64_t swap = 0, int q = 0) {
    const Sge result = cmr_->sge(0, 8);
    SendWr wr;
    wr.opcode = opcode;
    wr.flags = kSendSignaled;
    wr.sg_list = std::span<const Sge>(&result, 1);
    wr.remote_addr = smr_->iova() + off;
    wr.rkey = smr_->rkey();
    wr.compare_add = compare_add;
    wr.swap = swap;
    EXPECT_EQ(run_one(*cqp_[q], wr).status, WcStatus::kSuccess) << "the atomic completed";
    uint64_t original;
    std::memcpy(&original, client_mem_.data(), sizeof(original));
    return original;
  }
  void remote_read0(int q = 0) {  // 0-byte READ: the gFLUSH idiom
    SendWr wr;
    wr.opcode = WrOpcode::kRdmaRead;
    wr.flags = kSendSignaled;
    wr.remote_addr = smr_->iova();
    wr.rkey = smr_->rkey();
    ASSERT_EQ(run_one(*cqp_[q], wr).status, WcStatus::kSuccess);
  }
  void remote_flush(size_t off, size_t len, bool persistent, int q = 0) {
    SendWr wr;
    wr.opcode = WrOpcode::kFlush;
    wr.flags = kSendSignaled;
    wr.remote_addr = smr_->iova() + off;
    wr.rkey = smr_->rkey();
    wr.flush_length = static_cast<uint32_t>(len);
    wr.flush_persistent = persistent;
    ASSERT_EQ(run_one(*cqp_[q], wr).status, WcStatus::kSuccess);
  }
  bool survives(const std::vector<uint8_t>& image, size_t off, size_t len, uint8_t seed) const {
    for (size_t i = 0; i < len; ++i) {
      if (image[off + i] != static_cast<uint8_t>(seed + i * 3)) return false;
    }
    return true;
  }
  // How many of `seeds` power failures keep [off, off+len) as written.
  int count_survivals(size_t off, size_t len, uint8_t seed, int seeds) const {
    int kept = 0;
    for (int s = 0; s < seeds; ++s) kept += survives(domain_->image_after_power_fail(*pm_, s), off, len, seed);
    return kept;
  }

  FakeClock clock_;
  std::unique_ptr<PersistenceDomain> domain_;
  Region* pm_ = nullptr;
  std::unique_ptr<Engine> engine_;
  Nic* client_ = nullptr;
  Nic* server_ = nullptr;
  std::unique_ptr<ProtectionDomain> cpd_, spd_;
  std::vector<uint8_t> client_mem_;
  std::unique_ptr<MemoryRegion> cmr_, smr_;
  std::unique_ptr<CompletionQueue> ccq_, scq_;
  std::unique_ptr<QueuePair> cqp_[2], sqp_[2];
};

}  // namespace ferry::pm::testing
