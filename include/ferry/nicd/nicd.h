// The NIC daemon: one software RNIC per host that applications attach to
// (docs/nicd.md).
//
// `ferry nicd` runs a Daemon: an Engine thread driving one UDP-attached NIC
// (RoCEv2, docs/wire-format.md), and a control thread serving a Unix socket.
// An application opens it with Device::open and gets an ordinary nic::Nic:
// the verbs API is the same as for an in-process NIC. What differs is where
// things live:
//  - the rings, doorbell records and CQ indices of its objects are in a
//    memory file the daemon creates for each client and both map, so
//    posting and polling are plain loads and stores (no system call; the
//    client writes the daemon's eventfd only when the engine sleeps);
//  - memory it registers must be in a mapping the daemon can map too:
//    nic::SharedMemory (a memfd, or a file such as one on a DAX file system;
//    ferry/nic/shared_memory.h);
//    the NIC's DMA then lands in the application's pages directly;
//  - completion channels are eventfds the daemon writes.
// A client that dies (its socket closes) loses everything it owned: its QPs
// go to ERROR and are destroyed, its MRs deregistered, its mappings unmapped.
// A daemon that dies shows every client a device-fatal error: kUnavailable
// from every call, an AsyncEventType::kDeviceFatal event, channel waiters
// woken. Persistence (pm/) is not modeled across the process boundary: the
// daemon DMAs into the shared pages as into DRAM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ferry/common/status.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/shared_memory.h"
#include "ferry/nic/verbs.h"

namespace ferry::nicd {

inline constexpr std::string_view kDefaultSocketPath = "/run/ferry/nicd.sock";

struct DaemonOptions {
  std::string socket_path = std::string(kDefaultSocketPath);
  std::string name = "nicd";
  // The NIC's UDP socket: an address of a local interface and the RoCEv2
  // port (0: ephemeral, for tests).
  nic::UdpEndpoint bind{0x7F000001, nic::kRoceV2UdpPort};
  int engine_cpu = -1;             // pin the engine thread (-1: no pinning)
  uint64_t spin_ns = 200'000;      // engine polling after the last work
  // kShared: yield between passes while polling (nic::EngineOptions::SpinPolicy);
  // kBusy for a daemon with a core of its own.
  nic::EngineOptions::SpinPolicy spin_policy = nic::EngineOptions::SpinPolicy::kShared;
  size_t arena_bytes = 64u << 20;  // each client's memory file for rings and records (sparse)
  uint32_t max_clients = 64;
  nic::NicOptions nic;             // limits (max_qps, ...); name, udp and memory are set by the daemon
  // Seeded faults on the datagrams this daemon sends (loss, duplication,
  // delay that reorders): for tests where tc netem is unavailable. Off by default.
  nic::FaultModel faults;
};

class Daemon {
 public:
  // Binds the UDP socket and the Unix socket (an existing socket file is
  // replaced only if no daemon answers on it: kAlreadyExists otherwise),
  // and starts the engine and control threads.
  static Result<std::unique_ptr<Daemon>> start(const DaemonOptions& options);
  // Stops serving; attached clients see the device die.
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  nic::Nic& nic();
  nic::Engine& engine();
  const std::string& socket_path() const;
  size_t clients() const;           // attached now
  uint64_t clients_released() const;  // clients gone whose objects were released
  // Objects the daemon holds for its clients now (for tests and status).
  struct Census {
    size_t qps = 0, cqs = 0, srqs = 0, mrs = 0, segments = 0;
  };
  Census census() const;

  class Impl;

 private:
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct OpenOptions {
  std::string socket_path = std::string(kDefaultSocketPath);
  std::string client_name;  // for the daemon's logs
  int timeout_ms = 5000;    // per control request
};

// A NIC served by a daemon. Destroy every verbs object before the Device.
class Device {
 public:
  // kUnavailable if no daemon listens at the socket path (with the path and
  // the errno), kFailedPrecondition for a protocol version mismatch.
  static Result<std::unique_ptr<Device>> open(const OpenOptions& options = {});
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  nic::Nic& nic();

  class Impl;

 private:
  explicit Device(std::unique_ptr<nic::Nic> nic);
  std::unique_ptr<nic::Nic> nic_;
};

// Memory a daemon-attached NIC can register: a mapping the daemon maps too.
// It belongs to the NIC layer (ferry/nic/shared_memory.h), where the RPC
// layer and the protocols allocate it without depending on the daemon; the
// daemon's users may name it here.
using SharedMemory = nic::SharedMemory;

}  // namespace ferry::nicd
