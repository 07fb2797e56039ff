// A real etcd for tests: /usr/bin/etcd (Debian etcd-server) started as a
// child process on two free loopback ports with a fresh data directory, and
// killed (with its data directory removed) when the test process is done.
//
// The child is started with posix_spawn, never fork: the test process has
// threads. It runs under coreutils `timeout`, so that an etcd whose test
// process crashed before killing it goes away by itself.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/membership/etcd_store.h"

extern char** environ;

namespace ferry::membership::testing {

inline constexpr const char* kEtcdBinary = "/usr/bin/etcd";
inline constexpr const char* kTimeoutBinary = "/usr/bin/timeout";
// Longest an etcd may outlive a crashed test process.
inline constexpr const char* kEtcdLifetimeSeconds = "600";

// A loopback TCP port nobody listens on right now.
inline Result<int> free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return unavailable("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return unavailable("bind/getsockname on 127.0.0.1 failed");
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

class EtcdProcess {
 public:
  // Starts etcd and waits until it answers /health (up to ~20 s). A missing
  // binary is failed_precondition naming scripts/install-deps.sh.
  static Result<std::unique_ptr<EtcdProcess>> start() {
    if (::access(kEtcdBinary, X_OK) != 0) {
      return failed_precondition(std::string(kEtcdBinary) +
                                 " not found: run scripts/install-deps.sh (it installs Debian etcd-server)");
    }
    Status last;
    // A port found free may be taken before etcd binds it: try a few times.
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::unique_ptr<EtcdProcess> etcd(new EtcdProcess());
      last = etcd->launch();
      if (last.ok()) return etcd;
    }
    return last;
  }

  ~EtcdProcess() { stop(); }
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  const std::string& endpoint() const { return endpoint_; }

  std::string log_tail() const {
    std::ifstream in(dir_ + "/etcd.log");
    std::stringstream all;
    all << in.rdbuf();
    const std::string text = all.str();
    return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
  }

  void stop() {
    if (pid_ > 0) {
      // `timeout` passes SIGTERM on to etcd and exits when it does.
      ::kill(pid_, SIGTERM);
      int status = 0;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (::waitpid(pid_, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::kill(-pid_, SIGKILL);
          ::kill(pid_, SIGKILL);
          ::waitpid(pid_, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      pid_ = -1;
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }

 private:
  EtcdProcess() = default;

  Status launch() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ferry-etcd-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) return unavailable("mkdtemp failed");
    dir_ = tmpl;
    FERRY_ASSIGN_OR_RETURN(int client_port, free_loopback_port());
    FERRY_ASSIGN_OR_RETURN(int peer_port, free_loopback_port());
    if (peer_port == client_port) return unavailable("the same port twice");
    endpoint_ = "http://127.0.0.1:" + std::to_string(client_port);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    const std::string log = dir_ + "/etcd.log";
    std::vector<std::string> args = {kTimeoutBinary,
                                     "--kill-after=5",
                                     kEtcdLifetimeSeconds,
                                     kEtcdBinary,
                                     "--name=ferry-test",
                                     "--data-dir=" + dir_ + "/data",
                                     "--listen-client-urls=" + endpoint_,
                                     "--advertise-client-urls=" + endpoint_,
                                     "--listen-peer-urls=" + peer,
                                     "--initial-advertise-peer-urls=" + peer,
                                     "--initial-cluster=ferry-test=" + peer,
                                     "--initial-cluster-state=new"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, kTimeoutBinary, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return unavailable("posix_spawn " + std::string(kTimeoutBinary) + " failed: " + std::to_string(rc));
    pid_ = pid;

    FERRY_ASSIGN_OR_RETURN(
        std::unique_ptr<EtcdStore> probe,
        EtcdStore::create(EtcdOptions{.endpoint = endpoint_, .request_timeout_ms = 1000, .connect_timeout_ms = 500}));
    // Polling is the only way to learn that another process is ready.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    Status health;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return unavailable("etcd exited during startup; its log:\n" + log_tail());
      }
      health = probe->health();
      if (health.ok()) return ok_status();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return unavailable("etcd at " + endpoint_ + " did not become healthy (" + health.to_string() + "); its log:\n" +
                       log_tail());
  }

  pid_t pid_ = -1;
  std::string dir_;
  std::string endpoint_;
};

// One etcd per test process, started by the first test that needs it and
// stopped when the tests are done (ctest runs each test in its own process, so
// tests that do not need etcd never start one).
class SharedEtcd : public ::testing::Environment {
 public:
  static Result<EtcdProcess*> get() {
    std::lock_guard lk(mu());
    if (!process()) {
      FERRY_ASSIGN_OR_RETURN(process(), EtcdProcess::start());
    }
    return process().get();
  }
  void TearDown() override {
    std::lock_guard lk(mu());
    process().reset();
  }

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::unique_ptr<EtcdProcess>& process() {
    static std::unique_ptr<EtcdProcess> p;
    return p;
  }
};

inline ::testing::Environment* const kSharedEtcdEnvironment = ::testing::AddGlobalTestEnvironment(new SharedEtcd);

}  // namespace ferry::membership::testing
