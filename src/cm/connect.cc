// The active side of the handshake (cm::connect): REQ, then on the REP
// RESET/INIT -> RTR -> RTS and an RTU; a REJ becomes the caller's Status.
#include <string>

#include "cm_internal.h"

namespace ferry::cm {

namespace {

// What a REJ means to the caller: the code says what to do about it.
Status status_of_reject(const Rej& rej, std::string_view service, std::string_view peer) {
  const std::string where = "service '" + std::string(service) + "' at " + std::string(peer);
  switch (rej.reason) {
    case RejectReason::kUnknownService:
      return not_found("cannot connect to " + where + ": no such service there (" + rej.text + ")");
    case RejectReason::kServiceRefused:
      return Status(rej.code, where + " refused the connection: " + rej.text);
    case RejectReason::kBadMessage:
      return invalid_argument(where + " rejected our REQ as malformed: " + rej.text);
    case RejectReason::kUnsupportedVersion:
      return unimplemented(where + " speaks another CM wire version: " + rej.text);
    case RejectReason::kLocalError:
      return Status(rej.code, where + " could not bring its QP up: " + rej.text);
  }
  return unavailable(where + " rejected the connection: " + rej.text);
}

// Tells the passive side we could not use its REP, so that it puts its QP
// in ERROR now rather than at its RTU timeout. Best effort: the failure
// being reported is the caller's.
void send_reject(int fd, const Status& why, detail::Deadline deadline, std::string_view peer) {
  Rej rej{RejectReason::kLocalError, why.code(), why.message()};
  Result<std::vector<uint8_t>> frame = encode(rej);
  if (frame.ok()) (void)detail::send_all(fd, frame.value(), deadline, peer);
}

}  // namespace

Result<Connection> connect(std::string_view address, std::string_view service, nic::Nic& nic, nic::QueuePair& qp, std::span<const uint8_t> private_data, const ConnectOptions& options) {
  if (!valid_service_name(service)) {
    return invalid_argument("connect: service name '" + std::string(service.substr(0, 64)) +
                            "' must be 1..255 printable ASCII characters without spaces");
  }
  if (private_data.size() > kMaxPrivateDataBytes) {
    return invalid_argument("connect: private data is " + std::to_string(private_data.size()) + " bytes, at most " +
                            std::to_string(kMaxPrivateDataBytes) + " allowed");
  }
  const nic::QpState state = qp.state();
  if (state != nic::QpState::kReset && state != nic::QpState::kInit) {
    return failed_precondition("connect: QP " + std::to_string(qp.qp_num()) + " is in " +
                               std::string(nic::qp_state_name(state)) + "; the CM connects QPs in RESET or INIT");
  }
  const detail::Deadline deadline = detail::SteadyClock::now() + std::chrono::milliseconds(options.timeout_ms);
  const uint32_t first_psn = detail::pick_first_psn(options.first_psn);
  const uint32_t offered_mtu = detail::offered_path_mtu(nic, options.qp);

  Req req;
  req.service = std::string(service);
  req.endpoint = detail::local_endpoint(nic, qp, first_psn, offered_mtu);
  req.private_data.assign(private_data.begin(), private_data.end());
  FERRY_ASSIGN_OR_RETURN(const std::vector<uint8_t> req_frame, encode(req));

  std::string peer;
  FERRY_ASSIGN_OR_RETURN(detail::Fd fd, detail::connect_tcp(address, deadline, &peer));
  FERRY_RETURN_IF_ERROR(detail::send_all(fd.get(), req_frame, deadline, peer));
  Result<Message> answer = detail::receive_message(fd.get(), deadline, peer);
  if (!answer.ok()) {
    const Status& s = answer.status();
    return Status(s.code(), "connecting to service '" + std::string(service) + "' at " + peer + ": " + s.message());
  }
  if (const Rej* rej = std::get_if<Rej>(&answer.value())) return status_of_reject(*rej, service, peer);
  const Rep* rep = std::get_if<Rep>(&answer.value());
  if (rep == nullptr) {
    const Status bad = invalid_argument("connecting to service '" + std::string(service) + "' at " + peer +
                                        ": expected a REP or REJ, got a " +
                                        std::string(message_name(answer.value())));
    send_reject(fd.get(), bad, deadline, peer);
    return bad;
  }

  // From here on the QP may have seen packets of this connection: a failure
  // leaves it in ERROR, and the passive side is told with a REJ.
  Connection connection;
  connection.peer = rep->endpoint;
  connection.private_data = rep->private_data;
  connection.peer_address = peer;
  auto bring_up = [&]() -> Status {
    if (rep->endpoint.path_mtu > offered_mtu) {
      return invalid_argument("the REP's path MTU " + std::to_string(rep->endpoint.path_mtu) +
                              " exceeds the " + std::to_string(offered_mtu) + " we offered");
    }
    FERRY_ASSIGN_OR_RETURN(connection.dest_nic, detail::resolve_peer(nic, rep->endpoint));
    FERRY_RETURN_IF_ERROR(detail::to_init(qp, options.qp));
    FERRY_RETURN_IF_ERROR(detail::to_rtr(qp, connection.dest_nic, rep->endpoint, rep->endpoint.path_mtu, options.qp));
    return detail::to_rts(qp, first_psn, options.qp);
  };
  if (Status s = bring_up(); !s.ok()) {
    detail::to_error(qp);
    send_reject(fd.get(), s, deadline, peer);
    return Status(s.code(), "connecting to service '" + std::string(service) + "' at " + peer + ": " + s.message());
  }
  FERRY_ASSIGN_OR_RETURN(const std::vector<uint8_t> rtu_frame, encode(Rtu{}));
  if (Status s = detail::send_all(fd.get(), rtu_frame, deadline, peer); !s.ok()) {
    // Without the RTU the passive side will time out and fail its QP.
    detail::to_error(qp);
    return Status(s.code(), "connecting to service '" + std::string(service) + "' at " + peer +
                                ": the RTU was not delivered: " + s.message());
  }
  return connection;
}

}  // namespace ferry::cm
