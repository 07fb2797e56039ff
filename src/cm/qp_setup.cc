// The QP side of the handshake: the endpoint a side advertises, the address
// it reaches its peer at, and the RESET -> INIT -> RTR -> RTS transitions,
// split so that the passive side can stop at RTR until the RTU.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "cm_internal.h"
#include "ferry/nic/fabric.h"

namespace ferry::cm::detail {

uint32_t offered_path_mtu(const nic::Nic& nic, const QpOptions& options) {
  return std::min(options.path_mtu, nic.max_path_mtu());
}

uint64_t fabric_id(const nic::Engine& engine) {
  // splitmix64 of pid and address: distinct Engines of one process differ
  // by address, and equal addresses in two processes by pid.
  uint64_t x = static_cast<uint64_t>(getpid()) << 32 ^ reinterpret_cast<uintptr_t>(&engine);
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x != 0 ? x : 1;
}

namespace {
// The Engine of an in-process NIC; nullptr for a daemon-attached one (whose
// engine runs in the daemon, and which always has a UDP socket).
const nic::Engine* engine_of(const nic::Nic& nic) { return nic.engine(); }
}  // namespace

QpEndpoint local_endpoint(const nic::Nic& nic, const nic::QueuePair& qp, uint32_t first_psn, uint32_t path_mtu) {
  QpEndpoint e;
  e.gid = nic.gid();
  const std::optional<nic::UdpEndpoint> udp = nic.udp_endpoint();
  e.udp_port = udp ? udp->port : 0;
  const nic::Engine* engine = engine_of(nic);
  e.fabric_id = udp || engine == nullptr ? 0 : fabric_id(*engine);
  e.qp_num = qp.qp_num();
  e.first_psn = first_psn;
  e.path_mtu = path_mtu;
  return e;
}

uint32_t pick_first_psn(const std::optional<uint32_t>& chosen) {
  if (chosen) return *chosen & 0xFFFFFF;
  // Not a simulation input: a connection across processes is real time anyway.
  std::random_device rd;
  return rd() & 0xFFFFFF;
}

Result<uint32_t> in_process_address(const nic::Gid& gid) {
  // fe80::ff:fe<xx>:<yyzz> (types.h, Gid::in_process): bytes 0-1 fe80, 2-10
  // zero, 11 ff, 12 fe, 13-15 the address.
  bool match = gid.raw[0] == 0xFE && gid.raw[1] == 0x80 && gid.raw[11] == 0xFF && gid.raw[12] == 0xFE;
  for (int i = 2; i <= 10; ++i) match = match && gid.raw[i] == 0;
  if (!match) return invalid_argument("GID " + gid.to_string() + " is not an in-process NIC's GID");
  return static_cast<uint32_t>(gid.raw[13]) << 16 | static_cast<uint32_t>(gid.raw[14]) << 8 | gid.raw[15];
}

Result<uint32_t> resolve_peer(nic::Nic& nic, const QpEndpoint& peer) {
  if (peer.udp_port == 0) {
    FERRY_ASSIGN_OR_RETURN(const uint32_t address, in_process_address(peer.gid));
    // An in-process GID names a NIC of the peer's Engine: ours only if the
    // fabric ids agree, whatever NIC of ours has the same address.
    const nic::Engine* engine = engine_of(nic);
    if (engine == nullptr || peer.fabric_id != fabric_id(*engine) || engine->nic(address) == nullptr) {
      return failed_precondition("the peer's QP is on in-process NIC " + peer.gid.to_string() + " (address " +
                                 std::to_string(address) +
                                 "), which is not on this Engine: an in-process NIC is reachable only from its "
                                 "own Engine; attach both NICs to UDP (NicOptions::udp)");
    }
    return address;
  }
  if (!peer.gid.is_ipv4_mapped()) {
    return invalid_argument("the peer's GID " + peer.gid.to_string() + " with UDP port " +
                            std::to_string(peer.udp_port) + " is not an IPv4-mapped address");
  }
  const nic::UdpEndpoint udp{peer.gid.ipv4(), peer.udp_port};
  FERRY_ASSIGN_OR_RETURN(const uint32_t address, nic.resolve(udp));
  if (nic::Fabric::is_remote(address) && !nic.udp_endpoint()) {
    return failed_precondition("the peer's QP is at UDP endpoint " + udp.to_string() + ", but NIC '" + nic.name() +
                               "' has no UDP socket: create it with NicOptions::udp");
  }
  return address;
}

Status to_init(nic::QueuePair& qp, const QpOptions& options) {
  const nic::QpState state = qp.state();
  if (state == nic::QpState::kInit) return ok_status();
  if (state != nic::QpState::kReset) {
    return failed_precondition("QP " + std::to_string(qp.qp_num()) + " is in " +
                               std::string(nic::qp_state_name(state)) + "; the CM connects QPs in RESET or INIT");
  }
  nic::QpAttr attr;
  attr.state = nic::QpState::kInit;
  attr.access_flags = options.access_flags;
  return qp.modify(attr, nic::kQpState | nic::kQpAccessFlags);
}

Status to_rtr(nic::QueuePair& qp, uint32_t dest_nic, const QpEndpoint& peer, uint32_t path_mtu,
              const QpOptions& options) {
  nic::QpAttr attr;
  attr.state = nic::QpState::kRtr;
  attr.path_mtu = path_mtu;
  attr.dest_nic = dest_nic;
  attr.dest_qp_num = peer.qp_num;
  attr.rq_psn = peer.first_psn;
  attr.max_dest_rd_atomic = options.max_rd_atomic;
  attr.min_rnr_timer = options.min_rnr_timer;
  return qp.modify(attr, nic::kQpState | nic::kQpPathMtu | nic::kQpDest | nic::kQpRqPsn | nic::kQpMaxDestRdAtomic |
                             nic::kQpMinRnrTimer);
}

Status to_rts(nic::QueuePair& qp, uint32_t first_psn, const QpOptions& options) {
  nic::QpAttr attr;
  attr.state = nic::QpState::kRts;
  attr.sq_psn = first_psn;
  attr.timeout = options.timeout;
  attr.retry_cnt = options.retry_cnt;
  attr.rnr_retry = options.rnr_retry;
  attr.max_rd_atomic = options.max_rd_atomic;
  return qp.modify(attr, nic::kQpState | nic::kQpSqPsn | nic::kQpTimeout | nic::kQpRetryCnt | nic::kQpRnrRetry |
                             nic::kQpMaxRdAtomic);
}

void to_error(nic::QueuePair& qp) {
  nic::QpAttr attr;
  attr.state = nic::QpState::kError;
  // The transition to ERROR cannot fail (qp_state.cc); nothing to report.
  (void)qp.modify(attr, nic::kQpState);
}

}  // namespace ferry::cm::detail

namespace ferry::cm {

Status init_qp(nic::QueuePair& qp, const QpOptions& options) {
  if (qp.state() != nic::QpState::kReset) {
    return failed_precondition("init_qp: QP " + std::to_string(qp.qp_num()) + " is in " +
                               std::string(nic::qp_state_name(qp.state())) + ", not RESET");
  }
  return detail::to_init(qp, options);
}

}  // namespace ferry::cm
