// The transaction API over a group (§5): Append, ExecuteAndAdvance, group
// write locks by gCAS with undo, read locks on one replica, and a replica's
// replay of its log at restart.
#include "ferry/hyperloop/txn.h"
#include "le_words.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "ferry/common/assert.h"

namespace ferry::hyperloop {

namespace {

constexpr uint64_t kTxnMagic = 0x314E5854504C4846ULL;  // "FHLPTXN1"
constexpr uint64_t kWriterWord = ReplicaLocks::kWriter | 1;


uint8_t all_replicas(uint32_t n) { return static_cast<uint8_t>((1u << n) - 1); }

}  // namespace

TxnClient::TxnClient(GroupClient& client, GroupId data_gid, GroupId lock_gid, const TxnOptions& options)
    : client_(client), data_(data_gid), locks_(lock_gid), options_(options) {}

Result<std::unique_ptr<TxnClient>> TxnClient::initialize(GroupClient& client, GroupId data_gid, GroupId lock_gid,
                                                         const TxnOptions& options) {
  if (options.log_bytes == 0 || options.log_bytes % kTxnRecordAlign != 0 || options.db_bytes == 0) {
    return invalid_argument("txn: log_bytes must be a non-zero multiple of 64 and db_bytes non-zero");
  }
  FERRY_ASSIGN_OR_RETURN(const GroupOptions data_opts, client.group_options(data_gid));
  FERRY_ASSIGN_OR_RETURN(const GroupOptions lock_opts, client.group_options(lock_gid));
  const uint64_t need = kTxnControlBytes + options.log_bytes + options.db_bytes;
  if (need > data_opts.region_bytes) {
    return invalid_argument("txn: the layout needs " + std::to_string(need) + " bytes; the group's region has " +
                            std::to_string(data_opts.region_bytes));
  }
  if (lock_opts.replicas != data_opts.replicas) {
    return invalid_argument("txn: the lock group must have as many replicas as the data group");
  }
  if (options.resume) {
    // The client restarted: its memory comes back from replica 0 (in
    // process; a deployed client reads it through another source).
    GroupRecoverySource source(client, data_gid);
    return resume(client, data_gid, lock_gid, options, source, nullptr);
  }
  std::unique_ptr<TxnClient> t(new TxnClient(client, data_gid, lock_gid, options));
  FERRY_ASSIGN_OR_RETURN(t->mem_, client.client_memory(data_gid));
  uint8_t* c = t->mem_.data();
  std::memset(c, 0, need);
  detail::store_le<uint64_t>(c, kTxnMagic);
  detail::store_le<uint64_t>(c + 8, options.log_bytes);
  detail::store_le<uint64_t>(c + 16, options.db_bytes);
  detail::store_le<uint64_t>(c + kTxnHeadOffset, 0);
  FERRY_RETURN_IF_ERROR(t->write_and_flush(0, kTxnControlBytes));
  return t;
}

Result<std::unique_ptr<TxnClient>> TxnClient::resume(GroupClient& client, GroupId data_gid, GroupId lock_gid,
                                                     const TxnOptions& options, TxnRecoverySource& source,
                                                     TxnRecovery* report) {
  const uint64_t need = kTxnControlBytes + options.log_bytes + options.db_bytes;
  std::unique_ptr<TxnClient> t(new TxnClient(client, data_gid, lock_gid, options));
  FERRY_ASSIGN_OR_RETURN(t->mem_, client.client_memory(data_gid));
  uint8_t* c = t->mem_.data();
  FERRY_RETURN_IF_ERROR(source.read(0, 0, t->mem_.first(need)));
  if (detail::load_le<uint64_t>(c) != kTxnMagic || detail::load_le<uint64_t>(c + 8) != options.log_bytes ||
      detail::load_le<uint64_t>(c + 16) != options.db_bytes) {
    return invalid_argument("txn: resume finds another layout (or none) in the region");
  }
  TxnRecovery rep;
  FERRY_RETURN_IF_ERROR(t->reconcile(source, rep));
  if (report != nullptr) *report = rep;
  return t;
}

Result<bool> TxnClient::copy_member_record(TxnRecoverySource& source, uint32_t member, uint64_t lsn, uint64_t head) {
  const uint64_t log_bytes = options_.log_bytes;
  const uint64_t pos = lsn % log_bytes;
  uint8_t header[kTxnRecordHeaderBytes];
  FERRY_RETURN_IF_ERROR(source.read(member, kTxnControlBytes + pos, header));
  const auto bytes = detail::load_le<uint32_t>(header + 4);
  // Only what could be a record of this lap is copied: it must fit before
  // the ring's end and leave the records taken so far ([head, lsn)) alone.
  if (bytes == 0 || bytes % kTxnRecordAlign != 0 || bytes > log_bytes - pos || lsn + bytes - head > log_bytes) {
    return false;
  }
  FERRY_RETURN_IF_ERROR(source.read(member, kTxnControlBytes + pos, mem_.subspan(kTxnControlBytes + pos, bytes)));
  return true;
}

Status TxnClient::reconcile(TxnRecoverySource& source, TxnRecovery& rep) {
  const uint32_t members = source.members();
  const uint64_t log_bytes = options_.log_bytes;
  const uint64_t db_bytes = options_.db_bytes;
  uint8_t* c = mem_.data();
  const uint64_t source_head = detail::load_le<uint64_t>(c + kTxnHeadOffset);
  // The lowest head of any member: records below it were applied on every
  // member (a head moves only after its record's copies were flushed
  // everywhere, or after a member's own replay applied them).
  uint64_t lowest = source_head, highest = source_head;
  for (uint32_t m = 1; m < members; ++m) {
    uint8_t control[32];
    FERRY_RETURN_IF_ERROR(source.read(m, 0, control));
    if (detail::load_le<uint64_t>(control) != kTxnMagic || detail::load_le<uint64_t>(control + 8) != log_bytes ||
        detail::load_le<uint64_t>(control + 16) != db_bytes) {
      return data_loss("txn: member " + std::to_string(m) + " holds no transaction layout of these options");
    }
    const auto h = detail::load_le<uint64_t>(control + kTxnHeadOffset);
    lowest = std::min(lowest, h);
    highest = std::max(highest, h);
  }
  // The log from the lowest head: replica 0's valid records, and where its
  // log ends, a record a downstream member holds whole at that LSN (after a
  // power failure replica 0 may have lost a record in flight that a
  // downstream member kept, and replayed). A valid record of a given LSN is
  // the same record on every member that has it: one client writes each LSN
  // once, and a client that resumes reconciles before it appends. The ring
  // still holds [lowest, ...): an append overwrites only what the client saw
  // executed on every member.
  const std::span<uint8_t> ring = mem_.subspan(kTxnControlBytes, log_bytes);
  pending_.clear();
  uint64_t lsn = lowest;
  uint64_t from_downstream = 0;
  for (;;) {
    Result<TxnRecord> r = decode_txn_record(ring, lsn, db_bytes);
    for (uint32_t m = 1; !r.ok() && m < members; ++m) {
      FERRY_ASSIGN_OR_RETURN(const bool copied, copy_member_record(source, m, lsn, lowest));
      if (!copied) continue;
      r = decode_txn_record(ring, lsn, db_bytes);
      from_downstream += r.ok();
    }
    if (!r.ok() || lsn + r->bytes - lowest > log_bytes) break;
    lsn += r->bytes;
    pending_.push_back(std::move(r).value());
  }
  if (lsn < highest) {
    return data_loss("txn: the log from head " + std::to_string(lowest) + " breaks at " + std::to_string(lsn) +
                     " before a member's head " + std::to_string(highest));
  }
  head_ = lowest;
  tail_ = lsn;
  detail::store_le<uint64_t>(c + kTxnHeadOffset, lowest);
  // Every member gets the control block (the lowest head: no member's
  // restart may skip a record another member has not applied) and the log
  // [head, tail): what a member lacks it gets before anything executes, so
  // every member's gMEMCPYs copy the same bytes. A torn record beyond the
  // tail does not verify and is overwritten by the next append.
  FERRY_RETURN_IF_ERROR(write(0, kTxnControlBytes, false));
  uint64_t rewritten = 0;
  for (uint64_t at = lowest; at < tail_;) {
    const uint64_t pos = at % log_bytes;
    const uint64_t len = std::min(tail_ - at, log_bytes - pos);
    const auto chunk = static_cast<uint32_t>(std::min<uint64_t>(len, uint64_t{1} << 20));
    FERRY_RETURN_IF_ERROR(write(kTxnControlBytes + pos, chunk, false));
    rewritten += chunk;
    at += chunk;
  }
  FERRY_RETURN_IF_ERROR(flush());
  rep.head_source = source_head;
  rep.head = lowest;
  rep.tail = tail_;
  rep.records = pending_.size();
  rep.records_from_downstream = from_downstream;
  rep.bytes_rereplicated = rewritten;
  return ok_status();
}

uint32_t GroupRecoverySource::members() const {
  auto o = client_.group_options(data_);
  return o.ok() ? o->replicas : 0;
}

Status GroupRecoverySource::read(uint32_t member, uint64_t offset, std::span<uint8_t> out) {
  FERRY_ASSIGN_OR_RETURN(const ReplicaView v, client_.replica(data_, member));
  if (offset > v.region->size() || out.size() > v.region->size() - offset) {
    return out_of_range("txn recovery: " + std::to_string(out.size()) + " bytes at " + std::to_string(offset) +
                        " are outside replica " + std::to_string(member) + "'s region");
  }
  std::memcpy(out.data(), v.region->data() + offset, out.size());
  return ok_status();
}

Result<std::unique_ptr<TxnClient>> TxnClient::recover(GroupClient& client, GroupId data_gid, GroupId lock_gid,
                                                      const TxnOptions& options, uint32_t lock_words,
                                                      TxnRecovery* report) {
  GroupRecoverySource source(client, data_gid);
  return recover(client, data_gid, lock_gid, options, lock_words, source, report);
}

Result<std::unique_ptr<TxnClient>> TxnClient::recover(GroupClient& client, GroupId data_gid, GroupId lock_gid,
                                                      const TxnOptions& options, uint32_t lock_words,
                                                      TxnRecoverySource& source, TxnRecovery* report) {
  TxnOptions o = options;
  o.resume = true;
  FERRY_ASSIGN_OR_RETURN(const GroupOptions data_opts, client.group_options(data_gid));
  if (source.members() != data_opts.replicas) {
    return invalid_argument("txn recovery: the source names " + std::to_string(source.members()) +
                            " members; the group has " + std::to_string(data_opts.replicas));
  }
  // The same checks as initialize.
  FERRY_ASSIGN_OR_RETURN(const GroupOptions lock_opts, client.group_options(lock_gid));
  if (o.log_bytes == 0 || o.log_bytes % kTxnRecordAlign != 0 || o.db_bytes == 0 ||
      kTxnControlBytes + o.log_bytes + o.db_bytes > data_opts.region_bytes ||
      lock_opts.replicas != data_opts.replicas) {
    return invalid_argument("txn recovery: the layout does not fit the group's region, or the lock group has "
                            "another number of replicas");
  }
  // The log is reconciled on every member first (resume), then records run
  // again under every lock.
  TxnRecovery rep;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<TxnClient> t, resume(client, data_gid, lock_gid, o, source, &rep));
  // Every lock is taken, so that no replica serves a read while records
  // are applied again; the failed front end's are taken over, never
  // released first (a reader would get in between and see its last record
  // half-applied).
  FERRY_ASSIGN_OR_RETURN(rep.locks_released, t->take_over_locks(lock_words));
  FERRY_RETURN_IF_ERROR(t->execute_all());
  for (uint32_t l = lock_words; l-- > 0;) FERRY_RETURN_IF_ERROR(t->wr_unlock(l));
  if (report != nullptr) *report = rep;
  return t;
}

// Every group operation the client submits is one traversal of a chain
// (counted for the benchmarks' traversals per write).
Status TxnClient::write(uint64_t offset, uint32_t size, bool flush) {
  ++counters_.traversals;
  return client_.gwrite(data_, offset, size, flush);
}

Status TxnClient::copy(uint64_t src, uint64_t dst, uint32_t size, bool flush) {
  ++counters_.traversals;
  return client_.gmemcpy(data_, src, dst, size, flush);
}

Status TxnClient::flush() {
  ++counters_.traversals;
  return client_.gflush(data_);
}

Result<CasResult> TxnClient::cas(uint64_t offset, uint64_t old_value, uint64_t new_value, uint8_t execute_map) {
  ++counters_.traversals;
  return client_.gcas(locks_, offset, old_value, new_value, execute_map);
}

// Interleaved (HyperLoop §4.2): each replica's NIC makes the operation
// durable before it forwards it, so the operation's completion is its
// flush -- one traversal of the chain. Separate: the operation, then a
// gFLUSH behind it -- two.
Status TxnClient::write_and_flush(uint64_t offset, uint32_t size) {
  if (options_.interleaved_flush) return write(offset, size, /*flush=*/true);
  FERRY_RETURN_IF_ERROR(write(offset, size, /*flush=*/false));
  return flush();
}

Status TxnClient::copy_and_flush(uint64_t src, uint64_t dst, uint32_t size) {
  if (options_.interleaved_flush) return copy(src, dst, size, /*flush=*/true);
  FERRY_RETURN_IF_ERROR(copy(src, dst, size, /*flush=*/false));
  return flush();
}

std::span<const uint8_t> TxnClient::db() const { return mem_.subspan(db_offset(), options_.db_bytes); }

Status TxnClient::append_padding() {
  const uint64_t pos = tail_ % options_.log_bytes;
  const auto rest = static_cast<uint32_t>(options_.log_bytes - pos);
  const std::vector<uint8_t> pad = encode_txn_padding(tail_, rest);
  std::memcpy(mem_.data() + kTxnControlBytes + pos, pad.data(), rest);
  FERRY_RETURN_IF_ERROR(write_and_flush(kTxnControlBytes + pos, rest));
  TxnRecord r;
  r.lsn = tail_;
  r.bytes = rest;
  r.padding = true;
  pending_.push_back(r);
  tail_ += rest;
  ++counters_.padding;
  return ok_status();
}

Result<uint64_t> TxnClient::append(std::span<const TxnWrite> record) {
  if (record.empty()) return invalid_argument("txn: an empty record");
  for (const TxnWrite& w : record) {
    if (w.data.empty() || w.offset > options_.db_bytes || w.data.size() > options_.db_bytes - w.offset) {
      return invalid_argument("txn: a write of " + std::to_string(w.data.size()) + " bytes at " +
                              std::to_string(w.offset) + " is outside the " + std::to_string(options_.db_bytes) +
                              "-byte database (or empty)");
    }
  }
  std::vector<uint8_t> bytes = encode_txn_record(tail_, record);
  if (bytes.size() > options_.log_bytes) {
    return invalid_argument("txn: a record of " + std::to_string(bytes.size()) + " bytes; the log ring has " +
                            std::to_string(options_.log_bytes));
  }
  const uint64_t pos = tail_ % options_.log_bytes;
  const uint64_t pad = pos + bytes.size() > options_.log_bytes ? options_.log_bytes - pos : 0;
  if (tail_ + pad + bytes.size() - head_ > options_.log_bytes) {
    return resource_exhausted("txn: the log ring is full: execute records first");
  }
  if (pad != 0) {
    FERRY_RETURN_IF_ERROR(append_padding());
    bytes = encode_txn_record(tail_, record);  // its LSN moved to the ring's start
  }
  const uint64_t at = tail_ % options_.log_bytes;
  std::memcpy(mem_.data() + kTxnControlBytes + at, bytes.data(), bytes.size());
  // Append = gWRITE + gFLUSH (interleaved): durable on every replica when it
  // returns.
  FERRY_RETURN_IF_ERROR(write_and_flush(kTxnControlBytes + at, static_cast<uint32_t>(bytes.size())));
  FERRY_ASSIGN_OR_RETURN(TxnRecord r, decode_txn_record(mem_.subspan(kTxnControlBytes, options_.log_bytes), tail_,
                                                        options_.db_bytes));
  const uint64_t lsn = tail_;
  tail_ += r.bytes;
  pending_.push_back(std::move(r));
  ++counters_.appended;
  return lsn;
}

Status TxnClient::execute_and_advance() {
  if (pending_.empty()) return not_found("txn: every appended record is executed");
  const TxnRecord r = pending_.front();
  for (const TxnRecord::Entry& e : r.entries) {
    const uint64_t src = kTxnControlBytes + e.data_at;
    const uint64_t dst = db_offset() + e.offset;
    // ExecuteAndAdvance: per entry a gMEMCPY, durable on every replica
    // before the head moves.
    FERRY_RETURN_IF_ERROR(copy_and_flush(src, dst, e.len));
    std::memmove(mem_.data() + dst, mem_.data() + src, e.len);  // the client's mirror
  }
  // Then the persistent head moves past the record: one aligned word.
  detail::store_le<uint64_t>(mem_.data() + kTxnHeadOffset, r.lsn + r.bytes);
  FERRY_RETURN_IF_ERROR(write_and_flush(kTxnHeadOffset, 8));
  head_ = r.lsn + r.bytes;
  pending_.erase(pending_.begin());
  if (!r.padding) ++counters_.executed;
  return ok_status();
}

Status TxnClient::execute_all() {
  while (!pending_.empty()) FERRY_RETURN_IF_ERROR(execute_and_advance());
  return ok_status();
}

// A replica's lock word is one of: n readers (n >= 0); kIntent | n (a writer
// waits for the n readers inside; no reader enters); kWriterWord (a writer
// holds it). Only the client's gCAS sets or clears kIntent and kWriter, and
// a reader's rd_unlock (fetch_sub) leaves them as they are.
Status TxnClient::acquire(uint32_t lock, bool take_over, uint64_t* stale) {
  FERRY_ASSIGN_OR_RETURN(const GroupOptions o, client_.group_options(locks_));
  if ((static_cast<uint64_t>(lock) + 1) * 8 > o.region_bytes) {
    return invalid_argument("txn: no lock " + std::to_string(lock) + " in the lock group's region");
  }
  const uint64_t offset = uint64_t{lock} * 8;
  const uint8_t all = all_replicas(o.replicas);
  uint8_t held = 0;    // replicas where this client holds the writer word
  uint8_t intent = 0;  // replicas where the intent bit is this client's
  std::array<uint64_t, kMaxReplicas> seen{};
  bool waited = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(options_.lock_timeout_ns);
  for (uint32_t attempt = 0;; ++attempt) {
    // The writer word goes where the word is what this client expects there:
    // 0, or its own intent once the readers inside have left.
    for (const bool with_intent : {false, true}) {
      const auto map = static_cast<uint8_t>(all & ~held & (with_intent ? intent : ~intent));
      if (map == 0) continue;
      FERRY_ASSIGN_OR_RETURN(const CasResult r, cas(offset, with_intent ? ReplicaLocks::kIntent : 0, kWriterWord, map));
      held |= r.succeeded;
      intent &= static_cast<uint8_t>(~r.succeeded);
      for (uint32_t i = 0; i < o.replicas; ++i) {
        if ((map >> i & 1) != 0) seen[i] = r.original[i];
      }
    }
    if (held == all) break;
    if (!take_over) ++counters_.lock_conflicts;
    bool other_writer = false;
    for (uint32_t i = 0; i < o.replicas; ++i) {
      const auto bit = static_cast<uint8_t>(1u << i);
      if ((held & bit) != 0) continue;
      const uint64_t v = seen[i];
      const bool foreign =
          (v & ReplicaLocks::kWriter) != 0 || ((v & ReplicaLocks::kIntent) != 0 && (intent & bit) == 0);
      if (foreign && take_over) {
        // The dead front end's writer word or intent is this client's now.
        ++*stale;
        if ((v & ReplicaLocks::kWriter) != 0) {
          held |= bit;
        } else {
          intent |= bit;
        }
      } else if (foreign) {
        other_writer = true;
      } else if ((intent & bit) == 0) {
        // Readers are inside: turn new ones away until they have left. A
        // reader coming or going changes v; then the next round tries again.
        FERRY_ASSIGN_OR_RETURN(const CasResult r, cas(offset, v, v | ReplicaLocks::kIntent, bit));
        if (r.succeeded != 0) {
          intent |= bit;
          waited = true;
        }
      }
    }
    if (held == all) break;
    const bool expired = std::chrono::steady_clock::now() >= deadline;
    if (other_writer || (expired && !take_over)) {
      // Another writer: give back what this client took (§4.2's undo) and
      // try again; at the deadline, give back and give up.
      if (held != 0) ++counters_.lock_undos;
      FERRY_RETURN_IF_ERROR(give_back(lock, held, intent, seen));
      held = 0;
      intent = 0;
    }
    if (expired) {
      // A take-over keeps what it holds: the locks stay shut until a retry.
      return timed_out("txn: lock " + std::to_string(lock) + " stayed taken (readers or another writer)");
    }
    if (attempt > 8) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (waited) ++counters_.lock_intents;
  return ok_status();
}

Status TxnClient::give_back(uint32_t lock, uint8_t held, uint8_t intent,
                            const std::array<uint64_t, kMaxReplicas>& seen) {
  const uint64_t offset = uint64_t{lock} * 8;
  if (held != 0) {
    FERRY_ASSIGN_OR_RETURN(const CasResult u, cas(offset, kWriterWord, 0, held));
    if (u.succeeded != held) return internal_error("txn: the undo of a partial write lock did not apply");
  }
  // The intent bit comes off whatever the reader count is now; only readers
  // leaving change it meanwhile (none can enter), so this ends.
  for (uint32_t i = 0; i < kMaxReplicas; ++i) {
    const auto bit = static_cast<uint8_t>(1u << i);
    if ((intent & bit) == 0) continue;
    uint64_t v = seen[i] | ReplicaLocks::kIntent;
    for (;;) {
      FERRY_ASSIGN_OR_RETURN(const CasResult r, cas(offset, v, v & ~ReplicaLocks::kIntent, bit));
      if (r.succeeded != 0) break;
      v = r.original[i];
      if ((v & ReplicaLocks::kIntent) == 0 || (v & ReplicaLocks::kWriter) != 0) {
        return internal_error("txn: lock " + std::to_string(lock) + " lost its writer's intent on replica " +
                              std::to_string(i));
      }
    }
  }
  return ok_status();
}

Status TxnClient::wr_lock(uint32_t lock) { return acquire(lock, /*take_over=*/false, nullptr); }

Status TxnClient::wr_unlock(uint32_t lock) {
  FERRY_ASSIGN_OR_RETURN(const GroupOptions o, client_.group_options(locks_));
  const uint8_t all = all_replicas(o.replicas);
  FERRY_ASSIGN_OR_RETURN(const CasResult r, cas(uint64_t{lock} * 8, kWriterWord, 0, all));
  if (r.succeeded != all) return failed_precondition("txn: lock " + std::to_string(lock) + " was not held");
  return ok_status();
}

Result<uint64_t> TxnClient::take_over_locks(uint32_t locks) {
  uint64_t stale = 0;
  for (uint32_t l = 0; l < locks; ++l) FERRY_RETURN_IF_ERROR(acquire(l, /*take_over=*/true, &stale));
  return stale;
}

Result<uint64_t> TxnClient::release_stale_locks(uint32_t locks) {
  FERRY_ASSIGN_OR_RETURN(const GroupOptions o, client_.group_options(locks_));
  if (static_cast<uint64_t>(locks) * 8 > o.region_bytes) {
    return invalid_argument("txn: the lock group's region holds " + std::to_string(o.region_bytes / 8) + " locks");
  }
  const uint8_t all = all_replicas(o.replicas);
  uint64_t released = 0;
  for (uint32_t l = 0; l < locks; ++l) {
    FERRY_ASSIGN_OR_RETURN(const CasResult r, cas(uint64_t{l} * 8, kWriterWord, 0, all));
    released += static_cast<uint64_t>(__builtin_popcount(r.succeeded));
    // A writer that died waiting for readers left its intent: readers would
    // stay shut out for good.
    uint8_t intent = 0;
    std::array<uint64_t, kMaxReplicas> seen{};
    for (uint32_t i = 0; i < o.replicas; ++i) {
      seen[i] = r.original[i];
      const bool waiting = (r.original[i] & ReplicaLocks::kIntent) != 0 && (r.original[i] & ReplicaLocks::kWriter) == 0;
      if (waiting) intent |= static_cast<uint8_t>(1u << i);
    }
    released += static_cast<uint64_t>(__builtin_popcount(intent));
    FERRY_RETURN_IF_ERROR(give_back(l, 0, intent, seen));
  }
  return released;
}

Result<std::span<const uint8_t>> TxnClient::replica_db(uint32_t r) const {
  FERRY_ASSIGN_OR_RETURN(const ReplicaView v, client_.replica(data_, r));
  return std::span<const uint8_t>(v.region->data() + db_offset(), options_.db_bytes);
}

Result<std::span<const uint8_t>> TxnClient::replica_log(uint32_t r) const {
  FERRY_ASSIGN_OR_RETURN(const ReplicaView v, client_.replica(data_, r));
  return std::span<const uint8_t>(v.region->data() + kTxnControlBytes, options_.log_bytes);
}

Result<TxnReplay> replay_txn_log(std::span<uint8_t> region) {
  if (region.size() < kTxnControlBytes) return data_loss("txn: a region smaller than the control block");
  uint8_t* c = region.data();
  const auto log_bytes = detail::load_le<uint64_t>(c + 8);
  const auto db_bytes = detail::load_le<uint64_t>(c + 16);
  if (detail::load_le<uint64_t>(c) != kTxnMagic || log_bytes == 0 || log_bytes % kTxnRecordAlign != 0 ||
      log_bytes > region.size() || db_bytes > region.size() - log_bytes ||
      kTxnControlBytes > region.size() - log_bytes - db_bytes) {
    return data_loss("txn: the region holds no transaction layout");
  }
  TxnReplay out;
  out.head_before = out.head_after = detail::load_le<uint64_t>(c + kTxnHeadOffset);
  const std::span<uint8_t> ring = region.subspan(kTxnControlBytes, log_bytes);
  uint8_t* db = region.data() + kTxnControlBytes + log_bytes;
  for (const TxnRecord& r : scan_log(ring, out.head_before, db_bytes)) {
    for (const TxnRecord::Entry& e : r.entries) {
      std::memmove(db + e.offset, ring.data() + e.data_at, e.len);
      out.bytes_applied += e.len;
    }
    out.head_after = r.lsn + r.bytes;
    ++out.records;
  }
  detail::store_le<uint64_t>(c + kTxnHeadOffset, out.head_after);
  return out;
}

// ---- ReplicaLocks ----

std::atomic_ref<uint64_t> ReplicaLocks::at(uint32_t lock) const {
  FERRY_ASSERT((static_cast<size_t>(lock) + 1) * 8 <= bytes_, "ReplicaLocks: no such lock");
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(words_ + static_cast<size_t>(lock) * 8));
}

bool ReplicaLocks::try_rd_lock(uint32_t lock) {
  auto w = at(lock);
  uint64_t v = w.load(std::memory_order_acquire);
  // A writer's intent turns new readers away, so that steady readers cannot
  // starve it: the readers inside leave, and its gCAS finds the count at 0.
  while ((v & (kWriter | kIntent)) == 0) {
    if (w.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) return true;
  }
  return false;
}

void ReplicaLocks::hold_until_recovered(uint32_t locks) {
  for (uint32_t l = 0; l < locks; ++l) at(l).store(kWriterWord, std::memory_order_release);
}

void ReplicaLocks::rd_unlock(uint32_t lock) { at(lock).fetch_sub(1, std::memory_order_release); }

uint64_t ReplicaLocks::word(uint32_t lock) const { return at(lock).load(std::memory_order_acquire); }

}  // namespace ferry::hyperloop
