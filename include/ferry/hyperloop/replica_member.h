// A replica of a HyperLoop chain deployed as a process (`ferry hyperloop
// replica`; replica.h has the Replica it drives) as a state machine. A chain
// replica has little to decide -- once its chains are posted its NIC serves
// the group with no CPU -- but what it decides is here, in the form every
// deployed member has (design brief, principle 6): explicit states, driven
// by the outcome of its data path's work and by on_tick(now); its thread,
// sockets and signals stay in apps/.
//
//   kStarting --attach()--------------------------> kConnecting  start_build(): create, serve, connect downstream
//   kConnecting --on_built(ok)--------------------> kReady       chains posted
//               --on_built(error)-----------------> kFailed      (a missing or misconfigured neighbour)
//   kReady --on_tick(every upstream link up)-------> kServing
//
// Threads: one thread calls everything; the data path may work on another.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ferry/common/status.h"

namespace ferry::hyperloop {

// The replica's effects: building its Replica (or the baseline's
// NaiveReplica) and connecting it downstream, which waits for the
// neighbour (up to the chain's connect timeout). start_build reports its
// outcome through ReplicaMember::on_built later, or from inside the call.
class ReplicaMemberDataPath {
 public:
  virtual ~ReplicaMemberDataPath() = default;
  virtual void start_build() = 0;
  // Chains whose upstream (the previous replica, or the client) connected.
  virtual uint32_t upstream_links() const = 0;
};

struct ReplicaMemberOptions {
  std::string group = "g0";
  uint32_t index = 0;
  uint32_t links = 3;  // upstream links of a serving replica (HyperLoop: one per chain; Naive: 1)
};

enum class ReplicaMemberState : uint8_t { kStarting, kConnecting, kReady, kServing, kFailed };
std::string_view replica_member_state_name(ReplicaMemberState state);

class ReplicaMember {
 public:
  // `event`: one "event=..." line per transition (may be empty).
  ReplicaMember(ReplicaMemberOptions options, std::function<void(const std::string& line)> event)
      : options_(std::move(options)), event_(std::move(event)) {}

  // The data path is up (`path` must outlive the member): the build starts.
  void attach(ReplicaMemberDataPath* path);
  void on_built(const Status& built);
  void on_tick(uint64_t now_ns);

  ReplicaMemberState state() const { return state_; }
  bool finished() const { return state_ == ReplicaMemberState::kFailed; }
  bool busy() const { return state_ == ReplicaMemberState::kConnecting; }
  const Status& failure() const { return failure_; }

 private:
  const ReplicaMemberOptions options_;
  const std::function<void(const std::string&)> event_;
  ReplicaMemberDataPath* path_ = nullptr;
  ReplicaMemberState state_ = ReplicaMemberState::kStarting;
  Status failure_;
};

}  // namespace ferry::hyperloop
