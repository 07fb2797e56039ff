// The HyperLoop transactional store as a simulated system (docs/simulation.md,
// "hyperloop-store"): the front end (TxnKv over a TxnClient) on a 3-replica
// HyperLoop chain -- a PM data group and a DRAM lock group, every host a NIC
// of one manual engine on the World's clock -- driven by four clients' puts,
// removes, read-modify-writes and multi-key transactions on six hot keys,
// with reads from every replica (its CPU, under its read locks: one key, or
// a snapshot of every key) and from the front end, between operations and
// -- on replicas -- between any two engine steps of an operation or a
// recovery. The production code is stepped as it is: the simulator only
// chooses what happens and when, and injects faults from the client's poll
// hook (between engine steps of a synchronous call) and the fabric's tap.
//
// Faults (each from World::strike, so the shrinker can skip it; its
// parameters from World::fault_below):
//   loss, dup, delay  the engine's fabric fault model on every packet.
//   partition         packets between two hosts (the front end, replicas
//                     0..2; a replica's data and lock NICs are one host) are
//                     dropped, one way or both, from a random engine step
//                     for 0.1 ms .. 2 s of virtual time. A short cut is
//                     absorbed by RC retransmission; a long one exhausts the
//                     retries and the operation fails: it is pending, the
//                     partition heals and the front end restarts (below).
//   crash             the front end's process dies at a random engine step
//                     (HyperLoopClient::stop_group on both groups) and a new
//                     one resumes (restart_group, TxnClient::initialize with
//                     resume, TxnKv::open).
//   power             1..3 replicas lose power at a random engine step: PM
//                     keeps what the power-failure model decides, DRAM lock
//                     words are gone; each replays its log at restart and
//                     holds its locks until the front end reconciled.
//   replace           a replica (the head half the time) dies at a random
//                     engine step; the chain manager (ChainManager over the
//                     in-process membership store, on the World's clock)
//                     declares it failed after 3 missed beats of the live
//                     members' heartbeats and commits the next view; the data
//                     path follows it (replace_replica on both groups,
//                     TxnClient::recover, TxnKv::open).
//   membership-down   the membership store refuses every call for 1 ms .. 3 s
//                     when a replacement begins (drawn per replacement): the
//                     manager's replace retries until it is back.
//   client-crash      one front end serves every client, so a client crash
//                     is modelled at an operation boundary: the client whose
//                     operation just completed dies before it learns the
//                     outcome (its operation stays pending in the history)
//                     and the front end's process dies with it, between two
//                     operations -- no lock should be held, nothing in
//                     flight; the new front end must find the store as the
//                     last acknowledged write left it.
// Not simulated: slow hosts; replicas in other processes (the across-process
// read and recovery services, StoreMember, reconnect_group); a removed member
// that goes on serving reads (a dead replica here serves nothing; the
// manager's refusal of its heartbeats is checked instead).
//
// Invariants, checked after every recovery and at the end of every seed:
//   replicas-identical  every replica's database equals the front end's mirror
//   locks-free          no lock word stays taken on any replica
//   durable             every acknowledged write is readable from the front end
//   atomic              the operation in flight at a fault applied whole or not
//                       at all; every replica snapshot is the state after some
//                       prefix of the writes in issue order
//   linearizable        the whole history (writes acknowledged or pending, reads
//                       from every replica and from the front end)
//   no-spurious-error   an operation fails only when a fault struck
//   recovers            every recovery step succeeds
//   available           once every fault healed, the store takes a write
//                       (after at most one recovery)
//   membership          the manager declares exactly the dead member failed,
//                       and its view is the chain the data path rebuilds
//   no-stale-member     a removed member's heartbeats are refused
#include <algorithm>
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

namespace ferry::sim {

namespace {

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

TxnKvOptions kv_options() {
  TxnKvOptions o;
  o.slots = 32;
  o.key_max = 8;
  o.value_max = 8;
  o.locks = 4;
  return o;
}

std::string key_name(uint64_t k) { return "k" + std::to_string(k); }

std::vector<uint8_t> value_bytes(uint64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

std::optional<uint64_t> value_of(const Result<std::vector<uint8_t>>& r) {
  if (!r.ok()) return std::nullopt;
  uint64_t v = 0;
  std::memcpy(&v, r.value().data(), std::min<size_t>(8, r.value().size()));
  return v;
}

std::string show(const std::optional<uint64_t>& v) { return v ? std::to_string(*v) : "absent"; }

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

  RunResult run(uint64_t ops) {
    if (build()) workload(ops);
    if (ok()) finale();
    if (ok()) check_history();
    if (engine_ != nullptr) {
      const auto& c = engine_->fabric().counters();
      world_.count(FaultKind::kPacketLoss, c.dropped_fault.get());
      world_.count(FaultKind::kPacketDuplicate, c.duplicated_fault.get());
      world_.count(FaultKind::kPacketDelay, c.delayed_fault.get());
    }
    result_.ok = result_.invariant.empty();
    world_.event(result_.ok ? "verdict: ok" : "verdict: " + result_.invariant);
    world_.finish(&result_);
    teardown();
    return result_;
  }

 private:
  bool ok() const { return result_.invariant.empty(); }

  // The first violation ends the run; later ones are consequences.
  void fail(const std::string& invariant, const std::string& detail) {
    if (!ok()) return;
    result_.invariant = invariant;
    result_.detail = detail;
    // The event gets the first line; the result keeps the whole detail.
    world_.event("VIOLATION " + invariant + ": " + detail.substr(0, detail.find('\n')));
  }

  // ---- the cluster ----

  bool build() {
    nic::EngineOptions eo;
    eo.threaded = false;
    eo.clock = &world_.clock();
    const FaultRates& rates = world_.rates();
    eo.faults.seed = world_.fault_below(uint64_t{1} << 62) + 1;
    eo.faults.drop = rates[FaultKind::kPacketLoss];
    eo.faults.duplicate = rates[FaultKind::kPacketDuplicate];
    eo.faults.delay = rates[FaultKind::kPacketDelay];
    eo.faults.delay_max_ns = kDelayMaxNs;
    engine_ = std::make_unique<nic::Engine>(eo);
    hyperloop::ClientOptions co;
    co.op_timeout_ns = kOpTimeoutNs;
    auto client = HyperLoopClient::create(*engine_, co);
    if (!client.ok()) return recovery_failed("create the client", client.status());
    client_ = std::move(client).value();
    auto group = [&](pm::Media media, size_t bytes) -> Result<GroupId> {
      hyperloop::GroupOptions o;
      o.replicas = kReplicas;
      o.region_bytes = bytes;
      o.media = media;
      o.ring_ops = 16;
      o.window = 4;
      return client_->create_group(o);
    };
    auto data = group(pm::Media::kPm, kRegionBytes);
    if (!data.ok()) return recovery_failed("create the data group", data.status());
    auto locks = group(pm::Media::kDram, kLockRegionBytes);
    if (!locks.ok()) return recovery_failed("create the lock group", locks.status());
    data_ = data.value();
    locks_ = locks.value();
    auto txn = TxnClient::initialize(*client_, data_, locks_, txn_options(false));
    if (!txn.ok()) return recovery_failed("initialize the transaction client", txn.status());
    txn_ = std::move(txn).value();
    auto kv = TxnKv::create(*txn_, ko_);
    if (!kv.ok()) return recovery_failed("create the store", kv.status());
    kv_ = std::move(kv).value();
    for (uint64_t k = 0; k < kKeys; ++k) acked_[k] = std::nullopt;
    expect_state({});
    store_ = std::make_unique<OutageStore>(&world_.clock());
    hyperloop::ChainManagerOptions mo;
    mo.heartbeat_ms = kHeartbeatMs;
    mo.missed_beats = kMissedBeats;
    members_ = {"m0", "m1", "m2"};
    auto manager = hyperloop::ChainManager::open(store_.get(), &world_.clock(), members_, mo);
    if (!manager.ok()) return recovery_failed("open the chain manager", manager.status());
    manager_ = std::move(manager).value();
    client_->set_poll_hook([this] { poll_hook(); });
    hook_reads_ = true;
    world_.event("cluster up: front end, 3 replicas (PM data group, DRAM lock group), faults " +
                 world_.rates().to_string());
    return true;
  }

  void teardown() {
    manager_.reset();
    store_.reset();
    if (client_ != nullptr) client_->set_poll_hook({});
    if (engine_ != nullptr) engine_->fabric().set_tap({});
    kv_.reset();
    txn_.reset();
    client_.reset();
    engine_.reset();
  }

  TxnOptions txn_options(bool resume) const {
    TxnOptions to;
    to.log_bytes = kLogBytes;
    to.db_bytes = hyperloop::txn_kv_db_bytes(ko_);
    to.lock_timeout_ns = kLockTimeoutNs;
    to.resume = resume;
    return to;
  }

  bool recovery_failed(const std::string& step, const Status& st) {
    fail("recovers", step + " failed: " + st.to_string());
    return false;
  }

  // ---- the workload ----

  void workload(uint64_t ops) {
    for (uint64_t i = 0; i < ops && ok(); ++i) {
      heal_if_due();
      beat();
      strike_faults();
      one_operation(i);
      if (!ok()) break;
      if (client_crash_) {
        client_crash_ = false;
        front_end_dies_at_boundary();
      }
      if (needs_recovery_) recover();
      if (ok() && world_.rng().below(2) == 0) read_everywhere(world_.rng().below(kKeys));
      if (ok() && world_.rng().below(4) == 0)
        snapshot_replica(static_cast<uint32_t>(world_.rng().below(kReplicas)), "");
    }
  }

  // Each kind gets its draw per operation; a kind whose fault is still
  // armed (or a partition still cut) is not drawn again.
  void strike_faults() {
    if (armed_ == Armed::kNone) {
      if (world_.strike(FaultKind::kProcessCrash)) {
        arm(Armed::kCrash);
      } else if (world_.strike(FaultKind::kPowerFailure)) {
        arm(Armed::kPower);
        powered_off_ = static_cast<uint8_t>(1 + world_.fault_below(7));
        power_seed_ = world_.fault_below(uint64_t{1} << 62);
      } else if (world_.strike(FaultKind::kMemberReplace)) {
        arm(Armed::kReplace);
        victim_ = world_.fault_below(2) == 0 ? 0 : static_cast<uint32_t>(world_.fault_below(kReplicas));
      }
    }
    if (!cut_armed_ && !cut_ && world_.strike(FaultKind::kPartition)) {
      cut_armed_ = true;
      cut_at_poll_ = polls_ + 1 + world_.fault_below(kFireWithinPolls);
      cut_a_ = static_cast<uint32_t>(world_.fault_below(kReplicas + 1));  // 0: the front end, r + 1: replica r
      cut_b_ = static_cast<uint32_t>((cut_a_ + 1 + world_.fault_below(kReplicas)) % (kReplicas + 1));
      cut_both_ = world_.fault_below(2) == 0;
      // Mostly shorter than RC's retries ride out, sometimes far longer.
      static constexpr uint64_t kDurations[] = {100'000, 5'000'000, 100'000'000, 2'000'000'000};
      cut_ns_ = 1 + world_.fault_below(kDurations[world_.fault_below(4)]);
    }
    if (world_.strike(FaultKind::kClientCrash)) client_crash_ = true;
  }

  void arm(Armed what) {
    armed_ = what;
    fire_at_poll_ = polls_ + 1 + world_.fault_below(kFireWithinPolls);
  }

  // Runs between engine steps while a synchronous call waits.
  void poll_hook() {
    ++polls_;
    // A reader on some replica, between two engine steps of the front end's
    // operation or recovery: what another client may see mid-protocol.
    if (hook_reads_ && world_.rng().below(kHookReadOdds) == 0) {
      const auto r = static_cast<uint32_t>(world_.rng().below(kReplicas));
      if (world_.rng().below(4) == 0) {
        snapshot_replica(r, "mid-operation ");
      } else {
        read_replica(r, world_.rng().below(kKeys), "mid-operation ");
      }
    }
    if (recovering_) return;
    if (cut_armed_ && polls_ >= cut_at_poll_) start_partition();
    if (armed_ == Armed::kNone || polls_ < fire_at_poll_) return;
    const Armed what = armed_;
    armed_ = Armed::kNone;
    fired_ = what;
    needs_recovery_ = true;
    switch (what) {
      case Armed::kCrash:
        world_.event("front end crashes (its data paths stop where they stand)");
        (void)client_->stop_group(data_);
        (void)client_->stop_group(locks_);
        break;
      case Armed::kPower:
        world_.event("power fails on replicas " + replica_set(powered_off_));
        down_ |= powered_off_;
        for (uint32_t r = 0; r < kReplicas; ++r) {
          if ((powered_off_ >> r & 1) == 0) continue;
          client_->replica(data_, r)->domain->power_fail(power_seed_ + 2 * r);
          client_->replica(locks_, r)->domain->power_fail(power_seed_ + 2 * r + 1);
        }
        (void)client_->stop_group(data_);
        (void)client_->stop_group(locks_);
        break;
      case Armed::kReplace:
        world_.event("replica " + std::to_string(victim_) + " dies" + (victim_ == 0 ? " (the head)" : ""));
        down_ |= static_cast<uint8_t>(1u << victim_);
        (void)client_->kill_replica(data_, victim_);
        (void)client_->kill_replica(locks_, victim_);
        break;
      case Armed::kNone:
        break;
    }
  }

  static std::string replica_set(uint8_t mask) {
    std::string s;
    for (uint32_t r = 0; r < kReplicas; ++r) {
      if ((mask >> r & 1) != 0) s += (s.empty() ? "" : ",") + std::to_string(r);
    }
    return s;
  }

  static std::string host_name(uint32_t h) { return h == 0 ? "front end" : "replica " + std::to_string(h - 1); }

  // Which host (0: the front end, r + 1: replica r) each NIC address is, as
  // the chain stands now (a replacement brings new NICs).
  std::map<uint32_t, uint32_t> host_of_nics() {
    std::map<uint32_t, uint32_t> m;
    for (GroupId g : {data_, locks_}) {
      for (uint32_t r = 0; r < kReplicas; ++r) {
        auto rings = client_->replica_rings(g, r);
        if (rings.ok() && rings->nic != nullptr) m[rings->nic->address()] = r + 1;
      }
    }
    return m;
  }

  void start_partition() {
    cut_armed_ = false;
    cut_ = true;
    heal_at_ns_ = world_.now() + cut_ns_;
    world_.event("partition: " + host_name(cut_a_) + (cut_both_ ? " <-/-> " : " -/-> ") + host_name(cut_b_) + " for " +
                 std::to_string(cut_ns_ / 1000) + " us");
    auto hosts = host_of_nics();
    const uint32_t a = cut_a_, b = cut_b_;
    const bool both = cut_both_;
    engine_->fabric().set_tap([this, hosts = std::move(hosts), a, b, both](const nic::Packet& p) {
      if (world_.now() >= heal_at_ns_) return false;
      auto host = [&](uint32_t nic) {
        auto it = hosts.find(nic);
        return it == hosts.end() ? 0u : it->second;
      };
      const uint32_t from = host(p.src_nic), to = host(p.dst_nic);
      return (from == a && to == b) || (both && from == b && to == a);
    });
  }

  // The tap lets packets through once the time is up; the event and the
  // tap's removal happen here, between operations.
  void heal_if_due(bool now = false) {
    if (!cut_) return;
    if (now) world_.clock().advance_to(heal_at_ns_);
    if (world_.now() < heal_at_ns_) return;
    cut_ = false;
    engine_->fabric().set_tap({});
    world_.event("partition heals");
  }

  // One operation of a random client; its effects (key -> value or absent)
  // go to the model if it is acknowledged, else they are in flight.
  void one_operation(uint64_t index) {
    Rng& rng = world_.rng();
    const auto client = static_cast<uint32_t>(rng.below(kClients));
    const uint64_t k = rng.below(kKeys);
    std::vector<std::pair<uint64_t, std::optional<uint64_t>>> effects;
    std::vector<KvOp> ops;
    std::string what;
    const uint64_t t0 = tick();
    Status st;
    ++result_.ops;
    const std::string prefix = "op " + std::to_string(index) + " c" + std::to_string(client) + " ";
    switch (rng.below(5)) {
      case 0:
      case 1: {
        const uint64_t v = next_value_++;
        world_.event(prefix + "put " + key_name(k) + "=" + std::to_string(v));
        expect_state({{k, v}});
        st = kv_->put(key_name(k), value_bytes(v));
        effects.emplace_back(k, v);
        ops.push_back(KvOp::put(client, k, v, t0, std::nullopt));
        break;
      }
      case 2: {
        world_.event(prefix + "remove " + key_name(k));
        expect_state({{k, std::nullopt}});
        st = kv_->remove(key_name(k));
        if (st.code() == Code::kNotFound) {
          ops.push_back(KvOp::get(client, k, std::nullopt, t0, std::nullopt));  // observed absent
        } else {
          effects.emplace_back(k, std::nullopt);
          ops.push_back(KvOp::remove(client, k, t0, std::nullopt));
        }
        break;
      }
      case 3: {  // read-modify-write: read under the lock, write a new version
        std::optional<uint64_t> seen;
        const uint64_t v = next_value_++;
        bool called = false;
        world_.event(prefix + "read-modify-write " + key_name(k) + " := " + std::to_string(v));
        expect_state({{k, v}});
        st = kv_->read_modify_write(key_name(k), [&](std::optional<std::span<const uint8_t>> cur) {
          called = true;
          if (cur) {
            uint64_t x = 0;
            std::memcpy(&x, cur->data(), std::min<size_t>(8, cur->size()));
            seen = x;
          }
          return std::optional<std::vector<uint8_t>>(value_bytes(v));
        });
        if (called) {
          ops.push_back(KvOp::get(client, k, seen, t0, std::nullopt));
          what = " (read " + show(seen) + ")";
        }
        effects.emplace_back(k, v);
        ops.push_back(KvOp::put(client, k, v, t0, std::nullopt));
        break;
      }
      default: {  // a transaction over 2-3 keys: puts, and a remove of one the front end has
        std::vector<uint64_t> keys = {k};
        const uint64_t want = 2 + rng.below(2);
        while (keys.size() < want) {
          const uint64_t c = rng.below(kKeys);
          if (std::find(keys.begin(), keys.end(), c) == keys.end()) keys.push_back(c);
        }
        std::vector<std::string> names;
        std::vector<std::vector<uint8_t>> values;
        std::vector<TxnKvOp> txn;
        std::string text;
        for (uint64_t key : keys) names.push_back(key_name(key));
        for (size_t i = 0; i < keys.size(); ++i) {
          const bool remove = i == 0 && rng.below(3) == 0 && kv_->get(names[i]).ok();
          if (remove) {
            values.emplace_back();
            effects.emplace_back(keys[i], std::nullopt);
            ops.push_back(KvOp::remove(client, keys[i], t0, std::nullopt));
            text += " remove " + names[i];
          } else {
            const uint64_t v = next_value_++;
            values.push_back(value_bytes(v));
            effects.emplace_back(keys[i], v);
            ops.push_back(KvOp::put(client, keys[i], v, t0, std::nullopt));
            text += " put " + names[i] + "=" + std::to_string(v);
          }
        }
        for (size_t i = 0; i < keys.size(); ++i) {
          txn.push_back(values[i].empty() ? TxnKvOp{TxnKvOp::kRemove, names[i], {}}
                                          : TxnKvOp{TxnKvOp::kPut, names[i], values[i]});
        }
        world_.event(prefix + "transaction" + text);
        expect_state(effects);
        st = kv_->transaction(txn);
      }
    }
    const uint64_t t1 = tick();
    const bool done = st.ok() || st.code() == Code::kNotFound;
    if (done && !client_crash_) {
      for (const auto& [key, v] : effects) acked_[key] = v;
      for (KvOp& op : ops) op.complete_ns = t1;
      ++result_.acknowledged;
      world_.event(prefix + (st.ok() ? "ok" : "not found") + what);
    } else if (done) {
      // The store acknowledged it, but its client died before it learnt
      // so: pending in the history; the front end, which knows, keeps it.
      for (const auto& [key, v] : effects) acked_[key] = v;
      ++result_.pending;
      world_.event(prefix + "done, but its client crashes before it learns so" + what);
    } else {
      ++result_.pending;
      world_.event(prefix + "failed: " + st.to_string() + " (pending)");
      if (fired_ == Armed::kNone && !cut_ && !cut_seen_) {
        fail("no-spurious-error", prefix + "failed with no fault: " + st.to_string());
        return;
      }
      needs_recovery_ = true;
      in_flight_ = effects;
    }
    if (cut_) cut_seen_ = true;
    history_.insert(history_.end(), ops.begin(), ops.end());
  }

  uint64_t tick() { return ++now_tick_; }

  // Reads `k` on every replica that serves and from the front end.
  void read_everywhere(uint64_t k) {
    for (uint32_t r = 0; r < kReplicas && ok(); ++r) read_replica(r, k, "");
    if (ok() && kv_ != nullptr) {
      const uint64_t t0 = tick();
      const auto v = value_of(kv_->get(key_name(k)));
      history_.push_back(KvOp::get(kFrontEndReader, k, v, t0, tick()));
      ++result_.reads;
      world_.event("read front end " + key_name(k) + " -> " + show(v));
    }
  }

  // Reads `k` on replica r if it serves (not powered off or dead) and lets
  // a reader in: every stripe read-locked without waiting (a reader never
  // waits on a single-threaded engine; a writer could not go on).
  void read_replica(uint32_t r, uint64_t k, const char* when) {
    const std::string who = std::string("read ") + when + "replica " + std::to_string(r) + " " + key_name(k);
    if ((down_ >> r & 1) != 0) return;
    auto view = client_->replica(locks_, r);
    if (!view.ok()) {
      fail("recovers", "replica " + std::to_string(r) + "'s lock region: " + view.status().to_string());
      return;
    }
    ReplicaLocks locks(view->region->data(), kLockRegionBytes);
    uint32_t held = 0;
    while (held < ko_.locks && locks.try_rd_lock(held)) ++held;
    if (held == ko_.locks) {
      const uint64_t t0 = tick();
      TxnKvReplicaReader reader(replica_db(r), locks, ko_);
      auto got = reader.get(key_name(k));
      if (!got.ok() && got.status().code() != Code::kNotFound) {
        // A read the store promises never to answer: a slot torn or
        // damaged under the read locks.
        fail("linearizable", who + " failed: " + got.status().to_string());
      } else {
        history_.push_back(KvOp::get(kReplicaReader + r, k, value_of(got), t0, tick()));
        ++result_.reads;
        world_.event(who + " -> " + show(value_of(got)));
      }
    } else {
      world_.event(who + " refused (locks held)");
    }
    for (uint32_t l = 0; l < held; ++l) locks.rd_unlock(l);
  }

  // The store's state if the write about to be issued applies: the
  // acknowledged state (which includes every earlier write that applied)
  // with its effects. The one front end applies writes in issue order, so
  // every image a replica may show between whole records is one of these.
  void expect_state(const std::vector<std::pair<uint64_t, std::optional<uint64_t>>>& effects) {
    Snapshot next;
    for (uint64_t k = 0; k < kKeys; ++k) next[k] = acked_[k];
    for (const auto& [k, v] : effects) next[k] = v;
    states_.push_back(next);
  }

  static std::string show_state(const std::array<std::optional<uint64_t>, kKeys>& state) {
    std::string text;
    for (uint64_t k = 0; k < kKeys; ++k) text += (k == 0 ? "" : " ") + key_name(k) + "=" + show(state[k]);
    return text;
  }

  // Every key on replica r at one instant: every stripe read-locked (so no
  // record is half-applied there), then each key read. The image must be
  // one the writes produced in order -- a transaction's keys change
  // together -- which the per-key history check cannot see.
  void snapshot_replica(uint32_t r, const char* when) {
    if ((down_ >> r & 1) != 0) return;
    const std::string who = std::string("snapshot ") + when + "replica " + std::to_string(r);
    ReplicaLocks locks(client_->replica(locks_, r)->region->data(), kLockRegionBytes);
    uint32_t held = 0;
    while (held < ko_.locks && locks.try_rd_lock(held)) ++held;
    if (held == ko_.locks) {
      const uint64_t t0 = tick();
      TxnKvReplicaReader reader(replica_db(r), locks, ko_);
      Snapshot seen;
      bool readable = true;
      for (uint64_t k = 0; k < kKeys && readable; ++k) {
        auto got = reader.get(key_name(k));
        readable = got.ok() || got.status().code() == Code::kNotFound;
        if (!readable) fail("linearizable", who + " cannot read " + key_name(k) + ": " + got.status().to_string());
        seen[k] = value_of(got);
      }
      if (readable) {
        const uint64_t t1 = tick();
        for (uint64_t k = 0; k < kKeys; ++k) history_.push_back(KvOp::get(kReplicaReader + r, k, seen[k], t0, t1));
        result_.reads += kKeys;
        world_.event(who + ": " + show_state(seen));
        if (std::find(states_.rbegin(), states_.rend(), seen) == states_.rend()) {
          fail("atomic", who + " shows " + show_state(seen) +
                             ", a state no prefix of the writes produced (last: " + show_state(states_.back()) + ")");
        }
      }
    } else {
      world_.event(who + " refused (locks held)");
    }
    for (uint32_t l = 0; l < held; ++l) locks.rd_unlock(l);
  }

  // Replica r's database, as its own CPU sees it (no front end needed).
  std::span<const uint8_t> replica_db(uint32_t r) {
    ReplicaView v = client_->replica(data_, r).value();
    return {v.region->data() + hyperloop::kTxnControlBytes + kLogBytes, hyperloop::txn_kv_db_bytes(ko_)};
  }

  // ---- faults between operations, and recovery ----

  void front_end_dies_at_boundary() {
    world_.event("the client crashes; the front end's process dies with it, between operations");
    (void)client_->stop_group(data_);
    (void)client_->stop_group(locks_);
    if (!needs_recovery_) fired_ = Armed::kCrash;
    needs_recovery_ = true;
  }

  void recover() {
    const Armed fault = fired_;
    recovering_ = true;
    needs_recovery_ = false;
    fired_ = Armed::kNone;
    kv_.reset();
    txn_.reset();
    // A cut link heals before the chain is rebuilt (the simulator waits for
    // it, in virtual time): recovery under a standing partition is the
    // membership layer's problem, not the data path's.
    heal_if_due(true);
    cut_seen_ = false;
    if (fault != Armed::kPower) {
      for (uint64_t k = 0; k < kKeys && ok(); ++k) read_everywhere(k);
    }
    const uint32_t lock_words = hyperloop::txn_kv_lock_words(ko_);
    if (fault == Armed::kReplace) {
      world_.event("recovery: replica " + std::to_string(victim_) + " replaced, the log reconciled");
      if (!detect_and_replace()) return;
      // The chain is rebuilt under the readers' feet: no reads inside it.
      hook_reads_ = false;
      auto a = client_->replace_replica(data_, victim_);
      if (!a.ok()) return (void)recovery_failed("replace_replica (data)", a.status());
      auto b = client_->replace_replica(locks_, victim_);
      if (!b.ok()) return (void)recovery_failed("replace_replica (locks)", b.status());
      down_ = 0;  // the survivors and the new tail, renumbered
      hook_reads_ = true;
      hyperloop::TxnRecovery report;
      auto t = TxnClient::recover(*client_, data_, locks_, txn_options(true), lock_words, &report);
      if (!t.ok()) return (void)recovery_failed("TxnClient::recover", t.status());
      txn_ = std::move(t).value();
      world_.event("recovery: copied " + std::to_string(a->bytes_copied) + " bytes; log head " +
                   std::to_string(report.head) + " .. tail " + std::to_string(report.tail) + ", " +
                   std::to_string(report.records) + " records run again, " + std::to_string(report.locks_released) +
                   " locks released");
    } else {
      if (fault == Armed::kPower) {
        for (uint32_t r = 0; r < kReplicas; ++r) {
          if ((powered_off_ >> r & 1) == 0) continue;
          ReplicaView data = client_->replica(data_, r).value();
          auto replay = hyperloop::replay_txn_log({data.region->data(), data.region->size()});
          if (!replay.ok()) return (void)recovery_failed("replica " + std::to_string(r) + " replay", replay.status());
          data.region->persist(data.region->data(), data.region->size());
          ReplicaView locks = client_->replica(locks_, r).value();
          ReplicaLocks(locks.region->data(), kLockRegionBytes).hold_until_recovered(lock_words);
          down_ &= static_cast<uint8_t>(~(1u << r));  // it serves again (its locks say when)
          world_.event("recovery: replica " + std::to_string(r) + " restarts, replays " +
                       std::to_string(replay->records) + " records (head " + std::to_string(replay->head_before) +
                       " -> " + std::to_string(replay->head_after) + "), holds its locks");
        }
        for (uint64_t k = 0; k < kKeys && ok(); ++k) read_everywhere(k);
        if (!ok()) return;
      }
      world_.event("recovery: the chain is rebuilt over the same members; a new front end resumes");
      hook_reads_ = false;
      Status s = client_->restart_group(data_);
      if (!s.ok()) return (void)recovery_failed("restart_group (data)", s);
      s = client_->restart_group(locks_);
      if (!s.ok()) return (void)recovery_failed("restart_group (locks)", s);
      hook_reads_ = true;
      auto t = TxnClient::initialize(*client_, data_, locks_, txn_options(true));
      if (!t.ok()) return (void)recovery_failed("TxnClient::initialize (resume)", t.status());
      txn_ = std::move(t).value();
    }
    auto kv = TxnKv::open(*txn_, ko_);
    if (!kv.ok()) return (void)recovery_failed("TxnKv::open", kv.status());
    kv_ = std::move(kv).value();
    world_.event("recovery: the store is open again (log head " + std::to_string(txn_->head()) + ")");
    check_state("after the recovery");
    if (!ok()) return;
    // The operation in flight: applied whole or not at all.
    bool applied = !in_flight_.empty(), absent = true;
    std::string seen;
    for (const auto& [k, v] : in_flight_) {
      const std::optional<uint64_t> now = value_of(kv_->get(key_name(k)));
      applied = applied && now == v;
      absent = absent && now == acked_[k];
      seen += " " + key_name(k) + ": wrote " + show(v) + ", before " + show(acked_[k]) + ", now " + show(now) + ";";
    }
    if (!applied && !absent) {
      fail("atomic", "the operation in flight was applied in part:" + seen);
      return;
    }
    if (!in_flight_.empty())
      world_.event(std::string("the operation in flight was ") + (applied ? "applied" : "not applied"));
    if (applied && !absent) {
      for (const auto& [k, v] : in_flight_) acked_[k] = v;
    }
    in_flight_.clear();
    check_durable("after the recovery");
    for (uint64_t k = 0; k < kKeys && ok(); ++k) read_everywhere(k);
    recovering_ = false;
  }

  // Every live member beats (the members' control-path daemons; a dead or
  // powered-off one is silent).
  void beat() {
    const uint64_t version = manager_->view().version;
    for (uint32_t r = 0; r < kReplicas; ++r) {
      if ((down_ >> r & 1) != 0) continue;
      const Status st = manager_->heartbeat(members_[r], version);
      if (!st.ok())
        fail("membership", "member " + members_[r] + " (replica " + std::to_string(r) + ") refused: " + st.to_string());
    }
  }

  // The chain manager finds the dead replica by its missed beats and
  // commits the next view (the member out, a new one at the tail), retrying
  // while the membership store is down; the data path follows the view.
  bool detect_and_replace() {
    if (world_.strike(FaultKind::kMembershipDown, kMembershipDownPerReplacement)) {
      const uint64_t ms = 1 + world_.fault_below(3000);
      store_->down_until(world_.now() + ms * 1'000'000);
      world_.event("the membership store is down for " + std::to_string(ms) + " ms");
    }
    const std::string dead = members_[victim_];
    const uint64_t start = world_.now();
    for (uint32_t period = 0;; ++period) {
      const auto failed = manager_->failed_members();
      if (std::find(failed.begin(), failed.end(), dead) != failed.end()) break;
      if (!failed.empty()) {
        fail("membership", "the manager declared " + failed.front() + " failed, a live member; " + dead + " died");
        return false;
      }
      if (period > 2 * kMissedBeats) {
        fail("membership", dead + " was not declared failed after " + std::to_string(period) + " heartbeat periods");
        return false;
      }
      world_.clock().advance_ns(uint64_t{kHeartbeatMs} * 1'000'000);
      beat();
    }
    world_.event("chain manager: " + dead + " missed " + std::to_string(kMissedBeats) + " beats (" +
                 std::to_string((world_.now() - start) / 1'000'000) + " ms after recovery began)");
    const std::string joining = "m" + std::to_string(next_member_++);
    const uint64_t old_version = manager_->view().version;
    for (uint32_t attempt = 0;; ++attempt) {
      auto view = manager_->replace(dead, joining);
      if (view.ok()) break;
      if (view.status().code() != Code::kUnavailable || attempt > 100) {
        fail("recovers", "the chain manager's replace: " + view.status().to_string());
        return false;
      }
      if (attempt == 0) world_.event("chain manager: replace refused (" + view.status().to_string() + "); retrying");
      world_.clock().advance_ns(uint64_t{kHeartbeatMs} * 1'000'000);
      beat();
    }
    members_.erase(members_.begin() + victim_);
    members_.push_back(joining);
    const auto view = manager_->view();
    std::string order;
    for (const auto& m : view.members) order += (order.empty() ? "" : ",") + m.id;
    world_.event("chain manager: view " + std::to_string(view.version) + " = " + order);
    std::vector<std::string> ids;
    for (const auto& m : view.members) ids.push_back(m.id);
    if (ids != members_) {
      fail("membership", "the view " + order + " is not the chain the data path rebuilds");
      return false;
    }
    // The removed member is told it must not serve, whatever view it names.
    if (manager_->heartbeat(dead, old_version).code() != Code::kFailedPrecondition ||
        manager_->heartbeat(dead, view.version).code() != Code::kFailedPrecondition) {
      fail("no-stale-member", "removed member " + dead + " is still accepted by the chain manager");
      return false;
    }
    return true;
  }

  // Replicas identical to the mirror, no lock taken.
  void check_state(const char* when) {
    const auto mirror = txn_->db();
    for (uint32_t r = 0; r < kReplicas; ++r) {
      const auto db = replica_db(r);
      if (std::memcmp(db.data(), mirror.data(), mirror.size()) != 0) {
        size_t at = 0;
        while (at < mirror.size() && db[at] == mirror[at]) ++at;
        fail("replicas-identical", "replica " + std::to_string(r) + "'s database differs from the front end's " + when +
                                       " (first at database byte " + std::to_string(at) + ")");
        return;
      }
    }
    const uint32_t lock_words = hyperloop::txn_kv_lock_words(ko_);
    for (uint32_t r = 0; r < kReplicas; ++r) {
      ReplicaLocks locks(client_->replica(locks_, r)->region->data(), kLockRegionBytes);
      for (uint32_t l = 0; l < lock_words; ++l) {
        if (locks.word(l) != 0) {
          char word[32];
          std::snprintf(word, sizeof word, "%016llx", static_cast<unsigned long long>(locks.word(l)));
          fail("locks-free", "replica " + std::to_string(r) + " lock " + std::to_string(l) + " stayed taken " + when +
                                 " (word " + word + ")");
          return;
        }
      }
    }
  }

  void check_durable(const char* when) {
    for (uint64_t k = 0; k < kKeys; ++k) {
      const auto now = value_of(kv_->get(key_name(k)));
      if (now != acked_[k]) {
        fail("durable", key_name(k) + " " + when + ": " + show(now) + ", acknowledged " + show(acked_[k]));
        return;
      }
    }
  }

  // Everything acknowledged is on every replica, readable from each.
  void finale() {
    armed_ = Armed::kNone;
    cut_armed_ = false;
    heal_if_due(true);
    // Once every fault has healed the store must take a write, after at
    // most one recovery: a fault may have broken a data path under an
    // operation that still succeeded (an unlock that did not get through),
    // which only the next write finds.
    for (int attempt = 0; ok(); ++attempt) {
      if (final_put()) break;
      if (attempt == 1) {
        fail("available", "the store takes no write after every fault healed and a recovery");
        return;
      }
      recover();
    }
    if (!ok()) return;
    client_->set_poll_hook({});
    world_.event("workload done; final checks");
    check_state("at the end");
    if (ok()) check_durable("at the end");
    for (uint64_t k = 0; k < kKeys && ok(); ++k) read_everywhere(k);
    result_.sim_ns = world_.now();
  }

  // A put of k0 after the workload; true if acknowledged.
  bool final_put() {
    const uint64_t k = 0, v = next_value_++;
    const uint64_t t0 = tick();
    ++result_.ops;
    world_.event("final put " + key_name(k) + "=" + std::to_string(v));
    expect_state({{k, v}});
    const Status st = kv_->put(key_name(k), value_bytes(v));
    const uint64_t t1 = tick();
    if (st.ok()) {
      acked_[k] = v;
      history_.push_back(KvOp::put(kClients, k, v, t0, t1));
      ++result_.acknowledged;
      world_.event("final put ok");
      return true;
    }
    ++result_.pending;
    history_.push_back(KvOp::put(kClients, k, v, t0, std::nullopt));
    world_.event("final put failed: " + st.to_string() + " (pending)");
    if (fired_ == Armed::kNone && !cut_seen_) {
      fail("no-spurious-error", "the final put failed with no fault: " + st.to_string());
      return false;
    }
    in_flight_ = {{k, v}};
    return false;
  }

  void check_history() {
    const auto verdict = check_kv_history(history_);
    world_.event("history: " + std::to_string(history_.size()) + " operations, " + verdict_name(verdict.verdict));
    if (!verdict.ok) fail("linearizable", std::string(verdict_name(verdict.verdict)) + ": " + verdict.explanation);
  }

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
  uint64_t now_tick_ = 0;  // the history's logical time: every call and return its own instant
  uint64_t next_value_ = 1;
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

}  // namespace

System hyperloop_store_system() {
  System s;
  s.name = "hyperloop-store";
  s.description =
      "the HyperLoop transactional store: TxnKv's front end on a 3-replica chain (PM data, DRAM locks), four "
      "clients on six hot keys, reads from every replica; front-end and client crashes, power failures, replica "
      "replacement, partitions and packet faults";
  s.faults = {FaultKind::kPacketLoss,    FaultKind::kPacketDuplicate, FaultKind::kPacketDelay,
              FaultKind::kPartition,     FaultKind::kProcessCrash,    FaultKind::kPowerFailure,
              FaultKind::kMemberReplace, FaultKind::kClientCrash,     FaultKind::kMembershipDown};
  s.default_ops = 150;
  s.run = [default_ops = s.default_ops](const RunOptions& options) {
    Run run(options);
    return run.run(options.ops == 0 ? default_ops : options.ops);
  };
  return s;
}

}  // namespace ferry::sim
