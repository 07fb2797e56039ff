// The transactional key-value store over TxnClient (§5.2): slot placement
// in the front end's mirror, one log record per operation or transaction,
// striped group write locks, and replicas' locked reads.
#include "ferry/hyperloop/txn_kv.h"
#include "le_words.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "ferry/common/checksum.h"
#include "ferry/common/cpu.h"
#include "ferry/common/rng.h"

namespace ferry::hyperloop {

namespace {

constexpr uint64_t kKvMagic = 0x31564B5854504C48ULL;  // "HLPTXKV1"
constexpr uint64_t kHeaderBytes = 64;
constexpr uint64_t kSlotHeaderBytes = 32;
constexpr uint64_t kEmpty = 0, kLive = 1, kDeleted = 2;

uint64_t slot_bytes(const TxnKvOptions& o) { return (kSlotHeaderBytes + o.key_max + o.value_max + 63) / 64 * 64; }

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

uint64_t txn_kv_db_bytes(const TxnKvOptions& o) { return kHeaderBytes + uint64_t{o.slots} * slot_bytes(o); }

Result<std::unique_ptr<TxnKv>> TxnKv::create(TxnClient& txn, const TxnKvOptions& options) {
  if (options.slots == 0 || options.key_max == 0 || options.key_max > 65535 || options.locks == 0) {
    return invalid_argument("txn kv: slots, key_max (1..65535) and locks must be non-zero");
  }
  if (txn_kv_db_bytes(options) > txn.db().size()) {
    return invalid_argument("txn kv: the table needs " + std::to_string(txn_kv_db_bytes(options)) +
                            " bytes of database; the log's database has " + std::to_string(txn.db().size()));
  }
  std::unique_ptr<TxnKv> kv(new TxnKv(txn, options));
  uint8_t header[kHeaderBytes] = {};
  detail::store_le<uint64_t>(header, kKvMagic);
  detail::store_le<uint32_t>(header + 8, options.slots);
  detail::store_le<uint32_t>(header + 12, options.key_max);
  detail::store_le<uint32_t>(header + 16, options.value_max);
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
  for (const TxnKvOp& op : ops) {
    if (op.kind == TxnKvOp::kPut) {
      FERRY_ASSIGN_OR_RETURN(const uint32_t idx, place(op.key, planned));
      planned.push_back(idx);
      slots.push_back(make_slot(options_, kLive, op.key, op.value));
    } else {
      const auto idx = find_slot(options_, op.key, [&](uint32_t i) { return base + i * sb; });
      if (!idx) return not_found("txn kv: no key '" + std::string(op.key) + "'");
      planned.push_back(*idx);
      std::vector<uint8_t> s(base + *idx * sb, base + (*idx + 1) * sb);
      detail::store_le<uint64_t>(s.data(), kDeleted);
      detail::store_le<uint64_t>(s.data() + 8, slot_checksum(s.data(), s.size()));
      slots.push_back(std::move(s));
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) writes.push_back({kHeaderBytes + planned[i] * sb, slots[i]});
  FERRY_RETURN_IF_ERROR(txn_.append(writes).status());
  FERRY_RETURN_IF_ERROR(txn_.execute_all());  // a padding record may come first
  ++counters_.records;
  return ok_status();
}

namespace {

// Takes the write locks of `keys` in ascending order; releases them on
// destruction (in reverse).
class WriteLocks {
 public:
  WriteLocks(TxnClient& txn, std::set<uint32_t> locks) : txn_(txn) {
    for (uint32_t l : locks) {
      status_ = txn_.wr_lock(l);
      if (!status_.ok()) return;
      held_.push_back(l);
    }
  }
  ~WriteLocks() {
    for (auto it = held_.rbegin(); it != held_.rend(); ++it) (void)txn_.wr_unlock(*it);
  }
  const Status& status() const { return status_; }

 private:
  TxnClient& txn_;
  std::vector<uint32_t> held_;
  Status status_;
};

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
  const TxnKvOp op{TxnKvOp::kPut, key, value};
  FERRY_RETURN_IF_ERROR(validate_ops({&op, 1}, options_));
  WriteLocks locks(txn_, {lock_of(key)});
  FERRY_RETURN_IF_ERROR(locks.status());
  FERRY_RETURN_IF_ERROR(apply({&op, 1}));
  ++counters_.puts;
  return ok_status();
}

Status TxnKv::remove(std::string_view key) {
  const TxnKvOp op{TxnKvOp::kRemove, key, {}};
  FERRY_RETURN_IF_ERROR(validate_ops({&op, 1}, options_));
  WriteLocks locks(txn_, {lock_of(key)});
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
  const TxnKvOp probe{TxnKvOp::kPut, key, {}};
  FERRY_RETURN_IF_ERROR(validate_ops({&probe, 1}, options_));
  WriteLocks locks(txn_, {lock_of(key)});
  FERRY_RETURN_IF_ERROR(locks.status());
  auto current = get(key);
  std::optional<std::span<const uint8_t>> view;
  if (current.ok()) view = std::span<const uint8_t>(current.value());
  const std::optional<std::vector<uint8_t>> next = fn(view);
  if (!next && !current.ok()) return ok_status();  // absent stays absent
  const TxnKvOp op = next ? TxnKvOp{TxnKvOp::kPut, key, *next} : TxnKvOp{TxnKvOp::kRemove, key, {}};
  FERRY_RETURN_IF_ERROR(validate_ops({&op, 1}, options_));
  return apply({&op, 1});
}

Status TxnKv::transaction(std::span<const TxnKvOp> ops) {
  FERRY_RETURN_IF_ERROR(validate_ops(ops, options_));
  std::set<uint32_t> ids;
  for (const TxnKvOp& op : ops) ids.insert(lock_of(op.key));
  WriteLocks locks(txn_, ids);
  FERRY_RETURN_IF_ERROR(locks.status());
  FERRY_RETURN_IF_ERROR(apply(ops));
  ++counters_.transactions;
  return ok_status();
}

Result<std::vector<uint8_t>> TxnKvReplicaReader::get(std::string_view key) {
  if (key.empty() || key.size() > options_.key_max) return invalid_argument("txn kv: a key of 1..key_max bytes");
  const uint64_t sb = slot_bytes(options_);
  const uint32_t lock = lock_stripe(key, options_);
  std::vector<uint8_t> copy(sb);
  for (;;) {
    if (!locks_.try_rd_lock(lock)) {
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
      value.emplace(v, v + detail::load_le<uint32_t>(copy.data() + 20));
    }
    locks_.rd_unlock(lock);
    if (torn) {
      ++retries_;
      continue;
    }
    if (!value) return not_found("txn kv: no key '" + std::string(key) + "'");
    return std::move(*value);
  }
}

}  // namespace ferry::hyperloop
