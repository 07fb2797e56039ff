// A member of the transactional store's chain (include/ferry/hyperloop/store_member.h).
#include "ferry/hyperloop/store_member.h"

#include <algorithm>
#include <cstdio>

#include "ferry/hyperloop/chain_manager.h"
#include "ferry/hyperloop/txn_kv_wire.h"

namespace ferry::hyperloop {

namespace {

// The database image inside the data region (empty if the region is too
// small to hold it: every read then answers that the image is invalid).
std::span<const uint8_t> db_of(std::span<const uint8_t> data, const TxnOptions& txn) {
  const uint64_t offset = kTxnControlBytes + txn.log_bytes;
  if (offset > data.size() || txn.db_bytes > data.size() - offset) return {};
  return data.subspan(offset, txn.db_bytes);
}

std::string ms_since(uint64_t start_ns, uint64_t now_ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", static_cast<double>(now_ns - std::min(start_ns, now_ns)) / 1e6);
  return text;
}

int position_of(const membership::View& view, std::string_view id) {
  const auto it = std::find_if(view.members.begin(), view.members.end(), [&](const auto& m) { return m.id == id; });
  return it == view.members.end() ? -1 : static_cast<int>(it - view.members.begin());
}

StorePlacement placement_in(const membership::View& view, int position) {
  StorePlacement p;
  p.version = view.version;
  p.position = static_cast<uint32_t>(position);
  for (const auto& m : view.members) p.chain.push_back(m.id);
  return p;
}

}  // namespace

// ---- the chain's keys in the membership store ----

StoreChainKeys StoreChainKeys::of(std::string_view cluster, std::string_view store) {
  StoreChainKeys k;
  k.view_key = ChainManager::view_key_of(cluster, store);
  k.beats_prefix = "/ferry/" + std::string(cluster) + "/chains/" + std::string(store) + "/beats/";
  return k;
}

std::string StoreChainKeys::removed_key(std::string_view id) const { return view_key + "-removed/" + std::string(id); }

Result<std::optional<membership::View>> read_chain_view(membership::MembershipStore& store,
                                                        const StoreChainKeys& keys) {
  FERRY_ASSIGN_OR_RETURN(const membership::RangeResult r, store.get(membership::KeySpan::exactly(keys.view_key)));
  if (r.kvs.empty()) return std::optional<membership::View>();
  auto v = membership::decode_view(r.kvs[0].value);
  if (!v.ok()) return data_loss("the chain view at " + keys.view_key + ": " + v.status().message());
  return std::optional<membership::View>(std::move(v).value());
}

Result<std::optional<std::string>> chain_member_removed(membership::MembershipStore& store, const StoreChainKeys& keys,
                                                        std::string_view id) {
  FERRY_ASSIGN_OR_RETURN(const membership::RangeResult r,
                         store.get(membership::KeySpan::exactly(keys.removed_key(id))));
  if (r.kvs.empty()) return std::optional<std::string>();
  return std::optional<std::string>(r.kvs[0].value);
}

Status put_chain_beat(membership::MembershipStore& store, const StoreChainKeys& keys, std::string_view id,
                      uint64_t version) {
  return store.put(keys.beats_prefix + std::string(id), std::to_string(version)).status();
}

std::string view_member_ids(const membership::View& view) {
  std::string out;
  for (const auto& m : view.members) out += (out.empty() ? "" : ",") + m.id;
  return out;
}

std::string_view store_member_state_name(StoreMemberState state) {
  switch (state) {
    case StoreMemberState::kStarting:
      return "starting";
    case StoreMemberState::kSpare:
      return "spare";
    case StoreMemberState::kJoining:
      return "joining";
    case StoreMemberState::kCopying:
      return "copying";
    case StoreMemberState::kBuilding:
      return "building";
    case StoreMemberState::kReady:
      return "ready";
    case StoreMemberState::kServing:
      return "serving";
    case StoreMemberState::kRemoved:
      return "removed";
    case StoreMemberState::kFailed:
      return "failed";
  }
  return "?";
}

// ---- the member ----

StoreMember::StoreMember(StoreMemberOptions options, membership::MembershipStore* membership,
                         const StoreChainKeys& keys, StoreMemberLog log)
    : options_(std::move(options)),
      membership_(membership),
      keys_(keys),
      reader_({}, ReplicaLocks(nullptr, 0), options_.kv),
      log_(std::move(log)) {}

bool StoreMember::busy() const {
  return state_ == StoreMemberState::kCopying || (state_ == StoreMemberState::kBuilding && build_in_flight_);
}

void StoreMember::event(const std::string& line) const {
  if (log_.event) log_.event(line);
}

void StoreMember::start(uint64_t now_ns) {
  if (state_ != StoreMemberState::kStarting) return;
  placement_.version = options_.spare ? 0 : 1;
  placement_.position = options_.spare ? 0 : options_.index;
  placement_.chain = options_.replicas;
  bool joining = false;
  if (membership_ != nullptr) {
    auto removed = chain_member_removed(*membership_, keys_, options_.id);
    if (!removed.ok()) return fail(removed.status());
    if (removed.value()) return remove("removed_in_view=" + *removed.value());
    auto view = read_chain_view(*membership_, keys_);
    if (!view.ok()) return fail(view.status());
    if (view.value()) {
      const membership::View& v = *view.value();
      const int position = position_of(v, options_.id);
      if (position >= 0) {
        placement_ = placement_in(v, position);
        joining = options_.spare;  // a spare the client named before it (re)started: it has no copy yet
      } else if (!options_.spare) {
        return remove("not_in_view=" + std::to_string(v.version));
      }
    }
  }
  if (placement_.version == 0) {
    state_ = StoreMemberState::kSpare;
    beat_version_ = 0;
  } else {
    state_ = joining ? StoreMemberState::kJoining : StoreMemberState::kBuilding;
  }
  advance(now_ns);
}

void StoreMember::attach(StoreMemberDataPath* path, std::span<const uint8_t> data, std::span<uint8_t> locks,
                         uint64_t now_ns) {
  path_ = path;
  data_ = data;
  reader_ = TxnKvReplicaReader(db_of(data, options_.txn), ReplicaLocks(locks.data(), locks.size()), options_.kv);
  if (state_ == StoreMemberState::kSpare) {
    event("event=spare store=" + options_.store + " id=" + options_.id + " listen=" + path_->address() +
          " (waiting to join the chain)");
  }
  advance(now_ns);
}

// Starts the data path's next step toward the placement, if it has one and
// nothing is in flight. The data path may report from inside the call, so
// the state moves first and nothing follows the call.
void StoreMember::advance(uint64_t now_ns) {
  if (path_ == nullptr) return;
  if (state_ == StoreMemberState::kJoining) {
    // The copy comes from the upstream neighbour in the new view (the last
    // survivor before it). It may lack the newest records (the most
    // downstream survivor holds the fewest); the client's recovery then
    // re-replicates the log from replica 0 and executes it again.
    if (placement_.position == 0) {
      return fail(failed_precondition("a joining member at the head has no upstream to copy"));
    }
    copy_from_ = placement_.chain[placement_.position - 1];
    copy_start_ns_ = now_ns;
    state_ = StoreMemberState::kCopying;
    path_->start_copy(copy_from_);
  } else if (state_ == StoreMemberState::kBuilding && !build_in_flight_) {
    build_in_flight_ = true;
    path_->start_build(placement_);
  }
}

void StoreMember::on_copied(const Result<uint64_t>& bytes, uint64_t now_ns) {
  if (state_ != StoreMemberState::kCopying) return;  // abandoned (removed meanwhile)
  if (!bytes.ok()) return fail(bytes.status());
  event("event=copied store=" + options_.store + " id=" + options_.id + " from=" + copy_from_ +
        " bytes=" + std::to_string(bytes.value()) + " ms=" + ms_since(copy_start_ns_, now_ns));
  state_ = StoreMemberState::kBuilding;
  build_in_flight_ = false;
  advance(now_ns);
}

void StoreMember::on_built(const Status& built, uint64_t now_ns) {
  if (state_ != StoreMemberState::kBuilding || !build_in_flight_) return;  // abandoned
  build_in_flight_ = false;
  if (!built.ok()) return fail(built);
  if (rebuilding_) {
    event("event=rebuilt store=" + options_.store + " id=" + options_.id +
          " view=" + std::to_string(placement_.version) + " index=" + std::to_string(placement_.position) +
          " ms=" + ms_since(rebuild_start_ns_, now_ns) + " reads_meanwhile=" + std::to_string(reads_));
    rebuilding_ = false;
  }
  state_ = StoreMemberState::kReady;
  beat_version_ = placement_.version;
  last_beat_ns_.reset();  // announce the new version at the next tick
}

void StoreMember::on_tick(uint64_t now_ns) {
  if (finished() || state_ == StoreMemberState::kStarting) return;
  if (state_ == StoreMemberState::kReady && path_ != nullptr && path_->upstream_connected()) {
    state_ = StoreMemberState::kServing;
    event("event=serving store=" + options_.store + " id=" + options_.id +
          " index=" + std::to_string(placement_.position) + " view=" + std::to_string(placement_.version));
  }
  const uint64_t period_ns = uint64_t{options_.heartbeat_ms} * 1'000'000;
  if (membership_ != nullptr && beat_version_ && (!last_beat_ns_ || now_ns - *last_beat_ns_ >= period_ns)) {
    last_beat_ns_ = now_ns;
    beat(now_ns);
  }
}

// The beat names the view this member serves; then the view tells whether
// the chain moved on.
void StoreMember::beat(uint64_t now_ns) {
  Status put = put_chain_beat(*membership_, keys_, options_.id, *beat_version_);
  auto view = put.ok() ? read_chain_view(*membership_, keys_) : Result<std::optional<membership::View>>(put);
  if (!view.ok()) {
    if (view.status().message() != membership_error_) {
      membership_error_ = view.status().message();
      if (log_.warning) log_.warning("etcd: " + membership_error_ + " (retrying every beat)");
    }
    return;
  }
  membership_error_.clear();
  if (view.value()) on_view(*view.value(), now_ns);
}

void StoreMember::on_view(const membership::View& view, uint64_t now_ns) {
  if (finished() || state_ == StoreMemberState::kStarting) return;
  const int position = position_of(view, options_.id);
  if (position < 0) {
    // A spare the view does not name waits; a member that is not in the
    // view any more was removed (while silent, partitioned, or frozen).
    if (placement_.version != 0) remove("not_in_view=" + std::to_string(view.version));
    return;
  }
  if (view.version <= placement_.version || busy()) return;
  // The chain moved to a new view with this member in it: the Replicas are
  // rebuilt at its new position under the new view's group names (a spare
  // first copies its regions); the regions and the read service stay.
  event("event=view store=" + options_.store + " id=" + options_.id + " version=" + std::to_string(view.version) +
        " members=" + view_member_ids(view) + " index=" + std::to_string(position) +
        " was=" + std::to_string(placement_.version));
  const bool joining = placement_.version == 0;
  if (path_ != nullptr) path_->stop_replicas();
  placement_ = placement_in(view, position);
  rebuilding_ = true;
  rebuild_start_ns_ = now_ns;
  build_in_flight_ = false;
  state_ = joining ? StoreMemberState::kJoining : StoreMemberState::kBuilding;
  advance(now_ns);
}

std::vector<uint8_t> StoreMember::on_read(uint16_t type, std::span<const uint8_t> payload, size_t capacity) {
  ++reads_;
  if (type == kTxnKvReadRegion) return answer_txn_region_read(data_, payload, capacity);
  return answer_txn_kv_read(reader_, type, payload, capacity);
}

void StoreMember::remove(const std::string& reason) {
  state_ = StoreMemberState::kRemoved;
  removed_reason_ = reason;
  build_in_flight_ = false;
  event("event=removed store=" + options_.store + " id=" + options_.id + " " + reason);
  // It must not serve its old state.
  if (path_ != nullptr) path_->stop_replicas();
}

void StoreMember::fail(const Status& why) {
  state_ = StoreMemberState::kFailed;
  failure_ = why;
  build_in_flight_ = false;
  if (path_ != nullptr) path_->stop_replicas();
}

}  // namespace ferry::hyperloop
