// `ferry hyperloop replica|client`: key=value log lines on stdout (one per
// event), errors on stderr, a summary (key=value or JSON) from the client.
#include "hyperloop_cmd.h"

#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "chain_config.h"
#include "member_process.h"
#include "ferry/cm/cm.h"
#include "ferry/common/histogram.h"
#include "ferry/common/rng.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/naive.h"
#include "ferry/hyperloop/replica.h"
#include "ferry/nicd/nicd.h"

namespace ferry::apps {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int run_hyperloop_replica(const ReplicaCmdOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry hyperloop replica";
  auto cfg = load_chain_config(opt.config);
  if (!cfg.ok()) {
    err << me << ": " << cfg.status().message() << "\n";
    return 2;
  }
  ChainConfig& c = cfg.value();
  if (opt.index >= c.replicas.size()) {
    err << me << ": --index " << opt.index << " is not a replica of " << opt.config << " (it has "
        << c.replicas.size() << ")\n";
    return 2;
  }
  MemberConfig self = c.replicas[opt.index];
  if (!opt.nicd.empty()) self.nicd = opt.nicd;
  if (!opt.listen.empty()) self.listen = opt.listen;
  if (!opt.region.empty()) self.region = opt.region;
  if (!opt.system.empty()) c.system = opt.system;
  const bool tail = opt.index + 1 == c.replicas.size();
  const std::string downstream = tail ? c.client.listen : c.replicas[opt.index + 1].listen;

  sigset_t stop;
  block_stop_signals(&stop);
  auto fail = [&](const Status& s) {
    err << me << " " << opt.index << ": " << s.message() << "\n";
    return 1;
  };
  // Declared in the order they must outlive each other: the device outlives
  // every verbs object, the region and the listener outlive the Replica.
  auto device = attach_nicd(self.nicd, "hyperloop-replica-" + std::to_string(opt.index));
  if (!device.ok()) return fail(device.status());
  nic::Nic& nic = device.value()->nic();
  auto region = self.region.empty() ? nicd::SharedMemory::create(c.options.region_bytes, "ferry-hyperloop-region")
                                    : nicd::SharedMemory::map_file(self.region, c.options.region_bytes);
  if (!region.ok()) return fail(region.status());
  auto listener = cm::Listener::start(self.listen);
  if (!listener.ok()) return fail(Status(listener.status().code(), "CM listener " + self.listen + ": " +
                                                                       listener.status().message()));
  hyperloop::ReplicaSpec spec;
  spec.group = c.group;
  spec.index = opt.index;
  spec.options = c.options;
  spec.connect_timeout_ms = c.connect_timeout_ms;
  const std::span<uint8_t> mem(region.value().data(), c.options.region_bytes);
  // HyperLoop's replica needs no thread after setup; the baseline's serves
  // every operation on one of this process.
  std::unique_ptr<hyperloop::Replica> hl;
  std::unique_ptr<hyperloop::NaiveReplica> naive;
  if (c.system == "hyperloop") {
    auto r = hyperloop::Replica::create(nic, mem, spec);
    if (!r.ok()) return fail(r.status());
    hl = std::move(r).value();
  } else {
    auto r = hyperloop::NaiveReplica::create(nic, mem, spec, /*poll_mode=*/c.system == "naive-poll", opt.cpu);
    if (!r.ok()) return fail(r.status());
    naive = std::move(r).value();
  }
  auto status = [&] { return hl ? hl->status() : naive->status(); };
  const uint32_t links = hl ? 3 : 1;
  if (Status s = hl ? hl->serve(*listener.value()) : naive->serve(*listener.value()); !s.ok()) return fail(s);
  out << fmt::format("event=listening system={} group={} index={} listen={} nicd={} region={} downstream={}\n",
                     c.system, c.group, opt.index, listener.value()->address(), self.nicd,
                     self.region.empty() ? "anonymous" : self.region, downstream)
      << std::flush;
  if (Status s = hl ? hl->connect_downstream(downstream) : naive->connect_downstream(downstream); !s.ok()) {
    return fail(s);
  }
  out << fmt::format("event=ready system={} group={} index={} ({})\n", c.system, c.group, opt.index,
                     hl ? "chains posted; this process now only waits" : "a thread of this process serves every operation")
      << std::flush;

  bool serving = false;
  for (;;) {
    timespec tick{1, 0};
    siginfo_t info;
    const int sig = sigtimedwait(&stop, &info, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      const auto st = status();
      out << fmt::format("event=stop signal={} upstream_links={}{}\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                         st.upstream_links, naive ? fmt::format(" ops={} cpu_ms={:.1f}", naive->ops(),
                                                                naive->cpu_ns() / 1e6)
                                                  : "")
          << std::flush;
      return 0;
    }
    if (!nic.alive()) {
      err << me << " " << opt.index << ": the NIC daemon at " << self.nicd << " died; the chain is broken\n";
      return 1;
    }
    const auto st = status();
    if (!serving && st.upstream_links == links) {
      serving = true;
      out << fmt::format("event=serving group={} index={}\n", c.group, opt.index) << std::flush;
    }
  }
}

int run_hyperloop_client(const ClientCmdOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry hyperloop client";
  auto cfg = load_chain_config(opt.config);
  if (!cfg.ok()) {
    err << me << ": " << cfg.status().message() << "\n";
    return 2;
  }
  ChainConfig& c = cfg.value();
  MemberConfig self = c.client;
  if (!opt.nicd.empty()) self.nicd = opt.nicd;
  if (!opt.listen.empty()) self.listen = opt.listen;
  if (!opt.system.empty()) c.system = opt.system;
  const bool writes = opt.mix == "write" || opt.mix == "both";
  const bool cases = opt.mix == "cas" || opt.mix == "both";
  if (!writes && !cases) {
    err << me << ": --mix must be write, cas or both, not '" << opt.mix << "'\n";
    return 2;
  }
  if (opt.size == 0 || opt.size + 64 > c.options.region_bytes) {
    err << me << ": --size " << opt.size << " does not fit the " << c.options.region_bytes << "-byte region\n";
    return 2;
  }
  if (opt.outstanding == 0 || opt.outstanding > c.options.window) {
    err << me << ": --outstanding must be 1..window (" << c.options.window << ")\n";
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
  if (opt.wait_for_sigusr1) pthread_sigmask(SIG_BLOCK, &go, nullptr);
  auto device = attach_nicd(self.nicd, "hyperloop-client");
  if (!device.ok()) return fail(device.status());
  auto listener = cm::Listener::start(self.listen);
  if (!listener.ok()) return fail(Status(listener.status().code(), "CM listener " + self.listen + ": " +
                                                                       listener.status().message()));
  hyperloop::ClientOptions co;
  co.op_timeout_ns = uint64_t{opt.op_timeout_ms} * 1'000'000;
  hyperloop::RemoteGroupOptions ro;
  ro.group = c.group;
  ro.options = c.options;
  ro.head = c.replicas[0].listen;
  ro.listener = listener.value().get();
  ro.timeout_ms = c.connect_timeout_ms;
  std::unique_ptr<hyperloop::GroupClient> client;
  Result<hyperloop::GroupId> gid = invalid_argument("unset");
  if (c.system == "hyperloop") {
    auto hc = hyperloop::HyperLoopClient::create(device.value()->nic(), co);
    if (!hc.ok()) return fail(hc.status());
    gid = hc.value()->connect_group(ro);
    client = std::move(hc).value();
  } else {
    hyperloop::NaiveOptions no;
    no.client = co;
    auto nc = hyperloop::NaiveClient::create(device.value()->nic(), no);
    if (!nc.ok()) return fail(nc.status());
    gid = nc.value()->connect_group(ro);
    client = std::move(nc).value();
  }
  if (!gid.ok()) return fail(gid.status());
  hyperloop::GroupClient& hl = *client;
  out << fmt::format("event=connected system={} group={} replicas={} head={} listen={}\n", c.system, c.group,
                     c.options.replicas, ro.head, listener.value()->address())
      << std::flush;
  if (opt.wait_for_sigusr1) {
    out << "event=waiting for SIGUSR1\n" << std::flush;
    int sig = 0;
    sigwait(&go, &sig);
  }

  const uint32_t n = c.options.replicas;
  const uint8_t all = static_cast<uint8_t>((1u << n) - 1);
  std::span<uint8_t> mem = hl.client_memory(gid.value()).value();
  const uint64_t slots = (c.options.region_bytes - 64) / opt.size;
  Histogram latency;
  uint64_t failed = 0, cas_mismatch = 0, submitted = 0, completed = 0, write_ops = 0, cas_ops = 0;
  std::string first_error;
  const auto start = Clock::now();
  auto last_progress = start;
  Status submit_error;
  for (uint64_t k = 0; k < opt.ops && submit_error.ok(); ++k) {
    const bool is_cas = cases && (!writes || k % 2 == 1);
    const auto wait_start = Clock::now();
    const auto op_timeout = std::chrono::milliseconds(opt.op_timeout_ms);
    while (submitted - completed >= opt.outstanding && Clock::now() - wait_start < op_timeout) hl.poll();
    if (submitted - completed >= opt.outstanding) {
      submit_error = timed_out("no operation completed for " + std::to_string(opt.op_timeout_ms) + " ms (" +
                               std::to_string(submitted - completed) +
                               " in flight): a replica, its NIC daemon or the network is gone");
      break;
    }
    const auto t0 = Clock::now();
    auto done = [&, t0, is_cas, expect = cas_ops](const hyperloop::OpResult& r) {
      ++completed;
      latency.record(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
      if (!r.status.ok()) {
        if (failed++ == 0) first_error = r.status.to_string();
        return;
      }
      if (is_cas) {
        bool good = r.cas.succeeded == all;
        for (uint32_t i = 0; i < n; ++i) good = good && r.cas.original[i] == expect;
        if (!good && cas_mismatch++ == 0) {
          first_error = fmt::format("gcas {} expected {} on every replica; succeeded map 0x{:x}, replica 0 saw {}",
                                    expect, expect, r.cas.succeeded, r.cas.original[0]);
        }
      }
    };
    if (is_cas) {
      submit_error = hl.gcas_async(gid.value(), 0, cas_ops, cas_ops + 1, all, false, done);
      ++cas_ops;
    } else {
      const uint64_t off = 64 + (write_ops % slots) * opt.size;
      for (uint32_t b = 0; b < opt.size; b += 8) {
        const uint64_t v = mix64(opt.seed ^ (write_ops * 0x100000001ULL + b));
        std::memcpy(mem.data() + off + b, &v, std::min<uint32_t>(8, opt.size - b));
      }
      submit_error = hl.gwrite_async(gid.value(), off, opt.size, false, done);
      ++write_ops;
    }
    if (submit_error.ok()) ++submitted;
    if (Clock::now() - last_progress > std::chrono::seconds(2)) {
      last_progress = Clock::now();
      out << fmt::format("event=progress submitted={} completed={} failed={}\n", submitted, completed, failed)
          << std::flush;
    }
  }
  Status drained = hl.drain(gid.value());
  Status flushed = drained.ok() ? hl.gflush(gid.value()) : drained;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const uint64_t unsubmitted = opt.ops - submitted;
  if (!opt.dump.empty()) {
    std::ofstream f(opt.dump, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(mem.data()), static_cast<std::streamsize>(mem.size()));
    if (!f) err << me << ": cannot write " << opt.dump << "\n";
  }
  const bool good = failed == 0 && cas_mismatch == 0 && flushed.ok() && submit_error.ok() && completed == opt.ops;
  auto us = [&](double q) { return static_cast<double>(latency.percentile(q)) / 1000.0; };
  if (opt.json) {
    nlohmann::json j;
    j["system"] = c.system;
    j["transport"] = "udp";
    j["nic"] = "nicd";
    j["group"] = c.group;
    j["replicas"] = n;
    j["ops"] = opt.ops;
    j["completed"] = completed;
    j["failed"] = failed;
    j["unsubmitted"] = unsubmitted;
    j["cas_mismatch"] = cas_mismatch;
    j["gwrite_ops"] = write_ops;
    j["gcas_ops"] = cas_ops;
    j["size"] = opt.size;
    j["outstanding"] = opt.outstanding;
    j["seconds"] = seconds;
    j["ops_per_s"] = seconds > 0 ? static_cast<double>(completed) / seconds : 0.0;
    j["samples"] = latency.count();
    j["p50_us"] = us(0.50);
    j["p95_us"] = us(0.95);
    j["p99_us"] = us(0.99);
    j["p999_us"] = us(0.999);
    j["max_us"] = static_cast<double>(latency.max()) / 1000.0;
    j["ok"] = good;
    out << j.dump() << "\n";
  } else {
    out << fmt::format("event=done ops={} completed={} failed={} unsubmitted={} cas_mismatch={} gwrite={} gcas={} "
                       "seconds={:.3f} ops_per_s={:.0f} p50_us={:.1f} p99_us={:.1f} p999_us={:.1f} max_us={:.1f}\n",
                       opt.ops, completed, failed, unsubmitted, cas_mismatch, write_ops, cas_ops, seconds,
                       seconds > 0 ? static_cast<double>(completed) / seconds : 0.0, us(0.5), us(0.99), us(0.999),
                       static_cast<double>(latency.max()) / 1000.0);
  }
  out << std::flush;
  if (!good) {
    if (!first_error.empty()) err << me << ": first failure: " << first_error << "\n";
    if (!submit_error.ok()) err << me << ": submitting stopped: " << submit_error.to_string() << "\n";
    if (!flushed.ok()) err << me << ": final drain/gflush: " << flushed.to_string() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace ferry::apps
