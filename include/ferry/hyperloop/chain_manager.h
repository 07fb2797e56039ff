// The chain manager of a HyperLoop replication chain (SIGCOMM'18 §5,
// "Recovery"): failure detection by heartbeats, and the chain's membership
// as a versioned view in the membership store (etcd, or the in-process store).
//
// HyperLoop leaves failures to the application's control path: the data path
// (the NICs' pre-posted chains) has no timeouts of its own. A member (the
// control-path daemon of a replica host) sends a heartbeat every
// heartbeat_ms, naming the view version it serves; a member with
// missed_beats consecutive beats missing is declared failed
// ("a configurable number of consecutive missing heartbeats is considered a
// data path failure"). The manager then commits the next view -- the failed
// member out, a new member at the tail -- and the application rebuilds its
// data path (HyperLoopClient::replace_replica, TxnClient::recover).
//
// The view lives at /ferry/<cluster>/chains/<chain>/view (membership::View's
// encoding). Every change is a compare-and-swap on the key's mod_revision, so
// of two managers holding view N exactly one commits N+1 and the other is
// told the view moved. A member is admitted at the version that added it
// (its incarnation); a member that is not in the current view -- removed
// while it was silent, partitioned, or restarted with an old view -- is told
// so on every heartbeat and must not serve: it cannot rejoin with its old
// state, only as a new member that copies from a neighbour.
//
// Threads: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/status.h"
#include "ferry/membership/store.h"
#include "ferry/membership/view.h"

namespace ferry::hyperloop {

struct ChainManagerOptions {
  std::string cluster = "ferry";
  std::string chain = "chain0";
  uint32_t heartbeat_ms = 100;  // how often each member beats
  uint32_t missed_beats = 3;    // consecutive missing beats that declare a member failed
};

class ChainManager {
 public:
  // Opens the chain's view: creates version 1 with `members` (ids, chain
  // order, head first) if the store has none, else adopts the stored one (a
  // manager that restarted; `members` is then ignored). Every member of the
  // view starts with a full heartbeat allowance from now.
  // kInvalidArgument: bad names or options, duplicate ids, no members;
  // kDataLoss: the stored view is malformed; store errors as returned.
  static Result<std::unique_ptr<ChainManager>> open(membership::MembershipStore* store, const Clock* clock,
                                                    const std::vector<std::string>& members,
                                                    const ChainManagerOptions& options = {});

  // The view as this manager last read or committed it.
  membership::View view() const;
  // Re-reads the view from the store (another manager may have moved it).
  Result<membership::View> refresh();

  // A heartbeat of member `id`, which serves view `version`. ok: it is in
  // the current view and serves it. kFailedPrecondition: it is not in the
  // view (it was removed: it must stop serving, and may come back only as a
  // new member), or it serves another version (it must load the current
  // view before serving again); the message says which.
  Status heartbeat(std::string_view id, uint64_t version);

  // Members of the current view with missed_beats consecutive heartbeats
  // missing (none within heartbeat_ms * missed_beats), in chain order.
  std::vector<std::string> failed_members() const;

  // Commits the next view: `failed` out, `joining` (a new id) appended at
  // the tail, its incarnation the new version. kNotFound: `failed` is not in
  // the view; kAlreadyExists: `joining` is, or was a member of this chain
  // before (ids are not reused: an old member cannot rejoin under its name);
  // kFailedPrecondition: the stored view moved past this manager's (another
  // manager committed first; refresh() and decide again).
  Result<membership::View> replace(std::string_view failed, const std::string& joining);

  const ChainManagerOptions& options() const { return options_; }
  std::string view_key() const;
  // The view key of chain `chain` in cluster `cluster`, for processes that
  // read it without a manager (members learn the view from it). Its removed
  // ids are under view_key + "-removed/<id>".
  static std::string view_key_of(std::string_view cluster, std::string_view chain);

 private:
  ChainManager(membership::MembershipStore* store, const Clock* clock, const ChainManagerOptions& options)
      : store_(store), clock_(clock), options_(options) {}
  Status load_locked();
  void reset_beats_locked();

  membership::MembershipStore* const store_;
  const Clock* const clock_;
  const ChainManagerOptions options_;
  mutable std::mutex mu_;
  membership::View view_;                 // guarded by mu_
  membership::Revision view_mod_ = 0;     // the view key's mod_revision, for the CAS
  std::map<std::string, uint64_t> last_beat_ns_;  // member -> last heartbeat (or view start)
};

}  // namespace ferry::hyperloop
