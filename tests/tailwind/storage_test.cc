// SegmentStore: closed Tailwind buffers on a backup's disk. Round trips in
// both storage modes (kDirect where a disk filesystem accepts O_DIRECT),
// replacement, listing, removal, the file layout as storage.h documents it,
// and damaged files: every header byte flipped, data flipped, truncation,
// garbage and leftover temporaries under segment names, random mutations.
// A damaged file must read as kDataLoss (or, for list(), be skipped and
// counted) and never crash; run under ASan/UBSan too.
//
// Randomized tests print their seed; FERRY_SEED=<n> reruns one.
#include "ferry/tailwind/storage.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ferry/common/checksum.h"
#include "test_seed.h"

namespace ferry::tailwind {

// For GoogleTest's parameter printing (found by ADL, so outside the
// anonymous namespace; static keeps it in this file).
[[maybe_unused]] static void PrintTo(StorageMode mode, std::ostream* os) { *os << storage_mode_name(mode); }

// A named namespace around the file-local one: the test executable is a
// unity build, and sibling files have their own round_up, read_file, ...
namespace storage_test {
namespace {

// storage.h, "File format".
constexpr size_t kHeaderBytes = 64;
constexpr size_t kDirectAlignmentBytes = 4096;

uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

bool is_memory_filesystem(const std::string& path) {
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) != 0) return false;
  return fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC;
}

// A fresh directory under `base`, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& base) {
    std::string pattern = base + "/ferry-storage-test-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string default_base() {
  const char* env = std::getenv("TMPDIR");
  return env != nullptr && env[0] != '\0' ? env : "/tmp";
}

// The first candidate directory on a disk filesystem where a kDirect store
// opens; what statfs said about each candidate goes to *why otherwise.
std::optional<std::string> find_direct_base(std::string* why) {
  std::vector<std::string> candidates = {"/var/tmp", "/tmp", "/work"};
  if (const char* env = std::getenv("TMPDIR"); env != nullptr && env[0] != '\0') {
    candidates.insert(candidates.begin(), env);
  }
  std::error_code ec;
  candidates.push_back(std::filesystem::current_path(ec).string());
  for (const std::string& base : candidates) {
    struct statfs fs;
    if (base.empty() || ::statfs(base.c_str(), &fs) != 0) continue;
    char type[32];
    std::snprintf(type, sizeof type, "0x%lx", static_cast<unsigned long>(fs.f_type));
    if (is_memory_filesystem(base)) {
      *why += base + ": f_type " + type + " (memory); ";
      continue;
    }
    TempDir probe(base);
    if (!probe.ok()) {
      *why += base + ": not writable; ";
      continue;
    }
    Result<std::unique_ptr<SegmentStore>> store = SegmentStore::open(probe.path(), StorageMode::kDirect);
    if (store.ok()) return base;
    *why += base + ": f_type " + type + ", " + store.status().to_string() + "; ";
  }
  return std::nullopt;
}

const std::optional<std::string>& direct_base(std::string* why = nullptr) {
  static std::string reasons;
  static const std::optional<std::string> base = find_direct_base(&reasons);
  if (why != nullptr) *why = reasons;
  return base;
}

std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

StoredSegment make_meta(uint64_t log_id, uint64_t segment_id, uint64_t bytes, uint64_t version = 7) {
  StoredSegment m;
  m.log_id = log_id;
  m.segment_id = segment_id;
  m.replica_version = version;
  m.bytes = bytes;
  m.checksum = static_cast<uint32_t>(0x9E3779B9u ^ (log_id * 31 + segment_id));
  return m;
}

void expect_meta_eq(const StoredSegment& want, const StoredSegment& got) {
  EXPECT_EQ(want.log_id, got.log_id);
  EXPECT_EQ(want.segment_id, got.segment_id);
  EXPECT_EQ(want.replica_version, got.replica_version);
  EXPECT_EQ(want.bytes, got.bytes);
  EXPECT_EQ(want.checksum, got.checksum);
}

std::string segment_path(const std::string& dir, uint64_t log_id, uint64_t segment_id) {
  return dir + "/log-" + std::to_string(log_id) + "-seg-" + std::to_string(segment_id) + ".tws";
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

uint64_t file_size(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : size;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) out.push_back(entry.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint64_t> segment_ids(const std::vector<StoredSegment>& list) {
  std::vector<uint64_t> out;
  for (const StoredSegment& s : list) out.push_back(s.segment_id);
  return out;
}

// ---------------------------------------------------------------------------

TEST(StorageModeTest, NamesParseBack) {
  EXPECT_EQ(storage_mode_name(StorageMode::kFdatasync), "fdatasync");
  EXPECT_EQ(storage_mode_name(StorageMode::kDirect), "o_direct");
  for (StorageMode mode : {StorageMode::kFdatasync, StorageMode::kDirect}) {
    Result<StorageMode> parsed = parse_storage_mode(storage_mode_name(mode));
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    EXPECT_EQ(parsed.value(), mode);
  }
  Result<StorageMode> direct = parse_storage_mode("direct");
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(direct.value(), StorageMode::kDirect);
  for (std::string_view bad : {"", "FDATASYNC", "o_direct ", "sync", "odirect", "fsync"}) {
    Result<StorageMode> parsed = parse_storage_mode(bad);
    ASSERT_FALSE(parsed.ok()) << "'" << bad << "'";
    EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument) << "'" << bad << "'";
  }
}

// ---------------------------------------------------------------------------
// Both modes.

class StorageStoreTest : public ::testing::TestWithParam<StorageMode> {
 protected:
  void SetUp() override {
    std::string base = default_base();
    if (GetParam() == StorageMode::kDirect) {
      std::string why;
      if (!direct_base(&why).has_value()) GTEST_SKIP() << "no disk filesystem here accepts O_DIRECT: " << why;
      base = *direct_base();
    }
    dir_ = std::make_unique<TempDir>(base);
    ASSERT_TRUE(dir_->ok()) << "mkdtemp under " << base;
    reopen();
  }

  void reopen() {
    store_.reset();
    Result<std::unique_ptr<SegmentStore>> store = SegmentStore::open(dir_->path(), GetParam());
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(store).value();
  }

  uint64_t expected_file_bytes(uint64_t data_bytes) const {
    return GetParam() == StorageMode::kDirect ? round_up(kHeaderBytes + data_bytes, kDirectAlignmentBytes)
                                              : kHeaderBytes + data_bytes;
  }

  void write_ok(const StoredSegment& meta, const std::vector<uint8_t>& bytes) {
    Status s = store_->write(meta, bytes);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<SegmentStore> store_;
};

INSTANTIATE_TEST_SUITE_P(Storage, StorageStoreTest, ::testing::Values(StorageMode::kFdatasync, StorageMode::kDirect),
                         [](const ::testing::TestParamInfo<StorageMode>& info) {
                           return std::string(storage_mode_name(info.param));
                         });

TEST_P(StorageStoreTest, RoundTripsSegmentsOfManySizes) {
  EXPECT_EQ(store_->mode(), GetParam());
  EXPECT_EQ(store_->dir(), dir_->path());
  // Around the header, the 4 KiB alignment and the 1 MiB O_DIRECT staging
  // chunk.
  const std::vector<size_t> sizes = {
      0, 1, 63, 64, 4031, 4032, 4033, 4095, 4096, 4097, 12345, (1 << 20) - 64, (1 << 20) - 63, 1 << 20, (3 << 20) + 1};
  std::mt19937_64 rng(ferry::testing::test_seed(1));
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < sizes.size(); ++i) {
    data.push_back(random_bytes(rng, sizes[i]));
    write_ok(make_meta(3, 100 + i, sizes[i], i), data.back());
  }
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass == 0 ? "same store" : "reopened store");
    for (size_t i = 0; i < sizes.size(); ++i) {
      SCOPED_TRACE("size " + std::to_string(sizes[i]));
      Result<SegmentStore::Loaded> loaded = store_->read(3, 100 + i);
      ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
      expect_meta_eq(make_meta(3, 100 + i, sizes[i], i), loaded->meta);
      EXPECT_TRUE(loaded->bytes == data[i]);
      EXPECT_EQ(file_size(segment_path(dir_->path(), 3, 100 + i)), expected_file_bytes(sizes[i]));
    }
    reopen();
  }
  // Nothing but the segments: no temporaries, no probe file.
  EXPECT_EQ(names_in(dir_->path()).size(), sizes.size());
}

TEST_P(StorageStoreTest, WriteReplacesTheSameSegment) {
  std::mt19937_64 rng(ferry::testing::test_seed(2));
  const std::vector<uint8_t> first = random_bytes(rng, 5000);
  const std::vector<uint8_t> second = random_bytes(rng, 100);
  const std::vector<uint8_t> third = random_bytes(rng, 9000);
  write_ok(make_meta(1, 2, first.size(), 1), first);
  write_ok(make_meta(1, 2, second.size(), 2), second);
  Result<SegmentStore::Loaded> loaded = store_->read(1, 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  expect_meta_eq(make_meta(1, 2, second.size(), 2), loaded->meta);
  EXPECT_TRUE(loaded->bytes == second);
  EXPECT_EQ(file_size(segment_path(dir_->path(), 1, 2)), expected_file_bytes(second.size()));

  write_ok(make_meta(1, 2, third.size(), 3), third);
  loaded = store_->read(1, 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  expect_meta_eq(make_meta(1, 2, third.size(), 3), loaded->meta);
  EXPECT_TRUE(loaded->bytes == third);

  const std::vector<StoredSegment> list = store_->list(1);
  ASSERT_EQ(list.size(), 1u);
  expect_meta_eq(make_meta(1, 2, third.size(), 3), list[0]);
  EXPECT_EQ(names_in(dir_->path()), std::vector<std::string>{"log-1-seg-2.tws"});
}

TEST_P(StorageStoreTest, ListOrdersBySegmentAndFiltersByLog) {
  const std::vector<uint8_t> bytes(10, 0xAB);
  // Numeric, not lexicographic, order; "log-1-" must not match "log-11-".
  for (uint64_t segment : {10, 2, 33, 1, 100}) write_ok(make_meta(1, segment, bytes.size()), bytes);
  write_ok(make_meta(2, 5, bytes.size()), bytes);
  write_ok(make_meta(11, 3, bytes.size()), bytes);
  write_ok(make_meta(UINT64_MAX, UINT64_MAX, bytes.size()), bytes);
  write_ok(make_meta(0, 0, bytes.size()), bytes);

  uint64_t damaged = 99;
  const std::vector<StoredSegment> log1 = store_->list(1, &damaged);
  EXPECT_EQ(damaged, 0u);
  EXPECT_EQ(segment_ids(log1), (std::vector<uint64_t>{1, 2, 10, 33, 100}));
  for (const StoredSegment& s : log1) expect_meta_eq(make_meta(1, s.segment_id, bytes.size()), s);
  EXPECT_EQ(segment_ids(store_->list(2)), (std::vector<uint64_t>{5}));
  EXPECT_EQ(segment_ids(store_->list(11)), (std::vector<uint64_t>{3}));
  EXPECT_EQ(segment_ids(store_->list(0)), (std::vector<uint64_t>{0}));
  EXPECT_EQ(segment_ids(store_->list(UINT64_MAX)), (std::vector<uint64_t>{UINT64_MAX}));
  EXPECT_TRUE(store_->list(3, &damaged).empty());
  EXPECT_EQ(damaged, 0u);
  Result<SegmentStore::Loaded> max = store_->read(UINT64_MAX, UINT64_MAX);
  ASSERT_TRUE(max.ok()) << max.status().to_string();
  EXPECT_TRUE(max->bytes == bytes);
}

TEST_P(StorageStoreTest, RemoveDeletesAndMissingIsNotFound) {
  const std::vector<uint8_t> bytes(300, 7);
  write_ok(make_meta(4, 1, bytes.size()), bytes);
  write_ok(make_meta(4, 2, bytes.size()), bytes);

  Result<SegmentStore::Loaded> missing = store_->read(4, 3);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  missing = store_->read(5, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);

  Status removed = store_->remove(4, 1);
  ASSERT_TRUE(removed.ok()) << removed.to_string();
  missing = store_->read(4, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_EQ(segment_ids(store_->list(4)), (std::vector<uint64_t>{2}));
  EXPECT_EQ(store_->remove(4, 1).code(), Code::kNotFound);
  EXPECT_EQ(store_->remove(9, 9).code(), Code::kNotFound);
  EXPECT_TRUE(store_->read(4, 2).ok());
}

TEST_P(StorageStoreTest, WriteRejectsLengthMismatch) {
  const std::vector<uint8_t> bytes(100, 1);
  Status s = store_->write(make_meta(1, 1, 99), bytes);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  s = store_->write(make_meta(1, 1, 101), bytes);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
  EXPECT_TRUE(names_in(dir_->path()).empty());
  EXPECT_EQ(store_->counters().segments_written, 0u);
  EXPECT_EQ(store_->counters().syncs, 0u);
}

TEST_P(StorageStoreTest, CountersCountWritesSyncsAndReads) {
  const std::vector<uint8_t> empty;
  const std::vector<uint8_t> bytes(5000, 3);
  write_ok(make_meta(1, 1, 0), empty);
  write_ok(make_meta(1, 2, bytes.size()), bytes);
  ASSERT_TRUE(store_->read(1, 2).ok());
  ASSERT_TRUE(store_->read(1, 1).ok());
  ASSERT_FALSE(store_->read(1, 3).ok());
  (void)store_->list(1);  // headers only: not a read
  ASSERT_TRUE(store_->remove(1, 1).ok());

  const StorageCounters c = store_->counters();
  EXPECT_EQ(c.segments_written, 2u);
  EXPECT_EQ(c.bytes_written, expected_file_bytes(0) + expected_file_bytes(bytes.size()));
  EXPECT_EQ(c.syncs, 2u * 2 + 1);  // file + directory per write, directory per remove
  EXPECT_EQ(c.segments_read, 2u);
  EXPECT_GT(c.write_ns, 0u);
}

// The file as storage.h specifies it, byte by byte.
TEST_P(StorageStoreTest, FileLayoutMatchesTheSpecification) {
  std::mt19937_64 rng(ferry::testing::test_seed(3));
  const std::vector<uint8_t> bytes = random_bytes(rng, 777);
  StoredSegment meta = make_meta(0x0102030405060708, 0x1112131415161718, bytes.size(), 0x2122232425262728);
  meta.checksum = 0x31323334;
  write_ok(meta, bytes);
  const std::vector<uint8_t> file = read_file(segment_path(dir_->path(), meta.log_id, meta.segment_id));
  ASSERT_EQ(file.size(), expected_file_bytes(bytes.size()));
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, file.data() + at, 4);
    return v;
  };
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, file.data() + at, 8);
    return v;
  };
  EXPECT_EQ(std::string(file.begin(), file.begin() + 8), "FRYTWSG1");
  EXPECT_EQ(u32(8), 1u);
  EXPECT_EQ(u32(12), 0u);
  EXPECT_EQ(u64(16), meta.log_id);
  EXPECT_EQ(u64(24), meta.segment_id);
  EXPECT_EQ(u64(32), meta.replica_version);
  EXPECT_EQ(u64(40), meta.bytes);
  EXPECT_EQ(u32(48), meta.checksum);
  EXPECT_EQ(u32(52), crc32c(0, bytes));
  EXPECT_EQ(u32(56), crc32c(0, file.data(), 56));
  EXPECT_EQ(u32(60), 0u);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), file.begin() + kHeaderBytes));
  EXPECT_TRUE(std::all_of(file.begin() + kHeaderBytes + bytes.size(), file.end(), [](uint8_t b) { return b == 0; }))
      << "O_DIRECT padding is zero";
}

// ---------------------------------------------------------------------------
// Damaged files (fdatasync mode; the reader does not depend on the mode).

class StorageDamageTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kLog = 6;
  static constexpr uint64_t kSegment = 9;

  void SetUp() override {
    dir_ = std::make_unique<TempDir>(default_base());
    ASSERT_TRUE(dir_->ok());
    Result<std::unique_ptr<SegmentStore>> store = SegmentStore::open(dir_->path(), StorageMode::kFdatasync);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(store).value();
    std::mt19937_64 rng(11);
    data_ = random_bytes(rng, 1000);
    Status s = store_->write(make_meta(kLog, kSegment, data_.size()), data_);
    ASSERT_TRUE(s.ok()) << s.to_string();
    path_ = segment_path(dir_->path(), kLog, kSegment);
    good_ = read_file(path_);
    ASSERT_EQ(good_.size(), kHeaderBytes + data_.size());
  }

  // read() must say kDataLoss; list() must skip the segment and count it.
  void expect_damaged(const std::string& what) {
    SCOPED_TRACE(what);
    Result<SegmentStore::Loaded> loaded = store_->read(kLog, kSegment);
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), Code::kDataLoss) << loaded.status().to_string();
    uint64_t damaged = 0;
    EXPECT_TRUE(store_->list(kLog, &damaged).empty());
    EXPECT_EQ(damaged, 1u);
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<SegmentStore> store_;
  std::vector<uint8_t> data_;
  std::string path_;
  std::vector<uint8_t> good_;
};

TEST_F(StorageDamageTest, EveryHeaderByteFlippedIsDataLoss) {
  for (size_t i = 0; i < kHeaderBytes; ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      std::vector<uint8_t> bad = good_;
      bad[i] ^= mask;
      write_file(path_, bad);
      expect_damaged("header byte " + std::to_string(i) + " ^ " + std::to_string(mask));
    }
  }
  write_file(path_, good_);
  EXPECT_TRUE(store_->read(kLog, kSegment).ok());
}

TEST_F(StorageDamageTest, DataByteFlippedIsDataLossButListed) {
  for (size_t i : {kHeaderBytes, kHeaderBytes + 500, good_.size() - 1}) {
    std::vector<uint8_t> bad = good_;
    bad[i] ^= 0x10;
    write_file(path_, bad);
    Result<SegmentStore::Loaded> loaded = store_->read(kLog, kSegment);
    ASSERT_FALSE(loaded.ok()) << "byte " << i;
    EXPECT_EQ(loaded.status().code(), Code::kDataLoss) << loaded.status().to_string();
    // list() trusts an intact header; the data CRC is read()'s to check.
    uint64_t damaged = 9;
    EXPECT_EQ(segment_ids(store_->list(kLog, &damaged)), std::vector<uint64_t>{kSegment});
    EXPECT_EQ(damaged, 0u);
  }
}

TEST_F(StorageDamageTest, TruncatedOrOverlongFileIsDataLoss) {
  for (size_t keep : {size_t{0}, size_t{1}, kHeaderBytes - 1, kHeaderBytes, kHeaderBytes + 1, good_.size() - 1}) {
    write_file(path_, std::vector<uint8_t>(good_.begin(), good_.begin() + static_cast<ptrdiff_t>(keep)));
    expect_damaged("truncated to " + std::to_string(keep));
  }
  // Zero padding up to the O_DIRECT alignment is fine (a kDirect file);
  // anything past it is not.
  std::vector<uint8_t> padded = good_;
  padded.resize(round_up(good_.size(), kDirectAlignmentBytes), 0);
  write_file(path_, padded);
  Result<SegmentStore::Loaded> loaded = store_->read(kLog, kSegment);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(loaded->bytes == data_);
  padded.push_back(0);
  write_file(path_, padded);
  expect_damaged("one byte past the padding");
}

TEST_F(StorageDamageTest, GarbageUnderASegmentNameIsDataLoss) {
  std::mt19937_64 rng(ferry::testing::test_seed(12));
  write_file(path_, random_bytes(rng, 1000));
  expect_damaged("random bytes");
  write_file(path_, std::vector<uint8_t>(4096, 0));
  expect_damaged("zeros (a pre-zeroed buffer)");
  write_file(path_, std::vector<uint8_t>(100, 0xFF));
  expect_damaged("ones");

  // A whole, valid file of another segment under this one's name.
  Status s = store_->write(make_meta(kLog, kSegment + 1, data_.size()), data_);
  ASSERT_TRUE(s.ok()) << s.to_string();
  write_file(path_, read_file(segment_path(dir_->path(), kLog, kSegment + 1)));
  Result<SegmentStore::Loaded> loaded = store_->read(kLog, kSegment);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Code::kDataLoss) << loaded.status().to_string();
  uint64_t damaged = 0;
  EXPECT_EQ(segment_ids(store_->list(kLog, &damaged)), std::vector<uint64_t>{kSegment + 1});
  EXPECT_EQ(damaged, 1u);
}

TEST_F(StorageDamageTest, NonRegularFileUnderASegmentNameIsDataLoss) {
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  ASSERT_EQ(::mkdir(path_.c_str(), 0755), 0);
  expect_damaged("a directory");
  ASSERT_EQ(::rmdir(path_.c_str()), 0);
  ASSERT_EQ(::mkfifo(path_.c_str(), 0644), 0);
  expect_damaged("a FIFO (must not block)");
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  // write() replaces it with a segment again.
  Status s = store_->write(make_meta(kLog, kSegment, data_.size()), data_);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(store_->read(kLog, kSegment).ok());
}

TEST_F(StorageDamageTest, LeftoverTemporariesAndStrangeNamesAreIgnored) {
  const std::string dir = dir_->path();
  // A crash after the temporary was written, and one in the middle of it.
  write_file(segment_path(dir, kLog, 20) + ".tmp", good_);
  write_file(segment_path(dir, kLog, 21) + ".tmp", std::vector<uint8_t>(good_.begin(), good_.begin() + 30));
  // Names that are not exactly the format's.
  for (const char* name :
       {"log-06-seg-9.tws", "log-6-seg-09.tws", "log-6-seg-9.tws~", "log-6-seg-.tws", "log--seg-9.tws",
        "log-+6-seg-9.tws", "log-6-seg-9.TWS", "log-6-seg-99999999999999999999.tws", "README"}) {
    write_file(dir + "/" + name, good_);
  }
  uint64_t damaged = 7;
  EXPECT_EQ(segment_ids(store_->list(kLog, &damaged)), std::vector<uint64_t>{kSegment});
  EXPECT_EQ(damaged, 0u);
  Result<SegmentStore::Loaded> loaded = store_->read(kLog, 20);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Code::kNotFound);

  // Writing the segment again reuses and consumes its temporary name.
  Status s = store_->write(make_meta(kLog, 21, data_.size()), data_);
  ASSERT_TRUE(s.ok()) << s.to_string();
  loaded = store_->read(kLog, 21);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(loaded->bytes == data_);
  EXPECT_FALSE(std::filesystem::exists(segment_path(dir, kLog, 21) + ".tmp"));
  EXPECT_EQ(segment_ids(store_->list(kLog, &damaged)), (std::vector<uint64_t>{kSegment, 21}));
}

// Random flips, truncations and extensions: the result is the original
// segment or kDataLoss, never anything else and never a crash.
TEST_F(StorageDamageTest, RandomMutationsNeverCrash) {
  const uint64_t seed = ferry::testing::test_seed(20240601);
  std::mt19937_64 rng(seed);
  int detected = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<uint8_t> bad = good_;
    switch (rng() % 4) {
      case 0:
      case 1:
        for (uint64_t flips = 1 + rng() % 4; flips > 0; --flips) {
          bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
        }
        break;
      case 2:
        bad.resize(rng() % bad.size());
        break;
      default: {
        const std::vector<uint8_t> tail = random_bytes(rng, 1 + rng() % 5000);
        bad.insert(bad.end(), tail.begin(), tail.end());
        break;
      }
    }
    write_file(path_, bad);
    Result<SegmentStore::Loaded> loaded = store_->read(kLog, kSegment);
    if (loaded.ok()) {
      expect_meta_eq(make_meta(kLog, kSegment, data_.size()), loaded->meta);
      EXPECT_TRUE(loaded->bytes == data_) << "round " << round;
    } else {
      EXPECT_EQ(loaded.status().code(), Code::kDataLoss) << "round " << round << ": " << loaded.status().to_string();
      ++detected;
    }
    uint64_t damaged = 0;
    const std::vector<StoredSegment> list = store_->list(kLog, &damaged);
    EXPECT_EQ(list.size() + damaged, 1u) << "round " << round;
  }
  EXPECT_GT(detected, 150) << "seed " << seed;
}

// ---------------------------------------------------------------------------

TEST(StorageOpenTest, CreatesMissingParentDirectories) {
  TempDir base(default_base());
  ASSERT_TRUE(base.ok());
  const std::string dir = base.path() + "/a/b//c/";
  Result<std::unique_ptr<SegmentStore>> store = SegmentStore::open(dir, StorageMode::kFdatasync);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_TRUE(std::filesystem::is_directory(base.path() + "/a/b/c"));
  EXPECT_EQ((*store)->dir(), dir);
  EXPECT_EQ((*store)->mode(), StorageMode::kFdatasync);
  const std::vector<uint8_t> bytes(10, 1);
  Status s = (*store)->write(make_meta(1, 1, bytes.size()), bytes);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(std::filesystem::exists(base.path() + "/a/b/c/log-1-seg-1.tws"));
  // Opening an existing store again is fine.
  EXPECT_TRUE(SegmentStore::open(dir, StorageMode::kFdatasync).ok());
}

TEST(StorageOpenTest, RejectsAFileAndAnEmptyPath) {
  TempDir base(default_base());
  ASSERT_TRUE(base.ok());
  const std::string file = base.path() + "/plain";
  write_file(file, {1, 2, 3});
  Result<std::unique_ptr<SegmentStore>> store = SegmentStore::open(file, StorageMode::kFdatasync);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kInvalidArgument) << store.status().to_string();
  store = SegmentStore::open(file + "/below", StorageMode::kFdatasync);
  EXPECT_FALSE(store.ok());
  store = SegmentStore::open("", StorageMode::kFdatasync);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kInvalidArgument);
}

TEST(StorageOpenTest, DirectOnTmpfsIsRejectedWithAdvice) {
  if (!std::filesystem::is_directory("/dev/shm") || !is_memory_filesystem("/dev/shm")) {
    GTEST_SKIP() << "/dev/shm is not a tmpfs here";
  }
  TempDir shm("/dev/shm");
  ASSERT_TRUE(shm.ok());
  Result<std::unique_ptr<SegmentStore>> store = SegmentStore::open(shm.path(), StorageMode::kDirect);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kInvalidArgument);
  EXPECT_NE(store.status().message().find(shm.path()), std::string::npos) << store.status().message();
  EXPECT_NE(store.status().message().find("fdatasync"), std::string::npos) << store.status().message();
  EXPECT_TRUE(names_in(shm.path()).empty()) << "no probe file left";
  // fdatasync mode works there (durable only as far as tmpfs is).
  store = SegmentStore::open(shm.path(), StorageMode::kFdatasync);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  const std::vector<uint8_t> bytes(100, 5);
  Status s = (*store)->write(make_meta(1, 1, bytes.size()), bytes);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE((*store)->read(1, 1).ok());
}

TEST(StorageOpenTest, DirectWorksOnADiskFilesystem) {
  std::string why;
  if (!direct_base(&why).has_value()) GTEST_SKIP() << "no disk filesystem here accepts O_DIRECT: " << why;
  std::cout << "[ o_direct ] using " << *direct_base() << "\n";
  TempDir dir(*direct_base());
  ASSERT_TRUE(dir.ok());
  Result<std::unique_ptr<SegmentStore>> direct = SegmentStore::open(dir.path(), StorageMode::kDirect);
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  EXPECT_EQ((*direct)->mode(), StorageMode::kDirect);
  EXPECT_TRUE(names_in(dir.path()).empty()) << "no probe file left";
  std::mt19937_64 rng(ferry::testing::test_seed(4));
  const std::vector<uint8_t> bytes = random_bytes(rng, 10000);
  Status s = (*direct)->write(make_meta(2, 3, bytes.size()), bytes);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(file_size(segment_path(dir.path(), 2, 3)), round_up(kHeaderBytes + bytes.size(), kDirectAlignmentBytes));
  // The padded file reads back in either mode.
  Result<std::unique_ptr<SegmentStore>> buffered = SegmentStore::open(dir.path(), StorageMode::kFdatasync);
  ASSERT_TRUE(buffered.ok()) << buffered.status().to_string();
  for (SegmentStore* store : {direct->get(), buffered->get()}) {
    Result<SegmentStore::Loaded> loaded = store->read(2, 3);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_TRUE(loaded->bytes == bytes);
  }
}

// Writers, readers, listers and removers at once (TSan finds races here if
// run under it; the assertions check that no one sees a torn segment).
TEST(StorageConcurrencyTest, ThreadsShareOneStore) {
  TempDir dir(default_base());
  ASSERT_TRUE(dir.ok());
  Result<std::unique_ptr<SegmentStore>> opened = SegmentStore::open(dir.path(), StorageMode::kFdatasync);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  SegmentStore& store = **opened;
  constexpr int kThreads = 4;
  constexpr int kSegmentsPerThread = 12;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSegmentsPerThread; ++i) {
        // All threads also rewrite the shared segment (0, 0).
        const uint64_t log_id = (i % 3 == 0) ? 0 : static_cast<uint64_t>(t + 1);
        const uint64_t segment_id = (i % 3 == 0) ? 0 : static_cast<uint64_t>(i);
        const std::vector<uint8_t> bytes(100 + 37 * static_cast<size_t>(i), static_cast<uint8_t>(t * 16 + i));
        if (!store.write(make_meta(log_id, segment_id, bytes.size(), static_cast<uint64_t>(t)), bytes).ok()) {
          ++failures[t];
        }
        Result<SegmentStore::Loaded> loaded = store.read(log_id, segment_id);
        if (!loaded.ok() || loaded->bytes.size() != loaded->meta.bytes ||
            !std::all_of(loaded->bytes.begin(), loaded->bytes.end(),
                         [&](uint8_t b) { return b == loaded->bytes.front(); })) {
          ++failures[t];
        }
        uint64_t damaged = 0;
        (void)store.list(0, &damaged);
        if (damaged != 0) ++failures[t];
        if (i % 4 == 1 && log_id != 0 && !store.remove(log_id, segment_id).ok()) ++failures[t];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  const StorageCounters c = store.counters();
  EXPECT_EQ(c.segments_written, uint64_t{kThreads} * kSegmentsPerThread);
  EXPECT_EQ(c.segments_read, uint64_t{kThreads} * kSegmentsPerThread);
  for (int t = 0; t < kThreads; ++t) {
    // Own segments i = 1, 2, 4, 5, 7, 8, 10, 11 written; 1 and 5 removed.
    EXPECT_EQ(segment_ids(store.list(static_cast<uint64_t>(t + 1))), (std::vector<uint64_t>{2, 4, 7, 8, 10, 11}));
  }
}

}  // namespace
}  // namespace storage_test
}  // namespace ferry::tailwind
