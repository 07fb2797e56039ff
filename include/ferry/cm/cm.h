// The connection manager: out-of-band exchange of what two RC QPs need to
// reach each other (GIDs, UDP ports, QP numbers, first PSNs, path MTU) plus
// the application's private data (rkeys, addresses, sizes), over TCP, in the
// spirit of the IB CM and rdma_cm (docs/connection-manager.md).
//
// The same service code then runs in one process (both NICs on one Engine,
// or two Engines over UDP on loopback) or across processes and hosts (NICs
// of `ferry nicd` daemons): only the endpoints differ, and the CM resolves
// them to QpAttr::dest_nic.
//
//   passive side (Listener::serve)         active side (connect)
//                  <-------- REQ ---------  {service, QP endpoint, private data}
//   AcceptFn picks a QP; RESET->INIT->RTR
//                  --------- REP -------->  {QP endpoint, private data}
//                                           RESET->INIT->RTR->RTS
//                  <-------- RTU ---------
//   RTS; DoneFn(ok)
//
// A refusal at any step is a REJ carrying the reason. In-process tests that
// never cross a process may keep using nic::connect_qps (no TCP).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ferry/cm/message.h"
#include "ferry/common/status.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"

namespace ferry::cm {

// The QP attributes one side applies to its own QP. Only the path MTU is
// negotiated: each side offers at most `path_mtu` and what its NIC carries
// (Nic::max_path_mtu), and both use the smaller offer.
struct QpOptions {
  // Used if the CM moves the QP RESET -> INIT (not if it is already in INIT).
  uint32_t access_flags = nic::kAccessRemoteWrite | nic::kAccessRemoteRead | nic::kAccessRemoteAtomic |
                          nic::kAccessFlushGlobal | nic::kAccessFlushPersistent;
  uint32_t path_mtu = 4096;
  uint8_t timeout = 14;       // local ACK timeout 4.096 us * 2^14 = 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;      // infinite
  uint8_t min_rnr_timer = 1;  // 10 us
  uint8_t max_rd_atomic = 16; // also max_dest_rd_atomic
};

// Moves `qp` RESET -> INIT with options.access_flags. For a side that must
// post receives before its peer can send: the passive peer's QP is in RTR
// when the REP leaves, the active one's in RTS before the RTU, so receives
// posted later may race the first SEND (an RNR NAK, retried, at best). Call
// it before returning the QP from an AcceptFn, or before connect(), then
// post the receives. Errors: those of QueuePair::modify.
Status init_qp(nic::QueuePair& qp, const QpOptions& options = {});

// An established connection, as one side sees it.
struct Connection {
  QpEndpoint peer;                    // the remote QP; path_mtu is the one both use
  std::vector<uint8_t> private_data;  // what the peer sent (REQ or REP)
  uint32_t dest_nic = 0;              // the QpAttr::dest_nic the local QP was given
  std::string peer_address;           // the peer's TCP address, "a.b.c.d:port"
};

struct ConnectOptions {
  // Bounds the whole exchange: TCP connect, REQ, the wait for the REP (which
  // includes the service's AcceptFn) and the RTU.
  uint32_t timeout_ms = 5000;
  QpOptions qp;
  // The first PSN this QP sends; random when empty, so that packets of an
  // earlier connection of the same QP number fall outside the new window.
  std::optional<uint32_t> first_psn;
};

// The active side: asks the service `service` of the listener at `address`
// ("host:port", IPv4 or a resolvable name) to connect to `qp` on `nic` (an
// in-process NIC of an Engine, or a daemon-attached one), sending `private_data` (at most kMaxPrivateDataBytes) with the
// REQ. `qp` must be in RESET or INIT and stay unused until this returns.
// Blocks the calling thread, at most options.timeout_ms.
//
// Returns the peer's endpoint and private data with `qp` in RTS; the
// passive side moves its QP to RTS when the RTU arrives, and may only send
// from then on. Errors, with a message naming the address and service:
// kUnavailable (cannot connect, e.g. "Connection refused", or the peer
// closed the connection), kTimedOut, kNotFound (no such service there), the
// AcceptFn's own code (it refused; its reason in the message),
// kInvalidArgument (bad arguments, or a malformed message from the peer),
// kUnimplemented (the peer speaks another wire version), kFailedPrecondition
// (`qp` not in RESET/INIT, or the peer's QP unreachable from `nic`). If the
// failure came before the REP, `qp` is left as it was (retry with it);
// after, it is in ERROR (modify it to RESET to reuse it).
Result<Connection> connect(std::string_view address, std::string_view service, nic::Nic& nic, nic::QueuePair& qp, std::span<const uint8_t> private_data = {},
                           const ConnectOptions& options = {});

// ---- the passive side ----

// A REQ as a service's AcceptFn sees it.
struct Request {
  std::string service;
  QpEndpoint peer;  // path_mtu: the largest the requester accepts
  std::vector<uint8_t> private_data;
  std::string peer_address;  // "a.b.c.d:port"
};

// What an AcceptFn returns to accept a request.
struct Accepted {
  // The local QP for this connection, on the service's NIC, in RESET or INIT
  // (see init_qp), owned by the service. The listener moves it to RTR, then
  // RTS; the service must not modify it until its DoneFn was called.
  nic::QueuePair* qp = nullptr;
  std::vector<uint8_t> private_data;  // for the REP; at most kMaxPrivateDataBytes
};

// Decides on one request: an Accepted, or an error Status, which the
// requester receives (code and message) in a REJ.
using AcceptFn = std::function<Result<Accepted>(const Request& request)>;
// Called exactly once for every Accepted an AcceptFn returned: ok with the
// QP in RTS after the RTU, or why the handshake failed (the peer's REJ, its
// silence past ListenerOptions::rtu_timeout_ms, a closed connection, a
// failed QP transition, the listener's destruction) with the QP in ERROR.
using DoneFn = std::function<void(nic::QueuePair& qp, const Connection& connection, const Status& status)>;

struct Service {
  nic::Nic* nic = nullptr;  // the NIC the AcceptFn's QPs are on (in-process or daemon-attached)
  AcceptFn accept;
  DoneFn done;              // may be empty
  QpOptions qp;
  // The first PSN of every QP of this service; random per connection when empty.
  std::optional<uint32_t> first_psn;
};

struct ListenerOptions {
  uint32_t request_timeout_ms = 5000;  // from TCP accept to a complete REQ
  uint32_t rtu_timeout_ms = 5000;      // from the REP to the RTU
  // Handshakes in progress at once; more connections wait in the backlog.
  uint32_t max_connections = 256;
  int backlog = 128;
};

// Counters of a listener (snapshots; monotonically increasing).
struct ListenerStats {
  uint64_t connections = 0;  // TCP connections accepted
  uint64_t established = 0;  // handshakes completed: RTU received, QP in RTS
  uint64_t rejected = 0;     // REJs for unknown services, refusals and local errors
  uint64_t malformed = 0;    // connections dropped for a malformed, out-of-turn or other-version message
  uint64_t timed_out = 0;    // connections dropped for silence past a timeout
  uint64_t closed_early = 0; // connections the peer closed (or reset) mid-handshake
  uint64_t failed = 0;       // accepted handshakes that did not reach RTS (DoneFn with an error)
};

// Listens on one TCP address and runs the passive side of the handshake for
// every service registered with serve(), on its own thread. Handshakes
// proceed concurrently: a slow or silent peer delays nobody else. Services'
// AcceptFn and DoneFn run on that thread, one at a time.
class Listener {
 public:
  // Binds `address` ("a.b.c.d:port"; port 0 picks an ephemeral one, see
  // port()) and starts the thread. Errors: kInvalidArgument for a malformed
  // address, kUnavailable if it cannot be bound ("... Address already in
  // use") or listened on.
  static Result<std::unique_ptr<Listener>> start(std::string_view address, const ListenerOptions& options = {});
  // Stops the thread and closes every connection. Handshakes past their
  // AcceptFn end with DoneFn(kUnavailable) and their QPs in ERROR, so
  // services must outlive the Listener or unserve() first.
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  uint16_t port() const;
  std::string address() const;  // "a.b.c.d:port", the port resolved

  // Registers a service. kInvalidArgument for a bad name (valid_service_name)
  // or a Service without nic or accept; kAlreadyExists if the name
  // is taken. Any thread, any time.
  Status serve(std::string_view name, Service service);
  // Unregisters a service: its handshakes in progress are dropped without
  // touching their QPs (no DoneFn for them). After it returns, no callback
  // of the service runs and the listener touches none of its QPs, so the
  // service may be destroyed. kNotFound if not served. Any thread, callbacks
  // included.
  Status unserve(std::string_view name);

  ListenerStats stats() const;

 private:
  class Impl;
  explicit Listener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Private data for a trivially copyable struct (rkeys, addresses, sizes), in
// host byte order: both sides are expected to share the architecture.
template <typename T>
std::vector<uint8_t> private_data_of(const T& value) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kMaxPrivateDataBytes);
  std::vector<uint8_t> bytes(sizeof(T));
  std::memcpy(bytes.data(), &value, sizeof(T));
  return bytes;
}

// The struct back; kInvalidArgument unless exactly sizeof(T) bytes came.
template <typename T>
Result<T> private_data_as(std::span<const uint8_t> bytes) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (bytes.size() != sizeof(T)) {
    return invalid_argument("private data is " + std::to_string(bytes.size()) + " bytes, expected " +
                            std::to_string(sizeof(T)));
  }
  T value;
  std::memcpy(&value, bytes.data(), sizeof(T));
  return value;
}

}  // namespace ferry::cm
