// A Tailwind backup's RPC service (docs/tailwind.md "Control RPCs"): the
// handlers of request types 60-66 over the Backup's control operations, and
// the codec of the find reply. Every request is untrusted bytes: a
// malformed one is answered kInvalidArgument and not executed.
#include <algorithm>
#include <cstring>

#include "ferry/tailwind/backup.h"
#include "messages.h"

namespace ferry::tailwind {
namespace {

void reply_status(rpc::Reply& reply, const Status& status) {
  if (status.ok()) return;
  reply.set_status(static_cast<uint8_t>(status.code()));
  const std::string& msg = status.message();
  reply.append({reinterpret_cast<const uint8_t*>(msg.data()), std::min(msg.size(), reply.capacity())});
}

}  // namespace

Status Backup::register_rpcs(rpc::Server& server) {
  using detail::decode;
  Backup* self = this;
  FERRY_RETURN_IF_ERROR(server.register_handler(kTwOpen, {"tailwind.open", false}, [self](const rpc::Request& q, rpc::Reply& reply) {
    auto req = decode<detail::OpenRequest>(q.payload);
    if (!req.ok()) return reply_status(reply, req.status());
    auto opened = self->open(req->log_id, req->segment_id, req->replica_version);
    if (!opened.ok()) return reply_status(reply, opened.status());
    const detail::OpenReply out{opened->addr, opened->rkey, opened->bytes};
    reply.append(detail::encode(out));
  }));
  FERRY_RETURN_IF_ERROR(server.register_handler(kTwClose, {"tailwind.close", false}, [self](const rpc::Request& q, rpc::Reply& reply) {
    auto req = decode<detail::CloseRequest>(q.payload);
    if (!req.ok()) return reply_status(reply, req.status());
    reply_status(reply, self->close(req->log_id, req->segment_id, req->offset, req->checksum));
  }));
  FERRY_RETURN_IF_ERROR(server.register_handler(kTwVersion, {"tailwind.version", false}, [self](const rpc::Request& q, rpc::Reply& reply) {
    auto req = decode<detail::VersionRequest>(q.payload);
    if (!req.ok()) return reply_status(reply, req.status());
    reply_status(reply, self->set_version(req->log_id, req->segment_id, req->replica_version));
  }));
  FERRY_RETURN_IF_ERROR(server.register_handler(kTwReplicate, {"tailwind.replicate", false}, [self](const rpc::Request& q, rpc::Reply& reply) {
    auto req = decode<detail::ReplicateHeader>(q.payload, /*prefix=*/true);
    if (!req.ok()) return reply_status(reply, req.status());
    reply_status(reply, self->replicate(req->log_id, req->segment_id, req->offset,
                                        q.payload.subspan(sizeof(detail::ReplicateHeader))));
  }));
  FERRY_RETURN_IF_ERROR(server.register_handler(kTwFind, {"tailwind.find", false}, [self](const rpc::Request& q, rpc::Reply& reply) {
    auto req = decode<detail::FindRequest>(q.payload);
    if (!req.ok()) return reply_status(reply, req.status());
    // Recovery's find: the log is fenced for good before it is scanned.
    const auto encoded = detail::encode_find_reply(self->fence_and_find(req->log_id));
    if (encoded.size() > reply.capacity()) return reply_status(reply, resource_exhausted("find reply too large"));
    reply.append(encoded);
  }));
  FERRY_RETURN_IF_ERROR(server.register_handler(kTwRead, {"tailwind.read", false}, [self](const rpc::Request& q, rpc::Reply& reply) {
    auto req = decode<detail::ReadRequest>(q.payload);
    if (!req.ok()) return reply_status(reply, req.status());
    const uint32_t max = static_cast<uint32_t>(std::min<size_t>(req->max_bytes, reply.capacity()));
    auto bytes = self->read(req->log_id, req->segment_id, req->closed != 0, req->offset, max);
    if (!bytes.ok()) return reply_status(reply, bytes.status());
    reply.append(*bytes);
  }));
  return server.register_handler(kTwFree, {"tailwind.free", false}, [self](const rpc::Request& q, rpc::Reply& reply) {
    auto req = decode<detail::SegmentRef>(q.payload);
    if (!req.ok()) return reply_status(reply, req.status());
    reply_status(reply, self->free(req->log_id, req->segment_id));
  });
}

// ---- message codecs ----

namespace detail {

std::vector<uint8_t> encode_find_reply(const std::vector<ReplicaInfo>& replicas) {
  std::vector<uint8_t> out(8 + replicas.size() * sizeof(WireReplica));
  const uint32_t count = static_cast<uint32_t>(replicas.size());
  std::memcpy(out.data(), &count, 4);
  for (size_t i = 0; i < replicas.size(); ++i) {
    const ReplicaInfo& r = replicas[i];
    WireReplica w;
    w.segment_id = r.segment_id;
    w.replica_version = r.replica_version;
    w.valid_bytes = r.valid_bytes;
    w.checksum = r.checksum;
    w.closed = r.closed;
    w.corrupted = r.corrupted;
    w.stop = static_cast<uint8_t>(r.stop);
    w.zero_after_valid = r.zero_after_valid;
    std::memcpy(out.data() + 8 + i * sizeof w, &w, sizeof w);
  }
  return out;
}

Result<std::vector<ReplicaInfo>> decode_find_reply(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) return invalid_argument("malformed find reply");
  uint32_t count = 0;
  std::memcpy(&count, bytes.data(), 4);
  if ((bytes.size() - 8) / sizeof(WireReplica) != count || (bytes.size() - 8) % sizeof(WireReplica) != 0) {
    return invalid_argument("malformed find reply: " + std::to_string(count) + " replicas in " +
                            std::to_string(bytes.size()) + " bytes");
  }
  std::vector<ReplicaInfo> out(count);
  for (uint32_t i = 0; i < count; ++i) {
    WireReplica w;
    std::memcpy(&w, bytes.data() + 8 + size_t{i} * sizeof w, sizeof w);
    if (w.stop > static_cast<uint8_t>(ScanStop::kTruncated) || w.closed > 1 || w.corrupted > 1 ||
        w.zero_after_valid > 1) {
      return invalid_argument("malformed find reply: bad replica flags");
    }
    out[i].segment_id = w.segment_id;
    out[i].replica_version = w.replica_version;
    out[i].valid_bytes = w.valid_bytes;
    out[i].checksum = w.checksum;
    out[i].closed = w.closed != 0;
    out[i].corrupted = w.corrupted != 0;
    out[i].stop = static_cast<ScanStop>(w.stop);
    out[i].zero_after_valid = w.zero_after_valid != 0;
  }
  return out;
}

}  // namespace detail
}  // namespace ferry::tailwind
