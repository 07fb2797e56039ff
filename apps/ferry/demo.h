// `ferry demo`: the main job on its embedded default.
#pragma once

#include <ostream>

namespace ferry::apps {

// Runs the walkthrough, printing to `out`. Returns the process exit code
// (0 when every step verified).
int run_demo(std::ostream& out, int engine_cpu);
// Part 2: a HyperLoop group of three replicas doing each primitive.
int run_group_demo(std::ostream& out, int engine_cpu);

}  // namespace ferry::apps
