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
// RoCEv2 over UDP: a NIC may also own a UDP socket (NicOptions::udp). Remote
// endpoints get addresses too (resolve(), from kRemoteAddressBase up), so a
// QP's dest_nic names either an attached NIC or a remote endpoint and the NIC
// core is the same for both. A packet for a remote address is framed with an
// ICRC and queued on the sending NIC's socket (bounded: requests are
// back-pressured above 3/4 of that queue, READ responses paced below 7/8,
// other responses dropped and counted when it is full); a datagram received
// on a socket is validated (udp.h), its QP and source checked, and handed to
// the NIC core like an in-process packet. The fault model applies to UDP
// packets before they are framed (drop, duplicate, delay); the wire delay
// does not (the network has its own).
//
// Thread rules: single-threaded; owned and driven by the Engine's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "ferry/common/counter.h"
#include "ferry/common/rng.h"
#include "ferry/common/status.h"
#include "ferry/nic/types.h"
#include "ferry/nic/wire.h"

namespace ferry::nic {

namespace detail {
class NicCore;
class UdpPort;
struct RxDatagram;
}  // namespace detail

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
  ~Fabric();
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

  // ---- RoCEv2 over UDP ----
  // Addresses from here up name remote UDP endpoints (resolve()); below are
  // attached NICs. UINT32_MAX is never an address.
  static constexpr uint32_t kRemoteAddressBase = 0x8000'0000u;
  static constexpr uint32_t kMaxRemotes = 1u << 16;
  static bool is_remote(uint32_t address) { return address >= kRemoteAddressBase && address != UINT32_MAX; }
  // Gives attached NIC `nic` its UDP socket.
  void attach_udp(uint32_t nic, std::unique_ptr<detail::UdpPort> port);
  size_t udp_port_count() const { return udp_ports_; }
  // The address of `ep`: an attached NIC's own if one is bound there, else a
  // remote address (the same one for the same endpoint every time).
  // kInvalidArgument for address 0.0.0.0 or port 0, kResourceExhausted
  // beyond kMaxRemotes endpoints.
  Result<uint32_t> resolve(const UdpEndpoint& ep);
  // The endpoint a remote address stands for; kNotFound if none.
  Result<UdpEndpoint> remote_endpoint(uint32_t address) const;
  // OK if NIC `src` can send to `dst`: an attached NIC, or a resolved remote
  // endpoint when `src` has a UDP socket. kInvalidArgument otherwise.
  Status check_route(uint32_t src, uint32_t dst) const;
  // The largest path MTU from `src` to `dst`: the UDP socket's for a remote
  // destination, kMaxPayloadBytes in process.
  uint32_t max_path_mtu(uint32_t src, uint32_t dst) const;
  // request_space/response_space for a packet from NIC `src`: for a remote
  // destination, room in src's UDP transmit queue (a refused request is
  // counted in src's UdpCounters::tx_backpressure).
  bool request_space(uint32_t src, uint32_t dst);
  bool response_space(uint32_t src, uint32_t dst) const;
  // Receives up to `budget` datagrams per socket and hands the valid ones to
  // their NIC cores (then ends each NIC's receive batch). True if any arrived.
  bool poll_udp(uint64_t now_ns, size_t budget);
  // Sends what the UDP transmit queues hold, as far as the sockets take it.
  // True if anything was sent.
  bool flush_udp();
  // True if some transmit queue holds datagrams its socket refused.
  bool udp_tx_pending() const;
  // The sockets to wait on while the engine sleeps: readable always,
  // writable when datagrams wait for room.
  struct UdpWait {
    int fd;
    bool writable;
    uint32_t nic;  // the NIC whose socket it is
  };
  void udp_wait_set(std::vector<UdpWait>* out) const;
  // The engine's ppoll found NIC `nic`'s socket not readable: its next
  // poll_udp makes no receive call on it (issue 31: a daemon woken by a
  // doorbell made an empty recvmmsg per wakeup).
  void udp_not_readable(uint32_t nic);

  // ---- white-box testing ----
  // Handles `bytes` as a datagram received on NIC `nic`'s UDP socket from
  // `from` (validated, counted, delivered, receive batch ended). `nic` must
  // have a UDP socket. The bytes need only live for the call.
  void inject_datagram(uint32_t nic, std::span<const uint8_t> bytes, const UdpEndpoint& from, uint64_t now_ns);
  // While paused, NIC `nic`'s socket is treated as full (UdpPort::set_tx_paused).
  void set_udp_tx_paused(uint32_t nic, bool paused);
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
  bool transmit_udp(Packet& p, bool is_request, uint64_t now_ns);
  // Frames `p` onto its sender's socket queue and releases its buffer; a
  // packet that finds the queue full is dropped and counted.
  void send_udp(Packet& p);
  void receive_datagram(uint32_t nic, std::span<const uint8_t> bytes, bool truncated, const UdpEndpoint& from,
                        uint64_t now_ns);
  detail::UdpPort* port_of(uint32_t nic) const { return nic < ports_.size() ? ports_[nic].get() : nullptr; }
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

  // UDP: sockets by NIC address (null: in process only), remote endpoints
  // by remote index, and the reverse map for received datagrams.
  std::vector<std::unique_ptr<detail::UdpPort>> ports_;
  size_t udp_ports_ = 0;
  std::vector<UdpEndpoint> remotes_;
  std::unordered_map<uint64_t, uint32_t> remote_index_;  // (ipv4 << 16 | port) -> address
  std::vector<detail::RxDatagram> rx_batch_;  // one receive() batch
};

}  // namespace ferry::nic
