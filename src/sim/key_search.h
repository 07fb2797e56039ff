// One key's linearizability search, and the shrinking of a failing key's
// history to a minimal failing subset: the engine of check_kv_history()
// (src/sim/linearizability.cc, which turns its outcome into words). The
// algorithm is described in key_search.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ferry/sim/linearizability.h"

namespace ferry::sim::detail {

// One op of the key being checked.
struct KeyOp {
  size_t history_index = 0;
  KvOp::Kind kind = KvOp::kGet;
  std::optional<uint64_t> value;
  uint64_t invoke_ns = 0;
  std::optional<uint64_t> complete_ns;
};

// Where the search got furthest: the failed configuration whose first
// remaining return is latest.
struct Stuck {
  enum Reason : uint8_t {
    kDue,       // the blamed op is the due op, which no order let take effect in time
    kStranded,  // the blamed op reads the current value, which the due ops must overwrite
    kNoWriter,  // the blamed op reads a value no write invoked before its return writes
  };
  size_t op = 0;      // the op blamed (index into the key's ops)
  size_t due_op = 0;  // the op owning that first return
  Reason reason = kDue;
  std::vector<std::optional<uint64_t>> values;  // distinct register values seen there (a few)
  std::vector<size_t> linearized_tail;          // last ops linearized on the first path there
  std::vector<size_t> open_ops;                 // other unlinearized completed ops invoked by then
};

struct KeyOutcome {
  Verdict verdict = Verdict::kLinearizable;
  uint64_t states = 0;
  std::optional<Stuck> stuck;
};

// Searches one key's ops for a linearization, within max_states states.
KeyOutcome search(std::span<const KeyOp> ops, uint64_t max_states);

// Shrinks the failing key history `ops` to a minimal failing subset (indices
// into `ops`, ascending) that is closed under "dropping a write drops the
// reads of its value". `*complete` is false if the budget ran out first.
std::vector<size_t> minimize(std::span<const KeyOp> ops, const Stuck& stuck, uint64_t max_states, bool* complete);

}  // namespace ferry::sim::detail
