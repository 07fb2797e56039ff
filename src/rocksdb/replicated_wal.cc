// Replicated RocksDB, the head's side (§5.1): the file system wrapper, the
// WAL files it hands RocksDB, and the replication of their bytes into the
// replicas' WAL stream through TxnClient::append, in the stream's order,
// within the room the replicas' appliers have given back.
#include "ferry/rocksdb/replicated_wal.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <system_error>
#include <vector>

#include "ferry/common/assert.h"

namespace ferry::rocks {

using ::rocksdb::FileOptions;
using ::rocksdb::FSWritableFile;
using ::rocksdb::IODebugContext;
using ::rocksdb::IOOptions;
using ::rocksdb::IOStatus;
using ::rocksdb::Slice;

namespace {

constexpr uint64_t kMinLogBytes = 1024;
// A record's overhead in the log ring beyond its chunk's bytes: the record
// header, three entries (the chunk in at most two pieces at the ring's end,
// the stream header), each padded to 8, the stream header, the record's
// padding to 64, and a 64-byte margin.
constexpr uint64_t kRecordOverheadBytes =
    hyperloop::kTxnRecordHeaderBytes + 3 * hyperloop::kTxnEntryHeaderBytes + 2 * 8 + kWalStreamHeaderBytes + 64 + 64;

IOStatus to_io_status(const Status& s) {
  if (s.ok()) return IOStatus::OK();
  const std::string m = "ferry replicated WAL: " + s.to_string();
  return s.code() == Code::kResourceExhausted ? IOStatus::NoSpace(m) : IOStatus::IOError(m);
}

uint64_t random_stream_id() {
  std::random_device rd;
  for (;;) {
    const uint64_t id = (uint64_t{rd()} << 32) | rd();
    if (id != 0) return id;
  }
}

}  // namespace

namespace detail {

// An open WAL file as the replicator sees it: bytes waiting to be streamed.
class StreamedFile {
 public:
  virtual ~StreamedFile() = default;
  // Streams this file's own waiting bytes (no ordering step). Replicator's
  // mutex held.
  virtual Status stream_own_pending_locked() = 0;
  virtual uint64_t replicated_locked() const = 0;
};

// The state shared by the file system and its open WAL files: the TxnClient,
// the stream header as last written, and the open WALs. `mu` guards
// everything here and every open WAL file's replication state, and is held
// across each TxnClient call (its one-thread rule).
class Replicator {
 public:
  Replicator(hyperloop::TxnClient& txn, const ReplicatedWalOptions& options, WalStreamProgress* progress,
             uint64_t log_bytes, uint64_t db_bytes)
      : txn_(txn), options_(options), progress_(progress), capacity_(wal_stream_capacity(db_bytes)) {
    max_chunk_ = std::min((log_bytes / 2 - kRecordOverheadBytes) / 64 * 64, capacity_ / 4 / 64 * 64);
    if (options_.eager_bytes == 0) options_.eager_bytes = max_chunk_;
    scratch_.resize(kWalChunkHeaderBytes + max_chunk_);
  }

  std::mutex mu;

  bool replicating() const { return options_.replicate; }
  // Is `fname` one of the database's WAL files? Its number if so.
  std::optional<uint64_t> wal_number(const std::string& fname) const {
    const std::optional<uint64_t> n = parse_wal_file_name(fname);
    if (!n || options_.wal_dir.empty()) return n;
    const std::filesystem::path dir = std::filesystem::path(options_.wal_dir).lexically_normal();
    const std::filesystem::path parent = std::filesystem::path(fname).parent_path().lexically_normal();
    auto strip = [](const std::filesystem::path& p) {
      std::string s = p.string();
      while (s.size() > 1 && s.back() == '/') s.pop_back();
      return s;
    };
    return strip(dir) == strip(parent) ? n : std::nullopt;
  }
  uint64_t eager_bytes() const { return options_.eager_bytes; }
  uint64_t max_chunk() const { return max_chunk_; }
  const WalStreamHeader& header() const { return header_; }
  uint64_t newest_file() const { return newest_file_; }
  bool must_resume_local() const { return must_resume_local_; }
  ReplicatedWalCounters& counters() { return counters_; }

  // At create: continue the stream the mirror holds, or start one.
  Status start_locked() {
    // A resumed TxnClient re-queued the records appended before the
    // restart: executed, the mirror holds the stream as the replicas will.
    FERRY_RETURN_IF_ERROR(catch_up_locked());
    std::array<uint8_t, kWalStreamHeaderBytes> h;
    std::memcpy(h.data(), txn_.db().data(), h.size());
    Result<WalStreamHeader> found = decode_wal_stream_header(h, capacity_);
    if (found.ok()) {
      header_ = *found;
      must_resume_local_ = true;
      newest_file_ = header_.last_file;
      return ok_status();
    }
    if (found.status().code() != Code::kNotFound) return found.status();
    header_ = WalStreamHeader{};
    header_.stream_id = options_.stream_id != 0 ? options_.stream_id : random_stream_id();
    std::array<uint8_t, kWalStreamHeaderBytes> enc;
    encode_wal_stream_header(header_, enc);
    const hyperloop::TxnWrite w[] = {{0, enc}};
    return append_locked(w);
  }

  void opened_locked(uint64_t number, StreamedFile* file) {
    open_[number] = file;
    newest_file_ = std::max(newest_file_, number);
    ++counters_.wal_files;
  }
  void closed_locked(uint64_t number, StreamedFile* file) {
    auto it = open_.find(number);
    if (it != open_.end() && it->second == file) open_.erase(it);
  }
  uint64_t replicated_of_locked(uint64_t number) const {
    auto it = open_.find(number);
    if (it != open_.end()) return it->second->replicated_locked();
    return number == header_.last_file ? header_.last_file_bytes : 0;
  }

  // The ordering rule: before WAL `number`'s bytes (or at its opening),
  // every older open WAL streams what it still holds, oldest first.
  Status stream_older_than_locked(uint64_t number) {
    for (auto& [n, file] : open_) {
      if (n >= number) break;
      FERRY_RETURN_IF_ERROR(file->stream_own_pending_locked());
    }
    return ok_status();
  }

  // WAL `file`'s bytes from `offset` are `bytes`: chunks of at most
  // max_chunk_ bytes, each a record with the header that covers it, durable
  // on every replica when this returns. `*done` says how many went out
  // (all unless an error). kResourceExhausted: the stream stayed full.
  Status stream_locked(uint64_t file, uint64_t offset, std::span<const uint8_t> bytes, uint64_t* done) {
    *done = 0;
    const bool continues = file == header_.last_file && offset == header_.last_file_bytes;
    const bool starts = file > header_.last_file && offset == 0;
    if (!continues && !starts) {
      // An older WAL after a newer one, or a hole: the stream would not be
      // RocksDB's order any more. RocksDB does not write so; refuse.
      return failed_precondition("WAL " + std::to_string(file) + " bytes at " + std::to_string(offset) +
                                 " cannot follow WAL " + std::to_string(header_.last_file) + " at " +
                                 std::to_string(header_.last_file_bytes) + " in the stream");
    }
    while (*done < bytes.size()) {
      const uint64_t n = std::min<uint64_t>(max_chunk_, bytes.size() - *done);
      const uint64_t total = wal_chunk_stream_bytes(n);
      FERRY_RETURN_IF_ERROR(make_room_locked(total));
      const uint64_t position = header_.end;
      const std::span<const uint8_t> data = bytes.subspan(*done, n);
      encode_wal_chunk_header(position, file, offset + *done, data,
                              std::span<uint8_t, kWalChunkHeaderBytes>(scratch_.data(), kWalChunkHeaderBytes));
      std::memcpy(scratch_.data() + kWalChunkHeaderBytes, data.data(), n);
      WalStreamHeader next = header_;
      next.end = position + total;
      next.last_file = file;
      next.last_file_bytes = offset + *done + n;
      std::array<uint8_t, kWalStreamHeaderBytes> enc;
      encode_wal_stream_header(next, enc);
      // The chunk (in two pieces where it wraps at the ring's end), then the
      // header that covers it: one record, applied whole on every replica
      // by ExecuteAndAdvance or by replay.
      const std::span<const uint8_t> chunk(scratch_.data(), kWalChunkHeaderBytes + n);
      const uint64_t at = position % capacity_;
      const uint64_t first = std::min<uint64_t>(chunk.size(), capacity_ - at);
      hyperloop::TxnWrite w[3];
      size_t count = 0;
      w[count++] = {kWalStreamHeaderBytes + at, chunk.first(first)};
      if (first < chunk.size()) w[count++] = {kWalStreamHeaderBytes, chunk.subspan(first)};
      w[count++] = {0, enc};
      FERRY_RETURN_IF_ERROR(append_locked(std::span<const hyperloop::TxnWrite>(w, count)));
      header_ = next;
      *done += n;
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

  void resumed_local_locked() { must_resume_local_ = false; }

 private:
  // Room for `total` more stream bytes: the ring keeps [begin, end); begin
  // moves only to where every replica's applier has durably reached.
  Status make_room_locked(uint64_t total) {
    for (;;) {
      if (header_.end + total - header_.begin <= capacity_) return ok_status();
      if (progress_ == nullptr) {
        return resource_exhausted("the WAL stream is full (" + std::to_string(capacity_) +
                                  " bytes) and nothing reports the replicas' progress");
      }
      // The appliers see only executed records.
      FERRY_RETURN_IF_ERROR(catch_up_locked());
      FERRY_ASSIGN_OR_RETURN(uint64_t needed, progress_->needed_from());
      needed = std::min(needed, header_.end);
      if (needed > header_.begin) {
        FERRY_ASSERT(needed % kWalStreamAlign == 0, "a replica needs the stream from ", needed);
        counters_.reclaimed_bytes += needed - header_.begin;
        header_.begin = needed;
        continue;
      }
      ++counters_.stream_full_waits;
      const Status w = progress_->wait_for_room();
      if (!w.ok()) {
        return resource_exhausted("the WAL stream is full: every replica still needs it from " +
                                  std::to_string(header_.begin) + " (" + w.to_string() + ")");
      }
    }
  }

  // Append; a full ring executes its oldest record (ExecuteAndAdvance) and
  // tries again: records are at most half the ring, so a drained ring takes it.
  Status append_locked(std::span<const hyperloop::TxnWrite> record) {
    if (options_.fault_before_record) FERRY_RETURN_IF_ERROR(options_.fault_before_record());
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
  WalStreamProgress* progress_;
  uint64_t capacity_;
  uint64_t max_chunk_ = 0;
  WalStreamHeader header_;                  // as appended last (durable on every replica)
  std::map<uint64_t, StreamedFile*> open_;  // the open WAL files, by number
  uint64_t newest_file_ = 0;                // the newest WAL opened (or streamed)
  bool must_resume_local_ = false;          // a continued stream: resume_local_wals first
  std::vector<uint8_t> scratch_;            // a chunk's header and data
  ReplicatedWalCounters counters_;
};

}  // namespace detail

namespace {

// A WAL file: the local file as usual; the bytes appended since the last
// replication wait in `pending_` and go to the stream at Sync (or Append,
// past eager_bytes, or Close, or when a newer WAL opens or streams). Every
// field is guarded by the replicator's mutex.
class ReplicatedWalFile final : public ::rocksdb::FSWritableFileOwnerWrapper, public detail::StreamedFile {
 public:
  ReplicatedWalFile(std::unique_ptr<FSWritableFile> file, std::shared_ptr<detail::Replicator> rep, uint64_t number)
      : FSWritableFileOwnerWrapper(std::move(file)), rep_(std::move(rep)), number_(number) {}
  ~ReplicatedWalFile() override {
    std::lock_guard lock(rep_->mu);
    rep_->closed_locked(number_, this);
  }

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
    if (size < replicated_) {
      return IOStatus::IOError("ferry replicated WAL: truncating WAL " + std::to_string(number_) + " to " +
                               std::to_string(size) + " bytes below the " + std::to_string(replicated_) +
                               " the replicas hold");
    }
    pending_.resize(size - replicated_, '\0');
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
    return to_io_status(stream_pending_locked());
  }

  Status stream_own_pending_locked() override {
    if (pending_.empty()) return ok_status();
    if (number_ < rep_->newest_file()) rep_->counters().older_wal_bytes += pending_.size();
    const auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(pending_.data()), pending_.size());
    uint64_t done = 0;
    const Status s = rep_->stream_locked(number_, replicated_, bytes, &done);
    replicated_ += done;
    pending_.erase(0, done);
    return s;
  }
  uint64_t replicated_locked() const override { return replicated_; }

 private:
  static constexpr uint64_t kAtEnd = ~uint64_t{0};

  // `data` was written locally at `offset` (kAtEnd: the end).
  IOStatus appended(uint64_t offset, const Slice& data) {
    std::lock_guard lock(rep_->mu);
    if (offset == kAtEnd) offset = appended_;
    if (offset < replicated_) {
      return IOStatus::IOError("ferry replicated WAL: a rewrite of WAL " + std::to_string(number_) + " at " +
                               std::to_string(offset) + ", below the " + std::to_string(replicated_) +
                               " bytes the replicas hold");
    }
    pending_.resize(offset - replicated_, '\0');
    pending_.append(data.data(), data.size());
    appended_ = offset + data.size();
    if (number_ < rep_->header().last_file) {
      return IOStatus::IOError("ferry replicated WAL: WAL " + std::to_string(number_) + " written after WAL " +
                               std::to_string(rep_->header().last_file) + " reached the replicas");
    }
    if (pending_.size() > rep_->eager_bytes()) {
      ++rep_->counters().eager_replications;
      return to_io_status(stream_pending_locked());
    }
    return IOStatus::OK();
  }

  IOStatus synced() {
    std::lock_guard lock(rep_->mu);
    ++rep_->counters().syncs;
    return to_io_status(stream_pending_locked());
  }

  // The ordering rule, then this file's bytes.
  Status stream_pending_locked() {
    if (pending_.empty()) return ok_status();
    FERRY_RETURN_IF_ERROR(rep_->stream_older_than_locked(number_));
    return stream_own_pending_locked();
  }

  std::shared_ptr<detail::Replicator> rep_;
  const uint64_t number_;
  uint64_t appended_ = 0;    // the local file's size, as written through this file
  uint64_t replicated_ = 0;  // bytes [0, replicated_) are on every replica
  std::string pending_;      // bytes [replicated_, appended_)
};

}  // namespace

// ---- the file system ----

ReplicatedWalFileSystem::ReplicatedWalFileSystem(std::shared_ptr<::rocksdb::FileSystem> base,
                                                 std::shared_ptr<detail::Replicator> rep)
    : FileSystemWrapper(base), rep_(std::move(rep)) {}

ReplicatedWalFileSystem::~ReplicatedWalFileSystem() = default;

Result<std::shared_ptr<ReplicatedWalFileSystem>> ReplicatedWalFileSystem::create(
    std::shared_ptr<::rocksdb::FileSystem> base, hyperloop::TxnClient& txn, const ReplicatedWalOptions& options,
    WalStreamProgress* progress) {
  if (base == nullptr) return invalid_argument("replicated WAL: no base file system");
  const uint64_t log_bytes = txn.db_offset() - hyperloop::kTxnControlBytes;
  const uint64_t db_bytes = txn.db().size();
  if (log_bytes < kMinLogBytes) {
    return invalid_argument("replicated WAL: the log ring has " + std::to_string(log_bytes) + " bytes; at least " +
                            std::to_string(kMinLogBytes) + " are needed");
  }
  if (wal_stream_capacity(db_bytes) < 4 * kWalStreamAlign * 4) {
    return invalid_argument("replicated WAL: the database area (" + std::to_string(db_bytes) +
                            " bytes) has no room for a WAL stream");
  }
  auto rep = std::make_shared<detail::Replicator>(txn, options, progress, log_bytes, db_bytes);
  if (options.replicate) {
    std::lock_guard lock(rep->mu);
    FERRY_RETURN_IF_ERROR(rep->start_locked());
  }
  return std::shared_ptr<ReplicatedWalFileSystem>(new ReplicatedWalFileSystem(std::move(base), std::move(rep)));
}

IOStatus ReplicatedWalFileSystem::wrap_wal(uint64_t number, std::unique_ptr<FSWritableFile>* result) {
  std::lock_guard lock(rep_->mu);
  if (rep_->must_resume_local()) {
    result->reset();
    return IOStatus::IOError(
        "ferry replicated WAL: the stream continues an earlier head's; call "
        "resume_local_wals before RocksDB opens a WAL");
  }
  if (number <= rep_->header().last_file) {
    result->reset();
    return IOStatus::IOError("ferry replicated WAL: WAL " + std::to_string(number) + " is not newer than WAL " +
                             std::to_string(rep_->header().last_file) + " in the stream");
  }
  auto file = std::make_unique<ReplicatedWalFile>(std::move(*result), rep_, number);
  rep_->opened_locked(number, file.get());
  *result = std::move(file);
  // A memtable switch: the older WALs' waiting bytes go now (DB::Flush
  // returns after this; the flushed data is then on every replica).
  return to_io_status(rep_->stream_older_than_locked(number));
}

IOStatus ReplicatedWalFileSystem::NewWritableFile(const std::string& fname, const FileOptions& file_opts,
                                                  std::unique_ptr<FSWritableFile>* result, IODebugContext* dbg) {
  IOStatus s = target()->NewWritableFile(fname, file_opts, result, dbg);
  const std::optional<uint64_t> number = rep_->wal_number(fname);
  if (!s.ok() || !number || !rep_->replicating()) return s;
  return wrap_wal(*number, result);
}

IOStatus ReplicatedWalFileSystem::ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                                    const FileOptions& file_opts,
                                                    std::unique_ptr<FSWritableFile>* result, IODebugContext* dbg) {
  IOStatus s = target()->ReuseWritableFile(fname, old_fname, file_opts, result, dbg);
  const std::optional<uint64_t> number = rep_->wal_number(fname);
  if (!s.ok() || !number || !rep_->replicating()) return s;
  return wrap_wal(*number, result);
}

IOStatus ReplicatedWalFileSystem::ReopenWritableFile(const std::string& fname, const FileOptions& file_opts,
                                                     std::unique_ptr<FSWritableFile>* result, IODebugContext* dbg) {
  if (rep_->wal_number(fname) && rep_->replicating()) {
    return IOStatus::NotSupported("ferry replicated WAL: reopening WAL file for writing", fname);
  }
  return target()->ReopenWritableFile(fname, file_opts, result, dbg);
}

Status ReplicatedWalFileSystem::resume_local_wals(const std::string& db_dir) {
  std::lock_guard lock(rep_->mu);
  if (!rep_->replicating()) return ok_status();
  std::vector<std::string> children;
  IOStatus s = target()->GetChildren(db_dir, IOOptions(), &children, nullptr);
  if (!s.ok()) return unavailable("replicated WAL: listing " + db_dir + ": " + s.ToString());
  const uint64_t last = rep_->header().last_file;
  std::vector<uint64_t> numbers;
  for (const std::string& c : children) {
    const std::optional<uint64_t> n = parse_wal_file_name(c);
    if (n && *n >= last && *n != 0) numbers.push_back(*n);
  }
  std::sort(numbers.begin(), numbers.end());
  for (const uint64_t n : numbers) {
    std::string bytes;
    s = ReadFileToString(target(), db_dir + "/" + wal_file_name(n), &bytes);
    if (!s.ok()) return unavailable("replicated WAL: reading WAL " + std::to_string(n) + ": " + s.ToString());
    const uint64_t from = n == last ? rep_->header().last_file_bytes : 0;
    if (bytes.size() < from) {
      return data_loss("replicated WAL: the head's WAL " + std::to_string(n) + " has " + std::to_string(bytes.size()) +
                       " bytes; the replicas hold " + std::to_string(from));
    }
    if (bytes.size() == from) continue;
    const auto tail =
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()).subspan(from);
    uint64_t done = 0;
    FERRY_RETURN_IF_ERROR(rep_->stream_locked(n, from, tail, &done));
  }
  rep_->resumed_local_locked();
  return ok_status();
}

Result<WalStreamCursor> ReplicatedWalFileSystem::sync_stream() {
  std::lock_guard lock(rep_->mu);
  if (!rep_->replicating()) return failed_precondition("replicated WAL: replication is off");
  FERRY_RETURN_IF_ERROR(rep_->stream_older_than_locked(~uint64_t{0}));
  FERRY_RETURN_IF_ERROR(rep_->catch_up_locked());
  const WalStreamHeader& h = rep_->header();
  return WalStreamCursor{h.stream_id, h.end, h.last_file, h.last_file_bytes};
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
  return rep_->newest_file();
}

uint64_t ReplicatedWalFileSystem::replicated_bytes() const {
  std::lock_guard lock(rep_->mu);
  return rep_->replicated_of_locked(rep_->newest_file());
}

WalStreamHeader ReplicatedWalFileSystem::stream_header() const {
  std::lock_guard lock(rep_->mu);
  return rep_->header();
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

}  // namespace ferry::rocks
