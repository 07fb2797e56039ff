// One NIC's UDP socket (internal): RoCEv2 datagrams out through a bounded
// queue of framed datagrams, in through recvmmsg batches.
//
// The Fabric routes: it decides which packets leave here and what a
// received datagram is (udp.h validates it, the Fabric finds the QP and
// checks the source). This class only owns the socket and its buffers.
//
// Bounded and preallocated: the TX queue holds at most `tx_queue_datagrams`
// framed datagrams and the RX side one batch; nothing allocates after open().
// A packet is copied into the TX queue when it is handed over, so it never
// borrows host memory past that moment (and the NIC's materialization of
// borrowed payloads need not know about this queue).
//
// Thread rules: the engine thread does everything, except that counters()
// and the constant accessors may be read from any thread.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/common/counter.h"
#include "ferry/common/status.h"
#include "ferry/nic/fabric.h"
#include "ferry/nic/udp.h"
#include "ferry/nic/verbs.h"

namespace ferry::nic::detail {

struct RxDatagram {
  std::span<const uint8_t> bytes;
  UdpEndpoint from;
  bool truncated = false;  // longer than any valid datagram (MSG_TRUNC) or not from IPv4
};

class UdpPort {
 public:
  // Creates, configures and binds the socket. kInvalidArgument for a bad
  // bind address; kUnavailable (with errno's text) if the socket cannot be
  // bound; the errors of udp::interface_mtu / path_mtu_for_interface.
  static Result<std::unique_ptr<UdpPort>> open(const UdpOptions& options, size_t rx_batch);
  ~UdpPort();
  UdpPort(const UdpPort&) = delete;
  UdpPort& operator=(const UdpPort&) = delete;

  const UdpEndpoint& local() const { return local_; }
  uint32_t path_mtu() const { return path_mtu_; }
  const std::string& interface() const { return interface_; }
  int fd() const { return fd_; }

  // ---- transmit ----
  size_t queued() const { return tx_size_; }
  size_t capacity() const { return tx_slots_.size(); }
  bool request_space() const { return tx_size_ < tx_request_high_water_; }
  bool response_space() const { return tx_size_ < tx_response_high_water_; }
  // Frames `p` for `to` into the TX queue (copying its payload). False if
  // the queue is full even after trying to send; the caller decides whether
  // that is back-pressure (request) or a drop (response) and counts it.
  bool enqueue(const Packet& p, const UdpEndpoint& to);
  // Sends queued datagrams until the queue is empty or the socket is full.
  // Returns how many left.
  size_t flush();
  // Datagrams are waiting because the socket refused them (wait for POLLOUT).
  bool waiting_for_socket() const { return tx_size_ != 0 && !tx_paused_; }
  // White-box testing: while paused the socket is treated as full (every
  // send is refused as if with EAGAIN), so the TX queue fills.
  void set_tx_paused(bool paused) { tx_paused_ = paused; }

  // ---- receive ----
  // Receives up to out.size() (at most the rx batch) datagrams without
  // blocking. Their bytes stay valid until the next receive().
  size_t receive(std::span<RxDatagram> out);
  size_t rx_batch() const { return rx_hdrs_.size(); }
  // The engine's ppoll just found the socket not readable: the next
  // receive() returns 0 without a system call (a datagram that arrived
  // since is taken by the pass after, or wakes the next ppoll at once).
  void skip_next_receive() { skip_next_rx_ = true; }

  // ---- counters (engine writes, anyone reads) ----
  struct CounterSet {
    Counter rx_datagrams, rx_malformed, rx_bad_icrc, rx_unknown_qp, rx_unconnected;
    Counter rx_calls, rx_empty_calls, rx_skipped;
    Counter tx_datagrams, tx_eagain, tx_backpressure, tx_queue_full, tx_errors, tx_queue_max;
  };
  CounterSet& counters() { return counters_; }
  UdpCounters snapshot() const;

 private:
  UdpPort() = default;
  static constexpr size_t kSlotBytes = (udp::kMaxDatagramBytes + 63) & ~size_t{63};
  static constexpr size_t kRxSlotBytes = kSlotBytes + 64;  // room to see (MSG_TRUNC) an oversize datagram
  static constexpr size_t kSendBatch = 64;
  struct TxSlot {
    sockaddr_in to;
    uint32_t length;
    alignas(64) uint8_t bytes[kSlotBytes];
  };

  int fd_ = -1;
  UdpEndpoint local_;
  uint32_t path_mtu_ = 0;
  std::string interface_;

  // TX ring: slots [tx_head_, tx_head_ + tx_size_) are framed and unsent.
  std::vector<TxSlot> tx_slots_;
  size_t tx_head_ = 0;
  size_t tx_size_ = 0;
  size_t tx_request_high_water_ = 0;
  size_t tx_response_high_water_ = 0;
  bool tx_paused_ = false;
  std::vector<mmsghdr> tx_hdrs_;
  std::vector<iovec> tx_iovs_;

  // RX batch buffers.
  std::vector<uint8_t> rx_memory_;
  std::vector<mmsghdr> rx_hdrs_;
  std::vector<iovec> rx_iovs_;
  std::vector<sockaddr_in> rx_from_;

  CounterSet counters_;
  bool skip_next_rx_ = false;
};

}  // namespace ferry::nic::detail
