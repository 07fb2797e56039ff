// Chain recovery of `ferry store` across processes (store_recovery.h).
#include "store_recovery.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "ferry/common/clock.h"
#include "ferry/hyperloop/txn_kv_wire.h"

namespace ferry::apps {

namespace {

// The copy READs in chunks of this size, this many at once.
constexpr uint32_t kStoreCopyChunk = 64 << 10;
constexpr uint32_t kStoreCopyDepth = 8;

}  // namespace

// ---- the copy service (every replica process) ----

Result<std::unique_ptr<StoreCopyService>> StoreCopyService::start(nic::Nic& nic, cm::Listener& listener,
                                                                  const std::string& service,
                                                                  std::span<uint8_t> data, std::span<uint8_t> locks) {
  std::unique_ptr<StoreCopyService> s(new StoreCopyService());
  s->service_ = service;
  FERRY_ASSIGN_OR_RETURN(s->pd_, nic.alloc_pd());
  FERRY_ASSIGN_OR_RETURN(s->data_mr_, nic.reg_mr(*s->pd_, data.data(), data.size(), nic::kAccessRemoteRead));
  FERRY_ASSIGN_OR_RETURN(s->lock_mr_, nic.reg_mr(*s->pd_, locks.data(), locks.size(), nic::kAccessRemoteRead));
  // The QPs are made here, on the caller's thread: the listener's thread
  // only hands them out.
  for (uint32_t i = 0; i < kQps; ++i) {
    nic::CqInitAttr cq;
    cq.cqe = 4;
    FERRY_ASSIGN_OR_RETURN(auto c, nic.create_cq(cq));
    nic::QpInitAttr qa;
    qa.send_cq = qa.recv_cq = c.get();
    qa.cap.max_send_wr = 1;
    qa.cap.max_recv_wr = 1;
    FERRY_ASSIGN_OR_RETURN(auto qp, nic.create_qp(*s->pd_, qa));
    s->cqs_.push_back(std::move(c));
    s->qps_.push_back(std::move(qp));
  }
  StoreCopyReply reply;
  reply.magic = kStoreCopyMagic;
  reply.data_rkey = s->data_mr_->rkey();
  reply.lock_rkey = s->lock_mr_->rkey();
  reply.data_iova = s->data_mr_->iova();
  reply.data_bytes = data.size();
  reply.lock_iova = s->lock_mr_->iova();
  reply.lock_bytes = locks.size();
  cm::Service svc;
  svc.nic = &nic;
  svc.qp.access_flags = nic::kAccessRemoteRead;  // a joining member only reads
  StoreCopyService* self = s.get();
  svc.accept = [self, reply](const cm::Request&) -> Result<cm::Accepted> {
    std::lock_guard<std::mutex> lock(self->mu_);
    if (self->used_ == kQps) {
      return resource_exhausted("this member has served its " + std::to_string(kQps) + " region copies");
    }
    cm::Accepted a;
    a.qp = self->qps_[self->used_++].get();
    a.private_data = cm::private_data_of(reply);
    return a;
  };
  FERRY_RETURN_IF_ERROR(listener.serve(service, std::move(svc)));
  s->listener_ = &listener;
  return s;
}

StoreCopyService::~StoreCopyService() {
  if (listener_ != nullptr) (void)listener_->unserve(service_);
}

Result<uint64_t> copy_store_regions(nic::Nic& nic, const std::string& address, const std::string& service,
                                    std::span<uint8_t> data, std::span<uint8_t> locks, uint32_t timeout_ms) {
  const std::string from = "copying the regions of " + address + ": ";
  FERRY_ASSIGN_OR_RETURN(auto pd, nic.alloc_pd());
  FERRY_ASSIGN_OR_RETURN(auto data_mr, nic.reg_mr(*pd, data.data(), data.size(), nic::kAccessLocalWrite));
  FERRY_ASSIGN_OR_RETURN(auto lock_mr, nic.reg_mr(*pd, locks.data(), locks.size(), nic::kAccessLocalWrite));
  nic::CqInitAttr cqa;
  cqa.cqe = 2 * kStoreCopyDepth;
  FERRY_ASSIGN_OR_RETURN(auto cq, nic.create_cq(cqa));
  nic::QpInitAttr qa;
  qa.send_cq = qa.recv_cq = cq.get();
  qa.cap.max_send_wr = kStoreCopyDepth;
  qa.cap.max_recv_wr = 1;
  FERRY_ASSIGN_OR_RETURN(auto qp, nic.create_qp(*pd, qa));
  cm::ConnectOptions co;
  co.timeout_ms = timeout_ms;
  co.qp.access_flags = 0;
  auto conn = cm::connect(address, service, nic, *qp, {}, co);
  if (!conn.ok()) return Status(conn.status().code(), from + conn.status().message());
  auto reply = cm::private_data_as<StoreCopyReply>(conn.value().private_data);
  if (!reply.ok() || reply->magic != kStoreCopyMagic) return invalid_argument(from + "not a store copy service");
  if (reply->data_bytes != data.size() || reply->lock_bytes != locks.size()) {
    return invalid_argument(from + "its regions are " + std::to_string(reply->data_bytes) + " and " +
                            std::to_string(reply->lock_bytes) + " bytes, this member's " +
                            std::to_string(data.size()) + " and " + std::to_string(locks.size()) +
                            " (another configuration?)");
  }
  struct Piece {
    nic::MemoryRegion* local;
    uint64_t remote;
    uint32_t rkey;
    uint64_t bytes;
  };
  const Piece pieces[] = {{data_mr.get(), reply->data_iova, reply->data_rkey, data.size()},
                          {lock_mr.get(), reply->lock_iova, reply->lock_rkey, locks.size()}};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  uint64_t copied = 0;
  for (const Piece& p : pieces) {
    uint64_t posted = 0, done = 0;
    uint32_t in_flight = 0;
    while (done < p.bytes) {
      while (in_flight < kStoreCopyDepth && posted < p.bytes) {
        const auto len = static_cast<uint32_t>(std::min<uint64_t>(kStoreCopyChunk, p.bytes - posted));
        const nic::Sge sge = p.local->sge(posted, len);
        nic::SendWr rd;
        rd.opcode = nic::WrOpcode::kRdmaRead;
        rd.wr_id = len;
        rd.flags = nic::kSendSignaled;
        rd.sg_list = std::span<const nic::Sge>(&sge, 1);
        rd.remote_addr = p.remote + posted;
        rd.rkey = p.rkey;
        FERRY_RETURN_IF_ERROR(qp->post_send(rd));
        posted += len;
        ++in_flight;
      }
      nic::WorkCompletion wcs[kStoreCopyDepth];
      FERRY_ASSIGN_OR_RETURN(const uint32_t got, cq->poll(wcs));
      for (uint32_t j = 0; j < got; ++j) {
        if (wcs[j].status != nic::WcStatus::kSuccess) {
          return unavailable(from + "a READ failed: " + std::string(nic::wc_status_name(wcs[j].status)));
        }
        done += wcs[j].wr_id;
        --in_flight;
      }
      if (got == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          return timed_out(from + "the READs did not complete within " + std::to_string(timeout_ms) + " ms");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    copied += p.bytes;
  }
  // The data region is the member's persistent memory (a file mapping):
  // what arrived is durable before the member serves it.
  if (::msync(data.data(), data.size(), MS_SYNC) != 0) {
    return unavailable(from + "msync of the data region failed: " + std::string(std::strerror(errno)));
  }
  return copied;
}

Result<std::unique_ptr<membership::MembershipStore>> open_store_membership(const StoreConfig& c) {
  if (!c.recovery) return std::unique_ptr<membership::MembershipStore>();
  auto opened = membership::open_store(c.membership.etcd);
  if (!opened.ok()) {
    return Status(opened.status().code(), "[membership] etcd = " + c.membership.etcd + ": " + opened.status().message());
  }
  return opened;
}

// ---- the client's beat relay ----

StoreChainMonitor::StoreChainMonitor(membership::MembershipStore& store, hyperloop::ChainManager& manager,
                                     const StoreConfig& c)
    : store_(store),
      manager_(manager),
      prefix_(c.beats_prefix()),
      heartbeat_ms_(c.membership.heartbeat_ms),
      missed_beats_(c.membership.missed_beats),
      thread_([this] { run(); }) {}

StoreChainMonitor::~StoreChainMonitor() {
  stop_ = true;
  thread_.join();
}

void StoreChainMonitor::run() {
  while (!stop_) {
    auto r = store_.get(membership::KeySpan::prefix(prefix_));
    const uint64_t now = SteadyClock::instance().now_ns();
    if (!r.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = r.status().message();
    } else {
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_read_ns_ = now;
      }
      for (const membership::KeyValue& kv : r->kvs) {
        const std::string id = kv.key.substr(prefix_.size());
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = seen_.find(id);
          if (it == seen_.end()) {
            // First sight: the key may be a long-dead member's last beat.
            // Only an advance from here on is a beat.
            seen_[id] = {kv.mod_revision, 0};
            continue;
          }
          if (it->second.first >= kv.mod_revision) continue;
          it->second = {kv.mod_revision, now};
        }
        char* end = nullptr;
        const uint64_t version = std::strtoull(kv.value.c_str(), &end, 10);
        if (end == kv.value.c_str() || *end != '\0') continue;  // not a beat: ignored
        // A non-member or a member serving an older view is refused: that
        // beat does not count, which is the manager's rule.
        (void)manager_.heartbeat(id, version);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(heartbeat_ms_));
  }
}

bool StoreChainMonitor::live(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = seen_.find(id);
  if (it == seen_.end() || it->second.second == 0) return false;
  const uint64_t window = uint64_t{heartbeat_ms_} * missed_beats_ * 1'000'000;
  return SteadyClock::instance().now_ns() - it->second.second < window;
}

bool StoreChainMonitor::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t window = uint64_t{heartbeat_ms_} * missed_beats_ * 1'000'000;
  return last_read_ns_ != 0 && SteadyClock::instance().now_ns() - last_read_ns_ < window;
}

std::string StoreChainMonitor::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

// ---- the members' regions through their read services ----

Status StoreReadSource::read(uint32_t member, uint64_t offset, std::span<uint8_t> out) {
  if (member >= members_.size()) return out_of_range("no member " + std::to_string(member));
  rpc::Session& session = members_[member]->session(0);
  size_t at = 0;
  while (at < out.size()) {
    hyperloop::TxnRegionReadRequest r;
    r.offset = offset + at;
    r.length = static_cast<uint32_t>(std::min<size_t>(out.size() - at, uint32_t{1} << 30));
    const std::vector<uint8_t> payload = hyperloop::encode_txn_region_read(r);
    ++requests_;
    auto reply = session.call(hyperloop::kTxnKvReadRegion, 0, payload, false);
    if (!reply.ok()) {
      return Status(reply.status().code(), "reading member " + std::to_string(member) + "'s region at " +
                                               std::to_string(r.offset) + ": " + reply.status().message());
    }
    FERRY_ASSIGN_OR_RETURN(const hyperloop::TxnRegionReadReply got,
                           hyperloop::parse_txn_region_reply(reply.value().payload));
    if (got.status != hyperloop::TxnKvReadStatus::kOk || got.bytes.empty() || got.bytes.size() > out.size() - at) {
      return out_of_range("member " + std::to_string(member) + " refused a region read at " +
                          std::to_string(r.offset) + " (status " + std::to_string(static_cast<int>(got.status)) +
                          ")");
    }
    std::memcpy(out.data() + at, got.bytes.data(), got.bytes.size());
    at += got.bytes.size();
  }
  return ok_status();
}

}  // namespace ferry::apps
