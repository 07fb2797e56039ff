// The embedded membership store: one node, in this process, etcd v3 semantics
// (store.h). Used when no etcd endpoint is configured, and by deterministic
// tests, which give it a FakeClock.
//
// What it gives: the same revisions, compare-and-swap, leases and watches as
// etcd, so code written against MembershipStore behaves the same. What it does
// not: durability (everything is lost with the process) and sharing between
// processes, so it cannot detect the failure of another process.
//
// Time: leases expire by `clock`. Expiry is checked at the start of every
// operation, by expire_leases(), and every `expiry_poll_ms` by the store's
// thread (which reads `clock`, so with a FakeClock expiry follows fake time).
//
// Threads: thread-safe. One store thread delivers every watch's events (so
// callbacks of different watches never run concurrently here) and polls lease
// expiry.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "ferry/common/clock.h"
#include "ferry/membership/store.h"

namespace ferry::membership {

struct InProcessStoreOptions {
  const Clock* clock = nullptr;  // nullptr: SteadyClock; must outlive the store
  uint32_t expiry_poll_ms = 50;  // 0: expire only on operations and expire_leases()
  // Events kept for watches that start in the past or fall behind; older
  // revisions are compacted (a watch from them gets out_of_range).
  size_t history_events_max = 100'000;
};

class InProcessStore final : public MembershipStore {
 public:
  explicit InProcessStore(InProcessStoreOptions options = {});
  // Stops the store thread. Watches must have been cancelled (destroyed) first.
  ~InProcessStore() override;
  InProcessStore(const InProcessStore&) = delete;
  InProcessStore& operator=(const InProcessStore&) = delete;

  Result<Revision> put(const std::string& key, const std::string& value, LeaseId lease = 0) override;
  Result<RangeResult> get(const KeySpan& span) override;
  Result<DeleteResult> erase(const KeySpan& span) override;
  Result<TxnResult> compare_and_swap(const std::string& compare_key, Revision expected_mod_revision,
                                     const Mutation& effect) override;
  Result<Lease> grant_lease(int64_t ttl_seconds) override;
  Result<int64_t> keep_alive(LeaseId lease) override;
  Status revoke_lease(LeaseId lease) override;
  Result<std::unique_ptr<Watch>> watch(const KeySpan& span, Revision start_revision, WatchCallback callback) override;

  // Deletes the keys of every lease whose deadline has passed by the clock.
  // Tests with a FakeClock call it after advancing time.
  void expire_leases();

  Revision revision() const;

 private:
  struct LeaseState {
    int64_t ttl_seconds = 0;
    uint64_t deadline_ns = 0;
    std::set<std::string> keys;
  };
  struct Watcher {
    uint64_t id = 0;
    KeySpan span;
    WatchCallback callback;
    Revision next_revision = 0;  // first revision not yet scanned for it
    bool failed = false;         // its terminal update is due
    bool cancelled = false;      // erased once its callback is not running
  };
  class InProcessWatch;

  // All *_locked methods need mu_ held.
  void expire_locked(uint64_t now_ns);
  Revision put_locked(const std::string& key, const std::string& value, LeaseId lease);
  void delete_key_locked(const std::string& key, Revision revision);
  Status check_lease_locked(LeaseId lease) const;
  void record_locked(Event event);
  void cancel_watch(uint64_t id);
  void run();  // the store thread

  const Clock* const clock_;
  const InProcessStoreOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;     // the store thread: new events, watches or stop; cancel: delivery done
  Revision revision_ = 1;          // etcd's empty store is at revision 1
  Revision compact_revision_ = 0;  // history holds every event after this revision
  std::map<std::string, KeyValue> kvs_;
  std::map<LeaseId, LeaseState> leases_;
  LeaseId next_lease_id_ = 0x7e57'0000'0001;
  std::deque<Event> history_;  // in revision order
  std::map<uint64_t, Watcher> watchers_;
  uint64_t next_watch_id_ = 1;
  uint64_t delivering_watch_ = 0;  // the watch whose callback the store thread runs now (0: none)
  bool stop_ = false;
  std::thread thread_;  // started last
};

}  // namespace ferry::membership
