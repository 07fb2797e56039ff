#include "nic_qp_scale.h"

#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine_cost.h"
#include "ferry/common/clock.h"
#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"
#include "nic_bench_point.h"
#include "report.h"

namespace ferry::bench {
namespace {

using namespace ferry::nic;

constexpr uint32_t kMaxPairs = 65535;   // a NIC's QP table holds at most 65536 (one index unused)
constexpr uint32_t kBufferSlots = 128;  // messages land in (QP index % this) * size: bounded memory
constexpr uint64_t kStuckNs = 10'000'000'000ULL;

// Memory in use by this process, sampled before and after the pairs exist.
struct MemorySample {
  uint64_t allocator_bytes = 0;  // glibc: bytes in allocated chunks, every arena, plus mmapped chunks
  uint64_t rss_bytes = 0;        // resident set
};

MemorySample sample_memory() {
  MemorySample m;
  const struct mallinfo2 mi = mallinfo2();
  m.allocator_bytes = mi.uordblks + mi.hblkhd;
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages)
    m.rss_bytes = resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return m;
}

double per_pair(uint64_t before, uint64_t after, uint32_t pairs) {
  return (static_cast<double>(after) - static_cast<double>(before)) / pairs;
}

// What one (N, op, size) point measured.
struct ScaleResult {
  double alloc_bytes_per_pair = 0;
  double rss_bytes_per_pair = 0;
  double create_us_per_pair = 0;
  double connect_us_per_pair = 0;
  Histogram latency;
  uint64_t messages = 0;
  double seconds = 0;
  EngineWork engine;  // over the measured window
  uint64_t engine_idle_ns = 0;  // the engine thread's idle passes and sleeps over the window
  uint64_t client_idle_ns = 0;  // this thread's polls that found nothing over the window (sampled)
};

// The N pairs and everything they run on. Destroyed QPs first, then the
// CQs, MRs, PDs and the engine (the members' reverse order).
class ScaleBed {
 public:
  ScaleBed(const NicBenchOptions& o, uint32_t pairs, uint32_t size)
      : pairs_(pairs),
        size_(std::max<uint32_t>(size, 8)),
        client_mem_(size_t{size_} * kBufferSlots),
        server_mem_(size_t{size_} * kBufferSlots) {
    EngineOptions eo;
    eo.threaded = true;
    eo.cpu = usable_cpu(o.engine_cpu);
    eo.fifo_priority = o.engine_fifo;
    eo.account_idle = true;  // the engine thread's busy fraction (each point's regime)
    engine_ = std::make_unique<Engine>(eo);
    NicOptions no;
    no.max_qps = pairs + 1;
    no.name = "client";
    client_ = engine_->add_nic(no).value();
    no.name = "server";
    server_ = engine_->add_nic(no).value();
    cpd_ = client_->alloc_pd().value();
    spd_ = server_->alloc_pd().value();
    cmr_ = client_->reg_mr(*cpd_, client_mem_.ptr, client_mem_.size, kAccessAll).value();
    smr_ = server_->reg_mr(*spd_, server_mem_.ptr, server_mem_.size, kAccessAll).value();
    CqInitAttr ca;
    ca.cqe = 2 * pairs + 64;  // every QP's send completion, plus the server's receives
    ccq_ = client_->create_cq(ca).value();
    scq_ = server_->create_cq(ca).value();
  }
  ~ScaleBed() {
    cqps_.clear();
    sqps_.clear();
  }

  // Creates and connects the pairs (QP depth `depth`), timing both phases.
  Status open_pairs(const NicBenchOptions& o, uint32_t depth, ScaleResult* r) {
    cqps_.reserve(pairs_);
    sqps_.reserve(pairs_);
    const MemorySample before = sample_memory();
    const auto t0 = std::chrono::steady_clock::now();
    QpInitAttr qa;
    qa.send_cq = ccq_.get();
    qa.recv_cq = ccq_.get();
    qa.cap.max_send_wr = depth;
    qa.cap.max_recv_wr = depth;
    QpInitAttr qb = qa;
    qb.send_cq = scq_.get();
    qb.recv_cq = scq_.get();
    for (uint32_t i = 0; i < pairs_; ++i) {
      FERRY_ASSIGN_OR_RETURN(auto c, client_->create_qp(*cpd_, qa));
      FERRY_ASSIGN_OR_RETURN(auto s, server_->create_qp(*spd_, qb));
      cqps_.push_back(std::move(c));
      sqps_.push_back(std::move(s));
    }
    const auto t1 = std::chrono::steady_clock::now();
    ConnectOptions co;
    co.path_mtu = o.mtu;
    for (uint32_t i = 0; i < pairs_; ++i)
      FERRY_RETURN_IF_ERROR(connect_qps(*cqps_[i], *client_, *sqps_[i], *server_, co));
    const auto t2 = std::chrono::steady_clock::now();
    const MemorySample after = sample_memory();
    r->alloc_bytes_per_pair = per_pair(before.allocator_bytes, after.allocator_bytes, pairs_);
    r->rss_bytes_per_pair = per_pair(before.rss_bytes, after.rss_bytes, pairs_);
    r->create_us_per_pair = std::chrono::duration<double, std::micro>(t1 - t0).count() / pairs_;
    r->connect_us_per_pair = std::chrono::duration<double, std::micro>(t2 - t1).count() / pairs_;
    return ok_status();
  }

  EngineWork engine_work() const {
    const NicCounters c = client_->counters(), s = server_->counters();
    return EngineWork{engine_->stats().thread_cpu_ns, c.tx_packets + s.tx_packets, c.rx_packets + s.rx_packets};
  }

  // One message outstanding on each QP, round-robin as they complete:
  // `warmup` completions unmeasured, then a window that ends after `iters`
  // completions or `seconds`, whichever first, but not before
  // `min_messages`; then a drain (nothing reposted, unmeasured).
  Status run_messages(const std::string& op, uint64_t warmup, uint64_t iters, double seconds, uint64_t min_messages,
                      ScaleResult* r) {
    SendWr wr;
    wr.flags = kSendSignaled;
    wr.rkey = smr_->rkey();
    const bool send = op == "send";
    if (op == "write") wr.opcode = WrOpcode::kRdmaWrite;
    if (op == "read") wr.opcode = WrOpcode::kRdmaRead;
    if (send) wr.opcode = WrOpcode::kSend;
    if (op == "atomic") {
      wr.opcode = WrOpcode::kAtomicFetchAndAdd;
      wr.compare_add = 1;
    }
    const uint32_t size = op == "atomic" ? 8 : size_;
    auto recv = [&](uint32_t q) {
      const Sge rs = smr_->sge(size_t{q % kBufferSlots} * size_, size_);
      return sqps_[q]->post_recv(RecvWr{q, std::span<const Sge>(&rs, 1)});
    };
    if (send) {
      for (uint32_t q = 0; q < pairs_; ++q) {
        FERRY_RETURN_IF_ERROR(recv(q));
        FERRY_RETURN_IF_ERROR(recv(q));  // one spare: a repost that lags the next SEND costs no RNR NAK
      }
    }
    const Clock& clock = timing_clock();
    std::vector<uint64_t> posted_at(pairs_);
    auto post = [&](uint32_t q, uint64_t now) {
      const uint64_t offset = size_t{q % kBufferSlots} * size_;
      const Sge sge = cmr_->sge(offset, size);
      wr.wr_id = q;
      wr.sg_list = std::span<const Sge>(&sge, 1);
      wr.remote_addr = op == "atomic" ? smr_->iova() + (q % kBufferSlots) * 8 : smr_->iova() + offset;
      posted_at[q] = now;
      return cqps_[q]->post_send(wr);
    };
    for (uint32_t q = 0; q < pairs_; ++q) FERRY_RETURN_IF_ERROR(post(q, clock.now_ns()));

    WorkCompletion wcs[32];
    uint64_t completed = 0, outstanding = pairs_;
    bool measuring = false, draining = false;
    uint64_t window_start_ns = 0, window_end_ns = 0, last_progress_ns = clock.now_ns();
    const uint64_t window_ns = static_cast<uint64_t>(seconds * 1e9);
    EngineWork at_open;
    uint64_t engine_idle_open = 0, client_idle_open = 0;
    IdleSampler idle;  // this thread's polls that found nothing
    while (outstanding > 0) {
      const bool timed = idle.begin();
      if (send) {
        FERRY_ASSIGN_OR_RETURN(const uint32_t m, scq_->poll(wcs));
        for (uint32_t i = 0; i < m; ++i) {
          if (wcs[i].status != WcStatus::kSuccess) return internal_error("server receive failed");
          FERRY_RETURN_IF_ERROR(recv(static_cast<uint32_t>(wcs[i].wr_id)));
        }
      }
      FERRY_ASSIGN_OR_RETURN(const uint32_t n, ccq_->poll(wcs));
      idle.end(timed, n != 0);
      if (n == 0) {
        if (clock.now_ns() - last_progress_ns > kStuckNs) {
          return timed_out(fmt::format("{} QP pairs: no completion for 10 s ({} outstanding)", pairs_, outstanding));
        }
        continue;
      }
      const uint64_t now = clock.now_ns();
      last_progress_ns = now;
      for (uint32_t i = 0; i < n; ++i) {
        if (wcs[i].status != WcStatus::kSuccess) {
          return internal_error(fmt::format("{} QP pairs: {} failed: {}", pairs_, op, wc_status_name(wcs[i].status)));
        }
        const uint32_t q = static_cast<uint32_t>(wcs[i].wr_id);
        --outstanding;
        ++completed;
        if (measuring) {
          r->latency.record(now - posted_at[q]);
          ++r->messages;
        }
        if (!draining) {
          FERRY_RETURN_IF_ERROR(post(q, now));
          ++outstanding;
        }
      }
      if (!measuring && !draining && completed >= warmup) {
        measuring = true;
        at_open = engine_work();
        engine_idle_open = engine_->stats().idle_pass_ns;
        client_idle_open = idle.idle_ns();
        window_start_ns = clock.now_ns();
      } else if (measuring && r->messages >= min_messages &&
                 (r->messages >= iters || now - window_start_ns >= window_ns)) {
        measuring = false;
        draining = true;
        window_end_ns = clock.now_ns();
        r->engine = engine_work_delta(at_open, engine_work());
        r->engine_idle_ns = engine_->stats().idle_pass_ns - engine_idle_open;
        r->client_idle_ns = idle.idle_ns() - client_idle_open;
      }
    }
    if (window_end_ns == 0) return internal_error("the measured window never closed");
    r->seconds = static_cast<double>(window_end_ns - window_start_ns) / 1e9;
    return ok_status();
  }

 private:
  uint32_t pairs_;
  uint32_t size_;
  nic_point::Aligned client_mem_, server_mem_;
  std::unique_ptr<Engine> engine_;
  Nic* client_ = nullptr;
  Nic* server_ = nullptr;
  std::unique_ptr<ProtectionDomain> cpd_, spd_;
  std::unique_ptr<MemoryRegion> cmr_, smr_;
  std::unique_ptr<CompletionQueue> ccq_, scq_;
  std::vector<std::unique_ptr<QueuePair>> cqps_, sqps_;
};

}  // namespace

Status run_nic_qp_scale(const NicBenchOptions& o, std::ostream& out, std::ostream& log) {
  for (uint32_t n : o.qp_pairs) {
    if (n == 0 || n > kMaxPairs) return invalid_argument(fmt::format("--qps: {} outside 1..{}", n, kMaxPairs));
  }
  if (o.qp_depth == 0 || o.qp_depth > 65536) return invalid_argument("--qp-depth must be in 1..65536");
  if (o.inline_engine) return invalid_argument("--qps runs a threaded engine: not with --inline");
  Placement placement;
  placement.client_cpu = usable_cpu(o.client_cpu);
  placement.engine_cpu = usable_cpu(o.engine_cpu);
  placement.engine_pinned = placement.engine_cpu >= 0;
  placement.engine_fifo = o.engine_fifo;
  log << "ferry bench nic --qps: " << placement_text(placement) << "; timing clock: " << timing_clock_name() << "\n";
  if (placement.client_cpu >= 0) (void)pin_current_thread(placement.client_cpu);
  const double ghz = tsc_ghz();
  if (!o.json) {
    out << placement_text(placement) << "\n";
    out << "Per QP pair: alloc_KiB = allocator bytes in use (mallinfo2) and rss_KiB = resident set, after - before\n"
        << "over N; create_us / conn_us = wall time to create both QPs / to connect them, over N. Messages: one\n"
        << "outstanding on each of the N QPs (each reposts when it completes); latency = post to completion;\n"
        << "us_msg = wall time per message (1 / rate). ns_pkt, cyc_pkt = the engine thread's CPU time per packet\n"
        << fmt::format("(cycles at the TSC rate, {:.3f} GHz; 0 = unknown). QP depth {} (send and receive).\n", ghz,
                       o.qp_depth);
    out << fmt::format("{:>6}{:>7}{:>6}{:>10}{:>9}{:>10}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>10}{:>8}{:>8}{:>8}{:>8}  {}\n",
                       "pairs", "op", "size", "alloc_KiB", "rss_KiB", "create_us", "conn_us", "msgs", "p50_ns",
                       "p95_ns", "p99_ns", "p999_ns", "max_ns", "Mops", "us_msg", "ns_pkt", "cyc_pkt", "bound");
  }
  for (uint32_t pairs : o.qp_pairs) {
    for (const std::string& op : o.ops) {
      const std::vector<uint32_t> sizes = op == "atomic" ? std::vector<uint32_t>{8} : o.sizes;
      for (uint32_t size : sizes) {
        ScaleResult r;
        ScaleBed bed(o, pairs, size);
        log << fmt::format("  {} QP pairs, {} {} B: opening ...\n", pairs, op, size);
        FERRY_RETURN_IF_ERROR(bed.open_pairs(o, o.qp_depth, &r));
        // Every QP at least twice before the window; the window is sized by
        // --iters or --seconds-per-point, and holds every QP at least 5 times.
        const uint64_t warmup = std::max<uint64_t>(2ull * pairs, 5000);
        const uint64_t iters = o.iters != 0 ? o.iters : UINT64_MAX;
        const double seconds = std::max(o.seconds_per_point, 0.01);
        FERRY_RETURN_IF_ERROR(bed.run_messages(op, warmup, iters, seconds, 5ull * pairs, &r));
        const double mops = r.seconds > 0 ? static_cast<double>(r.messages) / r.seconds / 1e6 : 0;
        const double us_per_message = r.messages > 0 ? r.seconds * 1e6 / static_cast<double>(r.messages) : 0;
        // In process one engine does both ends of every packet: count each once.
        const PacketCost cost = packet_cost(r.engine.cpu_ns, r.engine.rx_packets);
        const double engine_busy = r.seconds > 0 ? static_cast<double>(r.engine.cpu_ns) / 1e9 / r.seconds : 0;
        // What bounded the point: the same rule as the other nic points (nic_bench_point.h).
        nic_point::Point regime_point;
        regime_point.seconds = r.seconds;
        regime_point.engine_idle_ns = r.engine_idle_ns;
        regime_point.client_idle_ns = r.client_idle_ns;
        if (o.json) {
          nlohmann::json j;
          j["point"] = "qp_scale";
          j["qp_pairs"] = pairs;
          j["qp_depth"] = o.qp_depth;
          j["op"] = op;
          j["size"] = op == "atomic" ? 8 : size;
          j["outstanding_per_qp"] = 1;
          j["memory_per_pair"] = {{"allocator_bytes", r.alloc_bytes_per_pair},
                                  {"rss_bytes", r.rss_bytes_per_pair},
                                  {"allocator", "glibc mallinfo2 uordblks + hblkhd, all arenas"}};
          j["setup_us_per_pair"] = {{"create", r.create_us_per_pair},
                                    {"connect", r.connect_us_per_pair},
                                    {"total", r.create_us_per_pair + r.connect_us_per_pair}};
          j["iters"] = r.messages;
          add_percentiles_ns(j, r.latency);
          j["mops"] = mops;
          j["us_per_message"] = us_per_message;
          j["engine_packets"] = nic_point::engine_packets_json(cost, nic_point::kEngineThreadCpu, r.engine);
          nic_point::add_engine_fields(j, placement, "thread", engine_busy);
          j["regime"] = nic_point::regime_json(regime_point);
          j["bound_by"] = j["regime"]["bound_by"];
          out << j.dump() << std::endl;
        } else {
          out << fmt::format(
              "{:>6}{:>7}{:>6}{:>10.1f}{:>9.1f}{:>10.1f}{:>9.1f}{:>9}{:>9}{:>9}{:>9}{:>9}{:>10}{:>8.3f}{:>8.3f}{:>8.0f}"
              "{:>8.0f}  {}\n",
              pairs, op, op == "atomic" ? 8 : size, r.alloc_bytes_per_pair / 1024, r.rss_bytes_per_pair / 1024,
              r.create_us_per_pair, r.connect_us_per_pair, r.messages, percentile_text(r.latency, 0.5, 1, 0),
              percentile_text(r.latency, 0.95, 1, 0), percentile_text(r.latency, 0.99, 1, 0),
              percentile_text(r.latency, 0.999, 1, 0), r.latency.max(), mops, us_per_message, cost.ns_per_packet,
              cost.cycles_per_packet, nic_point::point_bound_by(regime_point));
          out.flush();
        }
      }
    }
  }
  return ok_status();
}

}  // namespace ferry::bench
