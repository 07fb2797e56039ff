// `ferry demo`: three emulated hosts on the software RNIC, each verb in turn,
// then the two mechanisms HyperLoop is built from -- WAIT/ENABLE forwarding
// with no CPU on the replica, and a remote rewrite of a pre-posted WQE -- and
// a latency summary. Every step is verified; a failed check exits non-zero.
#include "demo.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"
#include "ferry/nic/wqe.h"
#include "report.h"

namespace ferry::apps {
namespace {

using namespace ferry::nic;

struct Host {
  std::string name;
  Nic* nic = nullptr;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  uint8_t* mem = nullptr;
  std::unique_ptr<MemoryRegion> mr;
  uint64_t va(size_t off) const { return mr->iova() + off; }
  ~Host() {
    mr.reset();
    cq.reset();
    pd.reset();
    std::free(mem);
  }
};

class Demo {
 public:
  Demo(std::ostream& out, int engine_cpu) : out_(out), steps_(out) {
    EngineOptions eo;
    eo.cpu = bench::usable_cpu(engine_cpu);
    engine_cpu_ = eo.cpu;
    engine_ = std::make_unique<Engine>(eo);
  }
  ~Demo() {
    qps_.clear();
    extra_cqs_.clear();
    ring_mr_.reset();
    hosts_.clear();
  }

  int run();

 private:
  Host& host(const std::string& name) {
    auto h = std::make_unique<Host>();
    h->name = name;
    h->nic = engine_->add_nic(NicOptions{.name = name}).value();
    h->pd = h->nic->alloc_pd().value();
    CqInitAttr attr;
    attr.cqe = 4096;
    h->cq = h->nic->create_cq(attr).value();
    h->mem = static_cast<uint8_t*>(std::aligned_alloc(4096, kMem));
    std::memset(h->mem, 0, kMem);
    h->mr = h->nic->reg_mr(*h->pd, h->mem, kMem, kAccessAll).value();
    hosts_.push_back(std::move(h));
    return *hosts_.back();
  }
  QueuePair& qp(Host& h, QpInitAttr attr = {}) {
    if (!attr.send_cq) attr.send_cq = h.cq.get();
    if (!attr.recv_cq) attr.recv_cq = h.cq.get();
    qps_.push_back(h.nic->create_qp(*h.pd, attr).value());
    return *qps_.back();
  }
  void connect(QueuePair& a, Host& ha, QueuePair& b, Host& hb) {
    const Status s = connect_qps(a, *ha.nic, b, *hb.nic);
    FERRY_ASSERT(s.ok(), s.to_string());
  }
  WorkCompletion wait(CompletionQueue& cq) {
    WorkCompletion wc{};
    for (;;) {
      auto n = cq.poll(std::span<WorkCompletion>(&wc, 1));
      if (!n.ok() || n.value() == 1) return wc;
      cpu_relax();
    }
  }

  static constexpr size_t kMem = 1 << 20;
  std::ostream& out_;
  int engine_cpu_ = -1;
  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<std::unique_ptr<CompletionQueue>> extra_cqs_;
  std::vector<std::unique_ptr<QueuePair>> qps_;
  std::unique_ptr<MemoryRegion> ring_mr_;
  DemoSteps steps_;
};

int Demo::run() {
  out_ << "Ferry demo: the software RDMA NIC\n"
       << "Three emulated hosts (client, replica-1, replica-2), each with its own NIC. One engine thread"
       << (engine_cpu_ >= 0 ? fmt::format(" pinned to CPU {}", engine_cpu_) : std::string(" (not pinned)"))
       << " plays all three NICs; this thread plays the applications. Packets carry real RoCEv2-shaped headers.\n";
  Host& client = host("client");
  Host& r1 = host("replica-1");
  Host& r2 = host("replica-2");
  QueuePair& c_r1 = qp(client);
  QueuePair& r1_c = qp(r1);
  connect(c_r1, client, r1_c, r1);

  // ---- one-sided verbs ----
  steps_.step("RDMA WRITE",
              "The client writes bytes straight into replica-1's memory; replica-1's CPU is not involved.");
  const char* msg = "hello from the client";
  std::strcpy(reinterpret_cast<char*>(client.mem), msg);
  Sge sge = client.mr->sge(0, static_cast<uint32_t>(std::strlen(msg) + 1));
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.flags = kSendSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = r1.va(4096);
  wr.rkey = r1.mr->rkey();
  (void)c_r1.post_send(wr);
  WorkCompletion wc = wait(*client.cq);
  steps_.check(wc.status == WcStatus::kSuccess && std::strcmp(reinterpret_cast<char*>(r1.mem + 4096), msg) == 0,
               fmt::format("replica-1 memory now holds \"{}\"", reinterpret_cast<char*>(r1.mem + 4096)));

  steps_.step("RDMA READ", "The client reads it back; the response packets come from replica-1's NIC alone.");
  sge = client.mr->sge(8192, 64);
  wr.opcode = WrOpcode::kRdmaRead;
  wr.remote_addr = r1.va(4096);
  (void)c_r1.post_send(wr);
  wc = wait(*client.cq);
  steps_.check(wc.status == WcStatus::kSuccess && std::strcmp(reinterpret_cast<char*>(client.mem + 8192), msg) == 0,
               "the READ returned the same bytes");

  steps_.step("ATOMIC CMP_AND_SWP as a lock",
              "Compare-and-swap 0 -> 1 on a lock word at replica-1 acquires it; a second attempt sees 1 and fails.");
  uint64_t* lock = reinterpret_cast<uint64_t*>(r1.mem + 16384);
  *lock = 0;
  sge = client.mr->sge(12288, 8);
  wr.opcode = WrOpcode::kAtomicCmpAndSwp;
  wr.remote_addr = r1.va(16384);
  wr.compare_add = 0;
  wr.swap = 1;
  (void)c_r1.post_send(wr);
  wait(*client.cq);
  uint64_t seen;
  std::memcpy(&seen, client.mem + 12288, 8);
  const bool first = seen == 0;
  (void)c_r1.post_send(wr);
  wait(*client.cq);
  std::memcpy(&seen, client.mem + 12288, 8);
  steps_.check(first && seen == 1 && *lock == 1, "first CAS returned 0 (acquired), second returned 1 (held)");

  steps_.step("ATOMIC FETCH_AND_ADD", "Ten remote increments of a counter; each returns the value before it.");
  uint64_t* counter = reinterpret_cast<uint64_t*>(r1.mem + 16392);
  wr.opcode = WrOpcode::kAtomicFetchAndAdd;
  wr.remote_addr = r1.va(16392);
  wr.compare_add = 1;
  for (int i = 0; i < 10; ++i) {
    (void)c_r1.post_send(wr);
    wait(*client.cq);
  }
  steps_.check(*counter == 10, fmt::format("counter = {}", *counter));

  // ---- two-sided verbs ----
  steps_.step("SEND / RECV with immediate",
              "Replica-1 posts a RECV; the client's SEND consumes it and delivers a 32-bit immediate alongside.");
  Sge rs = r1.mr->sge(20000, 64);
  (void)r1_c.post_recv(RecvWr{77, std::span<const Sge>(&rs, 1)});
  std::strcpy(reinterpret_cast<char*>(client.mem), "a message");
  sge = client.mr->sge(0, 10);
  wr.opcode = WrOpcode::kSendWithImm;
  wr.imm_data = 0xFE44;
  (void)c_r1.post_send(wr);
  wait(*client.cq);
  wc = wait(*r1.cq);
  steps_.check(wc.wr_id == 77 && wc.has_imm && wc.imm_data == 0xFE44 && wc.byte_len == 10 &&
                   std::strcmp(reinterpret_cast<char*>(r1.mem + 20000), "a message") == 0,
               fmt::format("replica-1 got {} bytes, immediate 0x{:X}", wc.byte_len, wc.imm_data));

  steps_.step("RDMA WRITE_WITH_IMM", "A WRITE that also consumes a RECV, so the target learns that data arrived.");
  (void)r1_c.post_recv(RecvWr{78, std::span<const Sge>(&rs, 1)});
  wr.opcode = WrOpcode::kRdmaWriteWithImm;
  wr.remote_addr = r1.va(24576);
  wr.imm_data = 7;
  (void)c_r1.post_send(wr);
  wait(*client.cq);
  wc = wait(*r1.cq);
  steps_.check(wc.opcode == WcOpcode::kRecvRdmaWithImm && wc.imm_data == 7 &&
                   std::strcmp(reinterpret_cast<char*>(r1.mem + 24576), "a message") == 0,
               "data placed by the WRITE, completion on replica-1 with the immediate");

  // ---- cross-channel: the HyperLoop mechanisms ----
  steps_.step(
      "WAIT + SEND_ENABLE: forwarding without the replica's CPU",
      "Replica-1 pre-posts, once: a WRITE toward replica-2 on a *managed* queue (it runs only when enabled), and "
      "on a control queue WAIT(recv CQ reaches 1) then SEND_ENABLE(managed queue, 1). From then on its CPU does "
      "nothing: the client's SEND completes a RECV, the WAIT releases, the ENABLE lets the WRITE go.");
  CqInitAttr count_only;
  count_only.count_only = true;
  extra_cqs_.push_back(r1.nic->create_cq(count_only).value());
  CompletionQueue& r1_recv_count = *extra_cqs_.back();
  QpInitAttr in_attr;
  in_attr.recv_cq = &r1_recv_count;
  QueuePair& r1_in = qp(r1, in_attr);
  QueuePair& c_in = qp(client);
  connect(c_in, client, r1_in, r1);
  QpInitAttr managed;
  managed.managed_send = true;
  QueuePair& r1_fwd = qp(r1, managed);
  QueuePair& r2_in = qp(r2);
  connect(r1_fwd, r1, r2_in, r2);
  QpInitAttr cross_channel;
  cross_channel.cross_channel = true;  // may issue WAIT / ENABLE
  QueuePair& r1_ctrl = qp(r1, cross_channel);
  QueuePair& r1_ctrl_peer = qp(r1);
  connect(r1_ctrl, r1, r1_ctrl_peer, r1);
  std::strcpy(reinterpret_cast<char*>(r1.mem + 32768), "forwarded by replica-1's NIC");
  Sge fwd_sge = r1.mr->sge(32768, 32);
  SendWr fwd;
  fwd.opcode = WrOpcode::kRdmaWrite;
  fwd.flags = kSendSignaled;
  fwd.sg_list = std::span<const Sge>(&fwd_sge, 1);
  fwd.remote_addr = r2.va(0);
  fwd.rkey = r2.mr->rkey();
  (void)r1_fwd.post_send(fwd);
  Sge trigger_buf = r1.mr->sge(40000, 64);
  (void)r1_in.post_recv(RecvWr{1, std::span<const Sge>(&trigger_buf, 1)});
  SendWr chain[2];
  chain[0].opcode = WrOpcode::kWait;
  chain[0].wait_cq = &r1_recv_count;
  chain[0].index = 1;
  chain[1].opcode = WrOpcode::kSendEnable;
  chain[1].enable_qp = &r1_fwd;
  chain[1].index = 1;
  (void)r1_ctrl.post_send(chain);
  // Replica-1's application posts are visible as its queues' producer counts.
  auto r1_posted = [&] { return r1_in.recv_posted() + r1_fwd.send_posted() + r1_ctrl.send_posted() + r1_c.recv_posted(); };
  const uint64_t r1_posts_at_setup = r1_posted();
  const bool quiet_before = r2.mem[0] == 0;
  SendWr trigger;
  trigger.opcode = WrOpcode::kSend;
  trigger.flags = kSendSignaled;
  (void)c_in.post_send(trigger);
  wait(*client.cq);
  wait(*r1.cq);  // the forwarded WRITE's completion (polled only to print it)
  const uint64_t r1_posts_after_setup = r1_posted() - r1_posts_at_setup;
  steps_.check(quiet_before && r1_posts_after_setup == 0 &&
                   std::strcmp(reinterpret_cast<char*>(r2.mem), "forwarded by replica-1's NIC") == 0,
               fmt::format("replica-2 received \"{}\"; replica-1's application posted {} work requests after setup",
                           reinterpret_cast<char*>(r2.mem), r1_posts_after_setup));

  steps_.step(
      "Remote rewrite of a pre-posted WQE",
      "Replica-1 registers its managed send ring as a memory region. The client RDMA-WRITEs a new remote address "
      "and local buffer into the pre-posted WQE, then triggers it. The NIC reads a WQE only when it starts it, so "
      "the WRITE runs with the client's contents -- what HyperLoop uses to replicate arbitrary data.");
  std::span<uint8_t> ring = r1_fwd.send_ring();
  ring_mr_ = r1.nic->reg_mr(*r1.pd, ring.data(), ring.size(), kAccessLocalWrite | kAccessRemoteWrite).value();
  fwd_sge = r1.mr->sge(32768, 8);  // placeholder contents
  (void)r1_fwd.post_send(fwd);     // WQE index 1, not enabled
  (void)r1_in.post_recv(RecvWr{2, std::span<const Sge>(&trigger_buf, 1)});
  chain[0].index = 2;
  chain[1].index = 2;
  (void)r1_ctrl.post_send(chain);
  std::strcpy(reinterpret_cast<char*>(r1.mem + 50000), "bytes the client chose");
  const WqeRemoteSeg remote{r2.va(8192), r2.mr->rkey(), 0};
  const WqeDataSeg data{r1.va(50000), 22, r1.mr->lkey()};
  std::memcpy(client.mem + 60000, &remote, sizeof(remote));
  std::memcpy(client.mem + 60016, &data, sizeof(data));
  const uint64_t slot = reinterpret_cast<uint64_t>(r1_fwd.send_wqe(1));
  Sge rewrite_sges[2] = {client.mr->sge(60000, 16), client.mr->sge(60016, 16)};
  SendWr rewrite[3];
  for (int i = 0; i < 2; ++i) {
    rewrite[i].opcode = WrOpcode::kRdmaWrite;
    rewrite[i].sg_list = std::span<const Sge>(&rewrite_sges[i], 1);
    rewrite[i].remote_addr = slot + (i == 0 ? kWqeRemoteOffset : kWqeDataOffset);
    rewrite[i].rkey = ring_mr_->rkey();
  }
  rewrite[2] = trigger;
  (void)c_in.post_send(rewrite);
  wait(*client.cq);
  wait(*r1.cq);
  steps_.check(std::strcmp(reinterpret_cast<char*>(r2.mem + 8192), "bytes the client chose") == 0,
               fmt::format("replica-2 has \"{}\" at the address the client wrote into replica-1's WQE",
                           reinterpret_cast<char*>(r2.mem + 8192)));

  // ---- latency summary ----
  steps_.step("Latency summary", "20,000 64-byte RDMA WRITEs, one at a time, client -> replica-1, post to completion.");
  const int kIters = 20000;
  Histogram h;
  sge = client.mr->sge(0, 64);
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.remote_addr = r1.va(0);
  const Clock& clock = bench::timing_clock();
  for (int i = 0; i < kIters + 2000; ++i) {
    const uint64_t t0 = clock.now_ns();
    (void)c_r1.post_send(wr);
    wait(*client.cq);
    if (i >= 2000) h.record(clock.now_ns() - t0);
  }
  out_ << fmt::format("    64 B WRITE round trip: p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns\n", h.percentile(0.5),
                      h.percentile(0.99), h.percentile(0.999), h.max());
  out_ << "    (emulated NIC: the engine thread does the NIC's work; `ferry bench nic` compares it with a\n"
       << "     cross-thread ping-pong measured in the same run)\n";
  steps_.check(h.count() == static_cast<uint64_t>(kIters), "all writes completed");

  return steps_.summary();
}

}  // namespace

int run_demo(std::ostream& out, int engine_cpu) {
  Demo demo(out, engine_cpu);
  return demo.run();
}

}  // namespace ferry::apps
