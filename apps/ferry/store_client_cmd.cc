// `ferry store client`: the store's front end (store_cmd.h). key=value log
// lines on stdout (one per event), errors on stderr, a summary (key=value or
// JSON) at the end.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/common/clock.h"
#include "ferry/common/histogram.h"
#include "ferry/common/rng.h"
#include "ferry/hyperloop/chain_manager.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/store_member.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/hyperloop/txn_kv.h"
#include "ferry/hyperloop/txn_kv_wire.h"
#include "ferry/membership/store.h"
#include "ferry/rpc/client.h"
#include "member_process.h"
#include "store_cmd.h"
#include "store_config.h"
#include "store_recovery.h"

namespace ferry::apps {

namespace {

using StoreClock = std::chrono::steady_clock;

// The client clears the replicas' data regions with gWRITEs of this size.
constexpr uint64_t kStoreClearChunk = 256 << 10;

std::string store_key(uint64_t i) { return fmt::format("key{:06}", i); }

// The value put for key i (the verification recomputes it).
std::vector<uint8_t> store_value(uint64_t seed, uint64_t i, uint32_t bytes) {
  std::vector<uint8_t> v(bytes);
  uint64_t x = mix64(seed * 0x9E3779B97F4A7C15ULL ^ i);
  for (uint32_t k = 0; k < bytes; ++k) {
    if (k % 8 == 0) x = mix64(x + k);
    v[k] = static_cast<uint8_t>('a' + (x >> (8 * (k % 8))) % 26);
  }
  return v;
}

double store_us(const Histogram& h, double q) { return static_cast<double>(h.percentile(q)) / 1000.0; }

nlohmann::json store_latency_json(const Histogram& h) {
  nlohmann::json j;
  j["samples"] = h.count();
  j["p50_us"] = store_us(h, 0.50);
  j["p99_us"] = store_us(h, 0.99);
  j["p999_us"] = store_us(h, 0.999);
  j["max_us"] = static_cast<double>(h.max()) / 1000.0;
  return j;
}

std::string store_latency_line(std::string_view what, const Histogram& h) {
  return fmt::format("{0}s={1} {0}_p50_us={2:.1f} {0}_p99_us={3:.1f} {0}_p999_us={4:.1f} {0}_max_us={5:.1f}", what,
                     h.count(), store_us(h, 0.50), store_us(h, 0.99), store_us(h, 0.999),
                     static_cast<double>(h.max()) / 1000.0);
}

uint64_t store_elapsed_ns(StoreClock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(StoreClock::now() - t0).count());
}

}  // namespace

int run_store_client(const StoreClientOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry store client";
  std::optional<StoreConfig> cfg = load_member_config(&load_store_config, opt.member, me, err);
  if (!cfg) return 2;
  StoreConfig& c = *cfg;
  MemberConfig self = c.client;
  override_member(self, opt.member);
  if (opt.value_bytes == 0 || opt.value_bytes > c.kv.value_max) {
    err << me << ": --value-bytes must be 1..value_max (" << c.kv.value_max << ")\n";
    return 2;
  }
  if (opt.puts > c.kv.slots) {
    err << me << ": --puts " << opt.puts << " is more keys than the table's " << c.kv.slots << " slots\n";
    return 2;
  }
  if (opt.puts > 0 && store_key(opt.puts - 1).size() > c.kv.key_max) {
    err << me << ": key " << store_key(opt.puts - 1) << " is longer than key_max (" << c.kv.key_max << ")\n";
    return 2;
  }
  if (opt.scan_page == 0) {
    err << me << ": --scan-page must be at least 1\n";
    return 2;
  }
  const auto fail = failure_reporter(err, me);
  const sigset_t go = go_signal(opt.pause_for_sigusr1 || opt.pause_after_puts != 0);
  auto pause = [&](std::string_view before) {
    if (!opt.pause_for_sigusr1) return;
    out << "event=waiting for SIGUSR1 before " << before << "\n" << std::flush;
    wait_for_go(go);
  };

  auto device = attach_nicd(self.nicd, "store-client");
  if (!device.ok()) return fail(device.status());
  nic::Nic& nic = device.value()->nic();
  auto listener = listen_cm(self.listen);
  if (!listener.ok()) return fail(listener.status());
  hyperloop::ClientOptions co;
  co.op_timeout_ns = uint64_t{opt.op_timeout_ms} * 1'000'000;
  auto client = hyperloop::HyperLoopClient::create(nic, co);
  if (!client.ok()) return fail(client.status());
  hyperloop::HyperLoopClient& group_client = *client.value();

  // Recovery across processes ([membership]): the chain manager on etcd
  // (it creates view 1 from the [[replica]] ids, or adopts the stored view)
  // and the thread relaying the members' beats to it. Declared in this
  // order so that the thread stops first.
  std::unique_ptr<membership::MembershipStore> etcd;
  std::unique_ptr<hyperloop::ChainManager> manager;
  std::unique_ptr<StoreChainMonitor> monitor;
  membership::View view;
  view.version = 1;
  for (const MemberConfig& r : c.replicas) view.members.push_back({r.id, "", 1});
  auto opened = open_store_membership(c);
  if (!opened.ok()) return fail(opened.status());
  etcd = std::move(opened).value();
  if (etcd != nullptr) {
    hyperloop::ChainManagerOptions mo;
    mo.cluster = c.membership.cluster;
    mo.chain = c.name;
    mo.heartbeat_ms = c.membership.heartbeat_ms;
    mo.missed_beats = c.membership.missed_beats;
    std::vector<std::string> ids;
    for (const MemberConfig& r : c.replicas) ids.push_back(r.id);
    auto opened_manager = hyperloop::ChainManager::open(etcd.get(), &SteadyClock::instance(), ids, mo);
    if (!opened_manager.ok()) return fail(opened_manager.status());
    manager = std::move(opened_manager).value();
    view = manager->view();
    monitor = std::make_unique<StoreChainMonitor>(*etcd, *manager, c);
    out << fmt::format("event=membership etcd={} view_key={} version={} members={} heartbeat_ms={} missed_beats={}\n",
                       c.membership.etcd, c.view_key(), view.version, hyperloop::view_member_ids(view),
                       c.membership.heartbeat_ms, c.membership.missed_beats)
        << std::flush;
  }
  // The view's members' configurations, in chain order.
  auto members_of = [&](const membership::View& v) -> Result<std::vector<MemberConfig>> {
    std::vector<MemberConfig> members;
    for (const auto& m : v.members) {
      const MemberConfig* mc = c.member(m.id);
      if (mc == nullptr)
        return invalid_argument("the chain's view names '" + m.id + "', which " + opt.member.config +
                                " has no [[replica]] or [[spare]] for");
      members.push_back(*mc);
    }
    return members;
  };
  auto chain = members_of(view);
  if (!chain.ok()) return fail(chain.status());
  std::vector<MemberConfig> members = std::move(chain).value();
  auto remote_options = [&](const std::string& group, hyperloop::GroupOptions options) {
    options.replicas = static_cast<uint32_t>(members.size());
    hyperloop::RemoteGroupOptions ro;
    ro.group = group;
    ro.options = options;
    ro.head = members[0].listen;
    ro.listener = listener.value().get();
    ro.timeout_ms = c.connect_timeout_ms;
    return ro;
  };
  auto data = group_client.connect_group(remote_options(c.data_group(view.version), c.data_options()));
  if (!data.ok()) return fail(data.status());
  auto locks = group_client.connect_group(remote_options(c.lock_group(view.version), c.lock_options()));
  if (!locks.ok()) return fail(locks.status());
  out << fmt::format("event=connected store={} replicas={} view={} head={} listen={}\n", c.name, members.size(),
                     view.version, members[0].listen, listener.value()->address())
      << std::flush;

  // An existing store (replica processes restarted over their region
  // files) is never wiped by mistake: replica 0's read service, polled once
  // its chains are up, answers a one-entry SCAN from its own image, which
  // reads as a store only if one was formatted there.
  {
    const rpc::ServerInfo probe_expect = c.read_server_info();
    auto probe = rpc::Client::connect(nic, members[0].listen, c.read_service(), rpc::ClientOptions{}, &probe_expect);
    if (!probe.ok()) return fail(probe.status());
    hyperloop::TxnKvReadRequest scan;
    scan.type = hyperloop::kTxnKvReadScan;
    scan.count = 1;
    const std::vector<uint8_t> payload = hyperloop::encode_txn_kv_read(scan);
    auto reply = probe.value()->session(0).call(scan.type, 0, payload, false);
    if (!reply.ok())
      return fail(
          Status(reply.status().code(), "asking replica 0 whether it holds a store: " + reply.status().message()));
    auto parsed = hyperloop::parse_txn_kv_reply(reply.value().payload);
    if (!parsed.ok()) return fail(parsed.status());
    if (parsed->status == hyperloop::TxnKvReadStatus::kOk) {
      if (!opt.format) {
        err << me << ": replica 0 (" << members[0].listen << ") already holds a store '" << c.name
            << "'; this client would format a new one over it. Pass --format to wipe every replica's data and "
               "start again (nothing was changed)\n";
        return 2;
      }
      out << "event=formatting over an existing store (--format)\n" << std::flush;
    }
  }
  // A fresh store: every replica's data region is cleared (a region file
  // may hold an earlier run's slots, which the new table would read as its
  // own), then the log is laid out and the table formatted.
  std::span<uint8_t> mem = group_client.client_memory(data.value()).value();
  std::memset(mem.data(), 0, mem.size());
  for (uint64_t off = 0; off < mem.size(); off += kStoreClearChunk) {
    const auto n = static_cast<uint32_t>(std::min<uint64_t>(kStoreClearChunk, mem.size() - off));
    if (Status s = group_client.gwrite(data.value(), off, n); !s.ok()) return fail(s);
  }
  if (Status s = group_client.gflush(data.value()); !s.ok()) return fail(s);
  std::unique_ptr<hyperloop::TxnClient> txn;
  std::unique_ptr<hyperloop::TxnKv> kv;
  {
    auto t = hyperloop::TxnClient::initialize(group_client, data.value(), locks.value(), c.txn);
    if (!t.ok()) return fail(t.status());
    txn = std::move(t).value();
    auto k = hyperloop::TxnKv::create(*txn, c.kv);
    if (!k.ok()) return fail(k.status());
    kv = std::move(k).value();
  }

  // Every member's read service (served before its chains were connected).
  std::vector<std::unique_ptr<rpc::Client>> readers;
  const rpc::ServerInfo expect = c.read_server_info();
  auto connect_readers = [&]() -> Status {
    readers.clear();
    for (const MemberConfig& r : members) {
      FERRY_ASSIGN_OR_RETURN(auto rc,
                             rpc::Client::connect(nic, r.listen, c.read_service(), rpc::ClientOptions{}, &expect));
      readers.push_back(std::move(rc));
    }
    return ok_status();
  };
  if (opt.verify) {
    if (Status s = connect_readers(); !s.ok()) return fail(s);
  }

  // Chain recovery across processes, after a put failed with `cause`: the
  // manager names the member that stopped beating, a live spare takes its
  // place in the next view, both groups reconnect to the rebuilt chain, and
  // the transaction log is reconciled over the members' read services.
  uint64_t recoveries = 0;
  auto recover_chain = [&](const Status& cause) -> Status {
    const auto t0 = StoreClock::now();
    out << fmt::format("event=put_failed view={} code={} cause=\"{}\"\n", view.version, static_cast<int>(cause.code()),
                       cause.message())
        << std::flush;
    const uint64_t bound_ms = 4ull * c.membership.heartbeat_ms * (c.membership.missed_beats + 2) + 1000;
    std::vector<std::string> failed = manager->failed_members();
    while (failed.empty() && store_elapsed_ns(t0) < bound_ms * 1'000'000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::max<uint32_t>(1, c.membership.heartbeat_ms / 4)));
      failed = manager->failed_members();
    }
    if (!monitor->current()) {
      // Its reads of the beats stalled or failed: every member then looks
      // failed to the manager, and acting on that could remove a live one.
      const std::string etcd_error = monitor->last_error();
      return unavailable("the beats in etcd could not be read within the last " +
                         std::to_string(c.membership.missed_beats) +
                         " heartbeats, so no verdict on the members can "
                         "be trusted; nothing was replaced" +
                         (etcd_error.empty() ? "" : " (etcd: " + etcd_error + ")"));
    }
    if (failed.size() > 1) {
      return unavailable("members " + fmt::format("{}", fmt::join(failed, ",")) + " all missed " +
                         std::to_string(c.membership.missed_beats) +
                         " heartbeats; one failure at a time is "
                         "recovered, so nothing was replaced");
    }
    if (failed.empty()) {
      const std::string etcd_error = monitor->last_error();
      return unavailable("no member of view " + std::to_string(view.version) + " missed " +
                         std::to_string(c.membership.missed_beats) + " heartbeats within " + std::to_string(bound_ms) +
                         " ms of the failure, so there is nothing to replace" +
                         (etcd_error.empty() ? "" : " (etcd: " + etcd_error + ")"));
    }
    const std::string& gone = failed.front();
    const double detect_ms = static_cast<double>(store_elapsed_ns(t0)) / 1e6;
    out << fmt::format("event=failed member={} view={} failed_members={} detect_ms={:.1f}\n", gone, view.version,
                       fmt::join(failed, ","), detect_ms)
        << std::flush;
    std::string joining;
    for (const MemberConfig& sp : c.spares) {
      if (std::any_of(view.members.begin(), view.members.end(), [&](const auto& m) { return m.id == sp.id; })) continue;
      FERRY_ASSIGN_OR_RETURN(const auto removed, hyperloop::chain_member_removed(*etcd, c.chain_keys(), sp.id));
      if (removed || !monitor->live(sp.id)) continue;
      joining = sp.id;
      break;
    }
    if (joining.empty()) {
      return unavailable("member " + gone +
                         " failed and no spare is left to take its place (a [[spare]] must be "
                         "running, beating, and never a member before: start one with "
                         "`ferry store replica --spare K`)");
    }
    FERRY_ASSIGN_OR_RETURN(view, manager->replace(gone, joining));
    FERRY_ASSIGN_OR_RETURN(members, members_of(view));
    out << fmt::format("event=view version={} members={} removed={} joined={} ms={:.1f}\n", view.version,
                       hyperloop::view_member_ids(view), gone, joining, static_cast<double>(store_elapsed_ns(t0)) / 1e6)
        << std::flush;
    // The old TxnKv and TxnClient go with the old data path.
    kv.reset();
    txn.reset();
    FERRY_RETURN_IF_ERROR(
        group_client.reconnect_group(data.value(), remote_options(c.data_group(view.version), c.data_options())));
    FERRY_RETURN_IF_ERROR(
        group_client.reconnect_group(locks.value(), remote_options(c.lock_group(view.version), c.lock_options())));
    const double reconnect_ms = static_cast<double>(store_elapsed_ns(t0)) / 1e6;
    FERRY_RETURN_IF_ERROR(connect_readers());
    std::vector<rpc::Client*> sources;
    for (auto& r : readers) sources.push_back(r.get());
    StoreReadSource source(sources);
    hyperloop::TxnRecovery rep;
    FERRY_ASSIGN_OR_RETURN(txn, hyperloop::TxnClient::recover(group_client, data.value(), locks.value(), c.txn,
                                                              hyperloop::txn_kv_lock_words(c.kv), source, &rep));
    FERRY_ASSIGN_OR_RETURN(kv, hyperloop::TxnKv::open(*txn, c.kv));
    ++recoveries;
    out << fmt::format(
               "event=recovered view={} members={} records={} head={} tail={} bytes_rereplicated={} "
               "locks_released={} region_reads={} reconnect_ms={:.1f} total_ms={:.1f}\n",
               view.version, hyperloop::view_member_ids(view), rep.records, rep.head, rep.tail, rep.bytes_rereplicated,
               rep.locks_released, source.requests(), reconnect_ms, static_cast<double>(store_elapsed_ns(t0)) / 1e6)
        << std::flush;
    return ok_status();
  };
  auto recoverable = [&](const Status& s) {
    return c.recovery &&
           (s.code() == Code::kTimedOut || s.code() == Code::kUnavailable || s.code() == Code::kFailedPrecondition);
  };
  out << fmt::format("event=ready store={} data_bytes={} lock_words={} slots={} read_services={}\n", c.name,
                     c.data_options().region_bytes, hyperloop::txn_kv_lock_words(c.kv), c.kv.slots, readers.size())
      << std::flush;

  pause("the puts");
  Histogram put_latency;
  const auto put_start = StoreClock::now();
  for (uint64_t i = 0; i < opt.puts; ++i) {
    const std::string key = store_key(i);
    const std::vector<uint8_t> value = store_value(opt.seed, i, opt.value_bytes);
    const auto t0 = StoreClock::now();
    Status s = kv->put(key, value);
    // One failure at a time: a put that fails again right after a recovery
    // gets one more (another member may have failed meanwhile).
    for (int attempt = 0; attempt < 2 && !s.ok() && recoverable(s); ++attempt) {
      if (Status r = recover_chain(s); !r.ok()) {
        return fail(Status(r.code(), "put " + key + " failed (" + s.message() +
                                         ") and the chain could not be "
                                         "recovered: " +
                                         r.message()));
      }
      s = kv->put(key, value);
    }
    if (!s.ok()) return fail(Status(s.code(), "put " + key + ": " + s.message()));
    put_latency.record(store_elapsed_ns(t0));
    if (opt.pause_after_puts != 0 && i + 1 == opt.pause_after_puts) {
      out << "event=progress puts=" << i + 1 << " (waiting for SIGUSR1)\n" << std::flush;
      wait_for_go(go);
    } else if (opt.progress_every != 0 && (i + 1) % opt.progress_every == 0) {
      out << "event=progress puts=" << i + 1 << " view=" << view.version << "\n" << std::flush;
    }
  }
  const double put_seconds = std::chrono::duration<double>(StoreClock::now() - put_start).count();
  out << fmt::format("event=written {} seconds={:.3f} records={} lock_conflicts={}\n",
                     store_latency_line("put", put_latency), put_seconds, kv->counters().records,
                     txn->counters().lock_conflicts)
      << std::flush;

  uint64_t mismatches = 0, scan_requests = 0;
  Histogram read_latency;
  auto mismatch = [&](const std::string& what) {
    if (mismatches++ < 10) err << me << ": " << what << "\n";
  };
  if (opt.verify) {
    pause("the verification");
    for (size_t r = 0; r < readers.size(); ++r) {
      rpc::Session& session = readers[r]->session(0);
      auto call = [&](const hyperloop::TxnKvReadRequest& request) -> Result<hyperloop::TxnKvReadReply> {
        const std::vector<uint8_t> payload = hyperloop::encode_txn_kv_read(request);
        FERRY_ASSIGN_OR_RETURN(const rpc::CallReply reply, session.call(request.type, 0, payload, false));
        return hyperloop::parse_txn_kv_reply(reply.payload);
      };
      for (uint64_t i = 0; i < opt.puts; ++i) {
        const std::string key = store_key(i);
        hyperloop::TxnKvReadRequest get;
        get.type = hyperloop::kTxnKvReadGet;
        get.key = key;
        const auto t0 = StoreClock::now();
        auto reply = call(get);
        read_latency.record(store_elapsed_ns(t0));
        if (!reply.ok())
          return fail(Status(reply.status().code(),
                             fmt::format("GET {} from replica {}: {}", key, r, reply.status().message())));
        if (reply->status != hyperloop::TxnKvReadStatus::kOk || reply->entries.size() != 1 ||
            reply->entries[0].first != key || reply->entries[0].second != store_value(opt.seed, i, opt.value_bytes)) {
          mismatch(fmt::format("replica {}: GET {} answered status {} with {} entries, not the value put", r, key,
                               static_cast<int>(reply->status), reply->entries.size()));
        }
      }
      // The whole table in pages, each after the last key of the one before.
      hyperloop::TxnKvEntries scanned;
      std::string last;
      for (;;) {
        hyperloop::TxnKvReadRequest scan;
        scan.type = hyperloop::kTxnKvReadScan;
        scan.key = last;
        scan.after = !scanned.empty();
        scan.count = opt.scan_page;
        auto reply = call(scan);
        ++scan_requests;
        if (!reply.ok()) {
          return fail(Status(reply.status().code(),
                             fmt::format("SCAN after '{}' from replica {}: {}", last, r, reply.status().message())));
        }
        if (reply->status != hyperloop::TxnKvReadStatus::kOk) {
          mismatch(
              fmt::format("replica {}: SCAN after '{}' answered status {}", r, last, static_cast<int>(reply->status)));
          break;
        }
        for (auto& e : reply->entries) scanned.push_back(std::move(e));
        if (reply->entries.empty() || (!reply->more && reply->entries.size() < opt.scan_page)) break;
        last = scanned.back().first;
      }
      bool scan_good = scanned.size() == opt.puts;
      for (uint64_t i = 0; scan_good && i < opt.puts; ++i) {
        scan_good = scanned[i].first == store_key(i) && scanned[i].second == store_value(opt.seed, i, opt.value_bytes);
      }
      if (!scan_good) {
        mismatch(fmt::format("replica {}: a scan of the table answered {} entries, not the {} keys put in order", r,
                             scanned.size(), opt.puts));
      }
    }
  }

  const bool good = mismatches == 0;
  if (opt.json) {
    nlohmann::json j;
    j["store"] = c.name;
    j["replicas"] = members.size();
    j["view"] = view.version;
    j["members"] = hyperloop::view_member_ids(view);
    j["recoveries"] = recoveries;
    j["puts"] = opt.puts;
    j["value_bytes"] = opt.value_bytes;
    j["put_seconds"] = put_seconds;
    j["put"] = store_latency_json(put_latency);
    j["verified"] = opt.verify;
    j["read"] = store_latency_json(read_latency);
    j["scan_requests"] = scan_requests;
    j["mismatches"] = mismatches;
    j["ok"] = good;
    out << j.dump() << "\n";
  } else {
    out << fmt::format(
        "event=done {} verified={} {} scan_requests={} mismatches={} view={} members={} "
        "recoveries={}\n",
        store_latency_line("put", put_latency), opt.verify, store_latency_line("read", read_latency), scan_requests,
        mismatches, view.version, hyperloop::view_member_ids(view), recoveries);
  }
  out << std::flush;
  return good ? 0 : 1;
}

}  // namespace ferry::apps
