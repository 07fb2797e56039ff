// The primary's connection to one backup: control RPCs and the data path QP.
#include <algorithm>
#include <cstring>

#include "backup_link_impl.h"
#include "ferry/cm/cm.h"
#include "messages.h"

namespace ferry::tailwind {

namespace {

Status reply_error(const rpc::CallReply& reply) {
  if (reply.app_status == 0) return ok_status();
  const auto code = static_cast<Code>(reply.app_status);
  std::string message(reply.payload.begin(), reply.payload.end());
  if (reply.app_status > static_cast<uint8_t>(Code::kUnimplemented)) {
    return internal_error("backup replied with status " + std::to_string(reply.app_status));
  }
  return Status(code, std::move(message));
}

}  // namespace

std::string_view replication_name(Replication r) { return r == Replication::kTailwind ? "tailwind" : "rpc"; }

Result<Replication> parse_replication(std::string_view name) {
  if (name == "tailwind") return Replication::kTailwind;
  if (name == "rpc" || name == "ramcloud") return Replication::kRpc;
  return invalid_argument("unknown replication '" + std::string(name) + "' (tailwind or rpc)");
}

BackupLink::BackupLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BackupLink::~BackupLink() = default;

Result<std::unique_ptr<BackupLink>> BackupLink::connect(nic::Engine& engine, nic::Nic& nic, Backup& backup,
                                                        rpc::Server& server, uint64_t log_id, bool data_path,
                                                        std::optional<uint64_t> route) {
  auto impl = std::make_unique<Impl>();
  impl->name = backup.options().name;
  impl->log_id = log_id;
  impl->route = route.value_or(log_id);
  rpc::ClientOptions co;
  co.sessions = 1;
  co.max_inflight = 128;  // above LogOptions::max_inflight_per_backup: control calls fit beside the data
  FERRY_ASSIGN_OR_RETURN(impl->client, rpc::Client::create(engine, nic, server, co));
  if (data_path) {
    FERRY_RETURN_IF_ERROR(impl->create_data_path(nic));
    Backup* b = &backup;
    impl->connect_qp = [b, log_id, &nic](nic::QueuePair& qp) { return b->connect(log_id, qp, nic); };
    FERRY_RETURN_IF_ERROR(impl->connect_qp(*impl->qp));
  }
  return std::unique_ptr<BackupLink>(new BackupLink(std::move(impl)));
}

Result<std::unique_ptr<BackupLink>> BackupLink::connect(nic::Nic& nic, const Remote& backup, uint64_t log_id,
                                                        bool data_path, std::optional<uint64_t> route) {
  auto impl = std::make_unique<Impl>();
  impl->name = backup.name;
  impl->log_id = log_id;
  impl->route = route.value_or(log_id);
  rpc::ClientOptions co;
  co.sessions = 1;
  co.max_inflight = 128;
  FERRY_ASSIGN_OR_RETURN(impl->client,
                         rpc::Client::connect(nic, backup.address, backup.rpc_service, co, &backup.server));
  if (data_path) {
    FERRY_RETURN_IF_ERROR(impl->create_data_path(nic));
    impl->connect_qp = [backup, log_id, &nic](nic::QueuePair& qp) -> Status {
      cm::ConnectOptions o;
      o.timeout_ms = backup.connect_timeout_ms;
      o.qp.access_flags = 0;  // the primary's side is only written from, never to
      auto conn =
          cm::connect(backup.address, backup.data_service, nic, qp, detail::encode_data_path_request(log_id), o);
      if (!conn.ok()) {
        return Status(conn.status().code(), "the data path to " + backup.name + " (" + backup.address + "): " +
                                                conn.status().message());
      }
      return ok_status();
    };
    FERRY_RETURN_IF_ERROR(impl->connect_qp(*impl->qp));
  }
  return std::unique_ptr<BackupLink>(new BackupLink(std::move(impl)));
}

Status BackupLink::Impl::create_data_path(nic::Nic& primary_nic) {
  nic = &primary_nic;
  FERRY_ASSIGN_OR_RETURN(pd, primary_nic.alloc_pd());
  return create_queues();
}

Status BackupLink::Impl::reconnect_data_path() {
  if (qp == nullptr) return ok_status();  // no data path (RPC replication)
  qp.reset();
  cq.reset();
  FERRY_RETURN_IF_ERROR(create_queues());
  return connect_qp(*qp);
}

Status BackupLink::Impl::create_queues() {
  nic::CqInitAttr cq_attr;
  cq_attr.cqe = 2048;
  FERRY_ASSIGN_OR_RETURN(cq, nic->create_cq(cq_attr));
  nic::QpInitAttr qp_attr;
  qp_attr.send_cq = cq.get();
  qp_attr.recv_cq = cq.get();
  qp_attr.cap.max_send_wr = 1024;
  qp_attr.cap.max_recv_wr = 1;
  FERRY_ASSIGN_OR_RETURN(qp, nic->create_qp(*pd, qp_attr));
  return ok_status();
}

const std::string& BackupLink::name() const { return impl_->name; }
uint64_t BackupLink::log_id() const { return impl_->log_id; }
bool BackupLink::has_data_path() const { return impl_->qp != nullptr; }

Result<rpc::CallReply> BackupLink::Impl::call(uint16_t type, std::span<const uint8_t> payload) {
  FERRY_ASSIGN_OR_RETURN(auto reply, client->session(0).call(type, route, payload, /*nilext=*/false));
  FERRY_RETURN_IF_ERROR(reply_error(reply));
  return reply;
}

Result<OpenedBuffer> BackupLink::open(uint64_t segment_id, uint64_t replica_version) {
  const detail::OpenRequest req{impl_->log_id, segment_id, replica_version};
  FERRY_ASSIGN_OR_RETURN(auto reply, impl_->call(kTwOpen, detail::encode(req)));
  FERRY_ASSIGN_OR_RETURN(auto out, detail::decode<detail::OpenReply>(reply.payload));
  return OpenedBuffer{out.addr, out.rkey, out.bytes};
}

Status BackupLink::close(uint64_t segment_id, uint64_t offset, uint32_t checksum) {
  detail::CloseRequest req;
  req.log_id = impl_->log_id;
  req.segment_id = segment_id;
  req.offset = offset;
  req.checksum = checksum;
  return impl_->call(kTwClose, detail::encode(req)).status();
}

Status BackupLink::set_version(uint64_t segment_id, uint64_t replica_version) {
  const detail::VersionRequest req{impl_->log_id, segment_id, replica_version};
  return impl_->call(kTwVersion, detail::encode(req)).status();
}

Status BackupLink::free(uint64_t segment_id) {
  const detail::SegmentRef req{impl_->log_id, segment_id};
  return impl_->call(kTwFree, detail::encode(req)).status();
}

Result<std::vector<ReplicaInfo>> BackupLink::find() {
  const detail::FindRequest req{impl_->log_id};
  FERRY_ASSIGN_OR_RETURN(auto reply, impl_->call(kTwFind, detail::encode(req)));
  return detail::decode_find_reply(reply.payload);
}

Result<std::vector<uint8_t>> BackupLink::read_all(uint64_t segment_id, bool closed, uint64_t bytes) {
  std::vector<uint8_t> out;
  out.reserve(bytes);
  while (out.size() < bytes) {
    detail::ReadRequest req;
    req.log_id = impl_->log_id;
    req.segment_id = segment_id;
    req.offset = out.size();
    req.max_bytes = static_cast<uint32_t>(std::min<uint64_t>(bytes - out.size(), 1u << 20));
    req.closed = closed ? 1 : 0;
    FERRY_ASSIGN_OR_RETURN(auto reply, impl_->call(kTwRead, detail::encode(req)));
    if (reply.payload.empty()) {
      return data_loss(impl_->name + " returned " + std::to_string(out.size()) + " of " + std::to_string(bytes) +
                       " bytes of segment " + std::to_string(segment_id));
    }
    const size_t n = std::min<size_t>(reply.payload.size(), bytes - out.size());
    out.insert(out.end(), reply.payload.begin(), reply.payload.begin() + static_cast<ptrdiff_t>(n));
  }
  return out;
}

}  // namespace ferry::tailwind
