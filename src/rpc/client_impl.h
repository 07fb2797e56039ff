// Internal state of an RPC client machine: its registered arena, the QPs to
// the server's workers (links), and its sessions' call slots and mailboxes.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "ferry/common/counter.h"
#include "ferry/common/mpsc_queue.h"
#include "ferry/nic/dma_memory.h"
#include "ferry/rpc/client.h"

namespace ferry::rpc {

// One RC QP to one server worker, owned (posted and polled) by one session.
struct Link {
  uint32_t index = 0;
  uint32_t worker = 0;
  uint32_t owner = 0;  // the session that posts on it and polls its CQEs
  std::unique_ptr<nic::QueuePair> qp;
  WorkerEndpoint endpoint;
  size_t recv_offset = 0;  // its receive buffers in the arena
  uint32_t recv_depth = 0;
  std::atomic<bool> failed{false};  // its QP went to error; calls on it fail (set by the owner, read by any session)
};

// wr_id layout: kind in bits 56..63; for SEND/READ the initiating session in
// 40..55 and its slot in 24..39; for RECV the link in 24..55 and the
// receive buffer in 0..23.
inline constexpr uint64_t kWrSend = 1, kWrRead = 2, kWrRecv = 3;
inline uint64_t send_wr_id(uint64_t kind, uint32_t session, uint32_t slot) {
  return (kind << 56) | (static_cast<uint64_t>(session) << 40) | (static_cast<uint64_t>(slot) << 24);
}
inline uint64_t recv_wr_id(uint32_t link, uint32_t buffer) {
  return (kWrRecv << 56) | (static_cast<uint64_t>(link) << 24) | buffer;
}

// A request another session asked this one (the owner of its link) to post.
struct Delegated {
  uint32_t initiator;
  uint32_t slot;
  uint32_t worker;
  uint32_t size;
  uint8_t nilext;
};

// What happened to a call, as the owner of its link tells the initiator.
struct Event {
  enum : uint8_t { kSendDone = 1, kReadDone, kResponse, kPostFailed };
  uint64_t request_id;
  uint32_t slot;
  uint32_t len;        // kResponse: payload bytes (copied into the slot's response area)
  uint8_t type;
  uint8_t kind;        // kResponse: ResponseKind
  uint8_t app_status;  // kResponse: status byte
  uint8_t wc_status;   // kSendDone/kReadDone: nic::WcStatus
};

struct Slot {
  static constexpr uint8_t kNeedSend = 1, kNeedRead = 2, kNeedResponse = 4;
  bool busy = false;
  bool finished = false;  // the callback ran
  uint8_t waiting = 0;    // events still due before the slot may be reused
  Commit expect = Commit::kNone;
  uint32_t worker = 0;
  uint64_t id = 0;
  uint32_t generation = 0;
  Callback done;
};

struct SessionCounterSet {
  Counter calls, committed, failed, delegated, carried, stray_responses;
};

struct Session::Impl {
  Client::Impl* client = nullptr;
  uint32_t index = 0;
  std::unique_ptr<nic::CompletionQueue> cq;
  std::vector<Slot> slots;
  std::vector<uint32_t> free_slots;
  uint32_t in_use = 0;
  MpscQueue<Delegated> inbox;   // other sessions' requests for links this session owns
  MpscQueue<Event> results;     // owners' news about this session's delegated calls
  SessionCounterSet counters;

  Impl(size_t inbox_capacity, size_t results_capacity) : inbox(inbox_capacity), results(results_capacity) {}

  uint8_t* request_area(uint32_t slot);
  uint8_t* response_area(uint32_t slot);
  Status post(Link& link, uint32_t initiator, uint32_t slot, uint32_t size, bool nilext);
  void on_completion(const nic::WorkCompletion& wc);
  void on_response(Link& link, uint32_t buffer, uint32_t byte_len);
  // Routes an event to the initiating session: applied here if it is this
  // one, else published to its results queue.
  void route(uint32_t initiator, const Event& e, std::span<const uint8_t> payload);
  void apply(const Event& e, std::span<const uint8_t> payload);
  void finish(Slot& s, const CallResult& r);
  void release(uint32_t slot);
};

struct Client::Impl {
  nic::Engine* engine = nullptr;  // the NIC's, in process; nullptr for a daemon-attached NIC
  nic::Nic* nic = nullptr;
  ClientOptions options;
  Mode mode = Mode::kOrderedQueue;
  bool durable = false;
  uint32_t workers = 0;
  uint32_t max_request_bytes = 0;
  uint32_t max_response_bytes = 0;
  std::vector<bool> nilext_types;  // by type: the server allows nilext
  std::unique_ptr<nic::ProtectionDomain> pd;
  nic::DmaMemory arena;
  size_t arena_bytes = 0;
  std::unique_ptr<nic::MemoryRegion> mr;
  size_t slots_offset = 0;    // per session: max_inflight x (request + response)
  size_t scratch_offset = 0;  // per session: 64 B the 1-byte READs land in
  std::vector<std::unique_ptr<Link>> links;
  std::vector<std::unique_ptr<Session>> sessions;

  Link& link_for(uint32_t session, uint32_t worker) {
    return options.delegation ? *links[worker] : *links[static_cast<size_t>(session) * workers + worker];
  }
  uint32_t through_link() const {  // calls one link may carry at once
    return options.delegation ? options.sessions * options.max_inflight : options.max_inflight;
  }
};

}  // namespace ferry::rpc
