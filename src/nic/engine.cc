// The engine loop: drives every NIC and the fabric, in a thread of its own or
// step by step under a caller (deterministic simulation).
#include "ferry/nic/engine.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "device.h"
#include "ferry/common/cpu.h"
#include "ferry/common/tsc.h"
#include "nic_core.h"
#include "udp_transport.h"

namespace ferry::nic {

static Clock* default_clock() {
  // The engine reads the time every pass; the TSC is cheaper where invariant.
  if (Tsc::invariant()) return &TscClock::instance();
  return &SteadyClock::instance();
}

Engine::Engine(const EngineOptions& options)
    : options_(options), clock_(options.clock ? options.clock : default_clock()) {
  fabric_ = std::make_unique<Fabric>(options.fabric_queue_packets, options.fabric_buffers, options.faults,
                                     options.wire_delay_ns);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  FERRY_ASSERT(wake_fd_ >= 0, "eventfd failed");
  if (options_.park_flag != nullptr) socket_parked_ = options_.park_flag;
  if (options_.threaded) {
    thread_ = std::thread([this] { thread_main(); });
    engine_thread_id_ = thread_.get_id();
  }
}

Engine::~Engine() {
  if (thread_.joinable()) {
    stop_.store(true, std::memory_order_seq_cst);
    notify();
    thread_.join();
  }
  close(wake_fd_);
}

void Engine::wake_sockets() {
  const uint64_t one = 1;
  // Only fails with EAGAIN when the counter is near overflow: already awake.
  (void)!write(wake_fd_, &one, sizeof(one));
}

bool Engine::on_engine_thread() const { return std::this_thread::get_id() == engine_thread_id_; }

Result<Nic*> Engine::add_nic(const NicOptions& options) {
  // The socket first: a bind that fails must leave nothing attached.
  std::unique_ptr<detail::UdpPort> port;
  if (options.udp.enabled) {
    FERRY_ASSIGN_OR_RETURN(port, detail::UdpPort::open(options.udp, options_.rx_budget));
  }
  Nic* nic = nullptr;
  run_control([&] {
    auto core = std::make_unique<detail::NicCore>(this, fabric_.get(), options);
    if (port != nullptr) {
      core->set_udp_port(port.get());
      fabric_->attach_udp(core->address(), std::move(port));
    }
    nic = new Nic(detail::make_in_process_device(core.get()));
    core->set_handle(nic);
    cores_.push_back(std::move(core));
    nics_.push_back(std::unique_ptr<Nic>(nic));
  });
  return nic;
}

Result<uint32_t> Engine::resolve(const UdpEndpoint& endpoint) {
  Result<uint32_t> address = internal_error("unset");
  run_control([&] { address = fabric_->resolve(endpoint); });
  return address;
}

Result<UdpEndpoint> Engine::remote_endpoint(uint32_t address) const {
  Result<UdpEndpoint> endpoint = internal_error("unset");
  const_cast<Engine*>(this)->run_control([&] { endpoint = fabric_->remote_endpoint(address); });
  return endpoint;
}

Nic* Engine::nic(uint32_t address) const {
  Nic* result = nullptr;
  const_cast<Engine*>(this)->run_control([&] {
    if (address < nics_.size()) result = nics_[address].get();
  });
  return result;
}

void Engine::run_control(const std::function<void()>& fn) {
  const bool queued = options_.threaded ? thread_.joinable() : manual_driver_.load(std::memory_order_acquire);
  if (!queued || on_engine_thread()) {
    fn();
    return;
  }
  Command cmd{&fn};
  {
    std::unique_lock<std::mutex> lock(cmd_mu_);
    if (!options_.threaded && !manual_driver_.load(std::memory_order_relaxed)) {
      lock.unlock();  // the driver was released meanwhile
      fn();
      return;
    }
    commands_.push_back(&cmd);
    commands_pending_.store(true, std::memory_order_seq_cst);
  }
  notify();
  // An awake engine runs the command within a pass, a few microseconds for
  // a QP's creation or modification. Sleeping on the condition variable
  // instead costs the engine a futex wake and this thread a scheduler
  // wake-up per command, tens of microseconds on a VM: what made opening
  // thousands of QPs slow (issue 31). Spin first, bounded in real time (the
  // engine's clock may be simulated), then sleep. Past the first few
  // microseconds it yields between looks, so an engine (or another
  // process) waiting for this CPU gets it.
  const auto start = std::chrono::steady_clock::now();
  while (!cmd.done.load(std::memory_order_acquire)) {
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= std::chrono::nanoseconds(kControlSpinNs)) {
      std::unique_lock<std::mutex> lock(cmd_mu_);
      cmd_cv_.wait(lock, [&] { return cmd.done.load(std::memory_order_relaxed); });
      return;
    }
    if (waited < std::chrono::nanoseconds(kControlSpinNs / 8)) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void Engine::set_manual_driver() {
  FERRY_ASSERT(!options_.threaded, "set_manual_driver: the engine has its own thread");
  engine_thread_id_ = std::this_thread::get_id();
  manual_driver_.store(true, std::memory_order_release);
}

void Engine::release_manual_driver() {
  if (options_.threaded || !manual_driver_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard<std::mutex> lock(cmd_mu_);  // a poster checks the flag under it
    manual_driver_.store(false, std::memory_order_release);
  }
  run_commands();  // what was queued before the flag fell
}

bool Engine::may_step() const {
  return !options_.threaded && (!manual_driver_.load(std::memory_order_acquire) || on_engine_thread());
}

bool Engine::run_commands() {
  if (!commands_pending_.load(std::memory_order_acquire)) return false;
  std::vector<Command*> batch;
  {
    std::lock_guard<std::mutex> lock(cmd_mu_);
    batch.swap(commands_);
    commands_pending_.store(false, std::memory_order_relaxed);
  }
  for (Command* cmd : batch) (*cmd->fn)();
  {
    // A caller may return (and its Command go) as soon as it sees `done`:
    // nothing touches a command after storing it.
    std::lock_guard<std::mutex> lock(cmd_mu_);
    for (Command* cmd : batch) cmd->done.store(true, std::memory_order_release);
  }
  // No futex call when every caller is still spinning (no waiter).
  cmd_cv_.notify_all();
  return !batch.empty();
}

bool Engine::pass(uint64_t now) {
  bool work = run_commands();
  fabric_->release_due(now);
  const bool udp = fabric_->udp_port_count() != 0;
  if (udp) work |= fabric_->poll_udp(now, options_.rx_budget);
  for (auto& core : cores_) work |= core->poll(now);
  // Deliver until the fabric is quiet (bounded), so a request, its ACK and
  // the completion can all happen within one pass.
  for (int round = 0; round < 4; ++round) {
    bool any = false;
    for (auto& core : cores_) {
      const uint32_t address = core->address();
      if (!fabric_->has_inbound(address)) continue;
      fabric_->deliver(address, options_.rx_budget, now);
      core->end_rx_batch(now);
      any = true;
    }
    if (!any) break;
    work = true;
  }
  // What this pass queued for other hosts leaves in one batch per socket.
  if (udp) work |= fabric_->flush_udp();
  passes_.inc();
  if (work) busy_passes_.inc();
  return work;
}

uint64_t Engine::next_deadline_ns() const {
  uint64_t next = fabric_->next_due_ns();
  for (const auto& core : cores_) next = std::min(next, core->next_timer_ns());
  return next;
}

bool Engine::step() {
  if (!options_.account_idle) return pass(clock_->now_ns());
  const bool timed = idle_.begin();
  const bool work = pass(clock_->now_ns());
  idle_.end(timed, work);
  return work;
}

Status Engine::run_until_idle(uint64_t max_time_ns) { return simulate(nullptr, max_time_ns); }

Status Engine::run_until(const std::function<bool()>& pred, uint64_t max_time_ns) {
  return simulate(&pred, max_time_ns);
}

Status Engine::simulate(const std::function<bool()>* pred, uint64_t max_time_ns) {
  FERRY_ASSERT(!options_.threaded, "run_until is for manual (unthreaded) engines");
  auto* fake = dynamic_cast<FakeClock*>(clock_);
  const uint64_t start = clock_->now_ns();
  for (;;) {
    if (pred != nullptr && (*pred)()) return ok_status();
    const uint64_t now = clock_->now_ns();
    if (pass(now)) continue;
    // A pass that did nothing changed nothing, so another at the same time
    // would not either: work still pending (a NIC held back by flow control
    // while the packets that fill its peer's queue are on the wire) waits
    // for time to move.
    bool busy = fabric_->has_queued() || fabric_->udp_tx_pending();
    for (const auto& core : cores_) busy |= core->busy();
    const uint64_t deadline = next_deadline_ns();
    if (deadline == UINT64_MAX) {
      if (busy) return internal_error("engine stuck: work pending that nothing will release");
      // Nothing will ever happen again on its own.
      if (pred == nullptr || (*pred)()) return ok_status();
      return timed_out("engine idle before the condition held");
    }
    if (deadline - std::min(deadline, start) > max_time_ns) {
      return timed_out("simulated time limit reached with work pending");
    }
    if (fake != nullptr) {
      fake->advance_to(deadline);
    } else if (clock_->now_ns() - start > max_time_ns) {
      return timed_out("time limit reached with work pending");
    }
  }
}

void Engine::thread_main() {
  (void)pthread_setname_np(pthread_self(), kEngineThreadName);
  if (options_.cpu >= 0) (void)pin_current_thread(options_.cpu);
  if (options_.fifo_priority > 0) (void)set_current_thread_fifo(options_.fifo_priority);
  uint64_t idle_since = 0;
  const bool account = options_.account_idle;
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t now = clock_->now_ns();
    // account_idle: an iteration is timed whole, the spin after an idle
    // pass included (that time is the engine's, idle).
    const bool timed = account && idle_.begin();
    if (pass(now)) {
      if (timed) idle_.end(timed, /*busy=*/true);
      idle_since = 0;
      continue;
    }
    if (idle_since == 0) idle_since = now;
    if (now - idle_since < options_.spin_ns) {
      if (options_.spin_policy == EngineOptions::SpinPolicy::kBusy) {
        cpu_relax();
      } else {
        (void)sched_yield();
      }
      if (timed) idle_.end(timed, /*busy=*/false);
      continue;
    }
    if (timed) idle_.end(timed, /*busy=*/false);
    // Sleep until a doorbell, a control command, or the next deadline. Stop
    // watching doorbell records first, so that posts ring the queue again.
    bool slipped_in = false;
    for (auto& core : cores_) slipped_in |= core->unwatch_all();
    if (slipped_in) continue;
    const bool sockets = fabric_->udp_port_count() != 0 || options_.park_flag != nullptr;
    if (sockets) socket_parked_->store(true, std::memory_order_seq_cst);
    parker_.prepare_park();
    // seq_cst re-checks: see Parker for the handshake.
    bool busy = commands_pending_.load(std::memory_order_seq_cst) || fabric_->has_queued() ||
                stop_.load(std::memory_order_seq_cst);
    for (const auto& core : cores_) busy |= core->busy();
    const uint64_t deadline = next_deadline_ns();
    const uint64_t now2 = clock_->now_ns();
    if (busy || (deadline != UINT64_MAX && deadline <= now2)) {
      parker_.cancel_park();
      socket_parked_->store(false, std::memory_order_seq_cst);
      continue;
    }
    sleeps_.inc();
    const uint64_t slept_from = account ? Tsc::now() : 0;
    const uint64_t timeout_ns = deadline == UINT64_MAX ? 0 : deadline - now2;
    if (sockets) {
      park_on_sockets(timeout_ns);
      parker_.cancel_park();
      socket_parked_->store(false, std::memory_order_seq_cst);
    } else {
      parker_.park(timeout_ns);
    }
    if (account) idle_.add_idle_ticks(Tsc::now() - slept_from);
    idle_since = 0;
  }
}

void Engine::park_on_sockets(uint64_t timeout_ns) {
  wait_set_.clear();
  fabric_->udp_wait_set(&wait_set_);
  // At most one wake fd and a handful of sockets: a small fixed array keeps
  // the sleep path free of allocation.
  constexpr size_t kMaxFds = 64;
  pollfd fds[kMaxFds];
  size_t n = 0;
  fds[n++] = pollfd{wake_fd_, POLLIN, 0};
  for (const Fabric::UdpWait& w : wait_set_) {
    if (n == kMaxFds) break;  // the rest are seen when the engine next wakes (bounded by its timers)
    fds[n++] = pollfd{w.fd, static_cast<short>(POLLIN | (w.writable ? POLLOUT : 0)), 0};
  }
  // More sockets than fit: never sleep past a short bound, so none starves.
  if (n == kMaxFds && (timeout_ns == 0 || timeout_ns > 1'000'000)) timeout_ns = 1'000'000;
  timespec ts{};
  const timespec* tsp = nullptr;
  if (timeout_ns != 0) {
    ts.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000ULL);
    ts.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000ULL);
    tsp = &ts;
  }
  const int ready = ppoll(fds, n, tsp, nullptr);
  if (ready > 0 && (fds[0].revents & POLLIN)) {
    uint64_t count;
    (void)!read(wake_fd_, &count, sizeof(count));  // rearm: the wakeup has been taken
  }
  // Receive next only on the sockets ppoll reported (an error too: the
  // receive call clears it). A datagram arriving after ppoll returned is
  // taken by a later pass, or wakes the next ppoll at once.
  if (ready >= 0) {
    for (size_t i = 1; i < n; ++i) {
      if ((fds[i].revents & (POLLIN | POLLERR)) == 0) fabric_->udp_not_readable(wait_set_[i - 1].nic);
    }
  }
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.passes = passes_.get();
  s.busy_passes = busy_passes_.get();
  s.sleeps = sleeps_.get();
  s.wakeups = parker_.wakeups();
  s.idle_pass_ns = idle_.idle_ns();
  // native_handle() is not const, though it changes nothing.
  if (thread_.joinable()) s.thread_cpu_ns = thread_cpu_time_ns(const_cast<std::thread&>(thread_).native_handle());
  return s;
}

}  // namespace ferry::nic
