#include "ferry/membership/in_process_store.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "ferry/common/assert.h"

namespace ferry::membership {

namespace {
constexpr uint64_t kNsPerSecond = 1'000'000'000;
}  // namespace

class InProcessStore::InProcessWatch final : public Watch {
 public:
  InProcessWatch(InProcessStore* store, uint64_t id) : store_(store), id_(id) {}
  ~InProcessWatch() override { cancel(); }
  void cancel() override { store_->cancel_watch(id_); }

 private:
  InProcessStore* const store_;
  const uint64_t id_;
};

InProcessStore::InProcessStore(InProcessStoreOptions options)
    : clock_(options.clock != nullptr ? options.clock : &SteadyClock::instance()), options_(options) {
  FERRY_ASSERT(options_.history_events_max > 0);
  thread_ = std::thread([this] { run(); });
}

InProcessStore::~InProcessStore() {
  {
    std::lock_guard lk(mu_);
    FERRY_ASSERT(watchers_.empty(), "InProcessStore destroyed with ", watchers_.size(), " watches still open");
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Revision InProcessStore::revision() const {
  std::lock_guard lk(mu_);
  return revision_;
}

void InProcessStore::record_locked(Event event) {
  FERRY_DASSERT(history_.empty() || history_.back().revision() <= event.revision());
  history_.push_back(std::move(event));
  // Compact whole revisions only, so that a revision is either entirely in
  // the history or entirely before compact_revision_.
  while (history_.size() > options_.history_events_max) {
    const Revision oldest = history_.front().revision();
    while (!history_.empty() && history_.front().revision() == oldest) history_.pop_front();
    compact_revision_ = oldest;
  }
}

Status InProcessStore::check_lease_locked(LeaseId lease) const {
  if (lease == 0 || leases_.contains(lease)) return ok_status();
  return not_found("lease " + std::to_string(lease) + " not found (expired or revoked)");
}

Revision InProcessStore::put_locked(const std::string& key, const std::string& value, LeaseId lease) {
  const Revision rev = ++revision_;
  auto [it, created] = kvs_.try_emplace(key);
  KeyValue& kv = it->second;
  if (created) {
    kv.key = key;
    kv.create_revision = rev;
    kv.version = 0;
  } else if (kv.lease != 0 && kv.lease != lease) {
    leases_.at(kv.lease).keys.erase(key);
  }
  kv.value = value;
  kv.mod_revision = rev;
  kv.version += 1;
  kv.lease = lease;
  if (lease != 0) leases_.at(lease).keys.insert(key);
  record_locked(Event{Event::Type::kPut, kv});
  return rev;
}

void InProcessStore::delete_key_locked(const std::string& key, Revision revision) {
  auto it = kvs_.find(key);
  FERRY_ASSERT(it != kvs_.end());
  if (it->second.lease != 0) leases_.at(it->second.lease).keys.erase(key);
  kvs_.erase(it);
  Event event;
  event.type = Event::Type::kDelete;
  event.kv.key = key;
  event.kv.mod_revision = revision;
  record_locked(std::move(event));
}

void InProcessStore::expire_locked(uint64_t now_ns) {
  bool changed = false;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.deadline_ns > now_ns) {
      ++it;
      continue;
    }
    // As etcd: all keys of one lease go in one revision.
    const std::set<std::string> keys = std::move(it->second.keys);
    it->second.keys.clear();
    if (!keys.empty()) {
      const Revision rev = ++revision_;
      for (const std::string& key : keys) delete_key_locked(key, rev);
      changed = true;
    }
    it = leases_.erase(it);
  }
  if (changed) cv_.notify_all();
}

void InProcessStore::expire_leases() {
  std::lock_guard lk(mu_);
  expire_locked(clock_->now_ns());
}

Result<Revision> InProcessStore::put(const std::string& key, const std::string& value, LeaseId lease) {
  if (key.empty()) return invalid_argument("empty key");
  std::lock_guard lk(mu_);
  expire_locked(clock_->now_ns());
  FERRY_RETURN_IF_ERROR(check_lease_locked(lease));
  const Revision rev = put_locked(key, value, lease);
  cv_.notify_all();
  return rev;
}

Result<RangeResult> InProcessStore::get(const KeySpan& span) {
  std::lock_guard lk(mu_);
  expire_locked(clock_->now_ns());
  RangeResult result;
  result.revision = revision_;
  for (auto it = kvs_.lower_bound(span.key); it != kvs_.end() && span.contains(it->first); ++it) {
    result.kvs.push_back(it->second);
    if (!span.is_prefix) break;
  }
  return result;
}

Result<DeleteResult> InProcessStore::erase(const KeySpan& span) {
  std::lock_guard lk(mu_);
  expire_locked(clock_->now_ns());
  std::vector<std::string> keys;
  for (auto it = kvs_.lower_bound(span.key); it != kvs_.end() && span.contains(it->first); ++it) {
    keys.push_back(it->first);
    if (!span.is_prefix) break;
  }
  DeleteResult result;
  result.deleted = static_cast<int64_t>(keys.size());
  if (!keys.empty()) {
    const Revision rev = ++revision_;
    for (const std::string& key : keys) delete_key_locked(key, rev);
    cv_.notify_all();
  }
  result.revision = revision_;
  return result;
}

Result<TxnResult> InProcessStore::compare_and_swap(const std::string& compare_key, Revision expected_mod_revision,
                                                   const Mutation& effect) {
  if (effect.key.empty()) return invalid_argument("empty key");
  std::lock_guard lk(mu_);
  expire_locked(clock_->now_ns());
  TxnResult result;
  auto it = kvs_.find(compare_key);
  const Revision current = it == kvs_.end() ? 0 : it->second.mod_revision;
  if (current != expected_mod_revision) {
    result.revision = revision_;
    return result;
  }
  if (effect.kind == Mutation::Kind::kPut) {
    // As etcd: a missing lease fails the whole transaction.
    FERRY_RETURN_IF_ERROR(check_lease_locked(effect.lease));
    put_locked(effect.key, effect.value, effect.lease);
  } else if (kvs_.contains(effect.key)) {
    delete_key_locked(effect.key, ++revision_);
  }
  cv_.notify_all();
  result.succeeded = true;
  result.revision = revision_;
  return result;
}

Result<Lease> InProcessStore::grant_lease(int64_t ttl_seconds) {
  if (ttl_seconds <= 0 || ttl_seconds > 9'000'000'000) {
    return invalid_argument("lease TTL must be 1 .. 9e9 seconds, not " + std::to_string(ttl_seconds));
  }
  std::lock_guard lk(mu_);
  const uint64_t now = clock_->now_ns();
  expire_locked(now);
  const LeaseId id = next_lease_id_++;
  LeaseState& lease = leases_[id];
  lease.ttl_seconds = ttl_seconds;
  lease.deadline_ns = now + static_cast<uint64_t>(ttl_seconds) * kNsPerSecond;
  return Lease{id, ttl_seconds};
}

Result<int64_t> InProcessStore::keep_alive(LeaseId lease) {
  std::lock_guard lk(mu_);
  const uint64_t now = clock_->now_ns();
  expire_locked(now);
  auto it = leases_.find(lease);
  if (it == leases_.end()) return not_found("lease " + std::to_string(lease) + " not found (expired or revoked)");
  it->second.deadline_ns = now + static_cast<uint64_t>(it->second.ttl_seconds) * kNsPerSecond;
  return it->second.ttl_seconds;
}

Status InProcessStore::revoke_lease(LeaseId lease) {
  std::lock_guard lk(mu_);
  expire_locked(clock_->now_ns());
  auto it = leases_.find(lease);
  if (it == leases_.end()) return not_found("lease " + std::to_string(lease) + " not found (expired or revoked)");
  it->second.deadline_ns = 0;  // expire it now, with its keys, in one revision
  expire_locked(clock_->now_ns());
  return ok_status();
}

Result<std::unique_ptr<Watch>> InProcessStore::watch(const KeySpan& span, Revision start_revision,
                                                     WatchCallback callback) {
  if (start_revision < 0) return invalid_argument("negative start revision");
  if (!callback) return invalid_argument("watch without a callback");
  std::lock_guard lk(mu_);
  if (start_revision == 0) start_revision = revision_ + 1;
  if (start_revision <= compact_revision_) {
    return out_of_range("revision " + std::to_string(start_revision) +
                        " has been compacted (oldest kept: " + std::to_string(compact_revision_ + 1) + ")");
  }
  const uint64_t id = next_watch_id_++;
  Watcher& w = watchers_[id];
  w.id = id;
  w.span = span;
  w.callback = std::move(callback);
  w.next_revision = start_revision;
  cv_.notify_all();
  return std::unique_ptr<Watch>(std::make_unique<InProcessWatch>(this, id));
}

void InProcessStore::cancel_watch(uint64_t id) {
  std::unique_lock lk(mu_);
  auto it = watchers_.find(id);
  if (it == watchers_.end()) return;
  it->second.cancelled = true;
  if (std::this_thread::get_id() == thread_.get_id()) {
    // From a callback: the store thread erases it after that callback returns.
    if (delivering_watch_ != id) watchers_.erase(it);
    return;
  }
  cv_.wait(lk, [&] { return delivering_watch_ != id; });
  watchers_.erase(id);
}

void InProcessStore::run() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    expire_locked(clock_->now_ns());
    Watcher* w = nullptr;
    for (auto& [id, candidate] : watchers_) {
      if (!candidate.cancelled && (candidate.failed || candidate.next_revision <= revision_)) {
        w = &candidate;
        break;
      }
    }
    if (w == nullptr) {
      if (options_.expiry_poll_ms == 0) {
        cv_.wait(lk);
      } else {
        cv_.wait_for(lk, std::chrono::milliseconds(options_.expiry_poll_ms));
      }
      continue;
    }

    WatchUpdate update;
    if (!w->failed && w->next_revision <= compact_revision_) {
      // It fell behind the history it needed (a callback slower than the writers).
      w->failed = true;
    }
    if (w->failed) {
      update.status =
          out_of_range("watch fell behind: revision " + std::to_string(w->next_revision) + " has been compacted");
    } else {
      auto first = std::partition_point(history_.begin(), history_.end(),
                                        [&](const Event& e) { return e.revision() < w->next_revision; });
      for (auto e = first; e != history_.end(); ++e) {
        if (w->span.contains(e->kv.key)) update.events.push_back(*e);
      }
      w->next_revision = revision_ + 1;
      if (update.events.empty()) continue;
    }

    // The callback runs without mu_ so that it may call the store; the map
    // node stays put because cancel_watch waits for delivering_watch_ to
    // change before erasing it.
    const uint64_t id = w->id;
    delivering_watch_ = id;
    lk.unlock();
    w->callback(update);
    lk.lock();
    delivering_watch_ = 0;
    cv_.notify_all();
    auto it = watchers_.find(id);
    if (it != watchers_.end() && (it->second.cancelled || it->second.failed)) watchers_.erase(it);
  }
}

}  // namespace ferry::membership
