// A backup that flushes closed buffers in the background (BackupOptions::
// flush_in_background, the paper's "close notifies the backup that the
// buffer ... can be flushed"): close replies once the buffer's close record
// is persisted; until the flusher has written it to storage the closed
// replica is served from the buffer (find, read), counts against the
// unflushed limit, survives a failed storage write and a power failure, and
// a restarted backup flushes it before serving anything. free() of a closed
// buffer whose flush is queued or under way leaves nothing behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/tailwind/backup.h"
#include "ferry/tailwind/format.h"
#include "ferry/tailwind/storage.h"
#include "tailwind/tailwind_test_util.h"

namespace ferry::tailwind {
namespace backup_flush_test {
namespace {

constexpr uint64_t kLog = 7;
constexpr size_t kBufferBytes = 64 << 10;

// A backup host: engine, PM domain, NIC and the backup on them.
struct Host {
  std::unique_ptr<nic::Engine> engine;
  std::unique_ptr<pm::PersistenceDomain> domain;
  std::unique_ptr<Backup> backup;

  Host(const BackupOptions& bo) {
    engine = std::make_unique<nic::Engine>();
    domain = std::make_unique<pm::PersistenceDomain>();
    nic::NicOptions no;
    no.name = bo.name;
    no.memory = domain.get();
    nic::Nic* nic = engine->add_nic(no).value();
    auto b = Backup::create(*nic, domain.get(), bo);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (b.ok()) backup = std::move(b).value();
  }
  ~Host() {
    backup.reset();
    engine.reset();
  }
};

BackupOptions options(const std::string& dir, bool background = true) {
  BackupOptions bo;
  bo.name = "backup";
  bo.buffer_bytes = kBufferBytes;
  bo.buffers = 4;
  bo.media = BufferMedia::kPm;
  bo.pm_path = dir + "/backup.pm";
  bo.storage_dir = dir + "/storage";
  bo.flush_in_background = background;
  return bo;
}

// What a primary would have replicated into an open buffer: a segment of a
// few objects, written here by the RPC baseline's path.
struct Written {
  std::vector<uint8_t> bytes;  // [0, offset)
  uint64_t offset = 0;
  uint32_t checksum = 0;
};

Written fill(Backup& backup, uint64_t segment_id, int objects = 20) {
  std::vector<uint8_t> memory(kBufferBytes, 0);
  auto writer = SegmentWriter::start(memory, kLog, segment_id).value();
  for (int i = 0; i < objects; ++i) {
    const std::string key = "key-" + std::to_string(segment_id) + "-" + std::to_string(i);
    const std::string value(100 + i, static_cast<char>('a' + i % 26));
    EXPECT_TRUE(writer
                    .append_object(1, static_cast<uint64_t>(i + 1), {reinterpret_cast<const uint8_t*>(key.data()), key.size()},
                                   {reinterpret_cast<const uint8_t*>(value.data()), value.size()})
                    .ok());
  }
  Written w;
  w.bytes.assign(writer.bytes().begin(), writer.bytes().end());
  w.offset = writer.offset();
  w.checksum = writer.checksum();
  EXPECT_TRUE(backup.replicate(kLog, segment_id, 0, w.bytes).ok());
  return w;
}

std::vector<uint8_t> stored(const std::string& storage_dir, uint64_t segment_id) {
  auto store = SegmentStore::open(storage_dir, StorageMode::kFdatasync).value();
  auto loaded = store->read(kLog, segment_id);
  if (!loaded.ok()) return {};
  return loaded->bytes;
}

class BackupFlushTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("flush"); }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(BackupFlushTest, ClosedBufferIsServedFromMemoryUntilItIsOnStorage) {
  const BackupOptions bo = options(dir_);
  Host host(bo);
  Backup& b = *host.backup;
  ASSERT_TRUE(b.open(kLog, 1, 1).ok());
  const Written w = fill(b, 1);
  ASSERT_TRUE(b.close(kLog, 1, w.offset, w.checksum).ok());
  // Whether or not the flusher has run yet, the closed replica is there,
  // exactly once, whole and verified.
  auto replicas = b.find(kLog);
  ASSERT_EQ(replicas.size(), 1u);
  EXPECT_TRUE(replicas[0].closed);
  EXPECT_FALSE(replicas[0].corrupted);
  EXPECT_EQ(replicas[0].valid_bytes, w.offset);
  EXPECT_EQ(replicas[0].checksum, w.checksum);
  auto read = b.read(kLog, 1, /*closed=*/true, 0, kBufferBytes);
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_EQ(*read, w.bytes);
  b.wait_flushed();
  const BackupCounters c = b.counters();
  EXPECT_EQ(c.closes, 1u);
  EXPECT_EQ(c.flushes, 1u);
  EXPECT_EQ(c.flush_failures, 0u);
  EXPECT_EQ(c.closed_unflushed, 0u);
  EXPECT_EQ(stored(bo.storage_dir, 1), w.bytes) << "the flusher did not write the closed buffer to storage";
  replicas = b.find(kLog);
  ASSERT_EQ(replicas.size(), 1u);
  EXPECT_TRUE(replicas[0].closed);
  EXPECT_FALSE(replicas[0].corrupted);
  // Its buffer went back to the pool: every buffer can be opened again.
  for (uint64_t seg = 2; seg < 2 + bo.buffers; ++seg) {
    EXPECT_TRUE(b.open(kLog, seg, 1).ok()) << "segment " << seg;
  }
}

TEST_F(BackupFlushTest, InlineFlushIsOnStorageWhenCloseReturns) {
  const BackupOptions bo = options(dir_, /*background=*/false);
  Host host(bo);
  Backup& b = *host.backup;
  ASSERT_TRUE(b.open(kLog, 1, 1).ok());
  const Written w = fill(b, 1);
  ASSERT_TRUE(b.close(kLog, 1, w.offset, w.checksum).ok());
  EXPECT_EQ(stored(bo.storage_dir, 1), w.bytes);
  EXPECT_EQ(b.counters().flushes, 1u);
}

TEST_F(BackupFlushTest, UnflushedClosedBuffersCountAgainstTheLimitAndSurviveAFailedWrite) {
  BackupOptions bo = options(dir_);
  // 1 MB/s for 132 ms: two 64 KB buffers' worth of backup power.
  bo.storage_write_mb_per_s = 1;
  bo.power_holdup_ms = 132;
  Host host(bo);
  Backup& b = *host.backup;
  ASSERT_EQ(b.counters().max_open_buffers, 2u);
  // The storage goes away: the flush of segment 1 fails.
  std::filesystem::remove_all(bo.storage_dir);
  ASSERT_TRUE(b.open(kLog, 1, 1).ok());
  const Written w = fill(b, 1);
  ASSERT_TRUE(b.close(kLog, 1, w.offset, w.checksum).ok()) << "close must not wait for the storage write";
  b.wait_flushed();
  BackupCounters c = b.counters();
  EXPECT_EQ(c.flush_failures, 1u);
  EXPECT_EQ(c.closed_unflushed, 1u);
  ASSERT_TRUE(b.open(kLog, 2, 1).ok());
  auto refused = b.open(kLog, 3, 1);
  EXPECT_EQ(refused.status().code(), Code::kResourceExhausted)
      << "a closed buffer not yet on storage is still unflushed: backup power must cover it";
  // It is still served, whole, from memory.
  auto replicas = b.find(kLog);
  ASSERT_EQ(replicas.size(), 2u);
  EXPECT_TRUE(replicas[0].closed);
  EXPECT_FALSE(replicas[0].corrupted);
  EXPECT_EQ(replicas[0].valid_bytes, w.offset);
  EXPECT_FALSE(replicas[1].closed);
  auto read = b.read(kLog, 1, /*closed=*/true, 0, kBufferBytes);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, w.bytes);
  // Freed, it no longer holds a buffer.
  ASSERT_TRUE(b.free(kLog, 1).ok());
  EXPECT_TRUE(b.open(kLog, 3, 1).ok());
  c = b.counters();
  EXPECT_EQ(c.closed_unflushed, 0u);
}

TEST_F(BackupFlushTest, RestartAfterPowerFailureFlushesAClosedBufferBeforeServing) {
  const BackupOptions bo = options(dir_);
  Written w;
  {
    Host host(bo);
    Backup& b = *host.backup;
    std::filesystem::remove_all(bo.storage_dir);  // the flush cannot happen before the failure
    ASSERT_TRUE(b.open(kLog, 1, 1).ok());
    w = fill(b, 1);
    ASSERT_TRUE(b.close(kLog, 1, w.offset, w.checksum).ok());
    b.wait_flushed();
    ASSERT_EQ(b.counters().flush_failures, 1u);
    host.domain->power_fail(1);
  }
  BackupOptions again = bo;
  again.recover = true;
  Host host(again);  // the storage directory is back (SegmentStore creates it)
  Backup& b = *host.backup;
  EXPECT_EQ(b.counters().flushes, 1u) << "the restart must flush the closed buffer";
  EXPECT_EQ(stored(bo.storage_dir, 1), w.bytes);
  auto replicas = b.find(kLog);
  ASSERT_EQ(replicas.size(), 1u);
  EXPECT_TRUE(replicas[0].closed);
  EXPECT_FALSE(replicas[0].corrupted);
  EXPECT_EQ(replicas[0].valid_bytes, w.offset);
  EXPECT_EQ(replicas[0].checksum, w.checksum);
  EXPECT_EQ(b.counters().closed_unflushed, 0u);
}

TEST_F(BackupFlushTest, FreeOfAClosedBufferLeavesNothingWhateverTheFlusherDid) {
  const BackupOptions bo = options(dir_);
  Host host(bo);
  Backup& b = *host.backup;
  for (uint64_t seg = 1; seg <= 20; ++seg) {
    ASSERT_TRUE(b.open(kLog, seg, 1).ok());
    const Written w = fill(b, seg, 5);
    ASSERT_TRUE(b.close(kLog, seg, w.offset, w.checksum).ok());
    ASSERT_TRUE(b.free(kLog, seg).ok());  // queued, flushing, zeroing or done
  }
  b.wait_flushed();
  EXPECT_TRUE(b.find(kLog).empty());
  for (uint64_t seg = 1; seg <= 20; ++seg) EXPECT_TRUE(stored(bo.storage_dir, seg).empty()) << "segment " << seg;
  EXPECT_EQ(b.counters().closed_unflushed, 0u);
}

}  // namespace
}  // namespace backup_flush_test
}  // namespace ferry::tailwind
