// A process's membership in a group: its key under a lease, and the heartbeat
// that keeps the lease alive.
#include <algorithm>
#include <chrono>
#include <utility>

#include "ferry/membership/view.h"

namespace ferry::membership {

Result<std::unique_ptr<Member>> Member::join(MembershipStore* store, GroupPath group, std::string id,
                                             std::string address, MemberOptions options) {
  FERRY_RETURN_IF_ERROR(group.validate());
  FERRY_RETURN_IF_ERROR(validate_name("member id", id));
  FERRY_ASSIGN_OR_RETURN(Lease lease, store->grant_lease(options.ttl_seconds));
  const std::string key = group.member_key(id);
  // Create-only: a live key with this id belongs to someone else (or to this
  // id's previous incarnation, which the group must first see leave).
  Result<TxnResult> created =
      store->compare_and_swap(key, 0, Mutation::put(key, encode_member_value(address), lease.id));
  if (!created.ok() || !created.value().succeeded) {
    (void)store->revoke_lease(lease.id);
    if (!created.ok()) return created.status();
    return Status(Code::kAlreadyExists, "member '" + id + "' of group " + group.to_string() +
                                            " already exists (another process, or a previous incarnation whose "
                                            "lease has not expired yet: retry after its TTL)");
  }
  std::unique_ptr<Member> member(new Member(store, std::move(group), std::move(id), lease, created.value().revision));
  if (options.heartbeat_thread) {
    // Three keep-alives per TTL: one lost or late keep-alive does not cost the lease.
    const uint32_t interval_ms = static_cast<uint32_t>(std::max<int64_t>(1, lease.ttl_seconds * 1000 / 3));
    Member* m = member.get();
    member->heartbeat_ = std::thread([m, interval_ms] { m->heartbeat_loop(interval_ms); });
  }
  return member;
}

Member::Member(MembershipStore* store, GroupPath group, std::string id, Lease lease, Revision incarnation)
    : store_(store), group_(std::move(group)), id_(std::move(id)), lease_(lease), incarnation_(incarnation) {}

Member::~Member() { (void)leave(); }

void Member::heartbeat_loop(uint32_t interval_ms) {
  std::unique_lock lk(mu_);
  while (!cv_.wait_for(lk, std::chrono::milliseconds(interval_ms), [&] { return stop_; })) {
    lk.unlock();
    // A store error (etcd unreachable) is retried at the next beat; the lease
    // survives as long as one beat per TTL gets through.
    const Status s = tick();
    lk.lock();
    if (s.code() == Code::kNotFound) return;
  }
}

Status Member::tick() {
  Result<int64_t> ttl = store_->keep_alive(lease_.id);
  if (ttl.status().code() == Code::kNotFound) expired_.store(true, std::memory_order_release);
  return ttl.status();
}

void Member::stop_heartbeat() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

Status Member::leave() {
  stop_heartbeat();
  if (left_.exchange(true)) return ok_status();
  const Status s = store_->revoke_lease(lease_.id);
  // Already expired: the key is gone either way.
  if (s.code() == Code::kNotFound) return ok_status();
  return s;
}

}  // namespace ferry::membership
