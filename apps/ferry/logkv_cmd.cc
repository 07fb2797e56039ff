// `ferry logkv coordinator|server|client`.
#include "logkv_cmd.h"

#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "command.h"
#include "ferry/cm/cm.h"
#include "ferry/common/histogram.h"
#include "ferry/common/rng.h"
#include "ferry/nicd/nicd.h"
#include "ferry/store/logkv_deploy.h"
#include "logkv_config.h"
#include "member_process.h"

namespace ferry::apps {

namespace {

using Clock = std::chrono::steady_clock;
namespace lk = store::logkv;

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

// The loop both members run: the coordinator and the servers work on their
// own threads (RPC workers, the heartbeat); this one waits for a signal.
ServeLoop logkv_loop(nic::Nic& nic, const std::string& who, const std::string& nicd,
                     const std::function<void(const std::string&)>& log_line) {
  ServeLoop loop;
  loop.nic = &nic;
  loop.died = "ferry logkv " + who + ": the NIC daemon at " + nicd + " died";
  loop.stop = [who, log_line](const char* signal) {
    log_line(fmt::format("event=stop {} signal={}", who, signal));
    return 0;
  };
  return loop;
}

}  // namespace

int run_logkv_coordinator(const LogKvMemberOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry logkv coordinator";
  std::optional<LogKvConfig> cfg = load_member_config(&load_logkv_config, opt.member, me, err);
  if (!cfg) return 2;
  lk::Deployment& d = cfg->deployment;
  override_member(d.coordinator, opt.member);
  sigset_t stop;
  block_stop_signals(&stop);
  const auto fail = failure_reporter(err, me);
  const auto log_line = line_writer(out);
  // Declared so that the device outlives every verbs object and the
  // listener outlives the coordinator.
  auto device = attach_nicd(d.coordinator.nicd, "logkv-coordinator");
  if (!device.ok()) return fail(device.status());
  auto listener = listen_cm(d.coordinator.listen);
  if (!listener.ok()) return fail(listener.status());
  auto coordinator = lk::CoordinatorService::start(device.value()->nic(), *listener.value(), d, log_line);
  if (!coordinator.ok()) return fail(coordinator.status());
  return serve_until_stopped(stop, logkv_loop(device.value()->nic(), "coordinator", d.coordinator.nicd, log_line), err);
}

int run_logkv_server(const LogKvMemberOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry logkv server";
  std::optional<LogKvConfig> cfg = load_member_config(&load_logkv_config, opt.member, me, err);
  if (!cfg) return 2;
  lk::Deployment& d = cfg->deployment;
  if (opt.index >= d.servers.size()) {
    err << me << ": --index " << opt.index << " is not a server of " << opt.member.config << " (it has "
        << d.servers.size() << ")\n";
    return 2;
  }
  lk::MemberAddress& self = d.servers[opt.index];
  override_member(self, opt.member);
  sigset_t stop;
  block_stop_signals(&stop);
  const auto fail = failure_reporter(err, me + " " + std::to_string(opt.index));
  const auto log_line = line_writer(out);
  auto device = attach_nicd(self.nicd, "logkv-server-" + std::to_string(opt.index));
  if (!device.ok()) return fail(device.status());
  auto listener = listen_cm(self.listen);
  if (!listener.ok()) return fail(listener.status());
  auto server = lk::StorageServer::start(device.value()->nic(), *listener.value(), d, opt.index, log_line);
  if (!server.ok()) return fail(server.status());
  log_line(
      fmt::format("event=serving server={} log={} dir={} (backup buffers in DRAM standing for battery-backed "
                  "memory; closed segments written to dir with {})",
                  opt.index, server.value()->log_id(), self.dir, tailwind::storage_mode_name(d.server.storage_mode)));
  ServeLoop loop = logkv_loop(device.value()->nic(), "server", self.nicd, log_line);
  loop.stop = [&, stopped = loop.stop](const char* signal) {
    stopped(signal);
    const auto c = server.value()->server().counters();
    log_line(
        fmt::format("event=counters server={} puts={} gets={} removes={} objects={} objects_recovered={} "
                    "segments_cleaned={}",
                    opt.index, c.puts, c.gets, c.removes, c.objects, c.objects_recovered, c.segments_cleaned));
    return 0;
  };
  return serve_until_stopped(stop, loop, err);
}

int run_logkv_client(const LogKvClientOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string me = "ferry logkv client";
  std::optional<LogKvConfig> cfg = load_member_config(&load_logkv_config, opt.member, me, err);
  if (!cfg) return 2;
  const lk::Deployment& d = cfg->deployment;
  const std::string nicd = opt.member.nicd.empty() ? cfg->client_nicd : opt.member.nicd;
  if ((opt.op == "load" || opt.op == "check") && (opt.keys == 0 || opt.value_bytes == 0)) {
    err << me << ": --keys and --value-bytes must be at least 1\n";
    return 2;
  }
  const auto fail = failure_reporter(err, me);
  auto device = attach_nicd(nicd, "logkv-client");
  if (!device.ok()) return fail(device.status());
  // A call whose server crashed is retried (map refreshed) until the
  // coordinator has moved the tablet: for --retry-ms, beyond a crash's
  // detection (heartbeat_ms * missed_beats) and its recovery, which takes
  // seconds on a loaded machine.
  lk::ClientOptions co;
  co.retry_for_ms = opt.retry_ms;
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
    latency.record(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s0).count()));
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
    out << fmt::format(
        "event={} system={} keys={} seconds={:.3f} kops={:.1f} p50_us={:.1f} p95_us={:.1f} "
        "p99_us={:.1f} p999_us={:.1f} max_us={:.1f} missing={} wrong={} map_refreshes={}\n",
        load ? "loaded" : "checked", tailwind::replication_name(d.server.replication), opt.keys, seconds,
        static_cast<double>(opt.keys) / seconds / 1000.0, us(0.50), us(0.95), us(0.99), us(0.999),
        static_cast<double>(latency.max()) / 1000.0, missing, wrong, c.map_refreshes());
  }
  return missing == 0 && wrong == 0 ? 0 : 1;
}

void add_logkv_commands(CLI::App& app, Commands& commands) {
  CLI::App* lk_cmd = app.add_subcommand(
      "logkv",
      "LogKv (the RAMCloud-like store on Tailwind) as processes: a coordinator, storage servers and clients, each "
      "attached to its host's NIC daemon, described by one TOML file (docs/tailwind.md, Deployment)");
  lk_cmd->require_subcommand(1);
  const auto coordinator = add_member_command<LogKvMemberOptions>(
      lk_cmd, "coordinator",
      "Serve as the cluster's coordinator: tables and tablet map, heartbeats, and the recovery of a server that "
      "stops answering. Stops on SIGINT/SIGTERM, or exits 1 when its NIC daemon dies",
      {.config = "the cluster's TOML file", .listen = "the coordinator's CM address (overrides the file)"});
  commands.add(coordinator.app, [c = coordinator.options] { return run_logkv_coordinator(*c, std::cout, std::cerr); });

  const auto server = add_member_command<LogKvMemberOptions>(
      lk_cmd, "server",
      "Serve as storage server --index of the cluster: primary for its tablets, backup for the others' logs. "
      "Waits for the other servers and the coordinator, then enlists. Stops on SIGINT/SIGTERM, or exits 1 when its "
      "NIC daemon dies",
      {.config = "the cluster's TOML file",
       .listen = "this server's CM address (overrides the file)",
       .dir = "backup storage directory (overrides the file)"});
  server.app->add_option("--index", server.options->index, "which [[server]] of the file this process is")->required();
  commands.add(server.app, [s = server.options] { return run_logkv_server(*s, std::cout, std::cerr); });

  const auto client_cmd = add_member_command<LogKvClientOptions>(
      lk_cmd, "client",
      "One operation against the cluster: put KEY VALUE, get KEY, remove KEY, create-table NAME, or load/check "
      "--keys N (load writes key<first>.. with values derived from --seed and reports the PUT latency "
      "distribution; check reads them back and exits 1 unless every value is exact)",
      {.config = "the cluster's TOML file", .nicd = "the NIC daemon's socket (overrides [client] nicd)"});
  CLI::App* client = client_cmd.app;
  const auto o = client_cmd.options;
  client->add_option("--table", o->table, "the table")->capture_default_str();
  client->add_option("op", o->op, "put, get, remove, create-table, load or check")
      ->required()
      ->check(CLI::IsMember({"put", "get", "remove", "create-table", "load", "check"}));
  client->add_option("key", o->key, "put/get/remove: the key; create-table: the name");
  client->add_option("value", o->value, "put: the value");
  client->add_option("--keys", o->keys, "load/check: how many keys")->capture_default_str();
  client->add_option("--first", o->first, "load/check: the first key's number")->capture_default_str();
  client->add_option("--value-bytes", o->value_bytes, "load/check: bytes per value")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  client->add_option("--seed", o->seed, "load/check: seed of the values")->capture_default_str();
  client->add_option("--wait-ms", o->wait_ms, "wait this long for the table to exist")->capture_default_str();
  client
      ->add_option("--retry-ms", o->retry_ms,
                   "retry a call whose server is down (or whose tablet moved) for this long before giving up")
      ->capture_default_str();
  client->add_flag("--json", o->json, "load/check: print the summary as one JSON object");
  commands.add(client, [o] {
    if ((o->op == "put" && (o->key.empty() || o->value.empty())) ||
        ((o->op == "get" || o->op == "remove" || o->op == "create-table") && o->key.empty())) {
      std::cerr << "ferry logkv client: " << o->op << " needs "
                << (o->op == "put"            ? "KEY VALUE"
                    : o->op == "create-table" ? "NAME"
                                              : "KEY")
                << "\n";
      return 2;
    }
    return run_logkv_client(*o, std::cout, std::cerr);
  });
}

}  // namespace ferry::apps
