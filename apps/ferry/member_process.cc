#include "member_process.h"

#include <mutex>
#include <utility>

#include "ferry/common/clock.h"

namespace ferry::apps {

namespace {

// How often the loop asks whether the member's NIC daemon is alive.
constexpr uint64_t kDaemonCheckNs = 200'000'000;

}  // namespace

Result<std::unique_ptr<nicd::Device>> attach_nicd(const std::string& socket, const std::string& client_name) {
  nicd::OpenOptions o;
  o.socket_path = socket;
  o.client_name = client_name;
  auto d = nicd::Device::open(o);
  if (!d.ok()) {
    return Status(d.status().code(), "cannot attach to the NIC daemon at " + socket + " (is `ferry nicd --socket " +
                                         socket + "` running?): " + d.status().message());
  }
  return d;
}

Result<std::unique_ptr<cm::Listener>> listen_cm(const std::string& address) {
  auto listener = cm::Listener::start(address);
  if (!listener.ok()) {
    return Status(listener.status().code(), "CM listener " + address + ": " + listener.status().message());
  }
  return listener;
}

std::function<int(const Status&)> failure_reporter(std::ostream& err, std::string who) {
  return [&err, who = std::move(who)](const Status& s) {
    err << who << ": " << s.message() << "\n";
    return 1;
  };
}

void block_stop_signals(sigset_t* stop) {
  sigemptyset(stop);
  sigaddset(stop, SIGINT);
  sigaddset(stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, stop, nullptr);
}

sigset_t go_signal(bool block) {
  sigset_t go;
  sigemptyset(&go);
  sigaddset(&go, SIGUSR1);
  if (block) pthread_sigmask(SIG_BLOCK, &go, nullptr);
  return go;
}

void wait_for_go(const sigset_t& go) {
  int sig = 0;
  sigwait(&go, &sig);
}

std::function<void(const std::string& line)> line_writer(std::ostream& out) {
  auto mu = std::make_shared<std::mutex>();
  return [&out, mu](const std::string& line) {
    std::lock_guard g(*mu);
    out << line << "\n" << std::flush;
  };
}

int serve_until_stopped(const sigset_t& stop_signals, const ServeLoop& loop, std::ostream& err) {
  const Clock& clock = SteadyClock::instance();
  uint64_t last_work_ns = 0;
  uint64_t last_check_ns = clock.now_ns();
  for (;;) {
    uint64_t now = clock.now_ns();
    if (loop.poll && loop.poll(now)) last_work_ns = now;
    if (loop.finished) {
      if (const std::optional<int> code = loop.finished()) return *code;
    }
    const bool busy = last_work_ns != 0 && now - last_work_ns < loop.busy_poll_ns;
    const uint64_t sleep_ns = busy ? 0 : loop.idle_sleep_ns;
    timespec wait{static_cast<time_t>(sleep_ns / 1'000'000'000), static_cast<long>(sleep_ns % 1'000'000'000)};
    siginfo_t info;
    const int sig = sigtimedwait(&stop_signals, &info, &wait);
    if (sig == SIGINT || sig == SIGTERM) return loop.stop(sig == SIGINT ? "SIGINT" : "SIGTERM");
    now = clock.now_ns();
    if (now - last_check_ns < kDaemonCheckNs) continue;
    last_check_ns = now;
    if (loop.nic != nullptr && !loop.nic->alive()) {
      err << loop.died << "\n";
      return 1;
    }
  }
}

}  // namespace ferry::apps
