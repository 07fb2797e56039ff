// The in-process fabric: connects the NICs of one process, with a seeded fault
// model (drop, duplicate, delay/reorder).
//
// A Packet carries its transport headers as wire bytes (the receiver parses
// them; nothing is trusted) and its payload either borrowed from the sender's
// host memory (the zero-copy fast path: one copy, at the receiver's DMA write)
// or held in a fabric-owned buffer. Borrowing is safe under RC semantics: a
// payload is read at delivery only if its PSN is the one the responder
// expects, which can happen only before the request completes, and the
// application may not touch a posted buffer before completion. When memory a
// packet borrows may go away (MR deregistered, QP destroyed or in ERROR), the
// NIC asks the fabric to materialize (copy) those payloads first.
//
// Bounded: each NIC's inbound queue and the buffer pool have fixed capacity.
// A NIC's occupancy is its queue plus the packets on the wire to it (held by
// the wire delay or the fault model); flow control uses it. Requests are
// back-pressured: transmit() refuses them above 3/4 of the capacity, like PFC
// pause. Responses are never refused, but a responder sends the packets of a
// READ response only while response_space() (below 7/8), so the rest stays
// free for single-packet ACKs, NAKs and ATOMIC ACKs. A packet that finds its
// destination completely full is dropped and counted (the transport recovers).
//
// Thread rules: single-threaded; owned and driven by the Engine's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ferry/common/counter.h"
#include "ferry/common/rng.h"
#include "ferry/nic/wire.h"

namespace ferry::nic {

namespace detail {
class NicCore;
}

struct Packet {
  uint32_t src_nic = 0;
  uint32_t dst_nic = 0;
  uint32_t src_qpn = 0;   // sending QP, for materialization only: not on the wire, never checked
  uint16_t header_len = 0;
  uint32_t payload_len = 0;
  const uint8_t* payload = nullptr;  // borrowed, or points into buffer `buffer`
  int32_t buffer = -1;               // fabric buffer index, -1 if borrowed
  uint64_t due_ns = 0;               // delivery time (fault model delays)
  uint64_t seq = 0;                  // tie-break for equal due times
  alignas(8) uint8_t header[wire::kMaxHeaderBytes];

  std::span<const uint8_t> header_bytes() const { return {header, header_len}; }
  std::span<const uint8_t> payload_bytes() const { return {payload, payload_len}; }
};

struct FaultModel {
  uint64_t seed = 1;
  double drop = 0.0;        // probability a packet is lost
  double duplicate = 0.0;   // probability a packet is delivered twice
  double delay = 0.0;       // probability a packet is held back (reorders it)
  uint64_t delay_max_ns = 0;  // a held packet waits uniform [1, delay_max_ns]
  bool enabled() const { return drop > 0 || duplicate > 0 || delay > 0; }
};

struct FabricCounters {
  Counter transmitted;
  Counter delivered;
  Counter dropped_fault;
  Counter duplicated_fault;
  Counter delayed_fault;
  Counter dropped_overflow;      // response/ACK found the queue full
  Counter request_backpressure;  // requests refused above the high-water mark
  Counter materialized;
  Counter materialize_failed;    // no buffer free: packet dropped instead
};

class Fabric {
 public:
  static constexpr size_t kBufferBytes = wire::kMaxPayloadBytes;

  // `wire_delay_ns`: a modeled one-way propagation delay added to every
  // packet (0 = the emulator's own speed). Order is preserved.
  Fabric(size_t inbound_capacity, size_t buffer_count, const FaultModel& faults, uint64_t wire_delay_ns = 0);
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Registers a NIC and returns its address (0, 1, 2, ...).
  uint32_t attach(detail::NicCore* nic);
  size_t nic_count() const { return nics_.size(); }
  detail::NicCore* nic(uint32_t address) const { return address < nics_.size() ? nics_[address] : nullptr; }

  void set_faults(const FaultModel& faults);
  const FaultModel& faults() const { return faults_; }

  // True if a request to `dst` would be accepted now.
  bool request_space(uint32_t dst) const;
  // True if `dst` has room for more multi-packet responses (READ data); the
  // rest of its queue is kept for single-packet ACKs and NAKs.
  bool response_space(uint32_t dst) const;
  // Packets queued for `dst` or on the wire to it; `dst` must be attached.
  size_t occupancy(uint32_t dst) const { return queues_[dst].size + held_[dst]; }
  // Hands a packet to the fabric. Requests above the high-water mark are
  // refused (returns false, nothing consumed); everything else is accepted
  // (and possibly dropped/duplicated/delayed by the fault model).
  bool transmit(Packet& p, bool is_request, uint64_t now_ns);

  // A fabric-owned payload buffer of kBufferBytes, or nullptr if none is free.
  uint8_t* alloc_buffer(int32_t* index);
  void free_buffer(int32_t index);

  // Moves delayed packets whose time has come into inbound queues.
  void release_due(uint64_t now_ns);
  // Delivers up to `budget` queued packets to NIC `address` (calls its
  // on_packet). Returns how many were delivered.
  size_t deliver(uint32_t address, size_t budget, uint64_t now_ns);
  bool has_inbound(uint32_t address) const { return queues_[address].size != 0; }
  // Earliest due time of a delayed packet, or UINT64_MAX.
  uint64_t next_due_ns() const;
  // True if some NIC has a packet waiting in its inbound queue (delayed
  // packets are not counted: they become deliverable at next_due_ns()).
  bool has_queued() const;

  // Copies borrowed payloads that point into [base, base+len) into fabric
  // buffers. Control path (MR deregistration, QP destruction).
  void materialize_range(const uint8_t* base, size_t len);
  // Same for every borrowed payload sent by (nic, qpn).
  void materialize_from(uint32_t nic, uint32_t qpn);

  const FabricCounters& counters() const { return counters_; }

  // ---- white-box testing ----
  // A tap sees every packet handed to transmit() before the fault model; if
  // it returns true the packet is consumed (not delivered). The payload may
  // be borrowed: copy it inside the tap.
  void set_tap(std::function<bool(const Packet&)> tap) { tap_ = std::move(tap); }
  // Queues a packet for `p.dst_nic` as if it had arrived from the wire.
  // The payload must stay valid until delivered.
  void inject(const Packet& p);

 private:
  struct Queue {
    std::vector<Packet> ring;
    size_t head = 0;
    size_t size = 0;
  };
  bool push_inbound(Packet& p);
  void hold(Packet& p, uint64_t due_ns);
  void release(Packet& p);
  bool materialize(Packet& p);
  template <typename Pred>
  void materialize_if(Pred pred);

  std::vector<detail::NicCore*> nics_;
  std::vector<Queue> queues_;
  size_t inbound_capacity_;
  size_t request_high_water_;
  size_t response_high_water_;
  std::vector<uint8_t> buffer_memory_;
  std::vector<int32_t> free_buffers_;
  std::vector<Packet> delayed_;  // min-heap by (due_ns, seq)
  std::vector<size_t> held_;     // per destination: packets in delayed_ (not dropped)
  FaultModel faults_;
  uint64_t wire_delay_ns_ = 0;
  Rng rng_;
  uint64_t seq_ = 0;
  FabricCounters counters_;
  std::function<bool(const Packet&)> tap_;
};

}  // namespace ferry::nic
