// PmKv: a persistent key-value engine in one PM region -- the back end of
// JUNE BERRY-D's servers (NSDI'25 §5.3, §6.4: PMemKV keeping objects in PM),
// built on Ferry's persistent-memory model (docs/persistence.md).
//
// Design (format and argument: docs/pmkv.md):
//  - A chained hash index in PM: an array of 8-byte bucket heads; every record
//    starts with the 8-byte link to the next record of its chain. A link is a
//    tagged pointer (block offset + 16-bit key fingerprint).
//  - Records are copy-on-write: a put writes a new record into a free block
//    with non-temporal stores, fences, then publishes it with ONE 8-byte link
//    store that also unlinks the old version, and fences again. A remove is
//    one link store and a fence. The link store is the commit: nothing is
//    reachable before it is durable.
//  - Allocation state lives in DRAM only (H8: nothing volatile or lock-like
//    on PM) and is rebuilt at open() from what the index reaches, so a crash
//    can never leak or double-allocate a block.
//
// Limits: keys 0..kPmKvMaxKeyBytes bytes, values 0..kPmKvMaxValueBytes bytes,
// both arbitrary binary. The bucket count is fixed at create().
//
// Thread rules: a PmKv belongs to one thread (one server worker); it takes no
// locks. Distinct PmKv objects on distinct regions are independent. The region
// (and its domain) must outlive the PmKv; no one else may write the region
// while a PmKv uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/pm/domain.h"
#include "ferry/pm/region.h"

namespace ferry::store {

inline constexpr size_t kPmKvMaxKeyBytes = 255;
inline constexpr size_t kPmKvMaxValueBytes = 64 << 10;

// The ordering points of a mutation, in the order they occur. Not every
// operation passes every point: a put passes kBeforeWrite, kDataWritten,
// kDataDurable, kCommitWritten, kCommitDurable; a remove kBeforeWrite,
// kCommitWritten, kCommitDurable; create() all seven; a repairing open()
// kCommitWritten, kCommitDurable per link it cuts.
enum class CrashPoint : uint8_t {
  kBeforeWrite,    // the operation is about to store to PM; nothing of it is there yet
  kRetireWritten,  // create(): the old store's magic word is cleared, not fenced
  kRetireDurable,  // create(): ... fenced: no store in the region any more
  kDataWritten,    // the new record (create(): the layout) is stored, not fenced
  kDataDurable,    // ... fenced, not yet reachable
  kCommitWritten,  // the publishing 8-byte word is stored, not fenced
  kCommitDurable,  // ... fenced: the operation is durable
};
std::string_view crash_point_name(CrashPoint point);

// Test seam for crash injection: called at every ordering point. Returning
// true continues; returning false stops the operation right there, as if the
// power had failed (the hook typically calls PersistenceDomain::power_fail
// before returning false). The operation then returns kUnavailable, and the
// PmKv refuses every later call with kFailedPrecondition: open() the region
// again to continue.
using CrashHook = std::function<bool(CrashPoint)>;

struct PmKvOptions {
  // create(): buckets of the hash index (fixed for the store's life). 0 picks
  // region_bytes / 256: chains of about two records when the region is full
  // of ~100-byte objects. At most half the region.
  uint64_t bucket_count = 0;
  // open(): on an invalid link or record, false fails with kDataLoss; true
  // cuts the link (persistently: the chain ends there) and keeps everything
  // still reachable and valid.
  bool repair = false;
  // open(): check every record's CRC (reads all data); false checks headers only.
  bool verify_checksums = true;
  CrashHook crash_hook = {};  // tests only
};

struct PmKvStats {
  uint64_t records = 0;  // live keys
  uint64_t bucket_count = 0;
  uint64_t heap_bytes = 0;          // the region's space for records
  uint64_t bytes_in_use = 0;        // blocks of live records (headers, padding included)
  uint64_t payload_bytes = 0;       // keys + values of live records
  uint64_t bytes_free = 0;          // heap_bytes - bytes_in_use
  uint64_t largest_free_bytes = 0;  // the largest free extent (fragmentation: bytes_free is not one block)
  uint64_t free_extents = 0;
  uint64_t reservations = 0;        // live reserve()s
  uint64_t bytes_reserved = 0;      // their bytes no record uses (not in bytes_free)
  uint64_t reserved_misses = 0;     // put_reserved()s whose spot was taken: placed by the allocator instead
  uint64_t fences = 0;  // PM fences (drains) issued by this instance
  uint64_t puts = 0;    // successful mutations by this instance
  uint64_t removes = 0;
};

// Heap set aside by PmKv::reserve(): [offset, offset + bytes) of the region,
// 256-byte aligned. What it names is DRAM state: after a failure, adopt() it
// to set it aside again.
struct PmKvReservation {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// What open() found.
struct PmKvRecovery {
  uint64_t records = 0;  // valid records reached from the index
  uint64_t longest_chain = 0;
  uint64_t links_cut = 0;             // repair only: invalid links cut (each loses the rest of its chain)
  std::vector<std::string> problems;  // repair only: what each cut link pointed to, for humans
};

class PmKv {
 public:
  // Formats `region` (a PM region of `domain`) as an empty store, replacing
  // whatever it held, and returns the engine for it. kInvalidArgument for a
  // DRAM region, a region too small, a base not 256-byte aligned, or a
  // bucket_count too large. If it fails part-way (power failure), a later
  // open() finds either the old store intact, no store (kNotFound) or the
  // empty new one.
  static Result<std::unique_ptr<PmKv>> create(pm::PersistenceDomain& domain, pm::Region& region,
                                              PmKvOptions options = {});
  // Recovers the store in `region` after a clean shutdown, a process crash or
  // a power failure: validates the superblock, walks every chain, checks
  // every record, rebuilds the allocator. O(index + data). kNotFound: the
  // region holds no store (never formatted, foreign, or a create() that did
  // not finish); kDataLoss: it holds a corrupt one (message says where; see
  // options.repair); kUnimplemented: another format version; kInvalidArgument
  // as for create().
  static Result<std::unique_ptr<PmKv>> open(pm::PersistenceDomain& domain, pm::Region& region,
                                            PmKvOptions options = {});
  ~PmKv();
  PmKv(const PmKv&) = delete;
  PmKv& operator=(const PmKv&) = delete;

  // Inserts or replaces. When it returns OK the new value is durable; a put
  // interrupted by a power failure leaves the old value or the new one, whole.
  // An identical value is a no-op (no PM write). kInvalidArgument for a key or
  // value over the limits; kResourceExhausted when no free block fits (the
  // store is unchanged; a replace needs room for the new record before the
  // old one is freed); kDataLoss if the chain is found corrupt.
  Status put(std::string_view key, std::string_view value);
  // Reservations: room set aside so that later puts cannot fail for lack of
  // it (JUNE BERRY's admission, PmKvService). reserve() takes `bytes`
  // (rounded up to 256) of contiguous free heap, 256-byte aligned; put()s
  // elsewhere never use it. kResourceExhausted if no free extent is that
  // large (nothing changed).
  Result<PmKvReservation> reserve(uint64_t bytes);
  // After open(): sets `r` aside again, as it was before a failure -- its
  // free parts leave the free space; the records in it stay. kInvalidArgument
  // if r is not a 256-aligned range of the heap, kFailedPrecondition if it
  // overlaps a live reservation.
  Status adopt(const PmKvReservation& r);
  // Gives back the parts of `r` no record uses. A record placed in it stays
  // where it is. Releasing what is not reserved is a no-op.
  void release(const PmKvReservation& r);
  // As put(), but a new record goes in the reservation, in its spot
  // [r.offset + at, + room): padded and aligned to its write granularity
  // (H5/H6) if that fits the spot, else in whole 64 B lines from the spot's
  // start (at is 64-aligned; a spot of room >= the record rounded up to 64
  // always holds it). The caller gives every put a spot of its own (JUNE
  // BERRY: where its request lay in the receive buffer); a spot that does
  // not hold the record or overlaps a live one is not used, and the put
  // falls back to the free heap (counted: reserved_misses).
  Status put_reserved(std::string_view key, std::string_view value, const PmKvReservation& r, uint64_t at,
                      uint64_t room);

  // The value of `key`, verified against its checksum. kNotFound if absent;
  // kDataLoss if the record is corrupt.
  Result<std::string> get(std::string_view key) const;
  // As get(), copying into `out`; returns the value's size. kOutOfRange (and
  // nothing copied) if `out` is smaller than the value: the message says how
  // large it is.
  Result<size_t> get_into(std::string_view key, std::span<uint8_t> out) const;
  // Deletes `key`; durable when it returns OK. kNotFound if absent.
  Status remove(std::string_view key);
  // Calls fn for every record, in index order. The views are valid during the
  // call only; fn must not call back into this PmKv. kDataLoss on a corrupt record.
  Status for_each(const std::function<void(std::string_view key, std::string_view value)>& fn) const;

  size_t size() const { return records_; }
  PmKvStats stats() const;
  const PmKvRecovery& recovery() const { return recovery_; }
  // Consistency check (fsck): every chain valid, every record's checksum
  // right, no key twice, and the allocator's free space plus the unused parts
  // of reservations exactly the space no record uses. O(index + data). kDataLoss / kInternal with the first problem.
  Status verify() const;

  struct Layout;    // internal (src/store/pmkv_format.h)
  class Allocator;  // internal (src/store/pmkv_alloc.h)

 private:
  PmKv(pm::PersistenceDomain& domain, pm::Region& region, PmKvOptions options);

  // Where a key is, or where it would be inserted (pmkv_format.h).
  struct Position;
  Result<Position> find(std::string_view key, uint64_t hash) const;
  // put() and put_reserved(): `r` null for the free heap.
  Status put_at(std::string_view key, std::string_view value, const PmKvReservation* r, uint64_t at, uint64_t room);
  // A block for a record of `record` bytes in r's spot: {first unit,
  // units}, or nullopt if the spot cannot take it (pmkv_reserve.cc).
  std::optional<std::pair<uint64_t, uint64_t>> place_reserved(size_t record, const PmKvReservation& r, uint64_t at,
                                                              uint64_t room);
  // A record's block becomes unreachable: back to its reservation if it lies
  // in one (only a later release() frees it), else to the allocator.
  void free_block(uint64_t unit, uint64_t units);
  // get()'s and get_into()'s lookup: the key's record, its checksum verified
  // (kNotFound, kDataLoss).
  Result<Position> find_verified(std::string_view key) const;
  Status check_usable() const;
  // Calls the crash hook; false: the operation must stop now (pmkv_write.cc).
  bool reached(CrashPoint point);
  Status stopped(CrashPoint point);
  // Stores the aligned 8-byte word at `offset` (a link, or the superblock's
  // magic) and fences: the commit of every mutation (pmkv_write.cc).
  Status commit_word(uint64_t offset, uint64_t value, CrashPoint written, CrashPoint durable);
  Status format();   // create()'s writes, pmkv_write.cc
  Status recover();  // open()'s walk and rebuild, pmkv_recovery.cc
  // Walks the whole index, checking every link and record, and sets a bit in
  // `used` (one per 64 B heap unit) for every reachable block. An invalid
  // link fails with kDataLoss, or, given `cut`, is handed to it and ends its
  // chain (pmkv_recovery.cc).
  struct Totals {
    uint64_t records = 0;
    uint64_t bytes_in_use = 0;
    uint64_t payload_bytes = 0;
    uint64_t longest_chain = 0;
  };
  using CutLink = std::function<Status(uint64_t link_at, const std::string& why)>;
  Status walk(std::vector<uint64_t>& used, const CutLink* cut, bool verify_checksums, Totals& totals) const;

  pm::Region* region_;
  uint8_t* base_;
  PmKvOptions options_;
  bool eadr_;  // the domain's caches are persistent: commit words need no write-back
  std::unique_ptr<Layout> layout_;
  std::unique_ptr<Allocator> alloc_;
  std::vector<uint8_t> scratch_;  // DRAM staging of one record (one block)
  uint64_t records_ = 0;
  uint64_t bytes_in_use_ = 0;
  uint64_t payload_bytes_ = 0;
  uint64_t fences_ = 0;
  uint64_t puts_ = 0;
  uint64_t removes_ = 0;
  bool failed_ = false;  // a crash hook stopped an operation
  PmKvRecovery recovery_;
  // Live reservations by first unit: their units, and which hold a record.
  struct Reserved {
    uint64_t units = 0;
    std::vector<bool> live;
    uint64_t live_units = 0;
  };
  std::map<uint64_t, Reserved> reserved_;
  uint64_t reserved_misses_ = 0;
};

}  // namespace ferry::store
