// The NIC daemon's request handling, apart from its sockets (internal
// header): the daemon's control thread and the fuzz target drive it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "../nic/hosting.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"
#include "protocol.h"

namespace ferry::nicd {

// A client's memory file for rings and records: first-fit over 4 KiB pages.
class Arena final : public nic::detail::RecordArena {
 public:
  static Result<std::unique_ptr<Arena>> create(size_t bytes);
  ~Arena() override;
  uint8_t* allocate(size_t bytes) override;
  void release(uint8_t* ptr, size_t bytes) override;
  int fd() const { return fd_; }
  uint8_t* base() const { return base_; }
  size_t size() const { return size_; }

 private:
  Arena() = default;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::map<size_t, size_t> free_;  // offset -> bytes
};

// A client mapping the daemon also maps.
struct Segment {
  uint32_t id = 0;
  uint64_t client_base = 0;
  uint64_t length = 0;
  uint8_t* daemon_base = nullptr;
  size_t map_offset = 0;  // daemon_base - map_base (page alignment of the file offset)
  bool arena = false;     // the client's arena (not unmapped separately)
};

struct Client {
  uint32_t id = 0;
  int sock = -1;
  std::string name;
  bool hello_done = false;
  std::unique_ptr<Arena> arena;
  nic::detail::DoorbellRing* doorbells = nullptr;
  std::vector<Segment> segments;
  uint32_t next_segment = 1;
  std::set<uint32_t> pds, mrs, cqs, srqs, qps;
  std::map<uint32_t, std::unique_ptr<nic::detail::HostedChannel>> channels;
  uint32_t next_channel = 1;
  std::deque<nic::AsyncEvent> events;
};

struct Reply {
  std::vector<uint8_t> bytes;
  std::vector<int> fds;  // sent beside the reply; they stay open (the daemon keeps owning them)
  bool drop = false;     // protocol violation: disconnect the client
};

class Server {
 public:
  // `device_page_fd`: the memory file holding the engine's park flag.
  Server(nic::Engine* engine, nic::Nic* nic, size_t arena_bytes, int device_page_fd);
  ~Server();

  Client* add_client(int sock);
  // Handles one message from `client`; consumes `fds` (closing what it does
  // not keep).
  Reply handle(Client* client, const uint8_t* msg, size_t len, std::vector<int> fds);
  // Releases everything the client owned (its QPs to ERROR first) and
  // forgets it. Closes its socket.
  void release(Client* client);
  size_t clients() const;
  uint64_t released() const;
  struct Census {
    size_t qps = 0, cqs = 0, srqs = 0, mrs = 0, segments = 0;
  };
  Census census() const;

 private:
  Status dispatch(Client& c, proto::Op op, proto::Reader& r, std::vector<int>& fds, proto::Writer& out, Reply& reply);
  Result<uint8_t*> translate(const Client& c, uint64_t addr, uint64_t length) const;
  // Adds a client's new object to one of its sets (under mu_: census reads them).
  void remember(std::set<uint32_t>& objects, uint32_t number);
  void route_async_events();
  void run(const std::function<void()>& fn) { engine_->run_control(fn); }

  nic::Engine* engine_;
  nic::Nic* nic_;
  nic::detail::NicHosting hosting_;  // the NIC's control operations for clients (engine thread)
  size_t arena_bytes_;
  int device_page_fd_;
  mutable std::mutex mu_;  // guards clients_ for census/clients from other threads
  std::vector<std::unique_ptr<Client>> clients_;
  uint32_t next_client_ = 1;
  uint64_t released_ = 0;
};

}  // namespace ferry::nicd
