// In-process fabric with a seeded fault model (see fabric.h).
#include "ferry/nic/fabric.h"

#include <algorithm>
#include <cstring>

#include "nic_core.h"
#include "udp_transport.h"

namespace ferry::nic {

namespace {
size_t round_pow2(size_t v) {
  size_t r = 2;
  while (r < v) r <<= 1;
  return r;
}
// Min-heap on (due_ns, seq): std heap functions build max-heaps, so invert.
bool later(const Packet& a, const Packet& b) { return a.due_ns != b.due_ns ? a.due_ns > b.due_ns : a.seq > b.seq; }
}  // namespace

Fabric::Fabric(size_t inbound_capacity, size_t buffer_count, const FaultModel& faults, uint64_t wire_delay_ns)
    : inbound_capacity_(round_pow2(std::max<size_t>(inbound_capacity, 16))),
      request_high_water_(inbound_capacity_ * 3 / 4),
      response_high_water_(inbound_capacity_ * 7 / 8),
      faults_(faults),
      wire_delay_ns_(wire_delay_ns),
      rng_(faults.seed) {
  buffer_memory_.resize(buffer_count * kBufferBytes);
  free_buffers_.reserve(buffer_count);
  for (size_t i = buffer_count; i > 0; --i) free_buffers_.push_back(static_cast<int32_t>(i - 1));
  delayed_.reserve(inbound_capacity_);
}

Fabric::~Fabric() = default;

uint32_t Fabric::attach(detail::NicCore* nic) {
  FERRY_ASSERT(nics_.size() < kRemoteAddressBase, "too many NICs");
  nics_.push_back(nic);
  queues_.emplace_back();
  queues_.back().ring.resize(inbound_capacity_);
  held_.push_back(0);
  ports_.emplace_back();
  return static_cast<uint32_t>(nics_.size() - 1);
}

void Fabric::set_faults(const FaultModel& faults) {
  faults_ = faults;
  rng_.reseed(faults.seed);
}

bool Fabric::request_space(uint32_t dst) const {
  return dst >= queues_.size() || occupancy(dst) < request_high_water_;
}

bool Fabric::response_space(uint32_t dst) const {
  return dst >= queues_.size() || occupancy(dst) < response_high_water_;
}

uint8_t* Fabric::alloc_buffer(int32_t* index) {
  if (free_buffers_.empty()) return nullptr;
  *index = free_buffers_.back();
  free_buffers_.pop_back();
  return buffer_memory_.data() + static_cast<size_t>(*index) * kBufferBytes;
}

void Fabric::free_buffer(int32_t index) { free_buffers_.push_back(index); }

void Fabric::release(Packet& p) {
  if (p.buffer >= 0) {
    free_buffer(p.buffer);
    p.buffer = -1;
  }
}

bool Fabric::push_inbound(Packet& p) {
  Queue& q = queues_[p.dst_nic];
  if (q.size == q.ring.size()) {
    counters_.dropped_overflow.inc();
    release(p);
    return false;
  }
  q.ring[(q.head + q.size) & (q.ring.size() - 1)] = p;
  ++q.size;
  return true;
}

bool Fabric::transmit(Packet& p, bool is_request, uint64_t now_ns) {
  if (is_remote(p.dst_nic)) return transmit_udp(p, is_request, now_ns);
  if (p.dst_nic >= queues_.size()) {
    counters_.dropped_fault.inc();  // unroutable: lost on the wire
    release(p);
    return true;
  }
  if (is_request && !request_space(p.dst_nic)) {
    counters_.request_backpressure.inc();
    return false;
  }
  counters_.transmitted.inc();
  if (tap_ && tap_(p)) {
    release(p);
    return true;
  }
  if (!faults_.enabled()) {
    if (wire_delay_ns_ != 0) {
      hold(p, now_ns + wire_delay_ns_);
    } else {
      push_inbound(p);
    }
    return true;
  }
  if (rng_.chance(faults_.drop)) {
    counters_.dropped_fault.inc();
    release(p);
    return true;
  }
  auto enqueue = [&](Packet& pkt) {
    if (rng_.chance(faults_.delay) && faults_.delay_max_ns > 0) {
      counters_.delayed_fault.inc();
      hold(pkt, now_ns + wire_delay_ns_ + rng_.between(1, faults_.delay_max_ns));
    } else if (wire_delay_ns_ != 0) {
      hold(pkt, now_ns + wire_delay_ns_);
    } else {
      push_inbound(pkt);
    }
  };
  if (rng_.chance(faults_.duplicate)) {
    Packet copy = p;
    copy.buffer = -1;
    bool ok = true;
    if (p.buffer >= 0) {
      // The copy needs its own buffer: each delivery releases one.
      uint8_t* mem = alloc_buffer(&copy.buffer);
      if (mem != nullptr) {
        std::memcpy(mem, p.payload, p.payload_len);
        copy.payload = mem;
      } else {
        ok = false;
      }
    }
    if (ok) {
      counters_.duplicated_fault.inc();
      enqueue(copy);
    }
  }
  enqueue(p);
  return true;
}

void Fabric::inject(const Packet& p) {
  Packet copy = p;
  copy.buffer = -1;
  push_inbound(copy);
}

void Fabric::hold(Packet& p, uint64_t due_ns) {
  if (is_remote(p.dst_nic)) {
    // Held before its socket: the sender's bounded TX queue takes it when
    // it is due (or drops it then, counted, if full).
    p.due_ns = due_ns;
    p.seq = seq_++;
    delayed_.push_back(p);
    std::push_heap(delayed_.begin(), delayed_.end(), later);
    return;
  }
  if (occupancy(p.dst_nic) >= inbound_capacity_) {
    counters_.dropped_overflow.inc();  // the destination could not take it on arrival
    release(p);
    return;
  }
  p.due_ns = due_ns;
  p.seq = seq_++;
  ++held_[p.dst_nic];
  delayed_.push_back(p);
  std::push_heap(delayed_.begin(), delayed_.end(), later);
}

void Fabric::release_due(uint64_t now_ns) {
  while (!delayed_.empty() && delayed_.front().due_ns <= now_ns) {
    std::pop_heap(delayed_.begin(), delayed_.end(), later);
    Packet p = delayed_.back();
    delayed_.pop_back();
    if (p.dst_nic == UINT32_MAX) continue;  // dropped by a failed materialize (held_ already adjusted)
    if (is_remote(p.dst_nic)) {
      send_udp(p);
      continue;
    }
    --held_[p.dst_nic];
    push_inbound(p);
  }
}

// How many queued packets ahead deliver() prefetches a QP context.
constexpr size_t kPrefetchAhead = 2;

size_t Fabric::deliver(uint32_t address, size_t budget, uint64_t now_ns) {
  Queue& q = queues_[address];
  detail::NicCore* nic = nics_[address];
  const size_t mask = q.ring.size() - 1;
  size_t n = 0;
  while (n < budget && q.size != 0) {
    // The QP context of the packet kPrefetchAhead places on starts loading
    // now: with many QPs it is rarely in cache, and the miss then overlaps
    // the work on the packets before it.
    if (q.size > kPrefetchAhead) {
      const Packet& ahead = q.ring[(q.head + kPrefetchAhead) & mask];
      if (ahead.dst_nic != UINT32_MAX) nic->prefetch_qp(ahead);
    }
    // Handled in place: the slot stays owned by the queue until it is popped
    // below, so a loopback reply pushed meanwhile cannot overwrite it.
    Packet& p = q.ring[q.head];
    if (p.dst_nic != UINT32_MAX) {  // else dropped by a failed materialize
      counters_.delivered.inc();
      nic->on_packet(p, now_ns);
    }
    release(p);
    q.head = (q.head + 1) & mask;
    --q.size;
    ++n;
  }
  return n;
}

uint64_t Fabric::next_due_ns() const { return delayed_.empty() ? UINT64_MAX : delayed_.front().due_ns; }

bool Fabric::has_queued() const {
  for (const Queue& q : queues_) {
    if (q.size != 0) return true;
  }
  return false;
}

bool Fabric::materialize(Packet& p) {
  if (p.buffer >= 0 || p.payload_len == 0 || p.dst_nic == UINT32_MAX) return true;
  if (p.payload_len > kBufferBytes) return false;  // cannot be a legal packet anyway
  int32_t index = -1;
  uint8_t* mem = alloc_buffer(&index);
  if (mem == nullptr) {
    counters_.materialize_failed.inc();
    return false;
  }
  std::memcpy(mem, p.payload, p.payload_len);
  p.payload = mem;
  p.buffer = index;
  counters_.materialized.inc();
  return true;
}

template <typename Pred>
void Fabric::materialize_if(Pred pred) {
  // False if the packet cannot keep its bytes: it is lost (dst_nic = UINT32_MAX).
  auto keep = [&](Packet& p) {
    return p.buffer >= 0 || p.payload_len == 0 || p.dst_nic == UINT32_MAX || !pred(p) || materialize(p);
  };
  for (Queue& q : queues_) {
    for (size_t i = 0; i < q.size; ++i) {
      Packet& p = q.ring[(q.head + i) & (q.ring.size() - 1)];
      if (!keep(p)) p.dst_nic = UINT32_MAX;
    }
  }
  for (Packet& p : delayed_) {
    if (!keep(p)) {
      if (!is_remote(p.dst_nic)) --held_[p.dst_nic];
      p.dst_nic = UINT32_MAX;
    }
  }
}

void Fabric::materialize_range(const uint8_t* base, size_t len) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base);
  materialize_if([&](const Packet& p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p.payload);
    return a >= lo && a - lo < len;
  });
}

void Fabric::materialize_from(uint32_t nic, uint32_t qpn) {
  materialize_if([&](const Packet& p) { return p.src_nic == nic && p.src_qpn == qpn; });
}

// ---- RoCEv2 over UDP ---------------------------------------------------------

namespace {
uint64_t endpoint_key(const UdpEndpoint& ep) { return static_cast<uint64_t>(ep.ipv4) << 16 | ep.port; }
// The source of a datagram from an endpoint never resolved: no QP can be
// connected to it.
constexpr uint32_t kUnknownSource = UINT32_MAX - 1;
}  // namespace

void Fabric::attach_udp(uint32_t nic, std::unique_ptr<detail::UdpPort> port) {
  FERRY_ASSERT(nic < ports_.size() && ports_[nic] == nullptr && port != nullptr, "attach_udp: bad NIC ", nic);
  if (rx_batch_.size() < port->rx_batch()) rx_batch_.resize(port->rx_batch());
  ports_[nic] = std::move(port);
  ++udp_ports_;
}

Result<uint32_t> Fabric::resolve(const UdpEndpoint& ep) {
  if (ep.ipv4 == 0 || ep.port == 0) return invalid_argument("resolve: " + ep.to_string() + " is not a peer's endpoint");
  for (size_t i = 0; i < ports_.size(); ++i) {
    if (ports_[i] && ports_[i]->local() == ep) return static_cast<uint32_t>(i);
  }
  const auto it = remote_index_.find(endpoint_key(ep));
  if (it != remote_index_.end()) return it->second;
  if (remotes_.size() >= kMaxRemotes) return resource_exhausted("resolve: remote endpoint table full");
  const uint32_t address = kRemoteAddressBase + static_cast<uint32_t>(remotes_.size());
  remotes_.push_back(ep);
  remote_index_.emplace(endpoint_key(ep), address);
  return address;
}

Result<UdpEndpoint> Fabric::remote_endpoint(uint32_t address) const {
  if (!is_remote(address) || address - kRemoteAddressBase >= remotes_.size()) {
    return not_found("no remote endpoint has address " + std::to_string(address));
  }
  return remotes_[address - kRemoteAddressBase];
}

Status Fabric::check_route(uint32_t src, uint32_t dst) const {
  if (!is_remote(dst)) {
    if (nic(dst) == nullptr) return invalid_argument("dest_nic " + std::to_string(dst) + " does not exist");
    return ok_status();
  }
  if (dst - kRemoteAddressBase >= remotes_.size()) {
    return invalid_argument("dest_nic " + std::to_string(dst) + " is no resolved remote endpoint");
  }
  if (port_of(src) == nullptr) {
    return invalid_argument("dest_nic " + std::to_string(dst) + " is the remote endpoint " +
                            remotes_[dst - kRemoteAddressBase].to_string() + ", but NIC " + std::to_string(src) +
                            " has no UDP socket (NicOptions::udp)");
  }
  return ok_status();
}

uint32_t Fabric::max_path_mtu(uint32_t src, uint32_t dst) const {
  const detail::UdpPort* port = port_of(src);
  return is_remote(dst) && port != nullptr ? port->path_mtu() : wire::kMaxPayloadBytes;
}

bool Fabric::request_space(uint32_t src, uint32_t dst) {
  if (!is_remote(dst)) return request_space(dst);
  detail::UdpPort* port = port_of(src);
  if (port == nullptr || port->request_space()) return true;
  port->counters().tx_backpressure.inc();
  return false;
}

bool Fabric::response_space(uint32_t src, uint32_t dst) const {
  if (!is_remote(dst)) return response_space(dst);
  const detail::UdpPort* port = port_of(src);
  return port == nullptr || port->response_space();
}

bool Fabric::transmit_udp(Packet& p, bool is_request, uint64_t now_ns) {
  detail::UdpPort* port = port_of(p.src_nic);
  if (port == nullptr || p.dst_nic - kRemoteAddressBase >= remotes_.size()) {
    counters_.dropped_fault.inc();  // unroutable: lost on the wire (modify_qp prevents it)
    release(p);
    return true;
  }
  if (is_request && !port->request_space()) {
    port->counters().tx_backpressure.inc();
    counters_.request_backpressure.inc();
    return false;
  }
  counters_.transmitted.inc();
  if (tap_ && tap_(p)) {
    release(p);
    return true;
  }
  if (faults_.enabled()) {
    if (rng_.chance(faults_.drop)) {
      counters_.dropped_fault.inc();
      release(p);
      return true;
    }
    // The datagram is a copy, so a duplicate needs no buffer of its own;
    // a delayed packet keeps its payload (borrowed or buffered) until due.
    const bool duplicate = rng_.chance(faults_.duplicate);
    if (duplicate) {
      counters_.duplicated_fault.inc();
      if (!port->enqueue(p, remotes_[p.dst_nic - kRemoteAddressBase])) port->counters().tx_queue_full.inc();
    }
    if (rng_.chance(faults_.delay) && faults_.delay_max_ns > 0) {
      counters_.delayed_fault.inc();
      hold(p, now_ns + rng_.between(1, faults_.delay_max_ns));
      return true;
    }
  }
  send_udp(p);
  return true;
}

void Fabric::send_udp(Packet& p) {
  detail::UdpPort* port = port_of(p.src_nic);
  if (port != nullptr && !port->enqueue(p, remotes_[p.dst_nic - kRemoteAddressBase])) {
    // Requests were refused above the high-water mark, so this is a
    // response, or a packet the fault model delayed: lost, and counted.
    port->counters().tx_queue_full.inc();
  }
  release(p);
}

bool Fabric::flush_udp() {
  bool sent = false;
  for (auto& port : ports_) {
    if (port == nullptr || port->queued() == 0) continue;
    const uint64_t before = port->counters().tx_datagrams;
    port->flush();
    sent |= port->counters().tx_datagrams != before;
  }
  return sent;
}

bool Fabric::udp_tx_pending() const {
  for (const auto& port : ports_) {
    if (port != nullptr && port->queued() != 0) return true;
  }
  return false;
}

void Fabric::udp_wait_set(std::vector<UdpWait>* out) const {
  for (uint32_t address = 0; address < ports_.size(); ++address) {
    const auto& port = ports_[address];
    if (port != nullptr) out->push_back(UdpWait{port->fd(), port->waiting_for_socket(), address});
  }
}

void Fabric::udp_not_readable(uint32_t nic) {
  if (nic < ports_.size() && ports_[nic] != nullptr) ports_[nic]->skip_next_receive();
}

bool Fabric::poll_udp(uint64_t now_ns, size_t budget) {
  bool work = false;
  for (uint32_t address = 0; address < ports_.size(); ++address) {
    detail::UdpPort* port = ports_[address].get();
    if (port == nullptr) continue;
    const size_t n = port->receive(std::span<detail::RxDatagram>(rx_batch_.data(), std::min(budget, rx_batch_.size())));
    if (n == 0) continue;
    for (size_t i = 0; i < n; ++i) {
      receive_datagram(address, rx_batch_[i].bytes, rx_batch_[i].truncated, rx_batch_[i].from, now_ns);
    }
    nics_[address]->end_rx_batch(now_ns);
    work = true;
  }
  return work;
}

void Fabric::receive_datagram(uint32_t address, std::span<const uint8_t> bytes, bool truncated,
                              const UdpEndpoint& from, uint64_t now_ns) {
  detail::UdpPort& port = *ports_[address];
  detail::UdpPort::CounterSet& c = port.counters();
  c.rx_datagrams.inc();
  udp::ParsedDatagram d;
  const udp::RxVerdict verdict =
      truncated ? udp::RxVerdict::kMalformed : udp::parse_datagram(bytes, from, port.local(), &d);
  if (verdict == udp::RxVerdict::kMalformed) {
    c.rx_malformed.inc();
    return;
  }
  if (verdict == udp::RxVerdict::kBadIcrc) {
    c.rx_bad_icrc.inc();
    return;
  }
  detail::NicCore* core = nics_[address];
  const detail::QpCore* qp = core->find_qp(d.headers.bth.dest_qp);
  if (qp == nullptr) {
    c.rx_unknown_qp.inc();
    return;
  }
  // RoCE checks the source address: a datagram for a connected QP from
  // anywhere but the QP's peer (IP and port) is dropped.
  const auto it = remote_index_.find(endpoint_key(from));
  const uint32_t src = it != remote_index_.end() ? it->second : kUnknownSource;
  if (qp->attr.dest_nic != src) {
    c.rx_unconnected.inc();
    return;
  }
  Packet p;
  p.src_nic = src;
  p.dst_nic = address;
  p.header_len = static_cast<uint16_t>(d.header_len);
  std::memcpy(p.header, d.header_bytes.data(), d.header_len);
  p.payload_len = static_cast<uint32_t>(d.payload.size());
  p.payload = d.payload.empty() ? nullptr : d.payload.data();
  core->on_packet(p, now_ns);
}

void Fabric::inject_datagram(uint32_t nic, std::span<const uint8_t> bytes, const UdpEndpoint& from, uint64_t now_ns) {
  FERRY_ASSERT(port_of(nic) != nullptr, "inject_datagram: NIC ", nic, " has no UDP socket");
  receive_datagram(nic, bytes, false, from, now_ns);
  nics_[nic]->end_rx_batch(now_ns);
}

void Fabric::set_udp_tx_paused(uint32_t nic, bool paused) {
  FERRY_ASSERT(port_of(nic) != nullptr, "set_udp_tx_paused: NIC ", nic, " has no UDP socket");
  ports_[nic]->set_tx_paused(paused);
}

}  // namespace ferry::nic
