// Replicated RocksDB (§5.1) on the real library: RocksDB (Debian's
// librocksdb) with its WAL replicated through TxnClient::append to three PM
// replicas on a deterministic manual engine. Every replica, power-failed
// (seeded: FERRY_SEED), rebuilds the WAL from its region, and RocksDB
// reopened there returns every acknowledged write; the replicas' WAL image
// equals the head's WAL after catch-up; unsynced writes are not claimed
// until a Sync; a new WAL restarts the image; and with the replication
// bypassed the same check fails.
#include "ferry/rocksdb/replicated_wal.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ferry/common/checksum.h"
#include "ferry/common/clock.h"
#include "ferry/common/rng.h"
#include "ferry/hyperloop/hyperloop.h"
#include "txn_test_util.h"

namespace ferry::rocksdb_wal_test {

namespace fs = std::filesystem;
using hyperloop::ReplicaView;
using hyperloop::TxnClient;
using rocks::ReplicatedWalFileSystem;
using rocks::ReplicatedWalOptions;

uint64_t seed_from_env(uint64_t fallback) {
  const char* s = std::getenv("FERRY_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 0) : fallback;
}

// A fresh directory, removed with what it holds. On tmpfs when there is one:
// every synced write fsyncs the head's WAL.
class TempDir {
 public:
  TempDir() {
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    std::string tmpl = (base / "ferry-rocksdb-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

// The head's TxnClient over three PM replicas and their DRAM lock words, on
// a manual engine (tests/hyperloop/txn_test_util.h).
struct Chain : hyperloop::testing::TxnChain {
  explicit Chain(uint64_t log_bytes = 16 << 10, uint64_t db_bytes = 256 << 10)
      : TxnChain(hyperloop::testing::txn_chain_options(512 << 10, log_bytes, db_bytes)) {}
};

rocksdb::Options base_options() {
  rocksdb::Options o;
  // No memtable flush during a test: the WAL is the only copy of the data.
  o.write_buffer_size = 4 << 20;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  return o;
}

// The head: RocksDB whose WAL goes through the replicated file system.
struct Head {
  Head(Chain& chain, const std::string& dir_in, const ReplicatedWalOptions& options = {}) : dir(dir_in) {
    auto f = ReplicatedWalFileSystem::create(rocksdb::FileSystem::Default(), *chain.txn, options);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    if (!f.ok()) return;
    fs = f.value();
    env = rocksdb::NewCompositeEnv(fs);
    rocksdb::Options o = base_options();
    o.create_if_missing = true;
    o.env = env.get();
    rocksdb::DB* raw = nullptr;
    const rocksdb::Status s = rocksdb::DB::Open(o, dir, &raw);
    EXPECT_TRUE(s.ok()) << s.ToString();
    db.reset(raw);
  }
  // The head's own WAL file, as RocksDB wrote it.
  std::vector<uint8_t> local_wal() const {
    std::ifstream in(fs::path(dir) / rocks::wal_file_name(fs->wal_file_number()), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  std::string dir;
  std::shared_ptr<ReplicatedWalFileSystem> fs;  // declared before them: destroyed after the DB and the Env
  std::unique_ptr<rocksdb::Env> env;
  std::unique_ptr<rocksdb::DB> db;
};

// The acknowledged state: a key's value, or nullopt once it was deleted.
using Model = std::map<std::string, std::optional<std::string>>;

std::string random_value(Rng& rng) {
  std::string v(20 + rng.below(180), '\0');
  for (char& c : v) c = static_cast<char>(rng.next());
  return v;
}

// `n` writes with sync = true: puts of new and existing keys, some deletes.
// Each is acknowledged (recorded in `model`) when Write returns OK; every
// so often the replicas catch up.
void synced_writes(Head& head, Rng& rng, int n, Model* model, const std::string& prefix = "key") {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  int last_catch_up = 0;
  for (int i = 0; i < n; ++i) {
    char number[16];
    std::snprintf(number, sizeof number, "%06u", static_cast<unsigned>(rng.below(static_cast<uint64_t>(n))));
    const std::string key = prefix + number;
    if (!model->empty() && rng.below(10) == 0) {
      ASSERT_TRUE(head.db->Delete(wo, key).ok());
      (*model)[key] = std::nullopt;
    } else {
      const std::string v = random_value(rng);
      const rocksdb::Status s = head.db->Put(wo, key, v);
      ASSERT_TRUE(s.ok()) << s.ToString();
      (*model)[key] = v;
    }
    // At least 100 records (over 19 KiB) between catch-ups: the 16 KiB log
    // ring fills in between, and the last record stays unexecuted.
    if (i - last_catch_up >= 100 && rng.below(8) == 0 && i + 1 < n) {
      last_catch_up = i;
      ASSERT_TRUE(head.fs->catch_up().ok());
    }
  }
}

struct ReplicaCheck {
  Status recovered;          // recover_wal's status
  std::vector<uint8_t> wal;  // the WAL it rebuilt
  size_t missing = 0;        // acknowledged puts absent or with another value
  size_t resurrected = 0;    // acknowledged deletes whose key is back
  std::string first;         // the first bad key, for the message
};

// What a restarted replica does with `region`: replay its log, rebuild the
// WAL, put it beside the head's other files (copied before the failure,
// as from a neighbour), and open RocksDB there (no replication); then every
// acknowledged write is looked up.
ReplicaCheck reopen_and_check(std::span<uint8_t> region, const std::string& head_files, const Model& model) {
  ReplicaCheck out;
  auto wal = rocks::recover_wal(region);
  out.recovered = wal.status();
  if (wal.ok()) out.wal = wal->bytes;
  TempDir dir;
  const std::string db_dir = dir.sub("db");
  const Status b = rocks::build_recovery_dir(head_files, wal.ok() ? &wal.value() : nullptr, db_dir);
  EXPECT_TRUE(b.ok()) << b.to_string();
  rocksdb::Options o = base_options();
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(o, db_dir, &raw);
  EXPECT_TRUE(s.ok()) << "reopening the replica's RocksDB: " << s.ToString();
  if (!s.ok()) {
    out.missing = model.size();
    return out;
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  for (const auto& [key, value] : model) {
    std::string got;
    const rocksdb::Status g = db->Get(rocksdb::ReadOptions(), key, &got);
    const bool bad = value ? !(g.ok() && got == *value) : !g.IsNotFound();
    if (bad) {
      ++(value ? out.missing : out.resurrected);
      if (out.first.empty()) out.first = key;
    }
  }
  return out;
}

// The head's files other than its WAL, copied (with the head quiescent) to
// where a recovering replica takes them from.
std::string copy_head_files(const Head& head, const TempDir& tmp) {
  const std::string dir = tmp.sub("head-files");
  const Status s = rocks::build_recovery_dir(head.dir, nullptr, dir);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return dir;
}

// Power-fails replica r for real, then reopens it.
ReplicaCheck power_fail_and_check(Chain& chain, uint32_t r, uint64_t seed, const std::string& head_files,
                                  const Model& model) {
  chain.replica(r).domain->power_fail(seed);
  return reopen_and_check(chain.region(r), head_files, model);
}

size_t live_keys(const Model& model) {
  size_t n = 0;
  for (const auto& kv : model) n += kv.second.has_value();
  return n;
}

TEST(ReplicatedRocksDb, EveryPowerFailedReplicaReopensWithEveryAcknowledgedWrite) {
  const uint64_t seed = seed_from_env(20260101);
  std::printf("seed %llu (replay: FERRY_SEED=%llu)\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  Model model;
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 400, &model));
  const auto c = head.fs->counters();
  EXPECT_GE(c.syncs, 400u);
  EXPECT_GT(c.executes_for_room, 0u) << "the 16 KiB ring never filled: ExecuteAndAdvance ran only on catch_up";
  EXPECT_EQ(c.eager_replications, 0u);
  EXPECT_EQ(c.wal_files, 1u);
  EXPECT_EQ(head.fs->replicated_bytes(), head.local_wal().size()) << "every synced byte is on the replicas";
  EXPECT_LT(chain.txn->head(), chain.txn->tail()) << "some records are appended and not executed";

  const std::string head_files = copy_head_files(head, tmp);
  for (uint32_t r = 0; r < 3; ++r) {
    const ReplicaCheck rc = power_fail_and_check(chain, r, seed * 7 + r, head_files, model);
    ASSERT_TRUE(rc.recovered.ok()) << "replica " << r << ": " << rc.recovered.to_string();
    const std::vector<uint8_t> local = head.local_wal();
    ASSERT_EQ(rc.wal.size(), local.size()) << "replica " << r;
    EXPECT_TRUE(rc.wal == local) << "replica " << r << "'s WAL differs from the head's";
    EXPECT_EQ(rc.missing, 0u) << "replica " << r << " lost acknowledged puts, first " << rc.first;
    EXPECT_EQ(rc.resurrected, 0u) << "replica " << r << " lost acknowledged deletes, first " << rc.first;
  }
  std::printf("%zu keys (%zu live), %llu records, %llu WAL bytes, %llu executed for room, %llu by catch-up\n",
              model.size(), live_keys(model), static_cast<unsigned long long>(c.records),
              static_cast<unsigned long long>(c.bytes), static_cast<unsigned long long>(c.executes_for_room),
              static_cast<unsigned long long>(c.caught_up));
}

// The control: the same run with the replication bypassed. Writes succeed
// (the head's local WAL has them) but a power-failed replica holds no WAL,
// and the reopened RocksDB lacks every key -- the check above can fail.
TEST(ReplicatedRocksDb, WithTheReplicationBypassedAPowerFailedReplicaLacksTheWrites) {
  const uint64_t seed = seed_from_env(20260101);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  ReplicatedWalOptions o;
  o.replicate = false;
  Head head(chain, tmp.sub("head"), o);
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  Model model;
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 100, &model));
  EXPECT_EQ(head.fs->counters().records, 0u);
  const std::string head_files = copy_head_files(head, tmp);
  const ReplicaCheck rc = power_fail_and_check(chain, 1, seed, head_files, model);
  EXPECT_EQ(rc.recovered.code(), Code::kNotFound) << rc.recovered.to_string();
  EXPECT_EQ(rc.missing, live_keys(model)) << "without replication, acknowledged writes survived on a replica";
}

TEST(ReplicatedRocksDb, TheReplicasWalImageEqualsTheHeadsWalAfterCatchUp) {
  const uint64_t seed = seed_from_env(77);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  Model model;
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 150, &model));
  const std::vector<uint8_t> local = head.local_wal();
  ASSERT_FALSE(local.empty());
  // Before catch-up the last records are only in the replicas' logs.
  ASSERT_LT(chain.txn->head(), chain.txn->tail());
  auto before = rocks::read_wal_image(chain.region(0));
  ASSERT_TRUE(before.ok()) << before.status().to_string();
  EXPECT_LT(before->bytes.size(), local.size()) << "the image was already current";

  // One record at a time (a caller catching up in its idle gaps), then the rest.
  const uint64_t head_before = chain.txn->head();
  const uint64_t caught_before = head.fs->counters().caught_up;
  auto one = head.fs->catch_up_one();
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_TRUE(*one);
  EXPECT_GT(chain.txn->head(), head_before) << "catch_up_one executed no record";
  EXPECT_EQ(head.fs->counters().caught_up, caught_before + 1);
  ASSERT_TRUE(head.fs->catch_up().ok());
  EXPECT_EQ(chain.txn->head(), chain.txn->tail());
  EXPECT_GT(head.fs->counters().caught_up, caught_before + 1);
  one = head.fs->catch_up_one();
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_FALSE(*one) << "nothing was left to execute";
  for (uint32_t r = 0; r < 3; ++r) {
    auto image = rocks::read_wal_image(chain.region(r));
    ASSERT_TRUE(image.ok()) << "replica " << r << ": " << image.status().to_string();
    EXPECT_EQ(image->file_number, head.fs->wal_file_number()) << "replica " << r;
    ASSERT_EQ(image->bytes.size(), local.size()) << "replica " << r;
    EXPECT_TRUE(image->bytes == local) << "replica " << r << "'s image differs from the head's WAL";
  }
}

// Unsynced writes are not claimed: they wait at the head until a Sync. A
// power-failed replica then has every synced write and none of the later
// unsynced ones; after DB::SyncWAL it has them all.
TEST(ReplicatedRocksDb, WritesWithoutSyncAreNotClaimedUntilTheWalIsSynced) {
  const uint64_t seed = seed_from_env(5);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  Model synced;
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 60, &synced));
  const uint64_t acknowledged = head.fs->replicated_bytes();

  Model unsynced;
  for (int i = 0; i < 10; ++i) {
    const std::string key = "unsynced" + std::to_string(i);
    const std::string v = random_value(rng);
    ASSERT_TRUE(head.db->Put(rocksdb::WriteOptions(), key, v).ok());
    unsynced[key] = v;
  }
  EXPECT_EQ(head.fs->replicated_bytes(), acknowledged) << "an unsynced write was replicated";
  EXPECT_GT(head.local_wal().size(), acknowledged) << "the head's WAL has the unsynced writes";
  ASSERT_EQ(head.fs->counters().eager_replications, 0u);

  // Replica 2 as a power failure would leave it (its image, not failing it).
  const std::string head_files = copy_head_files(head, tmp);
  {
    ReplicaView v = chain.replica(2);
    std::vector<uint8_t> image = v.domain->image_after_power_fail(*v.region, seed);
    const ReplicaCheck s = reopen_and_check(image, head_files, synced);
    ASSERT_TRUE(s.recovered.ok()) << s.recovered.to_string();
    EXPECT_EQ(s.missing + s.resurrected, 0u) << "a synced write is missing, first " << s.first;
    const ReplicaCheck u = reopen_and_check(image, head_files, unsynced);
    EXPECT_EQ(u.missing, unsynced.size()) << "unsynced writes reached the replicas without a Sync";
  }

  ASSERT_TRUE(head.db->SyncWAL().ok());
  EXPECT_EQ(head.fs->replicated_bytes(), head.local_wal().size());
  Model all = synced;
  all.insert(unsynced.begin(), unsynced.end());
  const ReplicaCheck rc = power_fail_and_check(chain, 2, seed + 1, head_files, all);
  ASSERT_TRUE(rc.recovered.ok()) << rc.recovered.to_string();
  EXPECT_EQ(rc.missing + rc.resurrected, 0u) << "after SyncWAL, first missing " << rc.first;
}

// A memtable flush switches RocksDB to a new WAL: the image restarts with
// it. The older writes are in the head's SST (copied like the MANIFEST);
// the newer ones come from the replica's WAL.
TEST(ReplicatedRocksDb, ANewWalRestartsTheImage) {
  const uint64_t seed = seed_from_env(9);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  Model model;
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 60, &model, "before-"));
  const uint64_t first_wal = head.fs->wal_file_number();
  ASSERT_TRUE(head.db->Flush(rocksdb::FlushOptions()).ok());
  EXPECT_GT(head.fs->wal_file_number(), first_wal);
  EXPECT_EQ(head.fs->replicated_bytes(), 0u) << "the new WAL's image starts empty";
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 60, &model, "after-"));
  EXPECT_EQ(head.fs->counters().wal_files, 2u);
  EXPECT_EQ(head.fs->replicated_bytes(), head.local_wal().size());

  const std::string head_files = copy_head_files(head, tmp);
  bool sst = false;
  for (const auto& e : fs::directory_iterator(head_files)) sst = sst || e.path().extension() == ".sst";
  EXPECT_TRUE(sst) << "the flush wrote no SST";
  for (uint32_t r = 0; r < 3; ++r) {
    const ReplicaCheck rc = power_fail_and_check(chain, r, seed * 3 + r, head_files, model);
    ASSERT_TRUE(rc.recovered.ok()) << rc.recovered.to_string();
    EXPECT_EQ(rc.missing + rc.resurrected, 0u) << "replica " << r << ", first " << rc.first;
  }
}

// A write larger than a record's worth (half the log ring) goes out as
// several records as soon as RocksDB appends it (eager_bytes), each moving
// the image's length; the replica still rebuilds it whole.
TEST(ReplicatedRocksDb, ALargeWriteIsReplicatedInSeveralRecords) {
  const uint64_t seed = seed_from_env(31);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  Model model;
  rocksdb::WriteOptions wo;
  wo.sync = true;
  const uint64_t chunk = head.fs->max_chunk_bytes();
  for (int i = 0; i < 5; ++i) {
    std::string v(2 * chunk + 1 + rng.below(chunk), '\0');
    for (char& c : v) c = static_cast<char>(rng.next());
    const std::string key = "large" + std::to_string(i);
    const uint64_t records = head.fs->counters().records;
    ASSERT_TRUE(head.db->Put(wo, key, v).ok());
    EXPECT_GE(head.fs->counters().records - records, 3u) << "one large write, records of at most " << chunk << " bytes";
    model[key] = v;
  }
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 40, &model));
  EXPECT_GT(head.fs->counters().eager_replications, 0u);
  EXPECT_EQ(head.fs->replicated_bytes(), head.local_wal().size());
  const std::string head_files = copy_head_files(head, tmp);
  for (uint32_t r = 0; r < 3; ++r) {
    const ReplicaCheck rc = power_fail_and_check(chain, r, seed * 5 + r, head_files, model);
    ASSERT_TRUE(rc.recovered.ok()) << rc.recovered.to_string();
    EXPECT_EQ(rc.missing + rc.resurrected, 0u) << "replica " << r << ", first " << rc.first;
  }
}

TEST(ReplicatedRocksDbFormat, WalNamesAndDamagedImages) {
  EXPECT_EQ(rocks::wal_file_name(42), "000042.log");
  EXPECT_EQ(rocks::parse_wal_file_name("/x/y/000042.log"), 42u);
  EXPECT_EQ(rocks::parse_wal_file_name("1234567.log"), 1234567u);
  for (const char* other : {"LOG", "LOG.old.123", "MANIFEST-000005", "000010.sst", ".log", "12a.log", "000042.log.x"}) {
    EXPECT_FALSE(rocks::parse_wal_file_name(other).has_value()) << other;
  }

  Chain chain(/*log_bytes=*/4096, /*db_bytes=*/8192);
  EXPECT_EQ(rocks::read_wal_image(chain.region(0)).status().code(), Code::kNotFound) << "nothing replicated yet";
  const std::vector<uint8_t> zeros(1024, 0);
  EXPECT_EQ(rocks::read_wal_image(zeros).status().code(), Code::kDataLoss) << "no transaction layout";
  EXPECT_EQ(rocks::read_wal_image(std::span<const uint8_t>(zeros).first(10)).status().code(), Code::kDataLoss);

  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  ASSERT_TRUE(head.db->Put(wo, "k", "v").ok());
  ASSERT_TRUE(head.fs->catch_up().ok());
  std::span<uint8_t> live = chain.region(0);
  std::vector<uint8_t> region(live.begin(), live.end());
  ASSERT_TRUE(rocks::read_wal_image(region).ok());
  uint8_t* header = region.data() + chain.txn->db_offset();
  // Every bit of the header's fields, flipped one at a time.
  for (int bit = 0; bit < 32 * 8; ++bit) {
    header[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_EQ(rocks::read_wal_image(region).status().code(), Code::kDataLoss) << "bit " << bit;
    header[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  // A well-formed header whose length exceeds the image.
  const uint64_t too_long = 8192;
  std::memcpy(header + 16, &too_long, 8);
  const uint64_t sum = checksum64(std::span<const uint8_t>(header, 24));
  std::memcpy(header + 24, &sum, 8);
  EXPECT_EQ(rocks::read_wal_image(region).status().code(), Code::kDataLoss);

  // A WAL larger than the image: Sync fails (NoSpace) and the write is not acknowledged.
  const std::string big(9000, 'x');
  const rocksdb::Status s = head.db->Put(wo, "big", big);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
}

}  // namespace ferry::rocksdb_wal_test
