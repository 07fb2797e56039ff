// Heartbeat failure detection and the versioned chain view (chain_manager.h).
#include "ferry/hyperloop/chain_manager.h"

#include <algorithm>
#include <set>

namespace ferry::hyperloop {

std::string ChainManager::view_key_of(std::string_view cluster, std::string_view chain) {
  return "/ferry/" + std::string(cluster) + "/chains/" + std::string(chain) + "/view";
}

std::string ChainManager::view_key() const { return view_key_of(options_.cluster, options_.chain); }

Result<std::unique_ptr<ChainManager>> ChainManager::open(membership::MembershipStore* store, const Clock* clock,
                                                         const std::vector<std::string>& members,
                                                         const ChainManagerOptions& options) {
  if (store == nullptr || clock == nullptr) return invalid_argument("chain manager: no store or clock");
  FERRY_RETURN_IF_ERROR(membership::validate_name("cluster name", options.cluster));
  FERRY_RETURN_IF_ERROR(membership::validate_name("chain name", options.chain));
  if (options.heartbeat_ms == 0 || options.missed_beats == 0) {
    return invalid_argument("chain manager: heartbeat_ms and missed_beats must be at least 1");
  }
  std::unique_ptr<ChainManager> m(new ChainManager(store, clock, options));
  std::lock_guard<std::mutex> lock(m->mu_);
  FERRY_RETURN_IF_ERROR(m->load_locked());
  if (m->view_.version == 0) {
    if (members.empty()) return invalid_argument("chain manager: a chain needs at least one member");
    membership::View v;
    v.version = 1;
    std::set<std::string> seen;
    for (const std::string& id : members) {
      FERRY_RETURN_IF_ERROR(membership::validate_name("member id", id));
      if (!seen.insert(id).second) return invalid_argument("chain manager: member '" + id + "' appears twice");
      v.members.push_back({id, "", 1});
    }
    FERRY_ASSIGN_OR_RETURN(const membership::TxnResult r,
                           store->compare_and_swap(
                               m->view_key(), 0, membership::Mutation::put(m->view_key(), membership::encode_view(v))));
    if (r.succeeded) {
      m->view_ = v;
      m->view_mod_ = r.revision;
    } else {
      FERRY_RETURN_IF_ERROR(m->load_locked());  // another manager created it first
    }
  }
  m->reset_beats_locked();
  return m;
}

Status ChainManager::load_locked() {
  FERRY_ASSIGN_OR_RETURN(const membership::RangeResult r, store_->get(membership::KeySpan::exactly(view_key())));
  if (r.kvs.empty()) {
    view_ = {};
    view_mod_ = 0;
    return ok_status();
  }
  auto v = membership::decode_view(r.kvs[0].value);
  if (!v.ok()) return data_loss("chain view at " + view_key() + ": " + v.status().message());
  view_ = std::move(v).value();
  view_mod_ = r.kvs[0].mod_revision;
  return ok_status();
}

void ChainManager::reset_beats_locked() {
  const uint64_t now = clock_->now_ns();
  std::map<std::string, uint64_t> beats;
  for (const auto& m : view_.members) {
    auto it = last_beat_ns_.find(m.id);
    beats[m.id] = it == last_beat_ns_.end() ? now : it->second;
  }
  last_beat_ns_ = std::move(beats);
}

membership::View ChainManager::view() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_;
}

Result<membership::View> ChainManager::refresh() {
  std::lock_guard<std::mutex> lock(mu_);
  FERRY_RETURN_IF_ERROR(load_locked());
  reset_beats_locked();
  return view_;
}

Status ChainManager::heartbeat(std::string_view id, uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = last_beat_ns_.find(std::string(id));
  if (it == last_beat_ns_.end()) {
    return failed_precondition("chain " + options_.chain + ": '" + std::string(id) + "' is not a member of view " +
                               std::to_string(view_.version) + ": it must not serve (it may only join anew)");
  }
  if (version != view_.version) {
    return failed_precondition("chain " + options_.chain + ": '" + std::string(id) + "' serves view " +
                               std::to_string(version) + "; the current view is " + std::to_string(view_.version));
  }
  it->second = std::max(it->second, clock_->now_ns());
  return ok_status();
}

std::vector<std::string> ChainManager::failed_members() const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t now = clock_->now_ns();
  const uint64_t period = uint64_t{options_.heartbeat_ms} * 1'000'000;
  std::vector<std::string> failed;
  for (const auto& m : view_.members) {
    const uint64_t last = last_beat_ns_.at(m.id);
    // Beats are due at last + period, last + 2 period, ...: those that have
    // passed without one are the consecutive missing beats.
    const uint64_t missed = now > last ? (now - last) / period : 0;
    if (missed >= options_.missed_beats) failed.push_back(m.id);
  }
  return failed;
}

Result<membership::View> ChainManager::replace(std::string_view failed, const std::string& joining) {
  FERRY_RETURN_IF_ERROR(membership::validate_name("member id", joining));
  std::lock_guard<std::mutex> lock(mu_);
  membership::View next = view_;
  auto it = std::find_if(next.members.begin(), next.members.end(), [&](const auto& m) { return m.id == failed; });
  if (it == next.members.end()) {
    return not_found("chain " + options_.chain + ": '" + std::string(failed) + "' is not in view " +
                     std::to_string(view_.version));
  }
  // Ids are never reused; an id's history is the views it was in, which the
  // store keeps as the members' incarnations: a joining id must be new to
  // the current view, and a member removed earlier never appears again
  // because its id is recorded in `removed` below.
  for (const auto& m : next.members) {
    if (m.id == joining) return already_exists("chain " + options_.chain + ": '" + joining + "' is already a member");
  }
  FERRY_ASSIGN_OR_RETURN(const membership::RangeResult removed,
                         store_->get(membership::KeySpan::exactly(view_key() + "-removed/" + joining)));
  if (!removed.kvs.empty()) {
    return already_exists("chain " + options_.chain + ": '" + joining + "' was removed from this chain in view " +
                          removed.kvs[0].value + "; it cannot rejoin (use a new id)");
  }
  next.members.erase(it);
  next.version = view_.version + 1;
  next.members.push_back({joining, "", static_cast<membership::Revision>(next.version)});
  FERRY_ASSIGN_OR_RETURN(const membership::TxnResult r,
                         store_->compare_and_swap(view_key(), view_mod_,
                                                  membership::Mutation::put(view_key(),
                                                                            membership::encode_view(next))));
  if (!r.succeeded) {
    return failed_precondition("chain " + options_.chain + ": the view moved past version " +
                               std::to_string(view_.version) + " (another manager committed first)");
  }
  // The removal is recorded after the view commits (a crash between the two
  // leaves the removed member out of the view anyway: it cannot beat).
  FERRY_RETURN_IF_ERROR(
      store_->put(view_key() + "-removed/" + std::string(failed), std::to_string(next.version)).status());
  view_ = next;
  view_mod_ = r.revision;
  reset_beats_locked();
  last_beat_ns_[joining] = clock_->now_ns();
  return view_;
}

}  // namespace ferry::hyperloop
