// A chain replica deployed as a process (include/ferry/hyperloop/replica_member.h).
#include "ferry/hyperloop/replica_member.h"

namespace ferry::hyperloop {

std::string_view replica_member_state_name(ReplicaMemberState state) {
  switch (state) {
    case ReplicaMemberState::kStarting:
      return "starting";
    case ReplicaMemberState::kConnecting:
      return "connecting";
    case ReplicaMemberState::kReady:
      return "ready";
    case ReplicaMemberState::kServing:
      return "serving";
    case ReplicaMemberState::kFailed:
      return "failed";
  }
  return "?";
}

void ReplicaMember::attach(ReplicaMemberDataPath* path) {
  if (state_ != ReplicaMemberState::kStarting) return;
  path_ = path;
  state_ = ReplicaMemberState::kConnecting;  // first: the path may report from inside the call
  path_->start_build();
}

void ReplicaMember::on_built(const Status& built) {
  if (state_ != ReplicaMemberState::kConnecting) return;
  if (!built.ok()) {
    state_ = ReplicaMemberState::kFailed;
    failure_ = built;
    return;
  }
  state_ = ReplicaMemberState::kReady;
}

void ReplicaMember::on_tick(uint64_t /*now_ns*/) {
  if (state_ != ReplicaMemberState::kReady || path_->upstream_links() < options_.links) return;
  state_ = ReplicaMemberState::kServing;
  if (event_) event_("event=serving group=" + options_.group + " index=" + std::to_string(options_.index));
}

}  // namespace ferry::hyperloop
