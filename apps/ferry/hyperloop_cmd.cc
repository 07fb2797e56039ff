// `ferry hyperloop replica|client`: key=value log lines on stdout (one per
// event), errors on stderr, a summary (key=value or JSON) from the client.
// The replica is a hyperloop::ReplicaMember; this file adds its process.
#include "hyperloop_cmd.h"

#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "chain_config.h"
#include "command.h"
#include "ferry/cm/cm.h"
#include "ferry/common/histogram.h"
#include "ferry/common/rng.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/naive.h"
#include "ferry/hyperloop/replica.h"
#include "ferry/hyperloop/replica_member.h"
#include "ferry/nicd/nicd.h"
#include "member_process.h"

namespace ferry::apps {

namespace {

using Clock = std::chrono::steady_clock;

// The replica's data path on this process's NIC: its Replica (or the
// baseline's NaiveReplica), built, served and connected downstream on a
// thread of its own (connecting waits for the neighbour) while the main
// thread takes signals; the main thread hands the outcome to the member.
class ChainDataPath final : public hyperloop::ReplicaMemberDataPath {
 public:
  ChainDataPath(nic::Nic& nic, cm::Listener& listener, const ChainConfig& c, const MemberConfig& self,
                const hyperloop::ReplicaSpec& spec, std::span<uint8_t> region, std::string downstream, int cpu,
                std::function<void(const std::string&)> log)
      : nic_(nic),
        listener_(listener),
        c_(c),
        self_(self),
        spec_(spec),
        region_(region),
        downstream_(std::move(downstream)),
        cpu_(cpu),
        log_(std::move(log)) {}
  ~ChainDataPath() override {
    if (worker_.joinable()) worker_.join();
  }

  void start_build() override {
    worker_ = std::thread([this] {
      built_ = build();
      done_.store(true, std::memory_order_release);
    });
  }
  uint32_t upstream_links() const override {
    return hl_ ? hl_->status().upstream_links : naive_ ? naive_->status().upstream_links : 0;
  }

  // Hands a finished build's outcome to `member` (with `wait`, once it
  // finished); whether it handed one.
  bool deliver(hyperloop::ReplicaMember& member, bool wait) {
    if (!worker_.joinable() || (!wait && !done_.load(std::memory_order_acquire))) return false;
    worker_.join();
    member.on_built(built_);
    return true;
  }
  const hyperloop::NaiveReplica* naive() const { return naive_.get(); }

 private:
  // HyperLoop's replica needs no thread after setup; the baseline's serves
  // every operation on one of this process.
  Status build() {
    if (c_.system == "hyperloop") {
      FERRY_ASSIGN_OR_RETURN(hl_, hyperloop::Replica::create(nic_, region_, spec_));
      FERRY_RETURN_IF_ERROR(hl_->serve(listener_));
    } else {
      FERRY_ASSIGN_OR_RETURN(naive_, hyperloop::NaiveReplica::create(nic_, region_, spec_,
                                                                     /*poll_mode=*/c_.system == "naive-poll", cpu_));
      FERRY_RETURN_IF_ERROR(naive_->serve(listener_));
    }
    log_(fmt::format("event=listening system={} group={} index={} listen={} nicd={} region={} downstream={}", c_.system,
                     c_.group, spec_.index, listener_.address(), self_.nicd,
                     self_.region.empty() ? "anonymous" : self_.region, downstream_));
    FERRY_RETURN_IF_ERROR(hl_ ? hl_->connect_downstream(downstream_) : naive_->connect_downstream(downstream_));
    log_(fmt::format(
        "event=ready system={} group={} index={} ({})", c_.system, c_.group, spec_.index,
        hl_ ? "chains posted; this process now only waits" : "a thread of this process serves every operation"));
    return ok_status();
  }

  nic::Nic& nic_;
  cm::Listener& listener_;
  const ChainConfig& c_;
  const MemberConfig& self_;
  const hyperloop::ReplicaSpec spec_;
  const std::span<uint8_t> region_;
  const std::string downstream_;
  const int cpu_;
  const std::function<void(const std::string&)> log_;
  std::unique_ptr<hyperloop::Replica> hl_;
  std::unique_ptr<hyperloop::NaiveReplica> naive_;
  std::thread worker_;
  std::atomic<bool> done_{false};
  Status built_;  // written by the worker, read after joining it
};

}  // namespace

int run_hyperloop_replica(const ReplicaCmdOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry hyperloop replica";
  std::optional<ChainConfig> cfg = load_member_config(&load_chain_config, opt.member, me, err);
  if (!cfg) return 2;
  ChainConfig& c = *cfg;
  if (opt.index >= c.replicas.size()) {
    err << me << ": --index " << opt.index << " is not a replica of " << opt.member.config << " (it has "
        << c.replicas.size() << ")\n";
    return 2;
  }
  MemberConfig self = c.replicas[opt.index];
  override_member(self, opt.member);
  if (!opt.system.empty()) c.system = opt.system;
  const bool tail = opt.index + 1 == c.replicas.size();
  const std::string downstream = tail ? c.client.listen : c.replicas[opt.index + 1].listen;

  sigset_t stop;
  block_stop_signals(&stop);
  const auto fail = failure_reporter(err, me + " " + std::to_string(opt.index));
  const auto log_line = line_writer(out);
  // Declared in the order they must outlive each other: the device outlives
  // every verbs object, the region and the listener outlive the data path.
  auto device = attach_nicd(self.nicd, "hyperloop-replica-" + std::to_string(opt.index));
  if (!device.ok()) return fail(device.status());
  nic::Nic& nic = device.value()->nic();
  auto region = self.region.empty() ? nicd::SharedMemory::create(c.options.region_bytes, "ferry-hyperloop-region")
                                    : nicd::SharedMemory::map_file(self.region, c.options.region_bytes);
  if (!region.ok()) return fail(region.status());
  auto listener = listen_cm(self.listen);
  if (!listener.ok()) return fail(listener.status());
  hyperloop::ReplicaSpec spec;
  spec.group = c.group;
  spec.index = opt.index;
  spec.options = c.options;
  spec.connect_timeout_ms = c.connect_timeout_ms;
  ChainDataPath path(nic, *listener.value(), c, self, spec, {region.value().data(), c.options.region_bytes}, downstream,
                     opt.cpu, log_line);
  hyperloop::ReplicaMemberOptions mo;
  mo.group = c.group;
  mo.index = opt.index;
  mo.links = c.system == "hyperloop" ? 3 : 1;
  hyperloop::ReplicaMember member(mo, log_line);
  member.attach(&path);

  ServeLoop loop;
  loop.nic = &nic;
  loop.died = me + " " + std::to_string(opt.index) + ": the NIC daemon at " + self.nicd + " died; the chain is broken";
  loop.poll = [&](uint64_t now) {
    const bool delivered = path.deliver(member, /*wait=*/false);
    member.on_tick(now);
    return delivered;
  };
  loop.finished = [&]() -> std::optional<int> {
    if (member.finished()) return fail(member.failure());
    return std::nullopt;
  };
  loop.stop = [&](const char* signal) {
    while (member.busy() && path.deliver(member, /*wait=*/true)) {
    }
    if (member.finished()) return fail(member.failure());
    log_line(fmt::format("event=stop signal={} upstream_links={}{}", signal, path.upstream_links(),
                         path.naive() != nullptr
                             ? fmt::format(" ops={} cpu_ms={:.1f}", path.naive()->ops(), path.naive()->cpu_ns() / 1e6)
                             : ""));
    return 0;
  };
  return serve_until_stopped(stop, loop, err);
}

int run_hyperloop_client(const ClientCmdOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry hyperloop client";
  std::optional<ChainConfig> cfg = load_member_config(&load_chain_config, opt.member, me, err);
  if (!cfg) return 2;
  ChainConfig& c = *cfg;
  MemberConfig self = c.client;
  override_member(self, opt.member);
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
  const auto fail = failure_reporter(err, me);
  const sigset_t go = go_signal(opt.wait_for_sigusr1);
  auto device = attach_nicd(self.nicd, "hyperloop-client");
  if (!device.ok()) return fail(device.status());
  auto listener = listen_cm(self.listen);
  if (!listener.ok()) return fail(listener.status());
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
    wait_for_go(go);
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
      latency.record(
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
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
    out << fmt::format(
        "event=done ops={} completed={} failed={} unsubmitted={} cas_mismatch={} gwrite={} gcas={} "
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

namespace {

// What every chain member reads the same way: the chain file, its overrides
// and --system.
template <class Options>
MemberCommand<Options> add_chain_member(CLI::App* hl_cmd, std::string name, std::string description, const char* listen,
                                        const char* region) {
  const auto member = add_member_command<Options>(
      hl_cmd, std::move(name), std::move(description),
      {.config = "the chain's TOML file (docs/deployment.md)", .listen = listen, .region = region});
  member.app
      ->add_option("--system", member.options->system,
                   "hyperloop, or the baseline naive-event / naive-poll (overrides group.system)")
      ->check(CLI::IsMember({"hyperloop", "naive-event", "naive-poll"}));
  return member;
}

}  // namespace

void add_hyperloop_commands(CLI::App& app, Commands& commands) {
  CLI::App* hl_cmd = app.add_subcommand(
      "hyperloop",
      "A HyperLoop chain as processes: replicas and a client, each attached to its host's NIC daemon "
      "(docs/deployment.md)");
  hl_cmd->require_subcommand(1);
  const auto replica_cmd = add_chain_member<ReplicaCmdOptions>(
      hl_cmd, "replica",
      "Serve as one replica of the chain described by --config: pre-post its chains, then sleep while its NIC "
      "serves the group. Stops on SIGINT/SIGTERM, or exits 1 when its NIC daemon dies",
      "this replica's CM address (overrides the file)",
      "file holding the replica's region, e.g. on /dev/shm or a DAX mount (overrides the file)");
  CLI::App* replica = replica_cmd.app;
  const auto r = replica_cmd.options;
  replica->add_option("--index", r->index, "which [[replica]] of the file this process is (0: head)")->required();
  replica->add_option("--cpu", r->cpu, "naive-*: pin the thread that serves the chain (-1: no)")->capture_default_str();
  commands.add(replica, [r] { return run_hyperloop_replica(*r, std::cout, std::cerr); });

  const auto client_cmd = add_chain_member<ClientCmdOptions>(
      hl_cmd, "client",
      "Connect to the chain described by --config and run --ops operations (gWRITEs and gCAS counter increments), "
      "checking that every one was acknowledged and applied once, in order. Exit 0 only if all were",
      "this client's CM address (overrides the file)", nullptr);
  CLI::App* client = client_cmd.app;
  const auto o = client_cmd.options;
  client->add_option("--ops", o->ops, "operations to run")->capture_default_str();
  client->add_option("--size", o->size, "bytes per gWRITE")->capture_default_str();
  client->add_option("--outstanding", o->outstanding, "operations in flight (at most the window)")
      ->capture_default_str();
  client->add_option("--mix", o->mix, "write, cas or both (alternating)")
      ->check(CLI::IsMember({"write", "cas", "both"}))
      ->capture_default_str();
  client->add_option("--seed", o->seed, "seed of the bytes written")->capture_default_str();
  client->add_option("--dump", o->dump,
                     "write the client's memory image here at the end (compare it with the replicas' regions)");
  client->add_flag("--json", o->json, "print the summary as one JSON object");
  client->add_option("--op-timeout-ms", o->op_timeout_ms, "fail the run when no operation completes for this long")
      ->check(CLI::Range(1u, 3'600'000u))
      ->capture_default_str();
  client->add_flag("--wait-for-sigusr1", o->wait_for_sigusr1,
                   "after connecting, wait for SIGUSR1 before the first operation (tests stop the replicas first)");
  commands.add(client, [o] { return run_hyperloop_client(*o, std::cout, std::cerr); });
}

}  // namespace ferry::apps
