// `ferry demo`, part 3: JUNE BERRY's Ordered Queue. A cache set committed by
// the server NIC's hardware ACK while the server's worker is held still, a get
// that sees it, and the durable variant: puts committed by a READ behind the
// SEND, a power failure before the server executed them, and recovery.
// Every step is verified; a failed check exits non-zero.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "demo.h"
#include "ferry/common/clock.h"
#include "ferry/common/temp_dir.h"
#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/rpc/client.h"
#include "ferry/rpc/server.h"
#include "ferry/store/kv_service.h"
#include "report.h"

namespace ferry::apps {
namespace {

struct Outcome {
  bool done = false;
  Status status;
  rpc::Commit commit = rpc::Commit::kNone;
  uint8_t app_status = 0;
  std::string payload;
};

rpc::Callback record(const std::shared_ptr<Outcome>& o) {
  return [o](const rpc::CallResult& r) {
    o->done = true;
    o->status = r.status;
    o->commit = r.commit;
    o->app_status = r.app_status;
    o->payload.assign(reinterpret_cast<const char*>(r.payload.data()), r.payload.size());
  };
}

std::string value_of_cache_reply(const Outcome& o) {
  store::CacheValue v;
  if (!store::parse_cache_value(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(o.payload.data()), o.payload.size()), &v)) {
    return "<unparsable reply>";
  }
  return std::string(v.value);
}

// A server host whose memory is `domain` and a client machine, on a manual
// engine: the power may fail only between two engine steps.
struct ManualHosts {
  explicit ManualHosts(pm::PersistenceDomain& domain) {
    nic::EngineOptions eo;
    eo.threaded = false;
    eo.clock = &clock;
    engine = std::make_unique<nic::Engine>(eo);
    nic::NicOptions sno;
    sno.name = "server";
    sno.memory = &domain;
    server = engine->add_nic(sno).value();
    client = engine->add_nic({.name = "client"}).value();
  }
  FakeClock clock;
  std::unique_ptr<nic::Engine> engine;
  nic::Nic* server = nullptr;
  nic::Nic* client = nullptr;
};

class JuneBerryDemo {
 public:
  JuneBerryDemo(std::ostream& out, int engine_cpu) : out_(out), steps_(out), engine_cpu_(engine_cpu) {}
  int run() {
    out_ << "\n== JUNE BERRY: requests committed by the NIC's acknowledgement ==\n";
    ordered_queue();
    durable();
    return steps_.summary();
  }

 private:
  // Part A: the Ordered Queue on a threaded NIC engine, the worker driven by
  // this thread so that it can be held still.
  void ordered_queue() {
    nic::EngineOptions eo;
    eo.cpu = bench::usable_cpu(engine_cpu_);
    nic::Engine engine(eo);
    nic::Nic* server_nic = engine.add_nic({.name = "server"}).value();
    nic::Nic* client_nic = engine.add_nic({.name = "client"}).value();
    rpc::ServerOptions so;
    so.mode = rpc::Mode::kOrderedQueue;
    so.workers = 1;
    so.threaded = false;  // this thread plays the worker: it can hold it still
    auto server = rpc::Server::create(engine, *server_nic, so).value();
    auto cache = store::CacheService::attach(*server, SteadyClock::instance(), {}).value();
    if (!steps_.check(server->start().ok(), "server started")) return;
    auto client = rpc::Client::create(engine, *client_nic, *server, {}).value();
    store::KvClient kv(client->session(0));

    steps_.step("A cache set, committed by the hardware ACK",
                "The client sends `set greeting` marked nilext (it returns nothing and cannot fail). The server's "
                "worker is held still: no server CPU looks at the request. The client's commit is the ACK the "
                "server's NIC sends once the request sits in its receive buffer.");
    auto set = std::make_shared<Outcome>();
    const std::string value = "hello from the NIC";
    if (!steps_.check(kv.set_async("greeting", value, 0, 0, /*nilext=*/true, record(set)).ok(), "set sent")) return;
    wait(*client, *server, set, /*worker=*/false);
    steps_.check(set->done && set->status.ok() && set->commit == rpc::Commit::kHardwareAck,
                 fmt::format("set committed by: {}", rpc::commit_name(set->commit)));
    steps_.check(server->counters().requests == 0 && cache->partition(0).stats().items == 0,
                 "the worker has executed nothing: the cache does not hold the key yet");

    steps_.step("A get right after the set's ACK sees the set",
                "The get lands in the receive queue after the set (Rule 1: the NIC allocates buffers in arrival "
                "order and acknowledges after allocating), and the worker executes strictly in buffer order "
                "(Rule 2), so the set runs first. Now the worker is let go.");
    auto get = std::make_shared<Outcome>();
    if (!steps_.check(kv.get_async("greeting", record(get)).ok(), "get sent")) return;
    wait(*client, *server, get, /*worker=*/true);
    steps_.check(get->done && get->status.ok() && get->commit == rpc::Commit::kReply &&
                     get->app_status == static_cast<uint8_t>(store::CacheStatus::kOk),
                 fmt::format("get answered by the worker ({})", rpc::commit_name(get->commit)));
    steps_.check(value_of_cache_reply(*get) == value, fmt::format("get returned \"{}\"", value_of_cache_reply(*get)));
    const rpc::WorkerCounters c = server->counters();
    steps_.check(c.requests == 2 && c.replies == 1,
                 fmt::format("worker executed {} requests and sent {} response (none for the set)", c.requests,
                             c.replies));
  }

  // Part B: JUNE BERRY-D. A manual engine, so the power can fail between two
  // steps of the NICs, as the persistence model requires.
  void durable() {
    steps_.step("JUNE BERRY-D: puts committed durably, then the power fails",
                "The server keeps its receive buffers and a persistent KV store in (modeled) persistent memory, "
                "with DDIO off. Each put is a SEND followed, in the same doorbell, by a 1-byte READ: the server "
                "NIC answers the READ only once the SEND's bytes are durable. The worker is held still, so the "
                "puts are committed but never executed -- then the power fails.");
    auto made = make_temp_dir("ferry-demo-jb");
    if (!steps_.check(made.ok(),
                      "a new directory for the PM files: " + (made.ok() ? made.value() : made.status().to_string()))) {
      return;
    }
    const std::filesystem::path dir = made.value();
    std::error_code ec;
    pm::PersistenceDomain domain(pm::PlatformConfig{.ddio = false, .eadr = false});
    rpc::ServerOptions so;
    so.mode = rpc::Mode::kOrderedQueue;
    so.workers = 1;
    so.threaded = false;
    so.buffers = 8;
    so.buffer_bytes = 4096;
    const rpc::DurableLayout layout{so.buffers, so.buffer_bytes, so.stride_bytes};
    auto srq = domain.map_pm((dir / "srq.pm").string(), (layout.area_bytes() + 4095) / 4096 * 4096, true);
    auto data = domain.map_pm((dir / "kv.pm").string(), 1 << 20, true);
    if (!steps_.check(srq.ok() && data.ok(), fmt::format("PM files mapped in {}", dir.string()))) return;
    so.durable_region = srq.value();
    std::vector<pm::Region*> regions{data.value()};
    const std::vector<std::pair<std::string, std::string>> puts = {
        {"alice", "42"}, {"bob", "17"}, {"carol", "99"}};

    {
      ManualHosts hosts(domain);
      nic::Engine& engine = *hosts.engine;
      nic::Nic* server_nic = hosts.server;
      nic::Nic* client_nic = hosts.client;
      auto server = rpc::Server::create(engine, *server_nic, so).value();
      auto svc = store::PmKvService::attach(*server, domain, regions, /*open_existing=*/false);
      if (!steps_.check(svc.ok() && server->start().ok(), "durable server started on a fresh store")) return;
      auto client = rpc::Client::create(engine, *client_nic, *server, {}).value();
      store::KvClient kv(client->session(0));
      for (const auto& [k, v] : puts) {
        auto o = std::make_shared<Outcome>();
        if (!kv.pm_put_async(k, v, /*nilext=*/true, record(o)).ok()) return;
        Status st = engine.run_until([&] {
          client->session(0).poll();
          return o->done;
        });
        steps_.check(st.ok() && o->status.ok() && o->commit == rpc::Commit::kPersistentAck,
                     fmt::format("put {}={} committed by: {}", k, v, rpc::commit_name(o->commit)));
      }
      steps_.check(server->counters().requests == 0, "the worker executed none of them");
      const pm::PowerFailReport report = domain.power_fail(2026);
      out_ << fmt::format("    power failure: the server's DRAM, caches and NIC state are gone; PM keeps what was "
                          "durable (NIC writes not yet durable: {}, of which lost: {})\n",
                          report.nic_writes_pending, report.nic_writes_pending - report.nic_writes_kept);
    }

    steps_.step("Recovery: the committed puts are executed after the restart",
                "The server restarts on the same PM. It scans its receive ring from ReqToExecute to SRQTail, "
                "checks each request's checksum, and re-executes the valid nilext requests in order.");
    ManualHosts hosts(domain);
    nic::Engine& engine = *hosts.engine;
    nic::Nic* server_nic = hosts.server;
    nic::Nic* client_nic = hosts.client;
    so.recover = true;
    auto server = rpc::Server::create(engine, *server_nic, so).value();
    auto svc = store::PmKvService::attach(*server, domain, regions, /*open_existing=*/true);
    const Status started = svc.ok() ? server->start() : svc.status();
    if (!steps_.check(started.ok(), "server recovered: " + (started.ok() ? std::string("ok") : started.to_string()))) {
      return;
    }
    steps_.check(server->counters().recovered == puts.size(),
                 fmt::format("recovery re-executed {} committed put(s)", server->counters().recovered));
    auto client = rpc::Client::create(engine, *client_nic, *server, {}).value();
    store::KvClient kv(client->session(0));
    for (const auto& [k, v] : puts) {
      auto o = std::make_shared<Outcome>();
      if (!kv.pm_get_async(k, record(o)).ok()) return;
      Status st = engine.run_until([&] {
        server->poll_worker(0);
        client->session(0).poll();
        return o->done;
      });
      steps_.check(st.ok() && o->app_status == store::kPmOk && o->payload == v,
                   fmt::format("get {} -> {}", k, o->app_status == store::kPmOk ? o->payload : "(not found)"));
    }
    client.reset();
    server.reset();
    std::filesystem::remove_all(dir, ec);
  }

  // Runs until `o` finishes, polling the client's session and, if `worker`,
  // the server's worker (the engine runs on its own thread). Gives up after 10 s.
  void wait(rpc::Client& client, rpc::Server& server, const std::shared_ptr<Outcome>& o, bool worker) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!o->done && std::chrono::steady_clock::now() < deadline) {
      client.session(0).poll();
      if (worker) server.poll_worker(0);
    }
  }

  std::ostream& out_;
  DemoSteps steps_;
  int engine_cpu_;
};

}  // namespace

int run_juneberry_demo(std::ostream& out, int engine_cpu) { return JuneBerryDemo(out, engine_cpu).run(); }

}  // namespace ferry::apps
