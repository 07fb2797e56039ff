// The persistence domain shared by the engine thread (DMA) and application
// threads (stores, persist) at once; also run under TSan.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "ferry/common/cpu.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/pm/hints.h"

namespace ferry::pm {
namespace {

using namespace ferry::nic;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kOps = 1000;
#else
constexpr int kOps = 10000;
#endif

TEST(PmThreaded, DmaAndCpuPersistConcurrentlyAndEverythingAcknowledgedSurvives) {
  const auto dir = std::filesystem::temp_directory_path() / ("ferry-pm-threaded-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  PersistenceDomain domain;
  Region* pm = domain.map_pm((dir / "shared.pm").string(), 1 << 20, true).value();
  {
    Engine engine;  // threaded
    Nic* client = engine.add_nic().value();
    NicOptions so;
    so.memory = &domain;
    Nic* server = engine.add_nic(so).value();
    auto cpd = client->alloc_pd().value();
    auto spd = server->alloc_pd().value();
    std::vector<uint8_t> src(4096);
    auto cmr = client->reg_mr(*cpd, src.data(), src.size(), kAccessAll).value();
    // The NIC writes the first half of the region; a CPU thread the second.
    auto smr = server->reg_mr(*spd, pm->data(), 512 * 1024, kAccessAll).value();
    auto ccq = client->create_cq({}).value();
    auto scq = server->create_cq({}).value();
    QpInitAttr qa;
    qa.send_cq = qa.recv_cq = ccq.get();
    auto cqp = client->create_qp(*cpd, qa).value();
    QpInitAttr qb;
    qb.send_cq = qb.recv_cq = scq.get();
    auto sqp = server->create_qp(*spd, qb).value();
    ASSERT_TRUE(connect_qps(*cqp, *client, *sqp, *server).ok());

    std::thread cpu([&] {
      uint8_t line[64];
      for (int i = 0; i < kOps; ++i) {
        std::memset(line, i % 255 + 1, sizeof(line));  // never 0, the initial content
        persistent_copy(*pm, pm->data() + 512 * 1024 + (i % 8192) * 64, line, 64, CpuWriteHints{});
      }
    });
    // Each op: 64 B write + 0-byte READ behind one doorbell (H9), so each
    // completion means durable.
    for (int i = 0; i < kOps; ++i) {
      std::memset(src.data(), i % 255 + 1, 64);
      const Sge sge = cmr->sge(0, 64);
      ASSERT_TRUE(post_persistent_write(*cqp, sge, smr->iova() + (i % 8192) * 64, smr->rkey(), i, PersistPoint::kRead).ok());
      WorkCompletion wc;
      for (;;) {
        auto n = ccq->poll(std::span<WorkCompletion>(&wc, 1));
        ASSERT_TRUE(n.ok());
        if (n.value() == 1) break;
        cpu_relax();
      }
      ASSERT_EQ(wc.status, WcStatus::kSuccess);
    }
    cpu.join();
    cqp.reset();
    sqp.reset();
    ccq.reset();
    scq.reset();
    cmr.reset();
    smr.reset();
  }  // the engine is gone: no NIC runs during the failure
  domain.power_fail(17);
  for (int i = kOps - 8192 > 0 ? kOps - 8192 : 0; i < kOps; ++i) {
    ASSERT_EQ(pm->data()[(i % 8192) * 64], i % 255 + 1) << "acknowledged NIC write " << i;
    ASSERT_EQ(pm->data()[512 * 1024 + (i % 8192) * 64], i % 255 + 1) << "persisted CPU write " << i;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::pm
