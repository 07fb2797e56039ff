// Replicated RocksDB (§5.1) on the real library: RocksDB (Debian's
// librocksdb) with its WAL replicated through TxnClient::append into the WAL
// stream of three PM replicas on a deterministic manual engine, and each
// replica's applier bringing its own database up to date from it. Every
// replica, power-failed (seeded: FERRY_SEED), replays its log, and its own
// database reopened there holds every acknowledged write; the stream holds
// the head's WAL byte for byte after catch-up; unsynced writes are not
// claimed until a Sync; a memtable flush keeps the older writes on every
// replica; and with the replication bypassed the same check fails.
#include <cstring>

#include "ferry/common/checksum.h"
#include "rocksdb_test_util.h"

namespace ferry::rocks::testing {
namespace {

// `n` writes with sync = true: puts of new and existing keys, some deletes.
// Each is acknowledged (recorded durable in `h`) when Write returns OK;
// every so often the replicas' streams catch up.
void synced_writes(Head& head, Rng& rng, int n, History* h, const std::string& prefix = "key") {
  ::rocksdb::WriteOptions wo;
  wo.sync = true;
  int last_catch_up = 0;
  for (int i = 0; i < n; ++i) {
    const std::string key = key_name(prefix, rng.below(static_cast<uint64_t>(n)));
    if (!h->writes.empty() && rng.below(10) == 0) {
      ASSERT_TRUE(head.db->Delete(wo, key).ok());
      h->del(key);
    } else {
      const std::string v = random_value(rng);
      const ::rocksdb::Status s = head.db->Put(wo, key, v);
      ASSERT_TRUE(s.ok()) << s.ToString();
      h->put(key, v);
    }
    h->all_durable();
    // At least 100 records (over 19 KiB) between catch-ups: the 16 KiB log
    // ring fills in between, and the last record stays unexecuted.
    if (i - last_catch_up >= 100 && rng.below(8) == 0 && i + 1 < n) {
      last_catch_up = i;
      ASSERT_TRUE(head.fs->catch_up().ok());
    }
  }
}

// Replica r's machine power-fails (its PM region and its disk), restarts
// (replay, applier) and its directory is reopened with plain RocksDB.
PrefixCheck power_fail_and_check(Replica& replica, uint64_t seed, const History& h) {
  replica.crash(/*power_failure=*/true, seed);
  replica.chain.replica(replica.index).domain->power_fail(seed);
  const Status s = replica.recover();
  EXPECT_TRUE(s.ok()) << "replica " << replica.index << ": " << s.to_string();
  replica.close();
  std::string error;
  const auto state = reopen_plain(replica.dir, &error);
  EXPECT_TRUE(state.has_value()) << "reopening replica " << replica.index << ": " << error;
  return state ? check_prefix(*state, h, h.durable) : PrefixCheck{};
}

TEST(ReplicatedRocksDb, EveryPowerFailedReplicaReopensWithEveryAcknowledgedWrite) {
  const uint64_t seed = test_seed(20260101);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  History h;
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 400, &h));
  const auto c = head.fs->counters();
  EXPECT_GE(c.syncs, 400u);
  EXPECT_GT(c.executes_for_room, 0u) << "the 16 KiB ring never filled: ExecuteAndAdvance ran only on catch_up";
  EXPECT_EQ(c.eager_replications, 0u);
  EXPECT_EQ(c.wal_files, 1u);
  EXPECT_EQ(head.fs->replicated_bytes(), head.local_wal().size()) << "every synced byte is on the replicas";
  EXPECT_LT(chain.txn->head(), chain.txn->tail()) << "some records are appended and not executed";

  for (uint32_t r = 0; r < 3; ++r) {
    Replica replica(chain, r, tmp.sub("replica" + std::to_string(r)));
    const PrefixCheck pc = power_fail_and_check(replica, seed * 7 + r, h);
    EXPECT_TRUE(pc.ok) << "replica " << r << ": " << pc.describe();
    EXPECT_EQ(pc.prefix, h.writes.size()) << "replica " << r;
  }
  std::printf("%zu writes, %llu records, %llu WAL bytes, %llu executed for room, %llu by catch-up\n", h.writes.size(),
              static_cast<unsigned long long>(c.records), static_cast<unsigned long long>(c.bytes),
              static_cast<unsigned long long>(c.executes_for_room), static_cast<unsigned long long>(c.caught_up));
}

// The control: the same run with the replication bypassed. Writes succeed
// (the head's local WAL has them) but a power-failed replica holds no
// stream, and its database lacks every key -- the check above can fail.
TEST(ReplicatedRocksDb, WithTheReplicationBypassedAPowerFailedReplicaLacksTheWrites) {
  const uint64_t seed = test_seed(20260101);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  ReplicatedWalOptions o;
  o.replicate = false;
  Head head(chain, tmp.sub("head"), o);
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  History h;
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 100, &h));
  EXPECT_EQ(head.fs->counters().records, 0u);
  EXPECT_EQ(read_wal_stream(chain.region(1)).status().code(), Code::kNotFound);
  Replica replica(chain, 1, tmp.sub("replica1"));
  const PrefixCheck pc = power_fail_and_check(replica, seed, h);
  EXPECT_FALSE(pc.ok) << "without replication, acknowledged writes survived on a replica";
  EXPECT_EQ(pc.missing, h.state(h.writes.size()).size());
}

TEST(ReplicatedRocksDb, TheReplicasStreamHoldsTheHeadsWalAfterCatchUp) {
  const uint64_t seed = test_seed(77);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  History h;
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 150, &h));
  const std::vector<uint8_t> local = head.local_wal();
  ASSERT_FALSE(local.empty());
  // Before catch-up the last records are only in the replicas' logs.
  ASSERT_LT(chain.txn->head(), chain.txn->tail());
  auto before = read_wal_stream(chain.region(0));
  ASSERT_TRUE(before.ok()) << before.status().to_string();
  ASSERT_EQ(before->size(), 1u);
  EXPECT_LT((*before)[0].bytes.size(), local.size()) << "the stream was already current";

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
    auto stream = read_wal_stream(chain.region(r));
    ASSERT_TRUE(stream.ok()) << "replica " << r << ": " << stream.status().to_string();
    ASSERT_EQ(stream->size(), 1u) << "replica " << r;
    const WalImage& image = (*stream)[0];
    EXPECT_EQ(image.file_number, head.fs->wal_file_number()) << "replica " << r;
    EXPECT_EQ(image.first_offset, 0u) << "replica " << r;
    ASSERT_EQ(image.bytes.size(), local.size()) << "replica " << r;
    EXPECT_TRUE(image.bytes == local) << "replica " << r << "'s stream differs from the head's WAL";
  }
}

// Unsynced writes are not claimed: they wait at the head until a Sync. A
// power-failed replica then has every synced write and none of the later
// unsynced ones; after DB::SyncWAL it has them all.
TEST(ReplicatedRocksDb, WritesWithoutSyncAreNotClaimedUntilTheWalIsSynced) {
  const uint64_t seed = test_seed(5);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  History h;
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 60, &h));
  const uint64_t acknowledged = head.fs->replicated_bytes();
  const size_t synced_writes_count = h.writes.size();

  for (int i = 0; i < 10; ++i) {
    const std::string key = "unsynced" + std::to_string(i);
    const std::string v = random_value(rng);
    ASSERT_TRUE(head.db->Put(::rocksdb::WriteOptions(), key, v).ok());
    h.put(key, v);
  }
  EXPECT_EQ(head.fs->replicated_bytes(), acknowledged) << "an unsynced write was replicated";
  EXPECT_GT(head.local_wal().size(), acknowledged) << "the head's WAL has the unsynced writes";
  ASSERT_EQ(head.fs->counters().eager_replications, 0u);

  // Replica 2 as a power failure would leave its region (an image of it,
  // not failing it), with a database of its own that never applied anything.
  {
    hyperloop::ReplicaView v = chain.replica(2);
    std::vector<uint8_t> image = v.domain->image_after_power_fail(*v.region, seed);
    TempDir copy;
    auto a = recover_replica(image, copy.sub("db"), base_options());
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    const PrefixCheck pc = check_prefix(read_all((*a)->db()), h, h.durable);
    EXPECT_TRUE(pc.ok) << pc.describe();
    EXPECT_EQ(pc.prefix, synced_writes_count) << "unsynced writes reached the replicas without a Sync";
  }

  ASSERT_TRUE(head.db->SyncWAL().ok());
  h.all_durable();
  EXPECT_EQ(head.fs->replicated_bytes(), head.local_wal().size());
  Replica replica(chain, 2, tmp.sub("replica2"));
  const PrefixCheck pc = power_fail_and_check(replica, seed + 1, h);
  EXPECT_TRUE(pc.ok) << "after SyncWAL: " << pc.describe();
}

// A memtable flush switches RocksDB to a new WAL: the stream goes on with
// it, and the older writes stay on every replica (in its own database, or
// in the stream until its applier took them), though the head's copy of
// them is now an SST file the replicas never see.
TEST(ReplicatedRocksDb, AMemtableFlushKeepsTheOlderWritesOnEveryReplica) {
  const uint64_t seed = test_seed(9);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  History h;
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 60, &h, "before-"));
  const uint64_t first_wal = head.fs->wal_file_number();
  ASSERT_TRUE(head.db->Flush(::rocksdb::FlushOptions()).ok());
  EXPECT_GT(head.fs->wal_file_number(), first_wal);
  EXPECT_EQ(head.fs->replicated_bytes(), 0u) << "the new WAL starts empty";
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 60, &h, "after-"));
  EXPECT_EQ(head.fs->counters().wal_files, 2u);
  EXPECT_EQ(head.fs->replicated_bytes(), head.local_wal().size());
  ASSERT_TRUE(head.fs->catch_up().ok());
  auto stream = read_wal_stream(chain.region(0));
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  ASSERT_EQ(stream->size(), 2u) << "both WALs are in the stream";
  EXPECT_EQ((*stream)[0].file_number, first_wal);

  for (uint32_t r = 0; r < 3; ++r) {
    Replica replica(chain, r, tmp.sub("replica" + std::to_string(r)));
    const PrefixCheck pc = power_fail_and_check(replica, seed * 3 + r, h);
    EXPECT_TRUE(pc.ok) << "replica " << r << ": " << pc.describe();
  }
}

// A write larger than a record's worth (half the log ring) goes out as
// several records as soon as RocksDB appends it (eager_bytes), each a chunk
// of the stream; the replica's applier puts the record back together.
TEST(ReplicatedRocksDb, ALargeWriteIsReplicatedInSeveralRecords) {
  const uint64_t seed = test_seed(31);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  History h;
  ::rocksdb::WriteOptions wo;
  wo.sync = true;
  const uint64_t chunk = head.fs->max_chunk_bytes();
  for (int i = 0; i < 5; ++i) {
    std::string v(2 * chunk + 1 + rng.below(chunk), '\0');
    for (char& c : v) c = static_cast<char>(rng.next());
    const std::string key = "large" + std::to_string(i);
    const uint64_t records = head.fs->counters().records;
    ASSERT_TRUE(head.db->Put(wo, key, v).ok());
    EXPECT_GE(head.fs->counters().records - records, 3u) << "one large write, records of at most " << chunk << " bytes";
    h.put(key, v);
    h.all_durable();
  }
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 40, &h));
  EXPECT_GT(head.fs->counters().eager_replications, 0u);
  EXPECT_EQ(head.fs->replicated_bytes(), head.local_wal().size());
  for (uint32_t r = 0; r < 3; ++r) {
    Replica replica(chain, r, tmp.sub("replica" + std::to_string(r)));
    const PrefixCheck pc = power_fail_and_check(replica, seed * 5 + r, h);
    EXPECT_TRUE(pc.ok) << "replica " << r << ": " << pc.describe();
  }
}

// RocksDB recycling its WAL files (recycle_log_file_num) writes the
// recyclable record format (each record carries its log number, and a
// reused file's old bytes follow the new ones): the stream holds only what
// was appended, and the appliers parse the format as RocksDB's reader does.
TEST(ReplicatedRocksDb, RecycledWalFilesAreAppliedToo) {
  const uint64_t seed = test_seed(41);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FERRY_SEED)");
  Chain chain;
  TempDir tmp;
  ::rocksdb::Options o = base_options();
  o.recycle_log_file_num = 2;
  // RocksDB 7.8 turns recycling off under point-in-time recovery.
  o.wal_recovery_mode = ::rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords;
  Head head(chain, tmp.sub("head"), {}, nullptr, ::rocksdb::FileSystem::Default(), false, o);
  ASSERT_NE(head.db, nullptr);
  Rng rng(seed);
  History h;
  for (int round = 0; round < 5; ++round) {
    ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 40, &h, "r" + std::to_string(round) + "-"));
    ASSERT_TRUE(head.db->Flush(::rocksdb::FlushOptions()).ok());
  }
  ASSERT_NO_FATAL_FAILURE(synced_writes(head, rng, 40, &h, "last-"));
  EXPECT_GE(head.fs->counters().wal_files, 6u);
  const std::vector<uint8_t> local = head.local_wal();
  ASSERT_GT(local.size(), 11u);
  EXPECT_TRUE(local[6] >= 5 && local[6] <= 8) << "the WAL is not in the recyclable format: type " << int{local[6]};
  for (uint32_t r = 0; r < 3; ++r) {
    Replica replica(chain, r, tmp.sub("replica" + std::to_string(r)));
    const PrefixCheck pc = power_fail_and_check(replica, seed * 11 + r, h);
    EXPECT_TRUE(pc.ok) << "replica " << r << ": " << pc.describe();
  }
}

TEST(ReplicatedRocksDbFormat, WalNamesAndDamagedStreams) {
  EXPECT_EQ(wal_file_name(42), "000042.log");
  EXPECT_EQ(parse_wal_file_name("/x/y/000042.log"), 42u);
  EXPECT_EQ(parse_wal_file_name("1234567.log"), 1234567u);
  for (const char* other : {"LOG", "LOG.old.123", "MANIFEST-000005", "000010.sst", ".log", "12a.log", "000042.log.x"}) {
    EXPECT_FALSE(parse_wal_file_name(other).has_value()) << other;
  }

  Chain chain(/*log_bytes=*/4096, /*db_bytes=*/8192);
  EXPECT_EQ(read_wal_stream(chain.region(0)).status().code(), Code::kNotFound) << "nothing replicated yet";
  const std::vector<uint8_t> zeros(1024, 0);
  EXPECT_EQ(read_wal_stream(zeros).status().code(), Code::kDataLoss) << "no transaction layout";
  EXPECT_EQ(read_wal_stream(std::span<const uint8_t>(zeros).first(10)).status().code(), Code::kDataLoss);

  TempDir tmp;
  Head head(chain, tmp.sub("head"));
  ASSERT_NE(head.db, nullptr);
  ::rocksdb::WriteOptions wo;
  wo.sync = true;
  ASSERT_TRUE(head.db->Put(wo, "k", "v").ok());
  ASSERT_TRUE(head.fs->catch_up().ok());
  std::span<uint8_t> live = chain.region(0);
  std::vector<uint8_t> region(live.begin(), live.end());
  ASSERT_TRUE(read_wal_stream(region).ok());
  uint8_t* header = region.data() + chain.txn->db_offset();
  // Every bit of the header's fields and checksum, flipped one at a time.
  for (int bit = 0; bit < 56 * 8; ++bit) {
    header[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_EQ(read_wal_stream(region).status().code(), Code::kDataLoss) << "header bit " << bit;
    header[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  // Every bit of the first chunk (header and data), flipped one at a time.
  uint8_t* first = header + kWalStreamHeaderBytes;
  auto intact = read_wal_stream(region);
  ASSERT_TRUE(intact.ok());
  const uint64_t chunk_bytes = kWalChunkHeaderBytes + (*intact)[0].bytes.size();
  for (uint64_t bit = 0; bit < chunk_bytes * 8; ++bit) {
    if (bit / 8 >= 48 && bit / 8 < 64) continue;  // the chunk header's zero tail: not read
    first[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_EQ(read_wal_stream(region).status().code(), Code::kDataLoss) << "chunk bit " << bit;
    first[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  // A well-formed header whose end runs past the capacity.
  const uint64_t too_far = 16384;
  std::memcpy(header + 24, &too_far, 8);
  const uint64_t sum = checksum64(std::span<const uint8_t>(header, 48));
  std::memcpy(header + 48, &sum, 8);
  EXPECT_EQ(read_wal_stream(region).status().code(), Code::kDataLoss);

  // With no applier to give room back, a stream that fills fails the Sync
  // (NoSpace): the write is not acknowledged.
  const std::string big(9000, 'x');
  ::rocksdb::Status s;
  for (int i = 0; i < 10 && s.ok(); ++i) s = head.db->Put(wo, "big" + std::to_string(i), big);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
}

}  // namespace
}  // namespace ferry::rocks::testing
