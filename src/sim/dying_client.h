// A JUNE BERRY client that dies right after its SEND (the simulator's
// dying client, src/sim/juneberry.cc): a raw QP to one worker, a sealed
// nilext request sent, and no READ behind it, so nothing drains it from
// the server NIC's buffer and its outcome is never learnt.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "ferry/nic/connect.h"
#include "ferry/nic/verbs.h"
#include "ferry/rpc/format.h"
#include "ferry/rpc/server.h"
#include "ferry/store/kv_service.h"

namespace ferry::sim {

class DyingClient {
 public:
  DyingClient(nic::Nic& nic, rpc::Server& server, uint32_t worker, const nic::ConnectOptions& connect) {
    pd_ = nic.alloc_pd().value();
    cq_ = nic.create_cq({}).value();
    mem_.assign(4096, 0);
    mr_ = nic.reg_mr(*pd_, mem_.data(), mem_.size(), nic::kAccessLocalWrite).value();
    nic::QpInitAttr a;
    a.send_cq = a.recv_cq = cq_.get();
    qp_ = nic.create_qp(*pd_, a).value();
    ok_ = server.connect(worker, *qp_, nic, connect).ok();
  }
  bool send(store::KvRequestType type, std::string_view key, std::string_view value, uint64_t id) {
    if (!ok_) return false;
    const size_t n = store::encode_kv(std::span<uint8_t>(mem_.data() + rpc::kRequestHeaderBytes, 2048), key, value);
    const uint32_t size = rpc::seal_request(std::span<uint8_t>(mem_.data(), mem_.size()), type, rpc::kRequestNilext, id,
                                            0, static_cast<uint32_t>(n));
    const nic::Sge sge = mr_->sge(0, size);
    nic::SendWr wr;
    wr.opcode = nic::WrOpcode::kSend;
    wr.sg_list = std::span<const nic::Sge>(&sge, 1);
    return qp_->post_send(wr).ok();
  }

 private:
  std::unique_ptr<nic::ProtectionDomain> pd_;
  std::unique_ptr<nic::CompletionQueue> cq_;
  std::vector<uint8_t> mem_;
  std::unique_ptr<nic::MemoryRegion> mr_;
  std::unique_ptr<nic::QueuePair> qp_;
  bool ok_ = false;
};

}  // namespace ferry::sim
