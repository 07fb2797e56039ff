// PLACEHOLDER (replaced by the HyperLoop store simulation before landing).
#include "ferry/sim/systems.h"

namespace ferry::sim {

System hyperloop_store_system() {
  System s;
  s.name = "hyperloop-store";
  s.description = "the HyperLoop transactional store (not built yet)";
  s.run = [](const RunOptions& o) {
    RunResult r;
    r.seed = o.seed;
    r.invariant = "unimplemented";
    return r;
  };
  return s;
}

}  // namespace ferry::sim
