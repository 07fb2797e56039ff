// The Naive-RDMA baseline of HyperLoop §6: the same API and the same network
// operations as HyperLoop, but every replica's CPU is on the critical path.
// A replica application thread takes each operation's RECV completion,
// parses the metadata, applies the operation (posting the forwarding WRITE
// and 0-byte READ itself; doing CAS and memcpy with the CPU) and forwards
// the metadata to the next replica; the tail acknowledges the client.
//
// Two ways for replica threads to learn of a RECV:
//  - kEvent: each replica has its own thread, which blocks on a completion
//    channel (ibv_req_notify_cq + ibv_get_cq_event) -- the multi-tenant
//    server that cannot afford a core per replica;
//  - kPoll: one thread busy-polls the receive queues of every replica of the
//    client's groups -- the paper's "pinned core for best case performance".
//
// The NIC engine must run on a real clock (threaded, or a manual engine the
// client steps): replica threads run in real time.
#pragma once

#include <memory>
#include <string_view>

#include "ferry/hyperloop/group.h"
#include "ferry/hyperloop/hyperloop.h"  // RemoteGroupOptions

namespace ferry::hyperloop {

enum class NaiveMode : uint8_t { kEvent, kPoll };

struct NaiveOptions {
  NaiveMode mode = NaiveMode::kEvent;
  int replica_cpu = -1;  // pin replica threads to this CPU (-1: no pinning)
  ClientOptions client;
};

class NaiveClient final : public GroupClient {
 public:
  static Result<std::unique_ptr<NaiveClient>> create(nic::Engine& engine, const NaiveOptions& options = {});
  // A client on `nic` (daemon-attached, or of an Engine) whose groups are
  // connected to NaiveReplicas in other processes (connect_group). Its
  // options' mode and replica_cpu are the replicas' business there.
  static Result<std::unique_ptr<NaiveClient>> create(nic::Nic& nic, const NaiveOptions& options = {});
  ~NaiveClient() override;  // stops the replica threads, then tears down

  // As HyperLoopClient::connect_group, for a chain of NaiveReplicas.
  Result<GroupId> connect_group(const RemoteGroupOptions& options);

  std::string_view system() const override;
  Result<GroupId> create_group(const GroupOptions& options) override;
  Result<std::span<uint8_t>> client_memory(GroupId gid) override;
  Result<ReplicaView> replica(GroupId gid, uint32_t index) override;
  Result<GroupOptions> group_options(GroupId gid) const override;
  Status gwrite_async(GroupId gid, uint64_t offset, uint32_t size, bool flush, Callback done) override;
  Status gcas_async(GroupId gid, uint64_t offset, uint64_t old_value, uint64_t new_value, uint8_t execute_map,
                    bool flush, Callback done) override;
  Status gmemcpy_async(GroupId gid, uint64_t src_offset, uint64_t dst_offset, uint32_t size, bool flush,
                       Callback done) override;
  Status gflush_async(GroupId gid, Callback done) override;
  Result<uint32_t> outstanding(GroupId gid) const override;
  uint64_t replica_cpu_ns() const override;
  Result<WireBytes> wire_bytes(GroupId gid) const override;

  struct Impl;

 protected:
  size_t poll_completions() override;

 private:
  NaiveClient(nic::Engine* engine, const NaiveOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::hyperloop
