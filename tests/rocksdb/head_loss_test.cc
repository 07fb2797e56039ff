// Issue 26 (items 11, 12): replicated RocksDB loses no acknowledged write
// when the head's machine is lost. Every replica keeps a complete database
// of its own (its applier, off the critical path) and the WAL stream the
// head can overwrite only behind every replica's durable cursor; a replica
// that alone survives reopens with every acknowledged write and no
// acknowledged delete undone. A Sync of an older WAL after a switch
// replicates its bytes (or fails); a new member copies its database and
// region from a neighbour; the head's process resumes its stream from its
// local WALs; an applier that crashes resumes from its durable cursor.
#include <cstring>

#include "rocksdb_test_util.h"

namespace ferry::rocks::testing {
namespace {

// Writes `n` puts and deletes, synced unless `unsynced_one_in` says
// otherwise (one in that many are not), running the replicas' appliers
// every so often (each on its own schedule: replica 2 lags).
void write_some(Cluster& c, Rng& rng, int n, const std::string& prefix, uint64_t unsynced_one_in = 0) {
  for (int i = 0; i < n; ++i) {
    const std::string key = key_name(prefix, rng.below(static_cast<uint64_t>(n)));
    const bool sync = unsynced_one_in == 0 || rng.below(unsynced_one_in) != 0;
    const bool del = !c.history.writes.empty() && rng.below(8) == 0;
    ASSERT_TRUE(c.write(key, del ? std::nullopt : std::optional<std::string>(random_value(rng)), sync));
    for (uint32_t r = 0; r < 3; ++r) {
      if (rng.below(20 + 30 * r) == 0) {
        ASSERT_TRUE(c.head->fs->catch_up().ok());
        auto applied = c.replicas[r]->poll(1 + rng.below(50));
        ASSERT_TRUE(applied.ok()) << "replica " << r << ": " << applied.status().to_string();
      }
    }
  }
}

// Loses the head, then reopens each replica alone (seeded by
// `seed_base + r`): each must hold a prefix of the history with every
// acknowledged durable write in it.
void expect_each_replica_alone_holds_every_acknowledged_write(Cluster& c, uint64_t seed_base) {
  c.lose_head();
  for (uint32_t r = 0; r < 3; ++r) {
    std::string error;
    const PrefixCheck pc = c.sole_survivor(r, seed_base + r, &error);
    EXPECT_TRUE(error.empty()) << "replica " << r << ": " << error;
    EXPECT_TRUE(pc.ok) << "replica " << r << " alone, of " << c.history.writes.size() << " writes ("
                       << c.history.durable << " acknowledged durable): " << pc.describe();
  }
}

// Item 11. Several WAL switches (memtable flushes, with unsynced writes
// before each: durable once Flush returns) and compactions, a stream small
// enough to wrap many times (the head reclaims behind the appliers); then
// the head's machine is lost with its directory, and each replica in turn,
// power-failed, is the only survivor.
TEST(ReplicatedRocksDbHeadLoss, EachReplicaAloneReopensWithEveryAcknowledgedWriteAfterWalSwitches) {
  const uint64_t seed = test_seed(2611);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Cluster c;
  ASSERT_NE(c.head->db, nullptr);
  Rng rng(seed);
  for (int round = 0; round < 6; ++round) {
    ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 80, "r" + std::to_string(round) + "-"));
    ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 10, "unsynced" + std::to_string(round) + "-", /*unsynced_one_in=*/1));
    ASSERT_TRUE(c.flush());
    if (round % 2 == 1) {
      ASSERT_TRUE(c.compact());
    }
  }
  ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 40, "last-"));
  const ReplicatedWalCounters counters = c.head->fs->counters();
  EXPECT_GE(counters.wal_files, 7u);
  EXPECT_GT(counters.reclaimed_bytes, 4 * c.head->fs->stream_header().end / 8)
      << "the stream did not wrap: the test does not reach reclaiming";
  EXPECT_GT(counters.older_wal_bytes, 0u) << "no unsynced bytes were waiting at a switch";
  std::printf("%zu writes, %llu WAL files, %llu stream bytes, %llu reclaimed, %llu waits for room\n",
              c.history.writes.size(), static_cast<unsigned long long>(counters.wal_files),
              static_cast<unsigned long long>(c.head->fs->stream_header().end),
              static_cast<unsigned long long>(counters.reclaimed_bytes),
              static_cast<unsigned long long>(counters.stream_full_waits));

  expect_each_replica_alone_holds_every_acknowledged_write(c, seed * 3);
}

// Item 12. RocksDB syncs an older WAL after it switched to a newer one
// (SyncClosedLogs, or a synced write syncing every live WAL). That Sync
// must put the older WAL's bytes on every replica or fail -- never return
// OK without them. And bytes appended to the older WAL after the newer one
// reached the replicas cannot keep the stream's order: they fail.
TEST(ReplicatedRocksDbWal, ASyncOfAnOlderWalAfterASwitchIsReplicatedOrFails) {
  Chain chain;
  TempDir tmp;
  auto f = ReplicatedWalFileSystem::create(::rocksdb::FileSystem::Default(), *chain.txn);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto rfs = f.value();
  fs::create_directories(tmp.sub("db"));
  std::unique_ptr<::rocksdb::FSWritableFile> older, newer;
  ASSERT_TRUE(rfs->NewWritableFile(tmp.sub("db/000005.log"), ::rocksdb::FileOptions(), &older, nullptr).ok());
  const std::string bytes(3000, 'w');
  ASSERT_TRUE(older->Append(bytes, ::rocksdb::IOOptions(), nullptr).ok());
  ASSERT_TRUE(rfs->NewWritableFile(tmp.sub("db/000006.log"), ::rocksdb::FileOptions(), &newer, nullptr).ok());
  const ::rocksdb::IOStatus s = older->Sync(::rocksdb::IOOptions(), nullptr);
  if (s.ok()) {
    // Every replica, power-failed and replayed, holds WAL 5's bytes.
    for (uint32_t r = 0; r < 3; ++r) {
      hyperloop::ReplicaView v = chain.replica(r);
      std::vector<uint8_t> image = v.domain->image_after_power_fail(*v.region, r + 1);
      ASSERT_TRUE(hyperloop::replay_txn_log(image).ok());
      auto stream = read_wal_stream(image);
      ASSERT_TRUE(stream.ok()) << "replica " << r << ": " << stream.status().to_string();
      bool holds = false;
      for (const WalImage& w : *stream) {
        holds = holds || (w.file_number == 5 && w.first_offset == 0 && w.bytes.size() == bytes.size() &&
                          std::memcmp(w.bytes.data(), bytes.data(), bytes.size()) == 0);
      }
      EXPECT_TRUE(holds) << "Sync of WAL 5 after the switch to WAL 6 returned OK, but replica " << r
                         << " does not hold its " << bytes.size() << " bytes";
    }
  }

  // WAL 6 reaches the replicas; then WAL 5 grows: that write fails (at
  // Append or at its Sync), since it could only follow WAL 6 in the stream.
  ASSERT_TRUE(newer->Append(std::string(100, 'n'), ::rocksdb::IOOptions(), nullptr).ok());
  ASSERT_TRUE(newer->Sync(::rocksdb::IOOptions(), nullptr).ok());
  const ::rocksdb::IOStatus late = older->Append(std::string(10, 'l'), ::rocksdb::IOOptions(), nullptr);
  const ::rocksdb::IOStatus late_sync = late.ok() ? older->Sync(::rocksdb::IOOptions(), nullptr) : late;
  EXPECT_FALSE(late_sync.ok()) << "bytes of WAL 5 written after WAL 6's were acknowledged";
}

// The ordering rule at the file level. Opening a newer WAL (a memtable
// switch) puts the waiting bytes of older WALs on every replica at once;
// bytes an older WAL takes after that (RocksDB with manual_wal_flush writes
// its buffer after opening the next WAL) go out before the newer WAL's
// first bytes; so the stream holds WAL 5 whole, then WAL 6.
TEST(ReplicatedRocksDbWal, TheStreamHoldsEveryByteOfAnOlderWalBeforeANewerOnes) {
  Chain chain;
  TempDir tmp;
  auto f = ReplicatedWalFileSystem::create(::rocksdb::FileSystem::Default(), *chain.txn);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto rfs = f.value();
  fs::create_directories(tmp.sub("db"));
  const ::rocksdb::IOOptions io;
  std::unique_ptr<::rocksdb::FSWritableFile> older, newer;
  ASSERT_TRUE(rfs->NewWritableFile(tmp.sub("db/000005.log"), ::rocksdb::FileOptions(), &older, nullptr).ok());
  const std::string a(1000, 'a'), b(500, 'b'), n(700, 'n');
  ASSERT_TRUE(older->Append(a, io, nullptr).ok());
  ASSERT_TRUE(rfs->NewWritableFile(tmp.sub("db/000006.log"), ::rocksdb::FileOptions(), &newer, nullptr).ok());
  ASSERT_TRUE(rfs->catch_up().ok());
  auto stream = read_wal_stream(chain.region(0));
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  ASSERT_EQ(stream->size(), 1u) << "opening WAL 6 did not put WAL 5's waiting bytes on the replicas";
  EXPECT_EQ((*stream)[0].bytes.size(), a.size());

  ASSERT_TRUE(older->Append(b, io, nullptr).ok()) << "WAL 6 has nothing in the stream yet: WAL 5 may grow";
  ASSERT_TRUE(newer->Append(n, io, nullptr).ok());
  ASSERT_TRUE(newer->Sync(io, nullptr).ok());
  ASSERT_TRUE(rfs->catch_up().ok());
  for (uint32_t r = 0; r < 3; ++r) {
    stream = read_wal_stream(chain.region(r));
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    ASSERT_EQ(stream->size(), 2u) << "replica " << r;
    EXPECT_EQ((*stream)[0].file_number, 5u);
    EXPECT_EQ(std::string((*stream)[0].bytes.begin(), (*stream)[0].bytes.end()), a + b) << "replica " << r;
    EXPECT_EQ((*stream)[1].file_number, 6u);
    EXPECT_EQ(std::string((*stream)[1].bytes.begin(), (*stream)[1].bytes.end()), n) << "replica " << r;
  }
  EXPECT_EQ(rfs->counters().older_wal_bytes, a.size() + b.size());
}

// The same through RocksDB: writes left unsynced in a WAL when a memtable
// flush switches to the next are on every replica once Flush returns.
TEST(ReplicatedRocksDbWal, UnsyncedWritesAreOnEveryReplicaOnceAFlushReturns) {
  const uint64_t seed = test_seed(12);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Cluster c;
  ASSERT_NE(c.head->db, nullptr);
  Rng rng(seed);
  ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 30, "unsynced-", /*unsynced_one_in=*/1));
  EXPECT_EQ(c.history.durable, 0u);
  ASSERT_TRUE(c.flush());
  EXPECT_GT(c.head->fs->counters().older_wal_bytes, 0u);
  expect_each_replica_alone_holds_every_acknowledged_write(c, seed);
}

// The stream never overwrites what a replica has not durably applied: with
// replica 2's applier stopped, the stream fills, and a Sync that finds no
// room fails (the write is not acknowledged) rather than drop replica 2's
// bytes; once replica 2 applies, writes go on, and replica 2 alone holds
// everything acknowledged.
TEST(ReplicatedRocksDbStream, AFullStreamWaitsForTheSlowestReplicaInsteadOfOverwritingIt) {
  const uint64_t seed = test_seed(33);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Cluster c;
  ASSERT_NE(c.head->db, nullptr);
  c.replicas[2]->close();  // its CPU is busy elsewhere: no applier runs
  Rng rng(seed);
  ::rocksdb::Status s;
  int acknowledged = 0;
  for (; acknowledged < 2000; ++acknowledged) {
    if (!c.write(key_name("k", rng.below(500)), random_value(rng), /*sync=*/true)) break;
    if (rng.below(10) == 0) {
      ASSERT_TRUE(c.head->fs->catch_up().ok());
      ASSERT_TRUE(c.replicas[0]->poll().ok());
      ASSERT_TRUE(c.replicas[1]->poll().ok());
    }
  }
  EXPECT_LT(acknowledged, 2000) << "the stream never filled";
  EXPECT_GT(c.head->fs->counters().stream_full_waits, 0u);
  EXPECT_EQ(c.head->fs->stream_header().begin, 0u) << "the head reclaimed what replica 2 had not applied";

  // Replica 2 alone (the head and the others lost): every acknowledged write.
  c.lose_head();
  std::string error;
  const PrefixCheck pc = c.sole_survivor(2, seed, &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_TRUE(pc.ok) << pc.describe();
}

// A new member (replica 2's machine replaced: empty disk, zeroed PM) copies
// the log and the database from a neighbour (replica 1: its region, and a
// checkpoint of its database with its cursor), then follows the stream;
// later, alone, it holds every acknowledged write.
TEST(ReplicatedRocksDbMembership, ANewMemberCopiesTheLogAndTheDatabaseFromANeighbour) {
  const uint64_t seed = test_seed(44);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Cluster c;
  ASSERT_NE(c.head->db, nullptr);
  Rng rng(seed);
  ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 150, "a-"));
  ASSERT_TRUE(c.flush());
  ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 150, "b-"));

  // Replica 2's machine is replaced. Writes pause while the new member
  // catches up (§5 "RocksDB Recovery").
  Replica& fresh = *c.replicas[2];
  fresh.crash(/*power_failure=*/true, seed);
  std::error_code ec;
  fs::remove_all(fresh.dir, ec);
  std::span<uint8_t> mine = c.chain.region(2);
  hyperloop::ReplicaView v = c.chain.replica(2);
  std::vector<uint8_t> zero(mine.size(), 0);
  v.region->store_persist(mine.data(), zero.data(), zero.size());
  ASSERT_TRUE(c.head->fs->catch_up().ok());
  ASSERT_TRUE(c.replicas[1]->poll().ok());
  ASSERT_TRUE(c.replicas[1]->applier->copy_to(fresh.dir).ok());
  const std::span<uint8_t> neighbour = c.chain.region(1);
  v.region->store_persist(mine.data(), neighbour.data(), neighbour.size());
  ASSERT_TRUE(fresh.open().ok());
  EXPECT_EQ(fresh.applier->durable_cursor().position, c.replicas[1]->applier->durable_cursor().position);

  ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 150, "c-"));
  ASSERT_TRUE(c.flush());
  ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 50, "d-"));
  c.lose_head();
  std::string error;
  const PrefixCheck pc = c.sole_survivor(2, seed, &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_TRUE(pc.ok) << "the new member alone: " << pc.describe();
}

// The head's process crashes with writes appended to its WAL but never
// synced, and restarts on its own directory: RocksDB recovers those writes
// from the local WAL, so the stream gets them first (resume_local_wals),
// and a replica that later survives alone holds a prefix of what the head
// served -- the recovered writes before every later acknowledged one.
TEST(ReplicatedRocksDbHeadCrash, AResumedHeadStreamsWhatItRecoversFromItsLocalWalFirst) {
  const uint64_t seed = test_seed(55);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Cluster c;
  ASSERT_NE(c.head->db, nullptr);
  Rng rng(seed);
  ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 100, "a-"));
  ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 20, "unsynced-", /*unsynced_one_in=*/1));
  ASSERT_NO_FATAL_FAILURE(c.crash_and_resume_head());
  // The unsynced writes came back at the head (its process crashed; the OS
  // kept its WAL)...
  EXPECT_TRUE(read_all(c.head->db.get()) == c.history.state(c.history.writes.size()))
      << "the resumed head does not serve every write it took";
  // ... and every later acknowledged write comes after them on the replicas.
  ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 100, "b-"));
  expect_each_replica_alone_holds_every_acknowledged_write(c, seed * 5);
}

// A replica's applier crashes with its disk keeping only what it synced:
// it reopens at its durable cursor and the stream still holds everything
// from there (the head reclaimed only behind that cursor).
TEST(ReplicatedRocksDbApplier, ACrashedApplierResumesFromItsDurableCursor) {
  const uint64_t seed = test_seed(66);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Cluster c;
  ASSERT_NE(c.head->db, nullptr);
  Rng rng(seed);
  for (int round = 0; round < 8; ++round) {
    ASSERT_NO_FATAL_FAILURE(write_some(c, rng, 60, "r" + std::to_string(round) + "-"));
    const uint32_t r = static_cast<uint32_t>(rng.below(3));
    c.replicas[r]->crash(/*power_failure=*/true, seed + static_cast<uint64_t>(round));
    ASSERT_TRUE(c.replicas[r]->open().ok());
    if (round % 3 == 2) {
      ASSERT_TRUE(c.flush());
    }
  }
  expect_each_replica_alone_holds_every_acknowledged_write(c, seed * 7);
}

}  // namespace
}  // namespace ferry::rocks::testing
