// The campaign of issue 26 for replicated RocksDB: "RocksDB with client
// crash/resume and head loss". Per seed: random puts and deletes (synced and
// not, small and larger than a record), memtable flushes and compactions,
// the replicas' appliers run at random points with random budgets, an
// applier's machine crashing (its disk keeping only what it synced, or
// everything), the head's process crashing and resuming on its own
// directory, reads at a random replica (a prefix of the history) and at the
// head (every write it took); then the head's machine is lost at a random
// point -- between operations, or in the middle of a synced write's
// replication -- and each replica in turn, power-failed (PM and disk), is
// the only survivor: reopened with plain RocksDB, it must hold a prefix of
// the head's history covering every acknowledged write (no acknowledged
// write missing, no acknowledged delete undone, no value never written).
//
// Size: FERRY_ROCKSDB_SEEDS seeds (default 12; scripts/run-tests.sh sets 3
// for the ASan run; the full size is 2000), from FERRY_SEED (default
// 0x26110000); a failure names its seed (replay: FERRY_SEED=<seed>
// FERRY_ROCKSDB_SEEDS=1).
#include "rocksdb_test_util.h"

namespace ferry::rocks::testing {
namespace {

struct CampaignTotals {
  uint64_t seeds = 0;
  uint64_t writes = 0;         // in the histories
  uint64_t acknowledged = 0;   // of them, acknowledged durable when the head was lost
  uint64_t replica_reads = 0;  // mid-run reads of a replica's database, checked
  uint64_t head_reads = 0;     // mid-run reads of the whole head, checked
  uint64_t survivors = 0;      // sole-survivor reopenings, checked
  uint64_t head_resumes = 0;
  uint64_t applier_crashes = 0;
  uint64_t mid_sync_losses = 0;
  uint64_t flushes = 0;
  uint64_t reclaimed_bytes = 0;
  uint64_t violations = 0;
};

std::string value_of(Rng& rng, uint64_t large_bytes) {
  if (rng.below(20) == 0) {
    std::string v(large_bytes + rng.below(large_bytes), '\0');
    for (char& c : v) c = static_cast<char>(rng.next());
    return v;
  }
  return random_value(rng);
}

void run_seed(uint64_t seed, CampaignTotals* t) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: FERRY_SEED=" + std::to_string(seed) +
               " FERRY_ROCKSDB_SEEDS=1)");
  Rng rng(seed);
  const uint64_t log_bytes = rng.below(2) == 0 ? 8 << 10 : 16 << 10;
  const uint64_t db_bytes = uint64_t{16 << 10} << rng.below(3);  // a stream of 16, 32 or 64 KiB
  // Half the seeds replicate large writes as RocksDB appends them, half only
  // at their Sync.
  Cluster c(log_bytes, db_bytes, rng.below(2) == 0 ? 0 : uint64_t{1} << 30);
  ASSERT_NE(c.head->db, nullptr);
  const uint64_t large = c.head->fs->max_chunk_bytes();
  const int ops = 100 + static_cast<int>(rng.below(300));
  const int lose_at = ops / 3 + static_cast<int>(rng.below(static_cast<uint64_t>(ops - ops / 3) + 1));
  const bool mid_sync = rng.below(3) == 0;
  const uint64_t keys = 10 + rng.below(150);
  for (int i = 0; i <= ops && !c.head_down; ++i) {
    if (i == lose_at) {
      if (!mid_sync) break;
      // The head dies in the middle of a Sync's replication: a synced write
      // of several records, the head lost after the first one or two.
      c.records_until_crash = 2 + rng.below(2);
      ++t->mid_sync_losses;
      std::string v(3 * large + rng.below(large), '\0');
      for (char& ch : v) ch = static_cast<char>(rng.next());
      EXPECT_FALSE(c.write(key_name("k", rng.below(keys)), v, /*sync=*/true)) << "the head outlived its crash";
      break;
    }
    const uint64_t action = rng.below(100);
    if (action < 72) {
      const std::string key = key_name("k", rng.below(keys));
      const bool del = rng.below(7) == 0;
      const bool sync = rng.below(10) < 7;
      if (!c.write(key, del ? std::nullopt : std::optional<std::string>(value_of(rng, large)), sync)) {
        ASSERT_TRUE(c.head_down) << "a write failed with the head up";
      }
    } else if (action < 75) {
      if (c.flush()) ++t->flushes;
    } else if (action < 77) {
      (void)c.compact();
    } else if (action < 81) {
      if (!c.head_down) {
        ASSERT_TRUE(c.head->fs->catch_up().ok());
      }
    } else if (action < 90) {
      const uint32_t r = static_cast<uint32_t>(rng.below(3));
      auto applied = c.replicas[r]->poll(1 + rng.below(40));
      ASSERT_TRUE(applied.ok()) << "replica " << r << ": " << applied.status().to_string();
    } else if (action < 92) {
      const uint32_t r = static_cast<uint32_t>(rng.below(3));
      c.replicas[r]->crash(/*power_failure=*/rng.below(3) != 0, rng.next());
      const Status s = c.replicas[r]->open();
      ASSERT_TRUE(s.ok()) << "replica " << r << " reopening: " << s.to_string();
      ++t->applier_crashes;
    } else if (action < 93) {
      ASSERT_NO_FATAL_FAILURE(c.crash_and_resume_head());
      ++t->head_resumes;
    } else if (action < 95) {
      // A client reads at a replica: eventually consistent, a prefix.
      const uint32_t r = static_cast<uint32_t>(rng.below(3));
      const PrefixCheck pc = check_prefix(read_all(c.replicas[r]->applier->db()), c.history, 0);
      ++t->replica_reads;
      if (!pc.ok) ++t->violations;
      EXPECT_TRUE(pc.ok) << "a read at replica " << r << ": " << pc.describe();
    } else if (action < 97) {
      // A client reads at the head: every write it took, the latest value.
      const bool same = read_all(c.head->db.get()) == c.history.state(c.history.writes.size());
      ++t->head_reads;
      if (!same) ++t->violations;
      EXPECT_TRUE(same) << "the head does not serve the writes it took";
    } else {
      if (c.head->db->SyncWAL().ok()) c.history.all_durable();
    }
  }
  if (const auto* h = c.head.get(); h != nullptr && h->fs != nullptr) {
    t->reclaimed_bytes += h->fs->stream_header().begin;  // since the stream began, across the head's restarts
  }
  c.lose_head();
  t->writes += c.history.writes.size();
  t->acknowledged += c.history.durable;
  for (uint32_t r = 0; r < 3; ++r) {
    std::string error;
    const PrefixCheck pc = c.sole_survivor(r, rng.next(), &error);
    ++t->survivors;
    if (!pc.ok) ++t->violations;
    EXPECT_TRUE(error.empty()) << "replica " << r << ": " << error;
    EXPECT_TRUE(pc.ok) << "replica " << r << " alone, of " << c.history.writes.size() << " writes ("
                       << c.history.durable << " acknowledged durable): " << pc.describe();
  }
  ++t->seeds;
}

TEST(ReplicatedRocksDbCampaign, ClientCrashResumeAndHeadLossLoseNoAcknowledgedWrite) {
  const ferry::testing::SeedRange range = seed_range("FERRY_ROCKSDB_SEEDS", 0x26110000, 12);
  const uint64_t base = range.first;
  CampaignTotals t;
  for (uint64_t k = 0; k < range.count; ++k) {
    ASSERT_NO_FATAL_FAILURE(run_seed(base + k, &t));
  }
  std::printf(
      "campaign: %llu seeds from %llu; %llu writes (%llu acknowledged durable at the head's loss), %llu "
      "sole-survivor reopenings, %llu replica reads and %llu head reads checked; %llu head resumes, %llu applier "
      "crashes, %llu "
      "losses mid-Sync, %llu flushes, %llu stream bytes reclaimed; violations: %llu\n",
      static_cast<unsigned long long>(t.seeds), static_cast<unsigned long long>(base),
      static_cast<unsigned long long>(t.writes), static_cast<unsigned long long>(t.acknowledged),
      static_cast<unsigned long long>(t.survivors), static_cast<unsigned long long>(t.replica_reads),
      static_cast<unsigned long long>(t.head_reads), static_cast<unsigned long long>(t.head_resumes),
      static_cast<unsigned long long>(t.applier_crashes), static_cast<unsigned long long>(t.mid_sync_losses),
      static_cast<unsigned long long>(t.flushes), static_cast<unsigned long long>(t.reclaimed_bytes),
      static_cast<unsigned long long>(t.violations));
  EXPECT_EQ(t.violations, 0u);
}

}  // namespace
}  // namespace ferry::rocks::testing
