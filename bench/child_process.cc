#include "child_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>

extern char** environ;

namespace ferry::bench {

namespace {

// Live children, for the fatal-signal handler (async-signal-safe: atomics only).
constexpr size_t kMaxChildren = 32;
std::array<std::atomic<pid_t>, kMaxChildren> live_children{};
std::array<struct sigaction, 4> previous_actions{};
constexpr std::array<int, 4> kCleanupSignals = {SIGINT, SIGTERM, SIGHUP, SIGABRT};
std::once_flag handlers_once;

// A directory to remove once the children are gone (their sockets are in it).
char cleanup_dir[512];
std::atomic<bool> cleanup_dir_set{false};

void kill_children_and_reraise(int sig) {
  for (auto& slot : live_children) {
    const pid_t pid = slot.load(std::memory_order_relaxed);
    if (pid > 0) kill(pid, SIGTERM);
  }
  // Wait (up to 2 s) until they are gone, so that whoever waits for this
  // process sees them gone too.
  for (auto& slot : live_children) {
    const pid_t pid = slot.load(std::memory_order_relaxed);
    if (pid <= 0) continue;
    for (int i = 0; i < 200; ++i) {
      int status;
      const pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid || (r < 0 && errno != EINTR)) break;
      const timespec ten_ms{0, 10'000'000};
      nanosleep(&ten_ms, nullptr);
    }
  }
  if (cleanup_dir_set.load()) rmdir(cleanup_dir);  // empty once the daemons removed their sockets
  // The previous disposition (usually the default: terminate, or abort's core).
  for (size_t i = 0; i < kCleanupSignals.size(); ++i) {
    if (kCleanupSignals[i] == sig) sigaction(sig, &previous_actions[i], nullptr);
  }
  raise(sig);
}

void install_handlers() {
  std::call_once(handlers_once, [] {
    for (size_t i = 0; i < kCleanupSignals.size(); ++i) {
      struct sigaction sa{};
      sa.sa_handler = kill_children_and_reraise;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESETHAND;
      sigaction(kCleanupSignals[i], &sa, &previous_actions[i]);
      // A signal this process was told to ignore (e.g. SIGINT in a
      // background job) stays ignored, here and in the children.
      if (previous_actions[i].sa_handler == SIG_IGN) sigaction(kCleanupSignals[i], &previous_actions[i], nullptr);
    }
  });
}

void register_child(pid_t pid) {
  for (auto& slot : live_children) {
    pid_t expected = 0;
    if (slot.compare_exchange_strong(expected, pid)) return;
  }
}

void unregister_child(pid_t pid) {
  for (auto& slot : live_children) {
    pid_t expected = pid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

}  // namespace

void set_cleanup_dir(const std::string& path) {
  if (path.size() >= sizeof(cleanup_dir)) return;
  cleanup_dir_set.store(false);
  std::memcpy(cleanup_dir, path.c_str(), path.size() + 1);
  cleanup_dir_set.store(!path.empty());
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::spawn_self(std::string name,
                                                                const std::vector<std::string>& args) {
  return spawn_executable(std::move(name), "/proc/self/exe", "ferry", false, args);
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::spawn_program(std::string name, const std::string& program,
                                                                  const std::vector<std::string>& args) {
  return spawn_executable(std::move(name), program, program, true, args);
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::spawn_executable(std::string name, const std::string& path,
                                                                     const std::string& argv0, bool search_path,
                                                                     const std::vector<std::string>& args) {
  install_handlers();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return internal_error(name + ": pipe: " + std::strerror(errno));
  std::vector<std::string> argv_strings = {argv0};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&files, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&files, fds[1], STDERR_FILENO);
  // The child starts with an empty signal mask; exec resets the benchmark's
  // handlers to the default, and what this process ignores stays ignored.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int rc = search_path ? posix_spawnp(&pid, path.c_str(), &files, &attr, argv.data(), environ)
                             : posix_spawn(&pid, path.c_str(), &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    if (rc == ENOENT) return not_found(name + ": " + path + " is not installed");
    return internal_error(name + ": cannot start " + path + ": " + std::strerror(rc));
  }
  register_child(pid);
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->name_ = std::move(name);
  child->pid_ = pid;
  child->out_fd_ = fds[0];
  return child;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exited_) (void)stop(2000);
  if (out_fd_ >= 0) close(out_fd_);
}

bool ChildProcess::read_some(int timeout_ms) {
  if (out_fd_ < 0) return false;
  pollfd p{out_fd_, POLLIN, 0};
  const int r = ::poll(&p, 1, timeout_ms);
  if (r <= 0) return true;  // nothing yet (or EINTR): not EOF
  char buf[4096];
  const ssize_t n = read(out_fd_, buf, sizeof(buf));
  if (n > 0) {
    output_.append(buf, static_cast<size_t>(n));
    return true;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  close(out_fd_);
  out_fd_ = -1;
  return false;
}

bool ChildProcess::reap(bool block) {
  if (exited_) return true;
  for (;;) {
    const pid_t r = waitpid(pid_, &status_, block ? 0 : WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {  // not our child any more (should not happen): treat as gone
      status_ = 0;
      break;
    }
    return false;
  }
  exited_ = true;
  unregister_child(pid_);
  return true;
}

std::string ChildProcess::exit_text() const {
  if (!exited_) return "still running";
  if (WIFEXITED(status_)) return "exit status " + std::to_string(WEXITSTATUS(status_));
  if (WIFSIGNALED(status_)) {
    return "killed by signal " + std::to_string(WTERMSIG(status_)) + " (" + strsignal(WTERMSIG(status_)) + ")";
  }
  return "status " + std::to_string(status_);
}

Result<std::string> ChildProcess::wait_for_line(std::string_view prefix, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    // Complete lines not yet looked at.
    for (size_t nl; (nl = output_.find('\n', scanned_)) != std::string::npos;) {
      const std::string_view line(output_.data() + scanned_, nl - scanned_);
      scanned_ = nl + 1;
      if (line.substr(0, prefix.size()) == prefix) return std::string(line);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return timed_out(name_ + " (pid " + std::to_string(pid_) + ") did not print '" + std::string(prefix) +
                       "' within " + std::to_string(timeout_ms) + " ms; its output: " + output_);
    }
    const int wait_ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    if (!read_some(std::min(wait_ms, 100))) {
      reap(true);
      return unavailable(name_ + " exited before it was ready (" + exit_text() + "); its output: " +
                         (output_.empty() ? std::string("(none)") : output_));
    }
  }
}

Status ChildProcess::stop(int timeout_ms) {
  if (pid_ <= 0) return ok_status();
  if (!exited_) kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool killed = false;
  while (!reap(false)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      killed = true;
      reap(true);
      break;
    }
    if (!read_some(10)) usleep(1000);
  }
  // What it printed last (its stop line): until EOF or a quiet 50 ms.
  for (size_t before = SIZE_MAX; out_fd_ >= 0 && before != output_.size();) {
    before = output_.size();
    read_some(50);
  }
  if (killed) {
    return internal_error(name_ + " did not stop within " + std::to_string(timeout_ms) +
                          " ms of SIGTERM and was killed; its output: " + output_);
  }
  if (!WIFEXITED(status_) || WEXITSTATUS(status_) != 0) {
    return internal_error(name_ + " ended with " + exit_text() + "; its output: " + output_);
  }
  return ok_status();
}

uint64_t ChildProcess::cpu_time_ns() const {
  if (pid_ <= 0 || exited_) return 0;
  const std::string dir = "/proc/" + std::to_string(pid_) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  uint64_t total = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(dir + "/" + e->d_name + "/schedstat");
    uint64_t on_cpu_ns = 0;
    if (in >> on_cpu_ns) total += on_cpu_ns;
  }
  closedir(d);
  return total;
}

std::string line_field(std::string_view line, std::string_view key) {
  size_t pos = 0;
  while (pos < line.size()) {
    const size_t end = std::min(line.find(' ', pos), line.size());
    const std::string_view token = line.substr(pos, end - pos);
    if (token.size() > key.size() && token.substr(0, key.size()) == key && token[key.size()] == '=') {
      return std::string(token.substr(key.size() + 1));
    }
    pos = end + 1;
  }
  return {};
}

}  // namespace ferry::bench
