// Ferry's two-sided RPC layer: the server side.
//
// One RPC framework, three modes on the same code (JUNE BERRY, NSDI'25):
//  - kRawRpc: the worker executes every request, then replies.
//  - kDeferredExec: for a nilext request the worker first replies with a
//    software ACK, then executes; others as RawRPC.
//  - kOrderedQueue (OQ): a nilext request is committed by the hardware ACK of
//    its SEND; the server sends nothing for it. Rule 1 is the NIC's (an SRQ
//    buffer is allocated in arrival order, before the ACK); Rule 2 is the
//    worker's: it executes strictly in buffer order, never in CQ order
//    (a bitmap over buffer positions, Figure 3).
// Every mode executes in buffer order: the modes differ only in when and
// what they reply.
//
// A server has `workers` worker threads. Each owns a shared receive queue
// (multi-packet by default), a completion queue and a partition of the data:
// clients route a request to worker hash(key) % workers (§5.1). Every client
// connection is one RC QP per worker, on that worker's SRQ.
//
// Durable OQ (JUNE BERRY-D, §5.3): the SRQ buffers and each worker's
// ReqToExecute/SRQTail live in a PM region of the server NIC's persistence
// domain (DDIO off); clients follow every nilext SEND with a 1-byte READ on
// the same QP; recovery re-executes the committed nilext requests. Handlers
// of a durable server must persist their own effects before returning.
//
// Across processes (a daemon-attached NIC, `ferry nicd`): serve() registers
// the server as a connection-manager service; clients connect with
// Client::connect (the address and service name) and learn the server's
// parameters from the handshake (docs/rpc-format.md, "Connecting").
//
// Threads: register handlers, then start(). With `threaded` each worker runs
// on its own thread (a fiber under the simulator's runtime, ServerOptions::
// runtime) from start() to stop(); otherwise the caller drives
// worker w with poll_worker(w) (deterministic tests). connect() may be called
// from any thread at any time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/common/clock.h"
#include "ferry/common/runtime.h"
#include "ferry/common/status.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"
#include "ferry/pm/region.h"
#include "ferry/rpc/durable_log.h"
#include "ferry/rpc/format.h"

namespace ferry::rpc {

enum class Mode : uint8_t { kRawRpc = 0, kDeferredExec, kOrderedQueue };
std::string_view mode_name(Mode m);
// "rawrpc", "deferred", "oq" (also "raw", "deferredexec", "ordered-queue").
Result<Mode> parse_mode(std::string_view name);

// What a handler is told about the request it executes.
struct Request {
  uint16_t type = 0;
  bool nilext = false;     // the client committed at the ACK: no one reads the reply
  uint32_t worker = 0;     // the executing worker (its data partition)
  uint64_t position = 0;   // place in the worker's SRQ order (buffer sequence * strides + stride)
  std::span<const uint8_t> payload;
  bool recovering = false; // re-executed by recovery after a power failure (durable mode)
  // What Admission::reserve returned for the receive buffer the request
  // landed in (0 without an Admission).
  uint64_t admission_token = 0;
};

// Where a handler writes its reply: a status byte and up to capacity() bytes.
class Reply {
 public:
  Reply(std::span<uint8_t> space) : space_(space) {}  // NOLINT(google-explicit-constructor)
  std::span<uint8_t> space() const { return space_; }
  size_t capacity() const { return space_.size(); }
  // The reply is the first `bytes` of space(); more than capacity() makes it
  // a kTooLarge error.
  void set_size(size_t bytes) { size_ = bytes; }
  // Copies `bytes` after what is already there.
  void append(std::span<const uint8_t> bytes);
  void set_status(uint8_t status) { status_ = status; }
  size_t size() const { return size_; }
  uint8_t status() const { return status_; }

 private:
  std::span<uint8_t> space_;
  size_t size_ = 0;
  uint8_t status_ = 0;
};

using Handler = std::function<void(const Request&, Reply&)>;

struct HandlerInfo {
  std::string name;
  // The request returns nothing and cannot fail by the server's state: only
  // then may a client mark it nilext (§3). A request that may fail by state
  // (a full store) must have the failure excluded before the client commits
  // (see Server::set_admission). Everything else is software-controlled.
  bool nilext = false;
  // Durable mode (§5.3): recovery executes the nilext requests from the
  // persisted ReqToExecute on, in order, and ReqToExecute lags the executed
  // ones (group commit, ServerOptions::req_to_execute_group). So after a power
  // failure any suffix of the executed nilext requests may run a second time,
  // in order, on top of its own effects. replay_safe declares that this leaves
  // the same state as running it once -- true of blind writes (put, remove),
  // not of requests that read state (copy(a->b) then put(a), re-run, changes
  // b), and more than idempotence of each request alone. A durable server
  // refuses a nilext handler without it.
  bool replay_safe = false;
};

// Admission (Server::set_admission). A nilext request commits at the NIC,
// before any server CPU has seen it, so a request that needs a resource to
// execute (a store's space) must have it set aside before the NIC can take
// it: per receive buffer, before the buffer is posted. A buffer the service
// cannot reserve for stays unposted, so the NIC answers new SENDs with RNR
// NAKs (clients wait, or fail kUnavailable with a finite rnr_retry) and
// nothing is committed that cannot execute. All three run on the worker's
// thread (or in start()), never concurrently for one worker.
struct Admission {
  // Before buffer `sequence` of `worker` is posted: set aside what any
  // requests that can land in it need (the service knows the buffer's size
  // from the server's options) and return a nonzero token naming it. Durable
  // mode persists the token with the buffer. An error means "not now": the
  // buffer waits, and the worker asks again each time it polls.
  std::function<Result<uint64_t>(uint32_t worker, uint64_t sequence)> reserve;
  // Durable recovery, before it re-executes requests of buffer `sequence`:
  // set aside again what `token` named before the power failure (the service
  // lost its memory of it). An error fails start().
  std::function<Status(uint32_t worker, uint64_t sequence, uint64_t token)> restore;
  // Every request of the buffer executed and none will run again: give back
  // what the requests did not use.
  std::function<void(uint32_t worker, uint64_t sequence, uint64_t token)> release;
};

struct ServerOptions {
  Mode mode = Mode::kOrderedQueue;
  uint32_t workers = 2;
  // Multi-packet SRQ (§5.2.1): each RECV is one buffer of buffer_bytes that
  // takes many requests, each at a stride_bytes boundary. Off: an ordinary
  // SRQ, one request per RECV of max_request_bytes.
  bool multi_packet = true;
  uint32_t stride_bytes = 64;
  uint32_t buffer_bytes = 16 << 10;  // the paper's 16 KB
  uint32_t buffers = 48;             // RECVs posted per worker (the paper's 48)
  uint32_t max_request_bytes = 4096;  // header included
  uint32_t max_response_bytes = 4096; // header included
  uint32_t max_connections = 1024;    // QPs per worker
  // Worker threads (false: the caller drives poll_worker()).
  bool threaded = true;
  std::vector<int> worker_cpus;  // pin worker w to worker_cpus[w % size] (empty: not pinned)
  // Durable OQ (JUNE BERRY-D): mode must be kOrderedQueue. The region is PM
  // on the server NIC's persistence domain (NicOptions::memory) and holds
  // `workers` areas of durable_layout().area_bytes() from durable_offset.
  pm::Region* durable_region = nullptr;
  size_t durable_offset = 0;
  // Resume from what the region holds (after a power failure): start()
  // scans each area and re-executes its committed nilext requests in order
  // (handlers see Request::recovering), then starts afresh. Without it,
  // start() initializes the areas.
  bool recover = false;
  // Durable mode: how many executed nilext requests may pass before the
  // worker persists ReqToExecute past them (a group commit). Nobody waits on
  // it: until it is durable, a power failure makes recovery execute those
  // requests again, in order, which is harmless because a durable server's
  // nilext handlers are replay_safe. It is also persisted before every
  // software response (a get's too), before a receive buffer is reposted, and
  // when the worker has found its CQ empty for req_to_execute_idle_us, so it
  // lags only under load, by at most this many requests. 1: after every poll
  // batch.
  uint32_t req_to_execute_group = 64;
  uint32_t req_to_execute_idle_us = 20;
  // A client that dies in the middle of a multi-packet SEND leaves the
  // strides the NIC gave its first packet unfilled, and execution in buffer
  // order would wait on them for good (the responder has no timer). When
  // the next position has waited this long while later ones completed, the
  // worker probes each of its connections with a zero-length RDMA WRITE:
  // a dead client's retries run out, its QP goes to the error state, and
  // the NIC completes the partial message with a flush error, which the
  // worker skips. Live clients only ACK it. 0: never probe.
  uint32_t stall_probe_us = 100'000;
  // The time req_to_execute_idle_us and stall_probe_us are measured in
  // (the only time the workers act on): null for the TSC; the simulator's
  // virtual clock there, so that a run does not depend on how fast the
  // machine is. When null and `runtime` is simulated, the runtime's clock.
  const Clock* clock = nullptr;
  // What runs the workers (threaded) and what an idle worker waits through:
  // null for real threads (Runtime::threads()); the simulator's SimRuntime
  // makes each worker a fiber on its one OS thread (docs/simulation.md).
  Runtime* runtime = nullptr;
  // White-box observation: called by the worker right before each request's
  // handler runs (recovery's re-executions included), on the worker's
  // thread. The simulator checks that a worker executes in buffer order;
  // `ferry bench oq` adds the paper's per-request server cost here, the same
  // busy work in every mode.
  std::function<void(const Request&)> on_execute;
};

// Counters of one worker (or their sum). Monotonic.
struct WorkerCounters {
  uint64_t requests = 0;        // executed (recovery included)
  uint64_t nilext = 0;          // ... of which nilext
  uint64_t replies = 0;         // software responses sent (replies, ACKs, errors)
  uint64_t acks = 0;            // DeferredExec software ACKs
  uint64_t errors = 0;          // kError responses (unknown type, not nilext, ...)
  uint64_t dropped = 0;         // not executed and not answerable (bad checksum, ...), or a reply after halt()
  uint64_t recv_errors = 0;     // receive completions with an error status
  uint64_t fillers = 0;         // multi-packet buffers retired by the NIC with a filler
  uint64_t reposts = 0;         // RECVs posted again after their buffer was executed
  uint64_t out_of_order = 0;    // completions that arrived ahead of an earlier buffer position
  uint64_t recovered = 0;       // nilext requests re-executed by recovery
  uint64_t recovery_skipped = 0;  // valid non-nilext requests recovery skipped
  uint64_t admission_refusals = 0;  // times posting stopped because Admission::reserve said not now
  uint64_t stall_probes = 0;        // times the worker probed its connections (ServerOptions::stall_probe_us)
  uint64_t busy_ns = 0;         // time spent handling completions (not polling empty CQs)
  WorkerCounters& operator+=(const WorkerCounters& o);
};

// What a client must know of a server to build its queues: what the CM
// handshake tells a remote client (and Server::info() an in-process one).
struct ServerInfo {
  Mode mode = Mode::kRawRpc;
  bool durable = false;
  uint32_t workers = 0;
  uint32_t max_request_bytes = 0;
  uint32_t max_response_bytes = 0;
  std::vector<uint16_t> nilext_types;  // the types a client may mark nilext, ascending
};

// What a client needs to talk to one worker (filled in by Server::connect).
struct WorkerEndpoint {
  uint32_t worker = 0;
  uint64_t flush_addr = 0;  // durable mode: a byte the client's 1-byte READ targets
  uint32_t flush_rkey = 0;
};

class Server {
 public:
  // `nic` (owned by `engine`) is the server host's NIC; both must outlive the
  // server. kInvalidArgument names a bad option.
  static Result<std::unique_ptr<Server>> create(nic::Engine& engine, nic::Nic& nic, const ServerOptions& options);
  // The same on any NIC: an in-process one (its Engine is nic.engine()) or a
  // daemon-attached one (the engine runs in the daemon; the server's
  // buffers are shared memory the daemon maps).
  static Result<std::unique_ptr<Server>> create(nic::Nic& nic, const ServerOptions& options);
  ~Server();  // stops the workers (and unserves); connected client QPs then see errors
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Before start(): every buffer is posted only after admission.reserve
  // succeeded for it (see Admission). kInvalidArgument if a function is missing.
  Status set_admission(Admission admission);

  // Before start(). kAlreadyExists if `type` has a handler; kInvalidArgument
  // for a nilext handler on a durable server without info.replay_safe.
  Status register_handler(uint16_t type, HandlerInfo info, Handler handler);

  // Builds the workers' queues, initializes or recovers the durable areas,
  // posts the receive buffers and (threaded) starts the worker threads.
  Status start();
  // Stops the worker threads (idempotent). Requests already committed by an
  // ACK but not executed stay unexecuted (durable mode: in PM, for recovery).
  void stop();
  // A crash of the host, as far as this server goes: from now on no worker
  // executes a request or sends anything (a handler already running
  // finishes, but its reply, ACK or probe is dropped), as a CPU that
  // stopped sends nothing. Thread-safe; stop() after it joins the workers.
  // A crash test calls it before it cuts the host off elsewhere, so a
  // handler that sees the cut cannot report it.
  void halt();

  // Manual mode: one pass of worker w (poll its CQ, execute what is next in
  // buffer order, repost buffers). Returns the completions handled.
  size_t poll_worker(uint32_t w);

  // Connects `client_qp` (RESET, on `client_nic`, with its own receive queue
  // for responses) to a new QP on worker w's SRQ. Thread-safe.
  Result<WorkerEndpoint> connect(uint32_t w, nic::QueuePair& client_qp, const nic::Nic& client_nic,
                                 const nic::ConnectOptions& options = {});

  // Serves connections as the CM service `service` of `listener` (after
  // start(); the listener must outlive the server or the server's
  // destruction, which unserves). Each CM request names a worker; the reply
  // carries the ServerInfo and the worker's endpoint. Errors: those of
  // Listener::serve.
  Status serve(cm::Listener& listener, std::string_view service);

  const ServerOptions& options() const;
  ServerInfo info() const;
  Mode mode() const;
  uint32_t workers() const;
  bool durable() const;
  DurableLayout durable_layout() const;
  // Whether a client may mark `type` nilext (its handler says so).
  bool nilext_allowed(uint16_t type) const;
  WorkerCounters counters(uint32_t w) const;
  // Receive buffers worker w has posted and not yet executed to the end
  // (fewer than options().buffers while Admission holds some back).
  uint32_t posted_buffers(uint32_t w) const;
  WorkerCounters counters() const;  // all workers
  // The recovery scans of the last start() with `recover` (one per worker).
  std::vector<ScanStats> recovery_stats() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::rpc
