// `ferry store replica`: a hyperloop::StoreMember (the decisions: views,
// joins, rebuilds, removal, beats) in a process. What is here is what a
// process adds: the flags and the configuration file, the NIC daemon, the
// regions, the CM listener with the read and copy services, the data path's
// thread, the signals and the log lines.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <thread>

#include "ferry/cm/cm.h"
#include "ferry/common/clock.h"
#include "ferry/hyperloop/replica.h"
#include "ferry/hyperloop/store_member.h"
#include "ferry/hyperloop/txn_kv_wire.h"
#include "ferry/membership/store.h"
#include "ferry/nicd/nicd.h"
#include "ferry/rpc/server.h"
#include "member_process.h"
#include "store_cmd.h"
#include "store_config.h"
#include "store_recovery.h"

namespace ferry::apps {

namespace {

// After a read, the replica keeps polling this long before it sleeps, so a
// client reading key after key is answered without a wakeup per read.
constexpr uint64_t kStoreBusyPollNs = 300'000;
// How long the replica sleeps in sigtimedwait when no read is coming.
constexpr uint64_t kStoreIdleSleepNs = 1'000'000;

// The member's data path on this process's NIC: the two Replicas of its
// placement, and the copy of a neighbour's regions. A step (copy or build)
// waits for neighbours, so it runs on a thread of its own while the main
// thread keeps answering reads and beating; the main thread hands its
// outcome to the member (deliver). Only that thread touches the Replicas
// while it runs.
class StoreDataPath final : public hyperloop::StoreMemberDataPath {
 public:
  StoreDataPath(nic::Nic& nic, cm::Listener& listener, const StoreConfig& c, const MemberConfig& self,
                const std::string& config_path, std::span<uint8_t> data, std::span<uint8_t> locks,
                std::function<void(const std::string&)> log)
      : nic_(nic),
        listener_(listener),
        c_(c),
        self_(self),
        config_path_(config_path),
        data_(data),
        locks_(locks),
        log_(std::move(log)) {}
  ~StoreDataPath() override { stop_replicas(); }

  void start_copy(const std::string& from) override {
    run([this, from] { copied_ = copy(from); });
  }
  void start_build(const hyperloop::StorePlacement& placement) override {
    run([this, placement] { built_ = build(placement); });
  }
  void stop_replicas() override {
    if (worker_.joinable()) worker_.join();
    copied_.reset();
    built_.reset();
    lock_replica_.reset();
    data_replica_.reset();
  }
  bool upstream_connected() const override {
    return data_replica_ && lock_replica_ && data_replica_->status().upstream_links == 3 &&
           lock_replica_->status().upstream_links == 3;
  }
  std::string address() const override { return listener_.address(); }

  // Hands the outcome of a finished step to `member`; with `wait`, waits
  // for the step in flight first. Whether it handed one.
  bool deliver(hyperloop::StoreMember& member, bool wait) {
    if (!worker_.joinable() || (!wait && !done_.load(std::memory_order_acquire))) return false;
    worker_.join();
    // Both taken first: handing one over may start the next step's thread.
    std::optional<Result<uint64_t>> copied = std::exchange(copied_, std::nullopt);
    std::optional<Status> built = std::exchange(built_, std::nullopt);
    const uint64_t now = SteadyClock::instance().now_ns();
    if (copied) member.on_copied(*copied, now);
    if (built) member.on_built(*built, now);
    return true;
  }
  uint32_t data_links() const { return data_replica_ ? data_replica_->status().upstream_links : 0; }
  uint32_t lock_links() const { return lock_replica_ ? lock_replica_->status().upstream_links : 0; }

 private:
  void run(std::function<void()> step) {
    done_.store(false, std::memory_order_relaxed);
    worker_ = std::thread([this, step = std::move(step)] {
      step();
      done_.store(true, std::memory_order_release);
    });
  }

  // Both regions from member `from` (the upstream neighbour in the new
  // view), before it serves anything of the chain.
  Result<uint64_t> copy(const std::string& from) {
    const MemberConfig* source = c_.member(from);
    if (source == nullptr) return invalid_argument("view member '" + from + "' is not in " + config_path_);
    return copy_store_regions(nic_, source->listen, c_.copy_service(), data_, locks_, c_.connect_timeout_ms);
  }

  // The member's two Replicas for `p`'s view at its position.
  Status build(const hyperloop::StorePlacement& p) {
    hyperloop::GroupOptions data_options = c_.data_options();
    hyperloop::GroupOptions lock_options = c_.lock_options();
    const uint32_t n = static_cast<uint32_t>(p.chain.size());
    data_options.replicas = lock_options.replicas = n;
    const bool tail = p.position + 1 == n;
    const MemberConfig* next = tail ? nullptr : c_.member(p.chain[p.position + 1]);
    if (!tail && next == nullptr) {
      return invalid_argument("view member '" + p.chain[p.position + 1] + "' is not in " + config_path_);
    }
    const std::string downstream = tail ? c_.client.listen : next->listen;
    auto make_spec = [&](const std::string& group, const hyperloop::GroupOptions& options) {
      hyperloop::ReplicaSpec spec;
      spec.group = group;
      spec.index = p.position;
      spec.options = options;
      spec.connect_timeout_ms = c_.connect_timeout_ms;
      return spec;
    };
    FERRY_ASSIGN_OR_RETURN(data_replica_,
                           hyperloop::Replica::create(nic_, data_, make_spec(c_.data_group(p.version), data_options)));
    FERRY_ASSIGN_OR_RETURN(lock_replica_,
                           hyperloop::Replica::create(nic_, locks_, make_spec(c_.lock_group(p.version), lock_options)));
    FERRY_RETURN_IF_ERROR(data_replica_->serve(listener_));
    FERRY_RETURN_IF_ERROR(lock_replica_->serve(listener_));
    log_(
        fmt::format("event=listening store={} id={} index={} view={} listen={} nicd={} region={} data_bytes={} "
                    "lock_bytes={} downstream={} read_service={}",
                    c_.name, self_.id, p.position, p.version, listener_.address(), self_.nicd,
                    self_.region.empty() ? "anonymous" : self_.region, data_options.region_bytes,
                    lock_options.region_bytes, downstream, c_.read_service()));
    FERRY_RETURN_IF_ERROR(data_replica_->connect_downstream(downstream));
    FERRY_RETURN_IF_ERROR(lock_replica_->connect_downstream(downstream));
    log_(
        fmt::format("event=ready store={} id={} index={} view={} (both groups' chains posted; this process now "
                    "only serves reads)",
                    c_.name, self_.id, p.position, p.version));
    return ok_status();
  }

  nic::Nic& nic_;
  cm::Listener& listener_;
  const StoreConfig& c_;
  const MemberConfig& self_;
  const std::string& config_path_;
  const std::span<uint8_t> data_;
  const std::span<uint8_t> locks_;
  const std::function<void(const std::string&)> log_;
  std::unique_ptr<hyperloop::Replica> data_replica_;
  std::unique_ptr<hyperloop::Replica> lock_replica_;
  std::thread worker_;
  std::atomic<bool> done_{false};
  // The step's outcome: written by the worker, read after joining it.
  std::optional<Result<uint64_t>> copied_;
  std::optional<Status> built_;
};

}  // namespace

int run_store_replica(const StoreReplicaOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry store replica";
  const std::optional<StoreConfig> cfg = load_member_config(&load_store_config, opt.member, me, err);
  if (!cfg) return 2;
  const StoreConfig& c = *cfg;
  const bool spare = opt.spare >= 0;
  if (spare == opt.has_index) {
    err << me << ": give exactly one of --index (a replica of the chain) and --spare (a spare)\n";
    return 2;
  }
  if (spare && !c.recovery) {
    err << me << ": --spare needs a [membership] table in " << opt.member.config << " (recovery is off without one)\n";
    return 2;
  }
  if (spare ? static_cast<size_t>(opt.spare) >= c.spares.size() : opt.index >= c.replicas.size()) {
    err << me << ": " << (spare ? "--spare " : "--index ") << (spare ? opt.spare : opt.index) << " is not a "
        << (spare ? "[[spare]]" : "[[replica]]") << " of " << opt.member.config << " (it has "
        << (spare ? c.spares.size() : c.replicas.size()) << ")\n";
    return 2;
  }
  MemberConfig self = spare ? c.spares[static_cast<size_t>(opt.spare)] : c.replicas[opt.index];
  override_member(self, opt.member);
  const std::string& id = self.id;
  const hyperloop::GroupOptions data_options = c.data_options();
  const hyperloop::GroupOptions lock_options = c.lock_options();

  sigset_t stop;
  block_stop_signals(&stop);
  const auto fail = failure_reporter(err, me + " " + id);
  const auto log_line = line_writer(out);
  auto opened = open_store_membership(c);
  if (!opened.ok()) return fail(opened.status());
  const std::unique_ptr<membership::MembershipStore> etcd = std::move(opened).value();
  hyperloop::StoreMemberOptions mo;
  mo.store = c.name;
  mo.id = id;
  mo.spare = spare;
  mo.index = opt.index;
  for (const MemberConfig& r : c.replicas) mo.replicas.push_back(r.id);
  mo.heartbeat_ms = c.recovery ? c.membership.heartbeat_ms : 0;
  mo.txn = c.txn;
  mo.kv = c.kv;
  hyperloop::StoreMemberLog member_log;
  member_log.event = log_line;
  member_log.warning = [&](const std::string& message) { err << me << " " << id << ": " << message << "\n"; };
  hyperloop::StoreMember member(mo, etcd.get(), hyperloop::StoreChainKeys::of(c.membership.cluster, c.name),
                                member_log);
  // Ended by itself: removed from the chain (exit 3), or failed (exit 1).
  auto ended = [&]() -> std::optional<int> {
    if (member.state() == hyperloop::StoreMemberState::kRemoved) {
      err << me << " " << id << ": removed from the chain (" << member.removed_reason()
          << "): it must not serve its old state; it may only come back as a new member under a new id\n";
      return 3;
    }
    if (member.state() == hyperloop::StoreMemberState::kFailed) return fail(member.failure());
    return std::nullopt;
  };
  // Who it is comes first: a removed member touches no NIC.
  member.start(SteadyClock::instance().now_ns());
  if (const std::optional<int> code = ended()) return *code;

  // Declared in the order they must outlive each other: the device outlives
  // every verbs object; the regions and the listener outlive the data path,
  // the copy service and the read server.
  auto device = attach_nicd(self.nicd, "store-" + id);
  if (!device.ok()) return fail(device.status());
  nic::Nic& nic = device.value()->nic();
  auto data_region = self.region.empty() ? nicd::SharedMemory::create(data_options.region_bytes, "ferry-store-data")
                                         : nicd::SharedMemory::map_file(self.region, data_options.region_bytes);
  if (!data_region.ok()) return fail(data_region.status());
  // Lock words in DRAM (hint H8: atomics off NVM; a lock need not survive a crash).
  auto lock_region = nicd::SharedMemory::create(lock_options.region_bytes, "ferry-store-locks");
  if (!lock_region.ok()) return fail(lock_region.status());
  const std::span<uint8_t> data_mem(data_region.value().data(), data_options.region_bytes);
  const std::span<uint8_t> lock_mem(lock_region.value().data(), lock_options.region_bytes);
  auto listener = listen_cm(self.listen);
  if (!listener.ok()) return fail(listener.status());

  // The read service: this replica's CPU answers from its own image.
  auto server = rpc::Server::create(nic, c.read_server_options());
  if (!server.ok()) return fail(server.status());
  auto handler = [&](const rpc::Request& req, rpc::Reply& reply) {
    const std::vector<uint8_t> answer = member.on_read(req.type, req.payload, reply.capacity());
    std::memcpy(reply.space().data(), answer.data(), answer.size());
    reply.set_size(answer.size());
  };
  const std::pair<uint16_t, const char*> read_types[] = {{hyperloop::kTxnKvReadGet, "txnkv.get"},
                                                         {hyperloop::kTxnKvReadScan, "txnkv.scan"},
                                                         {hyperloop::kTxnKvReadRegion, "txnkv.region"}};
  for (const auto& [type, name] : read_types) {
    rpc::HandlerInfo info;
    info.name = name;
    if (Status s = server.value()->register_handler(type, info, handler); !s.ok()) return fail(s);
  }
  if (Status s = server.value()->start(); !s.ok()) return fail(s);
  if (Status s = server.value()->serve(*listener.value(), c.read_service()); !s.ok()) return fail(s);
  // A joining spare copies its regions from a member through this service.
  std::unique_ptr<StoreCopyService> copy_service;
  if (c.recovery) {
    auto started = StoreCopyService::start(nic, *listener.value(), c.copy_service(), data_mem, lock_mem);
    if (!started.ok()) return fail(started.status());
    copy_service = std::move(started).value();
  }
  StoreDataPath path(nic, *listener.value(), c, self, opt.member.config, data_mem, lock_mem, log_line);
  member.attach(&path, data_mem, lock_mem, SteadyClock::instance().now_ns());

  ServeLoop loop;
  loop.nic = &nic;
  loop.died = me + " " + id + ": the NIC daemon at " + self.nicd + " died; the store's chains are broken";
  loop.busy_poll_ns = kStoreBusyPollNs;
  loop.idle_sleep_ns = kStoreIdleSleepNs;
  loop.poll = [&](uint64_t now) {
    size_t handled = 0;
    for (int pass = 0; pass < 8; ++pass) handled += server.value()->poll_worker(0);
    path.deliver(member, /*wait=*/false);
    member.on_tick(now);
    return handled != 0;
  };
  loop.finished = ended;
  loop.stop = [&](const char* signal) {
    // A step in flight finishes first (it may be waiting for a neighbour).
    while (member.busy() && path.deliver(member, /*wait=*/true)) {
    }
    if (member.state() == hyperloop::StoreMemberState::kFailed) return fail(member.failure());
    log_line(
        fmt::format("event=stop signal={} store={} id={} view={} reads={} read_retries={} data_links={} "
                    "lock_links={}",
                    signal, c.name, id, member.placement().version, member.reads(), member.read_retries(),
                    path.data_links(), path.lock_links()));
    return 0;
  };
  return serve_until_stopped(stop, loop, err);
}

}  // namespace ferry::apps
