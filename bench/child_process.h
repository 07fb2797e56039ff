// Helper processes of a benchmark (NIC daemons, a UDP echo), started as
// separate executables: posix_spawn of /proc/self/exe with a subcommand.
// Never fork() of the measuring process: a forked child shares its pages
// copy-on-write, and every later first write of the measured threads would
// become a page fault (design brief, "Measuring honestly").
//
// A child's stdout and stderr go into one pipe the benchmark reads, so that
// it can wait for a readiness line and quote what a child said when it
// failed. Children stay in the benchmark's process group (a Ctrl-C at the
// terminal reaches them too), and while any is alive a handler for SIGINT,
// SIGTERM, SIGHUP and SIGABRT (a failed assertion) sends them SIGTERM before
// the benchmark dies: no orphans, except when the benchmark is SIGKILLed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::bench {

class ChildProcess {
 public:
  // Starts `/proc/self/exe args...` (argv[0] = "ferry"); `name` is for
  // messages ("nicd a", "udp-echo").
  static Result<std::unique_ptr<ChildProcess>> spawn_self(std::string name, const std::vector<std::string>& args);
  // Starts another program, looked up in PATH (`program` is also argv[0]):
  // a peer system's server, for instance. kNotFound if it is not installed.
  static Result<std::unique_ptr<ChildProcess>> spawn_program(std::string name, const std::string& program,
                                                             const std::vector<std::string>& args);
  // SIGTERM, then SIGKILL after 2 s if it is still there; reaps it.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Reads the child's output until a line starting with `prefix` and returns
  // that line. kUnavailable (quoting its output and exit status) if it exits
  // first, kTimedOut after `timeout_ms`.
  Result<std::string> wait_for_line(std::string_view prefix, int timeout_ms);
  // SIGTERM, wait up to `timeout_ms` for it to exit (then SIGKILL). OK if it
  // exited with status 0; kInternal with its output otherwise.
  Status stop(int timeout_ms = 5000);

  // False once it has exited (reaped here); then exit_text() says how.
  bool running() { return !reap(false); }
  std::string exit_text() const;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  // Everything it printed so far (read by wait_for_line and stop).
  const std::string& output() const { return output_; }
  // CPU time of all its threads so far (/proc/PID/task/*/schedstat), ns; 0
  // when not available.
  uint64_t cpu_time_ns() const;

 private:
  ChildProcess() = default;
  static Result<std::unique_ptr<ChildProcess>> spawn_executable(std::string name, const std::string& path,
                                                                const std::string& argv0, bool search_path,
                                                                const std::vector<std::string>& args);
  // Reads what is available (waiting up to timeout_ms); false at EOF.
  bool read_some(int timeout_ms);
  // Reaps it if it exited; true when it is gone.
  bool reap(bool block);

  std::string name_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string output_;
  size_t scanned_ = 0;  // output_ before this offset holds no wanted line
};

// A directory the fatal-signal handler removes (with rmdir: it must be
// empty by then) after the children are gone; "" for none.
void set_cleanup_dir(const std::string& path);

// "key=value" from a `key=value ...` line ("" when absent).
std::string line_field(std::string_view line, std::string_view key);

}  // namespace ferry::bench
