// The linearizability checker for the tests: the simulator's
// (include/ferry/sim/linearizability.h), under the names the suites use.
#pragma once

#include "ferry/sim/linearizability.h"

namespace ferry::testing {

using ferry::sim::check_kv_history;
using ferry::sim::describe;
using ferry::sim::kDefaultMaxStates;
using ferry::sim::KvOp;
using ferry::sim::LinearizabilityResult;
using ferry::sim::Verdict;
using ferry::sim::verdict_name;

}  // namespace ferry::testing
