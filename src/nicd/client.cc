// The application side of the NIC daemon: a verbs Device whose control
// operations are requests on the daemon's socket and whose rings and
// records are in the memory file the daemon shares with this process.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "../nic/device.h"
#include "ferry/nicd/nicd.h"
#include "protocol.h"

namespace ferry::nicd {

namespace {

std::string errno_text() { return std::strerror(errno); }

class Client final : public nic::detail::Device {
 public:
  ~Client() override {
    if (monitor_.joinable()) {
      const uint64_t one = 1;
      (void)!write(stop_fd_, &one, sizeof(one));
      monitor_.join();
    }
    if (sock_ >= 0) close(sock_);
    if (arena_ != nullptr) munmap(arena_, arena_bytes_);
    if (page_ != nullptr) munmap(page_, 4096);
    if (wake_fd_ >= 0) close(wake_fd_);
    if (stop_fd_ >= 0) close(stop_fd_);
  }

  Status open(const OpenOptions& options) {
    timeout_ms_ = options.timeout_ms;
    sockaddr_un addr{};
    if (options.socket_path.empty() || options.socket_path.size() >= sizeof(addr.sun_path)) {
      return invalid_argument("nicd: bad socket path '" + options.socket_path + "'");
    }
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, options.socket_path.data(), options.socket_path.size());
    sock_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock_ < 0) return unavailable("nicd: socket: " + errno_text());
    if (::connect(sock_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return unavailable("nicd: no NIC daemon at " + options.socket_path + " (" + errno_text() +
                         "); start one with `ferry nicd`");
    }
    proto::Writer w;
    w.u32(proto::kVersion);
    w.str(options.client_name);
    int fds[3] = {-1, -1, -1};
    size_t nfds = 0;
    std::vector<uint8_t> reply;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kHello, w, &reply, fds, 3, &nfds));
    if (nfds != 3) {
      for (size_t i = 0; i < nfds; ++i) close(fds[i]);
      return internal_error("nicd: HELLO without its descriptors");
    }
    proto::Reader rd(reply.data(), reply.size());
    proto::Reader* r = &rd;
    const int arena_fd = fds[0], page_fd = fds[1];
    wake_fd_ = fds[2];
    (void)r->u32();  // the daemon's id for this client (its logs)
    address_ = r->u32();
    r->raw_into(gid_.raw.data(), gid_.raw.size());
    const bool has_udp = r->u32() != 0;
    nic::UdpEndpoint ep;
    ep.ipv4 = r->u32();
    ep.port = static_cast<uint16_t>(r->u32());
    if (has_udp) udp_ = ep;
    max_mtu_ = r->u32();
    name_ = r->str(256);
    arena_bytes_ = r->u64();
    const uint64_t ring_offset = r->u64();
    if (!r->ok() || ring_offset + sizeof(nic::detail::DoorbellRing) > arena_bytes_) {
      close(arena_fd);
      close(page_fd);
      return internal_error("nicd: malformed HELLO reply");
    }
    void* a = mmap(nullptr, arena_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, arena_fd, 0);
    close(arena_fd);
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
    close(page_fd);
    if (a == MAP_FAILED || p == MAP_FAILED) {
      if (a != MAP_FAILED) munmap(a, arena_bytes_);
      if (p != MAP_FAILED) munmap(p, 4096);
      return resource_exhausted("nicd: cannot map the shared memory: " + errno_text());
    }
    arena_ = static_cast<uint8_t*>(a);
    page_ = static_cast<uint8_t*>(p);
    parked_ = reinterpret_cast<std::atomic<bool>*>(page_);
    doorbells_ = reinterpret_cast<nic::detail::DoorbellRing*>(arena_ + ring_offset);
    proto::Writer m;
    m.u64(reinterpret_cast<uint64_t>(arena_));
    FERRY_RETURN_IF_ERROR(simple(proto::Op::kArenaMapped, m));
    stop_fd_ = eventfd(0, EFD_CLOEXEC);
    monitor_ = std::thread([this] { monitor(); });
    return ok_status();
  }

  uint32_t address() const override { return address_; }
  const std::string& name() const override { return name_; }
  nic::Gid gid() const override { return gid_; }
  std::optional<nic::UdpEndpoint> udp_endpoint() const override { return udp_; }
  uint32_t max_path_mtu() const override { return max_mtu_; }
  nic::UdpCounters udp_counters() const override {
    nic::UdpCounters u{};
    (void)const_cast<Client*>(this)->counters_into(nullptr, &u);
    return u;
  }
  nic::NicCounters counters() const override {
    nic::NicCounters n{};
    (void)const_cast<Client*>(this)->counters_into(&n, nullptr);
    return n;
  }
  std::optional<nic::AsyncEvent> poll_async_event() override {
    if (dead()) {
      if (!fatal_reported_.exchange(true)) return nic::AsyncEvent{nic::AsyncEventType::kDeviceFatal, 0};
      return std::nullopt;
    }
    std::vector<uint8_t> reply;
    proto::Writer w;
    if (!request(proto::Op::kPollAsyncEvent, w, &reply).ok()) {
      if (dead() && !fatal_reported_.exchange(true)) return nic::AsyncEvent{nic::AsyncEventType::kDeviceFatal, 0};
      return std::nullopt;
    }
    proto::Reader rd(reply.data(), reply.size());
    proto::Reader* r = &rd;
    const uint32_t present = r->u32();
    const uint32_t type = r->u32();
    const uint32_t number = r->u32();
    if (!r->ok() || present == 0 || type > static_cast<uint32_t>(nic::AsyncEventType::kDeviceFatal)) return std::nullopt;
    return nic::AsyncEvent{static_cast<nic::AsyncEventType>(type), number};
  }
  Result<uint32_t> resolve(const nic::UdpEndpoint& endpoint) override {
    proto::Writer w;
    w.u32(endpoint.ipv4);
    w.u32(endpoint.port);
    std::vector<uint8_t> reply;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kResolve, w, &reply));
    proto::Reader r(reply.data(), reply.size());
    return r.u32();
  }

  Result<uint32_t> alloc_pd() override {
    proto::Writer w;
    std::vector<uint8_t> reply;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kAllocPd, w, &reply));
    proto::Reader r(reply.data(), reply.size());
    return r.u32();
  }
  void dealloc_pd(uint32_t pd) override {
    proto::Writer w;
    w.u32(pd);
    (void)simple(proto::Op::kDeallocPd, w);
  }
  Result<uint32_t> reg_mr(uint32_t pd, void* addr, size_t length, uint32_t access) override {
    FERRY_RETURN_IF_ERROR(ensure_shared(reinterpret_cast<uint64_t>(addr), length, "reg_mr"));
    proto::Writer w;
    w.u32(pd);
    w.u64(reinterpret_cast<uint64_t>(addr));
    w.u64(length);
    w.u32(access);
    std::vector<uint8_t> reply;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kRegMr, w, &reply));
    proto::Reader r(reply.data(), reply.size());
    return r.u32();
  }
  void dereg_mr(uint32_t key) override {
    proto::Writer w;
    w.u32(key);
    (void)simple(proto::Op::kDeregMr, w);
  }
  Result<nic::detail::ChannelView> create_channel() override {
    proto::Writer w;
    std::vector<uint8_t> reply;
    int fd = -1;
    size_t nfds = 0;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kCreateChannel, w, &reply, &fd, 1, &nfds));
    proto::Reader r(reply.data(), reply.size());
    nic::detail::ChannelView view;
    view.handle = r.u32();
    const uint64_t offset = r.u64();
    if (nfds != 1 || !in_arena(offset, sizeof(nic::detail::ChannelRecord))) {
      if (nfds == 1) close(fd);
      return internal_error("nicd: malformed CREATE_CHANNEL reply");
    }
    view.rec = reinterpret_cast<nic::detail::ChannelRecord*>(arena_ + offset);
    view.event_fd = fd;
    std::lock_guard<std::mutex> lock(channels_mu_);
    channel_fds_.push_back(fd);
    return view;
  }
  void destroy_channel(const nic::detail::ChannelView& view) override {
    proto::Writer w;
    w.u32(static_cast<uint32_t>(view.handle));
    (void)simple(proto::Op::kDestroyChannel, w);
    std::lock_guard<std::mutex> lock(channels_mu_);
    channel_fds_.erase(std::remove(channel_fds_.begin(), channel_fds_.end(), view.event_fd), channel_fds_.end());
    close(view.event_fd);
  }
  Result<nic::detail::CqView> create_cq(const nic::CqInitAttr& attr, uint64_t channel) override {
    proto::Writer w;
    w.u32(attr.cqe);
    w.u32(attr.count_only ? 1 : 0);
    w.u32(static_cast<uint32_t>(channel));
    std::vector<uint8_t> reply;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kCreateCq, w, &reply));
    proto::Reader r(reply.data(), reply.size());
    nic::detail::CqView v;
    v.number = r.u32();
    v.handle = v.number;
    v.depth = r.u32();
    const uint64_t rec = r.u64();
    const uint64_t ring = r.u64();
    v.count_only = attr.count_only;
    v.has_channel = channel != 0;
    if (!r.ok() || !in_arena(rec, sizeof(nic::detail::CqRecord)) ||
        (!attr.count_only && !in_arena(ring, static_cast<uint64_t>(v.depth) * sizeof(nic::Cqe)))) {
      return internal_error("nicd: malformed CREATE_CQ reply");
    }
    v.rec = reinterpret_cast<nic::detail::CqRecord*>(arena_ + rec);
    v.ring = attr.count_only ? nullptr : reinterpret_cast<nic::Cqe*>(arena_ + ring);
    return v;
  }
  void destroy_cq(uint64_t cq) override { destroy(proto::Op::kDestroyCq, cq); }
  Result<nic::detail::SrqView> create_srq(uint32_t pd, const nic::SrqInitAttr& attr) override {
    if (!attr.ring_memory.empty()) {
      FERRY_RETURN_IF_ERROR(ensure_shared(reinterpret_cast<uint64_t>(attr.ring_memory.data()), attr.ring_memory.size(),
                                          "create_srq ring_memory"));
    }
    proto::Writer w;
    w.u32(pd);
    w.u32(attr.max_wr);
    w.u32(attr.max_sge);
    w.u32(attr.srq_limit);
    w.u32(attr.mp_strides);
    w.u32(attr.mp_stride_bytes);
    w.u32(attr.mp_max_message_bytes);
    w.u64(reinterpret_cast<uint64_t>(attr.ring_memory.data()));
    w.u64(attr.ring_memory.size());
    std::vector<uint8_t> reply;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kCreateSrq, w, &reply));
    proto::Reader r(reply.data(), reply.size());
    nic::detail::SrqView v;
    v.number = r.u32();
    v.handle = v.number;
    v.pd = pd;
    v.depth = r.u32();
    v.stride = r.u32();
    v.max_sge = r.u32();
    v.mp_strides = r.u32();
    v.mp_stride_bytes = r.u32();
    const uint64_t rec = r.u64();
    const bool ring_in_arena = r.u32() != 0;
    const uint64_t ring = r.u64();
    const uint64_t ring_bytes = static_cast<uint64_t>(v.depth) * v.stride;
    if (!r.ok() || !in_arena(rec, sizeof(nic::detail::SrqRecord)) || (ring_in_arena && !in_arena(ring, ring_bytes))) {
      return internal_error("nicd: malformed CREATE_SRQ reply");
    }
    v.rec = reinterpret_cast<nic::detail::SrqRecord*>(arena_ + rec);
    v.ring = ring_in_arena ? arena_ + ring : attr.ring_memory.data();
    return v;
  }
  void destroy_srq(uint64_t srq) override { destroy(proto::Op::kDestroySrq, srq); }
  Result<nic::detail::QpView> create_qp(uint32_t pd, const nic::QpInitAttr& attr, uint64_t send_cq, uint64_t recv_cq,
                                        uint64_t srq) override {
    if (!attr.send_ring_memory.empty()) {
      FERRY_RETURN_IF_ERROR(ensure_shared(reinterpret_cast<uint64_t>(attr.send_ring_memory.data()),
                                          attr.send_ring_memory.size(), "create_qp send_ring_memory"));
    }
    if (!attr.recv_ring_memory.empty()) {
      FERRY_RETURN_IF_ERROR(ensure_shared(reinterpret_cast<uint64_t>(attr.recv_ring_memory.data()),
                                          attr.recv_ring_memory.size(), "create_qp recv_ring_memory"));
    }
    proto::Writer w;
    w.u32(pd);
    w.u32(attr.cap.max_send_wr);
    w.u32(attr.cap.max_recv_wr);
    w.u32(attr.cap.max_send_sge);
    w.u32(attr.cap.max_recv_sge);
    w.u32(attr.cap.max_inline_data);
    w.u32(attr.sq_sig_all ? 1 : 0);
    w.u32(attr.managed_send ? 1 : 0);
    w.u32(attr.managed_recv ? 1 : 0);
    w.u32(attr.cross_channel ? 1 : 0);
    w.u32(static_cast<uint32_t>(send_cq));
    w.u32(static_cast<uint32_t>(recv_cq));
    w.u32(static_cast<uint32_t>(srq));
    w.u64(reinterpret_cast<uint64_t>(attr.send_ring_memory.data()));
    w.u64(attr.send_ring_memory.size());
    w.u64(reinterpret_cast<uint64_t>(attr.recv_ring_memory.data()));
    w.u64(attr.recv_ring_memory.size());
    std::vector<uint8_t> reply;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kCreateQp, w, &reply));
    proto::Reader r(reply.data(), reply.size());
    nic::detail::QpView v;
    v.qpn = r.u32();
    v.handle = v.qpn;
    v.pd = pd;
    v.sq_depth = r.u32();
    v.sq_stride = r.u32();
    v.rq_depth = r.u32();
    v.rq_stride = r.u32();
    v.cap.max_send_wr = r.u32();
    v.cap.max_recv_wr = r.u32();
    v.cap.max_send_sge = r.u32();
    v.cap.max_recv_sge = r.u32();
    v.cap.max_inline_data = r.u32();
    const uint64_t rec = r.u64();
    const uint64_t marks = r.u64();
    const bool sq_in_arena = r.u32() != 0;
    const uint64_t sq = r.u64();
    const bool rq_in_arena = r.u32() != 0;
    const uint64_t rq = r.u64();
    const uint64_t sq_bytes = static_cast<uint64_t>(v.sq_depth) * v.sq_stride;
    const uint64_t rq_bytes = static_cast<uint64_t>(v.rq_depth) * v.rq_stride;
    if (!r.ok() || !in_arena(rec, sizeof(nic::detail::QpRecord)) ||
        !in_arena(marks, static_cast<uint64_t>(v.sq_depth) * sizeof(nic::detail::FreeMark)) ||
        (sq_in_arena && !in_arena(sq, sq_bytes)) || (rq_in_arena && !in_arena(rq, rq_bytes))) {
      return internal_error("nicd: malformed CREATE_QP reply");
    }
    v.rec = reinterpret_cast<nic::detail::QpRecord*>(arena_ + rec);
    v.free_marks = reinterpret_cast<nic::detail::FreeMark*>(arena_ + marks);
    v.free_marks_size = v.sq_depth;
    v.sq_ring = sq_in_arena ? arena_ + sq : attr.send_ring_memory.data();
    v.rq_ring = rq_in_arena ? arena_ + rq : (srq != 0 ? nullptr : attr.recv_ring_memory.data());
    v.has_srq = srq != 0;
    v.managed_send = attr.managed_send;
    v.managed_recv = attr.managed_recv;
    v.cross_channel = attr.cross_channel;
    return v;
  }
  void destroy_qp(uint64_t qp) override { destroy(proto::Op::kDestroyQp, qp); }
  Status modify_qp(uint64_t qp, const nic::QpAttr& a, uint32_t mask) override {
    proto::Writer w;
    w.u32(static_cast<uint32_t>(qp));
    w.u32(mask);
    proto::put_qp_attr(w, a);
    return simple(proto::Op::kModifyQp, w);
  }
  Result<nic::QpAttr> query_qp(uint64_t qp) override {
    proto::Writer w;
    w.u32(static_cast<uint32_t>(qp));
    std::vector<uint8_t> reply;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kQueryQp, w, &reply));
    proto::Reader r(reply.data(), reply.size());
    const nic::QpAttr a = proto::get_qp_attr(r);
    if (!r.ok()) return internal_error("nicd: malformed QUERY_QP reply");
    return a;
  }
  Result<nic::QpTraffic> qp_traffic(uint64_t qp) override {
    proto::Writer w;
    w.u32(static_cast<uint32_t>(qp));
    std::vector<uint8_t> reply;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kQpTraffic, w, &reply));
    proto::Reader r(reply.data(), reply.size());
    nic::QpTraffic t;
    r.raw_into(&t, sizeof(t));
    if (!r.ok()) return internal_error("nicd: malformed QP_TRAFFIC reply");
    return t;
  }

  void ring_doorbell(uint32_t qpn) override {
    // One QP is queued at most once and a client holds fewer QPs than the
    // ring has cells: a full ring means the daemon stopped draining it.
    if (!doorbells_->push(qpn)) return;
    // The engine stores *parked_ (seq_cst) before its last look at the ring.
    if (parked_->load(std::memory_order_seq_cst)) {
      const uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof(one));
    }
  }

 private:
  bool in_arena(uint64_t offset, uint64_t bytes) const {
    return bytes <= arena_bytes_ && offset <= arena_bytes_ - bytes;
  }

  Status counters_into(nic::NicCounters* n, nic::UdpCounters* u) {
    proto::Writer w;
    std::vector<uint8_t> reply;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kCounters, w, &reply));
    proto::Reader r(reply.data(), reply.size());
    nic::NicCounters nc;
    nic::UdpCounters uc;
    r.raw_into(&nc, sizeof(nc));
    r.raw_into(&uc, sizeof(uc));
    if (!r.ok()) return internal_error("nicd: malformed COUNTERS reply");
    if (n) *n = nc;
    if (u) *u = uc;
    return ok_status();
  }

  // Makes sure the daemon maps the SharedMemory holding [addr, addr+length).
  Status ensure_shared(uint64_t addr, uint64_t length, const char* what) {
    if (addr >= reinterpret_cast<uint64_t>(arena_) && length <= arena_bytes_ &&
        addr - reinterpret_cast<uint64_t>(arena_) <= arena_bytes_ - length) {
      return ok_status();  // a ring or record of this client's own
    }
    const std::optional<nic::detail::SharedMapping> found = nic::detail::find_shared_mapping(addr, length);
    if (!found) {
      return invalid_argument(std::string(what) +
                              ": the memory is not in a mapping the NIC daemon can reach; allocate it with "
                              "nic::SharedMemory::create (or map a file with SharedMemory::map_file)");
    }
    const nic::detail::SharedMapping& m = *found;
    std::lock_guard<std::mutex> lock(segments_mu_);
    if (segments_.count(m.id) != 0) return ok_status();
    // The daemon still maps the segments of SharedMemory this process has
    // destroyed since; a new mapping may reuse their addresses. Drop them
    // first (the daemon refuses while an MR still reaches into one).
    for (auto it = segments_.begin(); it != segments_.end();) {
      if (nic::detail::shared_mapping_alive(it->first)) {
        ++it;
        continue;
      }
      proto::Writer rm;
      rm.u32(it->second);
      (void)simple(proto::Op::kRemoveMemory, rm);
      it = segments_.erase(it);
    }
    proto::Writer w;
    w.u64(reinterpret_cast<uint64_t>(m.base));
    w.u64(m.size);
    w.u64(0);
    std::vector<uint8_t> reply;
    int fd = m.fd;
    FERRY_RETURN_IF_ERROR(request(proto::Op::kAddMemory, w, &reply, nullptr, 0, nullptr, &fd, 1));
    proto::Reader r(reply.data(), reply.size());
    segments_[m.id] = r.u32();
    return ok_status();
  }

  void destroy(proto::Op op, uint64_t handle) {
    proto::Writer w;
    w.u32(static_cast<uint32_t>(handle));
    (void)simple(op, w);
  }

  Status simple(proto::Op op, const proto::Writer& w) {
    std::vector<uint8_t> reply;
    return request(op, w, &reply);
  }

  // One request and its reply; on success *reply holds the reply's fields
  // (after the status).
  Status request(proto::Op op, const proto::Writer& w, std::vector<uint8_t>* reply, int* fds = nullptr,
                 size_t max_fds = 0, size_t* nfds = nullptr, const int* send_fds = nullptr, size_t send_nfds = 0) {
    size_t got = 0;
    int scratch[4];
    FERRY_RETURN_IF_ERROR(call(op, w, reply, fds ? fds : scratch, fds ? max_fds : 4, &got, send_fds, send_nfds));
    if (nfds != nullptr) *nfds = got;
    if (fds == nullptr) {
      for (size_t i = 0; i < got; ++i) close(scratch[i]);
    }
    proto::Reader r(reply->data(), reply->size());
    const Status st = proto::get_status(r);
    if (!st.ok()) {
      if (fds != nullptr) {
        for (size_t i = 0; i < got; ++i) close(fds[i]);
        if (nfds != nullptr) *nfds = 0;
      }
      return st;
    }
    reply->erase(reply->begin(), reply->begin() + static_cast<std::ptrdiff_t>(r.offset()));
    return ok_status();
  }

  Status call(proto::Op op, const proto::Writer& w, std::vector<uint8_t>* reply, int* fds, size_t max_fds,
              size_t* nfds, const int* send_fds = nullptr, size_t send_nfds = 0) {
    if (dead()) return fatal_status();
    std::lock_guard<std::mutex> lock(call_mu_);
    const uint32_t seq = ++seq_;
    if (!proto::send_message(sock_, proto::frame(static_cast<uint16_t>(op), seq, w), send_fds, send_nfds)) {
      declare_dead();
      return fatal_status();
    }
    pollfd pfd{sock_, POLLIN, 0};
    const int rc = ::poll(&pfd, 1, timeout_ms_);
    if (rc == 0) return timed_out("nicd: no reply to " + std::string(proto::op_name(op)) + " within " +
                                  std::to_string(timeout_ms_) + " ms");
    std::vector<uint8_t> buf(proto::kMaxMessageBytes);
    const ssize_t n = proto::recv_message(sock_, buf.data(), buf.size(), fds, max_fds, nfds);
    proto::Header h;
    if (n <= 0 || static_cast<size_t>(n) > buf.size() || !proto::parse_header(buf.data(), static_cast<size_t>(n), &h) ||
        h.seq != seq || h.op != (static_cast<uint16_t>(op) | proto::kResponseBit)) {
      for (size_t i = 0; i < *nfds; ++i) close(fds[i]);
      *nfds = 0;
      declare_dead();
      return fatal_status();
    }
    reply->assign(buf.begin() + sizeof(proto::Header), buf.begin() + n);
    return ok_status();
  }

  // Watches the socket: its hangup is the daemon's death.
  void monitor() {
    pollfd fds[2] = {{sock_, 0, 0}, {stop_fd_, POLLIN, 0}};
    for (;;) {
      fds[0].revents = fds[1].revents = 0;
      const int rc = ::poll(fds, 2, -1);
      if (rc < 0 && errno == EINTR) continue;
      if (fds[1].revents & POLLIN) return;
      if (fds[0].revents & (POLLHUP | POLLERR)) {
        declare_dead();
        return;
      }
    }
  }

  void declare_dead() {
    if (dead_.exchange(true, std::memory_order_acq_rel)) return;
    // Wake whoever sleeps on a completion channel: get_event reports the death.
    std::lock_guard<std::mutex> lock(channels_mu_);
    const uint64_t one = 1;
    for (int fd : channel_fds_) (void)!write(fd, &one, sizeof(one));
  }

  int sock_ = -1;
  int wake_fd_ = -1;
  int stop_fd_ = -1;
  int timeout_ms_ = 5000;
  uint32_t address_ = 0;
  nic::Gid gid_;
  std::optional<nic::UdpEndpoint> udp_;
  uint32_t max_mtu_ = 4096;
  std::string name_;
  uint8_t* arena_ = nullptr;
  uint64_t arena_bytes_ = 0;
  uint8_t* page_ = nullptr;
  std::atomic<bool>* parked_ = nullptr;
  nic::detail::DoorbellRing* doorbells_ = nullptr;
  std::mutex call_mu_;
  uint32_t seq_ = 0;
  std::mutex segments_mu_;
  std::map<uint64_t, uint32_t> segments_;  // SharedMemory id -> daemon segment
  std::mutex channels_mu_;
  std::vector<int> channel_fds_;
  std::atomic<bool> fatal_reported_{false};
  std::thread monitor_;
};

}  // namespace

// ---- Device -------------------------------------------------------------------

Result<std::unique_ptr<Device>> Device::open(const OpenOptions& options) {
  auto client = std::make_unique<Client>();
  FERRY_RETURN_IF_ERROR(client->open(options));
  return std::unique_ptr<Device>(new Device(std::make_unique<nic::Nic>(std::move(client))));
}

Device::Device(std::unique_ptr<nic::Nic> nic) : nic_(std::move(nic)) {}
Device::~Device() = default;
nic::Nic& Device::nic() { return *nic_; }

}  // namespace ferry::nicd
