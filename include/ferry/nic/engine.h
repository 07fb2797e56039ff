// The Engine drives the NICs of one process and the in-process fabric
// between them. It stands for the hardware: NIC work never runs on an
// application thread.
//
// Two modes:
//  - threaded (default): one engine thread runs all NICs. It spins while there
//    is work and for `spin_ns` after the last work, then sleeps until a
//    doorbell, a control request or the next timer/packet deadline.
//  - manual: nothing runs until the caller calls step()/run_until_idle().
//    With a FakeClock this is a deterministic simulator: same seed, same
//    packets, same results.
//
// A NIC may also own a UDP socket (NicOptions::udp) and reach the NICs of
// other Engines -- other processes or hosts -- with RoCEv2 datagrams
// (docs/wire-format.md, "RoCEv2 over UDP"): resolve() turns a peer's
// endpoint into an address for QpAttr::dest_nic. The engine polls the
// sockets every pass; asleep, it also wakes for arriving datagrams.
//
// The NIC core is sans-IO: its inputs are doorbells, packets and time, its
// outputs are packets (to the fabric), completions and DMA into host memory
// (through HostMemory).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/counter.h"
#include "ferry/common/idle_sampler.h"
#include "ferry/common/parker.h"
#include "ferry/common/status.h"
#include "ferry/nic/fabric.h"
#include "ferry/nic/verbs.h"

namespace ferry::nic {

// The name every engine thread carries (pthread_setname_np), so that tools
// (top -H, perf) and `bench nic --transport udp` find a daemon's engine in
// /proc/<pid>/task/*/comm (at most 15 characters).
inline constexpr char kEngineThreadName[] = "ferry-engine";

struct EngineOptions {
  bool threaded = true;
  Clock* clock = nullptr;           // TSC (or CLOCK_MONOTONIC) when null; FakeClock for simulation
  int cpu = -1;                     // pin the engine thread to this CPU (-1: no pinning)
  int fifo_priority = 0;            // SCHED_FIFO priority for the engine thread (0: normal)
  uint64_t spin_ns = 200'000;       // keep polling this long after the last work
  // How the engine polls during spin_ns. kBusy: a pause instruction between
  // passes, for an engine with a CPU of its own. kShared: sched_yield between
  // passes, for engines that share cores with other engines and applications
  // (several NIC daemons on one machine): a task woken on this CPU (the
  // daemon that will produce the engine's next packet) runs at the engine's
  // next pass instead of waiting out its time slice (docs/nic-performance.md).
  enum class SpinPolicy : uint8_t { kBusy, kShared };
  SpinPolicy spin_policy = SpinPolicy::kBusy;
  // A QP whose doorbell rang twice within this long is watched (its doorbell
  // record polled every pass, so posts need no doorbell queue or wakeup)
  // until it is quiet this long.
  uint64_t doorbell_watch_ns = 100'000;
  size_t fabric_queue_packets = 8192;  // per-NIC inbound queue
  size_t fabric_buffers = 2048;        // 4 KiB payload buffers in the pool
  size_t rx_budget = 64;               // packets a NIC handles per engine pass
  // Packets a QP sends per turn of its NIC's round-robin transmit
  // scheduler. 1 interleaves every QP's messages packet by packet on the
  // wire (what a NIC's per-packet arbitration does under load), so a short
  // message posted after a long one on another QP can complete first.
  uint32_t tx_burst = 16;
  FaultModel faults;
  // A modeled one-way wire delay for every packet (0: none, the emulator's
  // own speed). For showing network-round-trip effects; never a default.
  uint64_t wire_delay_ns = 0;
  // Time the engine's passes that found nothing to do (sampled:
  // ferry/common/idle_sampler.h) -- step()'s in manual mode, the thread's
  // spinning passes in threaded mode, where its sleeps count whole --,
  // reported as EngineStats::idle_pass_ns: 1 - idle / wall time is how busy
  // the core that runs the NICs was.
  bool account_idle = false;
  // Wakeups from other processes (the NIC daemon, src/nicd/): when set, the
  // engine always sleeps in ppoll on wake_fd() and publishes that it is
  // asleep in *park_flag, which may live in memory shared with the posting
  // processes; they write wake_fd() (passed to them) when it is true.
  std::atomic<bool>* park_flag = nullptr;
};

struct EngineStats {
  uint64_t passes = 0;        // engine loop iterations
  uint64_t busy_passes = 0;   // iterations that did work
  uint64_t sleeps = 0;        // times the thread blocked
  uint64_t wakeups = 0;       // times a poster had to wake it
  uint64_t thread_cpu_ns = 0; // CPU time of the engine thread (threaded mode)
  uint64_t idle_pass_ns = 0;  // with account_idle: time in passes that did nothing (and, threaded, asleep)
};

class Engine {
 public:
  explicit Engine(const EngineOptions& options = {});
  ~Engine();  // stops the thread; NICs and their objects must be destroyed first
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Adds a NIC attached to the fabric. The Nic lives as long as the Engine.
  // With options.udp.enabled it also binds a UDP socket (errors: those of
  // the bind address, e.g. kUnavailable "address in use", or an interface
  // MTU too small for RoCEv2); nothing is added then.
  Result<Nic*> add_nic(const NicOptions& options = {});
  Nic* nic(uint32_t address) const;

  // The address of a peer NIC's UDP endpoint (its GID's IPv4 address and its
  // port), for QpAttr::dest_nic of a QP on a UDP-attached NIC of this
  // Engine. The same endpoint always gives the same address; a local NIC's
  // own endpoint gives its in-process address. kInvalidArgument for address
  // 0.0.0.0 or port 0; kResourceExhausted beyond Fabric::kMaxRemotes. Any thread.
  Result<uint32_t> resolve(const UdpEndpoint& endpoint);
  // The endpoint behind an address resolve() returned; kNotFound otherwise.
  Result<UdpEndpoint> remote_endpoint(uint32_t address) const;

  bool threaded() const { return options_.threaded; }
  const Clock& clock() const { return *clock_; }
  const EngineOptions& options() const { return options_; }
  Fabric& fabric() { return *fabric_; }
  EngineStats stats() const;
  // True while the engine thread is parked (idle past spin_ns).
  bool sleeping() const { return parker_.parked(); }

  // ---- manual mode ----
  // One pass over every NIC and the fabric. Returns true if anything happened.
  bool step();
  // Steps until nothing is left to do; with a FakeClock, advances time to
  // each next deadline (timers, delayed packets) until none remain or
  // `max_time_ns` of simulated time passed. kTimedOut if work remained.
  Status run_until_idle(uint64_t max_time_ns = 60'000'000'000ULL);
  // Steps (advancing a FakeClock when idle) until pred() is true.
  Status run_until(const std::function<bool()>& pred, uint64_t max_time_ns = 60'000'000'000ULL);
  // The earliest timer or delayed-packet deadline, or UINT64_MAX: for a
  // caller that steps several manual engines (over UDP) on one FakeClock.
  uint64_t next_deadline_ns() const;

  // Manual mode, when one thread steps the engine while others use its NICs
  // (a benchmark's client thread standing for every NIC, with server threads
  // that register memory): from now on control operations (run_control:
  // memory registration, QP changes, ...) of other threads are queued for
  // the calling thread's next step() instead of running on their own
  // thread, so the NIC's state has one writer. The caller must keep stepping
  // while other threads may wait. release_manual_driver() ends it (running
  // what is queued).
  void set_manual_driver();
  void release_manual_driver();
  // Whether the calling thread may step() this engine: a manual engine
  // with no driver named, or its driver. (A threaded engine: never.)
  bool may_step() const;

  // ---- used by the NIC core ----
  // Runs `fn` on the engine (immediately in manual mode or on the engine
  // thread, else handed to the engine thread and waited for).
  void run_control(const std::function<void()>& fn);
  // Wakes the engine thread if it is asleep (after publishing a doorbell).
  void notify() {
    parker_.unpark();
    // Asleep on its sockets rather than the futex (UDP NICs): see park_on_sockets.
    if (socket_parked_->load(std::memory_order_seq_cst)) wake_sockets();
  }
  bool on_engine_thread() const;
  // The eventfd that wakes the engine when it sleeps on its sockets.
  int wake_fd() const { return wake_fd_; }

 private:
  void thread_main();
  Status simulate(const std::function<bool()>* pred, uint64_t max_time_ns);
  bool pass(uint64_t now);
  bool run_commands();
  // Sleeps until a doorbell/command (the wake eventfd), a datagram, room in
  // a socket that has datagrams waiting, or `timeout_ns` (0 = none).
  void park_on_sockets(uint64_t timeout_ns);
  void wake_sockets();

  EngineOptions options_;
  Clock* clock_;
  std::unique_ptr<Fabric> fabric_;
  std::vector<std::unique_ptr<detail::NicCore>> cores_;
  std::vector<std::unique_ptr<Nic>> nics_;

  // Control commands handed to the engine thread. The engine stores `done`
  // (release) under cmd_mu_ and then notifies cmd_cv_; the caller first
  // spins on it (acquire) for up to kControlSpinNs, then waits on cmd_cv_.
  struct Command {
    const std::function<void()>* fn;
    std::atomic<bool> done{false};
  };
  static constexpr uint64_t kControlSpinNs = 100'000;
  std::mutex cmd_mu_;
  std::condition_variable cmd_cv_;
  std::vector<Command*> commands_;  // guarded by cmd_mu_
  std::atomic<bool> commands_pending_{false};

  Parker parker_;
  // With UDP NICs the engine sleeps in ppoll() on its sockets and wake_fd_
  // instead of the Parker's futex. The engine stores socket_parked_ (seq_cst)
  // true before its last look for work and false after waking; a waker
  // publishes its work, then loads it (seq_cst) and writes wake_fd_ if true:
  // the Parker's Dekker handshake, with the eventfd as the wakeup.
  std::atomic<bool> own_socket_parked_{false};
  std::atomic<bool>* socket_parked_ = &own_socket_parked_;  // or EngineOptions::park_flag
  int wake_fd_ = -1;  // eventfd, created with the first UDP NIC (engine thread)
  std::vector<Fabric::UdpWait> wait_set_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::thread::id engine_thread_id_;
  std::atomic<bool> manual_driver_{false};
  Counter passes_, busy_passes_, sleeps_;
  IdleSampler idle_;  // account_idle: step()'s passes that did nothing
};

}  // namespace ferry::nic
