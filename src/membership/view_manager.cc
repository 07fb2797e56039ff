// The view manager: turns member key changes into the next view, committed by
// compare-and-swap on the view key's mod_revision.
#include <chrono>
#include <utility>

#include "ferry/membership/view.h"

namespace ferry::membership {

namespace {
// Each lost race means another manager committed a view; a manager keeps
// losing only while members change faster than it can read and write.
constexpr int kCasAttemptsMax = 16;
}  // namespace

Result<std::unique_ptr<ViewManager>> ViewManager::start(MembershipStore* store, GroupPath group,
                                                        ViewManagerOptions options) {
  FERRY_RETURN_IF_ERROR(group.validate());
  std::unique_ptr<ViewManager> manager(new ViewManager(store, std::move(group), options));
  // Watch first, then read: a change after the watch's start revision
  // triggers another reconcile, one before it is in the first read.
  FERRY_RETURN_IF_ERROR(manager->start_watch());
  Status first = manager->reconcile();
  if (!first.ok() && first.code() != Code::kDataLoss) return first;
  if (options.resync_interval_ms > 0) {
    ViewManager* m = manager.get();
    manager->resync_ = std::thread([m] { m->resync_loop(); });
  }
  return manager;
}

ViewManager::ViewManager(MembershipStore* store, GroupPath group, ViewManagerOptions options)
    : store_(store), group_(std::move(group)), options_(options) {}

ViewManager::~ViewManager() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (resync_.joinable()) resync_.join();
  // Waits for a running callback (and its reconcile) to finish.
  watch_.reset();
}

Status ViewManager::start_watch() {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Watch> watch,
                         store_->watch(KeySpan::prefix(group_.members_prefix()), 0,
                                       [this](const WatchUpdate& update) { on_members_changed(update); }));
  // The old watch (if any) ended; destroying it joins its finished thread.
  watch_ = std::move(watch);
  std::lock_guard lk(mu_);
  watch_ended_ = false;
  return ok_status();
}

void ViewManager::on_members_changed(const WatchUpdate& update) {
  if (!update.status.ok()) {
    std::lock_guard lk(mu_);
    watch_ended_ = true;
    last_error_ = update.status;
    cv_.notify_all();
    return;
  }
  // Errors are kept in last_error_ and retried at the next event or resync.
  (void)reconcile();
}

void ViewManager::resync_loop() {
  std::unique_lock lk(mu_);
  while (!cv_.wait_for(lk, std::chrono::milliseconds(options_.resync_interval_ms), [&] { return stop_; })) {
    const bool restart = watch_ended_;
    lk.unlock();
    if (restart) (void)start_watch();
    (void)reconcile();
    lk.lock();
  }
}

Status ViewManager::last_error() const {
  std::lock_guard lk(mu_);
  return last_error_;
}

Status ViewManager::reconcile() {
  std::lock_guard reconcile_lock(reconcile_mu_);
  Status result = unavailable("view of group " + group_.to_string() + " still contended after " +
                              std::to_string(kCasAttemptsMax) + " attempts");
  const std::string view_key = group_.view_key();
  const std::string members_prefix = group_.members_prefix();
  for (int attempt = 0; attempt < kCasAttemptsMax; ++attempt) {
    // Members and view in one read: one revision, a consistent pair.
    Result<RangeResult> read = store_->get(KeySpan::prefix(group_.prefix()));
    if (!read.ok()) {
      result = read.status();
      break;
    }
    View current;
    Revision view_mod_revision = 0;
    std::vector<ViewMember> live;
    Status view_status;
    for (const KeyValue& kv : read.value().kvs) {
      if (kv.key == view_key) {
        Result<View> view = decode_view(kv.value);
        if (!view.ok()) {
          view_status = Status(view.status().code(), "key " + view_key + ": " + view.status().message());
          break;
        }
        current = std::move(view).value();
        view_mod_revision = kv.mod_revision;
      } else if (kv.key.starts_with(members_prefix)) {
        const std::string id = kv.key.substr(members_prefix.size());
        Result<std::string> address = decode_member_address(kv.value);
        if (!validate_name("member id", id).ok() || !address.ok()) {
          malformed_members_.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        live.push_back(ViewMember{id, std::move(address).value(), kv.create_revision});
      }
    }
    if (!view_status.ok()) {
      result = view_status;
      break;
    }
    const View next = plan_next_view(current, live);
    if (next.version == current.version) {
      result = ok_status();
      break;
    }
    Result<TxnResult> cas =
        store_->compare_and_swap(view_key, view_mod_revision, Mutation::put(view_key, encode_view(next)));
    if (!cas.ok()) {
      result = cas.status();
      break;
    }
    if (cas.value().succeeded) {
      views_committed_.fetch_add(1, std::memory_order_relaxed);
      result = ok_status();
      break;
    }
    // Lost the race: another manager committed a view; read again.
  }
  std::lock_guard lk(mu_);
  last_error_ = result;
  return result;
}

}  // namespace ferry::membership
