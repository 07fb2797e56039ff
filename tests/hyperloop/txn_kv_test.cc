// The replicated transactional key-value store on HyperLoop's transaction
// API (§5.2), on a deterministic manual engine: random puts, removes,
// read-modify-writes and multi-key transactions (seeded: FERRY_SEED) leave
// the front end and every replica's image -- read by that replica under its
// read lock -- equal to a model; a transaction's keys change together on
// every replica; bad requests change nothing. Range scans over the ordered
// index -- the front end's and every replica's -- equal a std::map model,
// also after power failures and the replicas' replay, and after a front end
// reattaches (TxnKv::open); a corrupt index ends a replica's scan with
// kDataLoss instead of a wild read or an endless walk. A replica's read
// service (txn_kv_wire.h) answers GETs and paged scans from its image.
#include "ferry/hyperloop/txn_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/common/rng.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/txn_kv_wire.h"
#include "test_seed.h"
#include "txn_test_util.h"

namespace ferry::hyperloop {
namespace txn_kv_test {

std::span<const uint8_t> bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// The store on a chain (txn_test_util.h) whose database fits its table.
struct KvFixture : testing::TxnChain {
  explicit KvFixture(TxnKvOptions kv_options = small(), const nic::FaultModel& faults = {})
      : TxnChain(testing::txn_chain_options(256 << 10, 32 << 10, txn_kv_db_bytes(kv_options), faults)),
        kv_options(kv_options) {
    auto k = TxnKv::create(*txn, kv_options);
    EXPECT_TRUE(k.ok()) << k.status().to_string();
    if (k.ok()) kv = std::move(k).value();
  }
  ~KvFixture() { kv.reset(); }
  static TxnKvOptions small() {
    TxnKvOptions o;
    o.slots = 128;
    o.key_max = 16;
    o.value_max = 64;
    o.locks = 8;
    return o;
  }
  TxnKvReplicaReader reader(uint32_t r) {
    return TxnKvReplicaReader(txn->replica_db(r).value(), TxnChain::reader(r), kv_options);
  }

  TxnKvOptions kv_options;
  std::unique_ptr<TxnKv> kv;
};

void expect_everywhere(KvFixture& f, const std::map<std::string, std::string>& model,
                       const std::vector<std::string>& keys) {
  for (uint32_t r = 0; r < 3; ++r) {
    TxnKvReplicaReader rd = f.reader(r);
    for (const auto& k : keys) {
      auto got = rd.get(k);
      auto it = model.find(k);
      if (it == model.end()) {
        EXPECT_EQ(got.status().code(), Code::kNotFound) << "replica " << r << " has " << k;
      } else {
        ASSERT_TRUE(got.ok()) << "replica " << r << " lacks " << k << ": " << got.status().to_string();
        EXPECT_EQ(text(got.value()), it->second) << "replica " << r << ", key " << k;
      }
    }
  }
}

// A seeded random workload of `ops` puts, removes, RMWs and transactions;
// afterwards the front end and every replica equal the model (`*model_io`
// if given: the state before, and after on return).
void random_workload(KvFixture& f, uint64_t seed, int ops, std::map<std::string, std::string>* model_io = nullptr) {
  const uint64_t replica_cpu_before = f.client->replica_cpu_ns();
  Rng rng(seed);
  std::map<std::string, std::string> own_model;
  std::map<std::string, std::string>& model = model_io != nullptr ? *model_io : own_model;
  std::vector<std::string> keys;
  for (int i = 0; i < 60; ++i) keys.push_back("key" + std::to_string(i));
  auto value = [&] { return std::string(1 + rng.below(60), static_cast<char>('a' + rng.below(26))); };
  for (int op = 0; op < ops; ++op) {
    const std::string& k = keys[rng.below(keys.size())];
    switch (rng.below(4)) {
      case 0: {
        const std::string v = value();
        ASSERT_TRUE(f.kv->put(k, bytes(v)).ok());
        model[k] = v;
        break;
      }
      case 1: {
        Status st = f.kv->remove(k);
        EXPECT_EQ(st.code(), model.count(k) ? Code::kOk : Code::kNotFound) << k;
        model.erase(k);
        break;
      }
      case 2: {  // append a letter (absent: create)
        ASSERT_TRUE(f.kv->read_modify_write(k, [](std::optional<std::span<const uint8_t>> cur) {
                          std::vector<uint8_t> next = cur ? std::vector<uint8_t>(cur->begin(), cur->end())
                                                          : std::vector<uint8_t>{};
                          if (next.size() < 60) next.push_back('+');
                          return std::optional<std::vector<uint8_t>>(next);
                        }).ok());
        std::string& m = model[k];
        if (m.size() < 60) m.push_back('+');
        break;
      }
      default: {  // a transaction over 2-3 distinct keys
        std::vector<std::string> ks;
        while (ks.size() < 2 + rng.below(2)) {
          const std::string& c = keys[rng.below(keys.size())];
          if (std::find(ks.begin(), ks.end(), c) == ks.end()) ks.push_back(c);
        }
        std::vector<std::string> vs;
        for (size_t i = 0; i < ks.size(); ++i) vs.push_back(value());
        std::vector<TxnKvOp> ops;
        for (size_t i = 0; i < ks.size(); ++i) ops.push_back({TxnKvOp::kPut, ks[i], bytes(vs[i])});
        ASSERT_TRUE(f.kv->transaction(ops).ok());
        for (size_t i = 0; i < ks.size(); ++i) model[ks[i]] = vs[i];
      }
    }
    auto front = f.kv->get(k);
    if (model.count(k)) {
      ASSERT_TRUE(front.ok()) << k;
      EXPECT_EQ(text(front.value()), model[k]);
    } else {
      EXPECT_EQ(front.status().code(), Code::kNotFound) << k;
    }
  }
  expect_everywhere(f, model, keys);
  EXPECT_GT(f.kv->counters().transactions, 0u);
  // No replica CPU on the write path: HyperLoop's replica threads ran
  // nothing while 400 operations were applied.
  EXPECT_EQ(f.client->replica_cpu_ns(), replica_cpu_before);
}

TEST(TxnKv, RandomOperationsLeaveEveryReplicaEqualToTheModel) {
  const uint64_t seed = ferry::testing::test_seed(77);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  KvFixture f;
  random_workload(f, seed, 400);
}

// Item 5 of the issue: log records applied identically on all replicas under
// seeded loss, duplication and reordering of the chain's packets.
TEST(TxnKv, UnderPacketLossEveryReplicaStillEqualsTheModel) {
  const uint64_t seed = ferry::testing::test_seed(91);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  const nic::FaultModel faults = testing::lossy_faults(seed);
  KvFixture f(KvFixture::small(), faults);
  random_workload(f, seed, 200);
  EXPECT_GT(f.engine->fabric().counters().dropped_fault.get(), 0u) << "no packet was dropped: the test proves nothing";
}

TEST(TxnKv, ATransactionIsOneRecordAndARemoveOfAnAbsentKeyAbortsIt) {
  KvFixture f;
  ASSERT_TRUE(f.kv->put("a", bytes("1")).ok());
  const uint64_t records = f.kv->counters().records;
  const std::string v2 = "2", v3 = "3";
  const TxnKvOp ok_ops[] = {{TxnKvOp::kPut, "a", bytes(v2)}, {TxnKvOp::kPut, "b", bytes(v3)}};
  ASSERT_TRUE(f.kv->transaction(ok_ops).ok());
  EXPECT_EQ(f.kv->counters().records, records + 1) << "a transaction is one log record";
  const std::string v9 = "9";
  const TxnKvOp bad[] = {{TxnKvOp::kPut, "a", bytes(v9)}, {TxnKvOp::kRemove, "nope", {}}};
  EXPECT_EQ(f.kv->transaction(bad).code(), Code::kNotFound);
  expect_everywhere(f, {{"a", "2"}, {"b", "3"}}, {"a", "b", "nope"});
  const TxnKvOp dup[] = {{TxnKvOp::kPut, "a", bytes(v9)}, {TxnKvOp::kRemove, "a", {}}};
  EXPECT_EQ(f.kv->transaction(dup).code(), Code::kInvalidArgument);
  EXPECT_EQ(f.kv->put(std::string(17, 'k'), bytes("x")).code(), Code::kInvalidArgument);
  EXPECT_EQ(f.kv->put("k", bytes(std::string(65, 'v'))).code(), Code::kInvalidArgument);
  EXPECT_EQ(f.kv->put("", bytes("x")).code(), Code::kInvalidArgument);
  expect_everywhere(f, {{"a", "2"}, {"b", "3"}}, {"a", "b", "k"});
}

TEST(TxnKv, AFullTableRefusesAndRemovedSlotsAreReused) {
  TxnKvOptions o = KvFixture::small();
  o.slots = 16;
  KvFixture f(o);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(f.kv->put("k" + std::to_string(i), bytes("v")).ok());
  EXPECT_EQ(f.kv->put("one-more", bytes("v")).code(), Code::kResourceExhausted);
  ASSERT_TRUE(f.kv->remove("k3").ok());
  ASSERT_TRUE(f.kv->put("one-more", bytes("w")).ok());
  std::map<std::string, std::string> model;
  std::vector<std::string> keys = {"one-more", "k3"};
  model["one-more"] = "w";
  for (int i = 0; i < 16; ++i) {
    if (i == 3) continue;
    model["k" + std::to_string(i)] = "v";
    keys.push_back("k" + std::to_string(i));
  }
  expect_everywhere(f, model, keys);
}

TEST(TxnKv, AReplicaReadWaitsForAWriterAndThenSeesItsRecord) {
  KvFixture f;
  ASSERT_TRUE(f.kv->put("x", bytes("old")).ok());
  // The writer holds x's lock (as between its Append and its unlock).
  ASSERT_TRUE(f.txn->wr_lock(f.kv->lock_of("x")).ok());
  ReplicaView v = f.client->replica(f.locks, 2).value();
  ReplicaLocks lk(v.region->data(), 4096);
  EXPECT_FALSE(lk.try_rd_lock(f.kv->lock_of("x"))) << "a replica read would get in under the writer";
  ASSERT_TRUE(f.txn->wr_unlock(f.kv->lock_of("x")).ok());
  auto got = f.reader(2).get("x");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(text(got.value()), "old");
}

// ---- range scans over the ordered index ------------------------------------------

// The first `count` entries of `model` from `start` on.
std::vector<std::pair<std::string, std::string>> model_scan(const std::map<std::string, std::string>& model,
                                                            const std::string& start, uint32_t count) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = model.lower_bound(start); it != model.end() && out.size() < count; ++it) out.emplace_back(*it);
  return out;
}

std::vector<std::pair<std::string, std::string>> as_text(const TxnKvEntries& entries) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, v] : entries) out.emplace_back(k, text(v));
  return out;
}

// `scans` scans from random starts (a model key, a key between keys, the
// beginning, past the end) and counts: the front end and every replica
// answer what the model does.
void expect_scans_match(KvFixture& f, const std::map<std::string, std::string>& model, Rng& rng, int scans) {
  for (int i = 0; i < scans; ++i) {
    std::string start;
    switch (rng.below(4)) {
      case 0:
        start = "key" + std::to_string(rng.below(70));
        break;
      case 1:
        start = "key" + std::to_string(rng.below(70)) + "~";
        break;
      case 2:
        start = "";
        break;
      default:
        start = "z";
    }
    const uint32_t count = rng.below(5) == 0 ? 1000 : static_cast<uint32_t>(rng.below(12));
    const auto want = model_scan(model, start, count);
    auto front = f.kv->scan(start, count);
    ASSERT_TRUE(front.ok()) << front.status().to_string();
    EXPECT_EQ(as_text(front.value()), want) << "front end, scan from '" << start << "', " << count;
    for (uint32_t r = 0; r < 3; ++r) {
      auto got = f.reader(r).scan(start, count);
      ASSERT_TRUE(got.ok()) << "replica " << r << ": " << got.status().to_string();
      EXPECT_EQ(as_text(got.value()), want) << "replica " << r << ", scan from '" << start << "', " << count;
    }
  }
}

TEST(TxnKvScan, ScansOfTheFrontEndAndEveryReplicaEqualAMapModel) {
  const uint64_t seed = ferry::testing::test_seed(5);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  KvFixture f;
  Rng rng(seed * 13 + 1);
  std::map<std::string, std::string> model;
  for (int round = 0; round < 5; ++round) {
    ASSERT_NO_FATAL_FAILURE(random_workload(f, seed + round, 80, &model));
    ASSERT_NO_FATAL_FAILURE(expect_scans_match(f, model, rng, 25));
  }
  EXPECT_GT(f.kv->counters().removes, 0u);
}

// A larger table, so keys reach the skip list's upper levels: every key
// inserted in a random order, half removed, the rest updated; scans from
// every key.
TEST(TxnKvScan, ManyKeysInRandomOrderThenHalfRemoved) {
  const uint64_t seed = ferry::testing::test_seed(9);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  TxnKvOptions o = KvFixture::small();
  o.slots = 512;
  o.value_max = 16;
  KvFixture f(o);
  Rng rng(seed);
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) keys.push_back(std::to_string(rng.next() % 100000));
  std::map<std::string, std::string> model;
  for (const auto& k : keys) {
    ASSERT_TRUE(f.kv->put(k, bytes("v" + k)).ok());
    model[k] = "v" + k;
  }
  for (size_t i = 0; i < keys.size(); i += 2) {
    if (model.erase(keys[i]) == 1) {
      ASSERT_TRUE(f.kv->remove(keys[i]).ok());
    }
  }
  // Updates of existing keys leave the index's bytes alone.
  const uint64_t index_at = txn_kv_db_bytes(o) - (o.slots + 1) * 48ULL;
  const auto index_bytes = [&] {
    auto db = f.txn->replica_db(1).value();
    return std::vector<uint8_t>(db.begin() + static_cast<std::ptrdiff_t>(index_at), db.end());
  };
  const auto before = index_bytes();
  for (auto& [k, v] : model) {
    v = "u" + k;
    ASSERT_TRUE(f.kv->put(k, bytes(v)).ok());
  }
  EXPECT_EQ(index_bytes(), before) << "an update touched the index";
  auto all = f.reader(2).scan("", 100000);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ(as_text(all.value()), model_scan(model, "", 100000));
  for (const auto& k : keys) {
    const uint32_t count = static_cast<uint32_t>(1 + rng.below(20));
    auto got = f.reader(static_cast<uint32_t>(rng.below(3))).scan(k, count);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(as_text(got.value()), model_scan(model, k, count)) << "from " << k;
  }
}

TEST(TxnKvScan, AfterPowerFailuresAndReplayScansEqualTheAcknowledgedModel) {
  const uint64_t seed = ferry::testing::test_seed(21);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  for (uint64_t k = 0; k < 3; ++k) {
    KvFixture f;
    std::map<std::string, std::string> model;
    ASSERT_NO_FATAL_FAILURE(random_workload(f, seed + k, 120, &model));
    for (uint32_t r = 0; r < 3; ++r) {
      f.replica(r).domain->power_fail((seed + k) * 7 + r);
      auto replay = replay_txn_log(f.region(r));
      ASSERT_TRUE(replay.ok()) << replay.status().to_string();
      auto got = f.reader(r).scan("", 1000);
      ASSERT_TRUE(got.ok()) << "replica " << r << ": " << got.status().to_string();
      EXPECT_EQ(as_text(got.value()), model_scan(model, "", 1000)) << "replica " << r << " lost an acknowledged write";
    }
    Rng rng(seed + k);
    ASSERT_NO_FATAL_FAILURE(expect_scans_match(f, model, rng, 10));
  }
}

// A new TxnClient's options: the fixture's layout, resuming the log the
// replicas hold.
TxnOptions resume_options(const KvFixture& f) {
  TxnOptions to;
  to.log_bytes = f.options.log_bytes;
  to.db_bytes = f.options.db_bytes;
  to.lock_timeout_ns = f.options.lock_timeout_ns;
  to.resume = true;
  return to;
}

// The front end's process dies (not the replicas): the chains restart and a
// new TxnClient resumes, reconciling the log on every member.
void restart_txn_client(KvFixture& f) {
  f.kv.reset();
  f.txn.reset();
  ASSERT_TRUE(f.client->restart_group(f.data).ok());
  ASSERT_TRUE(f.client->restart_group(f.locks).ok());
  auto t = TxnClient::initialize(*f.client, f.data, f.locks, resume_options(f));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  f.txn = std::move(t).value();
}

TEST(TxnKvScan, OpenOnAResumedClientSeesTheSameDataAndRefusesOtherImages) {
  KvFixture f;
  std::map<std::string, std::string> model;
  ASSERT_NO_FATAL_FAILURE(random_workload(f, 3, 100, &model));
  // The front end and its TxnClient restart; the replicas keep their images.
  f.kv.reset();
  f.txn.reset();
  auto t = TxnClient::initialize(*f.client, f.data, f.locks, resume_options(f));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  f.txn = std::move(t).value();
  TxnKvOptions other = f.kv_options;
  other.slots /= 2;
  EXPECT_EQ(TxnKv::open(*f.txn, other).status().code(), Code::kInvalidArgument);
  other = f.kv_options;
  other.locks += 1;
  EXPECT_EQ(TxnKv::open(*f.txn, other).status().code(), Code::kInvalidArgument);
  other.slots = 1u << 20;  // more than the database holds
  EXPECT_EQ(TxnKv::open(*f.txn, other).status().code(), Code::kInvalidArgument);
  auto kv = TxnKv::open(*f.txn, f.kv_options);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  f.kv = std::move(kv).value();
  Rng rng(4);
  ASSERT_NO_FATAL_FAILURE(expect_scans_match(f, model, rng, 10));
  // It writes on where the old front end stopped.
  ASSERT_NO_FATAL_FAILURE(random_workload(f, 4, 60, &model));
  ASSERT_NO_FATAL_FAILURE(expect_scans_match(f, model, rng, 10));

  // A database nobody formatted.
  testing::TxnChain blank(testing::txn_chain_options(256 << 10, 32 << 10, txn_kv_db_bytes(f.kv_options)));
  EXPECT_EQ(TxnKv::open(*blank.txn, f.kv_options).status().code(), Code::kDataLoss);
}

TEST(TxnKvScan, OpenRefusesAnIndexThatDoesNotListTheLiveSlots) {
  KvFixture f;
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(f.kv->put(k, bytes(k)).ok());
  // A record that empties the head's level 0 (white box: the index is the
  // last (slots + 1) * 48 bytes; the head's node comes first).
  const uint64_t index_at = txn_kv_db_bytes(f.kv_options) - (f.kv_options.slots + 1) * 48ULL;
  const uint8_t zero[4] = {};
  const TxnWrite w[] = {{index_at, zero}};
  ASSERT_TRUE(f.txn->append(w).ok());
  ASSERT_TRUE(f.txn->execute_all().ok());
  EXPECT_EQ(TxnKv::open(*f.txn, f.kv_options).status().code(), Code::kDataLoss);
}

uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void set_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

// A replica's image after a crash may hold anything: a scan over a cycle or
// a pointer out of range ends with kDataLoss, inside the image.
TEST(TxnKvScan, AReplicaScanOfACorruptIndexEndsWithDataLoss) {
  KvFixture f;
  for (const char* k : {"a", "b", "c", "d"}) ASSERT_TRUE(f.kv->put(k, bytes(k)).ok());
  const uint64_t index_at = txn_kv_db_bytes(f.kv_options) - (f.kv_options.slots + 1) * 48ULL;
  uint8_t* db = f.region(1).data() + f.txn->db_offset();
  const uint32_t first = u32_at(db + index_at);  // the head's level 0: node of "a"
  ASSERT_NE(first, 0u);
  // Find the last node on level 0 and point it back at the first: a cycle.
  uint32_t last = first;
  for (int i = 0; i < 3; ++i) last = u32_at(db + index_at + last * 48ULL);
  ASSERT_NE(last, 0u);
  set_u32(db + index_at + last * 48ULL, first);
  auto got = f.reader(1).scan("", 1000);
  EXPECT_EQ(got.status().code(), Code::kDataLoss);
  // A pointer past the nodes.
  set_u32(db + index_at + last * 48ULL, f.kv_options.slots + 7);
  EXPECT_EQ(f.reader(1).scan("", 1000).status().code(), Code::kDataLoss);
  // Scans that stop before the damage still answer; other replicas are whole.
  auto head = f.reader(1).scan("", 2);
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head.value().size(), 2u);
  auto whole = f.reader(0).scan("", 1000);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole.value().size(), 4u);
  EXPECT_EQ(f.reader(0).scan(std::string(17, 'k'), 1).status().code(), Code::kInvalidArgument);
}

// ---- a new front end after a crash (TxnKv::open) -----------------------------------

bool image_holds(KvFixture& f, uint32_t r, const std::string& bytes_wanted) {
  auto db = f.txn->replica_db(r).value();
  return std::search(db.begin(), db.end(), bytes_wanted.begin(), bytes_wanted.end()) != db.end();
}

// The front end dies in the middle of a transaction's ExecuteAndAdvance:
// replica 1 has one of its two keys applied and not the other. A new front
// end resumes and opens the store without releasing anything first: open
// takes the dead front end's locks over, runs the record and only then lets
// readers in. A reader trying every replica between every two engine steps
// never sees one key of the transaction without the other.
TEST(TxnKvOpen, TakesTheDeadFrontEndsLocksOverAndNoReaderSeesItsTransactionHalfApplied) {
  TxnKvOptions o = KvFixture::small();
  o.locks = 1;  // one stripe: a reader's lock covers both keys
  KvFixture f(o);
  const std::string a1 = "alpha-version-1", m1 = "omega-version-1", a2 = "alpha-version-2", m2 = "omega-version-2";
  const TxnKvOp first[] = {{TxnKvOp::kPut, "a", bytes(a1)}, {TxnKvOp::kPut, "m", bytes(m1)}};
  ASSERT_TRUE(f.kv->transaction(first).ok());
  bool crashed = false;
  f.client->set_poll_hook([&] {
    if (!crashed && image_holds(f, 1, a2) != image_holds(f, 1, m2)) {
      crashed = true;
      ASSERT_TRUE(f.client->stop_group(f.data).ok());
      ASSERT_TRUE(f.client->stop_group(f.locks).ok());
    }
  });
  const TxnKvOp second[] = {{TxnKvOp::kPut, "a", bytes(a2)}, {TxnKvOp::kPut, "m", bytes(m2)}};
  EXPECT_FALSE(f.kv->transaction(second).ok());
  ASSERT_TRUE(crashed);
  ASSERT_NO_FATAL_FAILURE(restart_txn_client(f));
  uint64_t reads = 0, torn = 0;
  f.client->set_poll_hook([&] {
    for (uint32_t r = 0; r < 3; ++r) {
      ReplicaLocks lk = f.TxnChain::reader(r);
      if (!lk.try_rd_lock(0)) continue;  // a reader does not wait here: the engine must go on
      auto a = f.reader(r).get("a");
      auto m = f.reader(r).get("m");
      lk.rd_unlock(0);
      ++reads;
      torn += !a.ok() || !m.ok() || text(a.value()).back() != text(m.value()).back();
    }
  });
  auto kv = TxnKv::open(*f.txn, o);
  f.client->set_poll_hook({});
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  f.kv = std::move(kv).value();
  EXPECT_EQ(torn, 0u) << "a reader saw the dead front end's transaction half-applied (" << reads << " reads)";
  expect_everywhere(f, {{"a", a2}, {"m", m2}}, {"a", "m"});
  ASSERT_TRUE(f.kv->put("a", bytes(a1)).ok()) << "the store takes writes again";
  for (uint32_t r = 0; r < 3; ++r) {
    for (uint32_t l = 0; l < txn_kv_lock_words(o); ++l) EXPECT_EQ(f.TxnChain::reader(r).word(l), 0u);
  }
}

// restart_txn_client, then TxnKv::open takes every lock over, runs what the
// log holds and unlocks.
void resume_front_end(KvFixture& f) {
  ASSERT_NO_FATAL_FAILURE(restart_txn_client(f));
  auto kv = TxnKv::open(*f.txn, f.kv_options);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  f.kv = std::move(kv).value();
}

// Found by the simulator (`ferry sim hyperloop-store --seed 41 --ops 19`): the
// link from replica 1 to replica 2 is cut while a put's record executes; RC
// gives up on it, the put fails, the link heals. Replicas 0 and 1 hold the
// new value, replica 2 the old one. The front end used to release the
// put's write lock on the way out (its unlock gCAS got through once the
// link healed; here only the data group's link is cut, so the lock group
// takes it at once): readers on replica 1 then on replica 2 saw the new
// value and then the old one. The locks of a record in doubt stay held until a
// resumed front end ran it again.
TEST(TxnKvInDoubt, AWriteThatFailsAfterItsAppendKeepsItsLocksSoNoReplicaServesWhatTheOthersLack) {
  KvFixture f;
  const std::string v1 = "version-1", v2 = "version-2";
  ASSERT_TRUE(f.kv->put("k", bytes(v1)).ok());
  const uint32_t src = f.client->replica_rings(f.data, 1)->nic->address();
  const uint32_t dst = f.client->replica_rings(f.data, 2)->nic->address();
  uint64_t heal_at = 0;
  f.client->set_message_hook([&](Primitive p, std::span<uint8_t>) {
    if (p != Primitive::kMemcpy || heal_at != 0) return;
    heal_at = f.clock.now_ns() + 1'000'000'000;  // longer than RC's retries (~0.5 s)
    f.engine->fabric().set_tap([&, src, dst](const nic::Packet& pkt) {
      return f.clock.now_ns() < heal_at && pkt.src_nic == src && pkt.dst_nic == dst;
    });
  });
  const Status st = f.kv->put("k", bytes(v2));
  f.client->set_message_hook({});
  f.engine->fabric().set_tap({});
  ASSERT_FALSE(st.ok()) << "the put should have failed with its copy to replica 2 cut off";
  ASSERT_TRUE(image_holds(f, 1, v2) && !image_holds(f, 2, v2)) << "the record should be applied on 1, not on 2";
  // No replica lets a reader in on the key's stripe: the record is in doubt.
  for (uint32_t r = 0; r < 3; ++r) {
    ReplicaLocks lk = f.TxnChain::reader(r);
    const uint32_t stripe = f.kv->lock_of("k");
    const bool entered = lk.try_rd_lock(stripe);
    if (entered) lk.rd_unlock(stripe);
    EXPECT_FALSE(entered) << "replica " << r << " serves reads of a record in doubt";
  }
  EXPECT_EQ(f.kv->put("other", bytes(v1)).code(), Code::kFailedPrecondition);
  // A resumed front end takes the locks over and runs the record again.
  resume_front_end(f);
  if (::testing::Test::HasFatalFailure()) return;
  expect_everywhere(f, {{"k", v2}}, {"k"});
  for (uint32_t r = 0; r < 3; ++r) {
    for (uint32_t l = 0; l < txn_kv_lock_words(f.kv_options); ++l) EXPECT_EQ(f.TxnChain::reader(r).word(l), 0u);
  }
}

// Found by the simulator (docs/simulation.md, seed 118): a put is applied
// everywhere and acknowledged, but its unlock gCAS does not get through to
// every replica (the lock group's link 1 -> 2 is cut while it runs). The
// unlock's error used to be ignored: replica 2 then refused every read of
// the stripe until some later write failed and a front end resumed --
// forever, if none came. A failed unlock now puts the store in doubt, as a
// failed write does: it says so at once, refuses writes, and a resumed
// front end takes every lock over and releases it.
TEST(TxnKvInDoubt, AnUnlockThatDoesNotGetThroughPutsTheStoreInDoubtSoItIsResumed) {
  KvFixture f;
  const std::string v1 = "version-1", v2 = "version-2";
  ASSERT_TRUE(f.kv->put("k", bytes(v1)).ok());
  ASSERT_FALSE(f.kv->in_doubt());
  const uint32_t src = f.client->replica_rings(f.locks, 1)->nic->address();
  const uint32_t dst = f.client->replica_rings(f.locks, 2)->nic->address();
  uint64_t heal_at = 0;
  int cas = 0;
  f.client->set_message_hook([&](Primitive p, std::span<uint8_t>) {
    if (p != Primitive::kCas || ++cas != 2) return;  // the first gCAS locks, the second unlocks
    heal_at = f.clock.now_ns() + 1'000'000'000;      // longer than RC's retries (~0.5 s)
    f.engine->fabric().set_tap([&, src, dst](const nic::Packet& pkt) {
      return f.clock.now_ns() < heal_at && pkt.src_nic == src && pkt.dst_nic == dst;
    });
  });
  const Status st = f.kv->put("k", bytes(v2));
  f.client->set_message_hook({});
  f.engine->fabric().set_tap({});
  ASSERT_GE(cas, 2) << "the put's unlock was never sent";
  ASSERT_TRUE(st.ok()) << "the write was applied everywhere before its unlock: " << st.to_string();
  for (uint32_t r = 0; r < 3; ++r) EXPECT_TRUE(image_holds(f, r, v2)) << "replica " << r;
  const uint32_t stripe = f.kv->lock_of("k");
  ASSERT_NE(f.TxnChain::reader(2).word(stripe), 0u) << "the unlock reached replica 2 after all";
  {
    ReplicaLocks lk = f.TxnChain::reader(2);
    EXPECT_FALSE(lk.try_rd_lock(stripe)) << "replica 2 lets readers in on a stripe its writer still holds";
  }
  EXPECT_TRUE(f.kv->in_doubt()) << "a failed unlock went unnoticed";
  EXPECT_EQ(f.kv->put("other", bytes(v1)).code(), Code::kFailedPrecondition);
  // The resumed front end releases the stuck lock: every replica serves reads.
  resume_front_end(f);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_FALSE(f.kv->in_doubt());
  for (uint32_t r = 0; r < 3; ++r) {
    for (uint32_t l = 0; l < txn_kv_lock_words(f.kv_options); ++l) EXPECT_EQ(f.TxnChain::reader(r).word(l), 0u);
  }
  expect_everywhere(f, {{"k", v2}}, {"k"});
}

// A damaged slot (a replica's image after a crash) is not a torn read: the
// reader looks again with no writer active and says kDataLoss instead of
// retrying forever.
TEST(TxnKvReplicaReads, ADamagedSlotIsDataLossNotAnEndlessRetry) {
  KvFixture f;
  const std::vector<uint8_t> value(16, 0x5A);
  ASSERT_TRUE(f.kv->put("victim", value).ok());
  uint8_t* db = f.region(1).data() + f.txn->db_offset();
  const size_t db_bytes = txn_kv_db_bytes(f.kv_options);
  uint8_t* at = std::search(db, db + db_bytes, value.begin(), value.end());
  ASSERT_NE(at, db + db_bytes) << "the value is not in replica 1's image";
  at[3] ^= 0x01;
  EXPECT_EQ(f.reader(1).get("victim").status().code(), Code::kDataLoss);
  auto whole = f.reader(0).get("victim");
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_EQ(whole.value(), value);
}

// ---- the read service of a replica in its own process (txn_kv_wire.h) ------------

// A replica's answer to one request, parsed as the client parses it.
TxnKvReadReply ask(TxnKvReplicaReader& reader, const TxnKvReadRequest& request, size_t capacity) {
  const std::vector<uint8_t> answer =
      answer_txn_kv_read(reader, request.type, encode_txn_kv_read(request), capacity);
  EXPECT_LE(answer.size(), capacity);
  auto reply = parse_txn_kv_reply(answer);
  EXPECT_TRUE(reply.ok()) << reply.status().to_string();
  return reply.ok() ? std::move(reply).value() : TxnKvReadReply{};
}

TEST(TxnKvReadService, EveryReplicaAnswersGetsAndPagedScansOverTheWire) {
  KvFixture f;
  std::map<std::string, std::string> model;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "k" + std::to_string(100 + i * 7 % 40);
    const std::string value(1 + i % 30, static_cast<char>('a' + i % 26));
    ASSERT_TRUE(f.kv->put(key, bytes(value)).ok());
    model[key] = value;
  }
  for (uint32_t r = 0; r < 3; ++r) {
    TxnKvReplicaReader reader = f.reader(r);
    TxnKvReadRequest get;
    get.key = "k117";
    TxnKvReadReply got = ask(reader, get, 4096);
    ASSERT_EQ(got.status, TxnKvReadStatus::kOk);
    ASSERT_EQ(got.entries.size(), 1u);
    EXPECT_EQ(got.entries[0].first, "k117");
    EXPECT_EQ(text(got.entries[0].second), model["k117"]);
    get.key = "absent";
    EXPECT_EQ(ask(reader, get, 4096).status, TxnKvReadStatus::kNotFound);
    const std::string too_long(17, 'x');  // over key_max (the request views it: it must outlive the call)
    get.key = too_long;
    EXPECT_EQ(ask(reader, get, 4096).status, TxnKvReadStatus::kInvalid);
    // The whole table in pages of 7, each reply cut to 150 bytes: the pages
    // join into the model, in order, each key once.
    std::vector<std::pair<std::string, std::string>> joined;
    std::string last;
    for (int pages = 0; pages < 100; ++pages) {
      TxnKvReadRequest scan;
      scan.type = kTxnKvReadScan;
      scan.key = last;
      scan.after = !joined.empty();
      scan.count = 7;
      const TxnKvReadReply page = ask(reader, scan, 150);
      ASSERT_EQ(page.status, TxnKvReadStatus::kOk);
      EXPECT_LE(page.entries.size(), 7u);
      for (const auto& [k, v] : page.entries) joined.emplace_back(k, text(v));
      if (page.entries.empty() || (!page.more && page.entries.size() < 7)) break;
      last = joined.back().first;
    }
    EXPECT_EQ(joined, model_scan(model, "", 1000)) << "replica " << r;
  }
  // Malformed requests and an image that is not a store are statuses.
  TxnKvReplicaReader reader = f.reader(0);
  const uint8_t truncated[] = {5, 0, 0, 0, 0, 0, 0, 0, 'a'};
  EXPECT_EQ(parse_txn_kv_reply(answer_txn_kv_read(reader, kTxnKvReadGet, truncated, 4096))->status,
            TxnKvReadStatus::kInvalid);
  std::vector<uint8_t> blank(txn_kv_db_bytes(f.kv_options), 0);
  uint64_t words[16] = {};
  TxnKvReplicaReader unformatted(blank, ReplicaLocks(reinterpret_cast<uint8_t*>(words), sizeof words), f.kv_options);
  TxnKvReadRequest get;
  get.key = "k100";
  EXPECT_EQ(ask(unformatted, get, 4096).status, TxnKvReadStatus::kUnreadable);
  // A reply encodes back to the same bytes, and a byte more or less is refused.
  TxnKvReadReply two;
  two.more = true;
  two.entries = {{"a", {'1'}}, {"bb", {}}};
  std::vector<uint8_t> wire = encode_txn_kv_reply(two);
  auto back = parse_txn_kv_reply(wire);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->more);
  EXPECT_EQ(back->entries, two.entries);
  wire.push_back(0);
  EXPECT_FALSE(parse_txn_kv_reply(wire).ok());
  wire.resize(wire.size() - 2);
  EXPECT_FALSE(parse_txn_kv_reply(wire).ok());
}

// A region read answers the raw bytes, cut to the reply's capacity and the
// region's end; a read past the end or a malformed one is kInvalid.
TEST(TxnKvWire, RegionReadPagesThroughTheRegion) {
  std::vector<uint8_t> region(100);
  for (size_t i = 0; i < region.size(); ++i) region[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> joined;
  for (uint64_t at = 0; at < region.size();) {
    TxnRegionReadRequest r;
    r.offset = at;
    r.length = 1000;
    auto reply = parse_txn_region_reply(answer_txn_region_read(region, encode_txn_region_read(r), 8 + 30));
    ASSERT_TRUE(reply.ok());
    ASSERT_EQ(reply->status, TxnKvReadStatus::kOk);
    ASSERT_FALSE(reply->bytes.empty());
    EXPECT_LE(reply->bytes.size(), 30u);
    joined.insert(joined.end(), reply->bytes.begin(), reply->bytes.end());
    at += reply->bytes.size();
  }
  EXPECT_EQ(joined, region);
  TxnRegionReadRequest past;
  past.offset = 100;
  past.length = 1;
  EXPECT_EQ(parse_txn_region_reply(answer_txn_region_read(region, encode_txn_region_read(past), 64))->status,
            TxnKvReadStatus::kInvalid);
  std::vector<uint8_t> zero = encode_txn_region_read(TxnRegionReadRequest{0, 0});
  EXPECT_FALSE(parse_txn_region_read(zero).ok());
  std::vector<uint8_t> reserved = encode_txn_region_read(TxnRegionReadRequest{0, 4});
  reserved[12] = 1;
  EXPECT_FALSE(parse_txn_region_read(reserved).ok());
  EXPECT_EQ(parse_txn_region_reply(answer_txn_region_read(region, reserved, 64))->status, TxnKvReadStatus::kInvalid);
  // A reply whose count does not tile the payload is refused.
  std::vector<uint8_t> wire = encode_txn_region_reply(TxnRegionReadReply{TxnKvReadStatus::kOk, {1, 2, 3}});
  EXPECT_TRUE(parse_txn_region_reply(wire).ok());
  wire.push_back(0);
  EXPECT_FALSE(parse_txn_region_reply(wire).ok());
}

}  // namespace txn_kv_test
}  // namespace ferry::hyperloop
