// The HyperLoop transactional store as a simulated system (src/sim/
// hyperloop_store.cc, which describes it): the run's state and steps,
// shared by hyperloop_store.cc (the cluster, the workload, the faults) and
// hyperloop_store_checks.cc (recovery, the invariants, the finale).
#pragma once

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/hyperloop/chain_manager.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/hyperloop/txn_kv.h"
#include "ferry/membership/in_process_store.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/fabric.h"
#include "ferry/nic/verbs.h"
#include "ferry/sim/linearizability.h"
#include "ferry/sim/systems.h"

namespace ferry::sim::hyperloop_store_sim {

using hyperloop::GroupId;
using hyperloop::HyperLoopClient;
using hyperloop::ReplicaLocks;
using hyperloop::ReplicaView;
using hyperloop::TxnClient;
using hyperloop::TxnKv;
using hyperloop::TxnKvOp;
using hyperloop::TxnKvOptions;
using hyperloop::TxnKvReplicaReader;
using hyperloop::TxnOptions;

constexpr uint32_t kReplicas = 3;
constexpr uint32_t kKeys = 6;            // hot keys, on 4 lock stripes
constexpr uint32_t kClients = 4;         // history client ids 0..3; 4: the final put
constexpr uint32_t kReplicaReader = 10;  // + r: replica r's reads
constexpr uint32_t kFrontEndReader = 20;
constexpr size_t kRegionBytes = 64 << 10;
constexpr size_t kLockRegionBytes = 4096;
constexpr uint64_t kLogBytes = 4096;
constexpr uint64_t kLockTimeoutNs = 20'000'000;
// A synchronous call gives up after this much virtual time: long enough for
// RC to ride out a short partition (7 retries of 67 ms), short enough that
// a long one ends as a failed operation and a front-end restart.
constexpr uint64_t kOpTimeoutNs = 2'000'000'000;
constexpr uint64_t kDelayMaxNs = 50'000;
// A fault fires at a random poll of this many from the operation it struck
// in (a put is some hundreds of polls: locks, Append, the copies, the head
// advance, unlocks), so it may land in a later operation.
constexpr uint64_t kFireWithinPolls = 1500;
// A replica read between two engine steps, once in this many polls (an
// operation is some hundreds).
constexpr uint64_t kHookReadOdds = 100;
// The membership store's outage is drawn per replacement (the only time the
// chain manager writes it), at the per-operation rate times this.
constexpr double kMembershipDownPerReplacement = 20.0;
// The journal: a log writer that acknowledges on TxnClient::append (a WAL's
// commit point: "durable on every replica when it returns") and leaves the
// record for the next write's execution (or a recovery's) to apply. Its
// slots are 8-byte words past the store's table in the same database.
constexpr uint32_t kJournalSlots = 4;
// Records left unexecuted before a journal append runs them first.
constexpr uint32_t kJournalBacklog = 4;
// A power failure right after a journal append was acknowledged -- before
// anything executed or flushed it again -- at the power rate times this.
constexpr double kPowerAfterJournal = 3.0;

inline TxnKvOptions kv_options() {
  TxnKvOptions o;
  o.slots = 32;
  o.key_max = 8;
  o.value_max = 8;
  o.locks = 4;
  return o;
}

inline std::string key_name(uint64_t k) { return "k" + std::to_string(k); }

inline std::vector<uint8_t> value_bytes(uint64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

inline std::optional<uint64_t> value_of(const Result<std::vector<uint8_t>>& r) {
  if (!r.ok()) return std::nullopt;
  uint64_t v = 0;
  std::memcpy(&v, r.value().data(), std::min<size_t>(8, r.value().size()));
  return v;
}

inline std::string show(const std::optional<uint64_t>& v) { return v ? std::to_string(*v) : "absent"; }

constexpr uint32_t kHeartbeatMs = 100;
constexpr uint32_t kMissedBeats = 3;

// The membership store as the chain manager sees it: the in-process store
// (etcd's semantics), unavailable to every call until `down_until_ns` by the
// World's clock -- an etcd outage or a partition from it.
class OutageStore final : public membership::MembershipStore {
 public:
  explicit OutageStore(const Clock* clock) : clock_(clock), store_(options(clock)) {}
  void down_until(uint64_t t) { down_until_ns_ = t; }
  uint64_t down_until_ns() const { return down_until_ns_; }

  Result<membership::Revision> put(const std::string& key, const std::string& value,
                                   membership::LeaseId lease) override {
    FERRY_RETURN_IF_ERROR(up());
    return store_.put(key, value, lease);
  }
  Result<membership::RangeResult> get(const membership::KeySpan& span) override {
    FERRY_RETURN_IF_ERROR(up());
    return store_.get(span);
  }
  Result<membership::DeleteResult> erase(const membership::KeySpan& span) override {
    FERRY_RETURN_IF_ERROR(up());
    return store_.erase(span);
  }
  Result<membership::TxnResult> compare_and_swap(const std::string& compare_key,
                                                 membership::Revision expected_mod_revision,
                                                 const membership::Mutation& effect) override {
    FERRY_RETURN_IF_ERROR(up());
    return store_.compare_and_swap(compare_key, expected_mod_revision, effect);
  }
  Result<membership::Lease> grant_lease(int64_t ttl_seconds) override {
    FERRY_RETURN_IF_ERROR(up());
    return store_.grant_lease(ttl_seconds);
  }
  Result<int64_t> keep_alive(membership::LeaseId lease) override {
    FERRY_RETURN_IF_ERROR(up());
    return store_.keep_alive(lease);
  }
  Status revoke_lease(membership::LeaseId lease) override {
    FERRY_RETURN_IF_ERROR(up());
    return store_.revoke_lease(lease);
  }
  Result<std::unique_ptr<membership::Watch>> watch(const membership::KeySpan& span, membership::Revision start_revision,
                                                   membership::WatchCallback callback) override {
    FERRY_RETURN_IF_ERROR(up());
    return store_.watch(span, start_revision, std::move(callback));
  }

 private:
  static membership::InProcessStoreOptions options(const Clock* clock) {
    membership::InProcessStoreOptions o;
    o.clock = clock;
    o.expiry_poll_ms = 0;  // no leases here; nothing for its thread to do on its own
    return o;
  }
  Status up() const {
    if (clock_->now_ns() < down_until_ns_) return unavailable("membership store: unavailable (simulated outage)");
    return ok_status();
  }
  const Clock* clock_;
  membership::InProcessStore store_;
  uint64_t down_until_ns_ = 0;
};

// A fault armed to fire at a poll of the client (between engine steps).
enum class Armed : uint8_t { kNone, kCrash, kPower, kReplace };

class Run {
 public:
  explicit Run(const RunOptions& options) : world_(options), ko_(kv_options()) {}

  RunResult run(uint64_t ops);

 private:
  bool ok() const { return result_.invariant.empty(); }

  // The first violation ends the run; later ones are consequences.
  void fail(const std::string& invariant, const std::string& detail);

  // ---- the cluster ----

  bool build();
  void teardown();
  TxnOptions txn_options(bool resume) const;
  bool recovery_failed(const std::string& step, const Status& st);

  // ---- the workload ----

  void workload(uint64_t ops);

  // Each kind gets its draw per operation; a kind whose fault is still
  // armed (or a partition still cut) is not drawn again.
  void strike_faults();
  void arm(Armed what);

  // Runs between engine steps while a synchronous call waits.
  void poll_hook();
  static std::string replica_set(uint8_t mask);

  static std::string host_name(uint32_t h) { return h == 0 ? "front end" : "replica " + std::to_string(h - 1); }

  // Which host (0: the front end, r + 1: replica r) each NIC address is, as
  // the chain stands now (a replacement brings new NICs).
  std::map<uint32_t, uint32_t> host_of_nics();
  void start_partition();

  // The tap lets packets through once the time is up; the event and the
  // tap's removal happen here, between operations.
  void heal_if_due(bool now = false);

  // One operation of a random client; its effects (key -> value or absent)
  // go to the model if it is acknowledged, else they are in flight.
  void one_operation(uint64_t index);

  uint64_t tick() { return ++now_tick_; }

  // A journal append of a new value to one slot (kJournalSlots), left for
  // later to execute; maybe a power failure right after its acknowledgement.
  void journal_operation(const std::string& prefix, uint64_t slot);
  uint64_t journal_offset(uint64_t slot) const { return hyperloop::txn_kv_db_bytes(ko_) + 8 * slot; }
  // Power fails on the replicas in `mask` (PM keeps what the power-failure
  // model decides from `seed`); the front end's data paths stop with them.
  void power_fail(uint8_t mask, uint64_t seed);

  // Reads `k` on every replica that serves and from the front end.
  void read_everywhere(uint64_t k);

  // After a write that returned, the store not in doubt: no serving replica
  // keeps a writer's lock (locks-released).
  void check_unlocked(const std::string& prefix);
  // Reads `k` on replica r if it serves (not powered off or dead) and lets
  // a reader in: every stripe read-locked without waiting (a reader never
  // waits on a single-threaded engine; a writer could not go on).
  void read_replica(uint32_t r, uint64_t k, const char* when);

  // The store's state if the write about to be issued applies: the
  // acknowledged state (which includes every earlier write that applied)
  // with its effects. The one front end applies writes in issue order, so
  // every image a replica may show between whole records is one of these.
  void expect_state(const std::vector<std::pair<uint64_t, std::optional<uint64_t>>>& effects);
  static std::string show_state(const std::array<std::optional<uint64_t>, kKeys>& state);

  // Every key on replica r at one instant: every stripe read-locked (so no
  // record is half-applied there), then each key read. The image must be
  // one the writes produced in order -- a transaction's keys change
  // together -- which the per-key history check cannot see.
  void snapshot_replica(uint32_t r, const char* when);

  // Replica r's database, as its own CPU sees it (no front end needed).
  std::span<const uint8_t> replica_db(uint32_t r);

  // ---- faults between operations, and recovery ----

  void front_end_dies_at_boundary();
  void recover();

  // Every live member beats (the members' control-path daemons; a dead or
  // powered-off one is silent).
  void beat();

  // The chain manager finds the dead replica by its missed beats and
  // commits the next view (the member out, a new one at the tail), retrying
  // while the membership store is down; the data path follows the view.
  bool detect_and_replace();

  // Replicas identical to the mirror, no lock taken.
  void check_state(const char* when);
  void check_durable(const char* when);
  // Every journal slot holds its acknowledged value or a later one whose
  // append's outcome is unknown (journal-durable); what it holds is known
  // from then on.
  void check_journal(const char* when);

  // Everything acknowledged is on every replica, readable from each.
  void finale();

  // A put of k0 after the workload; true if acknowledged.
  bool final_put();
  void check_history();

  World world_;
  TxnKvOptions ko_;
  RunResult result_;
  std::unique_ptr<nic::Engine> engine_;
  std::unique_ptr<HyperLoopClient> client_;
  GroupId data_ = 0, locks_ = 0;
  std::unique_ptr<TxnClient> txn_;
  std::unique_ptr<TxnKv> kv_;
  std::unique_ptr<OutageStore> store_;
  std::unique_ptr<hyperloop::ChainManager> manager_;
  std::vector<std::string> members_;  // member ids in chain order (replica 0 first)
  uint64_t next_member_ = 3;
  std::map<uint64_t, std::optional<uint64_t>> acked_;  // per key: the state the store acknowledged
  std::vector<std::pair<uint64_t, std::optional<uint64_t>>> in_flight_;
  std::vector<KvOp> history_;
  using Snapshot = std::array<std::optional<uint64_t>, kKeys>;
  std::vector<Snapshot> states_;  // expect_state's, in issue order
  uint64_t now_tick_ = 0;         // the history's logical time: every call and return its own instant
  uint64_t next_value_ = 1;
  // The journal: per slot the acknowledged value (0: none) and the values
  // appended after it whose outcome the front end never learnt.
  std::array<uint64_t, kJournalSlots> journal_acked_{};
  std::array<std::vector<uint64_t>, kJournalSlots> journal_pending_;
  uint32_t journal_backlog_ = 0;  // journal records appended, not yet executed
  // The armed fault and the one that fired (recovery's case).
  Armed armed_ = Armed::kNone, fired_ = Armed::kNone;
  bool needs_recovery_ = false, recovering_ = false, client_crash_ = false;
  bool hook_reads_ = false;  // whether the poll hook may read replicas now
  uint8_t down_ = 0;         // replicas that do not serve: powered off or dead
  uint64_t polls_ = 0, fire_at_poll_ = 0;
  uint8_t powered_off_ = 0;
  uint64_t power_seed_ = 0;
  uint32_t victim_ = 0;
  // The partition: armed, standing, and whether one stood during the
  // operation (it may leave a QP broken after it heals).
  bool cut_armed_ = false, cut_ = false, cut_both_ = false, cut_seen_ = false;
  uint64_t cut_at_poll_ = 0, cut_ns_ = 0, heal_at_ns_ = 0;
  uint32_t cut_a_ = 0, cut_b_ = 0;
};

}  // namespace ferry::sim::hyperloop_store_sim
