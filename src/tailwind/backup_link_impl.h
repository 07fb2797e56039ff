// BackupLink's state, shared with the log that drives its data path.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "ferry/rpc/client.h"
#include "ferry/tailwind/replicated_log.h"

namespace ferry::tailwind {

struct BackupLink::Impl {
  std::string name;
  uint64_t log_id = 0;
  uint64_t route = 0;  // of every call: one worker, so calls execute in order
  std::unique_ptr<rpc::Client> client;  // one session
  // Data path (kTailwind): the log's WRITEs and FLUSHes to the backup. Its
  // own PD: the log registers each segment in every link's PD.
  std::unique_ptr<nic::ProtectionDomain> pd;
  std::unique_ptr<nic::CompletionQueue> cq;
  std::unique_ptr<nic::QueuePair> qp;

  rpc::Session& session() { return client->session(0); }
  // The data path's PD, CQ and QP (RESET) on the primary's `nic`.
  Status create_data_path(nic::Nic& nic);
  // A synchronous control call; an error reply becomes its Status.
  Result<rpc::CallReply> call(uint16_t type, std::span<const uint8_t> payload);

  ~Impl() {
    qp.reset();
    cq.reset();
    client.reset();
  }
};

}  // namespace ferry::tailwind
