// PLACEHOLDER (replaced by the JUNE BERRY simulation before landing).
#include "ferry/sim/systems.h"

namespace ferry::sim {

System juneberry_system() {
  System s;
  s.name = "juneberry";
  s.description = "JUNE BERRY (not built yet)";
  s.run = [](const RunOptions& o) {
    RunResult r;
    r.seed = o.seed;
    r.invariant = "unimplemented";
    return r;
  };
  return s;
}

}  // namespace ferry::sim
