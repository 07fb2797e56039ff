// Test harness for the software RNIC: a manual (unthreaded) Engine on a
// FakeClock, so every test is a deterministic simulation.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"

namespace ferry::nic::testing {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], FreeDeleter>;

inline AlignedBytes aligned_bytes(size_t n, uint8_t fill = 0) {
  const size_t size = (n + 4095) & ~size_t{4095};
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, size ? size : 4096));
  std::memset(p, fill, size ? size : 4096);
  return AlignedBytes(p);
}

// One emulated host: a NIC with a PD, a CQ and one registered buffer.
struct Host {
  Nic* nic = nullptr;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  AlignedBytes mem;
  size_t mem_bytes = 0;
  std::unique_ptr<MemoryRegion> mr;

  uint8_t* at(size_t offset) const { return mem.get() + offset; }
  uint64_t va(size_t offset) const { return reinterpret_cast<uint64_t>(mem.get()) + offset; }
  Sge sge(size_t offset, uint32_t length) const { return mr->sge(offset, length); }
};

class NicTest : public ::testing::Test {
 protected:
  explicit NicTest(const FaultModel& faults = {}, size_t fabric_queue_packets = 8192) {
    EngineOptions options;
    options.threaded = false;
    options.clock = &clock_;
    options.faults = faults;
    options.fabric_queue_packets = fabric_queue_packets;
    engine_ = std::make_unique<Engine>(options);
  }

  ~NicTest() override {
    qps_.clear();
    srqs_.clear();
    for (auto& h : hosts_) {
      h->mr.reset();
      h->cq.reset();
    }
    extra_cqs_.clear();
    for (auto& h : hosts_) h->pd.reset();
  }

  Host& add_host(size_t mem_bytes = 1 << 20, uint32_t access = kAccessAll, uint32_t cqe = 1024) {
    auto host = std::make_unique<Host>();
    host->nic = engine_->add_nic().value();
    host->pd = host->nic->alloc_pd().value();
    CqInitAttr cq_attr;
    cq_attr.cqe = cqe;
    host->cq = host->nic->create_cq(cq_attr).value();
    host->mem = aligned_bytes(mem_bytes);
    host->mem_bytes = mem_bytes;
    host->mr = host->nic->reg_mr(*host->pd, host->mem.get(), mem_bytes, access).value();
    hosts_.push_back(std::move(host));
    return *hosts_.back();
  }

  CompletionQueue& add_cq(Host& h, const CqInitAttr& attr = {}) {
    extra_cqs_.push_back(h.nic->create_cq(attr).value());
    return *extra_cqs_.back();
  }

  SharedReceiveQueue& add_srq(Host& h, const SrqInitAttr& attr = {}) {
    auto srq = h.nic->create_srq(*h.pd, attr);
    EXPECT_TRUE(srq.ok()) << srq.status().to_string();
    srqs_.push_back(std::move(srq).value());
    return *srqs_.back();
  }

  QueuePair& add_qp(Host& h, QpInitAttr attr = {}) {
    if (attr.send_cq == nullptr) attr.send_cq = h.cq.get();
    if (attr.recv_cq == nullptr) attr.recv_cq = h.cq.get();
    auto qp = h.nic->create_qp(*h.pd, attr);
    EXPECT_TRUE(qp.ok()) << qp.status().to_string();
    qps_.push_back(std::move(qp).value());
    return *qps_.back();
  }

  void connect(QueuePair& a, Host& ha, QueuePair& b, Host& hb, const ConnectOptions& o = {}) {
    ASSERT_TRUE(connect_qps(a, *ha.nic, b, *hb.nic, o).ok());
  }

  // A connected pair a (on host 0) <-> b (on host 1).
  struct Pair {
    Host* a;
    Host* b;
    QueuePair* qa;
    QueuePair* qb;
  };
  Pair make_pair(const QpInitAttr& attr = {}, const ConnectOptions& o = {}) {
    Host& a = add_host();
    Host& b = add_host();
    QueuePair& qa = add_qp(a, attr);
    QueuePair& qb = add_qp(b, attr);
    connect(qa, a, qb, b, o);
    return Pair{&a, &b, &qa, &qb};
  }

  // Runs the simulation until nothing is left to do.
  void run() { ASSERT_TRUE(engine_->run_until_idle().ok()); }

  // Polls everything currently in the CQ (after running to idle).
  std::vector<WorkCompletion> drain(CompletionQueue& cq) {
    run();
    std::vector<WorkCompletion> out;
    WorkCompletion wc[64];
    for (;;) {
      auto n = cq.poll(wc);
      EXPECT_TRUE(n.ok()) << n.status().to_string();
      if (!n.ok() || n.value() == 0) break;
      out.insert(out.end(), wc, wc + n.value());
    }
    return out;
  }

  // Runs until `cq` yields one completion and returns it.
  WorkCompletion next_completion(CompletionQueue& cq) {
    WorkCompletion wc{};
    bool got = false;
    Status s = engine_->run_until([&] {
      if (got) return true;
      auto n = cq.poll(std::span<WorkCompletion>(&wc, 1));
      got = n.ok() && n.value() == 1;
      return got;
    });
    EXPECT_TRUE(s.ok()) << "no completion: " << s.to_string();
    return wc;
  }

  static SendWr write_wr(uint64_t wr_id, const Sge* sge, uint64_t remote, uint32_t rkey,
                         uint8_t flags = kSendSignaled) {
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.flags = flags;
    wr.sg_list = std::span<const Sge>(sge, sge ? 1 : 0);
    wr.remote_addr = remote;
    wr.rkey = rkey;
    return wr;
  }

  static SendWr read_wr(uint64_t wr_id, const Sge* local, uint64_t remote, uint32_t rkey,
                        uint8_t flags = kSendSignaled) {
    SendWr wr = write_wr(wr_id, local, remote, rkey, flags);
    wr.opcode = WrOpcode::kRdmaRead;
    return wr;
  }
  static SendWr enable_wr(const QueuePair& target, uint64_t index, bool recv = false) {
    SendWr wr;
    wr.opcode = recv ? WrOpcode::kRecvEnable : WrOpcode::kSendEnable;
    wr.enable_qp = &target;
    wr.index = index;
    return wr;
  }
  static SendWr wait_wr(const CompletionQueue& cq, uint64_t index) {
    SendWr wr;
    wr.opcode = WrOpcode::kWait;
    wr.wait_cq = &cq;
    wr.index = index;
    return wr;
  }
  // A QP connected to a partner on the same NIC: carries WAIT/ENABLE/NOP and
  // local copies.
  QueuePair& loopback_qp(Host& h, QpInitAttr attr = {}) {
    attr.cross_channel = true;
    QueuePair& q1 = add_qp(h, attr);
    QueuePair& q2 = add_qp(h);
    connect(q1, h, q2, h);
    return q1;
  }

  FakeClock clock_;
  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<std::unique_ptr<CompletionQueue>> extra_cqs_;
  std::vector<std::unique_ptr<SharedReceiveQueue>> srqs_;
  std::vector<std::unique_ptr<QueuePair>> qps_;
};

}  // namespace ferry::nic::testing
