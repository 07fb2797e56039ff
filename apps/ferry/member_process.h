// What every deployed member process (`ferry hyperloop replica`, `ferry
// store replica`, `ferry logkv coordinator|server`) does the same way: read
// its configuration file and the flags that override it, attach to its
// host's NIC daemon, write its event lines, take the stop signals, and run
// its member until it is stopped or ends.
#pragma once

#include <signal.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "ferry/cm/cm.h"
#include "ferry/common/status.h"
#include "ferry/nic/verbs.h"
#include "ferry/nicd/nicd.h"

namespace ferry::apps {

// The flags every process of a deployment takes: its configuration file,
// and overrides of the file's entries for this process (empty: the file's).
struct MemberFlags {
  std::string config;
  std::string nicd;
  std::string listen;
  std::string region;  // members with a region file
  std::string dir;     // LogKv servers: backup storage
};

// Loads `flags.config` with `load`; on error says so on `err` ("<command>:
// <why>") and returns nullopt, and the command exits 2 (a bad configuration).
template <typename Config>
std::optional<Config> load_member_config(Result<Config> (*load)(const std::string&), const MemberFlags& flags,
                                         std::string_view command, std::ostream& err) {
  Result<Config> config = load(flags.config);
  if (!config.ok()) {
    err << command << ": " << config.status().message() << "\n";
    return std::nullopt;
  }
  return std::move(config).value();
}

// Applies the flags' overrides to this process's entry of the file (a
// MemberConfig, a LogKv MemberAddress: whichever of the fields it has).
template <typename Member>
void override_member(Member& member, const MemberFlags& flags) {
  if (!flags.nicd.empty()) member.nicd = flags.nicd;
  if (!flags.listen.empty()) member.listen = flags.listen;
  if constexpr (requires { member.region; }) {
    if (!flags.region.empty()) member.region = flags.region;
  }
  if constexpr (requires { member.dir; }) {
    if (!flags.dir.empty()) member.dir = flags.dir;
  }
}

// Attaches to the daemon at `socket`; the error says which daemon to start.
Result<std::unique_ptr<nicd::Device>> attach_nicd(const std::string& socket, const std::string& client_name);

// Starts the member's connection-manager listener; the error names the address.
Result<std::unique_ptr<cm::Listener>> listen_cm(const std::string& address);

// How a member process reports a failure to start or to serve: "<who>: <message>"
// on `err` (which must outlive it), and the exit code 1.
std::function<int(const Status&)> failure_reporter(std::ostream& err, std::string who);

// Blocks SIGINT and SIGTERM in this thread (call before any thread starts,
// so every thread inherits the mask) and returns them as `*stop` for sigwait.
void block_stop_signals(sigset_t* stop);

// SIGUSR1, a test's "go on" to a client: blocked in this thread when
// `block` (call before any thread starts, so that sigwait is where it
// arrives); returned as the set to sigwait on.
sigset_t go_signal(bool block);
// Waits for SIGUSR1 (go_signal(true) first).
void wait_for_go(const sigset_t& go);

// Writes whole lines to `out` (flushed, one at a time, from any thread):
// members log from their data path's threads too. `out` must outlive it.
std::function<void(const std::string& line)> line_writer(std::ostream& out);

// A member process's main loop.
struct ServeLoop {
  // The NIC its member runs on: when its daemon dies the process says
  // `died` on stderr and exits 1 (checked every 200 ms).
  nic::Nic* nic = nullptr;
  std::string died;
  // One pass of the member's work at `now_ns` (the steady clock): requests
  // served, completions delivered, its on_tick. Returns whether it did any
  // work; the loop then passes again at once (for busy_poll_ns) instead of
  // sleeping. Optional.
  std::function<bool(uint64_t now_ns)> poll;
  // After each pass: the exit code when the member ended by itself (it was
  // removed, or a step failed), saying why first; nullopt while it runs.
  std::function<std::optional<int>()> finished;
  // On SIGINT or SIGTERM ("SIGINT"/"SIGTERM"): finishes what must finish,
  // prints the member's stop line and returns the exit code.
  std::function<int(const char* signal)> stop;
  uint64_t busy_poll_ns = 0;             // after work, keep passing this long
  uint64_t idle_sleep_ns = 200'000'000;  // then wait this long for a signal between passes
};

// Runs `loop` until a stop signal (`stop_signals`, blocked in every thread),
// the member's end or its NIC daemon's death; returns the exit code.
int serve_until_stopped(const sigset_t& stop_signals, const ServeLoop& loop, std::ostream& err);

}  // namespace ferry::apps
