// Convenience: connect two RC queue pairs (RESET -> INIT -> RTR -> RTS on
// both), as an out-of-band connection manager would.
#pragma once

#include <cstdint>

#include "ferry/common/status.h"
#include "ferry/nic/verbs.h"

namespace ferry::nic {

struct ConnectOptions {
  uint32_t access_flags =
      kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic | kAccessFlushGlobal | kAccessFlushPersistent;
  uint32_t path_mtu = 4096;
  uint32_t a_psn = 0x10;      // first PSN A sends (B expects)
  uint32_t b_psn = 0x20;      // first PSN B sends (A expects)
  uint8_t timeout = 14;       // 4.096 us * 2^14 = 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;      // infinite
  uint8_t min_rnr_timer = 1;  // 10 us
  uint8_t max_rd_atomic = 16;
};

// Connects a (on nic_a) with b (on nic_b); both must be in RESET.
Status connect_qps(QueuePair& a, const Nic& nic_a, QueuePair& b, const Nic& nic_b, const ConnectOptions& options = {});

// One side of a connection whose other side is elsewhere (another Engine,
// reached over UDP): moves `qp` (in RESET) to RTS toward QP `dest_qp` at
// address `dest_nic` (Engine::resolve of the peer's endpoint, or a local
// NIC's address). `rq_psn` is the first PSN the peer sends, `sq_psn` the
// first this QP sends; the peer is brought up with them swapped. The first
// failing modify's Status is returned.
Status connect_qp(QueuePair& qp, uint32_t dest_nic, uint32_t dest_qp, uint32_t rq_psn, uint32_t sq_psn,
                  const ConnectOptions& options = {});

}  // namespace ferry::nic
