// The pieces of a `ferry bench nic` point that the in-process sweep
// (nic_bench.cc), the UDP transport (nic_bench_udp.cc) and the per-QP
// points (nic_qp_scale.cc) share: what a point runs on (Link), runs
// (run_point) and reports (row_json, add_engine_fields), and the
// in-process testbed. Internal to those files.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine_cost.h"
#include "ferry/common/histogram.h"
#include "ferry/common/status.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"
#include "nic_bench.h"
#include "report.h"

namespace ferry::bench::nic_point {

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
  uint64_t engine_cpu_ns = 0;       // the NICs' work during the measured window
  std::vector<EngineWork> engines;  // each engine's thread CPU and packets over the window
  // Idle time over the window (regime.h): the engine thread's (its idle
  // passes and sleeps, EngineOptions::account_idle; nullopt where the
  // engine is not this process's) and the measuring thread's (its polls that
  // found nothing, sampled; inline, that thread also steps the engine).
  std::optional<uint64_t> engine_idle_ns;
  uint64_t client_idle_ns = 0;
};

// Zeroed page-aligned memory of at least `n` bytes (`size`, whole pages).
struct Aligned {
  explicit Aligned(size_t n)
      : size(std::max<size_t>((n + 4095) & ~size_t{4095}, 4096)),
        ptr(static_cast<uint8_t*>(std::aligned_alloc(4096, size))) {
    std::memset(ptr, 0, size);
  }
  ~Aligned() { std::free(ptr); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  size_t size;
  uint8_t* ptr;
};

// Whose CPU time an in-process threaded engine's cost per packet divides.
inline constexpr char kEngineThreadCpu[] = "CLOCK_THREAD_CPUTIME_ID of the engine thread (both NICs)";

// What a point runs on: a connected client (requester) QP and server
// (responder) QP with their CQs and memory, wherever their NICs are.
struct Link {
  QueuePair* cqp = nullptr;
  QueuePair* sqp = nullptr;
  CompletionQueue* ccq = nullptr;
  CompletionQueue* scq = nullptr;
  MemoryRegion* cmr = nullptr;
  MemoryRegion* smr = nullptr;
  uint32_t slot_bytes = 0;
  Engine* inline_engine = nullptr;          // stepped on the measuring thread (--inline)
  CompletionChannel* channel = nullptr;     // the client CQ's: block in it when nothing completed (else spin)
  std::function<uint64_t()> engine_cpu_ns;  // CPU time of whatever does the NICs' work
  // Per engine: its thread's CPU time and its NICs' packet counters (cost per packet).
  std::function<std::vector<EngineWork>()> engine_work;
  // The in-process engine thread's idle time so far (EngineStats::idle_pass_ns); empty otherwise.
  std::function<uint64_t()> engine_idle_ns;
};

// Posts the server's RECV `id` into its slot of the window.
Status repost_server_recv(const Link& l, uint64_t id);

// Runs `warmup + iters` operations with `window` outstanding on `l`.
Result<Point> run_point(const Link& l, const std::string& op, uint32_t size, uint32_t window, uint64_t warmup,
                        uint64_t iters);
// Iterations for a point: --iters, or sized by time from a short probe.
Result<uint64_t> size_point(const NicBenchOptions& o, const Link& l, const std::string& op, uint32_t size,
                            uint32_t window);

// The benchmark's two hosts in one process: a client (requester) and a
// server (responder) NIC on one Engine.
class Testbed {
 public:
  Testbed(const NicBenchOptions& o, const Placement& placement, uint32_t max_size);
  // Waits until the engine thread has parked (it spins for spin_ns after
  // its last work), so a reference measured now has its CPU to itself.
  void let_engine_sleep() {
    if (inline_) return;
    for (int i = 0; i < 400 && !engine_->sleeping(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(250));
  }

  const Link& link() const { return link_; }
  // Whose CPU time the cost per packet divides.
  std::string cpu_measured() const {
    return inline_ ? "CLOCK_THREAD_CPUTIME_ID of the measuring thread (inline: it runs the engine and the application)"
                   : kEngineThreadCpu;
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
  Link link_;
};

nlohmann::json percentiles_json(const Histogram& h);
// num / den, den taken as at least 1.
double ratio(uint64_t num, uint64_t den);
// In process one engine sends and receives every packet: its packets are
// those its NICs received, each counted once (engine_cost.h).
PacketCost inproc_packet_cost(const Point& p);
// packet_cost_json plus the window's tx/rx packet counts.
nlohmann::json engine_packets_json(const PacketCost& c, const std::string& measured, const EngineWork& w);
// Adds what an in-process row says of where it ran ("engine": placement,
// `mode`, its busy fraction; "client_cpu", "load") and the provenance.
void add_engine_fields(nlohmann::json& j, const Placement& placement, const std::string& mode, double cpu_busy);
// The fields every row has, whatever the transport: the point, its latency
// distribution and rate, and its cross-thread ping-pong / memcpy reference.
nlohmann::json row_json(const std::string& op, uint32_t size, uint32_t window, const Point& p, double mops, double gbps,
                        uint64_t ref_p50, double ref_gbps);
// What bounded the point (regime.h): "client" (the measuring thread posts
// and polls) or "nic-engine" (the thread that runs both NICs) at 0.9 busy or
// more, else "other" (the window's round trips set the pace).
std::string point_bound_by(const Point& p);
// row_json's "regime": both threads' busy fractions and bound_by.
nlohmann::json regime_json(const Point& p);

// `ferry bench nic --transport udp` (nic_bench_udp.cc).
Status run_udp_transport(const NicBenchOptions& o, std::ostream& out, std::ostream& log);

}  // namespace ferry::bench::nic_point
