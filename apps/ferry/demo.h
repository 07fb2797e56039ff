// `ferry demo`: the main job on its embedded default.
#pragma once

#include <fmt/format.h>

#include <ostream>
#include <string>

namespace ferry::apps {

// Runs the walkthrough, printing to `out`. Returns the process exit code
// (0 when every step verified).
int run_demo(std::ostream& out, int engine_cpu);
// Part 2: a HyperLoop group of three replicas doing each primitive.
int run_group_demo(std::ostream& out, int engine_cpu);
// Part 3: JUNE BERRY -- a set committed by the hardware ACK, a get that sees
// it, durable puts across a power failure and recovery.
int run_juneberry_demo(std::ostream& out, int engine_cpu);
// Part 4: Tailwind in LogKv -- PUTs replicated by RDMA WRITE with the backups'
// workers idle, a primary crash while a client writes, recovery, the data
// served again.
int run_tailwind_demo(std::ostream& out);
// Part 5: HyperLoop storage -- the replicated transactional store, a read from
// the tail under its read lock, a replica killed and replaced while writes
// continue, nothing lost.
int run_storage_demo(std::ostream& out);

// Numbered steps and verified checks, printed to `out` (which must outlive
// this object); shared by both parts of the demo.
class DemoSteps {
 public:
  explicit DemoSteps(std::ostream& out) : out_(out) {}

  // Starts the next numbered step: its title and what it shows.
  void step(const std::string& title, const std::string& words) {
    out_ << fmt::format("\n[{}] {}\n    {}\n", ++steps_, title, words);
  }
  // Prints `what` as verified or FAILED and counts failures; returns `ok`.
  bool check(bool ok, const std::string& what) {
    out_ << fmt::format("    {} {}\n", ok ? "ok:" : "FAILED:", what);
    if (!ok) ++failures_;
    return ok;
  }
  // Prints the tally; returns the exit code (0 when every check passed).
  int summary() {
    out_ << fmt::format("\n{} steps, {} failed.\n", steps_, failures_);
    return failures_ == 0 ? 0 : 1;
  }

 private:
  std::ostream& out_;
  int steps_ = 0;
  int failures_ = 0;
};

}  // namespace ferry::apps
