// Replicated RocksDB WAL (§5.1): the file system wrapper, the WAL files it
// hands RocksDB, the replication of their bytes at Sync through
// TxnClient::append, and the replica side (image, recovery directory).
#include "ferry/rocksdb/replicated_wal.h"

#include <array>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <system_error>

#include "ferry/common/assert.h"
#include "ferry/common/checksum.h"

namespace ferry::rocks {

using ::rocksdb::FileOptions;
using ::rocksdb::FSWritableFile;
using ::rocksdb::IODebugContext;
using ::rocksdb::IOOptions;
using ::rocksdb::IOStatus;
using ::rocksdb::Slice;

namespace {

constexpr uint64_t kHeaderFieldBytes = 32;  // magic, number, length, checksum
constexpr uint64_t kMinLogBytes = 1024;

uint64_t load_u64(const uint8_t* at) {
  uint64_t v;
  std::memcpy(&v, at, 8);
  return v;
}
void store_u64(uint8_t* at, uint64_t v) { std::memcpy(at, &v, 8); }

std::array<uint8_t, kHeaderFieldBytes> encode_header(uint64_t number, uint64_t length) {
  std::array<uint8_t, kHeaderFieldBytes> h{};
  store_u64(h.data(), kWalImageMagic);
  store_u64(h.data() + 8, number);
  store_u64(h.data() + 16, length);
  store_u64(h.data() + 24, checksum64(std::span<const uint8_t>(h.data(), 24)));
  return h;
}

IOStatus to_io_status(const Status& s) {
  if (s.ok()) return IOStatus::OK();
  const std::string m = "ferry replicated WAL: " + s.to_string();
  return s.code() == Code::kResourceExhausted ? IOStatus::NoSpace(m) : IOStatus::IOError(m);
}

}  // namespace

namespace detail {

// The state shared by the file system and its open WAL files: the TxnClient
// and what the image holds. `mu` guards everything here and every open WAL
// file's replication state, and is held across each TxnClient call (its
// one-thread rule).
class Replicator {
 public:
  Replicator(hyperloop::TxnClient& txn, const ReplicatedWalOptions& options, uint64_t log_bytes, uint64_t db_bytes)
      : txn_(txn), options_(options), image_bytes_(db_bytes - kWalImageHeaderBytes) {
    // A record: its header, two entries (data padded to 8, the 32-byte
    // image header), padded to 64. Half the ring less that (and a 64-byte
    // margin), in whole 64-byte units: a drained ring always takes it.
    max_chunk_ = (log_bytes / 2 - hyperloop::kTxnRecordHeaderBytes - 2 * hyperloop::kTxnEntryHeaderBytes -
                  kHeaderFieldBytes - 64) /
                 64 * 64;
    if (options_.eager_bytes == 0) options_.eager_bytes = max_chunk_;
  }

  std::mutex mu;

  bool replicating() const { return options_.replicate; }
  uint64_t eager_bytes() const { return options_.eager_bytes; }
  uint64_t max_chunk() const { return max_chunk_; }
  uint64_t file() const { return file_; }
  uint64_t length() const { return length_; }
  ReplicatedWalCounters& counters() { return counters_; }

  // A new WAL: the image restarts with {number, 0}.
  Status start_file_locked(uint64_t number) {
    const auto h = encode_header(number, 0);
    const hyperloop::TxnWrite w[] = {{0, h}};
    FERRY_RETURN_IF_ERROR(append_locked(w));
    file_ = number;
    length_ = 0;
    ++counters_.wal_files;
    return ok_status();
  }

  // WAL `number`'s bytes from `offset` (at most the image's length: no
  // holes) are `bytes`, and it ends there: records of at most max_chunk_
  // bytes, each moving the header's length, durable on every replica when
  // this returns. kResourceExhausted when the image cannot hold them.
  Status replicate_locked(uint64_t number, uint64_t offset, std::span<const uint8_t> bytes) {
    FERRY_ASSERT(number == file_, "replicating WAL ", number, " into the image of ", file_);
    if (offset > length_) {
      return internal_error("a replication at " + std::to_string(offset) + " past the image's " +
                            std::to_string(length_) + " bytes");
    }
    if (offset > image_bytes_ || bytes.size() > image_bytes_ - offset) {
      return resource_exhausted("WAL " + std::to_string(number) + " grows to " +
                                std::to_string(offset + bytes.size()) + " bytes; the image holds " +
                                std::to_string(image_bytes_));
    }
    if (bytes.empty()) {  // shortened by Truncate: the header alone
      const auto h = encode_header(number, offset);
      const hyperloop::TxnWrite w[] = {{0, h}};
      FERRY_RETURN_IF_ERROR(append_locked(w));
      length_ = offset;
      return ok_status();
    }
    for (uint64_t done = 0; done < bytes.size();) {
      const uint64_t n = std::min<uint64_t>(max_chunk_, bytes.size() - done);
      const uint64_t end = offset + done + n;
      const auto h = encode_header(number, end);
      // The bytes first, then the header that covers them (one record:
      // applied whole on every replica, by ExecuteAndAdvance or by replay).
      const hyperloop::TxnWrite w[] = {{kWalImageHeaderBytes + offset + done, bytes.subspan(done, n)}, {0, h}};
      FERRY_RETURN_IF_ERROR(append_locked(w));
      length_ = end;
      done += n;
      counters_.bytes += n;
    }
    return ok_status();
  }

  Status catch_up_locked() {
    for (;;) {
      FERRY_ASSIGN_OR_RETURN(const bool executed, catch_up_one_locked());
      if (!executed) return ok_status();
    }
  }

  Result<bool> catch_up_one_locked() {
    const Status s = txn_.execute_and_advance();
    if (s.code() == Code::kNotFound) return false;
    FERRY_RETURN_IF_ERROR(s);
    ++counters_.caught_up;
    return true;
  }

 private:
  // Append; a full ring executes its oldest record (ExecuteAndAdvance) and
  // tries again: records are at most half the ring, so a drained ring takes it.
  Status append_locked(std::span<const hyperloop::TxnWrite> record) {
    for (;;) {
      const Result<uint64_t> lsn = txn_.append(record);
      if (lsn.ok()) {
        ++counters_.records;
        return ok_status();
      }
      if (lsn.status().code() != Code::kResourceExhausted) return lsn.status();
      const Status s = txn_.execute_and_advance();
      if (s.code() == Code::kNotFound) return internal_error("a drained log ring refused a record");
      FERRY_RETURN_IF_ERROR(s);
      ++counters_.executes_for_room;
    }
  }

  hyperloop::TxnClient& txn_;
  ReplicatedWalOptions options_;
  uint64_t image_bytes_;
  uint64_t max_chunk_ = 0;
  uint64_t file_ = 0;    // the WAL the image holds
  uint64_t length_ = 0;  // its bytes there, as appended (durable on every replica)
  ReplicatedWalCounters counters_;
};

}  // namespace detail

namespace {

// A WAL file: the local file as usual; the bytes appended since the last
// replication wait in `pending_` and go to the replicas at Sync (or Append,
// past eager_bytes, or Close). Every field is guarded by the replicator's mutex.
class ReplicatedWalFile final : public ::rocksdb::FSWritableFileOwnerWrapper {
 public:
  ReplicatedWalFile(std::unique_ptr<FSWritableFile> file, std::shared_ptr<detail::Replicator> rep, uint64_t number)
      : FSWritableFileOwnerWrapper(std::move(file)), rep_(std::move(rep)), number_(number) {}

  IOStatus Append(const Slice& data, const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = target()->Append(data, options, dbg);
    return s.ok() ? appended(kAtEnd, data) : s;
  }
  IOStatus Append(const Slice& data, const IOOptions& options, const ::rocksdb::DataVerificationInfo& info,
                  IODebugContext* dbg) override {
    IOStatus s = target()->Append(data, options, info, dbg);
    return s.ok() ? appended(kAtEnd, data) : s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            IODebugContext* dbg) override {
    IOStatus s = target()->PositionedAppend(data, offset, options, dbg);
    return s.ok() ? appended(offset, data) : s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            const ::rocksdb::DataVerificationInfo& info, IODebugContext* dbg) override {
    IOStatus s = target()->PositionedAppend(data, offset, options, info, dbg);
    return s.ok() ? appended(offset, data) : s;
  }

  IOStatus Truncate(uint64_t size, const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = target()->Truncate(size, options, dbg);
    if (!s.ok()) return s;
    std::lock_guard lock(rep_->mu);
    if (size >= replicated_) {
      pending_.resize(size - replicated_, '\0');
    } else {  // below what the replicas hold: the header must say so
      replicated_ = size;
      pending_.clear();
      shortened_ = true;
    }
    appended_ = size;
    return IOStatus::OK();
  }

  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = target()->Sync(options, dbg);
    return s.ok() ? synced() : s;
  }
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = target()->Fsync(options, dbg);
    return s.ok() ? synced() : s;
  }
  IOStatus Close(const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = target()->Close(options, dbg);
    if (!s.ok()) return s;
    std::lock_guard lock(rep_->mu);
    return to_io_status(replicate_pending_locked());
  }

 private:
  static constexpr uint64_t kAtEnd = ~uint64_t{0};

  // `data` was written locally at `offset` (kAtEnd: the end).
  IOStatus appended(uint64_t offset, const Slice& data) {
    std::lock_guard lock(rep_->mu);
    if (offset == kAtEnd) offset = appended_;
    if (offset < replicated_) {
      // A rewrite of replicated bytes (PositionedAppend rewrites the last
      // partial sector): `data` covers everything from `offset` on.
      replicated_ = offset;
      pending_.clear();
    } else {
      pending_.resize(offset - replicated_, '\0');
    }
    pending_.append(data.data(), data.size());
    appended_ = offset + data.size();
    if (pending_.size() > rep_->eager_bytes()) {
      ++rep_->counters().eager_replications;
      return to_io_status(replicate_pending_locked());
    }
    return IOStatus::OK();
  }

  IOStatus synced() {
    std::lock_guard lock(rep_->mu);
    ++rep_->counters().syncs;
    return to_io_status(replicate_pending_locked());
  }

  Status replicate_pending_locked() {
    if (pending_.empty() && !shortened_) return ok_status();
    if (number_ != rep_->file()) {
      // RocksDB moved to a newer WAL: the image holds that one; these bytes
      // stay in the head's file (their data is in a memtable being flushed).
      ++rep_->counters().stale_syncs;
    } else {
      const auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(pending_.data()), pending_.size());
      FERRY_RETURN_IF_ERROR(rep_->replicate_locked(number_, replicated_, bytes));
    }
    replicated_ = appended_;
    pending_.clear();
    shortened_ = false;
    return ok_status();
  }

  std::shared_ptr<detail::Replicator> rep_;
  const uint64_t number_;
  uint64_t appended_ = 0;    // the local file's size, as written through this file
  uint64_t replicated_ = 0;  // bytes [0, replicated_) are on every replica
  std::string pending_;      // bytes [replicated_, appended_)
  bool shortened_ = false;   // truncated below replicated_: the header must follow
};

}  // namespace

// ---- the file system ----

ReplicatedWalFileSystem::ReplicatedWalFileSystem(std::shared_ptr<::rocksdb::FileSystem> base,
                                                 std::shared_ptr<detail::Replicator> rep)
    : FileSystemWrapper(base), rep_(std::move(rep)) {}

ReplicatedWalFileSystem::~ReplicatedWalFileSystem() = default;

Result<std::shared_ptr<ReplicatedWalFileSystem>> ReplicatedWalFileSystem::create(
    std::shared_ptr<::rocksdb::FileSystem> base, hyperloop::TxnClient& txn, const ReplicatedWalOptions& options) {
  if (base == nullptr) return invalid_argument("replicated WAL: no base file system");
  const uint64_t log_bytes = txn.db_offset() - hyperloop::kTxnControlBytes;
  const uint64_t db_bytes = txn.db().size();
  if (log_bytes < kMinLogBytes) {
    return invalid_argument("replicated WAL: the log ring has " + std::to_string(log_bytes) + " bytes; at least " +
                            std::to_string(kMinLogBytes) + " are needed");
  }
  if (db_bytes <= kWalImageHeaderBytes) {
    return invalid_argument("replicated WAL: the database area (" + std::to_string(db_bytes) +
                            " bytes) cannot hold the image header and any WAL");
  }
  auto rep = std::make_shared<detail::Replicator>(txn, options, log_bytes, db_bytes);
  return std::shared_ptr<ReplicatedWalFileSystem>(new ReplicatedWalFileSystem(std::move(base), std::move(rep)));
}

IOStatus ReplicatedWalFileSystem::wrap_wal(uint64_t number, std::unique_ptr<FSWritableFile>* result) {
  std::lock_guard lock(rep_->mu);
  const Status s = rep_->start_file_locked(number);
  if (!s.ok()) {
    result->reset();
    return to_io_status(s);
  }
  *result = std::make_unique<ReplicatedWalFile>(std::move(*result), rep_, number);
  return IOStatus::OK();
}

IOStatus ReplicatedWalFileSystem::NewWritableFile(const std::string& fname, const FileOptions& file_opts,
                                                  std::unique_ptr<FSWritableFile>* result, IODebugContext* dbg) {
  IOStatus s = target()->NewWritableFile(fname, file_opts, result, dbg);
  const std::optional<uint64_t> number = parse_wal_file_name(fname);
  if (!s.ok() || !number || !rep_->replicating()) return s;
  return wrap_wal(*number, result);
}

IOStatus ReplicatedWalFileSystem::ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                                    const FileOptions& file_opts,
                                                    std::unique_ptr<FSWritableFile>* result, IODebugContext* dbg) {
  IOStatus s = target()->ReuseWritableFile(fname, old_fname, file_opts, result, dbg);
  const std::optional<uint64_t> number = parse_wal_file_name(fname);
  if (!s.ok() || !number || !rep_->replicating()) return s;
  return wrap_wal(*number, result);
}

IOStatus ReplicatedWalFileSystem::ReopenWritableFile(const std::string& fname, const FileOptions& file_opts,
                                                     std::unique_ptr<FSWritableFile>* result, IODebugContext* dbg) {
  if (parse_wal_file_name(fname) && rep_->replicating()) {
    return IOStatus::NotSupported("ferry replicated WAL: reopening WAL file for writing", fname);
  }
  return target()->ReopenWritableFile(fname, file_opts, result, dbg);
}

Status ReplicatedWalFileSystem::catch_up() {
  std::lock_guard lock(rep_->mu);
  return rep_->catch_up_locked();
}

Result<bool> ReplicatedWalFileSystem::catch_up_one() {
  std::lock_guard lock(rep_->mu);
  return rep_->catch_up_one_locked();
}

uint64_t ReplicatedWalFileSystem::wal_file_number() const {
  std::lock_guard lock(rep_->mu);
  return rep_->file();
}

uint64_t ReplicatedWalFileSystem::replicated_bytes() const {
  std::lock_guard lock(rep_->mu);
  return rep_->length();
}

uint64_t ReplicatedWalFileSystem::max_chunk_bytes() const { return rep_->max_chunk(); }

ReplicatedWalCounters ReplicatedWalFileSystem::counters() const {
  std::lock_guard lock(rep_->mu);
  return rep_->counters();
}

// ---- names ----

std::string wal_file_name(uint64_t number) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%06llu.log", static_cast<unsigned long long>(number));
  return buf;
}

std::optional<uint64_t> parse_wal_file_name(std::string_view name) {
  const size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  constexpr std::string_view kSuffix = ".log";
  if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) return std::nullopt;
  const std::string_view digits = name.substr(0, name.size() - kSuffix.size());
  uint64_t number = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return number;
}

// ---- the replica side ----

Result<WalImage> read_wal_image(std::span<const uint8_t> region) {
  const uint64_t control = hyperloop::kTxnControlBytes;
  if (region.size() < control) return data_loss("replicated WAL: a region smaller than the control block");
  const uint64_t log_bytes = load_u64(region.data() + 8);
  const uint64_t db_bytes = load_u64(region.data() + 16);
  if (log_bytes == 0 || log_bytes % hyperloop::kTxnRecordAlign != 0 || log_bytes > region.size() - control ||
      db_bytes > region.size() - control - log_bytes || db_bytes < kWalImageHeaderBytes) {
    return data_loss("replicated WAL: the region holds no transaction layout with room for a WAL image");
  }
  const uint8_t* db = region.data() + control + log_bytes;
  bool zero = true;
  for (uint64_t i = 0; i < kHeaderFieldBytes; ++i) zero = zero && db[i] == 0;
  if (zero) return not_found("replicated WAL: no WAL was replicated to this region");
  const uint64_t number = load_u64(db + 8);
  const uint64_t length = load_u64(db + 16);
  if (load_u64(db) != kWalImageMagic || load_u64(db + 24) != checksum64(std::span<const uint8_t>(db, 24))) {
    return data_loss("replicated WAL: the image header fails its magic or checksum");
  }
  if (length > db_bytes - kWalImageHeaderBytes) {
    return data_loss("replicated WAL: the header's length " + std::to_string(length) + " exceeds the image");
  }
  WalImage out;
  out.file_number = number;
  out.bytes.assign(db + kWalImageHeaderBytes, db + kWalImageHeaderBytes + length);
  return out;
}

Result<WalImage> recover_wal(std::span<uint8_t> region, hyperloop::TxnReplay* replay) {
  FERRY_ASSIGN_OR_RETURN(const hyperloop::TxnReplay r, hyperloop::replay_txn_log(region));
  if (replay != nullptr) *replay = r;
  return read_wal_image(region);
}

Status build_recovery_dir(const std::string& head_dir, const WalImage* wal, const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(head_dir, ec)) return not_found("replicated WAL: " + head_dir + " is not a directory");
  if (fs::exists(out_dir, ec) && !fs::is_empty(out_dir, ec)) {
    return already_exists("replicated WAL: " + out_dir + " already holds files");
  }
  fs::create_directories(out_dir, ec);
  if (ec) return unavailable("replicated WAL: cannot create " + out_dir + ": " + ec.message());
  for (const fs::directory_entry& e : fs::directory_iterator(head_dir, ec)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    if (parse_wal_file_name(name) || name == "LOCK" || name == "LOG" || name.rfind("LOG.old", 0) == 0) continue;
    fs::copy_file(e.path(), fs::path(out_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return unavailable("replicated WAL: cannot copy " + e.path().string() + ": " + ec.message());
  }
  if (ec) return unavailable("replicated WAL: cannot list " + head_dir + ": " + ec.message());
  if (wal != nullptr) {
    const fs::path path = fs::path(out_dir) / wal_file_name(wal->file_number);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(wal->bytes.data()), static_cast<std::streamsize>(wal->bytes.size()));
    out.close();
    if (!out) return unavailable("replicated WAL: cannot write " + path.string());
  }
  return ok_status();
}

}  // namespace ferry::rocks
