// Group membership and versioned views on a MembershipStore (store.h). Used
// by HyperLoop chains and other services to agree on who is in a group and in
// which order (docs/membership.md has the protocol and key layout).
//
//   /ferry/<cluster>/groups/<group>/members/<id>   {"address": ...}, under the member's lease
//   /ferry/<cluster>/groups/<group>/view           {"version": N, "members": [...]} in chain order
//
// - A Member puts its key under a lease and keeps the lease alive (a
//   heartbeat thread, or tick() in deterministic tests). If the process dies
//   or stalls past the TTL, the lease expires and the store deletes the key.
// - A ViewManager (any process may run one; several may) watches the members
//   and commits view N+1 whenever the live members differ from view N:
//   members whose key is gone are dropped, new ones are appended at the tail,
//   the order is otherwise kept. The view key changes only by a
//   compare-and-swap on its mod_revision, so of two managers that read view N
//   exactly one commits N+1: versions have no gaps and no duplicates.
// - watch_view() delivers each new view, in version order.
//
// A member that lost its lease and joins again is a new incarnation (its key's
// create_revision): the view drops the old one and appends the new one at the
// tail, because it may have lost the state its old place in the chain needed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/membership/store.h"

namespace ferry::membership {

// Cluster, group and member names are key path segments: 1..128 bytes of
// [A-Za-z0-9._:@-]. invalid_argument otherwise, naming `what`.
Status validate_name(std::string_view what, std::string_view name);

// Where a group lives in the store.
struct GroupPath {
  std::string cluster;
  std::string group;

  Status validate() const;
  std::string prefix() const;          // /ferry/<cluster>/groups/<group>/
  std::string members_prefix() const;  // <prefix>members/
  std::string member_key(std::string_view id) const;
  std::string view_key() const;   // <prefix>view
  std::string to_string() const;  // <cluster>/<group>, for messages
};

struct ViewMember {
  std::string id;
  std::string address;       // opaque, as the member published it
  Revision incarnation = 0;  // create_revision of the member's key

  friend bool operator==(const ViewMember&, const ViewMember&) = default;
};

struct View {
  uint64_t version = 0;             // 0: no view committed yet
  std::vector<ViewMember> members;  // chain order: head first, tail last

  // The index of member `id` in this incarnation, or -1 if it is not in the view.
  int position(std::string_view id, Revision incarnation) const;
  friend bool operator==(const View&, const View&) = default;
};

// The view key's value. decode_view rejects anything but a well-formed view
// (version >= 1, valid unique ids, incarnations >= 1) with data_loss.
std::string encode_view(const View& view);
Result<View> decode_view(std::string_view value);
// A member key's value.
std::string encode_member_value(std::string_view address);
Result<std::string> decode_member_address(std::string_view value);

// The view that should follow `current` given the members whose keys exist
// (`live`, any order). Deterministic, so racing managers propose the same
// view. Returns `current` itself (same version) when nothing changed.
View plan_next_view(const View& current, const std::vector<ViewMember>& live);

struct MemberOptions {
  int64_t ttl_seconds = 2;       // the lease; the store may grant more
  bool heartbeat_thread = true;  // false: the caller calls tick() (deterministic tests)
};

// One process's membership in one group.
class Member {
 public:
  // Grants a lease and creates the member key under it. already_exists if the
  // key exists (another process uses `id`, or this id's previous incarnation
  // has not expired yet: retry after its TTL). `store` must outlive the Member.
  static Result<std::unique_ptr<Member>> join(MembershipStore* store, GroupPath group, std::string id,
                                              std::string address, MemberOptions options = {});
  // Stops the heartbeat and leaves (revokes the lease) if not done yet.
  ~Member();
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  // One keep-alive. not_found once the lease has expired: this incarnation is
  // out of the group for good; join again for a new one.
  Status tick();
  // Stops keep-alives without leaving: the lease lapses after its TTL, as if
  // the process had died. For tests and for draining a failing process.
  void stop_heartbeat();
  // Revokes the lease: the member key goes now and the next view drops it.
  Status leave();

  const std::string& id() const { return id_; }
  LeaseId lease() const { return lease_.id; }
  int64_t ttl_seconds() const { return lease_.ttl_seconds; }
  Revision incarnation() const { return incarnation_; }
  // True once a keep-alive found the lease gone.
  bool expired() const { return expired_.load(std::memory_order_acquire); }

 private:
  Member(MembershipStore* store, GroupPath group, std::string id, Lease lease, Revision incarnation);
  void heartbeat_loop(uint32_t interval_ms);

  MembershipStore* const store_;
  const GroupPath group_;
  const std::string id_;
  const Lease lease_;
  const Revision incarnation_;
  std::atomic<bool> expired_{false};
  std::atomic<bool> left_{false};
  std::mutex mu_;
  std::condition_variable cv_;  // wakes the heartbeat thread to stop
  bool stop_ = false;           // guarded by mu_
  std::thread heartbeat_;
};

struct ViewManagerOptions {
  // How often the manager re-reads the group even without a watch event, and
  // restarts its watch if the store ended it (0: never; tests call reconcile()).
  uint32_t resync_interval_ms = 1'000;
};

// Keeps the group's view in line with its live members. Reconciles on every
// change of the members prefix (from the store's watch thread) and on each
// resync. `store` must outlive it.
class ViewManager {
 public:
  static Result<std::unique_ptr<ViewManager>> start(MembershipStore* store, GroupPath group,
                                                    ViewManagerOptions options = {});
  ~ViewManager();
  ViewManager(const ViewManager&) = delete;
  ViewManager& operator=(const ViewManager&) = delete;

  // One reconciliation: reads the members and the view at one revision and,
  // if they differ, commits the next view by compare-and-swap; on a lost race
  // reads again. ok when the view matches the members it read (whoever
  // committed it). data_loss if the view key holds a malformed view (left
  // untouched for an operator); store errors as returned by the store.
  // Thread-safe (calls are serialized).
  Status reconcile();

  uint64_t views_committed() const { return views_committed_.load(std::memory_order_relaxed); }
  // Member keys ignored because their id or value was malformed.
  uint64_t malformed_members() const { return malformed_members_.load(std::memory_order_relaxed); }
  // The last reconcile's error, if the last one failed (ok otherwise).
  Status last_error() const;

 private:
  ViewManager(MembershipStore* store, GroupPath group, ViewManagerOptions options);
  Status start_watch();
  void on_members_changed(const WatchUpdate& update);
  void resync_loop();

  MembershipStore* const store_;
  const GroupPath group_;
  const ViewManagerOptions options_;
  std::mutex reconcile_mu_;  // serializes reconcile()
  std::atomic<uint64_t> views_committed_{0};
  std::atomic<uint64_t> malformed_members_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status last_error_;             // guarded by mu_
  bool watch_ended_ = false;      // guarded by mu_
  bool stop_ = false;             // guarded by mu_
  std::unique_ptr<Watch> watch_;  // replaced only by the resync thread or start()
  std::thread resync_;
};

// A subscription to a group's views (watch_view).
class ViewWatch {
 public:
  virtual ~ViewWatch() = default;
  virtual void cancel() = 0;
  // ok while views flow; the store's error once the underlying watch ended
  // (then no more views come: watch again).
  virtual Status status() const = 0;
};

// Calls `on_view` with the current view (if one exists) before returning,
// then with each later view, in version order, on the store's watch thread.
// Malformed view values are skipped. Cancel (or destroy) the handle before
// `store` goes away.
Result<std::unique_ptr<ViewWatch>> watch_view(MembershipStore* store, const GroupPath& group,
                                              std::function<void(const View&)> on_view);

}  // namespace ferry::membership
