// The rules that keep an acknowledged append from being lost, resurrected or
// seen out of order when backups and primaries fail (issue 26), one test per
// rule, each driving the failure from its side:
//
//   - a freed segment is never used by a recovery, whatever state a copy of
//     it is found in (a closed copy on a backup declared dead earlier);
//   - recovery knows every segment the log holds (the coordinator's list)
//     and fails loudly, instead of finishing without it, when a segment has
//     no reachable replica;
//   - a fenced log gets nothing more done on a backup, in either mode, and
//     the fence is permanent: no new connection of that log is accepted;
//   - a replica the primary drops from a backup that is still up (or comes
//     back) is freed there, not left holding a buffer forever.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include "tailwind/tailwind_test_util.h"

namespace ferry::tailwind {
namespace failure_rules_test {

using testing::BackupHost;
using testing::Cluster;
using testing::ClusterOptions;

constexpr uint64_t kLog = 7;
constexpr uint64_t kFreed = std::numeric_limits<uint64_t>::max();

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

LogOptions log_options(Replication mode, size_t segment_bytes) {
  LogOptions o;
  o.log_id = kLog;
  o.segment_bytes = segment_bytes;
  o.replicas = 3;
  o.replication = mode;
  return o;
}

// A segment as the primary builds it: its header and `objects` objects.
struct BuiltSegment {
  std::vector<uint8_t> bytes;
  uint32_t checksum = 0;
};
BuiltSegment build_segment(uint64_t segment_id, const std::vector<std::string>& keys) {
  std::vector<uint8_t> memory(64 << 10, 0);
  auto writer = SegmentWriter::start(memory, kLog, segment_id).value();
  uint64_t version = segment_id * 1000;
  for (const auto& key : keys) {
    EXPECT_TRUE(writer.append_object(1, ++version, bytes_of(key), bytes_of("value")).ok());
  }
  memory.resize(writer.offset());
  return {memory, writer.checksum()};
}

// Places a replica of `seg` on `backup` through its control operations (the
// RPC baseline's path: the bytes copied by the backup), closed or left open.
void place(Backup& backup, uint64_t segment_id, uint64_t version, const BuiltSegment& seg, bool close) {
  ASSERT_TRUE(backup.open(kLog, segment_id, version).ok());
  ASSERT_TRUE(backup.replicate(kLog, segment_id, 0, seg.bytes).ok());
  if (close) {
    ASSERT_TRUE(backup.close(kLog, segment_id, seg.bytes.size(), seg.checksum).ok());
  }
}

// Recovers log kLog against the coordinator's record from every backup of
// `cluster`, through the control path (as a recovery master reads them).
Result<std::vector<RecoveredSegment>> recover_from_all(Cluster& cluster,
                                                       const std::optional<std::map<uint64_t, uint64_t>>& coordinator,
                                                       RecoveryReport* report = nullptr) {
  auto links = cluster.link_all(kLog, /*data_path=*/false);
  return recover_log(kLog, links, coordinator, report);
}

// Files of log kLog in a backup's storage directory.
size_t stored_files(Cluster& cluster, size_t backup) {
  const std::string dir = cluster.dir() + "/" + cluster.host(backup).backup->options().name + "-storage";
  size_t n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind("log-" + std::to_string(kLog) + "-", 0) == 0) ++n;
  }
  return n;
}

// ---- freed segments ----

// The cleaner freed segment 1 on the replicas the primary knew of and the
// coordinator recorded it as freed; backup 0, declared dead before that,
// still holds a closed copy. A recovery that meets that copy must not use
// it: replaying it would bring back objects whose tombstones the cleaner
// dropped with the segment.
TEST(TailwindRecovery, AFreedSegmentNeverComesBackFromADeadBackupsClosedCopy) {
  Cluster cluster;
  const BuiltSegment freed = build_segment(1, {"ghost-a", "ghost-b"});
  const BuiltSegment head = build_segment(2, {"alive"});
  for (size_t b : {0, 1, 2}) place(*cluster.host(b).backup, 1, 1, freed, /*close=*/true);
  for (size_t b : {1, 2}) ASSERT_TRUE(cluster.host(b).backup->free(kLog, 1).ok());  // the cleaner
  for (size_t b : {1, 2, 3}) place(*cluster.host(b).backup, 2, 1, head, /*close=*/false);
  const std::map<uint64_t, uint64_t> coordinator{{1, kFreed}, {2, 1}};
  RecoveryReport report;
  auto segments = recover_from_all(cluster, coordinator, &report);
  ASSERT_TRUE(segments.ok()) << segments.status().to_string();
  for (const auto& s : *segments) {
    EXPECT_NE(s.segment_id, 1u) << "the freed segment came back from " << s.from;
  }
  ASSERT_EQ(segments->size(), 1u);
  EXPECT_EQ((*segments)[0].segment_id, 2u);
  EXPECT_EQ(report.stale_ignored, 1u) << "the freed copy must be counted as ignored";
}

// The primary died with its last append on one backup only: the recovery
// takes the longest valid prefix (the acknowledged appends are in every
// one) and counts the shorter open replicas as lagging -- what tells a
// campaign that its crashes tear appends across replicas at all.
TEST(TailwindRecovery, AnAppendOnSomeReplicasOnlyIsRecoveredFromTheLongestAndTheOthersCountAsLagging) {
  Cluster cluster;
  const BuiltSegment longer = build_segment(1, {"acked", "in-flight"});
  const BuiltSegment shorter = build_segment(1, {"acked"});
  ASSERT_LT(shorter.bytes.size(), longer.bytes.size());
  ASSERT_TRUE(std::equal(shorter.bytes.begin(), shorter.bytes.end(), longer.bytes.begin()));
  place(*cluster.host(0).backup, 1, 1, longer, /*close=*/false);
  for (size_t b : {1, 2}) place(*cluster.host(b).backup, 1, 1, shorter, /*close=*/false);
  const std::map<uint64_t, uint64_t> coordinator{{1, 1}};
  RecoveryReport report;
  auto segments = recover_from_all(cluster, coordinator, &report);
  ASSERT_TRUE(segments.ok()) << segments.status().to_string();
  ASSERT_EQ(segments->size(), 1u);
  EXPECT_EQ((*segments)[0].bytes, longer.bytes) << "recovered from " << (*segments)[0].from;
  EXPECT_EQ(report.lagging_open, 2u);
  EXPECT_EQ(report.torn_open, 0u);
}

// ---- completeness ----

// The coordinator lists every segment the log opened (before its first
// append). A recovery whose reachable backups hold no replica of a listed
// segment must fail, naming it, instead of finishing without its objects.
TEST(TailwindRecovery, RecoveryFailsLoudlyWhenAListedSegmentHasNoReachableReplica) {
  Cluster cluster;
  std::map<uint64_t, uint64_t> coordinator;
  auto links = cluster.link_all(kLog, /*data_path=*/true);
  LogOptions o = log_options(Replication::kTailwind, 64 << 10);
  o.replicas = 2;
  o.on_version = [&](uint64_t segment, uint64_t version) {
    uint64_t& v = coordinator[segment];
    v = std::max(v, version);
    return ok_status();
  };
  std::vector<size_t> holders;
  uint64_t first_segment = 0;
  {
    auto log = ReplicatedLog::create(cluster.primary_nic(), links, o).value();
    for (int i = 0; log->segment_ids().size() < 3; ++i) {
      ASSERT_TRUE(log->append_object(1, static_cast<uint64_t>(i + 1), bytes_of("key-" + std::to_string(i)),
                                     bytes_of(std::string(500, 'v')))
                      .ok());
    }
    first_segment = log->segment_ids().front();
    holders = log->replicas_of(first_segment);
    ASSERT_EQ(holders.size(), 2u);
    // The primary dies.
  }
  EXPECT_EQ(coordinator.count(first_segment), 1u) << "the coordinator never heard of segment " << first_segment;
  // The two backups holding the first segment cannot be reached.
  std::vector<BackupLink*> reachable;
  auto recovery_links = cluster.link_all(kLog, /*data_path=*/false);
  for (size_t b = 0; b < recovery_links.size(); ++b) {
    if (std::find(holders.begin(), holders.end(), b) == holders.end()) reachable.push_back(recovery_links[b]);
  }
  RecoveryReport report;
  auto segments = recover_log(kLog, reachable, coordinator, &report);
  ASSERT_FALSE(segments.ok()) << "recovery finished without segment " << first_segment << " ("
                              << segments->size() << " segments recovered)";
  EXPECT_EQ(segments.status().code(), Code::kUnavailable) << segments.status().to_string();
  EXPECT_TRUE(std::regex_search(segments.status().message(),
                                std::regex("segments? ([0-9]+, )*" + std::to_string(first_segment) + "\\b")))
      << "the error does not name segment " << first_segment << ": " << segments.status().to_string();
  // Once the backups answer again, the same recovery succeeds.
  auto again = recover_log(kLog, recovery_links, coordinator, &report);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->size(), 3u);
}

// A segment the coordinator never heard of was never appended to: its
// primary failed while opening it (its report had not landed), and that
// old primary may free its replicas while a recovery reads them. Recovery
// ignores it rather than fail on it.
TEST(TailwindRecovery, ASegmentTheCoordinatorNeverListedIsIgnored) {
  Cluster cluster;
  const BuiltSegment listed = build_segment(1, {"kept"});
  const BuiltSegment unlisted = build_segment(2, {});
  for (size_t b : {0, 1}) place(*cluster.host(b).backup, 1, 1, listed, /*close=*/true);
  for (size_t b : {2, 3}) place(*cluster.host(b).backup, 2, 1, unlisted, /*close=*/false);
  ASSERT_TRUE(cluster.host(2).backup->free(kLog, 2).ok());  // the old primary gives up on the open
  const std::map<uint64_t, uint64_t> coordinator{{1, 1}};
  RecoveryReport report;
  auto segments = recover_from_all(cluster, coordinator, &report);
  ASSERT_TRUE(segments.ok()) << segments.status().to_string();
  ASSERT_EQ(segments->size(), 1u);
  EXPECT_EQ((*segments)[0].segment_id, 1u);
  EXPECT_EQ(report.unlisted_ignored, 1u);
}

// The same when the coordinator has no record of the log at all: its
// primary was cut off before its first report, so nothing was ever
// acknowledged, and the segment it keeps opening and freeing (the free may
// land between the recovery's find and its read) is not needed. An empty
// record is a record, not "no coordinator" (std::nullopt).
TEST(TailwindRecovery, AnEmptyRecordNeedsNoSegmentEvenOneFoundOpen) {
  Cluster cluster;
  const BuiltSegment unlisted = build_segment(1, {"never-acknowledged"});
  for (size_t b : {0, 1}) place(*cluster.host(b).backup, 1, 1, unlisted, /*close=*/false);
  RecoveryReport report;
  auto segments = recover_from_all(cluster, std::map<uint64_t, uint64_t>{}, &report);
  ASSERT_TRUE(segments.ok()) << segments.status().to_string();
  EXPECT_TRUE(segments->empty());
  EXPECT_EQ(report.unlisted_ignored, 2u);
  // Without a coordinator (tests), every segment found is used.
  auto unchecked = recover_from_all(cluster, std::nullopt);
  ASSERT_TRUE(unchecked.ok()) << unchecked.status().to_string();
  EXPECT_EQ(unchecked->size(), 1u);
}

// ---- fencing ----

class TailwindFencing : public ::testing::TestWithParam<Replication> {};

// Recovery fenced the log (a partitioned old primary is still running):
// nothing the old primary sends afterwards may be acknowledged, or a PUT
// would be acknowledged after its tablets were rebuilt without it.
TEST_P(TailwindFencing, AFencedLogGetsNoAppendAcknowledgedInEitherMode) {
  Cluster cluster;
  auto links = cluster.link_all(kLog, GetParam() == Replication::kTailwind);
  auto log = ReplicatedLog::create(cluster.primary_nic(), links, log_options(GetParam(), 1 << 20)).value();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(log->append_object(1, 1, bytes_of("key-" + std::to_string(i)), bytes_of("before")).ok());
  }
  auto recovery_links = cluster.link_all(kLog, /*data_path=*/false);
  auto recovered = recover_log(kLog, recovery_links, {});
  ASSERT_TRUE(recovered.ok()) << recovered.status().to_string();
  // The old primary keeps going.
  auto late = log->append_object(1, 1, bytes_of("late"), bytes_of("after the recovery read the log"));
  EXPECT_FALSE(late.ok()) << "an append was acknowledged after its log was recovered elsewhere";
  // Every control operation of the fenced log is refused by every backup.
  for (size_t b = 0; b < cluster.size(); ++b) {
    Backup& backup = *cluster.host(b).backup;
    EXPECT_EQ(backup.open(kLog, 99, 1).status().code(), Code::kPermissionDenied) << backup.options().name;
    for (uint64_t seg : log->segment_ids()) {
      EXPECT_FALSE(backup.replicate(kLog, seg, 0, bytes_of("x")).ok()) << backup.options().name;
      EXPECT_FALSE(backup.set_version(kLog, seg, 9).ok()) << backup.options().name;
      EXPECT_FALSE(backup.close(kLog, seg, 0, 1).ok()) << backup.options().name;
    }
  }
}

// A fence is for good: once a log is fenced, a new data-path connection of
// that log is refused, even after its buffers' registrations are gone, so
// an old primary cannot reconnect and write again.
TEST_P(TailwindFencing, AFenceIsPermanentANewConnectionOfAFencedLogIsRefused) {
  Cluster cluster;
  auto links = cluster.link_all(kLog, /*data_path=*/true);
  auto log = ReplicatedLog::create(cluster.primary_nic(), links, log_options(GetParam(), 1 << 20)).value();
  ASSERT_TRUE(log->append_object(1, 1, bytes_of("key"), bytes_of("value")).ok());
  for (size_t b = 0; b < cluster.size(); ++b) cluster.host(b).backup->fence(kLog);
  for (size_t b = 0; b < cluster.size(); ++b) {
    BackupHost& h = cluster.host(b);
    auto again = BackupLink::connect(cluster.engine(), cluster.primary_nic(), *h.backup, *h.server, kLog,
                                     /*data_path=*/true);
    EXPECT_FALSE(again.ok()) << h.backup->options().name << " accepted a new connection of a fenced log";
    if (!again.ok()) {
      EXPECT_EQ(again.status().code(), Code::kPermissionDenied) << again.status().to_string();
    }
  }
  // Other logs are not affected.
  auto other = BackupLink::connect(cluster.engine(), cluster.primary_nic(), *cluster.host(0).backup,
                                   *cluster.host(0).server, kLog + 1, /*data_path=*/true);
  EXPECT_TRUE(other.ok()) << other.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Modes, TailwindFencing, ::testing::Values(Replication::kTailwind, Replication::kRpc),
                         [](const auto& info) { return std::string(replication_name(info.param)); });

// ---- replicas left behind ----

class TailwindBackupFailure : public ::testing::TestWithParam<Replication> {};

// The coordinator declares a backup failed while it is still up (a false
// suspicion, or it came back): the primary re-creates its replicas
// elsewhere and frees what it left there, or they would hold buffers
// against that backup's unflushed limit (and copies on its storage) forever.
TEST_P(TailwindBackupFailure, AReplicaDroppedFromABackupThatIsStillUpIsFreedThere) {
  Cluster cluster;
  auto links = cluster.link_all(kLog, GetParam() == Replication::kTailwind);
  auto log = ReplicatedLog::create(cluster.primary_nic(), links, log_options(GetParam(), 64 << 10)).value();
  int next = 0;
  auto append = [&] {
    return log->append_object(1, 1, bytes_of("key-" + std::to_string(next++)), bytes_of(std::string(400, 'v')));
  };
  while (log->segment_ids().size() < 2) ASSERT_TRUE(append().ok());
  const uint64_t open = log->open_segment_id();
  const size_t dropped = log->replicas_of(open).front();
  ASSERT_EQ(cluster.host(dropped).backup->counters().open_buffers, 1u);
  ASSERT_TRUE(log->backup_failed(dropped).ok());
  // The log keeps working; the dropped backup must end up holding nothing of it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto holds_nothing = [&] {
    const BackupCounters c = cluster.host(dropped).backup->counters();
    return c.open_buffers == 0 && c.closed_unflushed == 0 && stored_files(cluster, dropped) == 0;
  };
  while (!holds_nothing() && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(append().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const BackupCounters c = cluster.host(dropped).backup->counters();
  EXPECT_EQ(c.open_buffers, 0u) << "a dropped open replica still holds a buffer";
  EXPECT_EQ(c.closed_unflushed, 0u);
  EXPECT_EQ(stored_files(cluster, dropped), 0u) << "a dropped closed replica is still on storage";
  for (uint64_t seg : log->segment_ids()) {
    const auto now = log->replicas_of(seg);
    EXPECT_EQ(std::count(now.begin(), now.end(), dropped), 0) << "segment " << seg;
  }
}

// A backup whose CPU stalls (RPC mode: it takes requests and answers none)
// is declared failed after replication_timeout_ms and replaced. When it
// answers again, the replica the primary dropped there is freed: the
// backup's buffer is not lost to it for good. (The log keeps appending, so
// segments roll.)
TEST(TailwindBackupFailureRpc, ABackupBrieflyUnreachableGetsItsDroppedReplicaFreedWhenItAnswersAgain) {
  ClusterOptions co;
  co.pumped_workers = true;
  Cluster cluster(co);
  auto links = cluster.link_all(kLog, /*data_path=*/false);
  LogOptions lo = log_options(Replication::kRpc, 64 << 10);
  lo.replication_timeout_ms = 200;
  auto log = ReplicatedLog::create(cluster.primary_nic(), links, lo).value();
  ASSERT_TRUE(log->append_object(1, 1, bytes_of("first"), bytes_of("opens the segment")).ok());
  const size_t stalled = log->replicas_of(log->open_segment_id()).front();
  cluster.silence_backup(stalled);
  ASSERT_TRUE(log->append_object(1, 1, bytes_of("second"), bytes_of("one backup stalls")).ok());
  ASSERT_GE(log->counters().replication_timeouts, 1u);
  cluster.resume_backup();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int i = 0;
  while (cluster.host(stalled).backup->counters().open_buffers != 0 && std::chrono::steady_clock::now() < deadline) {
    const std::string key = "more-" + std::to_string(i++);
    ASSERT_TRUE(log->append_object(1, 1, bytes_of(key), bytes_of(std::string(400, 'v'))).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(cluster.host(stalled).backup->counters().open_buffers, 0u)
      << "the replica dropped from a briefly stalled backup still holds its buffer";
}

// A backup declared failed that answers again (it was only unreachable)
// is taken back: what the log left there is freed, its data path is
// connected anew, and it takes the next replica the log needs -- without
// it, a second failure would leave too few backups for r replicas.
TEST_P(TailwindBackupFailure, ABackupDeclaredFailedAndBackTakesReplicasAgain) {
  Cluster cluster;
  auto links = cluster.link_all(kLog, GetParam() == Replication::kTailwind);
  auto log = ReplicatedLog::create(cluster.primary_nic(), links, log_options(GetParam(), 64 << 10)).value();
  std::map<std::string, std::string> expected;
  int next = 0;
  auto append = [&] {
    const std::string key = "key-" + std::to_string(next++);
    const std::string value(300, static_cast<char>('a' + next % 26));
    expected[key] = value;
    return log->append_object(1, 1, bytes_of(key), bytes_of(value));
  };
  while (log->segment_ids().size() < 2) ASSERT_TRUE(append().ok());
  const size_t away = log->replicas_of(log->open_segment_id()).front();
  ASSERT_TRUE(log->backup_failed(away).ok());
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(append().ok());
  ASSERT_TRUE(log->backup_returned(away).ok());
  EXPECT_EQ(cluster.host(away).backup->counters().open_buffers, 0u) << "what the log left there was not freed";
  EXPECT_EQ(stored_files(cluster, away), 0u);
  // Another backup fails: the one that came back is the only one left to take its replicas.
  const auto now = log->replicas_of(log->open_segment_id());
  ASSERT_EQ(std::count(now.begin(), now.end(), away), 0);
  ASSERT_TRUE(log->backup_failed(now.front()).ok()) << "the backup that came back did not take the replicas";
  const auto after = log->replicas_of(log->open_segment_id());
  EXPECT_EQ(std::count(after.begin(), after.end(), away), 1);
  while (log->segment_ids().size() < 4) ASSERT_TRUE(append().ok());
  log.reset();  // the primary fails: everything acknowledged is recovered
  auto recovery_links = cluster.link_all(kLog, /*data_path=*/false);
  auto segments = recover_log(kLog, recovery_links, {});
  ASSERT_TRUE(segments.ok()) << segments.status().to_string();
  std::map<std::string, std::string> recovered;
  for (const auto& seg : *segments) {
    ASSERT_TRUE(for_each_entry(seg.bytes, [&](const Entry& e) {
                  if (e.type == EntryType::kObject) {
                    recovered[std::string(e.key.begin(), e.key.end())] = std::string(e.value.begin(), e.value.end());
                  }
                }).ok());
  }
  EXPECT_EQ(recovered, expected);
}

// A new replica's copy has the same deadline as an append: a backup that
// answered the open and then stops answering (RPC mode: its CPU stalls)
// is declared failed after replication_timeout_ms, not waited for forever
// with the log's lock held (which would hang every append, and the
// coordinator telling the log of another failure).
TEST(TailwindBackupFailureRpc, ABackupThatStallsDuringAReplicasCopyIsGivenUpOn) {
  ClusterOptions co;
  co.pumped_workers = true;
  Cluster cluster(co);
  auto links = cluster.link_all(kLog, /*data_path=*/false);
  LogOptions lo = log_options(Replication::kRpc, 1 << 20);
  lo.replication_timeout_ms = 200;
  auto log = ReplicatedLog::create(cluster.primary_nic(), links, lo).value();
  ASSERT_TRUE(log->append_object(1, 1, bytes_of("first"), bytes_of("opens the segment")).ok());
  const auto holders = log->replicas_of(log->open_segment_id());
  size_t spare = 0;
  while (std::find(holders.begin(), holders.end(), spare) != holders.end()) ++spare;
  // The spare backup stalls right after it opened the new replica.
  cluster.silence_after_open(spare);
  auto replaced = std::async(std::launch::async, [&] { return log->backup_failed(holders.front()); });
  const bool returned = replaced.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "the log waited for the stalled backup's copy without end";
  cluster.resume_backup();  // lets a waiting log finish, so the test can end
  const Status st = replaced.get();
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.to_string() << ": no backup is left to take the replica";
  const auto now = log->replicas_of(log->open_segment_id());
  EXPECT_EQ(std::count(now.begin(), now.end(), spare), 0) << "the stalled backup counts as a replica";
}

// ---- replica count and segment rolls ----

// Two backups of a log with r = 3 fail and only one can be replaced (four
// backups in all): the log cannot keep three replicas, so no append may be
// acknowledged -- not the one that found out, nor any later one.
TEST_P(TailwindBackupFailure, NoAppendIsAcknowledgedWithFewerThanRReplicas) {
  Cluster cluster;
  auto links = cluster.link_all(kLog, GetParam() == Replication::kTailwind);
  auto log = ReplicatedLog::create(cluster.primary_nic(), links, log_options(GetParam(), 1 << 20)).value();
  ASSERT_TRUE(log->append_object(1, 1, bytes_of("first"), bytes_of("v")).ok());
  const uint64_t seg = log->open_segment_id();
  const auto holders = log->replicas_of(seg);
  ASSERT_TRUE(log->backup_failed(holders[0]).ok()) << "the fourth backup takes its place";
  EXPECT_FALSE(log->backup_failed(holders[1]).ok()) << "no backup is left to take the second one's place";
  for (int i = 0; i < 3; ++i) {
    auto late = log->append_object(1, 1, bytes_of("late-" + std::to_string(i)), bytes_of("v"));
    EXPECT_FALSE(late.ok()) << "append " << i << " was acknowledged with " << log->replicas_of(seg).size()
                            << " replicas of 3";
    if (!late.ok()) {
      EXPECT_EQ(late.status().code(), Code::kUnavailable) << late.status().to_string();
    }
  }
}

// Many threads append at once to a log whose segments fill quickly. A
// roll waits for the segment's last WRITEs without the log's lock; an
// appender that comes in meanwhile must not roll the same segment again:
// its second close finds the buffers closed, the backups would be declared
// failed, and replicas dropped for nothing.
TEST_P(TailwindBackupFailure, ConcurrentAppendersRollEachSegmentOnce) {
  Cluster cluster;
  auto links = cluster.link_all(kLog, GetParam() == Replication::kTailwind);
  auto log = ReplicatedLog::create(cluster.primary_nic(), links, log_options(GetParam(), 64 << 10)).value();
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 150; ++i) {
        const std::string key = "t" + std::to_string(t) + "-" + std::to_string(i);
        if (!log->append_object(1, 1, bytes_of(key), bytes_of(std::string(1500 + 37 * (i % 20), 'v'))).ok()) ++failed;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  const LogCounters c = log->counters();
  EXPECT_GT(c.segments_closed, 10u) << "the test must roll many segments";
  EXPECT_EQ(c.backup_failures, 0u) << "a healthy backup was declared failed";
  uint64_t closes = 0;
  for (size_t b = 0; b < cluster.size(); ++b) closes += cluster.host(b).backup->counters().closes;
  EXPECT_EQ(closes, 3 * c.segments_closed);
  for (uint64_t seg : log->segment_ids()) EXPECT_EQ(log->replicas_of(seg).size(), 3u) << "segment " << seg;
}

INSTANTIATE_TEST_SUITE_P(Modes, TailwindBackupFailure, ::testing::Values(Replication::kTailwind, Replication::kRpc),
                         [](const auto& info) { return std::string(replication_name(info.param)); });

}  // namespace failure_rules_test
}  // namespace ferry::tailwind
