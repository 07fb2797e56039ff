// Internal state of an RPC server: its workers, their queues, receive
// buffers, in-order execution state and connections.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/common/block_table.h"
#include "ferry/common/counter.h"
#include "ferry/nic/dma_memory.h"
#include "ferry/rpc/server.h"

namespace ferry::rpc {

// One client connection as the worker sees it.
struct Connection {
  std::unique_ptr<nic::QueuePair> qp;
  uint32_t qpn = 0;
};

// What the NIC reported for one SRQ position, until the worker executes it.
// (The paper's bitmap, Figure 3, with what the worker needs to find the
// request: a set `state` is the bitmap's bit.)
struct PositionState {
  enum : uint8_t { kEmpty = 0, kMessage, kFiller, kError };
  uint8_t state = kEmpty;
  uint16_t consumed = 1;  // strides the NIC gave it: the next position is this + consumed
  uint32_t byte_len = 0;
  uint32_t qpn = 0;
};

struct WorkerCounterSet {
  Counter requests, nilext, replies, acks, errors, dropped, recv_errors, fillers, reposts, out_of_order, recovered,
      recovery_skipped, admission_refusals, stall_probes, busy_ticks;
};

struct Worker {
  uint32_t index = 0;
  Server::Impl* server = nullptr;
  std::unique_ptr<nic::CompletionQueue> cq;
  std::unique_ptr<nic::SharedReceiveQueue> srq;

  // Receive buffers: a ring of `buffers` of `buffer_bytes`, in DRAM (owned)
  // or, durable, in the PM area after the control block.
  nic::DmaMemory dram_buffers;
  uint8_t* buffer_base = nullptr;
  std::unique_ptr<nic::MemoryRegion> buffer_mr;
  uint32_t strides = 1;       // per buffer (1: ordinary SRQ)
  uint32_t stride_bytes = 0;  // == buffer_bytes for an ordinary SRQ

  // In-order execution (Rule 2). Positions are absolute: sequence * strides + stride.
  uint64_t posted = 0;  // buffers posted (sequence of the next)
  uint64_t exec = 0;    // the next position to execute
  uint64_t highest_seen = 0;  // highest position a completion reported (for out_of_order)
  bool any_seen = false;
  uint64_t persisted_rte = 0;  // durable: the ReqToExecute last persisted
  uint32_t unpersisted = 0;    // durable: nilext requests executed past it
  uint64_t idle_since = 0;     // durable: the clock's time of the first empty poll in a row (0: not idle)
  uint64_t idle_commit_ns = 0;  // durable: ServerOptions::req_to_execute_idle_us
  uint64_t stall_since = 0;     // the clock's time the next position was first seen waiting behind later ones
  std::vector<PositionState> positions;       // ring over the posted buffers' positions
  std::vector<std::vector<uint16_t>> starts;  // per buffer slot: strides where a message started
  std::vector<void*> invalidate;              // durable: scratch, the checksum words a retired buffer clears
  std::vector<uint64_t> tokens;               // per buffer slot: Admission::reserve's token (0: none)
  bool admission_waiting = false;             // the next buffer waits for Admission::reserve
  std::atomic<uint64_t> posted_gauge{0};      // `posted`, for posted_buffers() from other threads

  // Durable mode: this worker's area of the PM region.
  uint8_t* area = nullptr;
  DurableControl* control = nullptr;
  std::unique_ptr<nic::MemoryRegion> flush_mr;  // the byte clients READ to drain their SENDs

  // Responses: registered slots of max_response_bytes, a free list, and a
  // cap on sends awaiting their completion (bounds the CQ).
  nic::DmaMemory response_memory;
  std::unique_ptr<nic::MemoryRegion> response_mr;
  std::vector<uint32_t> free_slots;
  uint32_t sends_outstanding = 0;

  // Connections: written by connect() under `mu`; the worker keeps its own
  // copy of the map and looks up under the lock only on a miss.
  std::mutex mu;  // sim-seam: held only for map updates, never across a wait
  std::unordered_map<uint32_t, Connection*> shared_conns;  // guarded by mu
  std::vector<std::unique_ptr<Connection>> owned_conns;    // guarded by mu
  std::unordered_map<uint32_t, Connection*> conns;         // worker thread only

  Thread thread;  // spawned by the server's runtime (threaded mode)
  WorkerCounterSet counters;
};

struct HandlerEntry {
  HandlerInfo info;
  Handler handler;
  bool present = false;
};

// The handlers by request type, in 256 blocks of 256 entries, a block
// allocated when a type in it is registered: a lookup is two loads, as in a
// flat table of 65,536 entries, without that table's 5 MB per server.
class HandlerTable {
 public:
  const HandlerEntry* find(uint16_t type) const {
    const HandlerEntry* e = table_.find(type);
    return e != nullptr && e->present ? e : nullptr;
  }
  void add(uint16_t type, HandlerInfo info, Handler handler) {
    HandlerEntry& e = table_.at(type);
    e.info = std::move(info);
    e.handler = std::move(handler);
    e.present = true;
    ++count_;
  }
  bool empty() const { return count_ == 0; }
  // The registered types, ascending.
  std::vector<uint16_t> types() const {
    std::vector<uint16_t> out;
    table_.for_each_allocated([&](uint32_t type, const HandlerEntry& e) {
      if (e.present) out.push_back(static_cast<uint16_t>(type));
    });
    return out;
  }

 private:
  BlockTable<HandlerEntry, 256> table_{65536};
  size_t count_ = 0;
};

struct Server::Impl {
  nic::Engine* engine = nullptr;  // the NIC's, in process; nullptr for a daemon-attached NIC
  nic::Nic* nic = nullptr;
  ServerOptions options;
  Runtime* runtime = nullptr;    // options.runtime, or Runtime::threads()
  const Clock* clock = nullptr;  // options.clock, the simulator's, or the TSC's
  std::unique_ptr<nic::ProtectionDomain> pd;
  HandlerTable handlers;
  Admission admission;                 // empty functions: no admission
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<ScanStats> recovery;
  std::atomic<bool> running{false};
  std::atomic<bool> halted{false};  // halt(): nothing is sent any more
  bool started = false;
  // CM services (serve()): the listener and the names registered on it.
  cm::Listener* listener = nullptr;
  std::vector<std::string> services;

  // worker.cc
  size_t poll(Worker& w);
  void record(Worker& w, const nic::WorkCompletion& wc);
  void on_send_done(Worker& w, const nic::WorkCompletion& wc);
  void execute_in_order(Worker& w);
  // Probes every connection when the next position has waited too long
  // behind later ones (ServerOptions::stall_probe_us).
  void check_stall(Worker& w);
  void handle(Worker& w, uint64_t position, const PositionState& p);
  void retire_buffer(Worker& w, uint64_t sequence);
  // Posts buffers up to `buffers` ahead of execution, in sequence order,
  // while Admission lets it. An error is a post_recv failure.
  Status post_buffers(Worker& w);
  // Posts buffer `sequence` (== w.posted). kResourceExhausted: admission
  // said not now (nothing changed).
  Status post_buffer(Worker& w, uint64_t sequence);
  // Inside a handler's reply, waiting for a response slot or send-queue
  // room: one CQ poll (receives are only marked, never executed from here),
  // then lets the NIC run. False if the CQ failed.
  bool wait_for_completions(Worker& w);
  uint32_t take_response_slot(Worker& w);
  void send_response(Worker& w, Connection& c, uint32_t slot, uint32_t size);
  Connection* find_connection(Worker& w, uint32_t qpn);
  // A QP on worker w's SRQ, known to the worker (not yet owned), and the
  // endpoint a client of it needs. connect() and the CM service share it.
  Result<Connection*> new_connection(Worker& w);
  void adopt_connection(Worker& w, Connection* c, bool ok);
  WorkerEndpoint endpoint(Worker& w) const;
  uint8_t* position_bytes(Worker& w, uint64_t position);

  // durable.cc
  Status init_durable_area(Worker& w);
  Status recover_durable_area(Worker& w);
  void persist_req_to_execute(Worker& w, uint64_t position);
  void persist_srq_tail(Worker& w, uint64_t tail);
  void persist_admission(Worker& w, uint64_t sequence, uint64_t token);
  void invalidate_buffer(Worker& w, uint64_t sequence);
};

}  // namespace ferry::rpc
