// `ferry nicd`: run the per-host NIC daemon (docs/nicd.md).
#pragma once

#include <string>

#include "ferry/nicd/nicd.h"

namespace ferry::apps {

// Starts the daemon and serves until SIGINT or SIGTERM. Returns the exit
// code: 0 after a clean stop, 1 if the daemon could not start (the reason
// is printed: a port or socket in use, a bad address, ...).
int run_nicd(const nicd::DaemonOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ferry::apps
