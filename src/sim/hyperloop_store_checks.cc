// The HyperLoop store simulation's faults between operations, recovery, and
// the invariants it checks (the system: hyperloop_store.cc).
#include "hyperloop_store_run.h"

namespace ferry::sim::hyperloop_store_sim {

void Run::front_end_dies_at_boundary() {
  world_.event("the client crashes; the front end's process dies with it, between operations");
  (void)client_->stop_group(data_);
  (void)client_->stop_group(locks_);
  if (!needs_recovery_) fired_ = Armed::kCrash;
  needs_recovery_ = true;
}

void Run::recover() {
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
  journal_backlog_ = 0;  // the resumed front end ran every record of the log
  check_durable("after the recovery");
  if (ok()) check_journal("after the recovery");
  for (uint64_t k = 0; k < kKeys && ok(); ++k) read_everywhere(k);
  recovering_ = false;
}

void Run::beat() {
  const uint64_t version = manager_->view().version;
  for (uint32_t r = 0; r < kReplicas; ++r) {
    if ((down_ >> r & 1) != 0) continue;
    const Status st = manager_->heartbeat(members_[r], version);
    if (!st.ok())
      fail("membership", "member " + members_[r] + " (replica " + std::to_string(r) + ") refused: " + st.to_string());
  }
}

bool Run::detect_and_replace() {
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

void Run::check_state(const char* when) {
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

void Run::check_durable(const char* when) {
  for (uint64_t k = 0; k < kKeys; ++k) {
    const auto now = value_of(kv_->get(key_name(k)));
    if (now != acked_[k]) {
      fail("durable", key_name(k) + " " + when + ": " + show(now) + ", acknowledged " + show(acked_[k]));
      return;
    }
  }
}

void Run::check_journal(const char* when) {
  const auto db = txn_->db();
  for (uint32_t s = 0; s < kJournalSlots; ++s) {
    uint64_t now = 0;
    std::memcpy(&now, db.data() + journal_offset(s), 8);
    std::vector<uint64_t>& pending = journal_pending_[s];
    const std::string slot = "j" + std::to_string(s);
    if (now != journal_acked_[s] && std::find(pending.begin(), pending.end(), now) == pending.end()) {
      std::string doubt;
      for (uint64_t p : pending) doubt += (doubt.empty() ? "" : ", ") + std::to_string(p);
      fail("journal-durable", slot + " " + when + ": holds " + std::to_string(now) + ", acknowledged " +
                                  std::to_string(journal_acked_[s]) +
                                  (doubt.empty() ? "" : " (in doubt after it: " + doubt + ")"));
      return;
    }
    if (now != journal_acked_[s])
      world_.event("journal " + slot + ": the append of " + std::to_string(now) + ", in doubt, was applied");
    journal_acked_[s] = now;
    pending.clear();
  }
}

void Run::finale() {
  armed_ = Armed::kNone;
  cut_armed_ = false;
  heal_if_due(true);
  // Once every fault has healed the store must take a write, after at
  // most one recovery: a fault may have broken a data path under an
  // operation that still succeeded, which only the next write finds (an
  // unlock that did not get through no longer is one: the store says it is
  // in doubt at once, and the run resumes a front end then).
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
  if (ok()) check_journal("at the end");
  for (uint64_t k = 0; k < kKeys && ok(); ++k) read_everywhere(k);
  result_.sim_ns = world_.now();
}

bool Run::final_put() {
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

void Run::check_history() {
  const auto verdict = check_kv_history(history_);
  world_.event("history: " + std::to_string(history_.size()) + " operations, " + verdict_name(verdict.verdict));
  if (!verdict.ok) fail("linearizable", std::string(verdict_name(verdict.verdict)) + ": " + verdict.explanation);
}

}  // namespace ferry::sim::hyperloop_store_sim
