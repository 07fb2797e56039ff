#include "nic_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"
#include "reference.h"
#include "report.h"

namespace ferry::bench {
namespace {

using namespace ferry::nic;

constexpr uint32_t kMaxWindow = 128;
constexpr uint32_t kServerRecvs = 4096;

struct Point {
  std::string op;
  uint32_t size = 0;
  uint32_t outstanding = 0;
  uint64_t iters = 0;
  double seconds = 0;
  Histogram latency;
  double engine_cpu_fraction = 0;
};

struct Aligned {
  explicit Aligned(size_t n) : size(n), ptr(static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) & ~size_t{4095}))) {
    std::memset(ptr, 0, size);
  }
  ~Aligned() { std::free(ptr); }
  size_t size;
  uint8_t* ptr;
};

// The benchmark's two hosts: a client (requester) and a server (responder).
class Testbed {
 public:
  Testbed(const NicBenchOptions& o, const Placement& placement, uint32_t max_size)
      : slot_bytes_(std::max<uint32_t>(max_size, 64)),
        client_mem_(static_cast<size_t>(slot_bytes_) * kMaxWindow),
        server_mem_(static_cast<size_t>(slot_bytes_) * kMaxWindow) {
    EngineOptions eo;
    eo.threaded = !o.inline_engine;
    inline_ = o.inline_engine;
    eo.cpu = placement.engine_pinned ? placement.engine_cpu : -1;
    eo.fifo_priority = placement.engine_fifo;
    engine_ = std::make_unique<Engine>(eo);
    client_ = engine_->add_nic(NicOptions{.name = "client"}).value();
    server_ = engine_->add_nic(NicOptions{.name = "server"}).value();
    cpd_ = client_->alloc_pd().value();
    spd_ = server_->alloc_pd().value();
    cmr_ = client_->reg_mr(*cpd_, client_mem_.ptr, client_mem_.size, kAccessAll).value();
    smr_ = server_->reg_mr(*spd_, server_mem_.ptr, server_mem_.size, kAccessAll).value();
    CqInitAttr cq_attr;
    cq_attr.cqe = 8192;
    ccq_ = client_->create_cq(cq_attr).value();
    scq_ = server_->create_cq(cq_attr).value();
    QpInitAttr qa;
    qa.send_cq = ccq_.get();
    qa.recv_cq = ccq_.get();
    qa.cap.max_send_wr = 2 * kMaxWindow;
    cqp_ = client_->create_qp(*cpd_, qa).value();
    QpInitAttr qb;
    qb.send_cq = scq_.get();
    qb.recv_cq = scq_.get();
    qb.cap.max_recv_wr = kServerRecvs;
    sqp_ = server_->create_qp(*spd_, qb).value();
    ConnectOptions co;
    co.path_mtu = o.mtu;
    const Status s = connect_qps(*cqp_, *client_, *sqp_, *server_, co);
    FERRY_ASSERT(s.ok(), s.to_string());
    for (uint32_t i = 0; i < kServerRecvs; ++i) repost_server_recv(i);
  }
  // Waits until the engine thread has parked (it spins for spin_ns after
  // its last work), so a reference measured now has its CPU to itself.
  void let_engine_sleep() {
    if (inline_) return;
    for (int i = 0; i < 400 && !engine_->sleeping(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(250));
  }

  void repost_server_recv(uint64_t id) {
    const Sge rs = smr_->sge((id % kMaxWindow) * slot_bytes_, slot_bytes_);
    const Status s = sqp_->post_recv(RecvWr{id, std::span<const Sge>(&rs, 1)});
    FERRY_ASSERT(s.ok(), s.to_string());
  }

  // Runs `warmup + iters` operations with `window` outstanding.
  Point run(const std::string& op, uint32_t size, uint32_t window, uint64_t warmup, uint64_t iters) {
    Point p;
    p.op = op;
    p.size = size;
    p.outstanding = window;
    p.iters = iters;
    SendWr wr;
    wr.flags = kSendSignaled;
    wr.rkey = smr_->rkey();
    if (op == "write") wr.opcode = WrOpcode::kRdmaWrite;
    if (op == "read") wr.opcode = WrOpcode::kRdmaRead;
    if (op == "send") wr.opcode = WrOpcode::kSend;
    // Decided once: nothing compares strings inside the timed loop.
    const bool atomic = op == "atomic";
    const bool send = op == "send";
    if (atomic) {
      wr.opcode = WrOpcode::kAtomicFetchAndAdd;
      wr.compare_add = 1;
    }
    const uint64_t total = warmup + iters;
    std::vector<uint64_t> posted_at(window);
    uint64_t posted = 0, done = 0, start_ns = 0, engine_cpu_start = 0;
    const Clock& clock = timing_clock();
    auto begin_measurement = [&] {
      start_ns = clock.now_ns();
      engine_cpu_start = engine_cpu_ns();
    };
    if (warmup == 0) begin_measurement();
    WorkCompletion wcs[32];
    while (done < total) {
      while (posted < total && posted - done < window) {
        const uint32_t slot = static_cast<uint32_t>(posted % window);
        const Sge sge = cmr_->sge(static_cast<size_t>(slot) * slot_bytes_, size);
        wr.wr_id = posted;
        wr.sg_list = std::span<const Sge>(&sge, 1);
        wr.remote_addr = atomic ? smr_->iova() : smr_->iova() + static_cast<uint64_t>(slot) * slot_bytes_;
        posted_at[slot] = clock.now_ns();
        const Status s = cqp_->post_send(wr);
        FERRY_ASSERT(s.ok(), s.to_string());
        ++posted;
      }
      if (inline_) engine_->step();
      auto n = ccq_->poll(wcs);
      FERRY_ASSERT(n.ok(), n.status().to_string());
      const uint64_t now = n.value() != 0 ? clock.now_ns() : 0;
      for (uint32_t i = 0; i < n.value(); ++i) {
        FERRY_ASSERT(wcs[i].status == WcStatus::kSuccess, "benchmark op failed: ", wc_status_name(wcs[i].status));
        if (done >= warmup) p.latency.record(now - posted_at[wcs[i].wr_id % window]);
        ++done;
        if (done == warmup) begin_measurement();
      }
      if (send) {
        // The server application's share: recycle its RECVs (off the
        // measured path of a single op, on this thread).
        auto m = scq_->poll(wcs);
        for (uint32_t i = 0; i < m.value(); ++i) repost_server_recv(wcs[i].wr_id + kServerRecvs);
      }
    }
    p.seconds = static_cast<double>(clock.now_ns() - start_ns) / 1e9;
    const uint64_t engine_cpu_used_ns = engine_cpu_ns() - engine_cpu_start;
    p.engine_cpu_fraction = p.seconds > 0 ? static_cast<double>(engine_cpu_used_ns) / 1e9 / p.seconds : 0;
    return p;
  }

 private:
  // CPU time of the thread doing the NIC's work: the engine thread, or in
  // inline mode this (the client's) thread, which then does both.
  uint64_t engine_cpu_ns() const { return inline_ ? thread_cpu_time_ns() : engine_->stats().thread_cpu_ns; }

  uint32_t slot_bytes_;
  bool inline_ = false;
  Aligned client_mem_, server_mem_;
  std::unique_ptr<Engine> engine_;
  Nic* client_;
  Nic* server_;
  std::unique_ptr<ProtectionDomain> cpd_, spd_;
  std::unique_ptr<MemoryRegion> cmr_, smr_;
  std::unique_ptr<CompletionQueue> ccq_, scq_;
  std::unique_ptr<QueuePair> cqp_, sqp_;
};

}  // namespace

Status run_nic_bench(const NicBenchOptions& o, std::ostream& out, std::ostream& log) {
  for (const std::string& op : o.ops) {
    if (op != "write" && op != "read" && op != "send" && op != "atomic") {
      return invalid_argument("unknown op '" + op + "' (write, read, send, atomic)");
    }
  }
  if (o.sizes.empty()) return invalid_argument("no sizes given");
  for (uint32_t s : o.sizes) {
    if (s == 0 || s > (1u << 20)) return invalid_argument("size " + std::to_string(s) + " outside 1..1048576");
  }
  for (uint32_t w : o.outstanding) {
    if (w == 0 || w > kMaxWindow) return invalid_argument("outstanding must be 1.." + std::to_string(kMaxWindow));
  }
  if (o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096) {
    return invalid_argument("mtu must be 256, 512, 1024, 2048 or 4096");
  }

  Placement placement;
  placement.client_cpu = usable_cpu(o.client_cpu);
  placement.engine_cpu = o.inline_engine ? placement.client_cpu : usable_cpu(o.engine_cpu);
  placement.engine_pinned = placement.engine_cpu >= 0;
  placement.engine_threads = o.inline_engine ? 0 : 1;
  if (o.inline_engine) placement.load = "none (engine inline on the client thread)";
  // The ping-pong partner: the engine's CPU, or in inline mode the CPU it would have had.
  const int reference_cpu = usable_cpu(o.engine_cpu);
  placement.engine_fifo = o.engine_fifo;
  log << "ferry bench nic: " << placement_text(placement) << "; timing clock: " << timing_clock_name() << "\n";
  if (placement.engine_cpu >= 0 && placement.engine_cpu == placement.client_cpu) {
    log << "warning: client and engine share CPU " << placement.engine_cpu << "; latency will include scheduling\n";
  }

  if (placement.client_cpu >= 0) (void)pin_current_thread(placement.client_cpu);
  const uint32_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
  Testbed bed(o, placement, max_size);

  if (!o.json) {
    out << placement_text(placement) << "\n";
    out << "Latency = post to completion (a full round trip); rate with `outstanding` in flight.\n"
        << "ref_p50 = cross-thread ping-pong RTT and ref_Gbps = memcpy of the same working set, both measured\n"
        << "right before each point on the same CPUs. eng_cpu = the engine thread's CPU time over the run's\n"
        << "wall time" << (o.inline_engine ? " (inline: the client thread's, which does the engine's work too)" : "")
        << ".\n";
    out << fmt::format("{:<7}{:>7}{:>5}{:>9}{:>9}{:>9}{:>9}{:>10}{:>10}{:>8}{:>9}{:>9}{:>8}{:>7}{:>8}\n", "op", "size",
                       "out", "iters", "p50_ns", "p99_ns", "p999_ns", "max_ns", "Mops", "Gbps", "ref_p50", "ref_Gbps",
                       "p50/ref", "bw/ref", "eng_cpu");
  }
  for (const std::string& op : o.ops) {
    std::vector<uint32_t> sizes = op == "atomic" ? std::vector<uint32_t>{8} : o.sizes;
    for (uint32_t size : sizes) {
      for (uint32_t window : o.outstanding) {
        uint64_t iters = o.iters;
        if (iters == 0) {
          // Size the run by time: a short probe measures the op rate.
          const Point probe = bed.run(op, size, window, 100, 400);
          const double per_op = probe.seconds / 400.0;
          iters = static_cast<uint64_t>(std::clamp(o.seconds_per_point / std::max(per_op, 1e-9), 2000.0, 2e6));
        }
        // The references are measured right before each point, with the engine
        // parked, so they see the same vCPU placement as the point itself.
        bed.let_engine_sleep();
        // pingpong_rtt leaves this thread pinned to the client CPU.
        const Histogram pingpong = pingpong_rtt(placement.client_cpu, reference_cpu, 20'000);
        const double ref_gbps = memcpy_bytes_per_second(size, window, 0.02) * 8 / 1e9;
        const uint64_t ref_p50 = pingpong.percentile(0.5);
        log << fmt::format("  {} {} B x{} ({} ops; ping-pong p50 {} ns) ...\n", op, size, window, iters, ref_p50);
        const Point p = bed.run(op, size, window, std::min<uint64_t>(iters / 10, 5000), iters);
        const double mops = static_cast<double>(p.iters) / p.seconds / 1e6;
        const double gbps = static_cast<double>(p.iters) * size * 8 / p.seconds / 1e9;
        const double p50_over_ref =
            static_cast<double>(p.latency.percentile(0.5)) / static_cast<double>(std::max<uint64_t>(ref_p50, 1));
        const double gbps_over_ref = ref_gbps > 0 ? gbps / ref_gbps : 0.0;
        if (o.json) {
          nlohmann::json j;
          j["op"] = op;
          j["size"] = size;
          j["iters"] = p.iters;
          j["outstanding"] = window;
          add_percentiles_ns(j, p.latency);
          j["mops"] = mops;
          j["gbps"] = gbps;
          j["reference"] = {{"p50_ns", ref_p50}, {"gbps", ref_gbps}};
          j["p50_over_ref"] = p50_over_ref;
          j["gbps_over_ref"] = gbps_over_ref;
          j["engine"] = placement_json(placement);
          j["engine"]["mode"] = o.inline_engine ? "inline" : "thread";
          j["engine"]["cpu_busy_fraction"] = p.engine_cpu_fraction;
          j["client_cpu"] = placement.client_cpu;
          j["load"] = placement.load;
          add_provenance(j);
          out << j.dump() << std::endl;
        } else {
          out << fmt::format(
              "{:<7}{:>7}{:>5}{:>9}{:>9}{:>9}{:>9}{:>10}{:>10.3f}{:>8.2f}{:>9}{:>9.1f}{:>8.2f}{:>7.2f}{:>8.2f}\n", op,
              size, window, p.iters, percentile_text(p.latency, 0.5, 1, 0), percentile_text(p.latency, 0.99, 1, 0),
              percentile_text(p.latency, 0.999, 1, 0),
              p.latency.max(), mops, gbps, ref_p50, ref_gbps, p50_over_ref, gbps_over_ref, p.engine_cpu_fraction);
          out.flush();
        }
      }
    }
  }
  return ok_status();
}

}  // namespace ferry::bench
