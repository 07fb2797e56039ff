// In-process fabric with a seeded fault model (see fabric.h).
#include "ferry/nic/fabric.h"

#include <algorithm>
#include <cstring>

#include "nic_core.h"

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

uint32_t Fabric::attach(detail::NicCore* nic) {
  nics_.push_back(nic);
  queues_.emplace_back();
  queues_.back().ring.resize(inbound_capacity_);
  held_.push_back(0);
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
    --held_[p.dst_nic];
    push_inbound(p);
  }
}

size_t Fabric::deliver(uint32_t address, size_t budget, uint64_t now_ns) {
  Queue& q = queues_[address];
  size_t n = 0;
  while (n < budget && q.size != 0) {
    // Handled in place: the slot stays owned by the queue until it is popped
    // below, so a loopback reply pushed meanwhile cannot overwrite it.
    Packet& p = q.ring[q.head];
    if (p.dst_nic != UINT32_MAX) {  // else dropped by a failed materialize
      counters_.delivered.inc();
      nics_[address]->on_packet(p, now_ns);
    }
    release(p);
    q.head = (q.head + 1) & (q.ring.size() - 1);
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
      --held_[p.dst_nic];
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

}  // namespace ferry::nic
