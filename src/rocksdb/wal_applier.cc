// Replicated RocksDB, a replica's side (§5.1): the applier that brings the
// replica's own database up to date from the WAL stream in its PM, off the
// critical path, and the in-process table of the appliers' durable cursors.
#include "ferry/rocksdb/wal_applier.h"

#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "ferry/common/assert.h"
#include "wal_record_parser.h"

namespace ferry::rocks {

namespace {

constexpr const char* kCursorKey = "cursor";
constexpr size_t kCursorBytes = 32;

std::string encode_cursor(const WalStreamCursor& c) {
  std::string out(kCursorBytes, '\0');
  std::memcpy(out.data(), &c.stream_id, 8);
  std::memcpy(out.data() + 8, &c.position, 8);
  std::memcpy(out.data() + 16, &c.file, 8);
  std::memcpy(out.data() + 24, &c.offset, 8);
  return out;
}

Result<WalStreamCursor> decode_cursor(const std::string& v) {
  if (v.size() != kCursorBytes) return data_loss("WAL applier: a cursor of " + std::to_string(v.size()) + " bytes");
  WalStreamCursor c;
  std::memcpy(&c.stream_id, v.data(), 8);
  std::memcpy(&c.position, v.data() + 8, 8);
  std::memcpy(&c.file, v.data() + 16, 8);
  std::memcpy(&c.offset, v.data() + 24, 8);
  if (c.stream_id == 0 || c.position % kWalStreamAlign != 0) return data_loss("WAL applier: a malformed cursor");
  return c;
}

Status from_rocksdb(const ::rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return ok_status();
  const std::string m = "WAL applier: " + what + ": " + s.ToString();
  if (s.IsNotSupported() || s.IsInvalidArgument()) return unimplemented(m);
  if (s.IsCorruption()) return data_loss(m);
  return unavailable(m);
}

bool operator==(const WalStreamCursor& a, const WalStreamCursor& b) {
  return a.stream_id == b.stream_id && a.position == b.position && a.file == b.file && a.offset == b.offset;
}

// Copies a head's write batch into the replica's, refusing what the replica
// cannot apply as the head did: any column family but the default (whose
// id 0 is the same everywhere), wide columns, blob indexes, two-phase commit.
class BatchCopier final : public ::rocksdb::WriteBatch::Handler {
 public:
  BatchCopier(::rocksdb::ColumnFamilyHandle* cf, ::rocksdb::WriteBatch* out) : cf_(cf), out_(out) {}
  uint64_t operations = 0;

  ::rocksdb::Status PutCF(uint32_t id, const ::rocksdb::Slice& key, const ::rocksdb::Slice& value) override {
    if (id != 0) return other_family(id);
    ++operations;
    return out_->Put(cf_, key, value);
  }
  ::rocksdb::Status DeleteCF(uint32_t id, const ::rocksdb::Slice& key) override {
    if (id != 0) return other_family(id);
    ++operations;
    return out_->Delete(cf_, key);
  }
  ::rocksdb::Status SingleDeleteCF(uint32_t id, const ::rocksdb::Slice& key) override {
    if (id != 0) return other_family(id);
    ++operations;
    return out_->SingleDelete(cf_, key);
  }
  ::rocksdb::Status DeleteRangeCF(uint32_t id, const ::rocksdb::Slice& begin, const ::rocksdb::Slice& end) override {
    if (id != 0) return other_family(id);
    ++operations;
    return out_->DeleteRange(cf_, begin, end);
  }
  ::rocksdb::Status MergeCF(uint32_t id, const ::rocksdb::Slice& key, const ::rocksdb::Slice& value) override {
    if (id != 0) return other_family(id);
    ++operations;
    return out_->Merge(cf_, key, value);
  }
  ::rocksdb::Status PutEntityCF(uint32_t, const ::rocksdb::Slice&, const ::rocksdb::Slice&) override {
    return ::rocksdb::Status::NotSupported("a wide-column entity");
  }
  ::rocksdb::Status PutBlobIndexCF(uint32_t, const ::rocksdb::Slice&, const ::rocksdb::Slice&) override {
    return ::rocksdb::Status::NotSupported("a blob index");
  }
  void LogData(const ::rocksdb::Slice&) override {}
  ::rocksdb::Status MarkNoop(bool) override { return ::rocksdb::Status::OK(); }
  ::rocksdb::Status MarkBeginPrepare(bool) override { return two_phase(); }
  ::rocksdb::Status MarkEndPrepare(const ::rocksdb::Slice&) override { return two_phase(); }
  ::rocksdb::Status MarkRollback(const ::rocksdb::Slice&) override { return two_phase(); }
  ::rocksdb::Status MarkCommit(const ::rocksdb::Slice&) override { return two_phase(); }
  ::rocksdb::Status MarkCommitWithTimestamp(const ::rocksdb::Slice&, const ::rocksdb::Slice&) override {
    return two_phase();
  }

 private:
  static ::rocksdb::Status other_family(uint32_t id) {
    return ::rocksdb::Status::NotSupported("column family " + std::to_string(id) + " (only the default is replicated)");
  }
  static ::rocksdb::Status two_phase() { return ::rocksdb::Status::NotSupported("two-phase commit"); }

  ::rocksdb::ColumnFamilyHandle* cf_;
  ::rocksdb::WriteBatch* out_;
};

Result<std::unique_ptr<::rocksdb::DB>> open_database(const std::string& dir, const ::rocksdb::Options& options,
                                                     std::vector<::rocksdb::ColumnFamilyHandle*>* handles) {
  ::rocksdb::Options o = options;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  ::rocksdb::DB* raw = nullptr;
  const ::rocksdb::Status s = ::rocksdb::DB::Open(o, dir, wal_applier_column_families(o), handles, &raw);
  FERRY_RETURN_IF_ERROR(from_rocksdb(s, "opening " + dir));
  return std::unique_ptr<::rocksdb::DB>(raw);
}

void close_database(std::unique_ptr<::rocksdb::DB>* db, std::vector<::rocksdb::ColumnFamilyHandle*>* handles) {
  for (auto* h : *handles) (void)(*db)->DestroyColumnFamilyHandle(h);
  handles->clear();
  db->reset();
}

}  // namespace

std::vector<::rocksdb::ColumnFamilyDescriptor> wal_applier_column_families(const ::rocksdb::Options& options) {
  return {{::rocksdb::kDefaultColumnFamilyName, ::rocksdb::ColumnFamilyOptions(options)},
          {kWalCursorColumnFamily, ::rocksdb::ColumnFamilyOptions()}};
}

WalApplier::WalApplier(std::span<const uint8_t> region, const WalStreamReader& reader)
    : region_(region), reader_(reader) {}

WalApplier::~WalApplier() {
  std::lock_guard lock(mu_);
  if (db_ != nullptr) close_database(&db_, &handles_);
}

Result<std::unique_ptr<WalApplier>> WalApplier::open(std::span<const uint8_t> region, const std::string& dir,
                                                     const ::rocksdb::Options& options) {
  FERRY_ASSIGN_OR_RETURN(const WalStreamReader reader, WalStreamReader::open(region));
  std::unique_ptr<WalApplier> a(new WalApplier(region, reader));
  std::lock_guard lock(a->mu_);
  FERRY_ASSIGN_OR_RETURN(a->db_, open_database(dir, options, &a->handles_));
  std::string value;
  const ::rocksdb::Status g = a->db_->Get(::rocksdb::ReadOptions(), a->handles_[1], kCursorKey, &value);
  if (g.ok()) {
    FERRY_ASSIGN_OR_RETURN(a->durable_, decode_cursor(value));
  } else if (!g.IsNotFound()) {
    return from_rocksdb(g, "reading the cursor");
  }
  a->applied_ = a->durable_;
  Result<WalStreamHeader> header = reader.header();
  if (header.ok() && a->durable_.stream_id != 0 && header->stream_id != a->durable_.stream_id) {
    return failed_precondition("WAL applier: the database in " + dir + " follows stream " +
                               std::to_string(a->durable_.stream_id) + "; the region holds stream " +
                               std::to_string(header->stream_id));
  }
  FERRY_RETURN_IF_ERROR(a->restart_from_cursor_locked());
  return a;
}

Status WalApplier::adopt(const std::string& dir, const WalStreamCursor& at, const ::rocksdb::Options& options) {
  if (at.stream_id == 0 || at.position % kWalStreamAlign != 0) return invalid_argument("WAL applier: a bad cursor");
  std::vector<::rocksdb::ColumnFamilyHandle*> handles;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<::rocksdb::DB> db, open_database(dir, options, &handles));
  ::rocksdb::WriteOptions wo;
  wo.sync = true;
  const ::rocksdb::Status s = db->Put(wo, handles[1], kCursorKey, encode_cursor(at));
  close_database(&db, &handles);
  return from_rocksdb(s, "writing the cursor");
}

Status WalApplier::restart_from_cursor_locked() {
  next_chunk_ = applied_.position;
  file_ = applied_.file;
  window_at_ = received_ = applied_.offset;
  window_.clear();
  window_used_ = 0;
  chunks_.clear();
  fragments_.clear();
  in_fragments_ = false;
  return ok_status();
}

Status WalApplier::consume_chunk_locked(const WalChunk& c) {
  ++counters_.chunks;
  window_.erase(0, window_used_);
  window_used_ = 0;
  const uint64_t end = c.offset + c.data.size();
  if (c.file == file_ && c.offset <= received_ && received_ <= end) {
    // The current WAL goes on (the first chunk after a restart may hold
    // bytes before the cursor: skipped).
    window_.append(reinterpret_cast<const char*>(c.data.data()) + (received_ - c.offset), end - received_);
    received_ = end;
    chunks_.push_back({c.position, c.offset, c.data.size()});
  } else if (c.file > file_ && c.offset == 0) {
    // A newer WAL: the older one is complete. A record it left incomplete
    // (torn by the head's crash, never acknowledged) is dropped, as
    // RocksDB's own recovery drops it.
    bool torn = in_fragments_;
    for (char b : window_) torn = torn || b != 0;
    if (torn) counters_.torn_tail_bytes += fragments_.size() + window_.size();
    file_ = c.file;
    window_.assign(reinterpret_cast<const char*>(c.data.data()), c.data.size());
    window_at_ = 0;
    received_ = end;
    chunks_.assign(1, ChunkSpan{c.position, c.offset, c.data.size()});
    fragments_.clear();
    in_fragments_ = false;
  } else {
    return data_loss("WAL applier: the chunk at " + std::to_string(c.position) + " holds WAL " +
                     std::to_string(c.file) + " [" + std::to_string(c.offset) + ", " + std::to_string(end) +
                     "); the stream stood at WAL " + std::to_string(file_) + " byte " + std::to_string(received_));
  }
  next_chunk_ = c.next();
  return ok_status();
}

Result<bool> WalApplier::parse_one_locked(uint64_t* applied) {
  for (;;) {
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(window_.data()) + window_used_,
                                         window_.size() - window_used_);
    FERRY_ASSIGN_OR_RETURN(const WalPhysicalRecord r, parse_wal_physical_record(bytes, window_at_, file_));
    if (r.kind == WalPhysicalRecord::kNeedMore) return false;
    std::string_view complete;
    switch (r.kind) {
      case WalPhysicalRecord::kSkip:
        break;
      case WalPhysicalRecord::kFull:
        if (in_fragments_) return data_loss("WAL applier: a full record inside a fragmented one");
        complete = r.payload;
        break;
      case WalPhysicalRecord::kFirst:
        if (in_fragments_) return data_loss("WAL applier: a first fragment inside a fragmented record");
        fragments_.assign(r.payload);
        in_fragments_ = true;
        break;
      case WalPhysicalRecord::kMiddle:
      case WalPhysicalRecord::kLast:
        if (!in_fragments_) return data_loss("WAL applier: a fragment with no first fragment");
        fragments_.append(r.payload);
        if (r.kind == WalPhysicalRecord::kLast) {
          in_fragments_ = false;
          complete = fragments_;
        }
        break;
      case WalPhysicalRecord::kNeedMore:
        break;
    }
    const uint64_t record_end = window_at_ + r.bytes;
    Status s = ok_status();
    const bool is_complete = r.kind == WalPhysicalRecord::kFull || r.kind == WalPhysicalRecord::kLast;
    if (is_complete) s = apply_locked(complete, record_end);
    FERRY_RETURN_IF_ERROR(s);
    window_used_ += r.bytes;  // dropped from window_ when the next chunk arrives
    window_at_ = record_end;
    if (is_complete) {
      fragments_.clear();
      ++*applied;
      return true;
    }
  }
}

Status WalApplier::apply_locked(std::string_view payload, uint64_t record_end) {
  // The cursor after this record: the chunk that holds its end.
  size_t drop = 0;
  while (chunks_.size() - drop > 1 && chunks_[drop].offset + chunks_[drop].bytes <= record_end) ++drop;
  chunks_.erase(chunks_.begin(), chunks_.begin() + static_cast<std::ptrdiff_t>(drop));
  FERRY_ASSERT(
      !chunks_.empty() && chunks_[0].offset <= record_end && record_end <= chunks_[0].offset + chunks_[0].bytes,
      "no chunk holds the record's end ", record_end);
  const WalStreamCursor cursor{applied_.stream_id, chunks_[0].position, file_, record_end};

  ::rocksdb::WriteBatch in{std::string(payload)};
  ::rocksdb::WriteBatch out;
  BatchCopier copier(handles_[0], &out);
  FERRY_RETURN_IF_ERROR(from_rocksdb(
      in.Iterate(&copier), "WAL " + std::to_string(file_) + " record ending at " + std::to_string(record_end)));
  // The cursor in the same batch: the database holds it exactly when it
  // holds the record.
  FERRY_RETURN_IF_ERROR(from_rocksdb(out.Put(handles_[1], kCursorKey, encode_cursor(cursor)), "the cursor"));
  FERRY_RETURN_IF_ERROR(from_rocksdb(db_->Write(::rocksdb::WriteOptions(), &out), "applying a record"));
  applied_ = cursor;
  ++counters_.wal_records;
  counters_.operations += copier.operations;
  return ok_status();
}

Status WalApplier::sync_locked() {
  if (applied_ == durable_) return ok_status();
  FERRY_RETURN_IF_ERROR(from_rocksdb(db_->FlushWAL(/*sync=*/true), "syncing the database's WAL"));
  durable_ = applied_;
  ++counters_.syncs;
  return ok_status();
}

Result<uint64_t> WalApplier::poll(uint64_t max_records) {
  std::lock_guard lock(mu_);
  // The NIC may be writing the header as it is read: a copy that fails its
  // checksum is read again; one that keeps failing is damage.
  Result<WalStreamHeader> found = reader_.header();
  for (int again = 0; again < 3 && found.status().code() == Code::kDataLoss; ++again) {
    std::this_thread::yield();
    found = reader_.header();
  }
  if (found.status().code() == Code::kNotFound) return uint64_t{0};
  FERRY_RETURN_IF_ERROR(found.status());
  const WalStreamHeader header = *found;
  if (applied_.stream_id == 0) {
    // A new database: it follows this stream from its first chunk.
    if (header.begin != 0) {
      return failed_precondition("WAL applier: a new database, and the stream begins at " +
                                 std::to_string(header.begin) + ": copy a neighbour's database instead");
    }
    applied_.stream_id = header.stream_id;
  } else if (header.stream_id != applied_.stream_id) {
    return failed_precondition("WAL applier: the database follows stream " + std::to_string(applied_.stream_id) +
                               "; the region holds stream " + std::to_string(header.stream_id));
  }
  if (applied_.position < header.begin) {
    return data_loss("WAL applier: the stream begins at " + std::to_string(header.begin) + ", past this replica's " +
                     "cursor at " + std::to_string(applied_.position));
  }
  uint64_t applied = 0;
  Status s = ok_status();
  while (applied < max_records) {
    Result<bool> parsed = parse_one_locked(&applied);
    if (!parsed.ok()) {
      s = parsed.status();
      break;
    }
    if (*parsed) continue;
    if (next_chunk_ >= header.end) break;
    Result<WalChunk> chunk = reader_.chunk_at(next_chunk_, header);
    if (!chunk.ok()) {
      s = chunk.status();
      break;
    }
    s = consume_chunk_locked(*chunk);
    if (!s.ok()) break;
  }
  const Status synced = sync_locked();
  if (!s.ok()) {
    // The database holds every record up to applied_; the parser starts
    // again from there on the next poll.
    (void)restart_from_cursor_locked();
    return s;
  }
  FERRY_RETURN_IF_ERROR(synced);
  return applied;
}

Status WalApplier::copy_to(const std::string& dir) {
  std::lock_guard lock(mu_);
  ::rocksdb::Checkpoint* raw = nullptr;
  FERRY_RETURN_IF_ERROR(from_rocksdb(::rocksdb::Checkpoint::Create(db_.get(), &raw), "a checkpoint"));
  std::unique_ptr<::rocksdb::Checkpoint> checkpoint(raw);
  return from_rocksdb(checkpoint->CreateCheckpoint(dir), "copying the database to " + dir);
}

WalStreamCursor WalApplier::durable_cursor() const {
  std::lock_guard lock(mu_);
  return durable_;
}

WalStreamCursor WalApplier::applied_cursor() const {
  std::lock_guard lock(mu_);
  return applied_;
}

WalApplierCounters WalApplier::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

// ---- the in-process table ----

void AppliedPositions::attach(uint32_t replica, WalApplier* applier) {
  std::lock_guard lock(mu_);
  FERRY_ASSERT(replica < appliers_.size(), "no replica ", replica);
  if (appliers_[replica] != nullptr) last_[replica] = appliers_[replica]->durable_cursor().position;
  appliers_[replica] = applier;
}

Result<uint64_t> AppliedPositions::needed_from() {
  std::lock_guard lock(mu_);
  uint64_t needed = ~uint64_t{0};
  for (size_t r = 0; r < appliers_.size(); ++r) {
    if (appliers_[r] != nullptr) last_[r] = appliers_[r]->durable_cursor().position;
    needed = std::min(needed, last_[r]);
  }
  return needed;
}

Status AppliedPositions::wait_for_room() {
  FERRY_ASSIGN_OR_RETURN(const uint64_t before, needed_from());
  {
    std::lock_guard lock(mu_);
    for (WalApplier* a : appliers_) {
      if (a != nullptr) FERRY_RETURN_IF_ERROR(a->poll().status());
    }
  }
  FERRY_ASSIGN_OR_RETURN(const uint64_t after, needed_from());
  if (after > before) return ok_status();
  return resource_exhausted("no replica's applier moved past stream position " + std::to_string(before));
}

Result<std::unique_ptr<WalApplier>> recover_replica(std::span<uint8_t> region, const std::string& dir,
                                                    const ::rocksdb::Options& options, hyperloop::TxnReplay* replay) {
  FERRY_ASSIGN_OR_RETURN(const hyperloop::TxnReplay r, hyperloop::replay_txn_log(region));
  if (replay != nullptr) *replay = r;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<WalApplier> a, WalApplier::open(region, dir, options));
  FERRY_RETURN_IF_ERROR(a->poll().status());
  return a;
}

}  // namespace ferry::rocks
