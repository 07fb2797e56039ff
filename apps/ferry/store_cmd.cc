// `ferry store replica|client`: key=value log lines on stdout (one per
// event), errors on stderr, a summary (key=value or JSON) from the client.
#include "store_cmd.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/common/histogram.h"
#include "ferry/common/rng.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/replica.h"
#include "ferry/hyperloop/txn.h"
#include "ferry/hyperloop/txn_kv.h"
#include "ferry/hyperloop/txn_kv_wire.h"
#include "ferry/nicd/nicd.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"
#include "member_process.h"
#include "store_config.h"

namespace ferry::apps {

namespace {

using StoreClock = std::chrono::steady_clock;

// After a read, the replica keeps polling this long before it sleeps, so a
// client reading key after key is answered without a wakeup per read.
constexpr auto kStoreBusyPoll = std::chrono::microseconds(300);
// How long the replica sleeps in sigtimedwait when no read is coming.
constexpr long kStoreIdleSleepNs = 1'000'000;
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

int run_store_replica(const StoreReplicaOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry store replica";
  auto cfg = load_store_config(opt.config);
  if (!cfg.ok()) {
    err << me << ": " << cfg.status().message() << "\n";
    return 2;
  }
  const StoreConfig& c = cfg.value();
  if (opt.index >= c.replicas.size()) {
    err << me << ": --index " << opt.index << " is not a replica of " << opt.config << " (it has "
        << c.replicas.size() << ")\n";
    return 2;
  }
  MemberConfig self = c.replicas[opt.index];
  if (!opt.nicd.empty()) self.nicd = opt.nicd;
  if (!opt.listen.empty()) self.listen = opt.listen;
  if (!opt.region.empty()) self.region = opt.region;
  const bool tail = opt.index + 1 == c.replicas.size();
  const std::string downstream = tail ? c.client.listen : c.replicas[opt.index + 1].listen;
  const hyperloop::GroupOptions data_options = c.data_options();
  const hyperloop::GroupOptions lock_options = c.lock_options();

  sigset_t stop;
  block_stop_signals(&stop);
  auto fail = [&](const Status& s) {
    err << me << " " << opt.index << ": " << s.message() << "\n";
    return 1;
  };
  // Declared in the order they must outlive each other: the device outlives
  // every verbs object; the regions, the reader and the listener outlive the
  // Replicas and the read server.
  auto device = attach_nicd(self.nicd, "store-replica-" + std::to_string(opt.index));
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
  hyperloop::TxnKvReplicaReader reader(
      data_mem.subspan(hyperloop::kTxnControlBytes + c.txn.log_bytes, c.txn.db_bytes),
      hyperloop::ReplicaLocks(lock_mem.data(), lock_mem.size()), c.kv);
  auto listener = cm::Listener::start(self.listen);
  if (!listener.ok()) {
    return fail(Status(listener.status().code(), "CM listener " + self.listen + ": " + listener.status().message()));
  }

  // The read service: this replica's CPU answers from its own image.
  uint64_t reads = 0;
  auto server = rpc::Server::create(nic, c.read_server_options());
  if (!server.ok()) return fail(server.status());
  auto handler = [&](const rpc::Request& req, rpc::Reply& reply) {
    ++reads;
    const std::vector<uint8_t> answer = hyperloop::answer_txn_kv_read(reader, req.type, req.payload, reply.capacity());
    std::memcpy(reply.space().data(), answer.data(), answer.size());
    reply.set_size(answer.size());
  };
  const std::pair<uint16_t, const char*> read_types[] = {{hyperloop::kTxnKvReadGet, "txnkv.get"},
                                                          {hyperloop::kTxnKvReadScan, "txnkv.scan"}};
  for (const auto& [type, name] : read_types) {
    rpc::HandlerInfo info;
    info.name = name;
    if (Status s = server.value()->register_handler(type, info, handler); !s.ok()) return fail(s);
  }
  if (Status s = server.value()->start(); !s.ok()) return fail(s);
  if (Status s = server.value()->serve(*listener.value(), c.read_service()); !s.ok()) return fail(s);

  auto make_spec = [&](const std::string& group, const hyperloop::GroupOptions& options) {
    hyperloop::ReplicaSpec spec;
    spec.group = group;
    spec.index = opt.index;
    spec.options = options;
    spec.connect_timeout_ms = c.connect_timeout_ms;
    return spec;
  };
  auto data = hyperloop::Replica::create(nic, data_mem, make_spec(c.data_group(), data_options));
  if (!data.ok()) return fail(data.status());
  auto locks = hyperloop::Replica::create(nic, lock_mem, make_spec(c.lock_group(), lock_options));
  if (!locks.ok()) return fail(locks.status());
  if (Status s = data.value()->serve(*listener.value()); !s.ok()) return fail(s);
  if (Status s = locks.value()->serve(*listener.value()); !s.ok()) return fail(s);
  out << fmt::format("event=listening store={} index={} listen={} nicd={} region={} data_bytes={} lock_bytes={} "
                     "downstream={} read_service={}\n",
                     c.name, opt.index, listener.value()->address(), self.nicd,
                     self.region.empty() ? "anonymous" : self.region, data_options.region_bytes,
                     lock_options.region_bytes, downstream, c.read_service())
      << std::flush;
  if (Status s = data.value()->connect_downstream(downstream); !s.ok()) return fail(s);
  if (Status s = locks.value()->connect_downstream(downstream); !s.ok()) return fail(s);
  out << fmt::format("event=ready store={} index={} (both groups' chains posted; this process now only serves reads)\n",
                     c.name, opt.index)
      << std::flush;

  bool serving = false;
  auto last_read = StoreClock::now() - kStoreBusyPoll;
  auto last_check = StoreClock::now();
  for (;;) {
    size_t handled = 0;
    for (int pass = 0; pass < 8; ++pass) handled += server.value()->poll_worker(0);
    const auto now = StoreClock::now();
    if (handled != 0) last_read = now;
    timespec tick{0, now - last_read < kStoreBusyPoll ? 0 : kStoreIdleSleepNs};
    siginfo_t info;
    const int sig = sigtimedwait(&stop, &info, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      out << fmt::format("event=stop signal={} store={} index={} reads={} read_retries={} data_links={} lock_links={}\n",
                         sig == SIGINT ? "SIGINT" : "SIGTERM", c.name, opt.index, reads, reader.retries(),
                         data.value()->status().upstream_links, locks.value()->status().upstream_links)
          << std::flush;
      return 0;
    }
    if (now - last_check < std::chrono::milliseconds(200)) continue;
    last_check = now;
    if (!nic.alive()) {
      err << me << " " << opt.index << ": the NIC daemon at " << self.nicd << " died; the store's chains are broken\n";
      return 1;
    }
    if (!serving && data.value()->status().upstream_links == 3 && locks.value()->status().upstream_links == 3) {
      serving = true;
      out << fmt::format("event=serving store={} index={}\n", c.name, opt.index) << std::flush;
    }
  }
}

int run_store_client(const StoreClientOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry store client";
  auto cfg = load_store_config(opt.config);
  if (!cfg.ok()) {
    err << me << ": " << cfg.status().message() << "\n";
    return 2;
  }
  StoreConfig& c = cfg.value();
  MemberConfig self = c.client;
  if (!opt.nicd.empty()) self.nicd = opt.nicd;
  if (!opt.listen.empty()) self.listen = opt.listen;
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
  auto fail = [&](const Status& s) {
    err << me << ": " << s.message() << "\n";
    return 1;
  };
  // Blocked before any thread starts, so that sigwait is where it arrives.
  sigset_t go;
  sigemptyset(&go);
  sigaddset(&go, SIGUSR1);
  if (opt.pause_for_sigusr1) pthread_sigmask(SIG_BLOCK, &go, nullptr);
  auto pause = [&](std::string_view before) {
    if (!opt.pause_for_sigusr1) return;
    out << "event=waiting for SIGUSR1 before " << before << "\n" << std::flush;
    int sig = 0;
    sigwait(&go, &sig);
  };

  auto device = attach_nicd(self.nicd, "store-client");
  if (!device.ok()) return fail(device.status());
  nic::Nic& nic = device.value()->nic();
  auto listener = cm::Listener::start(self.listen);
  if (!listener.ok()) {
    return fail(Status(listener.status().code(), "CM listener " + self.listen + ": " + listener.status().message()));
  }
  hyperloop::ClientOptions co;
  co.op_timeout_ns = uint64_t{opt.op_timeout_ms} * 1'000'000;
  auto client = hyperloop::HyperLoopClient::create(nic, co);
  if (!client.ok()) return fail(client.status());
  hyperloop::HyperLoopClient& group_client = *client.value();
  auto connect = [&](const std::string& group, const hyperloop::GroupOptions& options) {
    hyperloop::RemoteGroupOptions ro;
    ro.group = group;
    ro.options = options;
    ro.head = c.replicas[0].listen;
    ro.listener = listener.value().get();
    ro.timeout_ms = c.connect_timeout_ms;
    return group_client.connect_group(ro);
  };
  auto data = connect(c.data_group(), c.data_options());
  if (!data.ok()) return fail(data.status());
  auto locks = connect(c.lock_group(), c.lock_options());
  if (!locks.ok()) return fail(locks.status());
  out << fmt::format("event=connected store={} replicas={} head={} listen={}\n", c.name, c.replicas.size(),
                     c.replicas[0].listen, listener.value()->address())
      << std::flush;

  // An existing store (replica processes restarted over their region
  // files) is never wiped by mistake: replica 0's read service, polled once
  // its chains are up, answers a one-entry SCAN from its own image, which
  // reads as a store only if one was formatted there.
  {
    const rpc::ServerInfo probe_expect = c.read_server_info();
    auto probe = rpc::Client::connect(nic, c.replicas[0].listen, c.read_service(), rpc::ClientOptions{},
                                      &probe_expect);
    if (!probe.ok()) return fail(probe.status());
    hyperloop::TxnKvReadRequest scan;
    scan.type = hyperloop::kTxnKvReadScan;
    scan.count = 1;
    const std::vector<uint8_t> payload = hyperloop::encode_txn_kv_read(scan);
    auto reply = probe.value()->session(0).call(scan.type, 0, payload, false);
    if (!reply.ok()) return fail(Status(reply.status().code(), "asking replica 0 whether it holds a store: " +
                                                                   reply.status().message()));
    auto parsed = hyperloop::parse_txn_kv_reply(reply.value().payload);
    if (!parsed.ok()) return fail(parsed.status());
    if (parsed->status == hyperloop::TxnKvReadStatus::kOk) {
      if (!opt.format) {
        err << me << ": replica 0 (" << c.replicas[0].listen << ") already holds a store '" << c.name
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
  auto txn = hyperloop::TxnClient::initialize(group_client, data.value(), locks.value(), c.txn);
  if (!txn.ok()) return fail(txn.status());
  auto kv = hyperloop::TxnKv::create(*txn.value(), c.kv);
  if (!kv.ok()) return fail(kv.status());

  // Every replica's read service (served before its chains were connected).
  std::vector<std::unique_ptr<rpc::Client>> readers;
  const rpc::ServerInfo expect = c.read_server_info();
  if (opt.verify) {
    for (const MemberConfig& r : c.replicas) {
      auto rc = rpc::Client::connect(nic, r.listen, c.read_service(), rpc::ClientOptions{}, &expect);
      if (!rc.ok()) return fail(rc.status());
      readers.push_back(std::move(rc).value());
    }
  }
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
    if (Status s = kv.value()->put(key, value); !s.ok()) {
      return fail(Status(s.code(), "put " + key + ": " + s.message()));
    }
    put_latency.record(store_elapsed_ns(t0));
  }
  const double put_seconds = std::chrono::duration<double>(StoreClock::now() - put_start).count();
  out << fmt::format("event=written {} seconds={:.3f} records={} lock_conflicts={}\n",
                     store_latency_line("put", put_latency), put_seconds, kv.value()->counters().records,
                     txn.value()->counters().lock_conflicts)
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
        if (!reply.ok()) return fail(Status(reply.status().code(), fmt::format("GET {} from replica {}: {}", key, r,
                                                                                reply.status().message())));
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
          return fail(Status(reply.status().code(), fmt::format("SCAN after '{}' from replica {}: {}", last, r,
                                                                reply.status().message())));
        }
        if (reply->status != hyperloop::TxnKvReadStatus::kOk) {
          mismatch(fmt::format("replica {}: SCAN after '{}' answered status {}", r, last, static_cast<int>(reply->status)));
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
    j["replicas"] = c.replicas.size();
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
    out << fmt::format("event=done {} verified={} {} scan_requests={} mismatches={}\n",
                       store_latency_line("put", put_latency), opt.verify, store_latency_line("read", read_latency),
                       scan_requests, mismatches);
  }
  out << std::flush;
  return good ? 0 : 1;
}

}  // namespace ferry::apps
