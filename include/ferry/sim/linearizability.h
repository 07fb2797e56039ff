// Linearizability checking of recorded key-value histories: the simulator's
// (sim/) history checker, and the tests' (tests/support/linearizability.h).
//
// A test or a simulated run drives clients against a store, records every operation's invocation
// time and completion time, and asks check_kv_history() whether some serial
// order of the operations, consistent with real time, explains every result.
//
// Model. The store is a set of independent registers, one per key, each
// initially absent:
//   put(k, v)   no result; afterwards get(k) returns v
//   get(k)      returns the current value or absent
//   remove(k)   no result; afterwards get(k) returns absent
// Linearizability is local (Herlihy & Wing 1990: a history is linearizable
// iff each object's sub-history is), so the checker splits the history by key
// and checks each key on its own.
//
// Real time. Operation A precedes B iff A.complete_ns < B.invoke_ns,
// strictly: an operation that completes at t and one invoked at t are treated
// as concurrent and may be ordered either way, so coarse or shared timestamps
// never produce a false violation. (In the search's event list a call at time
// t sorts before a return at time t.)
//
// Pending operations (complete_ns empty: the client crashed, or the outcome
// is unknown) may take effect at any point after their invocation, or never.
// A pending get constrains nothing and is ignored. A pending put or remove
// behaves as if its return were at +infinity and is allowed to stay
// unlinearized.
//
// Algorithm: Wing & Gong's search with Lowe's state cache (as in Porcupine),
// plus register-specific reductions; see linearizability.cc. On simulated
// histories (tests/common/linearizability_test.cc) a linearizable key takes
// about one search state per op, even with 32 clients on one key, and stale
// or impossible reads are found within a few thousand states. The search is
// exponential in the worst case (the problem is NP-complete in general), so
// every key's search is bounded by max_states.
//
// Recording advice for the RPC tests: an operation whose commit signal is a
// hardware ACK is recorded with complete_ns = the time the ACK was seen; an
// operation whose outcome the client never learnt is recorded as pending.
//
// Thread rules: check_kv_history() is a pure function of its arguments; call
// it from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ferry::sim {

// One recorded operation.
struct KvOp {
  enum Kind : uint8_t { kPut, kGet, kRemove };

  uint32_t client = 0;
  uint64_t key = 0;
  Kind kind = kGet;
  // put: the value written (required). get: the value read, empty = absent.
  // remove: must be empty.
  std::optional<uint64_t> value;
  uint64_t invoke_ns = 0;
  // Empty = never completed (pending). Must be >= invoke_ns when present.
  std::optional<uint64_t> complete_ns;

  static KvOp put(uint32_t client, uint64_t key, uint64_t value, uint64_t invoke_ns,
                  std::optional<uint64_t> complete_ns) {
    return {client, key, kPut, value, invoke_ns, complete_ns};
  }
  static KvOp get(uint32_t client, uint64_t key, std::optional<uint64_t> value,
                  uint64_t invoke_ns, std::optional<uint64_t> complete_ns) {
    return {client, key, kGet, value, invoke_ns, complete_ns};
  }
  static KvOp remove(uint32_t client, uint64_t key, uint64_t invoke_ns,
                     std::optional<uint64_t> complete_ns) {
    return {client, key, kRemove, std::nullopt, invoke_ns, complete_ns};
  }
};

enum class Verdict : uint8_t {
  kLinearizable,
  kViolation,     // some key's sub-history has no valid serial order
  kInconclusive,  // some key's search exceeded max_states; no violation found elsewhere
  kMalformed,     // an op breaks the KvOp contract (see explanation); nothing was checked
};

const char* verdict_name(Verdict verdict);

struct LinearizabilityResult {
  bool ok = false;  // verdict == kLinearizable; tests treat everything else as failure
  Verdict verdict = Verdict::kMalformed;
  // The key that is wrong (kViolation), whose search ran out of budget
  // (kInconclusive), or of the malformed op (kMalformed); 0 when ok.
  uint64_t bad_key = 0;
  // Empty when ok. Otherwise readable text naming the key, the op the search
  // got stuck on and, for a violation, a minimal set of that key's ops that
  // cannot be ordered.
  std::string explanation;
  size_t keys_checked = 0;  // keys whose search ran (checking stops at the first violation)
  size_t ops_checked = 0;   // ops of those keys, pending gets included
  uint64_t states_explored = 0;  // distinct (linearized set, value) pairs, summed over keys
  // Index into the history of the op the search could not linearize: for a
  // violation, found by searching minimal_ops alone, so it is one of them
  // (which op of a conflicting set is blamed is a heuristic: a read whose
  // value must be overwritten before it can take effect is preferred); for
  // kInconclusive, the furthest op reached, if any.
  std::optional<size_t> stuck_op;
  // kViolation: indices into the history, ascending, of a sub-history of
  // bad_key that is itself not linearizable and proves the violation: it
  // keeps, for each read in it, every write of the value read, so any
  // linearization of the whole history would restrict to one of it. Minimal:
  // dropping any op (with the reads of the value it writes) makes it
  // linearizable, unless minimizing ran out of budget (4 * max_states states
  // over all attempts; the explanation says so).
  std::vector<size_t> minimal_ops;
};

// Per-key budget of distinct search states; at roughly 50 bytes each, the
// default bounds one key's search to under 100 MB (and about a second).
inline constexpr uint64_t kDefaultMaxStates = 1'000'000;

// Checks that `history` is linearizable. `history` need not be sorted and is
// only read during the call. Keys are checked in ascending order; the first
// violating key is reported. A key whose search would need more than
// `max_states` states is reported as kInconclusive (if no key is violating).
// Malformed input is reported as kMalformed, never by crashing.
[[nodiscard]] LinearizabilityResult check_kv_history(std::span<const KvOp> history,
                                                     uint64_t max_states = kDefaultMaxStates);

// "c3 put(k7, 42) @[1000, 2000] ns", "c1 get(k7) -> absent @[5, pending]".
std::string describe(const KvOp& op);

}  // namespace ferry::sim
