// The checks of `ferry sim juneberry` (juneberry_checks.h).
#include "juneberry_checks.h"

#include <algorithm>

namespace ferry::sim::juneberry {

std::string ExecutionOrder::note(const rpc::Request& q) {
  Last& e = last_[q.worker];
  std::string found;
  if (e.any && e.recovering == q.recovering && q.position <= e.position && violation_.empty()) {
    violation_ = "worker " + std::to_string(q.worker) + " executed position " + std::to_string(q.position) +
                 " after position " + std::to_string(e.position) + (q.recovering ? " (recovery)" : "") +
                 ": not in buffer order";
    found = violation_;
  }
  e = Last{true, q.recovering, q.position};
  return found;
}

namespace {

// A session's writes to one key go down one QP to one worker, which
// executes them in buffer order: once two of them committed, no read
// issued after both may see the older one's value (values are unique, so
// seeing it means the older write took effect after the newer one).
std::optional<Broken> check_fifo(std::span<const KvOp> history, const WritesByQp& fifo) {
  for (const auto& [session_key, writes] : fifo) {
    for (size_t a = 0; a < writes.size(); ++a) {
      const KvOp& older = history[writes[a]];
      if (!older.complete_ns || older.kind != KvOp::kPut) continue;
      for (size_t b = a + 1; b < writes.size(); ++b) {
        const KvOp& newer = history[writes[b]];
        if (!newer.complete_ns) continue;
        const uint64_t both = std::max(*older.complete_ns, *newer.complete_ns);
        for (const KvOp& read : history) {
          if (read.kind != KvOp::kGet || read.key != older.key || !read.complete_ns || read.invoke_ns <= both) continue;
          if (read.value == older.value) {
            return Broken{"buffer-order",
                          "session " + std::to_string(older.client) + " wrote key" + std::to_string(older.key) + " = " +
                              std::to_string(*older.value) + " then " +
                              (newer.kind == KvOp::kPut ? std::to_string(*newer.value) : std::string("removed it")) +
                              ", both committed; a later " + describe(read) + " saw the older value"};
          }
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<Broken> check_run(const ExecutionOrder& order, const std::string& bad_value,
                                store::PmKvService& service, uint32_t workers, std::span<const KvOp> history,
                                const WritesByQp& fifo) {
  if (!order.violation().empty()) return Broken{"executed-in-order", order.violation()};
  if (!bad_value.empty()) return Broken{"no-torn-values", bad_value};
  for (uint32_t w = 0; w < workers; ++w) {
    const Status v = service.partition(w).verify();
    if (!v.ok()) return Broken{"pmkv-consistent", "worker " + std::to_string(w) + ": " + v.to_string()};
  }
  if (auto broken = check_fifo(history, fifo)) return broken;
  const auto verdict = check_kv_history(history);
  if (!verdict.ok) return Broken{"linearizable", std::string(verdict_name(verdict.verdict)) + ": " + verdict.explanation};
  return std::nullopt;
}

}  // namespace ferry::sim::juneberry
