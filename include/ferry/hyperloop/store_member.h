// One member of the transactional store's chain (txn_kv.h deployed as
// processes, `ferry store replica`; docs/hyperloop-storage.md "Chain failure
// and recovery: across processes") as a state machine: what the member
// decides, and when. Its effects on the NIC -- building the data path's two
// Replicas, copying a neighbour's regions -- go through StoreMemberDataPath;
// time comes in as `now_ns`; the chain's view and the beats through the
// membership store it is given. It starts no thread, never sleeps and never
// reads a clock, so a process (apps/ferry/store_replica_cmd.cc) and a
// simulator step the same code.
//
// States and transitions (every one is a call below):
//
//   kStarting --start()--> kRemoved   its id was removed from the chain, or a
//                                     replica's id is missing from the view
//                      --> kSpare     a spare the view does not name
//                      --> kJoining   a spare the view names (restarted)
//                      --> kBuilding  a replica of the view (or of view 1)
//                      --> kFailed    the membership store could not be read
//   kSpare    --on_view(names it)--------------------> kJoining
//   kJoining  --(data path attached)-----------------> kCopying   start_copy(upstream neighbour)
//   kCopying  --on_copied(ok)-------------------------> kBuilding
//   kBuilding --(data path attached)-----------------> (build in flight) start_build(placement)
//             --on_built(ok)--------------------------> kReady    chains posted; beats the new version
//   kReady    --on_tick(upstream connected)-----------> kServing
//   kReady, kServing --on_view(newer, names it)-------> kBuilding stop_replicas(), rebuilt at the new position
//   any member state --on_view(without it)------------> kRemoved  stop_replicas()
//   kCopying, kBuilding --on_copied/on_built(error)---> kFailed
//
// A newer view seen while a copy or a build is in flight waits: the beat
// that follows the build (due at once) reads the view again. kRemoved and
// kFailed are final: a removed member must never serve its old state again
// (it may come back only as a new member under a new id), and a failed one's
// process exits.
//
// Beats: with a membership store, every heartbeat_ms (on_tick) the member
// puts its beat -- the view version whose Replicas are ready (0 for a
// spare) -- then reads the view and handles it as on_view. A member beats
// once its first build completed (a spare at once); during a rebuild it
// keeps beating the version it served before, so the chain manager's
// missed-beat rule sees it alive but not yet serving the new view.
//
// Threads: one thread calls everything (the member is not thread-safe); the
// data path may complete its work on another thread, but reports it through
// that one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/hyperloop/txn_kv.h"
#include "ferry/membership/store.h"
#include "ferry/membership/view.h"

namespace ferry::hyperloop {

// Where a store's chain keeps its state in the membership store.
struct StoreChainKeys {
  std::string view_key;      // ChainManager::view_key_of(cluster, store): the view the client's manager commits
  std::string beats_prefix;  // <beats_prefix><id> = the view version member <id> serves

  static StoreChainKeys of(std::string_view cluster, std::string_view store);
  // Present (value: the view version) once <id> was removed from the chain.
  std::string removed_key(std::string_view id) const;
};

// The chain's view (nullopt: none committed yet). kDataLoss for a malformed
// one; store errors as the store returns them.
Result<std::optional<membership::View>> read_chain_view(membership::MembershipStore& store, const StoreChainKeys& keys);
// The view version at which `id` was removed from the chain (nullopt: never).
Result<std::optional<std::string>> chain_member_removed(membership::MembershipStore& store, const StoreChainKeys& keys,
                                                        std::string_view id);
Status put_chain_beat(membership::MembershipStore& store, const StoreChainKeys& keys, std::string_view id,
                      uint64_t version);
// "a,b,c": a view's member ids in chain order.
std::string view_member_ids(const membership::View& view);

// Where a member serves: a view, its position in it, and the chain's ids in
// order (the data path turns them into addresses).
struct StorePlacement {
  uint64_t version = 0;  // 0: not in the chain (a spare)
  uint32_t position = 0;
  std::vector<std::string> chain;

  friend bool operator==(const StorePlacement&, const StorePlacement&) = default;
};

// The member's effects on its NIC. Each start_* call begins work that may
// block (it waits for neighbours, up to the store's connect timeout) and
// reports its outcome later through the member's on_copied / on_built, on
// the member's thread -- or from inside the call. At most one is in flight.
class StoreMemberDataPath {
 public:
  virtual ~StoreMemberDataPath() = default;
  // Copies both regions (data and locks) from member `from` (an id of the
  // view) into this member's, durably. -> StoreMember::on_copied(bytes).
  virtual void start_copy(const std::string& from) = 0;
  // Builds both groups' Replicas at `placement` (under that view's group
  // names), serves their up services, connects downstream and posts the
  // chains. -> StoreMember::on_built.
  virtual void start_build(const StorePlacement& placement) = 0;
  // Destroys the Replicas (the chains stop); abandons work in flight (its
  // outcome is no longer reported). Returns once nothing of it runs.
  virtual void stop_replicas() = 0;
  // Whether every chain of both built Replicas has its upstream connected.
  virtual bool upstream_connected() const = 0;
  // This member's CM address, for its log lines.
  virtual std::string address() const = 0;
};

// What the member tells its operator: one "event=..." line per transition
// (stdout), and warnings that do not change its state (stderr).
struct StoreMemberLog {
  std::function<void(const std::string& line)> event;
  std::function<void(const std::string& message)> warning;
};

struct StoreMemberOptions {
  std::string store = "s0";           // the store's name (log lines)
  std::string id;                     // this member's id in the chain's views
  bool spare = false;                 // a spare (not in view 1)
  uint32_t index = 0;                 // a replica's position in view 1
  std::vector<std::string> replicas;  // view 1's ids in chain order
  uint32_t heartbeat_ms = 100;        // with a membership store: how often it beats
  // The image it answers reads from (on_read): the log and database layout.
  TxnOptions txn;
  TxnKvOptions kv;
};

enum class StoreMemberState : uint8_t {
  kStarting,  // start() not called yet
  kSpare,     // not in the chain; beats version 0 and waits to be named
  kJoining,   // named by a view as a new member; its regions not copied yet
  kCopying,   // copying its regions from its upstream neighbour
  kBuilding,  // its Replicas for the placement are being built (or wait for the data path)
  kReady,     // chains posted; waits for its upstream to connect
  kServing,   // every chain's upstream connected
  kRemoved,   // removed from the chain: final, serves nothing
  kFailed,    // a step failed: final (failure() says why)
};
std::string_view store_member_state_name(StoreMemberState state);

class StoreMember {
 public:
  // `membership`: the chain's membership store (nullptr: recovery is off,
  // the member serves view 1 at options.index for good); it must outlive
  // the member.
  StoreMember(StoreMemberOptions options, membership::MembershipStore* membership, const StoreChainKeys& keys,
              StoreMemberLog log);
  StoreMember(const StoreMember&) = delete;
  StoreMember& operator=(const StoreMember&) = delete;

  // Decides who this member is from the membership store (removed? in the
  // view? where?). Calls nothing on a data path: a removed member touches
  // no NIC.
  void start(uint64_t now_ns);
  // The data path is up: the member starts what its state wants (a copy, a
  // build) and logs a spare's wait. `data` and `locks` are this member's
  // regions (the data group's, the lock group's), which on_read reads.
  // All three must outlive the member's use.
  void attach(StoreMemberDataPath* path, std::span<const uint8_t> data, std::span<uint8_t> locks, uint64_t now_ns);

  // Time passes: beats and view reads when due, the upstream check.
  void on_tick(uint64_t now_ns);
  // A view of the chain (also what on_tick reads after each beat).
  void on_view(const membership::View& view, uint64_t now_ns);
  // Outcomes of the data path's work.
  void on_copied(const Result<uint64_t>& bytes, uint64_t now_ns);
  void on_built(const Status& built, uint64_t now_ns);
  // A read request of the store's read service (txn_kv_wire.h: GET, SCAN
  // or a raw region read), answered from this member's own image; the reply
  // fits `capacity` bytes. Served in every state once attached, as the
  // process serves its read service from start to exit.
  std::vector<uint8_t> on_read(uint16_t type, std::span<const uint8_t> payload, size_t capacity);

  StoreMemberState state() const { return state_; }
  bool finished() const { return state_ == StoreMemberState::kRemoved || state_ == StoreMemberState::kFailed; }
  // Whether the data path has work in flight (it owns the Replicas until it reports).
  bool busy() const;
  const StorePlacement& placement() const { return placement_; }
  const Status& failure() const { return failure_; }
  // kRemoved: "removed_in_view=N" (found at start) or "not_in_view=N".
  const std::string& removed_reason() const { return removed_reason_; }
  // The version its beats name (nullopt: it does not beat yet).
  std::optional<uint64_t> beat_version() const { return beat_version_; }
  uint64_t reads() const { return reads_; }
  uint64_t read_retries() const { return reader_.retries(); }

 private:
  void advance(uint64_t now_ns);
  void beat(uint64_t now_ns);
  void remove(const std::string& reason);
  void fail(const Status& why);
  void event(const std::string& line) const;

  const StoreMemberOptions options_;
  membership::MembershipStore* const membership_;
  const StoreChainKeys keys_;
  std::span<const uint8_t> data_;
  TxnKvReplicaReader reader_;  // over data_'s database and the lock region
  const StoreMemberLog log_;
  StoreMemberDataPath* path_ = nullptr;

  StoreMemberState state_ = StoreMemberState::kStarting;
  StorePlacement placement_;
  bool build_in_flight_ = false;
  // The build in flight follows a view change (logged as event=rebuilt).
  bool rebuilding_ = false;
  uint64_t rebuild_start_ns_ = 0;  // when the view change was seen (event=rebuilt's ms)
  uint64_t copy_start_ns_ = 0;     // event=copied's ms
  std::string copy_from_;
  std::optional<uint64_t> beat_version_;
  std::optional<uint64_t> last_beat_ns_;  // nullopt: a beat is due at the next tick
  std::string membership_error_;          // the last one warned about ("" after a good read)
  Status failure_;
  std::string removed_reason_;
  uint64_t reads_ = 0;
};

}  // namespace ferry::hyperloop
