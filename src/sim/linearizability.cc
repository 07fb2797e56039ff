// The linearizability checker of recorded key-value histories
// (include/ferry/sim/linearizability.h): splits a history by key, checks
// each key with the search of key_search.cc, and says in words what a
// failing key could not order.
#include "ferry/sim/linearizability.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <string>

#include "ferry/common/assert.h"
#include "key_search.h"

namespace ferry::sim {
namespace {

using detail::KeyOp;
using detail::KeyOutcome;
using detail::Stuck;
using detail::minimize;
using detail::search;


std::string describe_value(const std::optional<uint64_t>& value) {
  return value ? std::to_string(*value) : "absent";
}

std::string describe_at(std::span<const KvOp> history, size_t index) {
  std::string text = "#";
  text += std::to_string(index);
  text += ' ';
  text += describe(history[index]);
  return text;
}

// Where the search got stuck, in words. `ops` are the ops `stuck` indexes.
void explain_stuck(std::ostream& os, std::span<const KvOp> history, std::span<const KeyOp> ops,
                   const Stuck& stuck, const char* headline) {
  os << headline << describe_at(history, ops[stuck.op].history_index) << "\n";
  switch (stuck.reason) {
    case Stuck::kDue:
      os << "  no order of the ops invoked before it completed lets it take effect in time\n";
      break;
    case Stuck::kStranded:
      os << "  in every order tried, writes due before it could take effect overwrite the\n"
            "  value it reads; the op due first there: "
         << describe_at(history, ops[stuck.due_op].history_index) << "\n";
      break;
    case Stuck::kNoWriter:
      os << "  no write of the value it returns was invoked before it completed\n";
      break;
  }
  if (stuck.reason != Stuck::kNoWriter) {
    os << "  register value(s) the search reached there:";
    for (const std::optional<uint64_t>& v : stuck.values) os << " " << describe_value(v);
    os << "\n";
  }
  if (!stuck.linearized_tail.empty()) {
    os << "  last ops linearized on the first path there:\n";
    for (size_t op : stuck.linearized_tail) {
      os << "    " << describe_at(history, ops[op].history_index) << "\n";
    }
  }
  if (!stuck.open_ops.empty()) {
    os << "  other ops open there:\n";
    for (size_t op : stuck.open_ops) {
      os << "    " << describe_at(history, ops[op].history_index) << "\n";
    }
  }
}

// Empty if `op` keeps the KvOp contract, else why not.
std::string malformed_reason(const KvOp& op) {
  if (op.kind != KvOp::kPut && op.kind != KvOp::kGet && op.kind != KvOp::kRemove) {
    return "unknown kind";
  }
  if (op.kind == KvOp::kPut && !op.value) return "a put without a value";
  if (op.kind == KvOp::kRemove && op.value) return "a remove carrying a value";
  if (op.complete_ns && *op.complete_ns < op.invoke_ns) return "completes before it is invoked";
  return {};
}

}  // namespace

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kLinearizable:
      return "linearizable";
    case Verdict::kViolation:
      return "violation";
    case Verdict::kInconclusive:
      return "inconclusive";
    case Verdict::kMalformed:
      return "malformed";
  }
  return "?";
}

std::string describe(const KvOp& op) {
  std::ostringstream os;
  os << "c" << op.client << " ";
  switch (op.kind) {
    case KvOp::kPut:
      os << "put(k" << op.key << ", " << (op.value ? std::to_string(*op.value) : "?") << ")";
      break;
    case KvOp::kGet:
      os << "get(k" << op.key << ") -> " << (op.value ? std::to_string(*op.value) : "absent");
      break;
    case KvOp::kRemove:
      os << "remove(k" << op.key << ")";
      break;
    default:
      os << "op" << static_cast<int>(op.kind) << "(k" << op.key << ")";
      break;
  }
  os << " @[" << op.invoke_ns << ", ";
  if (op.complete_ns) {
    os << *op.complete_ns << "] ns";
  } else {
    os << "pending]";
  }
  return os.str();
}

LinearizabilityResult check_kv_history(std::span<const KvOp> history, uint64_t max_states) {
  LinearizabilityResult result;
  for (size_t i = 0; i < history.size(); ++i) {
    const std::string reason = malformed_reason(history[i]);
    if (!reason.empty()) {
      result.verdict = Verdict::kMalformed;
      result.bad_key = history[i].key;
      result.explanation = "malformed op #" + std::to_string(i) + " " + describe(history[i]) +
                           ": " + reason + ".\n";
      return result;
    }
  }
  // The search numbers events and bits with 32 bits.
  if (history.size() >= (1U << 30)) {
    result.verdict = Verdict::kMalformed;
    result.explanation = "history too large (" + std::to_string(history.size()) + " ops).\n";
    return result;
  }

  std::vector<size_t> order(history.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return history[a].key < history[b].key; });

  std::optional<LinearizabilityResult> inconclusive;
  std::vector<KeyOp> ops;
  for (size_t begin = 0; begin < order.size();) {
    const uint64_t key = history[order[begin]].key;
    size_t end = begin;
    ops.clear();
    for (; end < order.size() && history[order[end]].key == key; ++end) {
      const KvOp& op = history[order[end]];
      // A pending get may have returned anything or nothing: it constrains nothing.
      if (op.kind == KvOp::kGet && !op.complete_ns) continue;
      ops.push_back({order[end], op.kind, op.value, op.invoke_ns, op.complete_ns});
    }
    result.keys_checked += 1;
    result.ops_checked += end - begin;
    begin = end;

    const KeyOutcome outcome = search(ops, max_states);
    result.states_explored += outcome.states;
    if (outcome.verdict == Verdict::kLinearizable) continue;

    LinearizabilityResult failed = result;
    failed.verdict = outcome.verdict;
    failed.bad_key = key;
    if (outcome.verdict == Verdict::kInconclusive) {
      std::ostringstream os;
      os << "key " << key << ": inconclusive, the search exceeded its budget of " << max_states
         << " states (" << ops.size() << " ops on this key); no violation found so far.\n";
      if (outcome.stuck) {
        failed.stuck_op = ops[outcome.stuck->op].history_index;
        explain_stuck(os, history, ops, *outcome.stuck, "Furthest op not yet linearized: ");
      }
      failed.explanation = os.str();
      if (!inconclusive) inconclusive = std::move(failed);
      continue;
    }
    FERRY_ASSERT(outcome.stuck, "a violation always fails at some configuration");
    bool complete = false;
    const std::vector<size_t> minimal = minimize(ops, *outcome.stuck, max_states, &complete);
    // Blame from a search over the minimal set: with the ops that do not
    // matter gone, the op it gets stuck on is one at the heart of the conflict.
    std::vector<KeyOp> minimal_ops;
    for (size_t i : minimal) minimal_ops.push_back(ops[i]);
    const KeyOutcome blame = search(minimal_ops, max_states);
    FERRY_ASSERT(blame.verdict == Verdict::kViolation && blame.stuck);
    failed.stuck_op = minimal_ops[blame.stuck->op].history_index;
    for (const KeyOp& op : minimal_ops) failed.minimal_ops.push_back(op.history_index);
    std::sort(failed.minimal_ops.begin(), failed.minimal_ops.end());

    std::ostringstream os;
    os << "key " << key << ": not linearizable (" << ops.size() << " ops checked on this key, "
       << outcome.states << " search states; no order got past the completion of "
       << describe_at(history, ops[outcome.stuck->due_op].history_index) << ").\n";
    explain_stuck(os, history, minimal_ops, *blame.stuck, "Could not linearize ");
    os << (complete ? "A minimal" : "A reduced (minimizing ran out of budget)")
       << " set of this key's ops that cannot be ordered, whatever the others did ("
       << minimal_ops.size() << " of " << ops.size() << "):\n";
    for (size_t index : failed.minimal_ops) os << "    " << describe_at(history, index) << "\n";
    failed.explanation = os.str();
    return failed;
  }
  if (inconclusive) {
    inconclusive->keys_checked = result.keys_checked;
    inconclusive->ops_checked = result.ops_checked;
    inconclusive->states_explored = result.states_explored;
    return *std::move(inconclusive);
  }
  result.ok = true;
  result.verdict = Verdict::kLinearizable;
  return result;
}

}  // namespace ferry::sim
