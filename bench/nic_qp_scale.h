// `ferry bench nic --qps N,...`: the software RNIC's per-QP cost at scale
// (issue 31, item 3). For each N, on a fresh in-process Engine with two
// NICs (client and server), it opens N RC QP pairs and measures
//   - memory per QP pair: the allocator's bytes in use (glibc mallinfo2,
//     every arena, chunk headers included) and the resident set (RSS from
//     /proc/self/statm), each as (after - before) / N, where "before" is
//     taken once the NICs, PDs, MRs and the two CQs exist: what the pairs
//     themselves cost, handles included;
//   - setup time per pair: create both QPs, then connect them (RESET ->
//     INIT -> RTR -> RTS on both), wall time over N, as an application does
//     it through the verbs (every step a control command on the engine);
//   - per-message cost with one message outstanding on each of the N QPs:
//     each QP posts its next message when its last one completes, so all N
//     are active round-robin; the latency distribution of a message (post
//     to completion), messages per second, and wall time per message.
// It also reports the engine thread's CPU per packet (engine_cost.h).
#pragma once

#include <ostream>

#include "ferry/common/status.h"
#include "nic_bench.h"

namespace ferry::bench {

// Runs the per-QP points for every N in options.qp_pairs, each op in
// options.ops and size in options.sizes, writing rows to `out` and progress
// to `log`. kInvalidArgument for N outside 1..65535 or a bad --qp-depth.
Status run_nic_qp_scale(const NicBenchOptions& options, std::ostream& out, std::ostream& log);

}  // namespace ferry::bench
