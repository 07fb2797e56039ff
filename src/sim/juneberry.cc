// JUNE BERRY-D under the simulator: a durable Ordered Queue server (two
// workers, PmKv behind each) on its host's NIC, client sessions -- each its
// own QP to every worker -- on another NIC, all on one manual engine on the
// world's clock. One scheduler loop draws, step by step, whether to issue an
// operation, step the engine, poll a worker or poll a session, and advances
// virtual time a little each step (to the next timer when nothing can run).
//
// Workload: puts (nilext, and a few non-nilext), removes and gets on a few
// hot keys drawn from a Zipfian (the shared YCSB generator), from every
// session, so keys are shared across QPs and gets read what other clients
// wrote (the cross-QP reads the data-safety issue found missing).
//
// Faults, each struck by the world's fault stream:
//   loss/dup/delay   the fabric's fault model, on every packet;
//   partition        the fabric's tap drops client->server, server->client
//                    or both for a while (RC retries, then the QPs fail and
//                    the client resumes on new ones); then it heals;
//   power            the server host loses power at a random later step, or
//                    right after the n-th get reply (a read is where a
//                    client learns state, so a failure just after it is
//                    where a reply that showed too much is caught); PM keeps
//                    what the power-failure model decides; the server
//                    recovers from PM and the clients reconnect;
//   crash            the server process dies (DRAM lost, PM kept) the same way;
//   slow             a worker runs rarely for a while;
//   client-crash     a client dies with calls in flight and a new one resumes
//                    (its calls stay pending), or a client dies right after
//                    its SEND (no READ behind it).
// The platform is drawn too: ADR, eADR, eADR with DDIO, and sometimes DDIO
// without eADR, which a durable server must refuse.
//
// Checks at the end: the whole history linearizable (pending operations may
// or may not have happened), nilext requests of one session on one key
// executed in the order it sent them, every get's bytes written by some put,
// every worker's PmKv consistent, and every session able to read every key
// once the faults stop (liveness).

#include <array>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dying_client.h"
#include "ferry/common/temp_dir.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/format.h"
#include "ferry/rpc/server.h"
#include "ferry/sim/linearizability.h"
#include "ferry/sim/systems.h"
#include "ferry/store/kv_service.h"
#include "ferry/workload/zipf.h"
#include "juneberry_checks.h"

namespace ferry::sim {

namespace {

using store::KvClient;

constexpr uint32_t kSessions = 3;
constexpr uint32_t kDyingClient = kSessions;  // history client id of clients that die after a SEND
constexpr uint32_t kMaxInflight = 4;
constexpr uint64_t kStepNs = 2000;  // a step advances virtual time by [0, kStepNs)

using juneberry::key_name;
using juneberry::value_number;
using juneberry::value_text;

// A fault armed to strike later: at a step, after the n-th get reply, or
// at a fence of the server's CPU (a crash point: pm::PersistenceDomain::
// arm_cut), in the middle of whatever the worker is doing.
struct Armed {
  enum Kind : uint8_t { kNone, kPower, kCrash } kind = kNone;
  uint64_t at_step = 0;
  uint64_t after_replies = 0;  // 0: at_step, after_commits or at_fence
  uint64_t after_commits = 0;  // strikes as a client learns its write committed
  // ... preferably one its worker has not executed yet (committed by the
  // NIC's ACK, still only in the buffer): waits up to 50 more commits for one.
  bool unexecuted = false;
  bool at_fence = false;
};

class JuneBerrySim {
 public:
  explicit JuneBerrySim(const RunOptions& options) : world_(options), options_(options) {
    Rng& rng = world_.rng();
    ops_ = options.ops != 0 ? options.ops : kDefaultOps;
    // Hot keys mostly; one seed in four spreads its puts uniformly over many
    // keys into a small store, so that it fills and admission (room set
    // aside before a buffer is posted) decides what may commit.
    small_store_ = rng.below(4) == 0;
    keys_ = small_store_ ? 256 : 2 + rng.below(3);
    store_bytes_ = small_store_ ? (8 << 10) + rng.below(3) * (4 << 10) : 256 << 10;
    zipf_ = std::make_unique<workload::ZipfianGenerator>(0, keys_ - 1);
    // The platform: ADR (the default), eADR, eADR with DDIO; one seed in 8
    // tries DDIO without eADR first, which the server must refuse.
    const uint64_t platform = rng.below(8);
    platform_.eadr = platform >= 4;
    platform_.ddio = platform >= 6;
    try_unsafe_platform_ = platform == 0;
    // The server's knobs. Half the seeds let ReqToExecute lag as far as it
    // can (large buffers, group commit every 64, never on idleness):
    // recovery then re-runs long suffixes.
    so_.mode = rpc::Mode::kOrderedQueue;
    so_.workers = 2;
    so_.buffers = 2 + static_cast<uint32_t>(rng.below(3));
    so_.max_request_bytes = 512;
    so_.threaded = false;
    lagging_ = rng.below(2) == 0;
    if (lagging_) {
      so_.buffer_bytes = 4096;
      so_.req_to_execute_group = 64;
      so_.req_to_execute_idle_us = 1'000'000'000;
    } else {
      so_.buffer_bytes = std::array<uint32_t, 3>{512, 2048, 4096}[rng.below(3)];
      so_.req_to_execute_group = std::array<uint32_t, 3>{1, 4, 64}[rng.below(3)];
      so_.req_to_execute_idle_us = std::array<uint32_t, 3>{0, 20, 1'000'000'000}[rng.below(3)];
    }
    so_.clock = &world_.clock();
    so_.stall_probe_us = std::array<uint32_t, 3>{2'000, 20'000, 100'000}[rng.below(3)];
    // Short transport timeouts, so that a partition exhausts the retries in
    // a few milliseconds of virtual time (4.096 us * 2^8 ~ 1 ms).
    connect_.timeout = 8;
    connect_.retry_cnt = static_cast<uint8_t>(2 + rng.below(6));
    // How often the scheduler runs a worker and a session, relative to each
    // other: servers that keep up, clients that poll rarely (a worker then
    // executes a request before its client's READ has drained it), and the
    // other way round.
    worker_weight_ = 1 + rng.below(4);
    session_weight_ = 1 + rng.below(4);
    // Half the seeds use the smallest path MTU, so that larger requests are
    // several packets and the NIC completes them out of buffer order
    // (a short request that lands behind a long one completes first).
    connect_.path_mtu = rng.below(2) == 0 ? 256 : 4096;
    // Half the seeds interleave the client NIC's QPs packet by packet on the
    // wire: only then does a short request posted after a long one (another
    // session's) complete first; whole messages per turn never reorder.
    tx_burst_ = rng.below(2) == 0 ? 1 : 16;
    // Values up to 1, 2 or 4 packets at MTU 256: a long request on the wire
    // for a short one to overtake.
    value_pad_ = small_store_ ? 160 : std::array<uint32_t, 3>{160, 440, 900}[rng.below(3)];
    if (value_pad_ > 440) {
      so_.max_request_bytes = 1024;
      so_.buffer_bytes = std::max<uint32_t>(so_.buffer_bytes, 2048);
    }
    world_.event("juneberry: keys=" + std::to_string(keys_) + " buffers=" + std::to_string(so_.buffers) + "x" +
                 std::to_string(so_.buffer_bytes) + " group=" + std::to_string(so_.req_to_execute_group) +
                 " weights=" + std::to_string(worker_weight_) + ":" + std::to_string(session_weight_) +
                 " stall_probe=" + std::to_string(so_.stall_probe_us / 1000) + "ms platform=" +
                 platform_name(platform_) + (try_unsafe_platform_ ? " (tries ddio without eadr)" : "") +
                 " retry_cnt=" + std::to_string(connect_.retry_cnt) + " mtu=" + std::to_string(connect_.path_mtu) +
                 " tx_burst=" + std::to_string(tx_burst_) + " values<" + std::to_string(value_pad_ + 20) +
                 " store=" + std::to_string(store_bytes_ >> 10) + " KiB");
  }
  ~JuneBerrySim() {
    down_all();
    domain_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  RunResult run() {
    RunResult result;
    // A new directory: one named by pid and seed could be a dead process's,
    // whose PM files the server would recover from.
    auto dir = make_temp_dir("ferry-sim-juneberry");
    if (!dir.ok()) {
      fail(&result, "setup", dir.status().to_string());
      return finish(std::move(result));
    }
    dir_ = std::move(dir).value();
    if (!boot(&result)) return finish(std::move(result));
    // Faults happen during the workload; then they stop, the network heals,
    // and every session must be able to read every key (liveness), which
    // also makes the final state part of the history.
    while (issued_ < ops_ && result.invariant.empty()) {
      const uint64_t before = issued_;
      if (!step(&result)) break;
      if (issued_ != before) {
        last_issue_step_ = steps_;
        last_issue_ns_ = world_.now();
      }
      if (steps_ - last_issue_step_ > kStallSteps) {
        // Every session waits on calls that cannot finish: a full store
        // (the NIC answers RNR until admission finds room) is that by
        // design; anything else must clear up (retries run out, the stall
        // probe finds a dead client) well within kStallNs.
        if (store_full()) break;
        if (world_.now() - last_issue_ns_ > kStallNs) {
          fail(&result, "live",
               "no session could issue an operation for " + std::to_string(kStallNs / 1'000'000) +
                   " ms of virtual time");
        }
      }
    }
    if (result.invariant.empty()) quiesce(&result);
    if (result.invariant.empty()) check(&result);
    return finish(std::move(result));
  }

  static constexpr uint64_t kDefaultOps = 150;
  static constexpr uint64_t kStallSteps = 60'000;
  static constexpr double kHostFailureScale = 3.0;
  static constexpr double kDyingClientScale = 5.0;
  static constexpr uint64_t kStallNs = 2'000'000'000;

 private:
  static std::string platform_name(const pm::PlatformConfig& p) {
    return p.ddio ? (p.eadr ? "eadr+ddio" : "ddio-without-eadr") : (p.eadr ? "eadr" : "adr");
  }

  RunResult finish(RunResult result) {
    for (const auto& op : history_) {
      result.pending += !op.complete_ns.has_value();
      if (op.complete_ns && op.kind != KvOp::kGet) ++result.acknowledged;
      if (op.complete_ns && op.kind == KvOp::kGet) ++result.reads;
    }
    result.ops = issued_;
    if (engine_ != nullptr) count_packet_faults();
    world_.count(FaultKind::kPacketLoss, lost_);
    world_.count(FaultKind::kPacketDuplicate, duplicated_);
    world_.count(FaultKind::kPacketDelay, delayed_);
    result.ok = result.invariant.empty();
    world_.finish(&result);
    return result;
  }

  void fail(RunResult* r, std::string invariant, std::string detail) {
    if (!r->invariant.empty()) return;
    world_.event("VIOLATION " + invariant + ": " + detail);
    r->invariant = std::move(invariant);
    r->detail = std::move(detail);
  }

  // ---- the machines ----

  bool boot(RunResult* r) {
    pm::PlatformConfig platform = platform_;
    if (try_unsafe_platform_) {
      // A durable server whose persistent ACK is not persistent must not start.
      domain_ = std::make_unique<pm::PersistenceDomain>(pm::PlatformConfig{.ddio = true, .eadr = false});
      map_regions();
      const Status st = up(/*recover=*/false);
      if (st.ok()) {
        fail(r, "platform-refused",
             "a durable server started on DDIO without eADR, where a persistent ACK does not mean persisted");
        return false;
      }
      world_.event("server refused ddio-without-eadr: " + st.to_string());
      down_all();
      domain_.reset();
      regions_.clear();
    }
    domain_ = std::make_unique<pm::PersistenceDomain>(platform);
    map_regions();
    if (Status st = up(/*recover=*/false); !st.ok()) {
      fail(r, "boot", st.to_string());
      return false;
    }
    return true;
  }

  void map_regions() {
    const rpc::DurableLayout layout{so_.buffers, so_.buffer_bytes, so_.stride_bytes};
    const size_t area = (so_.workers * layout.area_bytes() + 4095) / 4096 * 4096;
    regions_.clear();
    regions_.push_back(domain_->map_pm(dir_ + "/srq", area, true).value());
    for (uint32_t w = 0; w < so_.workers; ++w) {
      regions_.push_back(domain_->map_pm(dir_ + "/data" + std::to_string(w), store_bytes_, true).value());
    }
  }

  // The server host (its NIC, the server, the service) and the client host.
  Status up(bool recover) {
    nic::EngineOptions eo;
    eo.threaded = false;
    eo.clock = &world_.clock();
    eo.faults.seed = world_.fault_below(UINT64_MAX);
    eo.faults.drop = world_.rates()[FaultKind::kPacketLoss];
    eo.faults.duplicate = world_.rates()[FaultKind::kPacketDuplicate];
    eo.faults.delay = world_.rates()[FaultKind::kPacketDelay];
    eo.faults.delay_max_ns = 50'000;
    eo.tx_burst = tx_burst_;
    engine_ = std::make_unique<nic::Engine>(eo);
    nic::NicOptions sno;
    sno.name = "server";
    sno.memory = domain_.get();
    server_nic_ = engine_->add_nic(sno).value();
    client_nic_ = engine_->add_nic({.name = "client"}).value();
    engine_->fabric().set_tap([this](const nic::Packet& p) { return cut(p.dst_nic); });
    rpc::ServerOptions so = so_;
    so.recover = recover;
    so.durable_region = regions_[0];
    order_.reset(so.workers);  // a new server: its positions start afresh
    so.on_execute = [this](const rpc::Request& q) {
      if (const std::string v = order_.note(q); !v.empty()) world_.event("VIOLATION executed-in-order: " + v);
    };
    auto server = rpc::Server::create(*engine_, *server_nic_, so);
    if (!server.ok()) return server.status();
    server_ = std::move(server).value();
    std::vector<pm::Region*> data(regions_.begin() + 1, regions_.end());
    auto svc = store::PmKvService::attach(*server_, *domain_, data, /*open_existing=*/recover);
    if (!svc.ok()) return svc.status();
    svc_ = std::move(svc).value();
    if (Status st = server_->start(); !st.ok()) return st;
    world_.event(recover ? "server recovered from PM" : "server started");
    return new_client();
  }

  Status new_client() {
    kv_.clear();
    client_.reset();
    rpc::ClientOptions co;
    co.sessions = kSessions;
    co.max_inflight = kMaxInflight;
    co.connect = connect_;
    auto client = rpc::Client::create(*engine_, *client_nic_, *server_, co);
    if (!client.ok()) return client.status();
    client_ = std::move(client).value();
    for (uint32_t s = 0; s < kSessions; ++s) kv_.push_back(std::make_unique<KvClient>(client_->session(s)));
    ++client_generation_;
    world_.event("client " + std::to_string(client_generation_) + " connected");
    return ok_status();
  }

  // Everything of both hosts goes; what was in flight stays pending.
  void down_all() {
    dying_.clear();
    kv_.clear();
    client_.reset();
    svc_.reset();
    server_.reset();
    if (engine_ != nullptr) count_packet_faults();
    engine_.reset();
  }

  void count_packet_faults() {
    const auto& c = engine_->fabric().counters();
    lost_ += c.dropped_fault.get();
    duplicated_ += c.duplicated_fault.get();
    delayed_ += c.delayed_fault.get();
  }

  bool cut(uint32_t dst) const {
    if (partition_until_ == 0) return false;
    const bool to_server = server_nic_ != nullptr && dst == server_nic_->address();
    return to_server ? cut_to_server_ : cut_to_client_;
  }

  // ---- the scheduler ----

  bool step(RunResult* r) {
    Rng& rng = world_.rng();
    ++steps_;
    if (partition_until_ != 0 && world_.now() >= partition_until_) {
      partition_until_ = 0;
      world_.event("partition healed");
    }
    if (rng.below(3) == 0) issue(r);
    if (!r->invariant.empty()) return false;
    bool busy = engine_->step();
    // Which core runs after the engine: a worker or a session, by the
    // seed's weights (or nobody this step).
    const uint64_t what = rng.below(worker_weight_ + session_weight_ + 1);
    if (what < worker_weight_) {
      const uint32_t w = static_cast<uint32_t>(rng.below(so_.workers));
      if (w != slow_worker_ || world_.now() >= slow_until_ || rng.below(16) == 0) {
        busy |= server_->poll_worker(w) != 0;
      }
    } else if (what < worker_weight_ + session_weight_) {
      busy |= client_->session(static_cast<uint32_t>(rng.below(kSessions))).poll() != 0;
    }
    // A cut taken while the worker ran: strike before the engine steps
    // again, so nothing the worker did after it leaves the host.
    if (armed_.kind != Armed::kNone && (armed_.at_fence             ? domain_->cut_taken()
                                        : armed_.after_replies != 0 ? get_replies_ >= armed_.after_replies
                                        : armed_.after_commits != 0 ? commit_strikes()
                                                                    : steps_ >= armed_.at_step)) {
      return strike_host(r);
    }
    advance(busy);
    return true;
  }

  // Time: a little every step; when nothing ran, to the next timer or
  // delayed packet (a partition that waits for retries to run out).
  void advance(bool busy) {
    Rng& rng = world_.rng();
    if (busy) {
      world_.clock().advance_ns(rng.below(kStepNs));
      return;
    }
    uint64_t next = engine_->next_deadline_ns();
    if (partition_until_ != 0) next = std::min(next, partition_until_);
    if (next != UINT64_MAX && next > world_.now()) {
      world_.clock().advance_to(next);
    } else {
      world_.clock().advance_ns(1 + rng.below(kStepNs));
    }
  }

  // One workload operation (and the faults that may strike during it).
  void issue(RunResult* r) {
    Rng& rng = world_.rng();
    const uint32_t s = static_cast<uint32_t>(rng.below(kSessions));
    if (client_->session(s).inflight() >= kMaxInflight) return;
    ++issued_;
    strike_faults(r);
    const uint64_t k = next_key();
    const uint64_t what = rng.below(100);
    const uint64_t blocking = lagging_ ? 2 : 10;  // non-nilext puts, in percent
    Status st;
    if (what < 50) {
      st = issue_put(s, k, /*nilext=*/true);
    } else if (what < 50 + blocking) {
      st = issue_put(s, k, /*nilext=*/false);
    } else if (what < 60 + blocking) {
      st = issue_remove(s, k);
    } else {
      st = issue_get(s, k);
    }
    if (st.code() == Code::kUnavailable) {
      // This client's connection failed (a partition ran out its retries,
      // or the server went): it resumes on new QPs.
      world_.event("client " + std::to_string(client_generation_) + " lost its connection: " + st.to_string());
      if (Status c = new_client(); !c.ok()) fail(r, "live", "a client could not reconnect: " + c.to_string());
    }
  }

  void strike_faults(RunResult* r) {
    if (world_.strike(FaultKind::kPartition) && partition_until_ == 0) {
      const uint64_t way = world_.fault_below(3);
      cut_to_server_ = way != 1;
      cut_to_client_ = way != 0;
      partition_until_ = world_.now() + 1 + world_.fault_below(20'000'000);
      world_.event(std::string("partition: ") +
                   (way == 0   ? "client->server"
                    : way == 1 ? "server->client"
                               : "both ways") +
                   " until " + std::to_string(partition_until_ / 1000) + " us");
    }
    if (armed_.kind == Armed::kNone) {
      // Three times the rate: a JUNE BERRY operation is short, and what the
      // simulator is for here is the moment a host fails.
      const bool power = world_.strike(FaultKind::kPowerFailure, kHostFailureScale);
      const bool crash = !power && world_.strike(FaultKind::kProcessCrash, kHostFailureScale);
      if (power || crash) {
        armed_.kind = power ? Armed::kPower : Armed::kCrash;
        // When: after a get's reply; at a step; the instant a client learns
        // that a write committed (what a committed write must survive,
        // whatever the worker has or has not done with it yet); or at a
        // crash point.
        const uint64_t when = world_.fault_below(4);
        if (when == 0) {
          armed_.after_replies = get_replies_ + 1 + world_.fault_below(20);
        } else if (when == 3) {
          armed_.after_commits = commits_ + 1 + world_.fault_below(20);
          armed_.unexecuted = world_.fault_below(2) == 0;
        } else if (when == 1) {
          armed_.at_step = steps_ + 1 + world_.fault_below(400);
        } else {
          arm_fence(armed_.kind);
        }
      }
    }
    if (world_.strike(FaultKind::kSlowHost)) {
      slow_worker_ = static_cast<uint32_t>(world_.fault_below(so_.workers));
      slow_until_ = world_.now() + 1 + world_.fault_below(2'000'000);
      world_.event("worker " + std::to_string(slow_worker_) + " slow until " + std::to_string(slow_until_ / 1000) +
                   " us");
    }
    // A client that dies right after its SEND is cheap and is what leaves
    // executed requests in the NIC's buffer, undrained by any READ, for a
    // power failure to take: five times the rate.
    if (world_.strike(FaultKind::kClientCrash, kDyingClientScale) && dying_.size() < 32) issue_dying(next_key());
    if (world_.strike(FaultKind::kClientCrash)) {
      world_.event("client " + std::to_string(client_generation_) + " dies with its calls in flight");
      if (Status c = new_client(); !c.ok()) fail(r, "live", "a client could not reconnect: " + c.to_string());
    }
  }

  void arm_fence(Armed::Kind kind) {
    armed_ = {};
    armed_.kind = kind;
    armed_.at_fence = true;
    const uint64_t fences = 1 + world_.fault_below(300);
    domain_->arm_cut(fences);
    world_.event(std::string(kind == Armed::kPower ? "power failure" : "process crash") + " armed at fence " +
                 std::to_string(fences) + " from now");
  }

  // The armed power failure or process crash strikes: everything in flight
  // stays pending forever; the server recovers from PM. One time in four
  // the power goes again while it recovers (at one of its fences).
  bool strike_host(RunResult* r) {
    for (int again = 0;; ++again) {
      const bool power = armed_.kind == Armed::kPower;
      const bool cut = armed_.at_fence && domain_->cut_taken();
      armed_ = {};
      count_packet_faults();
      const std::string where = cut ? " at a crash point (a fence of its CPU)" : "";
      if (power) {
        const pm::PowerFailReport report = domain_->power_fail(world_.fault_below(UINT64_MAX));
        world_.event("POWER FAILURE of the server host" + where + ": " + std::to_string(report.nic_write_torn) +
                     " torn DMA writes");
      } else {
        domain_->process_crash();
        world_.event("server process CRASH (DRAM lost, PM kept)" + where);
      }
      domain_->arm_cut(0);
      down_all();
      partition_until_ = 0;  // the hosts restart; the network is fine
      if (again < 2 && world_.fault_below(4) == 0) arm_fence(power ? Armed::kPower : Armed::kCrash);
      if (Status st = up(/*recover=*/true); !st.ok()) {
        fail(r, "recovers", "the server did not recover: " + st.to_string());
        return false;
      }
      recovered_ += server_->counters().recovered;
      if (!(armed_.at_fence && domain_->cut_taken())) break;
      world_.event("the power went again during recovery");
    }
    return true;
  }

  bool commit_strikes() const {
    if (commits_ < armed_.after_commits) return false;
    return !armed_.unexecuted || last_commit_unexecuted_ || commits_ >= armed_.after_commits + 50;
  }

  // Whether a put's value is in its worker's store (a later put to the key
  // may have replaced it: then it was executed too, and this says no, which
  // only makes a failure strike there).
  bool executed(const KvOp& put) {
    const std::string key = key_name(put.key);
    const auto w = static_cast<uint32_t>(store::key_route(key) % so_.workers);
    auto got = svc_->partition(w).get(key);
    return got.ok() && value_number(*got) == put.value;
  }

  // ---- operations ----

  uint64_t next_key() { return small_store_ ? world_.rng().below(keys_) : zipf_->next(world_.rng()); }

  // History timestamps: virtual time, made strictly increasing (several
  // events may happen at one instant).
  uint64_t tick() {
    last_tick_ = std::max(last_tick_ + 1, world_.now());
    return last_tick_;
  }

  size_t record(KvOp op) {
    if (op.kind != KvOp::kGet) written_.insert(op.key);
    history_.push_back(op);
    return history_.size() - 1;
  }

  Status issue_put(uint32_t s, uint64_t k, bool nilext) {
    const uint64_t v = ++next_value_;
    const size_t i = record(KvOp::put(s, k, v, tick(), std::nullopt));
    fifo_[{client_generation_ * kSessions + s, k}].push_back(i);
    const std::string value = value_text(v, static_cast<uint32_t>(world_.rng().below(value_pad_)));
    world_.event("s" + std::to_string(s) + " put" + (nilext ? "" : "(blocking)") + " k" + std::to_string(k) + "=" +
                 std::to_string(v));
    const Status st = kv_[s]->pm_put_async(key_name(k), value, nilext, [this, i, nilext](const rpc::CallResult& r) {
      const bool committed =
          r.status.ok() && (nilext ? r.commit == rpc::Commit::kPersistentAck
                                   : r.commit == rpc::Commit::kReply && r.app_status == store::kPmOk);
      world_.event("put " + std::to_string(*history_[i].value) + (committed ? " committed" : " failed"));
      if (committed) {
        history_[i].complete_ns = tick();
        ++commits_;
        // Looked up only for an armed strike that waits for such a commit
        // (an earlier commit's answer is never read: arming counts from the
        // next one).
        last_commit_unexecuted_ = armed_.after_commits != 0 && armed_.unexecuted && !executed(history_[i]);
      }
    });
    if (!st.ok()) {
      world_.event("  not sent: " + st.to_string());
      history_.pop_back();
      fifo_[{client_generation_ * kSessions + s, k}].pop_back();
      --next_value_;
    }
    return st;
  }

  Status issue_remove(uint32_t s, uint64_t k) {
    const size_t i = record(KvOp::remove(s, k, tick(), std::nullopt));
    fifo_[{client_generation_ * kSessions + s, k}].push_back(i);
    world_.event("s" + std::to_string(s) + " remove k" + std::to_string(k));
    const Status st =
        kv_[s]->request_async(store::kPmRemove, key_name(k), {}, 0, 0, 0, [this, i](const rpc::CallResult& r) {
          const bool committed = r.status.ok() && r.commit == rpc::Commit::kPersistentAck;
          world_.event("remove op" + std::to_string(i) + (committed ? " committed" : " failed"));
          if (committed) {
            history_[i].complete_ns = tick();
            ++commits_;
            last_commit_unexecuted_ = false;  // not looked at for a remove
          }
        });
    if (!st.ok()) {
      world_.event("  not sent: " + st.to_string());
      history_.pop_back();
      fifo_[{client_generation_ * kSessions + s, k}].pop_back();
    }
    return st;
  }

  Status issue_get(uint32_t s, uint64_t k) {
    const size_t i = record(KvOp::get(s, k, std::nullopt, tick(), std::nullopt));
    const Status st = kv_[s]->pm_get_async(key_name(k), [this, i](const rpc::CallResult& r) {
      if (!r.status.ok() || r.commit != rpc::Commit::kReply) {
        world_.event("get op" + std::to_string(i) + " failed");
        return;
      }
      if (r.app_status == store::kPmNotFound) {
        history_[i].complete_ns = tick();
        world_.event("get k" + std::to_string(history_[i].key) + " -> absent");
      } else if (r.app_status == store::kPmOk) {
        const std::string_view text(reinterpret_cast<const char*>(r.payload.data()), r.payload.size());
        const auto v = value_number(text);
        if (!v || *v == 0 || *v > next_value_) {
          bad_value_ = "a get of key" + std::to_string(history_[i].key) + " returned bytes no put wrote: '" +
                       std::string(text.substr(0, 32)) + "'";
          return;
        }
        history_[i].value = *v;
        history_[i].complete_ns = tick();
        world_.event("get k" + std::to_string(history_[i].key) + " -> " + std::to_string(*v));
      }
      ++get_replies_;
    });
    if (!st.ok()) {
      history_.pop_back();
    } else {
      world_.event("s" + std::to_string(s) + " get k" + std::to_string(k));
    }
    return st;
  }

  // A put or remove from a client that dies after its SEND: pending forever.
  void issue_dying(uint64_t k) {
    const uint32_t w = static_cast<uint32_t>(store::key_route(key_name(k)) % so_.workers);
    dying_.push_back(std::make_unique<DyingClient>(*client_nic_, *server_, w, connect_));
    const uint64_t id = 1'000'000 + dying_.size();
    if (world_.fault_below(4) == 0) {
      if (dying_.back()->send(store::kPmRemove, key_name(k), {}, id)) {
        record(KvOp::remove(kDyingClient, k, tick(), std::nullopt));
        world_.event("dying client: remove k" + std::to_string(k) + ", then dies");
      }
    } else {
      const uint64_t v = ++next_value_;
      if (dying_.back()->send(store::kPmPut, key_name(k),
                              value_text(v, static_cast<uint32_t>(world_.fault_below(value_pad_))), id)) {
        record(KvOp::put(kDyingClient, k, v, tick(), std::nullopt));
        world_.event("dying client: put k" + std::to_string(k) + "=" + std::to_string(v) + ", then dies");
      }
    }
  }

  // ---- the end ----

  // The faults stop and the network heals; a fresh client (its sessions on
  // new QPs) reads every key from every session. Everything must finish.
  void quiesce(RunResult* r) {
    partition_until_ = 0;
    slow_until_ = 0;
    armed_ = {};
    domain_->arm_cut(0);
    engine_->fabric().set_faults({});
    world_.event("faults stop; every session reads every key written");
    drain(20'000);
    if (Status c = new_client(); !c.ok()) {
      fail(r, "live", "no client could connect after the faults stopped: " + c.to_string());
      return;
    }
    std::vector<size_t> finals;
    for (uint32_t s = 0; s < kSessions; ++s) {
      for (uint64_t k : written_) {
        const size_t before = history_.size();
        Status st = issue_get(s, k);
        for (int tries = 0; st.code() == Code::kResourceExhausted && tries < 100'000; ++tries) {
          drain_step();  // the session's calls in flight are at the limit
          st = issue_get(s, k);
        }
        if (!st.ok()) {
          if (store_full()) return;
          fail(r, "live", "a final get could not be sent: " + st.to_string());
          return;
        }
        finals.push_back(before);
      }
    }
    drain(200'000);
    if (store_full()) return;
    for (size_t i : finals) {
      if (!history_[i].complete_ns) {
        fail(r, "live",
             "session " + std::to_string(history_[i].client) + "'s get of key" + std::to_string(history_[i].key) +
                 " never completed after the faults stopped");
        return;
      }
    }
  }

  // A store that has no room for a buffer's requests leaves the buffer
  // unposted (admission), so a full store takes nothing, gets included:
  // JUNE BERRY's design, not a hang. Liveness is required of the rest.
  bool store_full() {
    const uint64_t refusals = server_->counters().admission_refusals;
    if (refusals == 0) return false;
    world_.event("the store is full (" + std::to_string(refusals) + " admission refusals): final reads may wait");
    return true;
  }

  // One round of everything; true if anything ran or is in flight.
  bool drain_step() {
    bool busy = engine_->step();
    for (uint32_t w = 0; w < so_.workers; ++w) busy |= server_->poll_worker(w) != 0;
    for (uint32_t s = 0; s < kSessions; ++s) busy |= client_->session(s).poll() != 0;
    advance(busy);
    bool outstanding = false;
    for (uint32_t s = 0; s < kSessions; ++s) outstanding |= client_->session(s).inflight() != 0;
    return busy || outstanding;
  }
  void drain(int max_steps) {
    for (int i = 0; i < max_steps && drain_step(); ++i) {
    }
  }

  void check(RunResult* r) {
    if (auto broken = juneberry::check_run(order_, bad_value_, *svc_, so_.workers, history_, fifo_)) {
      fail(r, broken->invariant, broken->detail);
    }
  }

  World world_;
  RunOptions options_;
  uint64_t ops_ = 0;
  uint64_t keys_ = 2;
  bool small_store_ = false;
  uint32_t tx_burst_ = 16;
  uint32_t value_pad_ = 160;                         // a value's padding is drawn below this
  uint64_t worker_weight_ = 2, session_weight_ = 3;  // the scheduler's (per seed)
  size_t store_bytes_ = 256 << 10;
  std::unique_ptr<workload::ZipfianGenerator> zipf_;
  pm::PlatformConfig platform_;
  bool try_unsafe_platform_ = false;
  bool lagging_ = false;
  rpc::ServerOptions so_;
  nic::ConnectOptions connect_;
  std::string dir_;

  std::unique_ptr<pm::PersistenceDomain> domain_;
  std::vector<pm::Region*> regions_;  // [0]: the server's durable area; then one PmKv per worker
  std::unique_ptr<nic::Engine> engine_;
  nic::Nic* server_nic_ = nullptr;
  nic::Nic* client_nic_ = nullptr;
  std::unique_ptr<rpc::Server> server_;
  std::unique_ptr<store::PmKvService> svc_;
  std::unique_ptr<rpc::Client> client_;
  std::vector<std::unique_ptr<KvClient>> kv_;
  std::vector<std::unique_ptr<DyingClient>> dying_;
  uint64_t client_generation_ = 0;

  uint64_t steps_ = 0, issued_ = 0, last_issue_step_ = 0, last_issue_ns_ = 0, last_tick_ = 0, next_value_ = 0,
           get_replies_ = 0, commits_ = 0, recovered_ = 0;
  uint64_t lost_ = 0, duplicated_ = 0, delayed_ = 0;
  bool last_commit_unexecuted_ = false;
  Armed armed_;
  uint64_t partition_until_ = 0;
  bool cut_to_server_ = false, cut_to_client_ = false;
  uint32_t slow_worker_ = 0;
  uint64_t slow_until_ = 0;
  std::vector<KvOp> history_;
  std::set<uint64_t> written_;  // keys some put or remove was sent for
  juneberry::WritesByQp fifo_;
  std::string bad_value_;
  juneberry::ExecutionOrder order_;  // fed by the server's on_execute
};

}  // namespace

System juneberry_system() {
  System s;
  s.name = "juneberry";
  s.description = "JUNE BERRY-D: a durable Ordered Queue server with PmKv, client sessions sharing hot keys across QPs";
  s.faults = {FaultKind::kPacketLoss,   FaultKind::kPacketDuplicate, FaultKind::kPacketDelay, FaultKind::kPartition,
              FaultKind::kProcessCrash, FaultKind::kPowerFailure,    FaultKind::kSlowHost,    FaultKind::kClientCrash};
  s.default_ops = JuneBerrySim::kDefaultOps;
  s.run = [](const RunOptions& o) { return JuneBerrySim(o).run(); };
  return s;
}

}  // namespace ferry::sim
