// The systems `ferry sim` runs (docs/simulation.md, one section each).
#pragma once

#include "ferry/sim/sim.h"

namespace ferry::sim {

// JUNE BERRY-D: a durable Ordered Queue server (two workers, PmKv behind
// it) on one host, client sessions and dying clients on another; cross-QP
// gets on shared hot keys.
System juneberry_system();

// The HyperLoop transactional store: the front end (TxnKv over a
// TxnClient) on a 3-replica chain; reads from every replica.
System hyperloop_store_system();

// LogKv on Tailwind (or the RPC baseline): five servers with their backups,
// the cleaner and the clients as fibers of one SimRuntime (src/sim/tailwind.cc).
System tailwind_system();

}  // namespace ferry::sim
