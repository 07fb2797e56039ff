// HyperLoop (SIGCOMM'18 §4): group primitives executed by the replicas' NICs.
//
// At group creation each replica pre-posts, for every primitive, a chain of
// work requests that its NIC runs with no CPU: a RECV from upstream whose
// scatter list rewrites the pre-posted WQEs of the operation (addresses,
// lengths, opcodes: remote work-request manipulation), a WAIT on that RECV's
// completion queue, the operation's WQEs (forwarding WRITE, loopback CAS or
// copy, 0-byte READ for gFLUSH), the forwarding SEND, and the enables that
// hand the next operation's WQEs to the NIC. The tail acknowledges the client
// with WRITE_WITH_IMM. The client re-arms the rings lap after lap by writing
// the next lap's control WQE images with RDMA WRITE, so after setup no replica
// CPU does anything. docs/hyperloop.md specifies the metadata and every chain.
#pragma once

#include <memory>
#include <string_view>

#include "ferry/hyperloop/group.h"

namespace ferry::hyperloop {

struct HyperLoopStats {
  uint64_t ops_completed = 0;
  uint64_t rearm_batches = 0;     // control-ring laps re-armed by the client
  uint64_t rearm_bytes = 0;       // WQE image bytes written to replicas for that
  uint64_t rearm_waits = 0;       // submissions that waited for a re-arm to land
  uint64_t window_waits = 0;      // submissions that waited for room in the window
};

class HyperLoopClient final : public GroupClient {
 public:
  static Result<std::unique_ptr<HyperLoopClient>> create(nic::Engine& engine, const ClientOptions& options = {});
  ~HyperLoopClient() override;

  std::string_view system() const override { return "hyperloop"; }
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

  HyperLoopStats stats() const;

  struct Impl;

 protected:
  size_t poll_completions() override;

 private:
  explicit HyperLoopClient(nic::Engine& engine, const ClientOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::hyperloop
