// A deployed LogKv coordinator's and storage server's decisions
// (include/ferry/store/logkv_member.h).
#include "ferry/store/logkv_member.h"

#include <algorithm>

namespace ferry::store::logkv {

std::string_view server_state_name(ServerState state) {
  switch (state) {
    case ServerState::kAbsent:
      return "absent";
    case ServerState::kLive:
      return "live";
    case ServerState::kCrashed:
      return "crashed";
    case ServerState::kRecovering:
      return "recovering";
    case ServerState::kRecovered:
      return "recovered";
    case ServerState::kUnrecovered:
      return "unrecovered";
  }
  return "?";
}

CoordinatorMember::CoordinatorMember(CoordinatorMemberOptions options, std::function<void(const std::string&)> event)
    : options_(options), event_(std::move(event)), servers_(options.servers) {}

void CoordinatorMember::event(const std::string& line) const {
  if (event_) event_(line);
}

Status CoordinatorMember::admit(uint32_t index) const {
  if (index >= servers_.size()) return invalid_argument("logkv: enlist of an unknown server");
  if (servers_[index].state != ServerState::kAbsent && servers_[index].state != ServerState::kLive) {
    return failed_precondition("server " + std::to_string(index) +
                               " crashed and was recovered; it cannot rejoin this cluster");
  }
  return ok_status();
}

bool CoordinatorMember::on_enlisted(uint32_t index) {
  if (!admit(index).ok()) return false;
  servers_[index].state = ServerState::kLive;
  servers_[index].misses = 0;
  const bool all =
      std::all_of(servers_.begin(), servers_.end(), [](const Server& s) { return s.state != ServerState::kAbsent; });
  if (!all || state_ != CoordinatorState::kWaiting) return false;
  state_ = CoordinatorState::kCreatingTables;
  return true;
}

void CoordinatorMember::on_tables_created() {
  if (state_ == CoordinatorState::kCreatingTables) state_ = CoordinatorState::kReady;
}

std::vector<uint32_t> CoordinatorMember::on_tick(uint64_t now_ns) {
  const uint64_t period_ns = uint64_t{options_.heartbeat_ms} * 1'000'000;
  if (ticked_ && now_ns - last_ping_ns_ < period_ns) return {};
  ticked_ = true;
  last_ping_ns_ = now_ns;
  return live();
}

void CoordinatorMember::on_ping(uint32_t index, const Status& pinged) {
  Server& s = servers_.at(index);
  if (s.state != ServerState::kLive) return;  // crashed meanwhile: its ping no longer counts
  if (pinged.ok()) {
    s.misses = 0;
    return;
  }
  if (++s.misses < options_.missed_beats) return;
  s.state = ServerState::kCrashed;
  event("event=server_crashed server=" + std::to_string(index) + " missed_beats=" + std::to_string(s.misses) +
        " error=\"" + pinged.message() + "\"");
}

std::vector<uint32_t> CoordinatorMember::take_recoveries(uint64_t now_ns) {
  std::vector<uint32_t> due;
  for (uint32_t i = 0; i < servers_.size(); ++i) {
    Server& s = servers_[i];
    if (s.state == ServerState::kCrashed || (s.state == ServerState::kUnrecovered && now_ns >= s.retry_at_ns)) {
      s.state = ServerState::kRecovering;
      due.push_back(i);
    }
  }
  return due;
}

void CoordinatorMember::on_recovered(uint32_t index, const Status& recovered, uint64_t now_ns) {
  Server& s = servers_.at(index);
  if (s.state != ServerState::kRecovering) return;
  if (recovered.ok()) {
    s.state = ServerState::kRecovered;
    ++recoveries_;
    return;
  }
  s.state = ServerState::kUnrecovered;
  s.retry_at_ns = now_ns + uint64_t{options_.recovery_retry_ms} * 1'000'000;
  ++recovery_failures_;
  event("event=recovery_failed server=" + std::to_string(index) + " error=\"" + recovered.message() +
        "\" (retried every second)");
}

std::vector<uint32_t> CoordinatorMember::live() const {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i].state == ServerState::kLive) out.push_back(i);
  }
  return out;
}

std::vector<bool> CoordinatorMember::crashed() const {
  std::vector<bool> out;
  for (const Server& s : servers_) out.push_back(s.state >= ServerState::kCrashed);
  return out;
}

// ---- a storage server's start ----

namespace {

// Whether an attempt may succeed later: nothing listens yet, or the service
// is not registered yet (the member is still starting).
bool worth_retrying(const Status& st) {
  return st.code() == Code::kUnavailable || st.code() == Code::kNotFound || st.code() == Code::kTimedOut;
}

}  // namespace

std::string_view server_member_state_name(ServerMemberState state) {
  switch (state) {
    case ServerMemberState::kLinking:
      return "linking";
    case ServerMemberState::kConnectingCoordinator:
      return "connecting_coordinator";
    case ServerMemberState::kCreatingLog:
      return "creating_log";
    case ServerMemberState::kEnlisting:
      return "enlisting";
    case ServerMemberState::kServing:
      return "serving";
    case ServerMemberState::kFailed:
      return "failed";
  }
  return "?";
}

void ServerMember::start(uint64_t now_ns) {
  deadline_ns_ = now_ns + uint64_t{options_.connect_timeout_ms} * 1'000'000;
  retry_at_ns_ = now_ns;
  state_ = ServerMemberState::kLinking;
  peer_ = 0;
  if (peer_ == options_.index) ++peer_;
  if (peer_ >= options_.servers) state_ = ServerMemberState::kConnectingCoordinator;
}

// The step after the current one succeeded.
void ServerMember::advance() {
  switch (state_) {
    case ServerMemberState::kLinking:
      ++peer_;
      if (peer_ == options_.index) ++peer_;
      if (peer_ >= options_.servers) state_ = ServerMemberState::kConnectingCoordinator;
      return;
    case ServerMemberState::kConnectingCoordinator:
      state_ = ServerMemberState::kCreatingLog;
      return;
    case ServerMemberState::kCreatingLog:
      state_ = ServerMemberState::kEnlisting;
      return;
    case ServerMemberState::kEnlisting:
      state_ = ServerMemberState::kServing;
      return;
    case ServerMemberState::kServing:
    case ServerMemberState::kFailed:
      return;
  }
}

void ServerMember::on_step(const Status& outcome, uint64_t now_ns) {
  if (finished()) return;
  if (outcome.ok()) {
    retry_at_ns_ = now_ns;
    return advance();
  }
  const bool waits_for_others =
      state_ == ServerMemberState::kLinking || state_ == ServerMemberState::kConnectingCoordinator;
  if (waits_for_others && worth_retrying(outcome) && now_ns < deadline_ns_) {
    retry_at_ns_ = now_ns + uint64_t{options_.retry_ms} * 1'000'000;
    return;
  }
  const std::string me = "server " + std::to_string(options_.index) + ": ";
  switch (state_) {
    case ServerMemberState::kLinking:
      failure_ =
          Status(outcome.code(), me + "no backup link to server-" + std::to_string(peer_) + ": " + outcome.message());
      break;
    case ServerMemberState::kConnectingCoordinator:
      failure_ = Status(outcome.code(), me + "the coordinator (" + options_.coordinator + "): " + outcome.message());
      break;
    case ServerMemberState::kEnlisting:
      failure_ = Status(outcome.code(), me + "the coordinator refused it: " + outcome.message());
      break;
    default:
      failure_ = outcome;
      break;
  }
  state_ = ServerMemberState::kFailed;
}

}  // namespace ferry::store::logkv
