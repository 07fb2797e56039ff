// Ferry's two-sided RPC layer: the client side.
//
// A Client is one client machine: a NIC and `sessions` sessions, one per
// client thread. A call names a request type, a route (hash(key); the
// request goes to worker route % workers, the worker that owns that
// partition of the data) and a payload, and whether it is nilext. How it
// commits depends on the server's mode:
//   nilext, Ordered Queue       at the hardware ACK of its SEND (Commit::kHardwareAck)
//   nilext, durable OQ          at the completion of a 1-byte READ posted behind
//                               the unsignaled SEND with one doorbell (kPersistentAck)
//   nilext, DeferredExec        at the worker's software ACK (kSoftwareAck)
//   everything else             at the worker's reply (kReply)
// A client may mark a request nilext only if the server registered its type
// as nilext (Server::nilext_allowed); otherwise the call is refused locally.
//
// Client-side delegation (§5.2.2, ClientOptions::delegation): one QP per
// server worker for the whole machine instead of one per session and worker.
// Session (w % sessions) owns the QP to worker w; other sessions publish
// their requests into the owner's inbox, and the owner posts them, collects
// their completions and hands results back. Every session must then keep
// calling poll() (its synchronous calls do) for as long as any session has
// calls in flight, since it carries other sessions' requests.
//
// Threads: each Session is used by one thread at a time; different sessions
// by different threads. Callbacks run inside that session's poll() (or its
// synchronous calls).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "ferry/common/runtime.h"
#include "ferry/common/status.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"
#include "ferry/rpc/server.h"

namespace ferry::rpc {

enum class Commit : uint8_t {
  kNone = 0,        // failed before committing
  kReply,           // the worker executed it and replied
  kSoftwareAck,     // DeferredExec: the worker acknowledged before executing
  kHardwareAck,     // OQ: the server NIC's ACK of the SEND
  kPersistentAck,   // durable OQ: the completion of the READ behind the SEND
};
const char* commit_name(Commit c);

struct CallResult {
  // ok, or why the call failed: kUnavailable (the connection failed: the
  // NIC's completion status is in the message), kNotFound (unknown type at
  // the server), kInvalidArgument (the server refused it as malformed or
  // not nilext), kResourceExhausted (the reply did not fit).
  Status status;
  Commit commit = Commit::kNone;
  uint8_t app_status = 0;            // the handler's status byte (kReply)
  std::span<const uint8_t> payload;  // the reply's bytes; valid only during the callback
};
using Callback = std::function<void(const CallResult&)>;

// A synchronous call's result, owning its reply bytes.
struct CallReply {
  Commit commit = Commit::kNone;
  uint8_t app_status = 0;
  std::vector<uint8_t> payload;
};

struct ClientOptions {
  uint32_t sessions = 1;        // client threads of this machine
  bool delegation = false;      // §5.2.2: one QP per server worker for the whole machine
  uint32_t max_inflight = 32;   // calls in flight per session (its own)
  uint64_t timeout_ns = 10'000'000'000ULL;  // a synchronous call gives up (kTimedOut)
  nic::ConnectOptions connect;  // transport parameters (MTU, retries, RNR)
  // What a synchronous call waits through and whose clock its timeout reads:
  // null for real threads and the steady clock (Runtime::threads()); under
  // the simulator's SimRuntime an idle wait parks the calling fiber and the
  // timeout is in virtual time. Client::create (an in-process server) takes
  // the server's runtime when this is null.
  Runtime* runtime = nullptr;
};

struct SessionCounters {
  uint64_t calls = 0;          // calls submitted
  uint64_t committed = 0;      // ... that committed
  uint64_t failed = 0;         // ... that failed
  uint64_t delegated = 0;      // calls this session handed to an owner
  uint64_t carried = 0;        // other sessions' calls this session posted as owner
  uint64_t stray_responses = 0;  // responses matching no call in flight (counted, dropped)
};

class Client;

class Session {
 public:
  // Sends a call; `done` runs once, inside poll(), at commit or failure.
  // Errors returned here mean nothing was sent: kInvalidArgument (payload
  // too large for the server's max_request_bytes, or nilext for a type that
  // cannot be), kResourceExhausted (max_inflight calls in flight: poll and
  // retry), kUnavailable (the connection to that worker failed earlier).
  Status call_async(uint16_t type, uint64_t route, std::span<const uint8_t> payload, bool nilext, Callback done);
  // Sends a call and polls until it commits or fails, or timeout_ns passes
  // (kTimedOut; the call may still execute). With a manual engine it steps
  // the engine while waiting if this thread may (Engine::may_step: no
  // driver thread named, or this is it); the server's workers must then be
  // threaded (they never step an engine they do not drive), and no other
  // thread may step the engine meanwhile. Under a simulated runtime
  // (ClientOptions::runtime) it never steps the engine itself: an idle wait
  // parks the calling fiber, and the timeout is virtual time.
  Result<CallReply> call(uint16_t type, uint64_t route, std::span<const uint8_t> payload, bool nilext);
  // Handles completions (and, with delegation, other sessions' requests and
  // results); returns how many events it handled.
  size_t poll();

  uint32_t index() const { return index_; }
  uint32_t inflight() const;  // own calls not yet finished (committed calls may still hold a slot)
  SessionCounters counters() const;

  struct Impl;
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  friend class Client;
  friend struct ClientBuilder;
  Session(uint32_t index, std::unique_ptr<Impl> impl);
  uint32_t index_;
  std::unique_ptr<Impl> impl_;
};

class Client {
 public:
  // Creates the client machine's queues on `nic` and connects them to every
  // worker of `server` (which must be started). `engine`, `nic` and `server`
  // must outlive the client.
  static Result<std::unique_ptr<Client>> create(nic::Engine& engine, nic::Nic& nic, Server& server,
                                                const ClientOptions& options);
  // Connects to a server in another process (or host) through the CM: its
  // listener at `address` ("host:port") serving `service` (Server::serve).
  // `nic` may be in-process or daemon-attached and must outlive the client.
  // With `expect` (what the configuration says of the server) every
  // handshake is checked against it and a server that differs is refused
  // (kFailedPrecondition, naming both); without, a first handshake with
  // worker 0 learns the server's parameters (and leaves an idle QP on it). Errors: those of cm::connect
  // (kUnavailable when nothing listens there, kNotFound for an unknown
  // service, kTimedOut), with the address in the message.
  static Result<std::unique_ptr<Client>> connect(nic::Nic& nic, std::string_view address, std::string_view service,
                                                 const ClientOptions& options,
                                                 const ServerInfo* expect = nullptr);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Session& session(uint32_t i);
  uint32_t sessions() const;
  const ClientOptions& options() const;
  // QPs this machine holds to the server (sessions x workers, or workers with delegation).
  uint32_t queue_pairs() const;

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::rpc
