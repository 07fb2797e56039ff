// `ferry logkv coordinator|server|client`.
#include "logkv_cmd.h"

#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "ferry/cm/cm.h"
#include "ferry/common/histogram.h"
#include "ferry/nicd/nicd.h"
#include "ferry/store/logkv_deploy.h"
#include "ferry/common/rng.h"
#include "logkv_config.h"
#include "member_process.h"

namespace ferry::apps {

namespace {

using Clock = std::chrono::steady_clock;
namespace lk = store::logkv;

// Serialized event lines on `out`.
lk::EventLog event_log(std::ostream& out) {
  auto mu = std::make_shared<std::mutex>();
  return [&out, mu](const std::string& line) {
    std::lock_guard g(*mu);
    out << line << "\n" << std::flush;
  };
}

// Waits for SIGINT/SIGTERM (exit 0) or the daemon's death (exit 1).
int serve_until_stopped(const sigset_t& stop, nic::Nic& nic, const std::string& who, const std::string& nicd,
                        std::ostream& out, std::ostream& err) {
  for (;;) {
    timespec tick{0, 200'000'000};
    siginfo_t info;
    const int sig = sigtimedwait(&stop, &info, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      out << fmt::format("event=stop {} signal={}\n", who, sig == SIGINT ? "SIGINT" : "SIGTERM") << std::flush;
      return 0;
    }
    if (!nic.alive()) {
      err << "ferry logkv " << who << ": the NIC daemon at " << nicd << " died\n";
      return 1;
    }
  }
}

std::string key_of(uint64_t i) { return fmt::format("key{:012}", i); }

// The value load writes for key i (check recomputes it).
std::string value_of(uint64_t seed, uint64_t i, uint32_t bytes) {
  std::string v(bytes, '\0');
  uint64_t x = mix64(seed * 0x100000001B3ULL ^ i);
  for (uint32_t k = 0; k < bytes; ++k) {
    if (k % 8 == 0) x = mix64(x);
    v[k] = static_cast<char>('a' + (x >> (8 * (k % 8))) % 26);
  }
  return v;
}

std::span<const uint8_t> bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

}  // namespace

int run_logkv_coordinator(const LogKvMemberOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry logkv coordinator";
  auto cfg = load_logkv_config(opt.config);
  if (!cfg.ok()) {
    err << me << ": " << cfg.status().message() << "\n";
    return 2;
  }
  lk::Deployment& d = cfg.value().deployment;
  if (!opt.nicd.empty()) d.coordinator.nicd = opt.nicd;
  if (!opt.listen.empty()) d.coordinator.listen = opt.listen;
  sigset_t stop;
  block_stop_signals(&stop);
  auto fail = [&](const Status& s) {
    err << me << ": " << s.message() << "\n";
    return 1;
  };
  // Declared so that the device outlives every verbs object and the
  // listener outlives the coordinator.
  auto device = attach_nicd(d.coordinator.nicd, "logkv-coordinator");
  if (!device.ok()) return fail(device.status());
  auto listener = cm::Listener::start(d.coordinator.listen);
  if (!listener.ok()) {
    return fail(Status(listener.status().code(), "CM listener " + d.coordinator.listen + ": " + listener.status().message()));
  }
  auto coordinator = lk::CoordinatorService::start(device.value()->nic(), *listener.value(), d, event_log(out));
  if (!coordinator.ok()) return fail(coordinator.status());
  return serve_until_stopped(stop, device.value()->nic(), "coordinator", d.coordinator.nicd, out, err);
}

int run_logkv_server(const LogKvMemberOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry logkv server";
  auto cfg = load_logkv_config(opt.config);
  if (!cfg.ok()) {
    err << me << ": " << cfg.status().message() << "\n";
    return 2;
  }
  lk::Deployment& d = cfg.value().deployment;
  if (opt.index >= d.servers.size()) {
    err << me << ": --index " << opt.index << " is not a server of " << opt.config << " (it has " << d.servers.size()
        << ")\n";
    return 2;
  }
  lk::MemberAddress& self = d.servers[opt.index];
  if (!opt.nicd.empty()) self.nicd = opt.nicd;
  if (!opt.listen.empty()) self.listen = opt.listen;
  if (!opt.dir.empty()) self.dir = opt.dir;
  sigset_t stop;
  block_stop_signals(&stop);
  auto fail = [&](const Status& s) {
    err << me << " " << opt.index << ": " << s.message() << "\n";
    return 1;
  };
  auto device = attach_nicd(self.nicd, "logkv-server-" + std::to_string(opt.index));
  if (!device.ok()) return fail(device.status());
  auto listener = cm::Listener::start(self.listen);
  if (!listener.ok()) {
    return fail(Status(listener.status().code(), "CM listener " + self.listen + ": " + listener.status().message()));
  }
  auto server = lk::StorageServer::start(device.value()->nic(), *listener.value(), d, opt.index, event_log(out));
  if (!server.ok()) return fail(server.status());
  out << fmt::format("event=serving server={} log={} dir={} (backup buffers in DRAM standing for battery-backed "
                     "memory; closed segments written to dir with {})\n",
                     opt.index, server.value()->log_id(), self.dir,
                     tailwind::storage_mode_name(d.server.storage_mode))
      << std::flush;
  const int rc = serve_until_stopped(stop, device.value()->nic(), "server", self.nicd, out, err);
  if (rc == 0) {
    const auto c = server.value()->server().counters();
    out << fmt::format("event=counters server={} puts={} gets={} removes={} objects={} objects_recovered={} "
                       "segments_cleaned={}\n",
                       opt.index, c.puts, c.gets, c.removes, c.objects, c.objects_recovered, c.segments_cleaned)
        << std::flush;
  }
  return rc;
}

int run_logkv_client(const LogKvClientOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry logkv client";
  auto cfg = load_logkv_config(opt.config);
  if (!cfg.ok()) {
    err << me << ": " << cfg.status().message() << "\n";
    return 2;
  }
  const lk::Deployment& d = cfg.value().deployment;
  const std::string nicd = opt.nicd.empty() ? cfg.value().client_nicd : opt.nicd;
  if ((opt.op == "load" || opt.op == "check") && (opt.keys == 0 || opt.value_bytes == 0)) {
    err << me << ": --keys and --value-bytes must be at least 1\n";
    return 2;
  }
  auto fail = [&](const Status& s) {
    err << me << ": " << s.message() << "\n";
    return 1;
  };
  auto device = attach_nicd(nicd, "logkv-client");
  if (!device.ok()) return fail(device.status());
  // A call whose server crashed is retried (map refreshed) until the
  // coordinator has moved the tablet: 64 attempts back off to about 3 s,
  // beyond a crash's detection (heartbeat_ms * missed_beats) and recovery.
  lk::ClientOptions co;
  co.max_attempts = 64;
  auto client = lk::Client::connect(device.value()->nic(), d, co);
  if (!client.ok()) return fail(client.status());
  lk::Client& c = *client.value();
  if (opt.op == "create-table") {
    auto t = c.create_table(0, opt.key);
    if (!t.ok()) return fail(t.status());
    out << fmt::format("table={} id={} tablets={}\n", t->name, t->table_id, t->owners.size());
    return 0;
  }
  // The table, waiting for the cluster to come up.
  const auto deadline = Clock::now() + std::chrono::milliseconds(opt.wait_ms);
  Result<lk::TableMap> table = c.table(0, opt.table);
  while (!table.ok() && table.status().code() == Code::kNotFound && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    table = c.table(0, opt.table);
  }
  if (!table.ok()) return fail(table.status());
  const uint64_t t = table->table_id;
  if (opt.op == "put") {
    auto v = c.put(0, t, bytes(opt.key), bytes(opt.value));
    if (!v.ok()) return fail(v.status());
    out << fmt::format("version={}\n", v.value());
    return 0;
  }
  if (opt.op == "get") {
    auto v = c.get(0, t, bytes(opt.key));
    if (!v.ok()) return fail(v.status());
    out << fmt::format("version={} value={}\n", v->version, std::string(v->value.begin(), v->value.end()));
    return 0;
  }
  if (opt.op == "remove") {
    if (Status s = c.remove(0, t, bytes(opt.key)); !s.ok()) return fail(s);
    out << "removed\n";
    return 0;
  }
  // load / check
  const bool load = opt.op == "load";
  Histogram latency;
  uint64_t missing = 0, wrong = 0;
  const auto t0 = Clock::now();
  auto last_progress = t0;
  for (uint64_t k = 0; k < opt.keys; ++k) {
    const uint64_t i = opt.first + k;
    const std::string key = key_of(i);
    const std::string value = value_of(opt.seed, i, opt.value_bytes);
    const auto s0 = Clock::now();
    if (load) {
      auto v = c.put(0, t, bytes(key), bytes(value));
      if (!v.ok()) return fail(Status(v.status().code(), "PUT " + key + ": " + v.status().message()));
    } else {
      auto v = c.get(0, t, bytes(key));
      if (!v.ok() && v.status().code() == Code::kNotFound) {
        if (missing++ < 5) err << me << ": " << key << " is missing\n";
      } else if (!v.ok()) {
        return fail(Status(v.status().code(), "GET " + key + ": " + v.status().message()));
      } else if (std::string(v->value.begin(), v->value.end()) != value) {
        if (wrong++ < 5) err << me << ": " << key << " has a wrong value\n";
      }
    }
    latency.record(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s0).count()));
    if (Clock::now() - last_progress >= std::chrono::seconds(1)) {
      last_progress = Clock::now();
      err << fmt::format("{}: {} {}/{}\n", me, opt.op, k + 1, opt.keys);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto us = [&](double q) { return static_cast<double>(latency.percentile(q)) / 1000.0; };
  if (opt.json) {
    nlohmann::json j;
    j["op"] = opt.op;
    j["system"] = std::string(tailwind::replication_name(d.server.replication));
    j["keys"] = opt.keys;
    j["value_bytes"] = opt.value_bytes;
    j["seconds"] = seconds;
    j["kops"] = static_cast<double>(opt.keys) / seconds / 1000.0;
    j["p50_us"] = us(0.50);
    j["p95_us"] = us(0.95);
    j["p99_us"] = us(0.99);
    j["p999_us"] = us(0.999);
    j["max_us"] = static_cast<double>(latency.max()) / 1000.0;
    j["missing"] = missing;
    j["wrong"] = wrong;
    j["map_refreshes"] = c.map_refreshes();
    out << j.dump() << "\n";
  } else {
    out << fmt::format("event={} system={} keys={} seconds={:.3f} kops={:.1f} p50_us={:.1f} p95_us={:.1f} "
                       "p99_us={:.1f} p999_us={:.1f} max_us={:.1f} missing={} wrong={} map_refreshes={}\n",
                       load ? "loaded" : "checked", tailwind::replication_name(d.server.replication), opt.keys,
                       seconds, static_cast<double>(opt.keys) / seconds / 1000.0, us(0.50), us(0.95), us(0.99),
                       us(0.999), static_cast<double>(latency.max()) / 1000.0, missing, wrong, c.map_refreshes());
  }
  return missing == 0 && wrong == 0 ? 0 : 1;
}

}  // namespace ferry::apps
