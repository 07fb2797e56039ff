// The HyperLoop transactional store as a simulated system (docs/simulation.md,
// "hyperloop-store"): the front end (TxnKv over a TxnClient) on a 3-replica
// HyperLoop chain -- a PM data group and a DRAM lock group, every host a NIC
// of one manual engine on the World's clock -- driven by four clients' puts,
// removes, read-modify-writes and multi-key transactions on six hot keys,
// with reads from every replica (its CPU, under its read locks: one key, or
// a snapshot of every key) and from the front end, between operations and
// -- on replicas -- between any two engine steps of an operation or a
// recovery; and by a journal writer on the same log, which acknowledges a
// record once TxnClient::append returns (a WAL's commit point) and leaves
// it for the next write or a recovery to execute. The production code is
// stepped as it is: the simulator only chooses what happens and when, and
// injects faults from the client's poll hook (between engine steps of a
// synchronous call) and the fabric's tap.
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
//   power             1..3 replicas lose power at a random engine step (or
//                     right after a journal append was acknowledged): PM
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
//   journal-durable     every acknowledged journal append is applied once its
//                       record runs (after a recovery, at the end)
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
#include "hyperloop_store_run.h"

namespace ferry::sim {
namespace hyperloop_store_sim {

RunResult Run::run(uint64_t ops) {
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

void Run::fail(const std::string& invariant, const std::string& detail) {
  if (!ok()) return;
  result_.invariant = invariant;
  result_.detail = detail;
  // The event gets the first line; the result keeps the whole detail.
  world_.event("VIOLATION " + invariant + ": " + detail.substr(0, detail.find('\n')));
}

bool Run::build() {
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

void Run::teardown() {
  manager_.reset();
  store_.reset();
  if (client_ != nullptr) client_->set_poll_hook({});
  if (engine_ != nullptr) engine_->fabric().set_tap({});
  kv_.reset();
  txn_.reset();
  client_.reset();
  engine_.reset();
}

TxnOptions Run::txn_options(bool resume) const {
  TxnOptions to;
  to.log_bytes = kLogBytes;
  to.db_bytes = hyperloop::txn_kv_db_bytes(ko_) + 8 * kJournalSlots;
  to.lock_timeout_ns = kLockTimeoutNs;
  to.resume = resume;
  return to;
}

bool Run::recovery_failed(const std::string& step, const Status& st) {
  fail("recovers", step + " failed: " + st.to_string());
  return false;
}

void Run::workload(uint64_t ops) {
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
    if (ok() && world_.rng().below(4) == 0) snapshot_replica(static_cast<uint32_t>(world_.rng().below(kReplicas)), "");
  }
}

void Run::strike_faults() {
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

void Run::arm(Armed what) {
  armed_ = what;
  fire_at_poll_ = polls_ + 1 + world_.fault_below(kFireWithinPolls);
}

void Run::poll_hook() {
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
      power_fail(powered_off_, power_seed_);
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

void Run::power_fail(uint8_t mask, uint64_t seed) {
  world_.event("power fails on replicas " + replica_set(mask));
  powered_off_ = mask;
  down_ |= mask;
  for (uint32_t r = 0; r < kReplicas; ++r) {
    if ((mask >> r & 1) == 0) continue;
    client_->replica(data_, r)->domain->power_fail(seed + 2 * r);
    client_->replica(locks_, r)->domain->power_fail(seed + 2 * r + 1);
  }
  (void)client_->stop_group(data_);
  (void)client_->stop_group(locks_);
}

std::string Run::replica_set(uint8_t mask) {
  std::string s;
  for (uint32_t r = 0; r < kReplicas; ++r) {
    if ((mask >> r & 1) != 0) s += (s.empty() ? "" : ",") + std::to_string(r);
  }
  return s;
}

std::map<uint32_t, uint32_t> Run::host_of_nics() {
  std::map<uint32_t, uint32_t> m;
  for (GroupId g : {data_, locks_}) {
    for (uint32_t r = 0; r < kReplicas; ++r) {
      auto rings = client_->replica_rings(g, r);
      if (rings.ok() && rings->nic != nullptr) m[rings->nic->address()] = r + 1;
    }
  }
  return m;
}

void Run::start_partition() {
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

void Run::heal_if_due(bool now) {
  if (!cut_) return;
  if (now) world_.clock().advance_to(heal_at_ns_);
  if (world_.now() < heal_at_ns_) return;
  cut_ = false;
  engine_->fabric().set_tap({});
  world_.event("partition heals");
}

void Run::one_operation(uint64_t index) {
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
  switch (rng.below(6)) {
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
    case 5:
      journal_operation(prefix, k % kJournalSlots);
      return;
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
  if (st.ok()) journal_backlog_ = 0;  // a write runs every record appended before its own
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
  if (done && kv_->in_doubt()) {
    // Applied, but an unlock did not get through (TxnKv::in_doubt): a
    // front end resumes at once, as a deployment's would.
    world_.event("  the store is in doubt (an unlock did not get through): a front end resumes");
    needs_recovery_ = true;
  } else if (done) {
    check_unlocked(prefix);
  }
  if (cut_) cut_seen_ = true;
  history_.insert(history_.end(), ops.begin(), ops.end());
}

void Run::journal_operation(const std::string& prefix, uint64_t slot) {
  Status st;
  if (journal_backlog_ >= kJournalBacklog) {
    world_.event(prefix + "journal: runs the " + std::to_string(journal_backlog_) + " records appended first");
    st = txn_->execute_all();
    if (st.ok()) journal_backlog_ = 0;
  }
  const bool appending = st.ok();
  const uint64_t v = next_value_++;
  if (appending) {
    world_.event(prefix + "journal append j" + std::to_string(slot) + "=" + std::to_string(v));
    const std::vector<uint8_t> bytes = value_bytes(v);
    const hyperloop::TxnWrite write{journal_offset(slot), bytes};
    st = txn_->append({&write, 1}).status();
  }
  if (cut_) cut_seen_ = true;
  if (st.ok()) {
    // Acknowledged: durable on every replica, so says the contract, though
    // nothing has executed it yet. (A client that dies now never learns so;
    // the front end knows, and the obligation stands.)
    journal_acked_[slot] = v;
    journal_pending_[slot].clear();
    ++journal_backlog_;
    ++result_.acknowledged;
    world_.event(prefix + "journal ok (on Append; not yet executed)");
    if (armed_ == Armed::kNone && !needs_recovery_ && world_.strike(FaultKind::kPowerFailure, kPowerAfterJournal)) {
      const auto mask = static_cast<uint8_t>(1 + world_.fault_below(7));
      const uint64_t seed = world_.fault_below(uint64_t{1} << 62);
      world_.event("right after the acknowledgement:");
      power_fail(mask, seed);
      fired_ = Armed::kPower;
      needs_recovery_ = true;
    }
    return;
  }
  ++result_.pending;
  if (appending) journal_pending_[slot].push_back(v);
  world_.event(prefix + "journal failed: " + st.to_string() + (appending ? " (pending)" : " (before its append)"));
  if (fired_ == Armed::kNone && !cut_ && !cut_seen_) {
    fail("no-spurious-error", prefix + "journal failed with no fault: " + st.to_string());
    return;
  }
  needs_recovery_ = true;
}

void Run::read_everywhere(uint64_t k) {
  for (uint32_t r = 0; r < kReplicas && ok(); ++r) read_replica(r, k, "");
  if (ok() && kv_ != nullptr) {
    const uint64_t t0 = tick();
    const auto v = value_of(kv_->get(key_name(k)));
    history_.push_back(KvOp::get(kFrontEndReader, k, v, t0, tick()));
    ++result_.reads;
    world_.event("read front end " + key_name(k) + " -> " + show(v));
  }
}

// After a write that returned and left the store not in doubt, no serving
// replica has a lock word held by a writer (this front end is the only
// one): else readers there wait for an unlock nobody will send.
void Run::check_unlocked(const std::string& prefix) {
  const uint32_t words = hyperloop::txn_kv_lock_words(ko_);
  for (uint32_t r = 0; r < kReplicas && ok(); ++r) {
    if ((down_ >> r & 1) != 0) continue;
    auto view = client_->replica(locks_, r);
    if (!view.ok()) continue;
    ReplicaLocks locks(view->region->data(), kLockRegionBytes);
    for (uint32_t l = 0; l < words; ++l) {
      if ((locks.word(l) & ReplicaLocks::kWriter) == 0) continue;
      fail("locks-released", prefix + "returned with the store not in doubt, yet replica " + std::to_string(r) +
                                 " still has lock " + std::to_string(l) +
                                 " held by a writer: its readers wait forever");
      return;
    }
  }
}

void Run::read_replica(uint32_t r, uint64_t k, const char* when) {
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

void Run::expect_state(const std::vector<std::pair<uint64_t, std::optional<uint64_t>>>& effects) {
  Snapshot next;
  for (uint64_t k = 0; k < kKeys; ++k) next[k] = acked_[k];
  for (const auto& [k, v] : effects) next[k] = v;
  states_.push_back(next);
}

std::string Run::show_state(const std::array<std::optional<uint64_t>, kKeys>& state) {
  std::string text;
  for (uint64_t k = 0; k < kKeys; ++k) text += (k == 0 ? "" : " ") + key_name(k) + "=" + show(state[k]);
  return text;
}

void Run::snapshot_replica(uint32_t r, const char* when) {
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

std::span<const uint8_t> Run::replica_db(uint32_t r) {
  ReplicaView v = client_->replica(data_, r).value();
  return {v.region->data() + hyperloop::kTxnControlBytes + kLogBytes, txn_options(false).db_bytes};
}

}  // namespace hyperloop_store_sim

using hyperloop_store_sim::Run;

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
