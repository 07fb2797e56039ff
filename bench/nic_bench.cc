#include "nic_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine_cost.h"
#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"
#include "nic_bench_point.h"
#include "nic_qp_scale.h"
#include "reference.h"
#include "regime.h"
#include "report.h"
#include "verbs_load.h"

namespace ferry::bench {
namespace nic_point {

Status repost_server_recv(const Link& l, uint64_t id) {
  const Sge rs = l.smr->sge((id % kMaxWindow) * l.slot_bytes, l.slot_bytes);
  return l.sqp->post_recv(RecvWr{id, std::span<const Sge>(&rs, 1)});
}

// A point's operations on `l` (verbs_load.h's Side): op's work requests,
// each on its slot of the window; for SENDs the server application's share,
// recycling its RECVs (off the measured path of a single op, on this thread).
class LinkSide {
 public:
  LinkSide(const Link& l, const std::string& op, uint32_t size, uint32_t window, Point& p)
      : l_(l), size_(size), window_(window), p_(p), atomic_(op == "atomic"), send_(op == "send") {
    // Decided once: nothing compares strings inside the timed loop.
    wr_.flags = kSendSignaled;
    wr_.rkey = l.smr->rkey();
    if (op == "write") wr_.opcode = WrOpcode::kRdmaWrite;
    if (op == "read") wr_.opcode = WrOpcode::kRdmaRead;
    if (op == "send") wr_.opcode = WrOpcode::kSend;
    if (atomic_) {
      wr_.opcode = WrOpcode::kAtomicFetchAndAdd;
      wr_.compare_add = 1;
    }
  }

  Status post(uint64_t i) {
    const uint32_t slot = static_cast<uint32_t>(i % window_);
    const Sge sge = l_.cmr->sge(static_cast<size_t>(slot) * l_.slot_bytes, size_);
    wr_.wr_id = i;
    wr_.sg_list = std::span<const Sge>(&sge, 1);
    wr_.remote_addr = atomic_ ? l_.smr->iova() : l_.smr->iova() + static_cast<uint64_t>(slot) * l_.slot_bytes;
    return l_.cqp->post_send(wr_);
  }

  Result<uint32_t> poll(std::span<WorkCompletion> wcs) {
    const bool timed = idle_.begin();
    auto n = poll_once(wcs);
    idle_.end(timed, !n.ok() || n.value() != 0);
    return n;
  }

  Result<uint32_t> poll_once(std::span<WorkCompletion> wcs) {
    if (send_) FERRY_RETURN_IF_ERROR(recycle_server_recvs(wcs));
    if (l_.inline_engine != nullptr) l_.inline_engine->step();
    auto n = l_.ccq->poll(wcs);
    if (n.ok() && n.value() == 0 && l_.channel != nullptr) {
      // Blocking: arm, look once more (a completion may have slipped in
      // before the arm), then sleep until the NIC signals the channel.
      const Status armed = l_.ccq->req_notify(false);
      if (!armed.ok()) return Status(armed.code(), "req_notify: " + armed.to_string());
      n = l_.ccq->poll(wcs);
      if (n.ok() && n.value() == 0) {
        auto ev = l_.channel->get_event(1000);
        if (!ev.ok() && ev.status().code() != Code::kTimedOut) {
          return Status(ev.status().code(), "get_event: " + ev.status().to_string());
        }
        n = l_.ccq->poll(wcs);
      }
    }
    return n;
  }

  std::optional<uint64_t> ends(const WorkCompletion& wc) const { return wc.wr_id; }

  void on_window_open(uint64_t) {
    client_idle_start_ = idle_.idle_ns();
    if (l_.engine_idle_ns) engine_idle_start_ = l_.engine_idle_ns();
    engine_cpu_start_ = l_.engine_cpu_ns();
    if (l_.engine_work) work_start_ = l_.engine_work();
  }
  void on_window_close(uint64_t) {
    p_.client_idle_ns = idle_.idle_ns() - client_idle_start_;
    if (l_.engine_idle_ns) p_.engine_idle_ns = l_.engine_idle_ns() - engine_idle_start_;
    p_.engine_cpu_ns = l_.engine_cpu_ns() - engine_cpu_start_;
    if (!l_.engine_work) return;
    const std::vector<EngineWork> end = l_.engine_work();
    p_.engines.clear();
    for (size_t i = 0; i < end.size() && i < work_start_.size(); ++i) {
      p_.engines.push_back(engine_work_delta(work_start_[i], end[i]));
    }
  }

 private:
  Status recycle_server_recvs(std::span<WorkCompletion> wcs) {
    auto m = l_.scq->poll(wcs);
    if (!m.ok()) return Status(m.status().code(), "server poll: " + m.status().to_string());
    for (uint32_t i = 0; i < m.value(); ++i) FERRY_RETURN_IF_ERROR(repost_server_recv(l_, wcs[i].wr_id + kServerRecvs));
    return ok_status();
  }

  const Link& l_;
  const uint32_t size_;
  const uint32_t window_;
  Point& p_;
  const bool atomic_;
  const bool send_;
  SendWr wr_;
  uint64_t engine_cpu_start_ = 0;
  std::vector<EngineWork> work_start_;
  IdleSampler idle_;  // this (the measuring) thread's polls that found nothing
  uint64_t client_idle_start_ = 0;
  uint64_t engine_idle_start_ = 0;
};

// Runs `warmup + iters` operations with `window` outstanding on `l`.
Result<Point> run_point(const Link& l, const std::string& op, uint32_t size, uint32_t window, uint64_t warmup,
                        uint64_t iters) {
  Point p;
  p.op = op;
  p.size = size;
  p.outstanding = window;
  p.iters = iters;
  LinkSide side(l, op, size, window, p);
  Recorder rec;
  VerbsWindow<LinkSide> target(side, window, rec, timing_clock(), fmt::format("{} {} B", op, size));
  FERRY_ASSIGN_OR_RETURN(const LoopOutcome out,
                         run_closed(target, rec, LoopPlan::counted(warmup, iters), timing_clock()));
  p.latency = rec.all();
  p.seconds = out.seconds();
  p.engine_cpu_fraction = p.seconds > 0 ? static_cast<double>(p.engine_cpu_ns) / 1e9 / p.seconds : 0;
  return p;
}

// Iterations for a point: --iters, or sized by time from a short probe.
Result<uint64_t> size_point(const NicBenchOptions& o, const Link& l, const std::string& op, uint32_t size,
                            uint32_t window) {
  if (o.iters != 0) return o.iters;
  FERRY_ASSIGN_OR_RETURN(const Point probe, run_point(l, op, size, window, 100, 400));
  const double per_op = probe.seconds / 400.0;
  return static_cast<uint64_t>(std::clamp(o.seconds_per_point / std::max(per_op, 1e-9), 2000.0, 2e6));
}

Testbed::Testbed(const NicBenchOptions& o, const Placement& placement, uint32_t max_size)
    : slot_bytes_(std::max<uint32_t>(max_size, 64)),
      client_mem_(static_cast<size_t>(slot_bytes_) * kMaxWindow),
      server_mem_(static_cast<size_t>(slot_bytes_) * kMaxWindow) {
  EngineOptions eo;
  eo.threaded = !o.inline_engine;
  inline_ = o.inline_engine;
  eo.cpu = placement.engine_pinned ? placement.engine_cpu : -1;
  eo.fifo_priority = placement.engine_fifo;
  eo.account_idle = !o.inline_engine;  // the engine thread's busy fraction (inline: the client's sampler covers it)
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
  link_ = Link{cqp_.get(),  sqp_.get(),
               ccq_.get(),  scq_.get(),
               cmr_.get(),  smr_.get(),
               slot_bytes_, inline_ ? engine_.get() : nullptr,
               nullptr,     [this] { return engine_cpu_ns(); },
               {},          {}};
  if (!inline_) link_.engine_idle_ns = [this] { return engine_->stats().idle_pass_ns; };
  link_.engine_work = [this] {
    const NicCounters c = client_->counters(), s = server_->counters();
    return std::vector<EngineWork>{{engine_cpu_ns(), c.tx_packets + s.tx_packets, c.rx_packets + s.rx_packets}};
  };
  for (uint32_t i = 0; i < kServerRecvs; ++i) {
    const Status r = repost_server_recv(link_, i);
    FERRY_ASSERT(r.ok(), r.to_string());
  }
}

nlohmann::json percentiles_json(const Histogram& h) {
  nlohmann::json j;
  add_percentiles_ns(j, h);
  return j;
}

double ratio(uint64_t num, uint64_t den) {
  return static_cast<double>(num) / static_cast<double>(std::max<uint64_t>(den, 1));
}

// In process one engine sends and receives every packet: its packets are
// those its NICs received, each counted once (engine_cost.h).
PacketCost inproc_packet_cost(const Point& p) {
  return p.engines.empty() ? PacketCost{} : packet_cost(p.engines[0].cpu_ns, p.engines[0].rx_packets);
}

nlohmann::json engine_packets_json(const PacketCost& c, const std::string& measured, const EngineWork& w) {
  nlohmann::json j = packet_cost_json(c, measured);
  j["tx_packets"] = w.tx_packets;
  j["rx_packets"] = w.rx_packets;
  return j;
}

void add_engine_fields(nlohmann::json& j, const Placement& placement, const std::string& mode, double cpu_busy) {
  j["engine"] = placement_json(placement);
  j["engine"]["mode"] = mode;
  j["engine"]["cpu_busy_fraction"] = cpu_busy;
  j["client_cpu"] = placement.client_cpu;
  j["load"] = placement.load;
  add_provenance(j);
}

// The fields every row has, whatever the transport: the point, its latency
// distribution and rate, and its cross-thread ping-pong / memcpy reference.
nlohmann::json row_json(const std::string& op, uint32_t size, uint32_t window, const Point& p, double mops, double gbps,
                        uint64_t ref_p50, double ref_gbps) {
  nlohmann::json j;
  j["op"] = op;
  j["size"] = size;
  j["iters"] = p.iters;
  j["outstanding"] = window;
  add_percentiles_ns(j, p.latency);
  j["mops"] = mops;
  j["gbps"] = gbps;
  j["reference"] = {{"p50_ns", ref_p50}, {"gbps", ref_gbps}};
  j["p50_over_ref"] = ratio(p.latency.percentile(0.5), ref_p50);
  j["gbps_over_ref"] = ref_gbps > 0 ? gbps / ref_gbps : 0.0;
  j["regime"] = regime_json(p);
  j["bound_by"] = j["regime"]["bound_by"];
  return j;
}

std::string point_bound_by(const Point& p) {
  const double window_ns = p.seconds * 1e9;
  return bound_by({{"client", busy_fraction(p.client_idle_ns, window_ns)},
                   {"nic-engine", p.engine_idle_ns ? busy_fraction(*p.engine_idle_ns, window_ns) : kNotMeasured}},
                  /*closed_loop=*/true);
}

nlohmann::json regime_json(const Point& p) {
  const double window_ns = p.seconds * 1e9;
  nlohmann::json g;
  g["client_busy_fraction"] = busy_fraction(p.client_idle_ns, window_ns);
  g["engine_busy_fraction"] =
      p.engine_idle_ns ? nlohmann::json(busy_fraction(*p.engine_idle_ns, window_ns)) : nlohmann::json(nullptr);
  g["bound_by"] = point_bound_by(p);
  g["how"] =
      "busy = 1 - idle over the window: the measuring thread's polls that found nothing (every 16th timed), the "
      "engine thread's idle passes and sleeps (EngineOptions::account_idle; null where the NICs run in other "
      "processes); at 0.9 or more a thread bounds the point, else the window's round trips do (other)";
  return g;
}

}  // namespace nic_point

using namespace nic_point;

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
  if (!o.qp_pairs.empty()) {
    if (o.transport != "inproc") return invalid_argument("--qps runs in process: not with --transport udp");
    return run_nic_qp_scale(o, out, log);
  }
  if (o.transport == "udp") return run_udp_transport(o, out, log);
  if (o.transport != "inproc") return invalid_argument("unknown transport '" + o.transport + "' (inproc, udp)");

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
        << ".\nns_pkt, cyc_pkt = that thread's CPU time per packet (each packet counted once: one engine sends and\n"
        << fmt::format("receives it), in ns and in cycles at the TSC rate ({:.3f} GHz; 0 = unknown).\n", tsc_ghz())
        << "bound = the thread at 0.9 busy or more (client: posts and polls; nic-engine: runs both NICs),\n"
        << "else other (the round trips in flight set the pace).\n";
    out << fmt::format("{:<7}{:>7}{:>5}{:>9}{:>9}{:>9}{:>9}{:>10}{:>10}{:>8}{:>9}{:>9}{:>8}{:>7}{:>8}{:>8}{:>8}  {}\n",
                       "op", "size", "out", "iters", "p50_ns", "p99_ns", "p999_ns", "max_ns", "Mops", "Gbps", "ref_p50",
                       "ref_Gbps", "p50/ref", "bw/ref", "eng_cpu", "ns_pkt", "cyc_pkt", "bound");
  }
  for (const std::string& op : o.ops) {
    std::vector<uint32_t> sizes = op == "atomic" ? std::vector<uint32_t>{8} : o.sizes;
    for (uint32_t size : sizes) {
      for (uint32_t window : o.outstanding) {
        FERRY_ASSIGN_OR_RETURN(const uint64_t iters, size_point(o, bed.link(), op, size, window));
        // The references are measured right before each point, with the engine
        // parked, so they see the same vCPU placement as the point itself.
        bed.let_engine_sleep();
        // pingpong_rtt leaves this thread pinned to the client CPU.
        const Histogram pingpong = pingpong_rtt(placement.client_cpu, reference_cpu, 20'000);
        const double ref_gbps = memcpy_bytes_per_second(size, window, 0.02) * 8 / 1e9;
        const uint64_t ref_p50 = pingpong.percentile(0.5);
        log << fmt::format("  {} {} B x{} ({} ops; ping-pong p50 {} ns) ...\n", op, size, window, iters, ref_p50);
        FERRY_ASSIGN_OR_RETURN(const Point p,
                               run_point(bed.link(), op, size, window, std::min<uint64_t>(iters / 10, 5000), iters));
        const double mops = static_cast<double>(p.iters) / p.seconds / 1e6;
        const double gbps = static_cast<double>(p.iters) * size * 8 / p.seconds / 1e9;
        const double p50_over_ref = ratio(p.latency.percentile(0.5), ref_p50);
        const double gbps_over_ref = ref_gbps > 0 ? gbps / ref_gbps : 0.0;
        const PacketCost cost = inproc_packet_cost(p);
        if (o.json) {
          nlohmann::json j = row_json(op, size, window, p, mops, gbps, ref_p50, ref_gbps);
          if (!p.engines.empty()) j["engine_packets"] = engine_packets_json(cost, bed.cpu_measured(), p.engines[0]);
          add_engine_fields(j, placement, o.inline_engine ? "inline" : "thread", p.engine_cpu_fraction);
          out << j.dump() << std::endl;
        } else {
          out << fmt::format(
              "{:<7}{:>7}{:>5}{:>9}{:>9}{:>9}{:>9}{:>10}{:>10.3f}{:>8.2f}{:>9}{:>9.1f}{:>8.2f}{:>7.2f}{:>8.2f}{:>8.0f}"
              "{:>8.0f}  {}\n",
              op, size, window, p.iters, percentile_text(p.latency, 0.5, 1, 0), percentile_text(p.latency, 0.99, 1, 0),
              percentile_text(p.latency, 0.999, 1, 0), p.latency.max(), mops, gbps, ref_p50, ref_gbps, p50_over_ref,
              gbps_over_ref, p.engine_cpu_fraction, cost.ns_per_packet, cost.cycles_per_packet, point_bound_by(p));
          out.flush();
        }
      }
    }
  }
  return ok_status();
}

}  // namespace ferry::bench
