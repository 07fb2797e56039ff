// The checks `ferry sim juneberry` (src/sim/juneberry.cc) runs on a run's
// end, apart from the run itself: what each invariant means is in
// docs/simulation.md, "JUNE BERRY".
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/rpc/server.h"
#include "ferry/sim/linearizability.h"
#include "ferry/store/kv_service.h"

namespace ferry::sim::juneberry {

// The workload's keys and values (a value names its put, so a read shows
// which write it saw).
inline std::string key_name(uint64_t k) { return "key" + std::to_string(k); }
// A value: its number, then padding of a length drawn per put, so requests
// span one to several strides.
inline std::string value_text(uint64_t v, uint32_t pad) { return std::to_string(v) + "." + std::string(pad, 'p'); }
inline std::optional<uint64_t> value_number(std::string_view text) {
  const size_t dot = text.find('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  for (size_t i = 0; i < dot; ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
  }
  return std::strtoull(std::string(text.substr(0, dot)).c_str(), nullptr, 10);
}

// (client generation * sessions + session, key) -> the history indices of
// that session's writes to the key, in order: what went down one QP.
using WritesByQp = std::map<std::pair<uint64_t, uint64_t>, std::vector<size_t>>;

// §5.2.1: a worker executes its requests in buffer (SRQ) order, whatever
// order the CQ reported them in; recovery re-executes in that order too.
// Fed by rpc::ServerOptions::on_execute: within one phase (recovery, then
// live) of one server's life, each worker's positions only grow.
class ExecutionOrder {
 public:
  // A new server with `workers` workers: its positions start afresh.
  void reset(uint32_t workers) { last_.assign(workers, Last{}); }
  // Returns the violation the first time one is seen (to log it), else "".
  std::string note(const rpc::Request& q);
  const std::string& violation() const { return violation_; }

 private:
  struct Last {
    bool any = false;
    bool recovering = false;
    uint64_t position = 0;
  };
  std::vector<Last> last_;
  std::string violation_;
};

struct Broken {
  std::string invariant;
  std::string detail;
};

// The end-of-run checks, in order: executed-in-order, no-torn-values
// (`bad_value`, found as the gets came back), pmkv-consistent, buffer-order
// and linearizable. The first that fails, or nothing.
std::optional<Broken> check_run(const ExecutionOrder& order, const std::string& bad_value,
                                store::PmKvService& service, uint32_t workers, std::span<const KvOp> history,
                                const WritesByQp& fifo);

}  // namespace ferry::sim::juneberry
