// What the replicated-RocksDB tests share: a chain of three PM replicas on a
// manual engine, the head (RocksDB through the replicated file system), the
// replicas (each an applier over its region, with its own database on a
// disk that a power failure can cut back to what was synced), and the
// history checker (a replica must hold a prefix of the head's writes that
// covers every acknowledged one).
#pragma once

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ferry/common/rng.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/rocksdb/replicated_wal.h"
#include "ferry/rocksdb/wal_applier.h"
#include "ferry/rocksdb/wal_stream.h"
#include "test_seed.h"
#include "txn_test_util.h"

namespace ferry::rocks::testing {

namespace fs = std::filesystem;

// Seeds: FERRY_SEED (base 0: hex works), printed (tests/support/test_seed.h).
using ferry::testing::seed_range;
using ferry::testing::test_seed;

// A fresh directory, removed with what it holds. On tmpfs when there is one:
// every synced write fsyncs.
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
      : TxnChain(hyperloop::testing::txn_chain_options(64 * 1024 + log_bytes + db_bytes, log_bytes, db_bytes)) {}
};

inline ::rocksdb::Options base_options() {
  ::rocksdb::Options o;
  o.write_buffer_size = 4 << 20;
  o.info_log_level = ::rocksdb::InfoLogLevel::WARN_LEVEL;
  // No preallocation of WAL and MANIFEST files (megabytes each, zeroed by
  // tmpfs and trimmed at close): the tests open and close many databases.
  o.allow_fallocate = false;
  return o;
}

// A machine's disk under a power-failure model (LevelDB's fault-injection
// idea): it remembers how much of each file written through it was synced.
// crash() stops the machine: from then on nothing reaches the disk (writes,
// syncs, renames, deletes fail), so whatever RocksDB does while it is torn
// down counts for nothing. restart() brings it back: after a power failure
// each file keeps what was synced plus, seeded, a random prefix of the rest;
// after a process crash everything written stays. Renames and deletes are
// durable at once (a kinder disk than a real one: RocksDB syncs its
// directories anyway).
class PowerFailFs : public ::rocksdb::FileSystemWrapper {
 public:
  explicit PowerFailFs(std::shared_ptr<::rocksdb::FileSystem> base = ::rocksdb::FileSystem::Default())
      : FileSystemWrapper(std::move(base)), state_(std::make_shared<State>()) {}
  const char* Name() const override { return "FerryPowerFailFs"; }

  void crash() {
    std::lock_guard lock(state_->mu);
    state_->dead = true;
  }
  // Returns the bytes dropped.
  uint64_t restart(bool power_failure, uint64_t seed) {
    std::lock_guard lock(state_->mu);
    Rng rng(seed);
    uint64_t dropped = 0;
    for (auto& [path, f] : state_->files) {
      if (power_failure && f.size > f.synced) {
        const uint64_t keep = f.synced + (rng.below(2) == 0 ? 0 : rng.below(f.size - f.synced + 1));
        std::error_code ec;
        if (fs::exists(path, ec) && fs::file_size(path, ec) > keep) {
          dropped += fs::file_size(path, ec) - keep;
          fs::resize_file(path, keep, ec);
        }
        f.size = keep;
      }
      f.synced = f.size;
    }
    state_->dead = false;
    return dropped;
  }

  ::rocksdb::IOStatus NewWritableFile(const std::string& fname, const ::rocksdb::FileOptions& o,
                                      std::unique_ptr<::rocksdb::FSWritableFile>* result,
                                      ::rocksdb::IODebugContext* dbg) override {
    if (dead()) return down();
    ::rocksdb::IOStatus s = target()->NewWritableFile(fname, o, result, dbg);
    if (s.ok()) wrap(fname, 0, result);
    return s;
  }
  ::rocksdb::IOStatus ReopenWritableFile(const std::string& fname, const ::rocksdb::FileOptions& o,
                                         std::unique_ptr<::rocksdb::FSWritableFile>* result,
                                         ::rocksdb::IODebugContext* dbg) override {
    if (dead()) return down();
    ::rocksdb::IOStatus s = target()->ReopenWritableFile(fname, o, result, dbg);
    std::error_code ec;
    if (s.ok()) wrap(fname, fs::file_size(fname, ec), result);
    return s;
  }
  ::rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old,
                                        const ::rocksdb::FileOptions& o,
                                        std::unique_ptr<::rocksdb::FSWritableFile>* result,
                                        ::rocksdb::IODebugContext* dbg) override {
    if (dead()) return down();
    ::rocksdb::IOStatus s = target()->ReuseWritableFile(fname, old, o, result, dbg);
    if (s.ok()) {
      forget(old);
      wrap(fname, 0, result);
    }
    return s;
  }
  ::rocksdb::IOStatus RenameFile(const std::string& src, const std::string& dst, const ::rocksdb::IOOptions& o,
                                 ::rocksdb::IODebugContext* dbg) override {
    if (dead()) return down();
    ::rocksdb::IOStatus s = target()->RenameFile(src, dst, o, dbg);
    if (s.ok()) {
      std::lock_guard lock(state_->mu);
      auto it = state_->files.find(src);
      state_->files.erase(dst);
      if (it != state_->files.end()) {
        state_->files[dst] = it->second;
        state_->files.erase(it);
      }
    }
    return s;
  }
  ::rocksdb::IOStatus DeleteFile(const std::string& f, const ::rocksdb::IOOptions& o,
                                 ::rocksdb::IODebugContext* dbg) override {
    if (dead()) return down();
    ::rocksdb::IOStatus s = target()->DeleteFile(f, o, dbg);
    if (s.ok()) forget(f);
    return s;
  }
  ::rocksdb::IOStatus LinkFile(const std::string& src, const std::string& dst, const ::rocksdb::IOOptions& o,
                               ::rocksdb::IODebugContext* dbg) override {
    if (dead()) return down();
    return target()->LinkFile(src, dst, o, dbg);
  }
  ::rocksdb::IOStatus CreateDir(const std::string& d, const ::rocksdb::IOOptions& o,
                                ::rocksdb::IODebugContext* dbg) override {
    if (dead()) return down();
    return target()->CreateDir(d, o, dbg);
  }
  ::rocksdb::IOStatus CreateDirIfMissing(const std::string& d, const ::rocksdb::IOOptions& o,
                                         ::rocksdb::IODebugContext* dbg) override {
    if (dead()) return down();
    return target()->CreateDirIfMissing(d, o, dbg);
  }

 private:
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  struct State {
    std::mutex mu;
    bool dead = false;
    std::map<std::string, FileState> files;
  };

  static ::rocksdb::IOStatus down() { return ::rocksdb::IOStatus::IOError("the machine is down"); }
  bool dead() const {
    std::lock_guard lock(state_->mu);
    return state_->dead;
  }
  void forget(const std::string& f) {
    std::lock_guard lock(state_->mu);
    state_->files.erase(f);
  }

  class File final : public ::rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<::rocksdb::FSWritableFile> f, std::shared_ptr<State> state, std::string path)
        : FSWritableFileOwnerWrapper(std::move(f)), state_(std::move(state)), path_(std::move(path)) {}
    ::rocksdb::IOStatus Append(const ::rocksdb::Slice& d, const ::rocksdb::IOOptions& o,
                               ::rocksdb::IODebugContext* dbg) override {
      return wrote(kEnd, d.size(), [&] { return target()->Append(d, o, dbg); });
    }
    ::rocksdb::IOStatus Append(const ::rocksdb::Slice& d, const ::rocksdb::IOOptions& o,
                               const ::rocksdb::DataVerificationInfo& i, ::rocksdb::IODebugContext* dbg) override {
      return wrote(kEnd, d.size(), [&] { return target()->Append(d, o, i, dbg); });
    }
    ::rocksdb::IOStatus PositionedAppend(const ::rocksdb::Slice& d, uint64_t off, const ::rocksdb::IOOptions& o,
                                         ::rocksdb::IODebugContext* dbg) override {
      return wrote(off, d.size(), [&] { return target()->PositionedAppend(d, off, o, dbg); });
    }
    ::rocksdb::IOStatus PositionedAppend(const ::rocksdb::Slice& d, uint64_t off, const ::rocksdb::IOOptions& o,
                                         const ::rocksdb::DataVerificationInfo& i,
                                         ::rocksdb::IODebugContext* dbg) override {
      return wrote(off, d.size(), [&] { return target()->PositionedAppend(d, off, o, i, dbg); });
    }
    ::rocksdb::IOStatus Truncate(uint64_t size, const ::rocksdb::IOOptions& o,
                                 ::rocksdb::IODebugContext* dbg) override {
      std::lock_guard lock(state_->mu);
      if (state_->dead) return down();
      ::rocksdb::IOStatus s = target()->Truncate(size, o, dbg);
      if (s.ok()) {
        FileState& f = state_->files[path_];
        f.size = size;
        f.synced = std::min(f.synced, size);
      }
      return s;
    }
    ::rocksdb::IOStatus Sync(const ::rocksdb::IOOptions& o, ::rocksdb::IODebugContext* dbg) override {
      return synced([&] { return target()->Sync(o, dbg); });
    }
    ::rocksdb::IOStatus Fsync(const ::rocksdb::IOOptions& o, ::rocksdb::IODebugContext* dbg) override {
      return synced([&] { return target()->Fsync(o, dbg); });
    }
    ::rocksdb::IOStatus Flush(const ::rocksdb::IOOptions& o, ::rocksdb::IODebugContext* dbg) override {
      if (is_dead()) return down();
      return target()->Flush(o, dbg);
    }

   private:
    static constexpr uint64_t kEnd = ~uint64_t{0};
    bool is_dead() const {
      std::lock_guard lock(state_->mu);
      return state_->dead;
    }
    template <typename Op>
    ::rocksdb::IOStatus wrote(uint64_t offset, uint64_t n, Op op) {
      std::lock_guard lock(state_->mu);
      if (state_->dead) return down();
      ::rocksdb::IOStatus s = op();
      if (s.ok()) {
        FileState& f = state_->files[path_];
        f.size = offset == kEnd ? f.size + n : std::max(f.size, offset + n);
      }
      return s;
    }
    template <typename Op>
    ::rocksdb::IOStatus synced(Op op) {
      std::lock_guard lock(state_->mu);
      if (state_->dead) return down();
      ::rocksdb::IOStatus s = op();
      if (s.ok()) {
        FileState& f = state_->files[path_];
        f.synced = f.size;
      }
      return s;
    }
    std::shared_ptr<State> state_;
    std::string path_;
  };

  void wrap(const std::string& fname, uint64_t size, std::unique_ptr<::rocksdb::FSWritableFile>* result) {
    {
      std::lock_guard lock(state_->mu);
      state_->files[fname] = FileState{size, size};
    }
    *result = std::make_unique<File>(std::move(*result), state_, fname);
  }

  std::shared_ptr<State> state_;
};

// The history of the head's writes, in the order RocksDB applied them, and
// how many of them were acknowledged durable (a synced write returned, or a
// Flush / SyncWAL after it did): every replica must hold a prefix of the
// history at least that long.
struct History {
  struct Write {
    std::string key;
    std::optional<std::string> value;  // nullopt: a delete
  };
  std::vector<Write> writes;
  size_t durable = 0;

  void put(std::string key, std::string value) { writes.push_back({std::move(key), std::move(value)}); }
  void del(std::string key) { writes.push_back({std::move(key), std::nullopt}); }
  void all_durable() { durable = writes.size(); }
  // The state after the first `n` writes (keys that exist).
  std::map<std::string, std::string> state(size_t n) const {
    std::map<std::string, std::string> out;
    for (size_t i = 0; i < n; ++i) {
      if (writes[i].value) {
        out[writes[i].key] = *writes[i].value;
      } else {
        out.erase(writes[i].key);
      }
    }
    return out;
  }
};

struct PrefixCheck {
  bool ok = false;
  size_t prefix = 0;       // the prefix it holds (when ok)
  size_t missing = 0;      // at the shortest allowed prefix: keys absent or with an older value
  size_t resurrected = 0;  // keys present that the prefix deleted
  size_t foreign = 0;      // values never written to their key
  std::string first;       // the first bad key
  std::string describe() const {
    return "missing " + std::to_string(missing) + ", resurrected " + std::to_string(resurrected) + ", foreign " +
           std::to_string(foreign) + ", first bad key '" + first + "'";
  }
};

// Does `state` equal the state after some prefix of `h` of at least
// `min_prefix` writes? (Linear: one pass over the keys, one over the
// writes after min_prefix.)
inline PrefixCheck check_prefix(const std::map<std::string, std::string>& state, const History& h, size_t min_prefix) {
  PrefixCheck out;
  std::map<std::string, std::optional<std::string>> expected;
  std::map<std::string, std::vector<std::string>> written;  // every value each key ever had
  for (size_t i = 0; i < h.writes.size(); ++i) {
    if (i < min_prefix) expected[h.writes[i].key] = h.writes[i].value;
    if (h.writes[i].value) written[h.writes[i].key].push_back(*h.writes[i].value);
  }
  auto actual = [&](const std::string& key) -> std::optional<std::string> {
    auto it = state.find(key);
    if (it == state.end()) return std::nullopt;
    return it->second;
  };
  auto expected_of = [&](const std::string& key) -> std::optional<std::string> {
    auto it = expected.find(key);
    if (it == expected.end()) return std::nullopt;
    return it->second;
  };
  size_t mismatches = 0;
  auto note = [&](const std::string& key) {
    const auto a = actual(key);
    const auto e = expected_of(key);
    if (a == e) return;
    ++mismatches;
    if (out.first.empty()) out.first = key;
    const auto w = written.find(key);
    const bool ever = a && w != written.end() && std::find(w->second.begin(), w->second.end(), *a) != w->second.end();
    if (a && !ever) {
      ++out.foreign;
    } else if (!e) {
      ++out.resurrected;
    } else {
      ++out.missing;
    }
  };
  for (const auto& [key, value] : state) note(key);
  for (const auto& [key, value] : expected) {
    if (state.find(key) == state.end()) note(key);
  }
  if (mismatches == 0) {
    out.ok = true;
    out.prefix = min_prefix;
    return out;
  }
  for (size_t i = min_prefix; i < h.writes.size(); ++i) {
    const std::string& key = h.writes[i].key;
    const bool before = actual(key) == expected_of(key);
    expected[key] = h.writes[i].value;
    const bool after = actual(key) == expected_of(key);
    if (before && !after) ++mismatches;
    if (!before && after) --mismatches;
    if (mismatches == 0) {
      out.ok = true;
      out.prefix = i + 1;
      return out;
    }
  }
  return out;
}

// Every key and value of `db`'s default column family.
inline std::map<std::string, std::string> read_all(::rocksdb::DB* db) {
  std::map<std::string, std::string> out;
  std::unique_ptr<::rocksdb::Iterator> it(db->NewIterator(::rocksdb::ReadOptions(), db->DefaultColumnFamily()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) out[it->key().ToString()] = it->value().ToString();
  EXPECT_TRUE(it->status().ok()) << it->status().ToString();
  return out;
}

// Opens a replica's directory with plain RocksDB (no applier, no stream) and
// reads every key: what a client would find there. nullopt: RocksDB does not
// open it.
inline std::optional<std::map<std::string, std::string>> reopen_plain(const std::string& dir, std::string* error) {
  ::rocksdb::Options o = base_options();
  std::vector<::rocksdb::ColumnFamilyHandle*> handles;
  ::rocksdb::DB* raw = nullptr;
  const ::rocksdb::Status s = ::rocksdb::DB::Open(o, dir, wal_applier_column_families(o), &handles, &raw);
  if (!s.ok()) {
    *error = s.ToString();
    return std::nullopt;
  }
  std::unique_ptr<::rocksdb::DB> db(raw);
  auto out = read_all(db.get());
  for (auto* h : handles) (void)db->DestroyColumnFamilyHandle(h);
  return out;
}

// The head: RocksDB whose WAL goes through the replicated file system, on
// `disk` (a PowerFailFs when its crashes matter).
struct Head {
  Head(Chain& chain, const std::string& dir_in, const ReplicatedWalOptions& options = {},
       WalStreamProgress* progress = nullptr,
       std::shared_ptr<::rocksdb::FileSystem> disk = ::rocksdb::FileSystem::Default(), bool resume = false,
       const ::rocksdb::Options& db_options = base_options())
      : dir(dir_in) {
    ReplicatedWalOptions with_dir = options;
    if (with_dir.wal_dir.empty()) with_dir.wal_dir = dir;
    auto f = ReplicatedWalFileSystem::create(std::move(disk), *chain.txn, with_dir, progress);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    if (!f.ok()) return;
    fs = f.value();
    if (resume) {
      const Status r = fs->resume_local_wals(dir);
      EXPECT_TRUE(r.ok()) << r.to_string();
      if (!r.ok()) return;
    }
    env = ::rocksdb::NewCompositeEnv(fs);
    ::rocksdb::Options o = db_options;
    o.create_if_missing = true;
    o.env = env.get();
    ::rocksdb::DB* raw = nullptr;
    const ::rocksdb::Status s = ::rocksdb::DB::Open(o, dir, &raw);
    EXPECT_TRUE(s.ok()) << s.ToString();
    db.reset(raw);
  }
  // The head's own WAL file, as RocksDB wrote it.
  std::vector<uint8_t> local_wal() const {
    std::ifstream in(fs::path(dir) / wal_file_name(fs->wal_file_number()), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  std::string dir;
  std::shared_ptr<ReplicatedWalFileSystem> fs;  // declared before them: destroyed after the DB and the Env
  std::unique_ptr<::rocksdb::Env> env;
  std::unique_ptr<::rocksdb::DB> db;
};

// A replica's CPU side: its applier over its region, its database in its
// own directory on its own disk.
struct Replica {
  Replica(Chain& chain_in, uint32_t index_in, const std::string& dir_in)
      : chain(chain_in),
        index(index_in),
        dir(dir_in),
        disk(std::make_shared<PowerFailFs>()),
        env(::rocksdb::NewCompositeEnv(disk)) {}
  ~Replica() { close(); }

  ::rocksdb::Options options() const {
    ::rocksdb::Options o = base_options();
    o.env = env.get();
    return o;
  }
  Status open() {
    auto a = WalApplier::open(chain.region(index), dir, options());
    if (!a.ok()) return a.status();
    applier = std::move(a).value();
    if (positions != nullptr) positions->attach(index, applier.get());
    return ok_status();
  }
  void close() {
    if (positions != nullptr) positions->attach(index, nullptr);
    applier.reset();
  }
  Result<uint64_t> poll(uint64_t max = ~uint64_t{0}) { return applier->poll(max); }
  // The replica's machine loses its CPU state and its disk keeps what was
  // synced (power_failure) or everything (a process crash). Its PM region
  // is the chain's, failed separately.
  uint64_t crash(bool power_failure, uint64_t seed) {
    disk->crash();
    close();
    return disk->restart(power_failure, seed);
  }
  // Restart after the region was power-failed: replay, reopen, apply.
  Status recover() {
    auto a = recover_replica(chain.region(index), dir, options());
    if (!a.ok()) return a.status();
    applier = std::move(a).value();
    if (positions != nullptr) positions->attach(index, applier.get());
    return ok_status();
  }

  Chain& chain;
  uint32_t index;
  std::string dir;
  std::shared_ptr<PowerFailFs> disk;
  std::unique_ptr<::rocksdb::Env> env;
  std::unique_ptr<WalApplier> applier;
  AppliedPositions* positions = nullptr;
};

inline std::string random_value(Rng& rng) {
  std::string v(20 + rng.below(180), '\0');
  for (char& c : v) c = static_cast<char>(rng.next());
  return v;
}

inline std::string key_name(const std::string& prefix, uint64_t n) {
  char number[16];
  std::snprintf(number, sizeof number, "%06llu", static_cast<unsigned long long>(n));
  return prefix + number;
}

// The whole group: the chain, three replicas with their appliers (their
// durable cursors in `positions`, the head's WalStreamProgress), the head
// on its own disk, and the history of its writes. The head can be lost
// (its machine and directory gone), crash and resume (its process), or die
// between two records of one Sync (`records_until_crash`).
struct Cluster {
  // `eager_bytes`: the head's ReplicatedWalOptions::eager_bytes (0: a
  // record's worth; large: every byte waits for its Sync).
  explicit Cluster(uint64_t log_bytes = 16 << 10, uint64_t db_bytes = 64 << 10, uint64_t eager_bytes = 0)
      : chain(log_bytes, db_bytes), head_disk(std::make_shared<PowerFailFs>()) {
    head_options.eager_bytes = eager_bytes;
    for (uint32_t r = 0; r < 3; ++r) {
      replicas.push_back(std::make_unique<Replica>(chain, r, tmp.sub("replica" + std::to_string(r))));
      replicas.back()->positions = &positions;
      const Status s = replicas.back()->open();
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    head_options.fault_before_record = [this]() -> Status {
      if (head_down) return unavailable("the head's machine is down");
      if (records_until_crash > 0 && --records_until_crash == 0) {
        head_down = true;
        return unavailable("the head's machine went down between two records");
      }
      return ok_status();
    };
    head = std::make_unique<Head>(chain, tmp.sub("head"), head_options, &positions, head_disk);
  }
  ~Cluster() {
    head.reset();
    replicas.clear();
  }

  // A write through the head: synced or not. Recorded in the history when
  // RocksDB took it (acknowledged, or failed in the WAL's replication, which
  // may have reached the replicas); false when it failed.
  bool write(const std::string& key, const std::optional<std::string>& value, bool sync) {
    ::rocksdb::WriteOptions wo;
    wo.sync = sync;
    const ::rocksdb::Status s = value ? head->db->Put(wo, key, *value) : head->db->Delete(wo, key);
    if (s.ok() || head_down) {
      if (value) {
        history.put(key, *value);
      } else {
        history.del(key);
      }
    }
    if (s.ok() && sync) history.all_durable();
    return s.ok();
  }
  // DB::Flush (a memtable switch and an SST): every write before it is
  // durable when it returns.
  bool flush() {
    const bool ok = head->db->Flush(::rocksdb::FlushOptions()).ok();
    if (ok) history.all_durable();
    return ok;
  }
  bool compact() { return head->db->CompactRange(::rocksdb::CompactRangeOptions(), nullptr, nullptr).ok(); }

  // The head's machine is lost, its directory with it.
  void lose_head() {
    head_down = true;
    head_disk->crash();
    head.reset();
    std::error_code ec;
    fs::remove_all(tmp.sub("head"), ec);
  }
  // The head's process crashes (its files as the OS has them) and restarts:
  // the TxnClient resumes from replica 0, the stream goes on from the local
  // WALs, RocksDB reopens its directory.
  void crash_and_resume_head() {
    head_down = true;
    head_disk->crash();
    head.reset();
    head_disk->restart(/*power_failure=*/false, 0);
    chain.txn.reset();
    hyperloop::TxnOptions o;
    o.log_bytes = chain.options.log_bytes;
    o.db_bytes = chain.options.db_bytes;
    o.lock_timeout_ns = chain.options.lock_timeout_ns;
    o.resume = true;
    auto t = hyperloop::TxnClient::initialize(*chain.client, chain.data, chain.locks, o);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    chain.txn = std::move(t).value();
    head_down = false;
    records_until_crash = 0;
    head = std::make_unique<Head>(chain, tmp.sub("head"), head_options, &positions, head_disk, /*resume=*/true);
    ASSERT_NE(head->db, nullptr);
  }

  // Replica r as the only survivor: its machine power-fails (PM and disk),
  // it replays its log and applies its stream, and its directory, reopened
  // with plain RocksDB, must hold a prefix of the history covering every
  // acknowledged write.
  PrefixCheck sole_survivor(uint32_t r, uint64_t seed, std::string* error) {
    Replica& replica = *replicas[r];
    replica.crash(/*power_failure=*/true, seed);
    chain.replica(r).domain->power_fail(seed);
    const Status s = replica.recover();
    if (!s.ok()) {
      *error = "recovering: " + s.to_string();
      return {};
    }
    replica.close();
    const auto state = reopen_plain(replica.dir, error);
    if (!state) return {};
    return check_prefix(*state, history, history.durable);
  }

  Chain chain;
  TempDir tmp;
  AppliedPositions positions{3};
  std::vector<std::unique_ptr<Replica>> replicas;
  std::shared_ptr<PowerFailFs> head_disk;
  ReplicatedWalOptions head_options;
  bool head_down = false;
  uint64_t records_until_crash = 0;  // > 0: the head dies before that many more records
  std::unique_ptr<Head> head;
  History history;
};

}  // namespace ferry::rocks::testing
