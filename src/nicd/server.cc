// The NIC daemon's request handling: every control operation of its clients,
// checked, run on the engine, and their release when they go.
#include "server.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

namespace ferry::nicd {

namespace {
// Whether `fd` is an anonymous memory file (memfd_create): its /proc link
// reads "/memfd:<name> (deleted)".
bool is_memfd(int fd) {
  char link[64];
  char target[256];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof target - 1);
  return n >= 7 && std::memcmp(target, "/memfd:", 7) == 0;
}
}  // namespace

using proto::Op;

// ---- Arena ------------------------------------------------------------------

Result<std::unique_ptr<Arena>> Arena::create(size_t bytes) {
  bytes = (bytes + 4095) & ~size_t{4095};
  if (bytes == 0) return invalid_argument("arena: zero size");
  std::unique_ptr<Arena> a(new Arena());
  a->fd_ = memfd_create("ferry-nicd-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (a->fd_ < 0) return unavailable(std::string("arena: memfd_create: ") + std::strerror(errno));
  if (ftruncate(a->fd_, static_cast<off_t>(bytes)) != 0) {
    return resource_exhausted(std::string("arena: ftruncate: ") + std::strerror(errno));
  }
  // The client must not be able to shrink it under the daemon (SIGBUS).
  (void)fcntl(a->fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd_, 0);
  if (p == MAP_FAILED) return resource_exhausted(std::string("arena: mmap: ") + std::strerror(errno));
  a->base_ = static_cast<uint8_t*>(p);
  a->size_ = bytes;
  a->free_[0] = bytes;
  return a;
}

Arena::~Arena() {
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

uint8_t* Arena::allocate(size_t bytes) {
  bytes = (bytes + 4095) & ~size_t{4095};
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const size_t offset = it->first;
    const size_t left = it->second - bytes;
    free_.erase(it);
    if (left != 0) free_[offset + bytes] = left;
    std::memset(base_ + offset, 0, bytes);
    return base_ + offset;
  }
  return nullptr;
}

void Arena::release(uint8_t* ptr, size_t bytes) {
  bytes = (bytes + 4095) & ~size_t{4095};
  size_t offset = static_cast<size_t>(ptr - base_);
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      bytes += prev->second;
      free_.erase(prev);
    }
  }
  free_[offset] = bytes;
}

// ---- Server -----------------------------------------------------------------

Server::Server(nic::Engine* engine, nic::Nic* nic, size_t arena_bytes, int device_page_fd)
    : engine_(engine), nic_(nic), hosting_(*nic), arena_bytes_(arena_bytes), device_page_fd_(device_page_fd) {}

Server::~Server() {
  while (!clients_.empty()) release(clients_.back().get());
}

Client* Server::add_client(int sock) {
  auto c = std::make_unique<Client>();
  c->id = next_client_++;
  c->sock = sock;
  Client* raw = c.get();
  std::lock_guard<std::mutex> lock(mu_);
  clients_.push_back(std::move(c));
  return raw;
}

size_t Server::clients() const {
  std::lock_guard<std::mutex> lock(mu_);
  return clients_.size();
}

uint64_t Server::released() const {
  std::lock_guard<std::mutex> lock(mu_);
  return released_;
}

Server::Census Server::census() const {
  std::lock_guard<std::mutex> lock(mu_);
  Census n;
  for (const auto& c : clients_) {
    n.qps += c->qps.size();
    n.cqs += c->cqs.size();
    n.srqs += c->srqs.size();
    n.mrs += c->mrs.size();
    n.segments += c->segments.size();
  }
  return n;
}

void Server::release(Client* c) {
  std::unique_ptr<Client> owned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(clients_.begin(), clients_.end(), [c](const auto& p) { return p.get() == c; });
    if (it == clients_.end()) return;
    owned = std::move(*it);
    clients_.erase(it);
  }
  // As a hardware device does when its process dies: its QPs stop (to
  // ERROR, flushing, so a peer sees no more answers), then every object it
  // held goes, so nothing the NIC does afterwards touches its memory.
  run([&] {
    hosting_.detach_doorbells(c->id);
    for (uint32_t qpn : c->qps) hosting_.force_error(qpn);
    for (uint32_t qpn : c->qps) hosting_.destroy_qp(qpn);
    for (uint32_t n : c->srqs) hosting_.destroy_srq(n);
    for (uint32_t n : c->cqs) hosting_.destroy_cq(n);
    c->channels.clear();
    for (uint32_t key : c->mrs) hosting_.dereg_mr(key);
    for (uint32_t pd : c->pds) hosting_.dealloc_pd(pd);
  });
  for (const Segment& s : c->segments) {
    if (!s.arena) munmap(s.daemon_base - s.map_offset, s.length + s.map_offset);
  }
  owned->arena.reset();
  if (c->sock >= 0) close(c->sock);
  // Counted only now: a caller that waits for the count (tests, status) must
  // find the client's QPs gone from the engine, not just from the list.
  std::lock_guard<std::mutex> lock(mu_);
  ++released_;
}

void Server::remember(std::set<uint32_t>& objects, uint32_t number) {
  std::lock_guard<std::mutex> lock(mu_);
  objects.insert(number);
}

Result<uint8_t*> Server::translate(const Client& c, uint64_t addr, uint64_t length) const {
  for (const Segment& s : c.segments) {
    if (addr >= s.client_base && length <= s.length && addr - s.client_base <= s.length - length) {
      return s.daemon_base + (addr - s.client_base);
    }
  }
  return invalid_argument("[" + std::to_string(addr) + ", +" + std::to_string(length) +
                          ") is not inside memory shared with the NIC daemon (nic::SharedMemory)");
}

void Server::route_async_events() {
  while (auto ev = hosting_.pop_async_event()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : clients_) {
      bool mine = false;
      switch (ev->type) {
        case nic::AsyncEventType::kCqError: mine = c->cqs.count(ev->number) != 0; break;
        case nic::AsyncEventType::kSrqLimitReached: mine = c->srqs.count(ev->number) != 0; break;
        default: mine = c->qps.count(ev->number) != 0; break;
      }
      if (mine) {
        if (c->events.size() < 4096) c->events.push_back(*ev);
        break;
      }
    }
  }
}

Reply Server::handle(Client* client, const uint8_t* msg, size_t len, std::vector<int> fds) {
  Reply reply;
  proto::Header h;
  if (!proto::parse_header(msg, len, &h) || (h.op & proto::kResponseBit) || h.op == 0 ||
      h.op >= static_cast<uint16_t>(Op::kEnd)) {
    for (int fd : fds) close(fd);
    reply.drop = true;
    return reply;
  }
  const Op op = static_cast<Op>(h.op);
  proto::Reader r(msg + sizeof(proto::Header), h.body_bytes);
  proto::Writer out;
  Status status;
  if (!client->hello_done && op != Op::kHello) {
    status = failed_precondition("nicd: HELLO first");
  } else {
    status = dispatch(*client, op, r, fds, out, reply);
    if (status.ok() && (!r.ok() || !r.at_end())) status = invalid_argument(std::string("nicd: malformed ") +
                                                                           std::string(proto::op_name(op)));
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);  // descriptors the operation did not keep
  }
  proto::Writer body;
  proto::put_status(body, status);
  if (status.ok()) body.raw(out.bytes().data(), out.bytes().size());
  if (!status.ok()) {
    // Nothing of a failed operation is sent.
    reply.fds.clear();
  }
  reply.bytes = proto::frame(static_cast<uint16_t>(h.op | proto::kResponseBit), h.seq, body);
  return reply;
}

Status Server::dispatch(Client& c, Op op, proto::Reader& r, std::vector<int>& fds, proto::Writer& out, Reply& reply) {
  auto take_fd = [&fds]() {
    if (fds.empty()) return -1;
    const int fd = fds.front();
    fds.erase(fds.begin());
    return fd;
  };
  auto offset_of = [&c](const void* p) { return static_cast<uint64_t>(static_cast<const uint8_t*>(p) - c.arena->base()); };
  switch (op) {
    case Op::kHello: {
      const uint32_t version = r.u32();
      c.name = r.str(256);
      if (!r.ok()) return invalid_argument("nicd: malformed HELLO");
      if (c.hello_done) return failed_precondition("nicd: HELLO twice");
      if (version != proto::kVersion) {
        return failed_precondition("nicd: protocol version " + std::to_string(version) + ", the daemon speaks " +
                                   std::to_string(proto::kVersion));
      }
      FERRY_ASSIGN_OR_RETURN(c.arena, Arena::create(arena_bytes_));
      uint8_t* ring = nullptr;
      run([&] { ring = c.arena->allocate(sizeof(nic::detail::DoorbellRing)); });
      if (ring == nullptr) return resource_exhausted("nicd: arena too small for the doorbell ring");
      c.doorbells = new (ring) nic::detail::DoorbellRing();
      c.doorbells->init();
      run([&] { hosting_.attach_doorbells(c.doorbells, c.id); });
      c.hello_done = true;
      out.u32(c.id);
      out.u32(nic_->address());
      const nic::Gid gid = nic_->gid();
      out.raw(gid.raw.data(), gid.raw.size());
      const auto ep = nic_->udp_endpoint();
      out.u32(ep.has_value() ? 1 : 0);
      out.u32(ep ? ep->ipv4 : 0);
      out.u32(ep ? ep->port : 0);
      out.u32(nic_->max_path_mtu());
      out.str(nic_->name());
      out.u64(c.arena->size());
      out.u64(offset_of(ring));
      reply.fds = {c.arena->fd(), device_page_fd_, engine_->wake_fd()};
      return ok_status();
    }
    case Op::kArenaMapped: {
      const uint64_t base = r.u64();
      if (!r.ok()) return invalid_argument("nicd: malformed ARENA_MAPPED");
      for (const Segment& s : c.segments) {
        if (s.arena) return failed_precondition("nicd: arena already mapped");
      }
      if (base + c.arena->size() < base) return invalid_argument("nicd: arena address wraps");
      Segment s;
      s.id = c.next_segment++;
      s.client_base = base;
      s.length = c.arena->size();
      s.daemon_base = c.arena->base();
      s.arena = true;
      c.segments.push_back(s);
      return ok_status();
    }
    case Op::kAddMemory: {
      const uint64_t base = r.u64();
      const uint64_t length = r.u64();
      const uint64_t offset = r.u64();
      const int fd = take_fd();
      if (!r.ok() || fd < 0) {
        if (fd >= 0) close(fd);
        return invalid_argument("nicd: ADD_MEMORY needs an address, a length, an offset and a descriptor");
      }
      struct stat st{};
      Status bad;
      if (length == 0 || length > (1ull << 40) || base + length < base || offset > (1ull << 62)) {
        bad = invalid_argument("nicd: ADD_MEMORY: bad range");
      } else if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < offset + length) {
        bad = invalid_argument("nicd: ADD_MEMORY: the file is shorter than offset + length");
      } else {
        // An anonymous memory file (memfd) must be sealed against shrinking,
        // or the client could make the daemon's DMA fault (SIGBUS). A named
        // file (a PM file on a DAX or tmpfs mount) cannot be sealed; it is
        // trusted not to be truncated while registered (docs/nicd.md).
        const int seals = fcntl(fd, F_GET_SEALS);
        if (is_memfd(fd) && (seals < 0 || !(seals & F_SEAL_SHRINK))) {
          bad = invalid_argument("nicd: ADD_MEMORY: memfd not sealed against shrinking (F_SEAL_SHRINK)");
        }
      }
      if (!bad.ok()) {
        close(fd);
        return bad;
      }
      for (const Segment& s : c.segments) {
        if (base < s.client_base + s.length && s.client_base < base + length) {
          close(fd);
          return already_exists("nicd: ADD_MEMORY: overlaps segment " + std::to_string(s.id));
        }
      }
      const uint64_t aligned = offset & ~uint64_t{4095};
      const size_t map_offset = static_cast<size_t>(offset - aligned);
      void* p = mmap(nullptr, length + map_offset, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(aligned));
      close(fd);
      if (p == MAP_FAILED) return resource_exhausted(std::string("nicd: ADD_MEMORY: mmap: ") + std::strerror(errno));
      Segment s;
      s.id = c.next_segment++;
      s.client_base = base;
      s.length = length;
      s.daemon_base = static_cast<uint8_t*>(p) + map_offset;
      s.map_offset = map_offset;
      {
        std::lock_guard<std::mutex> lock(mu_);
        c.segments.push_back(s);
      }
      out.u32(s.id);
      return ok_status();
    }
    case Op::kRemoveMemory: {
      const uint32_t id = r.u32();
      auto it = std::find_if(c.segments.begin(), c.segments.end(), [id](const Segment& s) { return s.id == id && !s.arena; });
      if (!r.ok() || it == c.segments.end()) return not_found("nicd: no such segment");
      // No MR may still reach into it.
      bool used = false;
      run([&] {
        for (uint32_t key : c.mrs) {
          const uint8_t* base = hosting_.mr_base(key);
          if (base != nullptr && base >= it->daemon_base && base < it->daemon_base + it->length) used = true;
        }
      });
      if (used) return failed_precondition("nicd: segment still has registered memory regions");
      munmap(it->daemon_base - it->map_offset, it->length + it->map_offset);
      std::lock_guard<std::mutex> lock(mu_);
      c.segments.erase(it);
      return ok_status();
    }
    case Op::kAllocPd: {
      uint32_t pd = 0;
      run([&] { pd = hosting_.alloc_pd(); });
      c.pds.insert(pd);
      out.u32(pd);
      return ok_status();
    }
    case Op::kDeallocPd: {
      const uint32_t pd = r.u32();
      if (!r.ok() || c.pds.count(pd) == 0) return not_found("nicd: no such protection domain");
      uint32_t refs = 0;
      run([&] { refs = hosting_.pd_refs(pd); });
      if (refs != 0) return failed_precondition("nicd: protection domain still used by MRs, QPs or SRQs");
      run([&] { hosting_.dealloc_pd(pd); });
      c.pds.erase(pd);
      return ok_status();
    }
    case Op::kRegMr: {
      const uint32_t pd = r.u32();
      const uint64_t addr = r.u64();
      const uint64_t length = r.u64();
      const uint32_t access = r.u32();
      if (!r.ok()) return invalid_argument("nicd: malformed REG_MR");
      if (c.pds.count(pd) == 0) return invalid_argument("reg_mr: no such protection domain");
      FERRY_ASSIGN_OR_RETURN(uint8_t* host, translate(c, addr, length));
      Result<uint32_t> key = internal_error("unset");
      run([&] { key = hosting_.reg_mr(pd, host, length, access, addr); });
      if (!key.ok()) return key.status();
      remember(c.mrs, key.value());
      out.u32(key.value());
      return ok_status();
    }
    case Op::kDeregMr: {
      const uint32_t key = r.u32();
      if (!r.ok() || c.mrs.count(key) == 0) return not_found("nicd: no such memory region");
      run([&] { hosting_.dereg_mr(key); });
      std::lock_guard<std::mutex> lock(mu_);
      c.mrs.erase(key);
      return ok_status();
    }
    case Op::kCreateChannel: {
      Result<std::unique_ptr<nic::detail::HostedChannel>> ch = internal_error("unset");
      run([&] { ch = hosting_.create_channel(c.arena.get()); });
      if (!ch.ok()) return Status(ch.status().code(), "nicd: " + ch.status().message());
      const uint32_t handle = c.next_channel++;
      out.u32(handle);
      out.u64(offset_of(ch.value()->record()));
      reply.fds = {ch.value()->event_fd()};
      c.channels[handle] = std::move(ch).value();
      return ok_status();
    }
    case Op::kDestroyChannel: {
      const uint32_t handle = r.u32();
      auto it = c.channels.find(handle);
      if (!r.ok() || it == c.channels.end()) return not_found("nicd: no such completion channel");
      run([&] {
        hosting_.detach_channel(*it->second);
        c.channels.erase(it);
      });
      return ok_status();
    }
    case Op::kCreateCq: {
      nic::CqInitAttr attr;
      attr.cqe = r.u32();
      attr.count_only = r.u32() != 0;
      const uint32_t channel = r.u32();
      if (!r.ok()) return invalid_argument("nicd: malformed CREATE_CQ");
      nic::detail::HostedChannel* ch = nullptr;
      if (channel != 0) {
        auto it = c.channels.find(channel);
        if (it == c.channels.end()) return not_found("create_cq: no such completion channel");
        ch = it->second.get();
      }
      Result<nic::detail::HostedCq> cq = internal_error("unset");
      run([&] { cq = hosting_.create_cq(attr, ch, c.arena.get(), c.id); });
      if (!cq.ok()) return cq.status();
      remember(c.cqs, cq->number);
      out.u32(cq->number);
      out.u32(cq->depth);
      out.u64(offset_of(cq->record));
      out.u64(cq->ring ? offset_of(cq->ring) : 0);
      return ok_status();
    }
    case Op::kDestroyCq: {
      const uint32_t n = r.u32();
      if (!r.ok() || c.cqs.count(n) == 0) return not_found("nicd: no such CQ");
      Status st;
      run([&] {
        if (hosting_.cq_users(n) != 0) {
          st = failed_precondition("destroy_cq: QPs still use CQ " + std::to_string(n));
          return;
        }
        hosting_.destroy_cq(n);
      });
      if (!st.ok()) return st;
      std::lock_guard<std::mutex> lock(mu_);
      c.cqs.erase(n);
      return ok_status();
    }
    case Op::kCreateSrq: {
      const uint32_t pd = r.u32();
      nic::SrqInitAttr attr;
      attr.max_wr = r.u32();
      attr.max_sge = r.u32();
      attr.srq_limit = r.u32();
      attr.mp_strides = r.u32();
      attr.mp_stride_bytes = r.u32();
      attr.mp_max_message_bytes = r.u32();
      const uint64_t ring_addr = r.u64();
      const uint64_t ring_len = r.u64();
      if (!r.ok()) return invalid_argument("nicd: malformed CREATE_SRQ");
      if (c.pds.count(pd) == 0) return invalid_argument("create_srq: no such protection domain");
      if (ring_len != 0) {
        FERRY_ASSIGN_OR_RETURN(uint8_t* ring, translate(c, ring_addr, ring_len));
        attr.ring_memory = std::span<uint8_t>(ring, ring_len);
      }
      Result<nic::detail::HostedSrq> srq = internal_error("unset");
      run([&] { srq = hosting_.create_srq(pd, attr, c.arena.get(), c.id); });
      if (!srq.ok()) return srq.status();
      const nic::detail::HostedSrq& s = srq.value();
      remember(c.srqs, s.number);
      out.u32(s.number);
      out.u32(s.depth);
      out.u32(s.stride);
      out.u32(s.max_sge);
      out.u32(s.mp_strides);
      out.u32(s.mp_stride_bytes);
      out.u64(offset_of(s.record));
      out.u32(ring_len == 0 ? 1 : 0);
      out.u64(ring_len == 0 ? offset_of(s.ring) : 0);
      return ok_status();
    }
    case Op::kDestroySrq: {
      const uint32_t n = r.u32();
      if (!r.ok() || c.srqs.count(n) == 0) return not_found("nicd: no such SRQ");
      Status st;
      run([&] {
        if (hosting_.srq_users(n) != 0) {
          st = failed_precondition("destroy_srq: QPs are still attached to SRQ " + std::to_string(n));
          return;
        }
        hosting_.destroy_srq(n);
      });
      if (!st.ok()) return st;
      std::lock_guard<std::mutex> lock(mu_);
      c.srqs.erase(n);
      return ok_status();
    }
    case Op::kCreateQp: {
      const uint32_t pd = r.u32();
      nic::QpInitAttr attr;
      attr.cap.max_send_wr = r.u32();
      attr.cap.max_recv_wr = r.u32();
      attr.cap.max_send_sge = r.u32();
      attr.cap.max_recv_sge = r.u32();
      attr.cap.max_inline_data = r.u32();
      attr.sq_sig_all = r.u32() != 0;
      attr.managed_send = r.u32() != 0;
      attr.managed_recv = r.u32() != 0;
      attr.cross_channel = r.u32() != 0;
      const uint32_t send_cq = r.u32();
      const uint32_t recv_cq = r.u32();
      const uint32_t srq_number = r.u32();
      const uint64_t sq_addr = r.u64();
      const uint64_t sq_len = r.u64();
      const uint64_t rq_addr = r.u64();
      const uint64_t rq_len = r.u64();
      if (!r.ok()) return invalid_argument("nicd: malformed CREATE_QP");
      if (c.pds.count(pd) == 0) return invalid_argument("create_qp: no such protection domain");
      if (c.cqs.count(send_cq) == 0 || c.cqs.count(recv_cq) == 0) return invalid_argument("create_qp: no such CQ");
      if (srq_number != 0 && c.srqs.count(srq_number) == 0) return invalid_argument("create_qp: no such SRQ");
      if (srq_number != 0 && attr.managed_recv) {
        return invalid_argument("create_qp: a managed receive queue cannot use an SRQ");
      }
      if (sq_len != 0) {
        FERRY_ASSIGN_OR_RETURN(uint8_t* ring, translate(c, sq_addr, sq_len));
        attr.send_ring_memory = std::span<uint8_t>(ring, sq_len);
      }
      if (rq_len != 0) {
        FERRY_ASSIGN_OR_RETURN(uint8_t* ring, translate(c, rq_addr, rq_len));
        attr.recv_ring_memory = std::span<uint8_t>(ring, rq_len);
      }
      Result<nic::detail::HostedQp> qp = internal_error("unset");
      run([&] { qp = hosting_.create_qp(pd, attr, send_cq, recv_cq, srq_number, c.arena.get(), c.id); });
      if (!qp.ok()) return qp.status();
      const nic::detail::HostedQp& q = qp.value();
      remember(c.qps, q.qpn);
      out.u32(q.qpn);
      out.u32(q.sq_depth);
      out.u32(q.sq_stride);
      out.u32(q.rq_depth);
      out.u32(q.rq_stride);
      out.u32(q.cap.max_send_wr);
      out.u32(q.cap.max_recv_wr);
      out.u32(q.cap.max_send_sge);
      out.u32(q.cap.max_recv_sge);
      out.u32(q.cap.max_inline_data);
      out.u64(offset_of(q.record));
      out.u64(offset_of(q.free_marks));
      out.u32(sq_len == 0 ? 1 : 0);
      out.u64(sq_len == 0 ? offset_of(q.sq_ring) : 0);
      const bool rq_in_arena = q.rq_ring != nullptr && rq_len == 0;
      out.u32(rq_in_arena ? 1 : 0);
      out.u64(rq_in_arena ? offset_of(q.rq_ring) : 0);
      return ok_status();
    }
    case Op::kDestroyQp: {
      const uint32_t qpn = r.u32();
      if (!r.ok() || c.qps.count(qpn) == 0) return not_found("nicd: no such QP");
      run([&] { hosting_.destroy_qp(qpn); });
      std::lock_guard<std::mutex> lock(mu_);
      c.qps.erase(qpn);
      return ok_status();
    }
    case Op::kModifyQp: {
      const uint32_t qpn = r.u32();
      const uint32_t mask = r.u32();
      const nic::QpAttr attr = proto::get_qp_attr(r);
      if (!r.ok()) return invalid_argument("nicd: malformed MODIFY_QP");
      if (c.qps.count(qpn) == 0) return not_found("nicd: no such QP");
      Status st;
      run([&] { st = hosting_.modify_qp(qpn, attr, mask); });
      return st;
    }
    case Op::kQueryQp: {
      const uint32_t qpn = r.u32();
      if (!r.ok() || c.qps.count(qpn) == 0) return not_found("nicd: no such QP");
      Result<nic::QpAttr> attr = internal_error("unset");
      run([&] { attr = hosting_.query_qp(qpn); });
      if (!attr.ok()) return attr.status();
      proto::put_qp_attr(out, attr.value());
      return ok_status();
    }
    case Op::kQpTraffic: {
      const uint32_t qpn = r.u32();
      if (!r.ok() || c.qps.count(qpn) == 0) return not_found("nicd: no such QP");
      Result<nic::QpTraffic> t = internal_error("unset");
      run([&] { t = hosting_.qp_traffic(qpn); });
      if (!t.ok()) return t.status();
      out.raw(&t.value(), sizeof(nic::QpTraffic));
      return ok_status();
    }
    case Op::kPollAsyncEvent: {
      route_async_events();
      std::lock_guard<std::mutex> lock(mu_);
      if (c.events.empty()) {
        out.u32(0);
        out.u32(0);
        out.u32(0);
      } else {
        out.u32(1);
        out.u32(static_cast<uint32_t>(c.events.front().type));
        out.u32(c.events.front().number);
        c.events.pop_front();
      }
      return ok_status();
    }
    case Op::kCounters: {
      const nic::NicCounters n = nic_->counters();
      const nic::UdpCounters u = nic_->udp_counters();
      out.raw(&n, sizeof(n));
      out.raw(&u, sizeof(u));
      return ok_status();
    }
    case Op::kResolve: {
      nic::UdpEndpoint ep;
      ep.ipv4 = r.u32();
      const uint32_t port = r.u32();
      if (!r.ok() || port > 65535) return invalid_argument("nicd: malformed RESOLVE");
      ep.port = static_cast<uint16_t>(port);
      FERRY_ASSIGN_OR_RETURN(uint32_t address, engine_->resolve(ep));
      out.u32(address);
      return ok_status();
    }
    case Op::kEnd:
      break;
  }
  return invalid_argument("nicd: unknown operation");
}

}  // namespace ferry::nicd
