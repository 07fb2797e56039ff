// The transactional key-value store over TxnClient (§5.2): slot placement
// in the front end's mirror, one log record per operation or transaction
// (the slots and the skip-list nodes it changes), striped group write locks
// plus the index lock, and replicas' locked reads and scans.
#include "ferry/hyperloop/txn_kv.h"
#include "le_words.h"

#include <algorithm>
#include <array>
#include <map>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "ferry/common/checksum.h"
#include "ferry/common/cpu.h"
#include "ferry/common/rng.h"

namespace ferry::hyperloop {

namespace {

constexpr uint64_t kKvMagicV1 = 0x31564B5854504C48ULL;  // "HLPTXKV1": no ordered index
constexpr uint64_t kKvMagic = 0x32564B5854504C48ULL;    // "HLPTXKV2"
constexpr uint64_t kHeaderBytes = 64;
constexpr uint64_t kSlotHeaderBytes = 32;
constexpr uint64_t kEmpty = 0, kLive = 1, kDeleted = 2;
// Skip-list levels: with 1/4 of the keys going up a level, 12 levels keep
// searches logarithmic up to 4^11 (4 M) keys.
constexpr uint32_t kIndexLevels = 12;
constexpr uint64_t kNodeBytes = kIndexLevels * 4;
static_assert(kNodeBytes == 48, "docs/hyperloop-storage.md gives the node as 48 bytes");

uint64_t slot_bytes(const TxnKvOptions& o) { return (kSlotHeaderBytes + o.key_max + o.value_max + 63) / 64 * 64; }
uint64_t index_offset(const TxnKvOptions& o) { return kHeaderBytes + uint64_t{o.slots} * slot_bytes(o); }
// Node 0 is the head; node i + 1 is slot i's.
uint64_t node_offset(const TxnKvOptions& o, uint32_t node) { return index_offset(o) + node * kNodeBytes; }

uint64_t key_hash(std::string_view key) {
  return checksum64({reinterpret_cast<const uint8_t*>(key.data()), key.size()}, 0x5EED);
}


// The lock stripe of a key: the front end's write lock and a replica
// reader's read lock must agree on it.
uint32_t lock_stripe(std::string_view key, const TxnKvOptions& o) {
  return static_cast<uint32_t>(mix64(key_hash(key)) % o.locks);
}

uint64_t slot_checksum(const uint8_t* slot, uint64_t bytes) {
  return checksum64({slot + 16, bytes - 16}, detail::load_le<uint64_t>(slot));
}

// A key's skip-list height, 1..kIndexLevels: from its hash, so the list's
// shape is a function of its keys (no random state in the front end).
uint32_t index_height(std::string_view key) {
  uint64_t h = mix64(key_hash(key) ^ 0x1D3C5B7A9F0E2D4CULL);
  uint32_t height = 1;
  while (height < kIndexLevels && (h & 3) == 0) {
    ++height;
    h >>= 2;
  }
  return height;
}

// A slot's bytes: state, key, value and the checksum over them.
std::vector<uint8_t> make_slot(const TxnKvOptions& o, uint64_t state, std::string_view key,
                               std::span<const uint8_t> value) {
  std::vector<uint8_t> s(slot_bytes(o), 0);
  detail::store_le<uint64_t>(s.data(), state);
  detail::store_le<uint16_t>(s.data() + 16, static_cast<uint16_t>(key.size()));
  detail::store_le<uint32_t>(s.data() + 20, static_cast<uint32_t>(value.size()));
  std::memcpy(s.data() + kSlotHeaderBytes, key.data(), key.size());
  if (!value.empty()) std::memcpy(s.data() + kSlotHeaderBytes + o.key_max, value.data(), value.size());
  detail::store_le<uint64_t>(s.data() + 8, slot_checksum(s.data(), s.size()));
  return s;
}

bool slot_has_key(const uint8_t* slot, const TxnKvOptions& o, std::string_view key) {
  return detail::load_le<uint16_t>(slot + 16) == key.size() && key.size() <= o.key_max &&
         std::memcmp(slot + kSlotHeaderBytes, key.data(), key.size()) == 0;
}

// Probes `db` (an image: the mirror, or a replica's copy of one slot at a
// time) for `key`: the live slot, or nullopt if absent.
template <typename SlotAt>
std::optional<uint32_t> find_slot(const TxnKvOptions& o, std::string_view key, const SlotAt& slot_at) {
  const uint32_t start = static_cast<uint32_t>(key_hash(key) % o.slots);
  for (uint32_t i = 0; i < o.slots; ++i) {
    const uint32_t idx = (start + i) % o.slots;
    const uint8_t* s = slot_at(idx);
    if (s == nullptr) return std::nullopt;  // the caller stopped (torn)
    const auto state = detail::load_le<uint64_t>(s);
    if (state == kEmpty) return std::nullopt;
    if (state == kLive && slot_has_key(s, o, key)) return idx;
  }
  return std::nullopt;
}

}  // namespace

uint64_t txn_kv_db_bytes(const TxnKvOptions& o) { return node_offset(o, o.slots + 1); }

uint32_t txn_kv_lock_words(const TxnKvOptions& o) { return o.locks + 1; }

namespace {

uint32_t index_lock(const TxnKvOptions& o) { return o.locks; }

Status check_options(const TxnKvOptions& options, uint64_t db_bytes) {
  if (options.slots == 0 || options.key_max == 0 || options.key_max > 65535 || options.locks == 0 ||
      options.slots >= (1u << 31)) {
    return invalid_argument("txn kv: slots (< 2^31), key_max (1..65535) and locks must be non-zero");
  }
  if (txn_kv_db_bytes(options) > db_bytes) {
    return invalid_argument("txn kv: the table needs " + std::to_string(txn_kv_db_bytes(options)) +
                            " bytes of database; the log's database has " + std::to_string(db_bytes));
  }
  return ok_status();
}

// The header's fields after the magic: slots, key_max, value_max, locks,
// index levels.
void store_header(uint8_t* header, const TxnKvOptions& o) {
  detail::store_le<uint64_t>(header, kKvMagic);
  detail::store_le<uint32_t>(header + 8, o.slots);
  detail::store_le<uint32_t>(header + 12, o.key_max);
  detail::store_le<uint32_t>(header + 16, o.value_max);
  detail::store_le<uint32_t>(header + 20, o.locks);
  detail::store_le<uint32_t>(header + 24, kIndexLevels);
}

// kDataLoss: not a version-2 TxnKv image; kInvalidArgument: one of other
// options. `db` holds at least the header.
Status check_header(std::span<const uint8_t> db, const TxnKvOptions& o) {
  const uint64_t magic = detail::load_le<uint64_t>(db.data());
  if (magic == kKvMagicV1) return data_loss("txn kv: a version-1 image (no ordered index)");
  if (magic != kKvMagic) return data_loss("txn kv: the database holds no TxnKv image");
  uint8_t want[kHeaderBytes] = {};
  store_header(want, o);
  if (std::memcmp(want, db.data(), 28) != 0) {
    return invalid_argument("txn kv: the image was formatted with other options (slots, key_max, value_max, locks)");
  }
  return ok_status();
}

// Reads the index and slots of an image that may hold anything (a crashed
// replica's): every access is checked against the layout of `o`, which the
// caller checked `db` is large enough for.
class ImageWalk {
 public:
  ImageWalk(std::span<const uint8_t> db, const TxnKvOptions& o) : db_(db), o_(o), sb_(slot_bytes(o)) {}

  uint32_t next(uint32_t node, uint32_t level) const {
    return detail::load_le<uint32_t>(db_.data() + node_offset(o_, node) + level * 4);
  }
  // Node `node`'s slot if it is a live, whole slot; nullptr otherwise.
  const uint8_t* live_slot(uint32_t node) const {
    if (node == 0 || node > o_.slots) return nullptr;
    const uint8_t* s = db_.data() + kHeaderBytes + uint64_t{node - 1} * sb_;
    if (detail::load_le<uint64_t>(s) != kLive) return nullptr;
    if (detail::load_le<uint16_t>(s + 16) > o_.key_max || detail::load_le<uint32_t>(s + 20) > o_.value_max) {
      return nullptr;
    }
    if (detail::load_le<uint64_t>(s + 8) != slot_checksum(s, sb_)) return nullptr;
    return s;
  }
  static std::string_view key(const uint8_t* slot) {
    return {reinterpret_cast<const char*>(slot + kSlotHeaderBytes), detail::load_le<uint16_t>(slot + 16)};
  }

  // Up to `count` entries from the first key >= start.
  Result<TxnKvEntries> scan(std::string_view start, uint32_t count) const {
    TxnKvEntries out;
    // Keys strictly ascend along every level of a well-formed list, so no
    // walk can cycle; the step cap is a second guard.
    const uint64_t steps_max = (uint64_t{o_.slots} + 1) * kIndexLevels;
    uint64_t steps = 0;
    uint32_t at = 0;  // the last node with key < start (0: the head)
    std::string_view at_key;
    for (uint32_t level = kIndexLevels; level-- > 0;) {
      for (;;) {
        const uint32_t n = next(at, level);
        if (n == 0) break;
        const uint8_t* s = live_slot(n);
        if (s == nullptr || ++steps > steps_max) return malformed(n);
        const std::string_view k = key(s);
        if (at != 0 && k <= at_key) return malformed(n);
        if (k >= start) break;
        at = n;
        at_key = k;
      }
    }
    std::string_view last = at_key;
    for (uint32_t n = next(at, 0); n != 0 && out.size() < count; n = next(n, 0)) {
      const uint8_t* s = live_slot(n);
      if (s == nullptr || ++steps > steps_max * 2) return malformed(n);
      const std::string_view k = key(s);
      if ((at != 0 || !out.empty()) && k <= last) return malformed(n);
      if (k < start) return malformed(n);
      const uint8_t* v = s + kSlotHeaderBytes + o_.key_max;
      out.emplace_back(std::string(k), std::vector<uint8_t>(v, v + detail::load_le<uint32_t>(s + 20)));
      last = out.back().first;
    }
    return out;
  }

 private:
  static Status malformed(uint32_t node) {
    return data_loss("txn kv: the ordered index is malformed at node " + std::to_string(node));
  }
  std::span<const uint8_t> db_;
  const TxnKvOptions& o_;
  uint64_t sb_;
};

// The index as a record will leave it: the mirror's nodes with the
// record's changes over them (the front end's side; the mirror is its own
// and well-formed).
class IndexEdit {
 public:
  using Node = std::array<uint32_t, kIndexLevels>;
  IndexEdit(std::span<const uint8_t> db, const TxnKvOptions& o) : db_(db), o_(o) {}

  // `key` (absent from the index) goes into slot `slot`.
  void insert(uint32_t slot, std::string_view key) {
    const uint32_t n = slot + 1;
    const auto preds = predecessors(key);
    const uint32_t height = index_height(key);
    Node node{};
    for (uint32_t l = 0; l < height; ++l) {
      node[l] = next(preds[l], l);
      edit(preds[l])[l] = n;
    }
    changed_[n] = node;  // a reused slot's stale node is rewritten whole
    new_keys_[n] = key;
  }
  // `key` (in the index, at slot `slot`) leaves it.
  void remove(uint32_t slot, std::string_view key) {
    const uint32_t n = slot + 1;
    const auto preds = predecessors(key);
    for (uint32_t l = 0; l < kIndexLevels; ++l) {
      if (next(preds[l], l) == n) edit(preds[l])[l] = next(n, l);
    }
  }
  // One whole-node write per changed node, in offset order; the bytes live
  // in this object.
  void append_writes(std::vector<TxnWrite>* writes) {
    bytes_.resize(changed_.size());
    size_t i = 0;
    for (const auto& [n, node] : changed_) {
      for (uint32_t l = 0; l < kIndexLevels; ++l) detail::store_le<uint32_t>(bytes_[i].data() + l * 4, node[l]);
      writes->push_back({node_offset(o_, n), bytes_[i]});
      ++i;
    }
  }

 private:
  uint32_t next(uint32_t node, uint32_t level) const {
    auto it = changed_.find(node);
    if (it != changed_.end()) return it->second[level];
    return detail::load_le<uint32_t>(db_.data() + node_offset(o_, node) + level * 4);
  }
  Node& edit(uint32_t node) {
    auto it = changed_.find(node);
    if (it != changed_.end()) return it->second;
    Node copy{};
    for (uint32_t l = 0; l < kIndexLevels; ++l) copy[l] = next(node, l);
    return changed_.emplace(node, copy).first->second;
  }
  std::string_view key_of(uint32_t node) const {
    auto it = new_keys_.find(node);
    if (it != new_keys_.end()) return it->second;
    return ImageWalk::key(db_.data() + kHeaderBytes + uint64_t{node - 1} * slot_bytes(o_));
  }
  // Per level, the last node whose key is below `key` (0: the head).
  std::array<uint32_t, kIndexLevels> predecessors(std::string_view key) const {
    std::array<uint32_t, kIndexLevels> preds{};
    uint32_t at = 0;
    for (uint32_t level = kIndexLevels; level-- > 0;) {
      for (uint32_t n = next(at, level); n != 0 && key_of(n) < key; n = next(at, level)) at = n;
      preds[level] = at;
    }
    return preds;
  }

  std::span<const uint8_t> db_;
  const TxnKvOptions& o_;
  std::map<uint32_t, Node> changed_;
  std::map<uint32_t, std::string_view> new_keys_;  // keys of slots this record fills
  std::vector<std::array<uint8_t, kNodeBytes>> bytes_;
};

}  // namespace

Result<std::unique_ptr<TxnKv>> TxnKv::create(TxnClient& txn, const TxnKvOptions& options) {
  FERRY_RETURN_IF_ERROR(check_options(options, txn.db().size()));
  std::unique_ptr<TxnKv> kv(new TxnKv(txn, options));
  // A fresh database is zeroes: empty slots and an empty index (the head's
  // pointers 0), so the header is the whole format.
  uint8_t header[kHeaderBytes] = {};
  store_header(header, options);
  const TxnWrite w[] = {{0, {header, kHeaderBytes}}};
  FERRY_RETURN_IF_ERROR(txn.append(w).status());
  FERRY_RETURN_IF_ERROR(txn.execute_all());
  ++kv->counters_.records;
  return kv;
}

uint32_t TxnKv::lock_of(std::string_view key) const { return lock_stripe(key, options_); }

Result<uint32_t> TxnKv::place(std::string_view key, const std::vector<uint32_t>& planned) const {
  const uint8_t* base = txn_.db().data() + kHeaderBytes;
  const uint64_t sb = slot_bytes(options_);
  const uint32_t start = static_cast<uint32_t>(key_hash(key) % options_.slots);
  std::optional<uint32_t> reusable;
  for (uint32_t i = 0; i < options_.slots; ++i) {
    const uint32_t idx = (start + i) % options_.slots;
    if (std::find(planned.begin(), planned.end(), idx) != planned.end()) continue;  // this record's other key
    const uint8_t* s = base + idx * sb;
    const auto state = detail::load_le<uint64_t>(s);
    if (state == kLive && slot_has_key(s, options_, key)) return idx;
    if (state == kDeleted && !reusable) reusable = idx;
    if (state == kEmpty) return reusable.value_or(idx);
  }
  if (reusable) return *reusable;
  return resource_exhausted("txn kv: the table's " + std::to_string(options_.slots) + " slots are full");
}

Status TxnKv::apply(std::span<const TxnKvOp> ops) {
  const uint64_t sb = slot_bytes(options_);
  const uint8_t* base = txn_.db().data() + kHeaderBytes;
  std::vector<std::vector<uint8_t>> slots;
  std::vector<uint32_t> planned;
  std::vector<TxnWrite> writes;
  IndexEdit index(txn_.db(), options_);
  for (const TxnKvOp& op : ops) {
    if (op.kind == TxnKvOp::kPut) {
      FERRY_ASSIGN_OR_RETURN(const uint32_t idx, place(op.key, planned));
      planned.push_back(idx);
      const uint8_t* s = base + idx * sb;
      // A new key enters the index; an update leaves it alone.
      if (detail::load_le<uint64_t>(s) != kLive || !slot_has_key(s, options_, op.key)) index.insert(idx, op.key);
      slots.push_back(make_slot(options_, kLive, op.key, op.value));
    } else {
      const auto idx = find_slot(options_, op.key, [&](uint32_t i) { return base + i * sb; });
      if (!idx) return not_found("txn kv: no key '" + std::string(op.key) + "'");
      planned.push_back(*idx);
      index.remove(*idx, op.key);
      std::vector<uint8_t> s(base + *idx * sb, base + (*idx + 1) * sb);
      detail::store_le<uint64_t>(s.data(), kDeleted);
      detail::store_le<uint64_t>(s.data() + 8, slot_checksum(s.data(), s.size()));
      slots.push_back(std::move(s));
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) writes.push_back({kHeaderBytes + planned[i] * sb, slots[i]});
  index.append_writes(&writes);  // the same record: the slots and the index change together
  // From the append on, a failure leaves the record in doubt: on some
  // replicas' logs or not, applied on some and not on others. Its locks
  // stay held (WriteLocks) so that no replica serves a read from an image
  // the others do not share; the front end that resumes takes them over
  // and runs the log again (TxnKv::open).
  const Status appended = txn_.append(writes).status();
  if (!appended.ok()) {
    in_doubt_ = appended.code() != Code::kInvalidArgument && appended.code() != Code::kResourceExhausted;
    return appended;
  }
  const Status executed = txn_.execute_all();  // a padding record may come first
  if (!executed.ok()) {
    in_doubt_ = true;
    return executed;
  }
  ++counters_.records;
  return ok_status();
}

namespace {

// Takes the write locks of `keys` in ascending order; releases them on
// destruction (in reverse) unless `in_doubt` is set by then: a record in
// doubt (TxnKv::apply). An unlock that fails (its gCAS did not get through
// to every replica) sets it: the lock may stay held on some replica, which
// then refuses the stripe's reads until a resumed front end takes every
// lock over and releases it -- the store is in doubt, as after a failed
// write, and says so (TxnKv::in_doubt).
class WriteLocks {
 public:
  WriteLocks(TxnClient& txn, const std::set<uint32_t>& locks, bool& in_doubt) : txn_(txn), in_doubt_(in_doubt) {
    for (uint32_t l : locks) {
      status_ = txn_.wr_lock(l);
      if (!status_.ok()) return;
      held_.push_back(l);
    }
  }
  ~WriteLocks() {
    if (in_doubt_) return;
    for (auto it = held_.rbegin(); it != held_.rend(); ++it) {
      if (!txn_.wr_unlock(*it).ok()) in_doubt_ = true;  // the rest are still released where they can be
    }
  }
  // One more lock, above every lock held (the ascending order holds).
  Status add(uint32_t lock) {
    FERRY_ASSERT(status_.ok() && (held_.empty() || held_.back() < lock), "txn kv: locks out of order");
    status_ = txn_.wr_lock(lock);
    if (status_.ok()) held_.push_back(lock);
    return status_;
  }
  const Status& status() const { return status_; }

 private:
  TxnClient& txn_;
  bool& in_doubt_;
  std::vector<uint32_t> held_;
  Status status_;
};

Status refuse_in_doubt() {
  return failed_precondition(
      "txn kv: an earlier write failed with its record in doubt and its locks held; resume the front end "
      "(TxnClient::initialize with resume, TxnKv::open)");
}

Status validate_ops(std::span<const TxnKvOp> ops, const TxnKvOptions& o) {
  if (ops.empty()) return invalid_argument("txn kv: an empty transaction");
  std::set<std::string_view> keys;
  for (const TxnKvOp& op : ops) {
    if (op.key.empty() || op.key.size() > o.key_max) {
      return invalid_argument("txn kv: a key of 1.." + std::to_string(o.key_max) + " bytes");
    }
    if (op.kind == TxnKvOp::kPut && op.value.size() > o.value_max) {
      return invalid_argument("txn kv: a value over " + std::to_string(o.value_max) + " bytes");
    }
    if (!keys.insert(op.key).second) return invalid_argument("txn kv: a key twice in one transaction");
  }
  return ok_status();
}

}  // namespace

Status TxnKv::put(std::string_view key, std::span<const uint8_t> value) {
  if (in_doubt_) return refuse_in_doubt();
  const TxnKvOp op{TxnKvOp::kPut, key, value};
  FERRY_RETURN_IF_ERROR(validate_ops({&op, 1}, options_));
  std::set<uint32_t> ids = {lock_of(key)};
  if (changes_index({&op, 1})) ids.insert(index_lock(options_));
  WriteLocks locks(txn_, ids, in_doubt_);
  FERRY_RETURN_IF_ERROR(locks.status());
  FERRY_RETURN_IF_ERROR(apply({&op, 1}));
  ++counters_.puts;
  return ok_status();
}

Status TxnKv::remove(std::string_view key) {
  if (in_doubt_) return refuse_in_doubt();
  const TxnKvOp op{TxnKvOp::kRemove, key, {}};
  FERRY_RETURN_IF_ERROR(validate_ops({&op, 1}, options_));
  WriteLocks locks(txn_, {lock_of(key), index_lock(options_)}, in_doubt_);
  FERRY_RETURN_IF_ERROR(locks.status());
  FERRY_RETURN_IF_ERROR(apply({&op, 1}));
  ++counters_.removes;
  return ok_status();
}

Result<std::vector<uint8_t>> TxnKv::get(std::string_view key) const {
  const uint64_t sb = slot_bytes(options_);
  const uint8_t* base = txn_.db().data() + kHeaderBytes;
  const auto idx = find_slot(options_, key, [&](uint32_t i) { return base + i * sb; });
  if (!idx) return not_found("txn kv: no key '" + std::string(key) + "'");
  const uint8_t* s = base + *idx * sb;
  const uint8_t* v = s + kSlotHeaderBytes + options_.key_max;
  return std::vector<uint8_t>(v, v + detail::load_le<uint32_t>(s + 20));
}

Status TxnKv::read_modify_write(
    std::string_view key,
    const std::function<std::optional<std::vector<uint8_t>>(std::optional<std::span<const uint8_t>>)>& fn) {
  if (in_doubt_) return refuse_in_doubt();
  const TxnKvOp probe{TxnKvOp::kPut, key, {}};
  FERRY_RETURN_IF_ERROR(validate_ops({&probe, 1}, options_));
  WriteLocks locks(txn_, {lock_of(key)}, in_doubt_);
  FERRY_RETURN_IF_ERROR(locks.status());
  auto current = get(key);
  std::optional<std::span<const uint8_t>> view;
  if (current.ok()) view = std::span<const uint8_t>(current.value());
  const std::optional<std::vector<uint8_t>> next = fn(view);
  if (!next && !current.ok()) return ok_status();  // absent stays absent
  const TxnKvOp op = next ? TxnKvOp{TxnKvOp::kPut, key, *next} : TxnKvOp{TxnKvOp::kRemove, key, {}};
  FERRY_RETURN_IF_ERROR(validate_ops({&op, 1}, options_));
  // Absent -> present or present -> absent changes the index: its lock
  // comes last, above the stripe, so the order stays ascending.
  if (next.has_value() != current.ok()) FERRY_RETURN_IF_ERROR(locks.add(index_lock(options_)));
  return apply({&op, 1});
}

Status TxnKv::transaction(std::span<const TxnKvOp> ops) {
  if (in_doubt_) return refuse_in_doubt();
  FERRY_RETURN_IF_ERROR(validate_ops(ops, options_));
  std::set<uint32_t> ids;
  for (const TxnKvOp& op : ops) ids.insert(lock_of(op.key));
  if (changes_index(ops)) ids.insert(index_lock(options_));
  WriteLocks locks(txn_, ids, in_doubt_);
  FERRY_RETURN_IF_ERROR(locks.status());
  FERRY_RETURN_IF_ERROR(apply(ops));
  ++counters_.transactions;
  return ok_status();
}

bool TxnKv::changes_index(std::span<const TxnKvOp> ops) const {
  const uint64_t sb = slot_bytes(options_);
  const uint8_t* base = txn_.db().data() + kHeaderBytes;
  for (const TxnKvOp& op : ops) {
    if (op.kind == TxnKvOp::kRemove) return true;
    if (!find_slot(options_, op.key, [&](uint32_t i) { return base + i * sb; })) return true;
  }
  return false;
}

Result<TxnKvEntries> TxnKv::scan(std::string_view start_key, uint32_t count) const {
  if (start_key.size() > options_.key_max) return invalid_argument("txn kv: a start key over key_max bytes");
  return ImageWalk(txn_.db(), options_).scan(start_key, count);
}

Result<std::unique_ptr<TxnKv>> TxnKv::open(TxnClient& txn, const TxnKvOptions& options) {
  FERRY_RETURN_IF_ERROR(check_options(options, txn.db().size()));
  // The old front end's last records (logged, so acknowledged or in
  // flight; reconciled on every member by the resume) run again under every
  // lock of the store: a replica may hold them half-applied, or replayed
  // after a power failure, and readers must not see that. One front end per
  // store: a lock held (or a writer's intent) is the dead front end's, and
  // is taken over, never released first -- a reader would get in between.
  const uint32_t words = txn_kv_lock_words(options);
  FERRY_RETURN_IF_ERROR(txn.take_over_locks(words).status());
  FERRY_RETURN_IF_ERROR(txn.execute_all());
  for (uint32_t l = words; l-- > 0;) FERRY_RETURN_IF_ERROR(txn.wr_unlock(l));
  FERRY_RETURN_IF_ERROR(check_header(txn.db(), options));
  // The index must list exactly the live slots, in order.
  FERRY_ASSIGN_OR_RETURN(const TxnKvEntries all, ImageWalk(txn.db(), options).scan({}, options.slots));
  const uint64_t sb = slot_bytes(options);
  uint64_t live = 0;
  for (uint32_t i = 0; i < options.slots; ++i) {
    live += detail::load_le<uint64_t>(txn.db().data() + kHeaderBytes + i * sb) == kLive;
  }
  if (live != all.size()) {
    return data_loss("txn kv: the ordered index lists " + std::to_string(all.size()) + " keys of " +
                     std::to_string(live) + " live slots");
  }
  return std::unique_ptr<TxnKv>(new TxnKv(txn, options));
}

Result<std::vector<uint8_t>> TxnKvReplicaReader::get(std::string_view key) {
  if (key.empty() || key.size() > options_.key_max) return invalid_argument("txn kv: a key of 1..key_max bytes");
  const uint64_t sb = slot_bytes(options_);
  const uint32_t lock = lock_stripe(key, options_);
  std::vector<uint8_t> copy(sb);
  // After a torn slot, the next look holds every stripe's read lock: then no
  // record is being applied anywhere, so a slot that still fails its
  // checksum is damaged (an image after a crash), not torn: kDataLoss.
  bool every_stripe = false;
  for (;;) {
    uint32_t first = lock, end = lock + 1;
    if (every_stripe) {
      first = 0;
      end = options_.locks;
    }
    uint32_t held = first;
    while (held < end && locks_.try_rd_lock(held)) ++held;
    if (held != end) {
      for (uint32_t l = first; l < held; ++l) locks_.rd_unlock(l);
      ++retries_;
      cpu_relax();
      continue;
    }
    bool torn = false;
    std::optional<std::vector<uint8_t>> value;
    const auto idx = find_slot(options_, key, [&](uint32_t i) -> const uint8_t* {
      std::memcpy(copy.data(), db_.data() + kHeaderBytes + i * sb, sb);
      if (detail::load_le<uint64_t>(copy.data()) != kEmpty && detail::load_le<uint64_t>(copy.data() + 8) != slot_checksum(copy.data(), sb)) {
        torn = true;  // another key's writer is changing it: look again
        return nullptr;
      }
      return copy.data();
    });
    if (idx && !torn) {
      const uint8_t* v = copy.data() + kSlotHeaderBytes + options_.key_max;
      const uint32_t value_bytes = detail::load_le<uint32_t>(copy.data() + 20);
      if (value_bytes > options_.value_max) {
        // Only a damaged image has a whole slot with this: never read past it.
        for (uint32_t l = first; l < end; ++l) locks_.rd_unlock(l);
        return data_loss("txn kv: a slot's value is over value_max");
      }
      value.emplace(v, v + value_bytes);
    }
    for (uint32_t l = first; l < end; ++l) locks_.rd_unlock(l);
    if (torn) {
      if (every_stripe) return data_loss("txn kv: a slot on the probe path of '" + std::string(key) +
                                         "' fails its checksum with no writer active: the image is damaged");
      ++retries_;
      every_stripe = true;
      continue;
    }
    if (!value) return not_found("txn kv: no key '" + std::string(key) + "'");
    return std::move(*value);
  }
}

Status TxnKvReplicaReader::check_image() const {
  if (db_.size() < txn_kv_db_bytes(options_)) return invalid_argument("txn kv: the replica's database is too small");
  return check_header(db_, options_);
}

Result<TxnKvEntries> TxnKvReplicaReader::scan(std::string_view start_key, uint32_t count) {
  if (start_key.size() > options_.key_max) return invalid_argument("txn kv: a start key over key_max bytes");
  if (db_.size() < txn_kv_db_bytes(options_)) return invalid_argument("txn kv: the replica's database is too small");
  const uint32_t words = txn_kv_lock_words(options_);
  for (;;) {
    uint32_t held = 0;
    while (held < words && locks_.try_rd_lock(held)) ++held;
    if (held == words) {
      Result<TxnKvEntries> out = [&]() -> Result<TxnKvEntries> {
        FERRY_RETURN_IF_ERROR(check_header(db_, options_));
        return ImageWalk(db_, options_).scan(start_key, count);
      }();
      for (uint32_t l = words; l-- > 0;) locks_.rd_unlock(l);
      return out;
    }
    // A writer holds lock `held`: let go of the rest so it can finish.
    for (uint32_t l = held; l-- > 0;) locks_.rd_unlock(l);
    ++retries_;
    cpu_relax();
  }
}

}  // namespace ferry::hyperloop
