// The transactional store's chain member as a state machine
// (hyperloop/store_member.h), driven through every transition with the
// in-process membership store, a FakeClock and a data path that records what
// it is asked and completes it when the test says: the paths
// tests/cli/store_chain.sh and store_recovery.sh cover with processes
// (serving, a spare replacing a failed replica, a survivor rebuilt, a frozen
// member finding itself removed, a removed id restarted, etcd errors).
#include "ferry/hyperloop/store_member.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/hyperloop/chain_manager.h"
#include "ferry/hyperloop/txn_kv_wire.h"
#include "ferry/membership/in_process_store.h"

namespace ferry::hyperloop {
namespace store_member_test {

constexpr uint32_t kHeartbeatMs = 50;
constexpr uint64_t kBeatNs = uint64_t{kHeartbeatMs} * 1'000'000;

// What the member asked of its NIC, and the switch for the upstream check.
class RecordingDataPath final : public StoreMemberDataPath {
 public:
  void start_copy(const std::string& from) override { calls.push_back("copy " + from); }
  void start_build(const StorePlacement& p) override {
    std::string chain;
    for (const auto& id : p.chain) chain += (chain.empty() ? "" : ",") + id;
    calls.push_back("build v" + std::to_string(p.version) + " at " + std::to_string(p.position) + " of " + chain);
  }
  void stop_replicas() override { calls.push_back("stop"); }
  bool upstream_connected() const override { return upstream; }
  std::string address() const override { return "127.0.0.1:7000"; }

  std::vector<std::string> take() { return std::exchange(calls, {}); }
  std::vector<std::string> calls;
  bool upstream = false;
};

// A membership store that fails every call while `down` is set (etcd
// unreachable), otherwise the in-process store.
class SwitchableStore final : public membership::MembershipStore {
 public:
  explicit SwitchableStore(membership::MembershipStore& inner) : inner_(inner) {}
  Result<membership::Revision> put(const std::string& k, const std::string& v, membership::LeaseId l) override {
    if (down) return unavailable("etcd is down");
    return inner_.put(k, v, l);
  }
  Result<membership::RangeResult> get(const membership::KeySpan& span) override {
    if (down) return unavailable("etcd is down");
    return inner_.get(span);
  }
  Result<membership::DeleteResult> erase(const membership::KeySpan& span) override { return inner_.erase(span); }
  Result<membership::TxnResult> compare_and_swap(const std::string& key, membership::Revision expected,
                                                 const membership::Mutation& effect) override {
    return inner_.compare_and_swap(key, expected, effect);
  }
  Result<membership::Lease> grant_lease(int64_t ttl) override { return inner_.grant_lease(ttl); }
  Result<int64_t> keep_alive(membership::LeaseId lease) override { return inner_.keep_alive(lease); }
  Status revoke_lease(membership::LeaseId lease) override { return inner_.revoke_lease(lease); }
  Result<std::unique_ptr<membership::Watch>> watch(const membership::KeySpan& span, membership::Revision start,
                                                   membership::WatchCallback cb) override {
    return inner_.watch(span, start, std::move(cb));
  }
  bool down = false;

 private:
  membership::MembershipStore& inner_;
};

// A store "rec" of r0,r1,r2 with one spare, its chain manager (the client's)
// and members of it.
class StoreMemberTest : public ::testing::Test {
 protected:
  StoreMemberTest() : store_(store_options()), switchable_(store_) {
    ChainManagerOptions mo;
    mo.cluster = "test";
    mo.chain = "rec";
    mo.heartbeat_ms = kHeartbeatMs;
    mo.missed_beats = 5;
    manager_ = ChainManager::open(&store_, &clock_, {"r0", "r1", "r2"}, mo).value();
    kv_.slots = 64;
    kv_.key_max = 16;
    kv_.value_max = 64;
    kv_.locks = 4;
    txn_.log_bytes = 4096;
    txn_.db_bytes = txn_kv_db_bytes(kv_);
    data_.assign(kTxnControlBytes + txn_.log_bytes + txn_.db_bytes, 0);
    locks_.assign(4096, 0);
  }

  membership::InProcessStoreOptions store_options() {
    membership::InProcessStoreOptions o;
    o.clock = &clock_;
    o.expiry_poll_ms = 0;
    return o;
  }

  // Member `id` (a replica at `index` of view 1, or a spare), with recovery
  // (the membership store) unless `recovery` is false.
  std::unique_ptr<StoreMember> member(const std::string& id, bool spare, uint32_t index = 0, bool recovery = true) {
    StoreMemberOptions o;
    o.store = "rec";
    o.id = id;
    o.spare = spare;
    o.index = index;
    o.replicas = {"r0", "r1", "r2"};
    o.heartbeat_ms = kHeartbeatMs;
    o.txn = txn_;
    o.kv = kv_;
    StoreMemberLog log;
    log.event = [this](const std::string& line) { events_.push_back(line); };
    log.warning = [this](const std::string& message) { warnings_.push_back(message); };
    return std::make_unique<StoreMember>(o, recovery ? &switchable_ : nullptr, StoreChainKeys::of("test", "rec"), log);
  }

  // The member's beat in the store ("" if none).
  std::string beat_of(const std::string& id) {
    auto r = store_.get(membership::KeySpan::exactly(StoreChainKeys::of("test", "rec").beats_prefix + id)).value();
    return r.kvs.empty() ? "" : r.kvs[0].value;
  }
  void tick(StoreMember& m) {
    clock_.advance_ns(kBeatNs);
    m.on_tick(clock_.now_ns());
  }
  // Started, attached, built and with its upstream connected: serving.
  void bring_up(StoreMember& m, RecordingDataPath& path) {
    m.start(clock_.now_ns());
    m.attach(&path, data_, locks_, clock_.now_ns());
    ASSERT_EQ(m.state(), StoreMemberState::kBuilding);
    m.on_built(ok_status(), clock_.now_ns());
    path.upstream = true;
    tick(m);
    ASSERT_EQ(m.state(), StoreMemberState::kServing);
    path.take();
  }
  bool logged(const std::string& prefix) const {
    for (const auto& e : events_) {
      if (e.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }

  FakeClock clock_;
  membership::InProcessStore store_;
  SwitchableStore switchable_;
  std::unique_ptr<ChainManager> manager_;
  TxnOptions txn_;
  TxnKvOptions kv_;
  std::vector<uint8_t> data_;
  std::vector<uint8_t> locks_;
  std::vector<std::string> events_;
  std::vector<std::string> warnings_;
};

// ---- a chain without recovery (store_chain.sh) ----

TEST_F(StoreMemberTest, WithoutMembershipAReplicaBuildsViewOneAtItsIndexThenServesOnceItsUpstreamConnects) {
  RecordingDataPath path;
  auto m = member("r1", false, 1, /*recovery=*/false);
  EXPECT_EQ(m->state(), StoreMemberState::kStarting);
  m->start(clock_.now_ns());
  EXPECT_EQ(m->state(), StoreMemberState::kBuilding);
  EXPECT_TRUE(path.calls.empty()) << "start() touches no data path";
  m->attach(&path, data_, locks_, clock_.now_ns());
  EXPECT_EQ(path.take(), std::vector<std::string>{"build v1 at 1 of r0,r1,r2"});
  EXPECT_TRUE(m->busy());
  m->on_built(ok_status(), clock_.now_ns());
  EXPECT_EQ(m->state(), StoreMemberState::kReady);
  EXPECT_FALSE(logged("event=rebuilt")) << "the first build is not a rebuild";
  tick(*m);
  EXPECT_EQ(m->state(), StoreMemberState::kReady) << "its upstream has not connected yet";
  path.upstream = true;
  tick(*m);
  EXPECT_EQ(m->state(), StoreMemberState::kServing);
  EXPECT_TRUE(logged("event=serving store=rec id=r1 index=1 view=1"));
  EXPECT_EQ(beat_of("r1"), "") << "no membership, no beats";
  EXPECT_TRUE(path.calls.empty());
}

TEST_F(StoreMemberTest, ABuildThatFailsFailsTheMember) {
  RecordingDataPath path;
  auto m = member("r0", false, 0, false);
  m->start(clock_.now_ns());
  m->attach(&path, data_, locks_, clock_.now_ns());
  m->on_built(timed_out("connecting downstream to 127.0.0.1:7002: no answer"), clock_.now_ns());
  EXPECT_EQ(m->state(), StoreMemberState::kFailed);
  EXPECT_TRUE(m->finished());
  EXPECT_EQ(m->failure().code(), Code::kTimedOut);
}

// ---- beats ----

TEST_F(StoreMemberTest, AReplicaBeatsItsVersionEveryHeartbeatOnlyOnceItsChainsArePosted) {
  RecordingDataPath path;
  auto m = member("r0", false, 0);
  m->start(clock_.now_ns());
  m->attach(&path, data_, locks_, clock_.now_ns());
  tick(*m);
  EXPECT_EQ(beat_of("r0"), "") << "no beat while the first build runs";
  EXPECT_FALSE(m->beat_version());
  m->on_built(ok_status(), clock_.now_ns());
  m->on_tick(clock_.now_ns());  // a beat is due at once after a build
  EXPECT_EQ(beat_of("r0"), "1");
  EXPECT_TRUE(manager_->heartbeat("r0", *m->beat_version()).ok()) << "the manager takes the beat it names";
  // Within the period: no beat; after it: one.
  store_.erase(membership::KeySpan::prefix(StoreChainKeys::of("test", "rec").beats_prefix)).value();
  clock_.advance_ns(kBeatNs / 2);
  m->on_tick(clock_.now_ns());
  EXPECT_EQ(beat_of("r0"), "");
  clock_.advance_ns(kBeatNs / 2);
  m->on_tick(clock_.now_ns());
  EXPECT_EQ(beat_of("r0"), "1");
}

TEST_F(StoreMemberTest, AMembershipStoreThatFailsIsWarnedAboutOncePerErrorAndTheBeatsGoOn) {
  RecordingDataPath path;
  auto m = member("r2", false, 2);
  bring_up(*m, path);
  switchable_.down = true;
  for (int i = 0; i < 5; ++i) tick(*m);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0], "etcd: etcd is down (retrying every beat)");
  EXPECT_EQ(m->state(), StoreMemberState::kServing) << "an unreachable store changes nothing";
  switchable_.down = false;
  tick(*m);
  EXPECT_EQ(beat_of("r2"), "1");
  switchable_.down = true;
  tick(*m);
  EXPECT_EQ(warnings_.size(), 2u) << "the same error after a good read is warned about again";
}

TEST_F(StoreMemberTest, AMembershipStoreThatCannotBeReadAtStartFailsTheMember) {
  switchable_.down = true;
  auto m = member("r0", false, 0);
  m->start(clock_.now_ns());
  EXPECT_EQ(m->state(), StoreMemberState::kFailed);
  EXPECT_EQ(m->failure().code(), Code::kUnavailable);
}

// ---- a spare replaces a failed replica (store_recovery.sh, steps 1-3) ----

TEST_F(StoreMemberTest, ASpareBeatsZeroThenJoinsCopiesFromItsUpstreamNeighbourAndBuildsAtTheTail) {
  RecordingDataPath path;
  auto spare = member("spare0", true);
  spare->start(clock_.now_ns());
  EXPECT_EQ(spare->state(), StoreMemberState::kSpare);
  spare->attach(&path, data_, locks_, clock_.now_ns());
  EXPECT_TRUE(logged("event=spare store=rec id=spare0 listen=127.0.0.1:7000 (waiting to join the chain)"));
  EXPECT_TRUE(path.calls.empty());
  tick(*spare);
  EXPECT_EQ(beat_of("spare0"), "0");
  EXPECT_EQ(spare->state(), StoreMemberState::kSpare) << "view 1 does not name it";

  // r1 failed: the client's manager commits view 2 = r0,r2,spare0.
  ASSERT_TRUE(manager_->replace("r1", "spare0").ok());
  tick(*spare);
  EXPECT_TRUE(logged("event=view store=rec id=spare0 version=2 members=r0,r2,spare0 index=2 was=0"));
  EXPECT_EQ(spare->state(), StoreMemberState::kCopying);
  EXPECT_EQ(path.take(), (std::vector<std::string>{"stop", "copy r2"})) << "from its upstream neighbour";
  tick(*spare);
  EXPECT_EQ(beat_of("spare0"), "0") << "it beats 0 until its Replicas are ready";

  clock_.advance_ns(3'000'000);
  spare->on_copied(uint64_t{8192}, clock_.now_ns());
  EXPECT_TRUE(logged("event=copied store=rec id=spare0 from=r2 bytes=8192 ms=53.0"));
  EXPECT_EQ(spare->state(), StoreMemberState::kBuilding);
  EXPECT_EQ(path.take(), std::vector<std::string>{"build v2 at 2 of r0,r2,spare0"});

  spare->on_built(ok_status(), clock_.now_ns());
  EXPECT_EQ(spare->state(), StoreMemberState::kReady);
  EXPECT_TRUE(logged("event=rebuilt store=rec id=spare0 view=2 index=2 ms="));
  spare->on_tick(clock_.now_ns());
  EXPECT_EQ(beat_of("spare0"), "2");
  EXPECT_TRUE(manager_->heartbeat("spare0", 2).ok());
  path.upstream = true;
  tick(*spare);
  EXPECT_EQ(spare->state(), StoreMemberState::kServing);
}

TEST_F(StoreMemberTest, ASurvivorIsRebuiltAtItsNewPositionAndBeatsItsOldVersionMeanwhile) {
  RecordingDataPath path;
  auto r2 = member("r2", false, 2);
  bring_up(*r2, path);
  ASSERT_TRUE(manager_->replace("r1", "spare0").ok());
  tick(*r2);
  EXPECT_TRUE(logged("event=view store=rec id=r2 version=2 members=r0,r2,spare0 index=1 was=1"));
  EXPECT_EQ(path.take(), (std::vector<std::string>{"stop", "build v2 at 1 of r0,r2,spare0"}))
      << "the old Replicas go first";
  EXPECT_EQ(r2->state(), StoreMemberState::kBuilding);
  tick(*r2);
  EXPECT_EQ(beat_of("r2"), "1") << "alive, still naming the view it served";
  r2->on_built(ok_status(), clock_.now_ns());
  r2->on_tick(clock_.now_ns());
  EXPECT_EQ(beat_of("r2"), "2");
  EXPECT_EQ(r2->placement(), (StorePlacement{2, 1, {"r0", "r2", "spare0"}}));
}

TEST_F(StoreMemberTest, AViewSeenDuringABuildIsTakenAtTheBeatAfterIt) {
  RecordingDataPath path;
  auto r0 = member("r0", false, 0);
  bring_up(*r0, path);
  ASSERT_TRUE(manager_->replace("r1", "spare0").ok());
  tick(*r0);
  EXPECT_EQ(path.take(), (std::vector<std::string>{"stop", "build v2 at 0 of r0,r2,spare0"}));
  ASSERT_TRUE(manager_->replace("r2", "spare1").ok());  // view 3 while the build of view 2 runs
  tick(*r0);
  EXPECT_TRUE(path.calls.empty()) << "one data path step at a time";
  r0->on_built(ok_status(), clock_.now_ns());
  r0->on_tick(clock_.now_ns());
  EXPECT_EQ(path.take(), (std::vector<std::string>{"stop", "build v3 at 0 of r0,spare0,spare1"}));
}

TEST_F(StoreMemberTest, AnOlderOrTheSameViewChangesNothing) {
  RecordingDataPath path;
  auto r0 = member("r0", false, 0);
  bring_up(*r0, path);
  membership::View v1 = manager_->view();
  r0->on_view(v1, clock_.now_ns());
  EXPECT_TRUE(path.calls.empty());
  EXPECT_EQ(r0->state(), StoreMemberState::kServing);
}

// ---- failures of a joining member ----

TEST_F(StoreMemberTest, ACopyThatFailsFailsTheMember) {
  RecordingDataPath path;
  auto spare = member("spare0", true);
  spare->start(clock_.now_ns());
  spare->attach(&path, data_, locks_, clock_.now_ns());
  ASSERT_TRUE(manager_->replace("r1", "spare0").ok());
  tick(*spare);
  spare->on_copied(Result<uint64_t>(invalid_argument("its regions are 8192 and 4096 bytes")), clock_.now_ns());
  EXPECT_EQ(spare->state(), StoreMemberState::kFailed);
  EXPECT_EQ(spare->failure().code(), Code::kInvalidArgument);
}

TEST_F(StoreMemberTest, AJoiningMemberAtTheHeadHasNoUpstreamToCopyAndFails) {
  RecordingDataPath path;
  auto spare = member("spare0", true);
  spare->start(clock_.now_ns());
  spare->attach(&path, data_, locks_, clock_.now_ns());
  membership::View v;
  v.version = 2;
  v.members = {{"spare0", "", 2}, {"r1", "", 1}, {"r2", "", 1}};
  spare->on_view(v, clock_.now_ns());
  EXPECT_EQ(spare->state(), StoreMemberState::kFailed);
  EXPECT_EQ(spare->failure().code(), Code::kFailedPrecondition);
}

TEST_F(StoreMemberTest, ASpareNamedBeforeItRestartedJoinsAtStart) {
  ASSERT_TRUE(manager_->replace("r1", "spare0").ok());
  RecordingDataPath path;
  auto spare = member("spare0", true);
  spare->start(clock_.now_ns());
  EXPECT_EQ(spare->state(), StoreMemberState::kJoining) << "waits for its data path to copy";
  spare->attach(&path, data_, locks_, clock_.now_ns());
  EXPECT_EQ(path.take(), std::vector<std::string>{"copy r2"});
  spare->on_copied(uint64_t{1}, clock_.now_ns());
  EXPECT_EQ(path.take(), std::vector<std::string>{"build v2 at 2 of r0,r2,spare0"});
  spare->on_built(ok_status(), clock_.now_ns());
  EXPECT_FALSE(logged("event=rebuilt")) << "its first build";
}

// ---- removal (store_recovery.sh --freeze, and step 4) ----

TEST_F(StoreMemberTest, AFrozenMemberThatWakesUpInAViewWithoutItIsRemovedAndStopsServing) {
  RecordingDataPath path;
  auto r1 = member("r1", false, 1);
  bring_up(*r1, path);
  ASSERT_TRUE(manager_->replace("r1", "spare0").ok());  // while it was frozen
  tick(*r1);
  EXPECT_EQ(r1->state(), StoreMemberState::kRemoved);
  EXPECT_EQ(r1->removed_reason(), "not_in_view=2");
  EXPECT_TRUE(logged("event=removed store=rec id=r1 not_in_view=2"));
  EXPECT_EQ(path.take(), std::vector<std::string>{"stop"});
  tick(*r1);
  EXPECT_TRUE(path.calls.empty()) << "final";
}

TEST_F(StoreMemberTest, ARemovedIdRestartedIsRemovedAtStartWithoutTouchingANic) {
  ASSERT_TRUE(manager_->replace("r1", "spare0").ok());
  auto r1 = member("r1", false, 1);
  r1->start(clock_.now_ns());
  EXPECT_EQ(r1->state(), StoreMemberState::kRemoved);
  EXPECT_EQ(r1->removed_reason(), "removed_in_view=2");
  EXPECT_TRUE(logged("event=removed store=rec id=r1 removed_in_view=2"));
}

TEST_F(StoreMemberTest, AReplicaTheViewDoesNotNameIsRemovedAtStart) {
  membership::View v;
  v.version = 4;
  v.members = {{"r0", "", 1}, {"r2", "", 1}};
  ASSERT_TRUE(store_.put(StoreChainKeys::of("test", "rec").view_key, membership::encode_view(v)).ok());
  auto r1 = member("r1", false, 1);
  r1->start(clock_.now_ns());
  EXPECT_EQ(r1->state(), StoreMemberState::kRemoved);
  EXPECT_EQ(r1->removed_reason(), "not_in_view=4");
}

TEST_F(StoreMemberTest, AMemberRemovedDuringARebuildAbandonsItAndIgnoresItsOutcome) {
  RecordingDataPath path;
  auto r2 = member("r2", false, 2);
  bring_up(*r2, path);
  ASSERT_TRUE(manager_->replace("r1", "spare0").ok());
  tick(*r2);
  path.take();
  ASSERT_TRUE(manager_->replace("r2", "spare1").ok());
  tick(*r2);
  EXPECT_EQ(r2->state(), StoreMemberState::kRemoved);
  EXPECT_EQ(path.take(), std::vector<std::string>{"stop"});
  r2->on_built(ok_status(), clock_.now_ns());
  EXPECT_EQ(r2->state(), StoreMemberState::kRemoved);
  EXPECT_FALSE(r2->beat_version() && *r2->beat_version() == 2);
}

// ---- reads ----

TEST_F(StoreMemberTest, ReadsAreAnsweredFromTheMembersOwnImageInEveryState) {
  for (size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<uint8_t>(i * 7);
  RecordingDataPath path;
  auto m = member("spare0", true);
  m->start(clock_.now_ns());
  m->attach(&path, data_, locks_, clock_.now_ns());
  TxnRegionReadRequest region;
  region.offset = 100;
  region.length = 16;
  auto reply = parse_txn_region_reply(m->on_read(kTxnKvReadRegion, encode_txn_region_read(region), 4096)).value();
  ASSERT_EQ(reply.status, TxnKvReadStatus::kOk);
  EXPECT_EQ(0, std::memcmp(reply.bytes.data(), data_.data() + 100, 16));
  // A GET on an image that was never formatted answers a status, never crashes.
  TxnKvReadRequest get;
  get.type = kTxnKvReadGet;
  get.key = "key000001";
  auto answer = parse_txn_kv_reply(m->on_read(kTxnKvReadGet, encode_txn_kv_read(get), 4096));
  ASSERT_TRUE(answer.ok());
  EXPECT_NE(answer->status, TxnKvReadStatus::kOk);
  EXPECT_EQ(m->reads(), 2u);
}

}  // namespace store_member_test
}  // namespace ferry::hyperloop
