// The load target (load_loop.h) of the verbs benchmarks (`ferry bench nic`,
// `ferry bench pm`): one requester queue pair kept `window` work requests
// deep by the closed loop. An operation's latency runs from the time the
// loop started it to the poll that returned its completion (one clock read
// per batch of completions, as perftest does).
//
// What the operations are comes from a Side:
//   Status post(uint64_t i);
//       posts operation i (0, 1, ... over the whole run, warm-up included).
//   Result<uint32_t> poll(std::span<WorkCompletion> wcs);
//       the requester CQ's completions, after whatever else the thread does
//       between polls (step an inline engine, serve the server side; block
//       on a completion channel rather than spin).
//   std::optional<uint64_t> ends(const WorkCompletion& wc);
//       the operation a (successful) completion ends, if any.
//   void on_window_open(uint64_t now_ns);  void on_window_close(uint64_t now_ns);
//       the measured window's edges (the engine's CPU, the media counters).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/status.h"
#include "ferry/nic/types.h"
#include "load_loop.h"

namespace ferry::bench {

template <typename Side>
class VerbsWindow {
 public:
  // `what` names the point in errors ("write 64 B").
  VerbsWindow(Side& side, uint32_t window, Recorder& rec, const Clock& clock, std::string what)
      : side_(side), window_(window), posted_at_(window), rec_(rec), clock_(clock), what_(std::move(what)) {}

  Status issue(uint64_t at_ns) {
    if (posted_ - finished_ >= window_) return Status(Code::kResourceExhausted, {});
    posted_at_[posted_ % window_] = at_ns;
    const Status s = side_.post(posted_);
    if (!s.ok()) return internal_error(fmt::format("{}: post: {}", what_, s.to_string()));
    ++posted_;
    rec_.issued();
    return ok_status();
  }

  Status step(uint64_t) {
    std::span<nic::WorkCompletion> wcs(wcs_);
    const Result<uint32_t> polled = side_.poll(wcs);
    if (!polled.ok()) return internal_error(fmt::format("{}: poll: {}", what_, polled.status().to_string()));
    const uint32_t n = polled.value();
    const uint64_t now = n != 0 ? clock_.now_ns() : 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (wcs[i].status != nic::WcStatus::kSuccess) {
        return internal_error(fmt::format("{}: benchmark op failed: {}", what_, nic::wc_status_name(wcs[i].status)));
      }
      const std::optional<uint64_t> id = side_.ends(wcs[i]);
      if (!id) continue;
      rec_.completed(0, posted_at_[*id % window_], now);
      ++finished_;
    }
    // A NIC that stops completing (a daemon gone, a lost peer) ends the
    // point with an error instead of a hang; checked only after many empty
    // polls.
    if (n != 0) {
      empty_polls_ = 0;
      last_progress_ns_ = now;
    } else if ((++empty_polls_ & 0xFFFF) == 0 && last_progress_ns_ != 0 &&
               clock_.now_ns() - last_progress_ns_ > kStuckNs) {
      return timed_out(fmt::format("{}: no completion for {} s ({} of {} done)", what_, kStuckNs / 1'000'000'000,
                                   finished_, posted_));
    }
    return ok_status();
  }

  void on_window_open(uint64_t now_ns) {
    last_progress_ns_ = now_ns;
    side_.on_window_open(now_ns);
  }
  void on_window_close(uint64_t now_ns) { side_.on_window_close(now_ns); }

 private:
  static constexpr uint64_t kStuckNs = 10'000'000'000ULL;

  Side& side_;
  const uint32_t window_;
  std::vector<uint64_t> posted_at_;  // by operation % window
  Recorder& rec_;
  const Clock& clock_;
  const std::string what_;
  uint64_t posted_ = 0, finished_ = 0;
  uint64_t empty_polls_ = 0, last_progress_ns_ = 0;
  nic::WorkCompletion wcs_[32];  // a poll's completions (initialized once, not every poll)
};

}  // namespace ferry::bench
