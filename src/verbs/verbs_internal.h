// libibverbs over the NIC daemon (docs/verbs-compat.md): the objects behind
// the ibv_* structures a verbs program holds.
//
// Each libibverbs structure is the first member of a Ferry object, so the
// pointer the program holds converts back (the structures are C layouts
// from Debian's libibverbs-dev, which programs were compiled against).
// The context is not an extended verbs_context (abi_compat is not
// __VERBS_ABI_IS_EXTENDED): verbs.h's inline extended calls see no ops and
// return EOPNOTSUPP or fall back to the legacy call, as with an old
// provider.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ferry/nic/shared_memory.h"
#include "ferry/nic/verbs.h"
#include "ferry/nicd/nicd.h"

// verbs.h makes these macros over inline wrappers; the library defines the
// exported functions under the real names.
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace ferry::verbs {

struct FerryDevice {
  ibv_device dev;  // first: the program's ibv_device* converts back
  std::string socket_path;
  uint64_t guid = 0;  // network order
  int index = 0;
};

// Memory adopted into a memory file for MRs (SharedMemory::adopt): a page
// range of the process, shared by the MRs inside it, of any context (each
// daemon maps the file); released when its last MR is.
struct Adopted {
  nic::SharedMemory memory;
  int mrs = 0;
};

struct FerryContext {
  ibv_context ctx;  // first
  std::unique_ptr<nicd::Device> device;
  nic::Nic* nic = nullptr;
  uint16_t udp_port = nic::kRoceV2UdpPort;  // the port peers are assumed to use too
  std::atomic<int> objects{0};              // live PDs, CQs, channels, QPs, SRQs, MRs
};

struct FerryPd {
  ibv_pd pd;  // first
  std::unique_ptr<nic::ProtectionDomain> pd_;
  std::atomic<int> users{0};  // MRs, QPs and SRQs on it
};

struct FerryMr {
  ibv_mr mr;  // first
  std::unique_ptr<nic::MemoryRegion> mr_;
  Adopted* adopted = nullptr;  // the pages it made shared, if it did
};

struct FerryCq;
struct FerryChannel {
  ibv_comp_channel ch;  // first
  std::unique_ptr<nic::CompletionChannel> ch_;
  std::mutex mu;
  std::unordered_map<const nic::CompletionQueue*, FerryCq*> cqs;
};

struct FerryCq {
  ibv_cq cq;  // first
  std::unique_ptr<nic::CompletionQueue> cq_;
  std::atomic<int> users{0};  // QPs using it
};

struct FerrySrq {
  ibv_srq srq;  // first
  std::unique_ptr<nic::SharedReceiveQueue> srq_;
  uint32_t max_sge = 0;       // as created
  std::atomic<int> users{0};  // QPs on it
};

struct FerryQp {
  ibv_qp qp;  // first
  std::unique_ptr<nic::QueuePair> qp_;
  bool sq_sig_all = false;
  ibv_ah_attr ah{};  // as last set by modify_qp
};

inline FerryContext* ctx_of(ibv_context* c) { return reinterpret_cast<FerryContext*>(c); }
inline FerryContext* ctx_of(ibv_pd* pd) { return ctx_of(pd->context); }

inline ibv_mtu mtu_enum(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

// The one GID of a device's port, as a GID-table entry.
inline void fill_gid_entry(ibv_context* context, ibv_gid_entry* entry) {
  *entry = ibv_gid_entry{};
  const nic::Gid gid = ctx_of(context)->nic->gid();
  std::memcpy(entry->gid.raw, gid.raw.data(), sizeof(entry->gid.raw));
  entry->port_num = 1;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
}

// Maps a Ferry status to the errno a provider returns for it.
int errno_for(const Status& s);
// Sets errno and returns nullptr (the object-creating calls' failure).
template <typename T>
T* fail(int err) {
  errno = err;
  return nullptr;
}
// Prints why a call failed when FERRY_VERBS_DEBUG is set (a provider is
// silent otherwise, as rdma-core's are without their debug variables).
void debug_log(const std::string& what);

// The data path (data_path.cc): the ops verbs.h's inline functions call.
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

}  // namespace ferry::verbs
