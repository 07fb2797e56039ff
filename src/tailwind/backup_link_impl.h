// BackupLink's state, shared with the log that drives its data path.
#pragma once

#include <functional>
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
  nic::Nic* nic = nullptr;  // the primary's (data path)
  // Connects `qp` (RESET) to the backup for this log: in process, or
  // through the connection manager. Kept for reconnect_data_path().
  std::function<Status(nic::QueuePair& qp)> connect_qp;

  rpc::Session& session() { return client->session(0); }
  // The data path's PD, CQ and QP (RESET) on the primary's `nic`.
  Status create_data_path(nic::Nic& nic);
  // A new CQ and QP in the same PD (the log's segment registrations stay
  // valid), connected again; the old QP's completions must have been
  // polled. The backup replaces its end of the connection (it refuses
  // while it still holds a buffer registered for the old one).
  Status reconnect_data_path();
  Status create_queues();
  // A synchronous control call; an error reply becomes its Status.
  Result<rpc::CallReply> call(uint16_t type, std::span<const uint8_t> payload);

  ~Impl() {
    qp.reset();
    cq.reset();
    client.reset();
  }
};

}  // namespace ferry::tailwind
