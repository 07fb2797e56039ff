// Linearizability checker for key-value histories.
//
// Per key (linearizability is local: Herlihy & Wing, "Linearizability: a
// correctness condition for concurrent objects", TOPLAS 1990; checking the
// parts separately is the P-compositionality of Horn & Kroening, FORTE 2015),
// a depth-first search for a linearization in the style of Wing & Gong
// ("Testing and verifying concurrent objects", JPDC 1993) with the state cache
// of Lowe ("Testing for linearizability", CCPE 2017), as in Porcupine
// (Athalye, 2017):
//   - The key's call and return events, sorted by time, form a doubly linked
//     list. A configuration is (set of linearized ops, register value); the
//     ops that may take effect next are those whose call precedes the first
//     remaining return (the "enabled" ops). Linearizing one unlinks its call
//     and return. When no enabled op leads anywhere new, the search backs up
//     to the latest choice and tries the next one.
//   - When no return remains, every completed op is linearized: success.
//   - Each configuration reached is cached; reaching it again prunes the
//     branch, since its future was already explored.
//
// Register-specific reductions, each sound (a linearization exists iff the
// reduced search finds one):
//   - Values are numbered. A value no unlinearized read returns is "junk":
//     configurations that differ only in which junk value is current have the
//     same future, so the cache stores one junk value for all.
//   - Forced moves. An enabled read valid in the current value is linearized
//     with no alternative tried: moving it to the front of any linearization
//     from here keeps that valid. Likewise an enabled write of a junk value
//     while the current value is junk: in any linearization from here the ops
//     before it start with a write (no read wants the current value) and the
//     op after it is a write (no read wants its value), so it can move to the
//     front.
//   - Other moves are tried earliest return first (the op due first).
//   - Dead ends are cut early. A write is not tried if it would overwrite a
//     value that some unlinearized read still returns while no unlinearized
//     write of that value remains (that read could never take effect), nor if
//     after it some remaining read of its value is invoked only after another
//     write is already due (every other write must follow that read). A read
//     of a value that no write invoked before the read returned writes fails
//     the key before the search starts.
//
// Cache keys are short: completed ops are numbered in call order; every op
// below the first unlinearized one, m, is linearized, and every linearized op
// above m was invoked before m's return (the search never passes a return), so
// the set is (m, the bitmap from m up to that bound, the pending ops' bitmap).
// A state costs O(concurrency) words rather than O(ops / 64).
//
// Pending ops (no return) may take effect any time after their call, or
// never. Linearizing them as ordinary ops makes the search exponential in
// their number (each open one doubles the reachable sets), so a pending write
// only moves together with a read: when an enabled read is invalid in the
// current value, the search may linearize "pending write of the value it
// returns, then the read". Nothing is lost: in any linearization, a pending
// write not directly followed by a read of its value is either overwritten
// unseen or redundant, and dropping it leaves a valid linearization (a pending
// op constrains no other op's position). Enabled pending writes of one value
// are interchangeable, so only the earliest is tried. Pending reads are
// dropped up front.
//
// Explaining a violation: besides the op the search could not get past, the
// checker shrinks the key's ops with delta debugging (Zeller & Hildebrandt,
// TSE 2002) to a minimal subset that is still not linearizable. Dropping a
// write also drops every read of the value it writes, which makes the subset a
// certificate: any linearization of the whole history, restricted to the
// subset, would linearize the subset (each kept read keeps every write of its
// value, so its last preceding write is still there).
#include "key_search.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <set>
#include <unordered_map>
#include <utility>

#include "ferry/common/assert.h"
#include "ferry/common/rng.h"

namespace ferry::sim::detail {
namespace {

// Set of visited search states: variable-length word strings in one arena,
// indexed by an open-addressing hash table.
class StateCache {
 public:
  // Adds `words`; false if they were already present.
  bool insert(const std::vector<uint64_t>& words) {
    uint64_t hash = 0x6c696e6561726973ULL ^ words.size();
    for (uint64_t w : words) hash = mix64(hash ^ w);
    if ((entries_.size() + 1) * 2 > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const uint32_t slot = slots_[i];
      if (slot == 0) {
        entries_.push_back({hash, arena_.size(), static_cast<uint32_t>(words.size())});
        arena_.insert(arena_.end(), words.begin(), words.end());
        slots_[i] = static_cast<uint32_t>(entries_.size());
        return true;
      }
      const Entry& e = entries_[slot - 1];
      if (e.hash == hash && e.length == words.size() &&
          std::equal(words.begin(), words.end(),
                     arena_.begin() + static_cast<ptrdiff_t>(e.offset))) {
        return false;
      }
    }
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t hash;
    size_t offset;
    uint32_t length;
  };
  void grow() {
    std::vector<uint32_t> slots(std::max<size_t>(64, slots_.size() * 2), 0);
    const size_t mask = slots.size() - 1;
    for (size_t n = 0; n < entries_.size(); ++n) {
      size_t i = entries_[n].hash & mask;
      while (slots[i] != 0) i = (i + 1) & mask;
      slots[i] = static_cast<uint32_t>(n + 1);
    }
    slots_ = std::move(slots);
  }
  std::vector<uint64_t> arena_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> slots_;  // 0 = empty, else entries_ index + 1
};


constexpr size_t kStuckValuesMax = 4;
constexpr size_t kStuckTailMax = 6;
constexpr size_t kStuckOpenMax = 8;

// One search over one key's ops (see the file comment).
class KeySearch {
 public:
  explicit KeySearch(std::span<const KeyOp> ops) : ops_(ops) {
    struct Event {
      uint64_t time_ns;
      bool is_return;
      uint32_t op;
    };
    std::vector<Event> events;
    events.reserve(ops.size() * 2);
    for (size_t i = 0; i < ops.size(); ++i) {
      FERRY_ASSERT(ops[i].complete_ns || ops[i].kind != KvOp::kGet, "pending reads are dropped before");
      const auto op = static_cast<uint32_t>(i);
      events.push_back({ops[i].invoke_ns, false, op});
      if (ops[i].complete_ns) events.push_back({*ops[i].complete_ns, true, op});
    }
    // Calls before returns at equal times: an op returning at t and one
    // invoked at t stay concurrent (see the header).
    std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
      if (a.time_ns != b.time_ns) return a.time_ns < b.time_ns;
      if (a.is_return != b.is_return) return !a.is_return;
      return a.op < b.op;
    });

    // Value numbers: 0 is absent.
    std::unordered_map<uint64_t, uint32_t> ids;
    value_of_id_.push_back(std::nullopt);
    op_value_.resize(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i].value) continue;  // remove, or a read of absent: 0
      const auto [it, added] = ids.try_emplace(*ops[i].value, value_of_id_.size());
      if (added) value_of_id_.push_back(*ops[i].value);
      op_value_[i] = it->second;
    }
    readers_left_.assign(value_of_id_.size(), 0);
    writers_left_.assign(value_of_id_.size(), 0);
    readers_of_.resize(value_of_id_.size());
    pending_writers_of_.resize(value_of_id_.size());
    pending_used_.assign(value_of_id_.size(), 0);

    // The list links the completed ops' events only: a pending op is never
    // due, and is enabled once its call precedes the first remaining return.
    const size_t entries = events.size();
    head_ = static_cast<uint32_t>(entries);
    next_.assign(entries + 1, head_);
    prev_.assign(entries + 1, head_);
    entry_op_.resize(entries);
    entry_is_call_.resize(entries);
    call_entry_.assign(ops.size(), kNone);
    return_entry_.assign(ops.size(), kNone);
    uint32_t last = head_;
    for (size_t e = 0; e < entries; ++e) {
      const uint32_t op = events[e].op;
      const auto entry = static_cast<uint32_t>(e);
      entry_op_[e] = op;
      entry_is_call_[e] = events[e].is_return ? 0 : 1;
      (events[e].is_return ? return_entry_ : call_entry_)[op] = entry;
      if (!ops[op].complete_ns) {
        if (ops[op].kind != KvOp::kGet) pending_writers_of_[op_value_[op]].push_back(op);
      } else {
        next_[last] = entry;
        prev_[entry] = last;
        last = entry;
        if (!events[e].is_return && ops[op].kind == KvOp::kGet) {
          readers_of_[op_value_[op]].push_back(op);
        }
      }
      if (!events[e].is_return) {
        if (ops[op].kind == KvOp::kGet) {
          readers_left_[op_value_[op]] += 1;
        } else {
          writers_left_[op_value_[op]] += 1;
        }
      }
    }
    next_[last] = head_;
    prev_[head_] = last;

    // Bit numbers: completed ops 0..completed_-1 in call order, then pending ops.
    bit_.resize(ops.size());
    for (const KeyOp& op : ops) completed_ += op.complete_ns.has_value() ? 1 : 0;
    call_bound_.resize(completed_);
    uint32_t next_completed = 0;
    auto next_pending = static_cast<uint32_t>(completed_);
    for (const Event& ev : events) {
      const bool pending = !ops[ev.op].complete_ns.has_value();
      if (!ev.is_return) {
        bit_[ev.op] = pending ? next_pending++ : next_completed++;
      } else {
        call_bound_[bit_[ev.op]] = next_completed;
      }
    }
    done_.assign((completed_ + 63) / 64, 0);
    pending_done_.assign((ops.size() - completed_ + 63) / 64, 0);
  }

  KeyOutcome run(uint64_t max_states) {
    KeyOutcome out;
    if (const uint32_t read = read_without_writer(); read != kNone) {
      stuck_ = {};
      stuck_.op = stuck_.due_op = read;
      stuck_.reason = Stuck::kNoWriter;
      out.verdict = Verdict::kViolation;
      out.stuck = stuck_;
      return out;
    }
    uint32_t value = 0;       // the register: a value number
    uint64_t first_move = 0;  // resuming a configuration: moves below this were tried
    while (true) {
      enabled_.clear();
      uint32_t first_return = next_[head_];
      for (; first_return != head_ && entry_is_call_[first_return] != 0;
           first_return = next_[first_return]) {
        enabled_.push_back(first_return);
      }
      if (first_return == head_) break;  // every completed op is linearized

      bool moved = false;
      bool forced = false;
      bool kept_value = false;      // a move was skipped to keep the current value's reads
      uint32_t unfit_reader = kNone;  // a move was refused: this read could no longer fit
      if (first_move == 0) {
        const uint32_t entry = forced_move(value);
        if (entry != kNone) {
          forced = true;
          moved = try_linearize({entry, kNone, value, 0, true}, value);
        }
      }
      if (!forced) {
        // Leaving the current value would strand its readers for good.
        const bool keep_value = readers_left_[value] > 0 && writers_left_[value] == 0;
        collect_moves(value, first_return);
        for (uint64_t move : moves_) {
          if (move < first_move) continue;
          const uint32_t op = entry_op_[static_cast<uint32_t>(move >> 32)];
          const auto rank = static_cast<uint32_t>(move & 0xffffffffU);
          uint32_t pending_entry = kNone;
          uint32_t written = op_value_[op];
          if (rank != 0) {
            pending_entry = call_entry_[pending_writers_of_[op_value_[op]][rank - 1]];
          }
          if (keep_value && written != value) {
            kept_value = true;
            continue;
          }
          if (try_linearize({call_entry_[op], pending_entry, value, move, false}, written)) {
            moved = true;
            break;
          }
          if (unfit_reader == kNone) unfit_reader = unfit_reader_;
        }
      }
      if (moved) {
        if (cache_.size() > max_states) {
          out.verdict = Verdict::kInconclusive;
          break;
        }
        value = last_value_;
        first_move = 0;
        continue;
      }

      // Nothing new from here: back up to the latest unforced move and try
      // the next one there.
      note_stuck(first_return, value, kept_value, unfit_reader);
      bool resumed = false;
      while (!stack_.empty() && !resumed) {
        const Frame frame = stack_.back();
        stack_.pop_back();
        value = frame.before;
        unlift(frame.entry);
        unmark(entry_op_[frame.entry]);
        if (frame.pending_entry != kNone) unmark(entry_op_[frame.pending_entry]);
        if (!frame.forced) {
          first_move = frame.move + 1;
          resumed = true;
        }
      }
      if (!resumed) {
        out.verdict = Verdict::kViolation;
        break;
      }
    }
    out.states = cache_.size();
    if (out.verdict != Verdict::kLinearizable && stuck_entry_ != kNone) out.stuck = stuck_;
    return out;
  }

 private:
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  static constexpr uint64_t kJunk = 0xffffffffU;  // cache key of any junk value

  struct Frame {
    uint32_t entry;          // call entry of the linearized completed op
    uint32_t pending_entry;  // call entry of the pending write just before it, or kNone
    uint32_t before;         // the register value before both
    uint64_t move;           // the move's number (see collect_moves)
    bool forced;             // no other move from its configuration needs trying
  };

  bool is_get(uint32_t op) const { return ops_[op].kind == KvOp::kGet; }

  // A read of a present value that no write invoked before the read returned
  // writes (the one due first), or kNone. Such a read can never take effect,
  // and catching it up front saves exploring everything before its return.
  uint32_t read_without_writer() const {
    std::vector<uint32_t> first_write_call(value_of_id_.size(), kNone);
    for (size_t op = 0; op < ops_.size(); ++op) {
      uint32_t& first = first_write_call[op_value_[op]];
      if (!is_get(static_cast<uint32_t>(op))) first = std::min(first, call_entry_[op]);
    }
    uint32_t hopeless = kNone;
    for (size_t op = 0; op < ops_.size(); ++op) {
      const uint32_t value = op_value_[op];
      if (!is_get(static_cast<uint32_t>(op)) || value == 0) continue;
      const bool no_writer = first_write_call[value] == kNone || first_write_call[value] > return_entry_[op];
      if (no_writer && (hopeless == kNone || return_entry_[op] < return_entry_[hopeless])) {
        hopeless = static_cast<uint32_t>(op);
      }
    }
    return hopeless;
  }

  // The forced move from the current configuration (see the file comment):
  // an enabled read of `value`, else, if `value` is junk, an enabled write of
  // a junk value; the one due first. kNone if there is none.
  uint32_t forced_move(uint32_t value) const {
    uint32_t best = kNone;
    for (uint32_t e : enabled_) {
      const uint32_t op = entry_op_[e];
      if (is_get(op) && op_value_[op] == value &&
          (best == kNone || return_entry_[op] < return_entry_[entry_op_[best]])) {
        best = e;
      }
    }
    if (best != kNone || readers_left_[value] != 0) return best;
    for (uint32_t e : enabled_) {
      const uint32_t op = entry_op_[e];
      if (!is_get(op) && readers_left_[op_value_[op]] == 0 &&
          (best == kNone || return_entry_[op] < return_entry_[entry_op_[best]])) {
        best = e;
      }
    }
    return best;
  }

  // moves_ = the unforced moves from the current configuration, in the order
  // to try them: each enabled completed write, and each (enabled pending
  // write, enabled read of its value) pair. A move's number is (return entry
  // of the completed op) << 32 | (0, or 1 + the pending write's rank in
  // pending_writers_of_), so the op due first is tried first.
  void collect_moves(uint32_t value, uint32_t first_return) {
    moves_.clear();
    for (uint32_t e : enabled_) {
      const uint32_t op = entry_op_[e];
      const uint64_t base = uint64_t{return_entry_[op]} << 32;
      if (!is_get(op)) {
        moves_.push_back(base);
        continue;
      }
      if (op_value_[op] == value) continue;
      // Enabled pending writes of one value are interchangeable (each stays
      // enabled from here on and none is ever due), so only the first unused
      // one is tried; the used ones are therefore always a prefix.
      const std::vector<uint32_t>& writers = pending_writers_of_[op_value_[op]];
      const uint32_t rank = pending_used_[op_value_[op]];
      if (rank < writers.size() && call_entry_[writers[rank]] < first_return) {
        moves_.push_back(base | (rank + 1));
      }
    }
    std::sort(moves_.begin(), moves_.end());
  }

  // Linearizes frame.entry's op, after the pending write at
  // frame.pending_entry unless that is kNone, if the resulting configuration
  // is new; `written` is the value after the pending write (frame.before
  // without one). Sets last_value_. Returns false, changing nothing, if the op
  // is invalid there, if an unforced write leaves a read that cannot fit any
  // more (then unfit_reader_ is that read), or if the configuration was
  // explored before.
  bool try_linearize(const Frame& frame, uint32_t written) {
    const uint32_t op = entry_op_[frame.entry];
    unfit_reader_ = kNone;
    if (is_get(op) && op_value_[op] != written) return false;
    const uint32_t after = is_get(op) ? written : op_value_[op];
    if (frame.pending_entry != kNone) mark(entry_op_[frame.pending_entry]);
    mark(op);
    const bool writes = !is_get(op) || frame.pending_entry != kNone;
    if (!frame.forced && writes) unfit_reader_ = unfit_reader(after, op);
    if (unfit_reader_ != kNone) {
      unmark(op);
      if (frame.pending_entry != kNone) unmark(entry_op_[frame.pending_entry]);
      return false;
    }
    encode(after);
    if (!cache_.insert(scratch_)) {
      unmark(op);
      if (frame.pending_entry != kNone) unmark(entry_op_[frame.pending_entry]);
      return false;
    }
    stack_.push_back(frame);
    lift(frame.entry);
    last_value_ = after;
    return true;
  }

  // After linearizing `op` (already marked), whose write made `value`
  // current: a remaining read of `value` that cannot take effect before
  // another write must, or kNone. When no write of `value` remains, every
  // other write has to follow all its reads, but some write is due (returns)
  // before the last of those reads is even invoked.
  uint32_t unfit_reader(uint32_t value, uint32_t op) const {
    if (readers_left_[value] == 0 || writers_left_[value] != 0) return kNone;
    uint32_t last_reader = kNone;
    uint32_t last_call = kNone;
    const std::vector<uint32_t>& readers = readers_of_[value];  // in call order
    for (auto r = readers.rbegin(); r != readers.rend(); ++r) {
      if (!is_marked(*r)) {
        last_reader = *r;
        last_call = call_entry_[*r];
        break;
      }
    }
    for (uint32_t e = next_[head_]; e != head_ && e < last_call; e = next_[e]) {
      if (entry_is_call_[e] == 0 && entry_op_[e] != op && !is_get(entry_op_[e])) return last_reader;
    }
    return kNone;
  }

  bool is_pending(uint32_t op) const { return !ops_[op].complete_ns.has_value(); }

  bool is_marked(uint32_t op) const {
    const uint32_t bit = bit_[op];
    if (is_pending(op)) {
      const uint32_t p = bit - static_cast<uint32_t>(completed_);
      return ((pending_done_[p / 64] >> (p % 64)) & 1) != 0;
    }
    return ((done_[bit / 64] >> (bit % 64)) & 1) != 0;
  }

  void mark(uint32_t op) {
    (is_get(op) ? readers_left_ : writers_left_)[op_value_[op]] -= 1;
    const uint32_t bit = bit_[op];
    if (is_pending(op)) {
      uint32_t& used = pending_used_[op_value_[op]];
      FERRY_DASSERT(pending_writers_of_[op_value_[op]][used] == op);
      used += 1;
      const uint32_t p = bit - static_cast<uint32_t>(completed_);
      pending_done_[p / 64] |= uint64_t{1} << (p % 64);
      return;
    }
    done_[bit / 64] |= uint64_t{1} << (bit % 64);
    if (bit == first_open_) advance_first_open();
  }

  void unmark(uint32_t op) {
    (is_get(op) ? readers_left_ : writers_left_)[op_value_[op]] += 1;
    const uint32_t bit = bit_[op];
    if (is_pending(op)) {
      uint32_t& used = pending_used_[op_value_[op]];
      used -= 1;
      FERRY_DASSERT(pending_writers_of_[op_value_[op]][used] == op);
      const uint32_t p = bit - static_cast<uint32_t>(completed_);
      pending_done_[p / 64] &= ~(uint64_t{1} << (p % 64));
      return;
    }
    done_[bit / 64] &= ~(uint64_t{1} << (bit % 64));
    first_open_ = std::min(first_open_, bit);
  }

  // Moves first_open_ to the lowest completed op not linearized (or completed_).
  void advance_first_open() {
    while (first_open_ < completed_) {
      const size_t word = first_open_ / 64;
      const uint64_t open = ~done_[word] >> (first_open_ % 64);
      if (open != 0) {
        first_open_ += static_cast<uint32_t>(std::countr_zero(open));
        break;
      }
      first_open_ = static_cast<uint32_t>((word + 1) * 64);
    }
    first_open_ = std::min(first_open_, static_cast<uint32_t>(completed_));
  }

  // scratch_ = the cache key of (linearized set, `value`). See the file comment.
  void encode(uint32_t value) {
    scratch_.clear();
    const uint64_t value_word = readers_left_[value] == 0 ? kJunk : value;
    scratch_.push_back((uint64_t{first_open_} << 32) | value_word);
    scratch_.insert(scratch_.end(), pending_done_.begin(), pending_done_.end());
    if (first_open_ < completed_) {
      const uint32_t bound = call_bound_[first_open_];
      for (size_t w = first_open_ / 64; w <= (bound - 1) / 64; ++w) scratch_.push_back(done_[w]);
#ifdef FERRY_DEBUG_CHECKS
      FERRY_ASSERT(bound > first_open_);
      for (size_t w = (bound - 1) / 64 + 1; w < done_.size(); ++w) FERRY_ASSERT(done_[w] == 0);
#endif
    }
  }

  void unlink(uint32_t e) {
    next_[prev_[e]] = next_[e];
    prev_[next_[e]] = prev_[e];
  }
  void relink(uint32_t e) {
    next_[prev_[e]] = e;
    prev_[next_[e]] = e;
  }
  // Unlinks a completed op's call and return; undone in reverse order.
  void lift(uint32_t call) {
    unlink(call);
    unlink(return_entry_[entry_op_[call]]);
  }
  void unlift(uint32_t call) {
    relink(return_entry_[entry_op_[call]]);
    relink(call);
  }

  // Records a failed configuration whose first remaining return is `ret`.
  // `kept_value`: moves were skipped because they would strand the reads of
  // `value`; `unfit_reader`: a move was refused because this read could not
  // take effect before the next write (kNone if none). The furthest such
  // configuration is kept, preferring one that blames a stranded read.
  void note_stuck(uint32_t ret, uint32_t value, bool kept_value, uint32_t unfit_reader) {
    if (stuck_entry_ != kNone && ret < stuck_entry_) return;
    // Blame a read that the due writes would strand, unless the due op is a
    // read whose value can never come back (then it is at fault itself).
    const uint32_t due = entry_op_[ret];
    const bool due_hopeless =
        is_get(due) && op_value_[due] != value && writers_left_[op_value_[due]] == 0;
    uint32_t reader = kNone;
    if (kept_value && !due_hopeless) {
      for (uint32_t r : readers_of_[value]) {
        if (!is_marked(r) && (reader == kNone || return_entry_[r] < return_entry_[reader])) {
          reader = r;
        }
      }
    }
    if (reader == kNone && !due_hopeless) reader = unfit_reader;
    if (ret == stuck_entry_ && (stuck_.reason == Stuck::kStranded || reader == kNone)) {
      const std::optional<uint64_t> v = value_of_id_[value];
      if (stuck_.values.size() < kStuckValuesMax &&
          std::find(stuck_.values.begin(), stuck_.values.end(), v) == stuck_.values.end()) {
        stuck_.values.push_back(v);
      }
      return;
    }
    stuck_entry_ = ret;
    stuck_.due_op = due;
    stuck_.op = reader == kNone ? due : reader;
    stuck_.reason = reader != kNone ? Stuck::kStranded : Stuck::kDue;
    stuck_.values = {value_of_id_[value]};
    stuck_.linearized_tail.clear();
    const size_t from = stack_.size() > kStuckTailMax ? stack_.size() - kStuckTailMax : 0;
    for (size_t i = from; i < stack_.size(); ++i) {
      if (stack_[i].pending_entry != kNone) {
        stuck_.linearized_tail.push_back(entry_op_[stack_[i].pending_entry]);
      }
      stuck_.linearized_tail.push_back(entry_op_[stack_[i].entry]);
    }
    stuck_.open_ops.clear();
    for (uint32_t e : enabled_) {
      if (stuck_.open_ops.size() == kStuckOpenMax) break;
      if (entry_op_[e] != stuck_.op) stuck_.open_ops.push_back(entry_op_[e]);
    }
  }

  std::span<const KeyOp> ops_;

  // Values.
  std::vector<std::optional<uint64_t>> value_of_id_;
  std::vector<uint32_t> op_value_;      // per op: the value number it writes or reads
  std::vector<uint32_t> readers_left_;  // per value: unlinearized (completed) reads of it
  std::vector<uint32_t> writers_left_;  // per value: unlinearized writes of it, pending included
  std::vector<std::vector<uint32_t>> readers_of_;          // per value: its reads
  std::vector<std::vector<uint32_t>> pending_writers_of_;  // per value: its pending writes
  std::vector<uint32_t> pending_used_;  // per value: how many of those are linearized

  // The event list; entries are event positions in time order, head_ the sentinel.
  std::vector<uint32_t> next_;
  std::vector<uint32_t> prev_;
  uint32_t head_ = 0;
  std::vector<uint32_t> entry_op_;
  std::vector<uint8_t> entry_is_call_;  // 1 = call event, 0 = return event
  std::vector<uint32_t> call_entry_;    // per op
  std::vector<uint32_t> return_entry_;  // per op; kNone when pending

  // The linearized set.
  std::vector<uint32_t> bit_;  // per op: its bit number
  size_t completed_ = 0;
  std::vector<uint32_t> call_bound_;    // per completed bit: completed calls before its return
  std::vector<uint64_t> done_;          // linearized completed ops, by bit
  std::vector<uint64_t> pending_done_;  // linearized pending ops, by bit - completed_
  uint32_t first_open_ = 0;             // lowest completed bit not linearized

  StateCache cache_;
  std::vector<uint64_t> scratch_;
  std::vector<Frame> stack_;
  uint32_t last_value_ = 0;        // set by try_linearize()
  uint32_t unfit_reader_ = kNone;  // set by try_linearize()
  std::vector<uint32_t> enabled_;  // the current configuration's enabled completed ops' calls
  std::vector<uint64_t> moves_;    // see collect_moves()
  uint32_t stuck_entry_ = kNone;
  Stuck stuck_;
};

}  // namespace

KeyOutcome search(std::span<const KeyOp> ops, uint64_t max_states) {
  return KeySearch(ops).run(max_states);
}

// Shrinks the failing key history `ops` to a minimal failing subset (indices
// into `ops`, ascending) that is closed under "dropping a write drops the
// reads of its value" (see the file comment). `*complete` is false if the
// budget ran out first.
std::vector<size_t> minimize(std::span<const KeyOp> ops, const Stuck& stuck, uint64_t max_states,
                             bool* complete) {
  const uint64_t budget = max_states * 4;
  uint64_t spent = 0;
  *complete = true;
  auto still_fails = [&](const std::vector<size_t>& candidate) {
    std::vector<KeyOp> sub;
    sub.reserve(candidate.size());
    for (size_t i : candidate) sub.push_back(ops[i]);
    const KeyOutcome outcome = search(sub, max_states);
    spent += outcome.states;
    return outcome.verdict == Verdict::kViolation;
  };
  auto value_key = [](const KeyOp& op) {
    return std::pair<bool, uint64_t>(op.value.has_value(), op.value.value_or(0));
  };
  // `from` minus those for which `drop` holds, minus the reads of the values
  // of dropped writes.
  auto without = [&](const std::vector<size_t>& from, auto drop) {
    std::set<std::pair<bool, uint64_t>> dropped_values;
    for (size_t n = 0; n < from.size(); ++n) {
      const KeyOp& op = ops[from[n]];
      if (drop(n) && op.kind != KvOp::kGet) dropped_values.insert(value_key(op));
    }
    std::vector<size_t> out;
    for (size_t n = 0; n < from.size(); ++n) {
      const KeyOp& op = ops[from[n]];
      if (drop(n)) continue;
      if (op.kind == KvOp::kGet && dropped_values.contains(value_key(op))) continue;
      out.push_back(from[n]);
    }
    return out;
  };

  std::vector<size_t> all(ops.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  // Ops invoked after the op the search got stuck on completed are usually
  // irrelevant; start without them if that still fails.
  const uint64_t cut_ns = *ops[stuck.due_op].complete_ns;
  std::vector<size_t> current =
      without(all, [&](size_t n) { return ops[all[n]].invoke_ns > cut_ns; });
  if (current.size() == all.size() || !still_fails(current)) current = all;

  size_t chunk = std::max<size_t>(1, current.size() / 2);
  bool removed_at_one = true;
  while (chunk > 1 || removed_at_one) {
    removed_at_one = false;
    for (size_t begin = 0; begin < current.size();) {
      if (spent > budget) {
        *complete = false;
        return current;
      }
      const size_t end = std::min(current.size(), begin + chunk);
      std::vector<size_t> candidate =
          without(current, [&](size_t n) { return n >= begin && n < end; });
      if (!candidate.empty() && still_fails(candidate)) {
        current = std::move(candidate);
        removed_at_one = chunk == 1;
      } else {
        begin = end;
      }
    }
    if (chunk > 1) {
      chunk = std::max<size_t>(1, chunk / 2);
      removed_at_one = true;  // at least one pass of single removals
    }
  }
  return current;
}

}  // namespace ferry::sim::detail
