// Chain recovery of `ferry store` across processes (docs/hyperloop-storage.md
// "Chain failure and recovery: across processes"): the pieces the replica and
// client processes share with nothing else. (What a member decides, and what
// it reads and writes in etcd, is hyperloop::StoreMember, store_member.h.)
//   - StoreCopyService / copy_store_regions: a joining spare READs a member's
//     data and lock regions with its NIC, through a CM service every replica
//     process serves independently of its Replicas.
//   - StoreChainMonitor: the client's thread that relays the members' beats
//     from etcd to its ChainManager.
//   - StoreReadSource: TxnClient::recover's view of the members' regions
//     through their read services (kTxnKvReadRegion).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/common/status.h"
#include "ferry/hyperloop/chain_manager.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/membership/store.h"
#include "ferry/membership/view.h"
#include "ferry/nic/verbs.h"
#include "ferry/rpc/client.h"
#include "store_config.h"

namespace ferry::apps {

// The copy service's REP private data: where the member's regions are.
struct StoreCopyReply {
  uint32_t magic = 0;
  uint32_t data_rkey = 0;
  uint32_t lock_rkey = 0;
  uint32_t reserved = 0;
  uint64_t data_iova = 0;
  uint64_t data_bytes = 0;
  uint64_t lock_iova = 0;
  uint64_t lock_bytes = 0;
};
inline constexpr uint32_t kStoreCopyMagic = 0x31595043;  // "CPY1"

// Serves `service` on `listener`: each request gets one of a few pre-made
// QPs (remote READ only) and, in the REP, both regions' addresses and keys
// (their MRs allow remote read and nothing else remote). The regions, the
// NIC and the listener must outlive it; destruction unserves first.
class StoreCopyService {
 public:
  static constexpr uint32_t kQps = 4;  // copies one process can serve in its life
  static Result<std::unique_ptr<StoreCopyService>> start(nic::Nic& nic, cm::Listener& listener,
                                                         const std::string& service, std::span<uint8_t> data,
                                                         std::span<uint8_t> locks);
  ~StoreCopyService();
  StoreCopyService(const StoreCopyService&) = delete;
  StoreCopyService& operator=(const StoreCopyService&) = delete;

 private:
  StoreCopyService() = default;
  cm::Listener* listener_ = nullptr;
  std::string service_;
  std::unique_ptr<nic::ProtectionDomain> pd_;
  std::unique_ptr<nic::MemoryRegion> data_mr_;
  std::unique_ptr<nic::MemoryRegion> lock_mr_;
  std::vector<std::unique_ptr<nic::CompletionQueue>> cqs_;
  std::vector<std::unique_ptr<nic::QueuePair>> qps_;
  std::mutex mu_;
  uint32_t used_ = 0;  // guarded by mu_ (the listener's thread takes QPs)
};

// Copies the member at `address`'s data and lock regions (its copy service
// `service`) into `data` and `locks` with RDMA READs, then persists `data`
// (msync: it is a file mapping, or anonymous shared memory). The sizes must
// match the member's. Returns the bytes copied. Errors name the address.
Result<uint64_t> copy_store_regions(nic::Nic& nic, const std::string& address, const std::string& service,
                                    std::span<uint8_t> data, std::span<uint8_t> locks, uint32_t timeout_ms);

// The chain's membership store (the [membership] table's etcd; the error
// names it), or nullptr when recovery is off (no [membership] table).
Result<std::unique_ptr<membership::MembershipStore>> open_store_membership(const StoreConfig& c);

// The client's relay of beats: a thread that every heartbeat_ms reads the
// beats prefix and hands each beat whose mod_revision advanced to
// manager.heartbeat(id, version) (which ignores non-members and stale
// versions, so the manager's missed-beat rule decides alone). A key seen
// for the first time is not a beat (it may be a dead member's last one);
// only its advances are. It also remembers when each id last beat, for
// choosing a live spare.
class StoreChainMonitor {
 public:
  StoreChainMonitor(membership::MembershipStore& store, hyperloop::ChainManager& manager, const StoreConfig& c);
  ~StoreChainMonitor();  // stops the thread
  StoreChainMonitor(const StoreChainMonitor&) = delete;
  StoreChainMonitor& operator=(const StoreChainMonitor&) = delete;

  // Whether `id`'s beat advanced within the last missed_beats beats.
  bool live(const std::string& id) const;
  // The last etcd error the thread met ("" if none), for messages.
  std::string last_error() const;
  // Whether the thread read the beats successfully within the last
  // missed_beats beats: if not, every member looks failed to the manager,
  // and no verdict of it may be acted on.
  bool current() const;

 private:
  void run();
  membership::MembershipStore& store_;
  hyperloop::ChainManager& manager_;
  const std::string prefix_;
  const uint32_t heartbeat_ms_;
  const uint32_t missed_beats_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::pair<membership::Revision, uint64_t>> seen_;  // id -> (mod_revision, when ns)
  std::string last_error_;
  uint64_t last_read_ns_ = 0;  // the last successful read of the beats
  std::thread thread_;
};

// The members' data regions through their read services, in the order of
// `sessions` (the new view's chain order). Pages by what a reply carries.
class StoreReadSource final : public hyperloop::TxnRecoverySource {
 public:
  explicit StoreReadSource(std::vector<rpc::Client*> members) : members_(std::move(members)) {}
  uint32_t members() const override { return static_cast<uint32_t>(members_.size()); }
  Status read(uint32_t member, uint64_t offset, std::span<uint8_t> out) override;
  uint64_t requests() const { return requests_; }

 private:
  std::vector<rpc::Client*> members_;
  uint64_t requests_ = 0;
};

}  // namespace ferry::apps
