// The threaded engine with application threads: doorbells, CQ polling,
// completion channels, control commands and NIC atomics racing CPU atomics.
// These are the places where threads share state; they also run under TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "ferry/common/cpu.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "nic_test_util.h"

namespace ferry::nic::testing {
namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kOps = 2'000;
#else
constexpr int kOps = 20'000;
#endif

struct Side {
  Nic* nic;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  AlignedBytes mem;
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<QueuePair> qp;
  uint64_t va(size_t off) const { return mr->iova() + off; }
};

class ThreadedTest : public ::testing::Test {
 protected:
  explicit ThreadedTest(uint64_t spin_ns = 200'000) {
    EngineOptions o;
    o.threaded = true;
    o.spin_ns = spin_ns;
    engine_ = std::make_unique<Engine>(o);
  }
  ~ThreadedTest() override {
    for (auto& s : sides_) {
      s->qp.reset();
      s->mr.reset();
      s->cq.reset();
      s->pd.reset();
    }
  }
  Side& side(CompletionChannel* channel = nullptr) {
    auto s = std::make_unique<Side>();
    s->nic = engine_->add_nic().value();
    s->pd = s->nic->alloc_pd().value();
    CqInitAttr attr;
    attr.cqe = 4096;
    attr.channel = channel;
    s->cq = s->nic->create_cq(attr).value();
    s->mem = aligned_bytes(1 << 20);
    s->mr = s->nic->reg_mr(*s->pd, s->mem.get(), 1 << 20, kAccessAll).value();
    QpInitAttr qattr;
    qattr.send_cq = s->cq.get();
    qattr.recv_cq = s->cq.get();
    qattr.cap.max_send_wr = 256;
    qattr.cap.max_recv_wr = 256;
    s->qp = s->nic->create_qp(*s->pd, qattr).value();
    sides_.push_back(std::move(s));
    return *sides_.back();
  }
  void connect(Side& a, Side& b) { ASSERT_TRUE(connect_qps(*a.qp, *a.nic, *b.qp, *b.nic).ok()); }

  // Busy-polls one completion (the engine runs on its own thread).
  static WorkCompletion poll_one(CompletionQueue& cq) {
    WorkCompletion wc{};
    for (;;) {
      auto n = cq.poll(std::span<WorkCompletion>(&wc, 1));
      EXPECT_TRUE(n.ok());
      if (!n.ok() || n.value() == 1) return wc;
      std::this_thread::yield();
    }
  }

  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Side>> sides_;
};

TEST_F(ThreadedTest, ApplicationThreadDrivesWritesThroughTheEngineThread) {
  Side& a = side();
  Side& b = side();
  connect(a, b);
  constexpr int kWindow = 16;
  int posted = 0, done = 0;
  while (done < kOps) {
    while (posted < kOps && posted - done < kWindow) {
      const uint64_t value = static_cast<uint64_t>(posted) * 3 + 1;
      std::memcpy(a.mem.get() + (posted % kWindow) * 8, &value, 8);
      const Sge sge = a.mr->sge((posted % kWindow) * 8, 8);
      SendWr wr;
      wr.wr_id = posted;
      wr.opcode = WrOpcode::kRdmaWrite;
      wr.flags = kSendSignaled;
      wr.sg_list = std::span<const Sge>(&sge, 1);
      wr.remote_addr = b.va((posted % 1024) * 8);
      wr.rkey = b.mr->rkey();
      ASSERT_TRUE(a.qp->post_send(wr).ok());
      ++posted;
    }
    const WorkCompletion wc = poll_one(*a.cq);
    ASSERT_EQ(wc.status, WcStatus::kSuccess);
    ASSERT_EQ(wc.wr_id, static_cast<uint64_t>(done));
    // The completion makes the remote bytes visible to this thread.
    uint64_t seen;
    std::memcpy(&seen, b.mem.get() + (done % 1024) * 8, 8);
    ASSERT_EQ(seen, static_cast<uint64_t>(done) * 3 + 1);
    ++done;
  }
}

TEST_F(ThreadedTest, TwoApplicationThreadsExchangeSendsConcurrently) {
  Side& a = side();
  Side& b = side();
  connect(a, b);
  auto run_side = [&](Side& self, uint8_t tag) {
    constexpr int kSlots = 128;
    for (int i = 0; i < kSlots; ++i) {
      const Sge rs = self.mr->sge(65536 + i * 64, 64);
      EXPECT_TRUE(self.qp->post_recv(RecvWr{static_cast<uint64_t>(i), std::span<const Sge>(&rs, 1)}).ok());
    }
    int sent = 0, send_done = 0, received = 0;
    const int n = kOps / 4;
    while (send_done < n || received < n) {
      while (sent < n && sent - send_done < 16) {
        self.mem[(sent % 16) * 64] = tag;
        std::memcpy(self.mem.get() + (sent % 16) * 64 + 1, &sent, 4);
        const Sge sge = self.mr->sge((sent % 16) * 64, 5);
        SendWr wr;
        wr.wr_id = 1u << 31 | sent;
        wr.opcode = WrOpcode::kSend;
        wr.flags = kSendSignaled;
        wr.sg_list = std::span<const Sge>(&sge, 1);
        EXPECT_TRUE(self.qp->post_send(wr).ok());
        ++sent;
      }
      WorkCompletion wcs[16];
      auto got = self.cq->poll(wcs);
      ASSERT_TRUE(got.ok());
      for (uint32_t k = 0; k < got.value(); ++k) {
        ASSERT_EQ(wcs[k].status, WcStatus::kSuccess);
        if (wcs[k].opcode == WcOpcode::kSend) {
          ++send_done;
          continue;
        }
        const uint8_t* buf = self.mem.get() + 65536 + wcs[k].wr_id * 64;
        int seq;
        std::memcpy(&seq, buf + 1, 4);
        EXPECT_EQ(buf[0], tag == 'a' ? 'b' : 'a');
        EXPECT_EQ(seq, received);
        ++received;
        const Sge rs = self.mr->sge(65536 + wcs[k].wr_id * 64, 64);
        EXPECT_TRUE(self.qp->post_recv(RecvWr{wcs[k].wr_id, std::span<const Sge>(&rs, 1)}).ok());
      }
      if (got.value() == 0) std::this_thread::yield();
    }
  };
  std::thread ta([&] { run_side(a, 'a'); });
  std::thread tb([&] { run_side(b, 'b'); });
  ta.join();
  tb.join();
}

TEST_F(ThreadedTest, NicAtomicsStayAtomicAgainstCpuAtomicsOnTheSameWord) {
  Side& a = side();
  Side& b = side();
  connect(a, b);
  uint64_t* word = reinterpret_cast<uint64_t*>(b.mem.get());
  std::atomic_ref<uint64_t>(*word).store(0);
  const int n = kOps / 2;
  // A CPU thread on host b increments the same word with CPU atomics (half
  // of them as CAS loops) while the NIC executes remote FETCH_AND_ADDs.
  std::thread cpu([&] {
    for (int i = 0; i < n; ++i) {
      std::atomic_ref<uint64_t> ref(*word);
      if (i & 1) {
        ref.fetch_add(1);
      } else {
        uint64_t cur = ref.load();
        while (!ref.compare_exchange_weak(cur, cur + 1)) {
        }
      }
    }
  });
  std::vector<uint64_t> originals;
  int posted = 0, done = 0;
  while (done < n) {
    while (posted < n && posted - done < 16) {
      const Sge sge = a.mr->sge((posted % 16) * 8, 8);
      SendWr wr;
      wr.wr_id = posted;
      wr.opcode = WrOpcode::kAtomicFetchAndAdd;
      wr.flags = kSendSignaled;
      wr.sg_list = std::span<const Sge>(&sge, 1);
      wr.remote_addr = b.va(0);
      wr.rkey = b.mr->rkey();
      wr.compare_add = 1;
      ASSERT_TRUE(a.qp->post_send(wr).ok());
      ++posted;
    }
    const WorkCompletion wc = poll_one(*a.cq);
    ASSERT_EQ(wc.status, WcStatus::kSuccess);
    uint64_t original;
    std::memcpy(&original, a.mem.get() + (wc.wr_id % 16) * 8, 8);
    originals.push_back(original);
    ++done;
  }
  cpu.join();
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), static_cast<uint64_t>(2 * n)) << "no increment was lost";
  std::sort(originals.begin(), originals.end());
  EXPECT_EQ(std::adjacent_find(originals.begin(), originals.end()), originals.end())
      << "two NIC atomics observed the same value";
}

TEST_F(ThreadedTest, BlockedConsumerIsWokenByACompletionEvent) {
  Side& a = side();
  Side& b = side();
  auto channel = b.nic->create_comp_channel().value();
  // b gets a CQ bound to the channel, used by a new QP toward a.
  CqInitAttr attr;
  attr.channel = channel.get();
  auto cq = b.nic->create_cq(attr).value();
  QpInitAttr qattr;
  qattr.send_cq = cq.get();
  qattr.recv_cq = cq.get();
  auto qb = b.nic->create_qp(*b.pd, qattr).value();
  ASSERT_TRUE(connect_qps(*a.qp, *a.nic, *qb, *b.nic).ok());
  const Sge rs = b.mr->sge(0, 64);
  ASSERT_TRUE(qb->post_recv(RecvWr{9, std::span<const Sge>(&rs, 1)}).ok());
  ASSERT_TRUE(cq->req_notify(false).ok());
  std::atomic<bool> woke{false};
  std::thread consumer([&] {
    auto ev = channel->get_event(-1);  // blocks, no spinning
    EXPECT_TRUE(ev.ok());
    EXPECT_EQ(ev.value(), cq.get());
    woke.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(woke.load());
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  ASSERT_TRUE(a.qp->post_send(wr).ok());
  consumer.join();
  EXPECT_TRUE(woke.load());
  WorkCompletion wc;
  auto n = cq->poll(std::span<WorkCompletion>(&wc, 1));
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(n.value(), 1u);
  EXPECT_EQ(wc.wr_id, 9u);
  qb.reset();
  cq.reset();
}

class SleepyEngineTest : public ThreadedTest {
 protected:
  SleepyEngineTest() : ThreadedTest(/*spin_ns=*/2'000) {}
};

TEST_F(SleepyEngineTest, IdleEngineSleepsAndADoorbellWakesIt) {
  Side& a = side();
  Side& b = side();
  connect(a, b);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const EngineStats idle = engine_->stats();
  EXPECT_GT(idle.sleeps, 0u) << "the engine blocks instead of burning a core";
  // Asleep means not looping: no engine passes while nothing happens.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_LT(engine_->stats().passes - idle.passes, 10u);
  for (int i = 0; i < 20; ++i) {
    const Sge sge = a.mr->sge(0, 8);
    SendWr wr;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.flags = kSendSignaled;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    wr.remote_addr = b.va(0);
    wr.rkey = b.mr->rkey();
    ASSERT_TRUE(a.qp->post_send(wr).ok());
    EXPECT_EQ(poll_one(*a.cq).status, WcStatus::kSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // let it fall asleep again
  }
  EXPECT_GT(engine_->stats().wakeups, idle.wakeups) << "posts woke the sleeping engine";
}

// account_idle on a threaded engine: its idle time is its spinning passes
// (sampled) and its sleeps (whole, counted when they end), so an engine with
// nothing to do reads as idle for most of the wall time, whether it spins or
// sleeps between sparse posts.
TEST(ThreadedIdleTest, AnIdleEngineReadsIdleWhetherItSpinsOrSleeps) {
  for (const uint64_t spin_ns : {uint64_t{10'000'000'000}, uint64_t{2'000}}) {
    SCOPED_TRACE(spin_ns > 1'000'000 ? "spinning" : "sleeping");
    EngineOptions o;
    o.threaded = true;
    o.spin_ns = spin_ns;
    o.account_idle = true;
    Engine engine(o);
    Nic* a = engine.add_nic().value();
    Nic* b = engine.add_nic().value();
    auto pa = a->alloc_pd().value();
    auto pb = b->alloc_pd().value();
    CqInitAttr ca;
    ca.cqe = 64;
    auto cq = a->create_cq(ca).value();
    auto cqb = b->create_cq(ca).value();
    QpInitAttr qa;
    qa.send_cq = cq.get();
    qa.recv_cq = cq.get();
    auto qpa = a->create_qp(*pa, qa).value();
    qa.send_cq = cqb.get();
    qa.recv_cq = cqb.get();
    auto qpb = b->create_qp(*pb, qa).value();
    ASSERT_TRUE(connect_qps(*qpa, *a, *qpb, *b).ok());
    AlignedBytes ma = aligned_bytes(4096), mb = aligned_bytes(4096);
    auto mra = a->reg_mr(*pa, ma.get(), 4096, kAccessAll).value();
    auto mrb = b->reg_mr(*pb, mb.get(), 4096, kAccessAll).value();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const uint64_t idle0 = engine.stats().idle_pass_ns;
    const uint64_t cpu0 = engine.stats().thread_cpu_ns;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 40; ++i) {
      const Sge sge = mra->sge(0, 8);
      SendWr wr;
      wr.opcode = WrOpcode::kRdmaWrite;
      wr.flags = kSendSignaled;
      wr.sg_list = std::span<const Sge>(&sge, 1);
      wr.remote_addr = mrb->iova();
      wr.rkey = mrb->rkey();
      ASSERT_TRUE(qpa->post_send(wr).ok());
      WorkCompletion wc{};
      for (;;) {
        auto n = cq->poll(std::span<WorkCompletion>(&wc, 1));
        ASSERT_TRUE(n.ok());
        if (n.value() == 1) break;
        std::this_thread::yield();
      }
      EXPECT_EQ(wc.status, WcStatus::kSuccess);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const double wall = static_cast<double>(std::chrono::nanoseconds(std::chrono::steady_clock::now() - t0).count());
    const double idle = static_cast<double>(engine.stats().idle_pass_ns - idle0);
    const double cpu = static_cast<double>(engine.stats().thread_cpu_ns - cpu0);
    // 40 WRITEs take microseconds of the ~80 ms; the sampler's x16 scaling
    // and the last sleep (counted only when it ends) leave room either way.
    // A spinning engine's idle time is its time on the CPU: on a loaded
    // machine it is preempted, and a preempted pass counts once
    // (IdleSampler's stall rule), so the bound is against its CPU time.
    // A sleeping engine's sleeps count whole, preempted or not.
    const double expected = spin_ns > 1'000'000 ? cpu : wall;
    EXPECT_GT(idle, 0.5 * expected) << "idle " << idle << " ns of " << expected << " (wall " << wall << ")";
    EXPECT_LT(idle, 1.5 * wall) << "idle " << idle << " ns of " << wall;
    qpa.reset();
    qpb.reset();
    mra.reset();
    mrb.reset();
    cq.reset();
    cqb.reset();
  }
}

TEST_F(ThreadedTest, ControlPathFromAnotherThreadWhileTrafficRuns) {
  Side& a = side();
  Side& b = side();
  connect(a, b);
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop.load()) {
      auto mr = b.nic->reg_mr(*b.pd, b.mem.get() + 4096, 4096, kAccessAll);
      EXPECT_TRUE(mr.ok());
      QpInitAttr qattr;
      qattr.send_cq = b.cq.get();
      qattr.recv_cq = b.cq.get();
      auto qp = b.nic->create_qp(*b.pd, qattr);
      EXPECT_TRUE(qp.ok());
    }
  });
  for (int i = 0; i < kOps / 10; ++i) {
    const Sge sge = a.mr->sge(0, 64);
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.flags = kSendSignaled;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    wr.remote_addr = b.va(0);
    wr.rkey = b.mr->rkey();
    ASSERT_TRUE(a.qp->post_send(wr).ok());
    ASSERT_EQ(poll_one(*a.cq).status, WcStatus::kSuccess);
  }
  stop.store(true);
  churn.join();
}

// Multi-packet READs on the threaded engine with packet loss: every lost
// response packet is re-requested (once per gap) and every READ completes
// with the right bytes (verbs-semantics.md, multi-packet READ under loss).
class LossyThreadedTest : public ThreadedTest {
 protected:
  LossyThreadedTest() {
    EngineOptions o;
    o.threaded = true;
    o.faults.seed = 0x10557;
    o.faults.drop = 0.01;
    o.faults.delay = 0.01;
    o.faults.delay_max_ns = 20'000;
    engine_ = std::make_unique<Engine>(o);
  }
};

TEST_F(LossyThreadedTest, MultiPacketReadsUnderLossAllCompleteByteExact) {
  Side& a = side();
  Side& b = side();
  ConnectOptions o;
  o.path_mtu = 1024;
  o.timeout = 8;  // ~1 ms
  o.retry_cnt = 7;
  ASSERT_TRUE(connect_qps(*a.qp, *a.nic, *b.qp, *b.nic, o).ok());
  constexpr uint32_t kLen = 16 * 1024 - 300;  // 16 response packets
  for (uint32_t i = 0; i < 512 * 1024; ++i) b.mem[i] = static_cast<uint8_t>(i * 7 + 1);
  constexpr int kReads = kOps / 40;
  constexpr int kWindow = 4;
  int posted = 0, done = 0;
  while (done < kReads) {
    while (posted < kReads && posted - done < kWindow) {
      const Sge local = a.mr->sge((posted % kWindow) * kLen, kLen);
      SendWr wr;
      wr.wr_id = posted;
      wr.opcode = WrOpcode::kRdmaRead;
      wr.flags = kSendSignaled;
      wr.sg_list = std::span<const Sge>(&local, 1);
      wr.remote_addr = b.va((posted % 29) * 16384);
      wr.rkey = b.mr->rkey();
      ASSERT_TRUE(a.qp->post_send(wr).ok());
      ++posted;
    }
    const WorkCompletion wc = poll_one(*a.cq);
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << "READ " << done << ": " << wc_status_name(wc.status);
    ASSERT_EQ(wc.wr_id, static_cast<uint64_t>(done));
    ASSERT_EQ(std::memcmp(a.mem.get() + (done % kWindow) * kLen, b.mem.get() + (done % 29) * 16384, kLen), 0);
    ++done;
  }
  EXPECT_GT(engine_->fabric().counters().dropped_fault.get(), 0u);
}

// One thread posts, another polls, on a CQ exactly as deep as the send
// queue: slots are freed by the poller's progress (the free marks shared by
// the engine, the poster and the poller), and the CQ never overruns.
TEST_F(ThreadedTest, PosterAndPollerThreadsNeverOverrunACqSizedToTheSendQueue) {
  Side& a = side();
  Side& b = side();
  connect(a, b);
  CqInitAttr cattr;
  cattr.cqe = 8;
  auto cq = a.nic->create_cq(cattr).value();
  QpInitAttr qattr;
  qattr.send_cq = cq.get();
  qattr.recv_cq = a.cq.get();
  qattr.cap.max_send_wr = 8;
  qattr.sq_sig_all = true;
  auto qa = a.nic->create_qp(*a.pd, qattr).value();
  qattr.send_cq = b.cq.get();
  qattr.recv_cq = b.cq.get();
  auto qb = b.nic->create_qp(*b.pd, qattr).value();
  ASSERT_TRUE(connect_qps(*qa, *a.nic, *qb, *b.nic).ok());
  const int n = kOps / 4;
  std::atomic<int> polled{0};
  std::thread poller([&] {
    WorkCompletion wc[3];
    while (polled.load(std::memory_order_relaxed) < n) {
      auto got = cq->poll(wc);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      for (uint32_t k = 0; k < got.value(); ++k) {
        ASSERT_EQ(wc[k].status, WcStatus::kSuccess);
        ASSERT_EQ(wc[k].wr_id, static_cast<uint64_t>(polled.load(std::memory_order_relaxed)));
        polled.fetch_add(1, std::memory_order_relaxed);
      }
      if (got.value() == 0) std::this_thread::yield();
    }
  });
  const Sge sge = a.mr->sge(0, 8);
  int full = 0;
  for (int posted = 0; posted < n;) {
    SendWr wr;
    wr.wr_id = posted;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    wr.remote_addr = b.va(0);
    wr.rkey = b.mr->rkey();
    const Status st = qa->post_send(wr);
    if (st.ok()) {
      ++posted;
    } else {
      ASSERT_EQ(st.code(), Code::kResourceExhausted) << st.to_string();
      ++full;
      std::this_thread::yield();
    }
  }
  poller.join();
  EXPECT_EQ(qa->state(), QpState::kRts);
  EXPECT_FALSE(a.nic->poll_async_event().has_value()) << "no CQ overrun";
  qa.reset();
  qb.reset();
  cq.reset();
}

// A manual engine with a driver thread (Engine::set_manual_driver): another
// thread's control operation waits for the driver's next step and runs in
// it, so the NIC's tables have one writer; after release it runs at once.
TEST(ManualDriverTest, OtherThreadsControlOperationsRunInTheDriversStep) {
  EngineOptions o;
  o.threaded = false;
  Engine engine(o);
  Nic* nic = engine.add_nic({.name = "n"}).value();
  engine.set_manual_driver();
  std::atomic<bool> done{false};
  std::thread other([&] {
    {
      auto pd = nic->alloc_pd();  // and its release: both in the driver's steps
      EXPECT_TRUE(pd.ok());
    }
    done = true;
  });
  // Nobody steps: the allocation must wait.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load()) << "a control operation ran outside the driver's step";
  while (!done.load()) engine.step();
  other.join();
  // Released: another thread's control operation runs on its own thread.
  engine.release_manual_driver();
  std::atomic<bool> done2{false};
  std::thread again([&] {
    auto pd = nic->alloc_pd();
    EXPECT_TRUE(pd.ok());
    done2 = true;
  });
  again.join();
  EXPECT_TRUE(done2.load());
}

// SpinPolicy::kShared: an engine that spins on a CPU it shares with a busy
// thread yields it between passes, so the thread gets nearly all of the CPU
// (a woken daemon would run at once); kBusy, the control, holds its share of
// the CPU for the whole spin (here 10 s). Shares are thread CPU times, so a
// loaded machine slows both sides alike.
void spin_beside_a_busy_thread(EngineOptions::SpinPolicy policy, uint64_t* engine_ns, uint64_t* busy_ns) {
  EngineOptions o;
  o.threaded = true;
  o.cpu = 0;
  o.spin_ns = 10'000'000'000;
  o.spin_policy = policy;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> busy_cpu{0};
  Engine engine(o);
  Nic* nic = engine.add_nic().value();
  (void)nic->alloc_pd();  // a control command: the engine ran a pass of work and now spins
  const uint64_t engine_before = engine.stats().thread_cpu_ns;
  std::thread busy([&] {
    (void)pin_current_thread(0);
    const uint64_t start = thread_cpu_time_ns();
    while (!stop.load(std::memory_order_relaxed)) {
    }
    busy_cpu = thread_cpu_time_ns() - start;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  *engine_ns = engine.stats().thread_cpu_ns - engine_before;
  stop = true;
  busy.join();
  *busy_ns = busy_cpu.load();
}

TEST(SpinPolicyTest, ASharedEngineYieldsItsCpuToABusyThreadWhileABusyEngineHoldsItsShare) {
  uint64_t engine_ns = 0, busy_ns = 0;
  spin_beside_a_busy_thread(EngineOptions::SpinPolicy::kShared, &engine_ns, &busy_ns);
  ASSERT_GT(busy_ns, 0u);
  EXPECT_LT(engine_ns * 4, busy_ns) << "kShared: the spinning engine took " << engine_ns / 1000
                                    << " us of CPU beside the busy thread's " << busy_ns / 1000 << " us";
  spin_beside_a_busy_thread(EngineOptions::SpinPolicy::kBusy, &engine_ns, &busy_ns);
  ASSERT_GT(busy_ns, 0u);
  EXPECT_GT(engine_ns * 2, busy_ns) << "the control, kBusy: the engine took " << engine_ns / 1000
                                    << " us of CPU beside the busy thread's " << busy_ns / 1000 << " us";
}

}  // namespace
}  // namespace ferry::nic::testing
