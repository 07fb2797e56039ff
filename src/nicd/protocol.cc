// Framing and descriptor passing of the NIC daemon's control protocol.
#include "protocol.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace ferry::nicd::proto {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kHello: return "HELLO";
    case Op::kArenaMapped: return "ARENA_MAPPED";
    case Op::kAddMemory: return "ADD_MEMORY";
    case Op::kRemoveMemory: return "REMOVE_MEMORY";
    case Op::kAllocPd: return "ALLOC_PD";
    case Op::kDeallocPd: return "DEALLOC_PD";
    case Op::kRegMr: return "REG_MR";
    case Op::kDeregMr: return "DEREG_MR";
    case Op::kCreateChannel: return "CREATE_CHANNEL";
    case Op::kDestroyChannel: return "DESTROY_CHANNEL";
    case Op::kCreateCq: return "CREATE_CQ";
    case Op::kDestroyCq: return "DESTROY_CQ";
    case Op::kCreateSrq: return "CREATE_SRQ";
    case Op::kDestroySrq: return "DESTROY_SRQ";
    case Op::kCreateQp: return "CREATE_QP";
    case Op::kDestroyQp: return "DESTROY_QP";
    case Op::kModifyQp: return "MODIFY_QP";
    case Op::kQueryQp: return "QUERY_QP";
    case Op::kQpTraffic: return "QP_TRAFFIC";
    case Op::kPollAsyncEvent: return "POLL_ASYNC_EVENT";
    case Op::kCounters: return "COUNTERS";
    case Op::kResolve: return "RESOLVE";
    case Op::kEnd: break;
  }
  return "UNKNOWN";
}

void put_qp_attr(Writer& w, const nic::QpAttr& a) {
  for (uint32_t v : {static_cast<uint32_t>(a.state), a.access_flags, a.path_mtu, a.dest_nic, a.dest_qp_num, a.rq_psn,
                     a.sq_psn, uint32_t{a.max_dest_rd_atomic}, uint32_t{a.min_rnr_timer}, uint32_t{a.timeout},
                     uint32_t{a.retry_cnt}, uint32_t{a.rnr_retry}, uint32_t{a.max_rd_atomic}}) {
    w.u32(v);
  }
}

nic::QpAttr get_qp_attr(Reader& r) {
  nic::QpAttr a;
  a.state = static_cast<nic::QpState>(std::min<uint32_t>(r.u32(), static_cast<uint32_t>(nic::QpState::kError)));
  a.access_flags = r.u32();
  a.path_mtu = r.u32();
  a.dest_nic = r.u32();
  a.dest_qp_num = r.u32();
  a.rq_psn = r.u32();
  a.sq_psn = r.u32();
  a.max_dest_rd_atomic = static_cast<uint8_t>(r.u32());
  a.min_rnr_timer = static_cast<uint8_t>(r.u32());
  a.timeout = static_cast<uint8_t>(r.u32());
  a.retry_cnt = static_cast<uint8_t>(r.u32());
  a.rnr_retry = static_cast<uint8_t>(r.u32());
  a.max_rd_atomic = static_cast<uint8_t>(r.u32());
  return a;
}

bool parse_header(const uint8_t* p, size_t n, Header* h) {
  if (n < sizeof(Header)) return false;
  std::memcpy(h, p, sizeof(Header));
  return h->magic == kMagic && h->version == kVersion && h->body_bytes == n - sizeof(Header);
}

std::vector<uint8_t> frame(uint16_t op, uint32_t seq, const Writer& body) {
  Header h;
  h.op = op;
  h.seq = seq;
  h.body_bytes = static_cast<uint32_t>(body.bytes().size());
  std::vector<uint8_t> out(sizeof(Header) + body.bytes().size());
  std::memcpy(out.data(), &h, sizeof(h));
  if (!body.bytes().empty()) std::memcpy(out.data() + sizeof(h), body.bytes().data(), body.bytes().size());
  return out;
}

void put_status(Writer& w, const Status& s) {
  w.u32(static_cast<uint32_t>(s.code()));
  w.str(s.message().substr(0, 1024));
}

Status get_status(Reader& r) {
  const uint32_t code = r.u32();
  std::string message = r.str(1024);
  if (!r.ok()) return internal_error("nicd: malformed response");
  if (code == 0) return ok_status();
  if (code > static_cast<uint32_t>(Code::kUnimplemented)) return internal_error("nicd: " + message);
  return Status(static_cast<Code>(code), std::move(message));
}

bool send_message(int sock, const std::vector<uint8_t>& bytes, const int* fds, size_t nfds) {
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  if (nfds > 0) {
    if (nfds > 4) return false;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  for (;;) {
    const ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes.size())) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

ssize_t recv_message(int sock, uint8_t* buf, size_t cap, int* fds, size_t max_fds, size_t* nfds_out) {
  *nfds_out = 0;
  iovec iov{buf, cap};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (*nfds_out < max_fds) {
        fds[(*nfds_out)++] = fd;
      } else {
        close(fd);
      }
    }
  }
  // A truncated message (longer than cap) is malformed: report it as such.
  if (msg.msg_flags & MSG_TRUNC) return static_cast<ssize_t>(cap) + 1;
  return n;
}

}  // namespace ferry::nicd::proto
