#include "pm_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/common/rng.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/pm/hints.h"
#include "load_loop.h"
#include "regime.h"
#include "report.h"
#include "verbs_load.h"

namespace ferry::bench {
namespace {

using namespace ferry::nic;
using namespace ferry::pm;

// Published Optane figures the ATC'21 study measured against (6 DIMMs per
// socket): media write 100 Gbit/s, read 320 Gbit/s. Used only to turn the
// modeled media traffic into a modeled bound, never reported as measured.
constexpr double kMediaWriteBytesPerSecond = 100e9 / 8;
constexpr double kMediaReadBytesPerSecond = 320e9 / 8;
constexpr uint32_t kMaxWindow = 64;
constexpr uint32_t kRecvSlot = 4096;

struct Variant {
  std::string name;  // "baseline", "+H3", ...
  std::vector<std::string> hints;
  bool pm = true;
  bool ddio = false;
  bool aligned = false;  // H6 (align to PCIe DW / XPLine)
  bool padded = false;   // H6/H5 (pad to the granularity)
  CpuWriteHints cpu{false, false};
};

// One measured run: its latency distribution and the wall time and engine
// CPU time of the measured operations (warm-up excluded).
struct Measurement {
  Histogram latency;
  uint64_t iters = 0;
  double seconds = 0;
  uint64_t engine_cpu_ns = 0;
  uint64_t engine_idle_ns = 0;  // the engine thread's idle passes and sleeps (EngineOptions::account_idle)
  MediaCounters counters;

  double mops() const { return seconds > 0 ? static_cast<double>(iters) / seconds / 1e6 : 0.0; }
  double engine_cpu_fraction() const { return seconds > 0 ? static_cast<double>(engine_cpu_ns) / 1e9 / seconds : 0.0; }
  // Adds another run's operations (latency, time, CPU; not counters).
  void add(const Measurement& m) {
    latency.merge(m.latency);
    iters += m.iters;
    seconds += m.seconds;
    engine_cpu_ns += m.engine_cpu_ns;
    engine_idle_ns += m.engine_idle_ns;
  }
  double engine_busy_fraction() const { return busy_fraction(engine_idle_ns, seconds * 1e9); }
  // What bounded it (regime.h): the engine thread, or the client's operations in flight.
  std::string bound() const { return bound_by({{"nic-engine", engine_busy_fraction()}}, /*closed_loop=*/true); }
};

// How the persist experiment makes a remote write durable.
enum class PersistMode {
  kPlain,     // a WRITE alone (not durable: the reference)
  kH9,        // WRITE + READ behind one doorbell (H9)
  kH9Flush,   // WRITE + FLUSH behind one doorbell
  kStrawman,  // WRITE, wait, READ, wait
};

class PmTestbed;

// The measured window's own edges, for a Measurement's time and engine CPU:
// opened once the warm-up completed and (settle) the media model's cleanup
// ran, neither timed nor counted, so the counters hold measured operations
// only.
struct MeasuredSpan {
  uint64_t start_ns = 0;
  uint64_t engine_cpu_start = 0;
  uint64_t engine_idle_start = 0;
  void open(PmTestbed& t, bool settle = true);
  void close(PmTestbed& t, Measurement& m) const;
};

// Two hosts: a client with DRAM buffers, a server whose memory is a
// PersistenceDomain holding the target region (PM or DRAM).
class PmTestbed {
  friend struct MeasuredSpan;

 public:
  PmTestbed(const PmBenchOptions& o, const Placement& placement, const Variant& v, const std::string& pm_path,
            uint64_t wire_delay_ns = 0)
      : o_(o), variant_(v) {
    PlatformConfig pc;
    pc.ddio = v.ddio;
    domain_ = std::make_unique<PersistenceDomain>(pc);
    if (v.pm) {
      std::filesystem::remove(pm_path);
      region_ = domain_->map_pm(pm_path, o.region_bytes, true).value();
    } else {
      region_ = domain_->alloc_dram(o.region_bytes).value();
    }
    recv_ = domain_->alloc_dram(static_cast<size_t>(kRecvSlot) * kMaxWindow * 2).value();
    client_mem_.assign(static_cast<size_t>(kRecvSlot) * kMaxWindow * 2, 0x5A);
    EngineOptions eo;
    eo.cpu = placement.engine_pinned ? placement.engine_cpu : -1;
    eo.wire_delay_ns = wire_delay_ns;
    eo.account_idle = true;  // the engine thread's busy fraction (each point's regime)
    engine_ = std::make_unique<Engine>(eo);
    client_ = engine_->add_nic({.name = "client"}).value();
    NicOptions so;
    so.name = "server";
    so.memory = domain_.get();
    server_ = engine_->add_nic(so).value();
    cpd_ = client_->alloc_pd().value();
    spd_ = server_->alloc_pd().value();
    cmr_ = client_->reg_mr(*cpd_, client_mem_.data(), client_mem_.size(), kAccessAll).value();
    smr_ = server_->reg_mr(*spd_, region_->data(), region_->size(), kAccessAll).value();
    rmr_ = server_->reg_mr(*spd_, recv_->data(), recv_->size(), kAccessAll).value();
    locks_ = std::make_unique<LockTable>(4096);
    lmr_ = server_->reg_mr(*spd_, locks_->data(), locks_->bytes(), kAccessAll).value();
    CqInitAttr cq;
    cq.cqe = 8192;
    ccq_ = client_->create_cq(cq).value();
    scq_ = server_->create_cq(cq).value();
    QpInitAttr qa;
    qa.send_cq = qa.recv_cq = ccq_.get();
    qa.cap.max_send_wr = 4 * kMaxWindow;
    qa.cap.max_recv_wr = 2 * kMaxWindow;
    cqp_ = client_->create_qp(*cpd_, qa).value();
    QpInitAttr qb;
    qb.send_cq = qb.recv_cq = scq_.get();
    qb.cap.max_send_wr = 4 * kMaxWindow;
    qb.cap.max_recv_wr = 2 * kMaxWindow;
    sqp_ = server_->create_qp(*spd_, qb).value();
    const Status s = connect_qps(*cqp_, *client_, *sqp_, *server_);
    FERRY_ASSERT(s.ok(), s.to_string());
  }
  Region& region() { return *region_; }

  // A random target offset for a write of `size` under the variant's hints.
  size_t target(size_t size) {
    const size_t len = variant_.padded ? padded_size(size) : size;
    const size_t align = variant_.aligned ? write_granularity(size) : 8;
    const size_t slots = (o_.region_bytes - len) / align;
    return static_cast<size_t>(rng_.below(slots)) * align;
  }

  // Runs `warmup + iters` operations keeping `window` in flight (the load
  // loop's VerbsWindow); `post(i)` issues operation i and `done(wc, &id)`
  // reports whether a completion ends one (and which).
  template <typename Post, typename Done>
  Measurement drive(uint64_t warmup, uint64_t iters, uint32_t window, Post post, Done done) {
    Measurement r;
    r.iters = iters;
    struct Side {
      PmTestbed& t;
      Post& post_op;
      Done& done_op;
      Measurement& r;
      MeasuredSpan span;
      Status post(uint64_t i) {
        post_op(i);
        return ok_status();
      }
      Result<uint32_t> poll(std::span<WorkCompletion> wcs) {
        t.serve_server_side();
        auto n = t.ccq_->poll(wcs);
        FERRY_ASSERT(n.ok(), n.status().to_string());
        return n;
      }
      std::optional<uint64_t> ends(const WorkCompletion& wc) {
        uint64_t id;
        if (!done_op(wc, &id)) return std::nullopt;
        return id;
      }
      void on_window_open(uint64_t) { span.open(t); }
      void on_window_close(uint64_t) { span.close(t, r); }
    } side{*this, post, done, r, {}};
    Recorder rec;
    VerbsWindow<Side> target(side, window, rec, timing_clock(), "pm bench op");
    auto out = run_closed(target, rec, LoopPlan::counted(warmup, iters), timing_clock());
    FERRY_ASSERT(out.ok(), out.status().to_string());
    r.latency = rec.all();
    region_->settle_media_model();
    r.counters = region_->counters();
    return r;
  }

  Measurement one_sided(uint32_t size, uint32_t window, uint64_t warmup, uint64_t iters) {
    const uint32_t len = variant_.padded ? static_cast<uint32_t>(padded_size(size)) : size;
    return drive(
        warmup, iters, window,
        [&](uint64_t i) {
          const Sge sge = cmr_->sge((i % window) * kRecvSlot, len);
          SendWr wr;
          wr.wr_id = i;
          wr.opcode = WrOpcode::kRdmaWrite;
          wr.flags = kSendSignaled;
          wr.sg_list = std::span<const Sge>(&sge, 1);
          wr.remote_addr = smr_->iova() + target(size);
          wr.rkey = smr_->rkey();
          const Status s = cqp_->post_send(wr);
          FERRY_ASSERT(s.ok(), s.to_string());
        },
        [](const WorkCompletion& wc, uint64_t* id) {
          *id = wc.wr_id;
          return true;
        });
  }

  // Client SENDs the payload; the server application copies it into the
  // region and persists it, then answers with an empty SEND.
  Measurement two_sided(uint32_t size, uint32_t window, uint64_t warmup, uint64_t iters) {
    two_sided_size_ = size;
    serving_ = true;
    if (!recvs_posted_) {
      // Server RECVs for the payloads; client RECVs (no buffer) for the replies.
      for (uint32_t i = 0; i < 2 * kMaxWindow; ++i) {
        repost_server(i);
        const Status s = cqp_->post_recv(RecvWr{i, {}});
        FERRY_ASSERT(s.ok(), s.to_string());
      }
      recvs_posted_ = true;
    }
    Measurement r = drive(
        warmup, iters, window,
        [&](uint64_t i) {
          const Sge sge = cmr_->sge((i % window) * kRecvSlot, size);
          SendWr wr;
          wr.wr_id = i;
          wr.opcode = WrOpcode::kSendWithImm;
          wr.imm_data = static_cast<uint32_t>(i);
          wr.flags = 0;
          wr.sg_list = std::span<const Sge>(&sge, 1);
          // Signal every window-th send so its slots recycle.
          if (i % window == window - 1) wr.flags = kSendSignaled;
          const Status s = cqp_->post_send(wr);
          FERRY_ASSERT(s.ok(), s.to_string());
        },
        [&](const WorkCompletion& wc, uint64_t* id) {
          if (wc.opcode != WcOpcode::kRecv) return false;  // our own send completions
          *id = wc.imm_data;
          const Status s = cqp_->post_recv(RecvWr{wc.wr_id, {}});
          FERRY_ASSERT(s.ok(), s.to_string());
          return true;
        });
    serving_ = false;
    return r;
  }

  Measurement atomic(bool on_pm, uint32_t window, uint64_t warmup, uint64_t iters) {
    return drive(
        warmup, iters, window,
        [&](uint64_t i) {
          const Sge sge = cmr_->sge((i % window) * kRecvSlot, 8);
          SendWr wr;
          wr.wr_id = i;
          wr.opcode = WrOpcode::kAtomicFetchAndAdd;
          wr.flags = kSendSignaled;
          wr.sg_list = std::span<const Sge>(&sge, 1);
          const uint64_t key = rng_.below(4096);
          if (on_pm) {
            wr.remote_addr = smr_->iova() + key * 64;  // lock words on PM
            wr.rkey = smr_->rkey();
          } else {
            wr.remote_addr = lmr_->iova() + locks_->offset(key);  // H8: lock words in DRAM
            wr.rkey = lmr_->rkey();
          }
          wr.compare_add = 1;
          const Status s = cqp_->post_send(wr);
          FERRY_ASSERT(s.ok(), s.to_string());
        },
        [](const WorkCompletion& wc, uint64_t* id) {
          *id = wc.wr_id;
          return true;
        });
  }

  // Persistent-write latency and rate, one write at a time.
  Measurement persist(PersistMode mode, uint32_t size, uint64_t warmup, uint64_t iters) {
    Measurement m;
    m.iters = iters;
    const Clock& clock = timing_clock();
    const Sge local = cmr_->sge(0, size);
    WorkCompletion wc;
    auto wait = [&] {
      for (;;) {
        auto n = ccq_->poll(std::span<WorkCompletion>(&wc, 1));
        FERRY_ASSERT(n.ok(), n.status().to_string());
        if (n.value() == 1) break;
        cpu_relax();
      }
      FERRY_ASSERT(wc.status == WcStatus::kSuccess, "persist bench op failed");
    };
    // One durable (or, for kPlain, merely completed) write to `remote`.
    auto write = [&](uint64_t i, uint64_t remote) {
      switch (mode) {
        case PersistMode::kPlain: {
          SendWr wr;
          wr.opcode = WrOpcode::kRdmaWrite;
          wr.flags = kSendSignaled;
          wr.sg_list = std::span<const Sge>(&local, 1);
          wr.remote_addr = remote;
          wr.rkey = smr_->rkey();
          const Status s = cqp_->post_send(wr);
          FERRY_ASSERT(s.ok(), s.to_string());
          wait();
          break;
        }
        case PersistMode::kH9:
        case PersistMode::kH9Flush: {
          const PersistPoint p = mode == PersistMode::kH9 ? PersistPoint::kRead : PersistPoint::kFlush;
          const Status s = post_persistent_write(*cqp_, local, remote, smr_->rkey(), i, p);
          FERRY_ASSERT(s.ok(), s.to_string());
          wait();
          break;
        }
        case PersistMode::kStrawman: {
          const Status s = persistent_write_strawman(*cqp_, *ccq_, local, remote, smr_->rkey(), PersistPoint::kRead);
          FERRY_ASSERT(s.ok(), s.to_string());
          break;
        }
      }
    };
    // One write at a time (the loop's synchronous target); each one's
    // target is drawn, untimed, before it starts.
    Recorder rec;
    PersistLoad load{*this, write, rec, m, size, 0, 0, {}};
    load.remote = smr_->iova() + target(size);
    auto out = run_closed(load, rec, LoopPlan::counted(warmup, iters), clock);
    FERRY_ASSERT(out.ok(), out.status().to_string());
    m.latency = rec.all();
    return m;
  }

 private:
  // persist()'s load: one write at a time (the loop's synchronous target);
  // each one's target is drawn, untimed, before it starts.
  struct PersistLoad {
    static constexpr bool kSynchronous = true;
    PmTestbed& t;
    std::function<void(uint64_t, uint64_t)> write_to;  // (operation, remote address)
    Recorder& rec;
    Measurement& m;
    uint32_t size;
    uint64_t i;
    uint64_t remote;
    MeasuredSpan span;
    Status issue(uint64_t at_ns) {
      write_to(i++, remote);
      rec.record(0, at_ns, timing_clock().now_ns());
      remote = t.smr_->iova() + t.target(size);
      return ok_status();
    }
    Status step(uint64_t) { return ok_status(); }
    void on_window_open(uint64_t) { span.open(t, /*settle=*/false); }
    void on_window_close(uint64_t) { span.close(t, m); }
  };

  void repost_server(uint64_t id) {
    const Sge rs = rmr_->sge((id % (2 * kMaxWindow)) * kRecvSlot, kRecvSlot);
    const Status s = sqp_->post_recv(RecvWr{id, std::span<const Sge>(&rs, 1)});
    FERRY_ASSERT(s.ok(), s.to_string());
  }

  // The two-sided server application (runs on the measuring thread: this
  // machine has two CPUs, one for the client, one for the NIC engine).
  void serve_server_side() {
    if (!serving_) return;
    WorkCompletion wcs[16];
    auto n = scq_->poll(wcs);
    FERRY_ASSERT(n.ok(), n.status().to_string());
    for (uint32_t i = 0; i < n.value(); ++i) {
      const WorkCompletion& wc = wcs[i];
      if (wc.opcode != WcOpcode::kRecv) continue;
      const uint8_t* payload = recv_->data() + (wc.wr_id % (2 * kMaxWindow)) * kRecvSlot;
      uint8_t* dst = region_->data() + target(two_sided_size_);
      if (region_->media() == Media::kPm) {
        persistent_copy(*region_, dst, payload, wc.byte_len, variant_.cpu);
      } else {
        std::memcpy(dst, payload, wc.byte_len);
      }
      repost_server(wc.wr_id + 2 * kMaxWindow);
      SendWr reply;
      reply.opcode = WrOpcode::kSendWithImm;
      reply.imm_data = wc.imm_data;
      reply.flags = (++replies_ % kMaxWindow == 0) ? kSendSignaled : 0;
      const Status s = sqp_->post_send(reply);
      FERRY_ASSERT(s.ok(), s.to_string());
    }
  }

  const PmBenchOptions& o_;
  Variant variant_;
  Rng rng_{42};
  std::unique_ptr<PersistenceDomain> domain_;
  Region* region_ = nullptr;
  Region* recv_ = nullptr;
  std::vector<uint8_t> client_mem_;
  std::unique_ptr<LockTable> locks_;
  std::unique_ptr<Engine> engine_;
  Nic* client_ = nullptr;
  Nic* server_ = nullptr;
  std::unique_ptr<ProtectionDomain> cpd_, spd_;
  std::unique_ptr<MemoryRegion> cmr_, smr_, rmr_, lmr_;
  std::unique_ptr<CompletionQueue> ccq_, scq_;
  std::unique_ptr<QueuePair> cqp_, sqp_;
  bool serving_ = false;
  bool recvs_posted_ = false;
  uint32_t two_sided_size_ = 0;
  uint64_t replies_ = 0;
};

void MeasuredSpan::open(PmTestbed& t, bool settle) {
  if (settle) {
    t.region_->settle_media_model();
    t.region_->reset_counters();
  }
  const EngineStats s = t.engine_->stats();
  engine_cpu_start = s.thread_cpu_ns;
  engine_idle_start = s.idle_pass_ns;
  start_ns = timing_clock().now_ns();
}

void MeasuredSpan::close(PmTestbed& t, Measurement& m) const {
  m.seconds = static_cast<double>(timing_clock().now_ns() - start_ns) / 1e9;
  const EngineStats s = t.engine_->stats();
  m.engine_cpu_ns = s.thread_cpu_ns - engine_cpu_start;
  m.engine_idle_ns = s.idle_pass_ns - engine_idle_start;
}

nlohmann::json modeled_json(const MediaCounters& c, uint64_t ops) {
  const double n = static_cast<double>(std::max<uint64_t>(ops, 1));
  const double seconds_per_op = static_cast<double>(c.media_bytes_written) / n / kMediaWriteBytesPerSecond +
                                static_cast<double>(c.media_bytes_read) / n / kMediaReadBytesPerSecond;
  return {{"source", "model (not measured)"},
          {"write_requests_per_op", static_cast<double>(c.write_requests) / n},
          {"read_requests_per_op", static_cast<double>(c.read_requests) / n},
          {"media_bytes_written_per_op", static_cast<double>(c.media_bytes_written) / n},
          {"media_bytes_read_per_op", static_cast<double>(c.media_bytes_read) / n},
          {"write_amplification", c.write_amplification()},
          {"pcie_rmw_per_op", static_cast<double>(c.pcie_rmw) / n},
          {"cpu_rfo_per_op", static_cast<double>(c.cpu_rfo) / n},
          {"nt_partial_per_op", static_cast<double>(c.nt_partial) / n},
          {"xpline_rmw_per_op", static_cast<double>(c.xpline_rmw) / n},
          {"atomics_per_op", static_cast<double>(c.atomics) / n},
          {"media_bound_mops", seconds_per_op > 0 ? 1e-6 / seconds_per_op : 0.0}};
}

}  // namespace

Status run_pm_bench(const PmBenchOptions& o, std::ostream& out, std::ostream& log) {
  for (const auto& e : o.experiments) {
    if (e != "one_sided" && e != "two_sided" && e != "atomic" && e != "persist") {
      return invalid_argument("unknown experiment '" + e + "' (one_sided, two_sided, atomic, persist)");
    }
  }
  if (o.sizes.empty()) return invalid_argument("no sizes given");
  for (uint32_t s : o.sizes) {
    if (s == 0 || s > 4096) return invalid_argument("sizes must be in 1..4096");
  }
  if (o.outstanding == 0 || o.outstanding > kMaxWindow) {
    return invalid_argument("outstanding must be 1.." + std::to_string(kMaxWindow));
  }
  if (o.region_bytes < (1u << 20)) return invalid_argument("region must be at least 1 MiB");
  std::string dir = o.pm_dir;
  if (dir.empty()) dir = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  if (!std::filesystem::is_directory(dir)) return not_found("pm directory " + dir + " does not exist");
  const std::string pm_path =
      (std::filesystem::path(dir) / ("ferry-bench-pm-" + std::to_string(getpid()) + ".pm")).string();

  Placement placement;
  placement.client_cpu = usable_cpu(o.client_cpu);
  placement.engine_cpu = usable_cpu(o.engine_cpu);
  placement.engine_pinned = placement.engine_cpu >= 0;
  if (placement.client_cpu >= 0) (void)pin_current_thread(placement.client_cpu);
  log << "ferry bench pm: " << placement_text(placement) << "\n"
      << "PM region: " << pm_path << " (" << (o.region_bytes >> 20) << " MiB). Media counters and media-bound rates "
      << "come from the model (docs/persistence.md), not from hardware; rates are this emulator's, measured. "
      << "Timing clock: " << timing_clock_name() << ".\n";

  bool real_pm = false;
  std::string granularity;
  auto emit = [&](nlohmann::json j, const Measurement& m) {
    j["bench"] = "pm";
    j["engine"] = placement_json(placement);
    j["engine"]["mode"] = "thread";
    j["engine"]["cpu_busy_fraction"] = m.engine_cpu_fraction();
    // What bounded the point (regime.h): the engine thread that runs both
    // NICs and the PM model's DMA path, or the client's operations in flight.
    const std::string bound = m.bound();
    j["regime"] = {{"engine_busy_fraction", m.engine_busy_fraction()},
                   {"bound_by", bound},
                   {"how",
                    "engine busy = 1 - its idle passes and sleeps over the window (EngineOptions::account_idle); "
                    "at 0.9 or more the engine bounds the point, else the client's operations in flight do "
                    "(other)"}};
    j["bound_by"] = bound;
    j["client_cpu"] = placement.client_cpu;
    j["load"] = placement.load;
    j["real_pm"] = real_pm;
    if (o.json) {
      add_provenance(j);
      out << j.dump() << std::endl;
    }
  };
  auto iters_for = [&](double per_op_seconds) {
    if (o.iters) return o.iters;
    return static_cast<uint64_t>(std::clamp(o.seconds_per_point / std::max(per_op_seconds, 1e-9), 2000.0, 500000.0));
  };
  auto table_header = [&](const std::string& title) {
    if (!o.json) {
      out << "\n"
          << title << "\n"
          << fmt::format("{:<11}{:<18}{:>6}{:>9}{:>9}{:>9}{:>9}  {:>7}{:>8}{:>8}{:>8}{:>11}  {}\n", "memory", "variant",
                         "size", "Mops", "p50_ns", "p99_ns", "p999_ns", "wr_amp", "rmw/op", "rfo/op", "rd/op",
                         "media_Mops", "bound");
    }
  };

  // ---- one-sided and two-sided remote write ----
  for (const std::string exp : {"one_sided", "two_sided"}) {
    if (std::find(o.experiments.begin(), o.experiments.end(), exp) == o.experiments.end()) continue;
    const bool one = exp == "one_sided";
    std::vector<Variant> variants;
    if (one) {
      variants = {{"dram", {}, false, false, false, false, {false, false}},
                  {"baseline", {}, true, true, false, false, {false, false}},  // DDIO on, unaligned
                  {"+H3", {"H3"}, true, false, false, false, {false, false}},
                  {"+H3+align", {"H3", "H6-align"}, true, false, true, false, {false, false}},
                  {"+H3+H5/H6", {"H3", "H5", "H6"}, true, false, true, true, {false, false}}};
    } else {
      variants = {{"dram", {}, false, false, false, false, {false, false}},
                  {"baseline", {}, true, false, false, false, {false, false}},  // cached stores, unaligned
                  {"+H4", {"H4"}, true, false, false, false, {true, false}},
                  {"+H4+H5/H6+H7", {"H4", "H5", "H6", "H7"}, true, false, true, true, {true, true}}};
    }
    table_header(
        one ? fmt::format("One-sided remote write (RDMA WRITE, random addresses, {} outstanding)", o.outstanding)
            : fmt::format("Two-sided remote write (SEND, {} outstanding; server CPU copies into the region "
                          "and persists)",
                          o.outstanding));
    for (const Variant& v : variants) {
      PmTestbed bed(o, placement, v, pm_path);
      real_pm = bed.region().real_pm();
      granularity = bed.region().granularity();
      for (uint32_t size : o.sizes) {
        const Measurement probe =
            one ? bed.one_sided(size, o.outstanding, 200, 1000) : bed.two_sided(size, o.outstanding, 200, 1000);
        const uint64_t iters = iters_for(probe.seconds / 1000.0);
        log << fmt::format("  {} {} {} B ({} ops) ...\n", exp, v.name, size, iters);
        const Measurement r = one ? bed.one_sided(size, o.outstanding, std::min<uint64_t>(iters / 10, 5000), iters)
                                  : bed.two_sided(size, o.outstanding, std::min<uint64_t>(iters / 10, 5000), iters);
        const double mops = r.mops();
        nlohmann::json j;
        j["experiment"] = exp;
        j["memory"] = v.pm ? "pm" : "dram";
        j["variant"] = v.name;
        j["hints"] = v.hints;
        j["ddio"] = v.ddio;
        j["size"] = size;
        j["iters"] = r.iters;
        j["outstanding"] = o.outstanding;
        add_percentiles_ns(j, r.latency);
        j["mops"] = mops;
        j["gbps"] = mops * 1e6 * size * 8 / 1e9;
        j["modeled"] = modeled_json(r.counters, r.iters);
        emit(j, r);
        if (!o.json) {
          const auto& m = j["modeled"];
          out << fmt::format(
              "{:<11}{:<18}{:>6}{:>9.3f}{:>9}{:>9}{:>9}  {:>7.2f}{:>8.2f}{:>8.2f}{:>8.2f}{:>11.1f}  {}\n",
              v.pm ? "pm" : "dram", v.name, size, mops, percentile_text(r.latency, 0.5, 1, 0),
              percentile_text(r.latency, 0.99, 1, 0), percentile_text(r.latency, 0.999, 1, 0),
              m["write_amplification"].get<double>(),
              m["pcie_rmw_per_op"].get<double>() + m["nt_partial_per_op"].get<double>(),
              m["cpu_rfo_per_op"].get<double>(), m["read_requests_per_op"].get<double>(),
              m["media_bound_mops"].get<double>(), r.bound());
          out.flush();
        }
      }
    }
  }

  // ---- atomics on PM vs a DRAM lock table (H8) ----
  if (std::find(o.experiments.begin(), o.experiments.end(), "atomic") != o.experiments.end()) {
    table_header("Remote atomics (FETCH_AND_ADD on lock words): on PM vs a DRAM lock table (H8)");
    PmTestbed bed(o, placement, {"atomic", {}, true, false, false, false, {}}, pm_path);
    real_pm = bed.region().real_pm();
    granularity = bed.region().granularity();
    for (bool on_pm : {true, false}) {
      const Measurement probe = bed.atomic(on_pm, o.outstanding, 200, 1000);
      const uint64_t iters = iters_for(probe.seconds / 1000.0);
      log << fmt::format("  atomic {} ({} ops) ...\n", on_pm ? "on PM" : "DRAM lock table", iters);
      const Measurement r = bed.atomic(on_pm, o.outstanding, std::min<uint64_t>(iters / 10, 5000), iters);
      const double mops = r.mops();
      nlohmann::json j;
      j["experiment"] = "atomic";
      j["memory"] = on_pm ? "pm" : "dram";
      j["variant"] = on_pm ? "locks on PM" : "+H8 (DRAM lock table)";
      j["hints"] = on_pm ? std::vector<std::string>{} : std::vector<std::string>{"H8"};
      j["size"] = 8;
      j["iters"] = r.iters;
      j["outstanding"] = o.outstanding;
      add_percentiles_ns(j, r.latency);
      j["mops"] = mops;
      j["gbps"] = mops * 1e6 * 8 * 8 / 1e9;  // 8-byte operands
      j["modeled"] = modeled_json(r.counters, r.iters);
      emit(j, r);
      if (!o.json) {
        const auto& m = j["modeled"];
        out << fmt::format("{:<11}{:<18}{:>6}{:>9.3f}{:>9}{:>9}{:>9}  {:>7.2f}{:>8.2f}{:>8.2f}{:>8.2f}{:>11.1f}  {}\n",
                           on_pm ? "pm" : "dram", on_pm ? "locks on PM" : "+H8", 8, mops,
                           percentile_text(r.latency, 0.5, 1, 0), percentile_text(r.latency, 0.99, 1, 0),
                           percentile_text(r.latency, 0.999, 1, 0), m["write_amplification"].get<double>(),
                           m["pcie_rmw_per_op"].get<double>(), m["cpu_rfo_per_op"].get<double>(),
                           m["read_requests_per_op"].get<double>(), m["media_bound_mops"].get<double>(), r.bound());
      }
    }
  }

  // ---- persistent-write latency: plain WRITE vs H9 vs strawman ----
  if (std::find(o.experiments.begin(), o.experiments.end(), "persist") != o.experiments.end()) {
    if (!o.json) {
      out << "\nPersistent remote write latency, one at a time (PM, DDIO off), ratios to a plain WRITE's p50\n"
          << fmt::format("{:>6}{:>10}{:>10}{:>12}{:>13}{:>10}{:>12}{:>15}  {}\n", "size", "plain_p50", "h9_p50",
                         "h9flush_p50", "strawman_p50", "h9/plain", "flush/plain", "strawman/plain", "bound (plain)");
    }
    struct PersistRun {
      Measurement plain, h9, h9_flush, strawman;
    };
    constexpr std::pair<const char*, Measurement PersistRun::*> kModes[] = {{"plain", &PersistRun::plain},
                                                                            {"h9", &PersistRun::h9},
                                                                            {"h9_flush", &PersistRun::h9_flush},
                                                                            {"strawman", &PersistRun::strawman}};
    // Every size on one testbed (one PM file) per wire delay.
    auto measure_sizes = [&](uint64_t wire_delay_ns) {
      PmTestbed bed(o, placement, {"persist", {"H3", "H9"}, true, false, true, true, {}}, pm_path, wire_delay_ns);
      real_pm = bed.region().real_pm();
      granularity = bed.region().granularity();
      const uint64_t iters = o.iters ? o.iters : (wire_delay_ns ? 4000 : 20000);
      const uint64_t per_round = std::max<uint64_t>(iters / 4, 1);
      std::vector<PersistRun> runs;
      for (uint32_t size : o.sizes) {
        log << fmt::format("  persist {} B, wire delay {} ns ({} each) ...\n", size, wire_delay_ns, 4 * per_round);
        // Interleave the four modes in rounds so drift affects them alike.
        PersistRun r;
        for (int round = 0; round < 4; ++round) {
          r.plain.add(bed.persist(PersistMode::kPlain, size, 200, per_round));
          r.h9.add(bed.persist(PersistMode::kH9, size, 200, per_round));
          r.h9_flush.add(bed.persist(PersistMode::kH9Flush, size, 200, per_round));
          r.strawman.add(bed.persist(PersistMode::kStrawman, size, 200, per_round));
        }
        runs.push_back(std::move(r));
      }
      return runs;
    };
    auto ratios = [&](const PersistRun& r, uint32_t size, nlohmann::json& j) {
      const double base = static_cast<double>(std::max<uint64_t>(r.plain.latency.percentile(0.5), 1));
      for (const auto& [name, member] : kModes) {
        const Measurement& m = r.*member;
        nlohmann::json d;
        add_percentiles_ns(d, m.latency);
        d["avg_ns"] = m.latency.mean();
        d["mops"] = m.mops();
        d["gbps"] = m.mops() * 1e6 * size * 8 / 1e9;
        j[name] = d;
      }
      j["persist_ratio_h9"] = static_cast<double>(r.h9.latency.percentile(0.5)) / base;
      j["persist_ratio_h9_flush"] = static_cast<double>(r.h9_flush.latency.percentile(0.5)) / base;
      j["persist_ratio_strawman"] = static_cast<double>(r.strawman.latency.percentile(0.5)) / base;
    };
    const std::vector<PersistRun> runs = measure_sizes(0);
    std::vector<PersistRun> wired_runs;
    if (o.modeled_wire_delay_ns != 0) wired_runs = measure_sizes(o.modeled_wire_delay_ns);
    for (size_t k = 0; k < o.sizes.size(); ++k) {
      const uint32_t size = o.sizes[k];
      const PersistRun& r = runs[k];
      nlohmann::json j;
      j["experiment"] = "persist";
      j["memory"] = "pm";
      j["size"] = size;
      j["iters"] = r.plain.iters;
      j["outstanding"] = 1;
      // The plain WRITE is the reference: its distribution and its measured
      // one-at-a-time rate are the row's; the other modes' are under their names.
      add_percentiles_ns(j, r.plain.latency);
      j["mops"] = r.plain.mops();
      j["gbps"] = r.plain.mops() * 1e6 * size * 8 / 1e9;
      j["wire_delay_ns"] = 0;
      ratios(r, size, j);
      nlohmann::json wired;
      if (o.modeled_wire_delay_ns != 0) {
        wired["source"] = "emulator plus a modeled one-way wire delay (not measured hardware)";
        wired["wire_delay_ns"] = o.modeled_wire_delay_ns;
        ratios(wired_runs[k], size, wired);
        j["with_modeled_wire"] = wired;
      }
      emit(j, r.plain);
      if (!o.json) {
        out << fmt::format("{:>6}{:>10}{:>10}{:>12}{:>13}{:>10.2f}{:>12.2f}{:>15.2f}  {}", size,
                           r.plain.latency.percentile(0.5), r.h9.latency.percentile(0.5),
                           r.h9_flush.latency.percentile(0.5), r.strawman.latency.percentile(0.5),
                           j["persist_ratio_h9"].get<double>(), j["persist_ratio_h9_flush"].get<double>(),
                           j["persist_ratio_strawman"].get<double>(), r.plain.bound());
        if (o.modeled_wire_delay_ns != 0) {
          out << fmt::format("   | wire {} ns (modeled): h9 {:.2f} strawman {:.2f}", o.modeled_wire_delay_ns,
                             wired["persist_ratio_h9"].get<double>(), wired["persist_ratio_strawman"].get<double>());
        }
        out << "\n";
      }
    }
  }
  std::filesystem::remove(pm_path);
  if (!o.json) {
    out << "\nPM mapping: " << granularity << ". wr_amp = media bytes written / (64 B x write requests); rmw/op = PCIe "
        << "partial writes + partial non-temporal lines; rfo/op = cached-store line reads; media_Mops = the rate the "
        << "modeled media traffic would allow on 6 Optane DIMMs (model, not measurement).\n";
  }
  return ok_status();
}

}  // namespace ferry::bench
