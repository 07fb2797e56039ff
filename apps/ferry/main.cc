// ferry: the command-line tool. `ferry --help` lists the subcommands.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "demo.h"
#include "ferry/common/status.h"
#include "group_bench.h"
#include "group_udp_bench.h"
#include "hyperloop_cmd.h"
#include "logkv_cmd.h"
#include "nicd_cmd.h"
#include "nic_bench.h"
#include "oq_bench.h"
#include "pm_bench.h"
#include "store_bench.h"
#include "store_cmd.h"
#include "tailwind_bench.h"
#include "udp_pingpong.h"

namespace {

constexpr const char* kVersion = "0.1.0";

// One whole decimal number in 1..UINT32_MAX ("64x", "", "-1" and
// 4294967296 are rejected, not truncated or wrapped).
ferry::Result<uint32_t> parse_count(std::string_view token) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (token.empty()) return ferry::invalid_argument("empty entry");
  if (error != std::errc() || end != token.data() + token.size()) {
    return ferry::invalid_argument("'" + std::string(token) + "' is not a whole number");
  }
  if (value == 0 || value > std::numeric_limits<uint32_t>::max()) {
    return ferry::invalid_argument("'" + std::string(token) + "' is outside 1..4294967295");
  }
  return static_cast<uint32_t>(value);
}

// "8,64,4096" (a list) or "8-65536" (every power of two from 8 to 65536; both
// ends must be powers of two). Never returns an empty list.
ferry::Result<std::vector<uint32_t>> parse_sizes(std::string_view spec) {
  std::vector<uint32_t> sizes;
  const size_t dash = spec.find('-');
  if (dash != std::string_view::npos && dash != 0 && spec.find(',') == std::string_view::npos) {
    FERRY_ASSIGN_OR_RETURN(const uint32_t lo, parse_count(spec.substr(0, dash)));
    FERRY_ASSIGN_OR_RETURN(const uint32_t hi, parse_count(spec.substr(dash + 1)));
    if ((lo & (lo - 1)) != 0 || (hi & (hi - 1)) != 0) {
      return ferry::invalid_argument("both ends of a range must be powers of two");
    }
    if (lo > hi) return ferry::invalid_argument("empty range: its start is above its end");
    for (uint64_t s = lo; s <= hi; s *= 2) sizes.push_back(static_cast<uint32_t>(s));
    return sizes;
  }
  size_t start = 0;
  for (;;) {
    const size_t comma = spec.find(',', start);
    FERRY_ASSIGN_OR_RETURN(const uint32_t size, parse_count(spec.substr(start, comma - start)));
    sizes.push_back(size);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return sizes;
}

// Parses a --sizes-style option into `*out`; on bad input says which option
// and why on stderr and returns false.
bool parse_list_option(const std::string& command, const std::string& option, const std::string& spec,
                       std::vector<uint32_t>* out) {
  auto parsed = parse_sizes(spec);
  if (!parsed.ok()) {
    std::cerr << command << ": " << option << " '" << spec << "': " << parsed.status().message() << "\n";
    return false;
  }
  *out = std::move(parsed).value();
  return true;
}

// The options every throughput benchmark shares: run length and placement.
void add_run_options(CLI::App* app, uint64_t& iters, double& seconds_per_point, int& client_cpu, int& engine_cpu) {
  app->add_option("--iters", iters, "measured operations per point (0: sized by --seconds)")->capture_default_str();
  app->add_option("--seconds", seconds_per_point, "target duration per point when --iters is 0")->capture_default_str();
  app->add_option("--client-cpu", client_cpu, "CPU for the measuring thread (-1: no pinning)")->capture_default_str();
  app->add_option("--engine-cpu", engine_cpu, "CPU for the NIC engine thread (-1: no pinning)")->capture_default_str();
}

// "1,4,16": a list as parse_sizes() reads it.
std::string join(const std::vector<uint32_t>& values) {
  std::string s;
  for (uint32_t v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

// The exit code for a benchmark's result, saying why on stderr if it failed.
int exit_code(const std::string& command, const ferry::Status& s) {
  if (s.ok()) return 0;
  std::cerr << command << ": " << s.to_string() << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ferry: replicated, durable storage with the server CPU off the critical path.\n"
      "Runs on a software RDMA NIC (no RNIC needed); see README.md."};
  app.set_version_flag("--version", kVersion);
  app.require_subcommand(1);

  CLI::App* demo = app.add_subcommand(
      "demo",
      "Walk through the software RNIC (each verb, WAIT/ENABLE, a remote WQE rewrite), then a 3-replica HyperLoop "
      "group doing each primitive, verified on every replica, then JUNE BERRY: a set committed by the NIC's ACK, "
      "a get that sees it, durable puts across a power failure; then Tailwind: PUTs replicated by RDMA WRITE with the "
      "backups idle, a primary crash while a client writes, recovery, the data served again");
  int demo_engine_cpu = 1;
  std::string demo_part = "all";
  demo->add_option("--engine-cpu", demo_engine_cpu, "CPU for the NIC engine thread (-1: no pinning)")
      ->capture_default_str();
  demo->add_option("--part", demo_part,
                   "nic (the software RNIC), group (HyperLoop primitives), juneberry (the Ordered Queue), "
                   "tailwind (LogKv with Tailwind replication, a crash and its recovery), storage (HyperLoop's "
                   "transactional store, a replica replaced under writes) or all")
      ->check(CLI::IsMember({"nic", "group", "juneberry", "tailwind", "storage", "all"}))
      ->capture_default_str();

  CLI::App* nicd_cmd = app.add_subcommand(
      "nicd",
      "Run this host's NIC daemon in the foreground: a software RNIC on RoCEv2/UDP that applications attach to "
      "through a Unix socket and shared memory (docs/nicd.md). Stops on SIGINT/SIGTERM");
  ferry::nicd::DaemonOptions nicd_opts;
  std::string nicd_bind = "127.0.0.1:4791";
  uint64_t nicd_spin_us = nicd_opts.spin_ns / 1000;
  size_t nicd_arena_mib = nicd_opts.arena_bytes >> 20;
  nicd_cmd->add_option("--socket", nicd_opts.socket_path, "Unix socket applications open")->capture_default_str();
  nicd_cmd->add_option("--bind", nicd_bind,
                       "IPv4 address of a local interface and UDP port for RoCEv2 (port 0: ephemeral)")
      ->capture_default_str();
  nicd_cmd->add_option("--name", nicd_opts.name, "device name in logs and reports")->capture_default_str();
  nicd_cmd->add_option("--engine-cpu", nicd_opts.engine_cpu, "pin the engine thread to this CPU (-1: no pinning)")
      ->capture_default_str();
  nicd_cmd->add_option("--spin-us", nicd_spin_us, "engine keeps polling this long after its last work")
      ->capture_default_str();
  nicd_cmd->add_option("--arena-mib", nicd_arena_mib, "per-client shared memory for rings and records (sparse)")
      ->check(CLI::Range(size_t{1}, size_t{65536}))
      ->capture_default_str();
  nicd_cmd->add_option("--max-clients", nicd_opts.max_clients, "attached applications at once")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  nicd_cmd->add_option("--max-qps", nicd_opts.nic.max_qps, "QPs of the NIC (all clients)")->capture_default_str();
  uint64_t nicd_fault_delay_max_us = 0;
  nicd_cmd->add_option("--fault-drop", nicd_opts.faults.drop,
                       "testing: probability that a sent datagram is lost (seeded; for hosts without tc netem)")
      ->check(CLI::Range(0.0, 1.0));
  nicd_cmd->add_option("--fault-duplicate", nicd_opts.faults.duplicate, "testing: probability it is sent twice")
      ->check(CLI::Range(0.0, 1.0));
  nicd_cmd->add_option("--fault-delay", nicd_opts.faults.delay,
                       "testing: probability it is held back (reordering it behind later ones)")
      ->check(CLI::Range(0.0, 1.0));
  nicd_cmd->add_option("--fault-delay-max-us", nicd_fault_delay_max_us, "testing: a held datagram waits up to this")
      ->capture_default_str();
  nicd_cmd->add_option("--fault-seed", nicd_opts.faults.seed, "testing: seed of the fault model")->capture_default_str();

  CLI::App* hl_cmd = app.add_subcommand(
      "hyperloop",
      "A HyperLoop chain as processes: replicas and a client, each attached to its host's NIC daemon "
      "(docs/deployment.md)");
  hl_cmd->require_subcommand(1);
  // What every member reads the same way: the chain file and its overrides.
  auto add_member_options = [](CLI::App* member, std::string& config, std::string& nicd, std::string& listen,
                               std::string& system, const char* who) {
    member->add_option("--config", config, "the chain's TOML file (docs/deployment.md)")
        ->required()
        ->check(CLI::ExistingFile);
    member->add_option("--nicd", nicd, "the NIC daemon's socket (overrides the file)");
    member->add_option("--listen", listen, std::string("this ") + who + "'s CM address (overrides the file)");
    member->add_option("--system", system, "hyperloop, or the baseline naive-event / naive-poll (overrides group.system)")
        ->check(CLI::IsMember({"hyperloop", "naive-event", "naive-poll"}));
  };
  CLI::App* hl_replica = hl_cmd->add_subcommand(
      "replica",
      "Serve as one replica of the chain described by --config: pre-post its chains, then sleep while its NIC "
      "serves the group. Stops on SIGINT/SIGTERM, or exits 1 when its NIC daemon dies");
  ferry::apps::ReplicaCmdOptions hl_replica_opts;
  add_member_options(hl_replica, hl_replica_opts.config, hl_replica_opts.nicd, hl_replica_opts.listen,
                     hl_replica_opts.system, "replica");
  hl_replica->add_option("--index", hl_replica_opts.index, "which [[replica]] of the file this process is (0: head)")
      ->required();
  hl_replica->add_option("--cpu", hl_replica_opts.cpu, "naive-*: pin the thread that serves the chain (-1: no)")
      ->capture_default_str();
  hl_replica->add_option("--region", hl_replica_opts.region,
                         "file holding the replica's region, e.g. on /dev/shm or a DAX mount (overrides the file)");
  CLI::App* hl_client = hl_cmd->add_subcommand(
      "client",
      "Connect to the chain described by --config and run --ops operations (gWRITEs and gCAS counter increments), "
      "checking that every one was acknowledged and applied once, in order. Exit 0 only if all were");
  ferry::apps::ClientCmdOptions hl_client_opts;
  add_member_options(hl_client, hl_client_opts.config, hl_client_opts.nicd, hl_client_opts.listen,
                     hl_client_opts.system, "client");
  hl_client->add_option("--ops", hl_client_opts.ops, "operations to run")->capture_default_str();
  hl_client->add_option("--size", hl_client_opts.size, "bytes per gWRITE")->capture_default_str();
  hl_client->add_option("--outstanding", hl_client_opts.outstanding, "operations in flight (at most the window)")
      ->capture_default_str();
  hl_client->add_option("--mix", hl_client_opts.mix, "write, cas or both (alternating)")
      ->check(CLI::IsMember({"write", "cas", "both"}))
      ->capture_default_str();
  hl_client->add_option("--seed", hl_client_opts.seed, "seed of the bytes written")->capture_default_str();
  hl_client->add_option("--dump", hl_client_opts.dump,
                        "write the client's memory image here at the end (compare it with the replicas' regions)");
  hl_client->add_flag("--json", hl_client_opts.json, "print the summary as one JSON object");
  hl_client->add_option("--op-timeout-ms", hl_client_opts.op_timeout_ms,
                        "fail the run when no operation completes for this long")
      ->check(CLI::Range(1u, 3'600'000u))
      ->capture_default_str();
  hl_client->add_flag("--wait-for-sigusr1", hl_client_opts.wait_for_sigusr1,
                      "after connecting, wait for SIGUSR1 before the first operation (tests stop the replicas first)");

  CLI::App* st_cmd = app.add_subcommand(
      "store",
      "HyperLoop's replicated transactional store (TxnKv) as processes: replicas whose NICs apply every write, "
      "reads served by any replica's CPU, and a client front end, each attached to its host's NIC daemon "
      "(docs/deployment.md, The transactional store as processes)");
  st_cmd->require_subcommand(1);
  ferry::apps::StoreReplicaOptions st_replica_opts;
  CLI::App* st_replica = st_cmd->add_subcommand(
      "replica",
      "Serve as replica --index (or spare --spare) of the store described by --config: the data group over its "
      "region and the lock group over DRAM (their chains need no CPU once connected), and GET/SCAN from its own "
      "image under its read locks. With a [membership] table it beats in etcd and follows the chain's view: "
      "event=view/rebuilt when the chain is rebuilt around a failed member, event=copied when a spare joins "
      "(it copies its regions from its upstream neighbour first), event=removed and exit 3 when this member was "
      "removed from the chain (also at start: a removed id never serves again). Stops on SIGINT/SIGTERM (exit 0), "
      "exits 1 when its NIC daemon dies or it cannot start, 2 for a bad configuration");
  st_replica->add_option("--config", st_replica_opts.config, "the store's TOML file (docs/deployment.md)")
      ->required()
      ->check(CLI::ExistingFile);
  CLI::Option* st_index = st_replica->add_option("--index", st_replica_opts.index,
                                                 "which [[replica]] of the file this process is (0: head)");
  st_replica
      ->add_option("--spare", st_replica_opts.spare,
                   "or: which [[spare]] of the file this process is (needs [membership]); it waits, beating, until "
                   "the client makes it a member in place of a failed replica")
      ->check(CLI::Range(0, 1000))
      ->excludes(st_index);
  st_replica->add_option("--nicd", st_replica_opts.nicd, "the NIC daemon's socket (overrides the file)");
  st_replica->add_option("--listen", st_replica_opts.listen, "this replica's CM address (overrides the file)");
  st_replica->add_option("--region", st_replica_opts.region,
                         "file holding the data region, e.g. on /dev/shm or a DAX mount (overrides the file)");
  ferry::apps::StoreClientOptions st_client_opts;
  CLI::App* st_client = st_cmd->add_subcommand(
      "client",
      "The store's front end: connect both groups, format a fresh store (clearing every replica's data region), "
      "put --puts keys (key000000..) and with --verify read each back from every replica and scan every replica's "
      "table, printing the put and read latency distributions. With a [membership] table it runs the chain "
      "manager on etcd: a put that fails makes it wait for the member that stopped beating (event=failed), "
      "replace it by a live [[spare]] in the next view (event=view version=N members=...), reconnect, reconcile "
      "the log through the members' read services (event=recovered, with timings) and retry the put; with no "
      "failed member or no spare left it exits 1. Exit 0 only if every put succeeded and every read matched");
  st_client->add_option("--config", st_client_opts.config, "the store's TOML file")->required()->check(CLI::ExistingFile);
  st_client->add_option("--nicd", st_client_opts.nicd, "the NIC daemon's socket (overrides the file)");
  st_client->add_option("--listen", st_client_opts.listen, "the client's CM address (overrides the file)");
  st_client->add_option("--puts", st_client_opts.puts, "keys to put (at most the table's slots)")->capture_default_str();
  st_client->add_option("--value-bytes", st_client_opts.value_bytes, "bytes per value (at most value_max)")
      ->capture_default_str();
  st_client->add_option("--seed", st_client_opts.seed, "seed of the values")->capture_default_str();
  st_client->add_flag("--format", st_client_opts.format,
                      "format a new store even over an existing one (wipes every replica's data); without it a "
                      "client refuses to start over a store");
  st_client->add_flag("--verify", st_client_opts.verify,
                      "read every key back through every replica's read service, and scan each replica's table");
  st_client->add_option("--scan-page", st_client_opts.scan_page, "entries per SCAN request of --verify")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  st_client->add_option("--op-timeout-ms", st_client_opts.op_timeout_ms,
                        "fail when a group operation does not complete for this long")
      ->check(CLI::Range(1u, 3'600'000u))
      ->capture_default_str();
  st_client->add_flag("--json", st_client_opts.json, "print the summary as one JSON object");
  st_client->add_option("--pause-after-puts", st_client_opts.pause_after_puts,
                        "after this many puts print event=progress and wait for SIGUSR1 (tests kill a replica "
                        "there)");
  st_client->add_option("--progress-every", st_client_opts.progress_every,
                        "print event=progress puts=N every this many puts (0: never)")
      ->capture_default_str();
  st_client->add_flag("--pause-for-sigusr1", st_client_opts.pause_for_sigusr1,
                      "wait for SIGUSR1 after setup and again after the puts (tests stop the replicas in between)");

  CLI::App* lk_cmd = app.add_subcommand(
      "logkv",
      "LogKv (the RAMCloud-like store on Tailwind) as processes: a coordinator, storage servers and clients, each "
      "attached to its host's NIC daemon, described by one TOML file (docs/tailwind.md, Deployment)");
  lk_cmd->require_subcommand(1);
  ferry::apps::LogKvMemberOptions lk_coord_opts, lk_server_opts;
  CLI::App* lk_coord = lk_cmd->add_subcommand(
      "coordinator",
      "Serve as the cluster's coordinator: tables and tablet map, heartbeats, and the recovery of a server that "
      "stops answering. Stops on SIGINT/SIGTERM, or exits 1 when its NIC daemon dies");
  lk_coord->add_option("--config", lk_coord_opts.config, "the cluster's TOML file")->required()->check(CLI::ExistingFile);
  lk_coord->add_option("--nicd", lk_coord_opts.nicd, "the NIC daemon's socket (overrides the file)");
  lk_coord->add_option("--listen", lk_coord_opts.listen, "the coordinator's CM address (overrides the file)");
  CLI::App* lk_server = lk_cmd->add_subcommand(
      "server",
      "Serve as storage server --index of the cluster: primary for its tablets, backup for the others' logs. "
      "Waits for the other servers and the coordinator, then enlists. Stops on SIGINT/SIGTERM, or exits 1 when its "
      "NIC daemon dies");
  lk_server->add_option("--config", lk_server_opts.config, "the cluster's TOML file")->required()->check(CLI::ExistingFile);
  lk_server->add_option("--index", lk_server_opts.index, "which [[server]] of the file this process is")->required();
  lk_server->add_option("--nicd", lk_server_opts.nicd, "the NIC daemon's socket (overrides the file)");
  lk_server->add_option("--listen", lk_server_opts.listen, "this server's CM address (overrides the file)");
  lk_server->add_option("--dir", lk_server_opts.dir, "backup storage directory (overrides the file)");
  ferry::apps::LogKvClientOptions lk_client_opts;
  CLI::App* lk_client = lk_cmd->add_subcommand(
      "client",
      "One operation against the cluster: put KEY VALUE, get KEY, remove KEY, create-table NAME, or load/check "
      "--keys N (load writes key<first>.. with values derived from --seed and reports the PUT latency "
      "distribution; check reads them back and exits 1 unless every value is exact)");
  lk_client->add_option("--config", lk_client_opts.config, "the cluster's TOML file")->required()->check(CLI::ExistingFile);
  lk_client->add_option("--nicd", lk_client_opts.nicd, "the NIC daemon's socket (overrides [client] nicd)");
  lk_client->add_option("--table", lk_client_opts.table, "the table")->capture_default_str();
  lk_client->add_option("op", lk_client_opts.op, "put, get, remove, create-table, load or check")
      ->required()
      ->check(CLI::IsMember({"put", "get", "remove", "create-table", "load", "check"}));
  lk_client->add_option("key", lk_client_opts.key, "put/get/remove: the key; create-table: the name");
  lk_client->add_option("value", lk_client_opts.value, "put: the value");
  lk_client->add_option("--keys", lk_client_opts.keys, "load/check: how many keys")->capture_default_str();
  lk_client->add_option("--first", lk_client_opts.first, "load/check: the first key's number")->capture_default_str();
  lk_client->add_option("--value-bytes", lk_client_opts.value_bytes, "load/check: bytes per value")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  lk_client->add_option("--seed", lk_client_opts.seed, "load/check: seed of the values")->capture_default_str();
  lk_client->add_option("--wait-ms", lk_client_opts.wait_ms, "wait this long for the table to exist")
      ->capture_default_str();
  lk_client->add_flag("--json", lk_client_opts.json, "load/check: print the summary as one JSON object");

  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (each measures its physical reference in the same run)");
  bench->require_subcommand(1);
  CLI::App* nic = bench->add_subcommand("nic", "perftest-style latency and bandwidth of the software RNIC");
  ferry::bench::NicBenchOptions nic_opts;
  std::string sizes = "8-65536";
  std::string outstanding = "1,16";
  nic->add_option("--ops", nic_opts.ops, "operations: write, read, send, atomic")->delimiter(',')->capture_default_str();
  nic->add_option("--sizes", sizes, "message sizes: list (8,64,4096) or power-of-two range (8-65536)")
      ->capture_default_str();
  nic->add_option("--outstanding", outstanding, "operations in flight: 1 = latency test, >1 = rate test (list)")
      ->capture_default_str();
  add_run_options(nic, nic_opts.iters, nic_opts.seconds_per_point, nic_opts.client_cpu, nic_opts.engine_cpu);
  nic->add_option("--engine-fifo", nic_opts.engine_fifo, "SCHED_FIFO priority for the engine (0: normal)")
      ->capture_default_str();
  nic->add_option("--mtu", nic_opts.mtu, "path MTU (256..4096)")->capture_default_str();
  nic->add_flag("--json", nic_opts.json, "print one JSON object per (op, size, outstanding)");
  nic->add_flag("--inline", nic_opts.inline_engine,
                "run the engine on the measuring thread: the NIC's processing cost per op, no cross-core traffic");
  nic->add_option("--transport", nic_opts.transport,
                  "inproc: both NICs on one in-process engine; udp: two NIC daemons (`ferry nicd`, separate "
                  "processes) over loopback UDP, with the in-process figure and a plain UDP ping-pong measured "
                  "in the same run")
      ->check(CLI::IsMember({"inproc", "udp"}))
      ->capture_default_str();
  nic->add_option("--daemon-engine-cpus", nic_opts.daemon_engine_cpus,
                  "udp: engine CPUs of daemon A (client side) and daemon B (server side); -1: not pinned")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();
  nic->add_option("--daemon-spin-us", nic_opts.daemon_spin_us,
                  "udp: how long daemon A's and B's engines poll after their last work before sleeping")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();

  nic->add_option("--client-wait", nic_opts.client_wait,
                  "udp: the measuring thread polls its CQ, or blocks on a completion channel")
      ->check(CLI::IsMember({"poll", "block"}))
      ->capture_default_str();

  CLI::App* udp_echo = bench->add_subcommand(
      "udp-echo",
      "Helper of `bench nic --transport udp` (started by it): echo every UDP datagram to its sender, for the "
      "plain UDP ping-pong reference. Prints `event=ready udp=IP:PORT` when bound; stops on SIGINT/SIGTERM or "
      "when its parent exits");
  ferry::bench::UdpEchoOptions echo_opts;
  udp_echo->add_option("--bind", echo_opts.bind, "IPv4 address and UDP port (port 0: ephemeral)")
      ->capture_default_str();
  udp_echo->add_option("--port-file", echo_opts.port_file, "write the bound port to this file");
  udp_echo->add_option("--cpu", echo_opts.cpu, "pin the echo process to this CPU (-1: no pinning)")
      ->capture_default_str();

  CLI::App* pm = bench->add_subcommand(
      "pm", "remote writes to persistent memory (ATC'21 §3-4): hints H3-H9, modeled media counters, H9 latency");
  ferry::bench::PmBenchOptions pm_opts;
  std::string pm_sizes = "16,64,256,1024,4096";
  size_t region_mib = 64;
  pm->add_option("--experiments", pm_opts.experiments, "one_sided, two_sided, atomic, persist")
      ->delimiter(',')
      ->capture_default_str();
  pm->add_option("--sizes", pm_sizes, "write sizes in bytes (list or power-of-two range), at most 4096")
      ->capture_default_str();
  add_run_options(pm, pm_opts.iters, pm_opts.seconds_per_point, pm_opts.client_cpu, pm_opts.engine_cpu);
  pm->add_option("--outstanding", pm_opts.outstanding, "operations in flight for throughput experiments")
      ->capture_default_str();
  pm->add_option("--region-mib", region_mib, "size of the PM (or DRAM) target region")->capture_default_str();
  pm->add_option("--pm-dir", pm_opts.pm_dir, "directory for the PM file (default $TMPDIR or /tmp; a DAX mount "
                                             "for real PM)");
  pm->add_option("--modeled-wire-ns", pm_opts.modeled_wire_delay_ns,
                 "persist experiment: also report ratios with this modeled one-way wire delay (0: skip)")
      ->capture_default_str();
  pm->add_flag("--json", pm_opts.json, "print one JSON object per configuration");

  CLI::App* group = bench->add_subcommand(
      "group",
      "HyperLoop §6.1: gWRITE/gMEMCPY/gCAS latency, gWRITE throughput and group-size scaling against Naive-RDMA "
      "(event and poll), quiet and with the replica CPU loaded");
  ferry::bench::GroupBenchOptions group_opts;
  std::string group_sizes_spec = "64-8192";
  std::string group_groups_spec = "3,5,7";
  size_t group_region_mib = 16;
  std::string group_media = "pm";
  group->add_option("--experiments", group_opts.experiments, "latency (Fig. 8), cas (Table 2), throughput (Fig. 9), "
                                                              "group_size (Fig. 10)")
      ->delimiter(',')
      ->capture_default_str();
  group->add_option("--systems", group_opts.systems, "hyperloop, naive-event, naive-poll")
      ->delimiter(',')
      ->capture_default_str();
  group->add_option("--sizes", group_sizes_spec, "message sizes: list or power-of-two range")->capture_default_str();
  group->add_option("--group-sizes", group_groups_spec, "chain lengths for the group_size experiment (1..7)")
      ->capture_default_str();
  group->add_option("--group-size-bytes", group_opts.group_size_bytes, "message size of the group_size experiment")
      ->capture_default_str();
  group->add_option("--loads", group_opts.loads, "quiet, load (ten busy processes on the replica CPU), or both")
      ->delimiter(',')
      ->capture_default_str();
  group->add_option("--iters", group_opts.iters, "operations per latency point (the paper: 10,000)")
      ->capture_default_str();
  group->add_option("--max-seconds", group_opts.max_seconds,
                    "cap on a quiet latency point and on any throughput point")
      ->capture_default_str();
  group->add_option("--max-seconds-loaded", group_opts.max_seconds_loaded,
                    "cap on a loaded latency point (long enough for 1,000+ samples of naive-event)")
      ->capture_default_str();
  group->add_option("--throughput-bytes", group_opts.throughput_bytes, "bytes written per throughput point (1 GiB)")
      ->capture_default_str();
  group->add_option("--window", group_opts.window, "operations outstanding in the throughput experiment (1..32)")
      ->capture_default_str();
  group->add_option("--load-processes", group_opts.load_processes, "busy processes (stress-ng workers) pinned to the replica CPU")
      ->capture_default_str();
  group->add_option("--client-cpu", group_opts.client_cpu, "CPU of the client thread, which also steps the NICs")
      ->capture_default_str();
  group->add_option("--replica-cpu", group_opts.replica_cpu, "CPU of the replicas' application threads and the load")
      ->capture_default_str();
  group->add_option("--region-mib", group_region_mib, "region size on each replica")->capture_default_str();
  group->add_option("--media", group_media, "replica regions: pm (libpmem2 file, modeled persistence) or dram")
      ->check(CLI::IsMember({"pm", "dram"}))
      ->capture_default_str();
  group->add_option("--pm-dir", group_opts.pm_dir, "directory for PM files (default /dev/shm)");
  group->add_flag("--flush", group_opts.flush, "interleave gFLUSH with every gWRITE and gMEMCPY");
  group->add_flag("--json", group_opts.json, "print one JSON object per run");
  std::string group_transport = "inproc";
  group->add_option("--transport", group_transport,
                    "inproc: every host a NIC of this process; udp: four `ferry nicd` daemons and three `ferry "
                    "hyperloop replica` processes over loopback UDP, this process the client (gWRITE latency, replica "
                    "processes' CPU per op, HyperLoop again with the replicas SIGSTOPped, the in-process point as "
                    "reference; default sizes 64,1024, systems hyperloop,naive-event, max-seconds 30)")
      ->check(CLI::IsMember({"inproc", "udp"}))
      ->capture_default_str();

  CLI::App* oq = bench->add_subcommand(
      "oq",
      "JUNE BERRY §6 (Figs. 6-11): Ordered Queue and JUNE BERRY-D against RawRPC and DeferredExec on the same RPC "
      "code -- throughput vs client threads, cache latency under the Twitter clusters, PmKv latency and value sizes");
  ferry::bench::OqBenchOptions oq_opts;
  const ferry::bench::OqBenchOptions oq_quick = ferry::bench::oq_quick_options();
  std::string oq_threads = "1,2,4,8";
  std::string oq_thread_sizes = "64,1024";
  std::string oq_clusters = "12,19,27,31";
  std::string oq_value_sizes = "64,256,1024,4096";
  size_t oq_region_mib = oq_opts.pm_region_bytes >> 20;
  bool oq_quick_flag = false;
  // Options --quick shrinks when the command line leaves them alone.
  std::vector<std::pair<CLI::Option*, std::function<void()>>> oq_quick_settings;
  auto quick = [&](CLI::Option* opt, std::function<void()> apply) {
    oq_quick_settings.emplace_back(opt, std::move(apply));
    return opt;
  };
  oq->add_option("--experiments", oq_opts.experiments,
                 "threads (Fig. 6), latency (Figs. 7-8, cache), pmkv (Figs. 9-11, PmKv)")
      ->delimiter(',')
      ->capture_default_str();
  oq->add_option("--systems", oq_opts.systems,
                 "oq, oq-durable (JUNE BERRY-D), deferred (DeferredExec), rawrpc; each experiment runs the ones it "
                 "compares")
      ->delimiter(',')
      ->capture_default_str();
  quick(oq->add_option("--threads", oq_threads, "threads: client threads (sessions), a list")->capture_default_str(),
        [&] { oq_threads = join(oq_quick.threads); });
  quick(oq->add_option("--thread-sizes", oq_thread_sizes, "threads: value sizes of the puts (bytes), a list")
            ->capture_default_str(),
        [&] { oq_thread_sizes = join(oq_quick.thread_value_bytes); });
  quick(oq->add_option("--variants", oq_opts.variants,
                       "threads: oq and oq-durable with multi-packet SRQ and delegation: mp-deleg, mp, deleg, plain")
            ->delimiter(',')
            ->capture_default_str(),
        [&] { oq_opts.variants = oq_quick.variants; });
  oq->add_option("--thread-inflight", oq_opts.thread_inflight, "threads: calls each session keeps in flight")
      ->capture_default_str();
  quick(oq->add_option("--clusters", oq_clusters, "latency: Twitter clusters of Table 1 (12, 19, 27, 31)")
            ->capture_default_str(),
        [&] { oq_clusters = join(oq_quick.clusters); });
  quick(oq->add_option("--loads", oq_opts.loads, "latency: offered loads as fractions of RawRPC's measured peak")
            ->delimiter(',')
            ->capture_default_str(),
        [&] { oq_opts.loads = oq_quick.loads; });
  quick(oq->add_option("--pm-loads", oq_opts.pm_loads, "pmkv: offered loads as fractions of RawRPC's measured peak")
            ->delimiter(',')
            ->capture_default_str(),
        [&] { oq_opts.pm_loads = oq_quick.pm_loads; });
  quick(oq->add_option("--put-ratios", oq_opts.put_percents, "pmkv: put percentages (100, 50, 5, 0)")
            ->delimiter(',')
            ->capture_default_str(),
        [&] { oq_opts.put_percents = oq_quick.put_percents; });
  quick(oq->add_option("--value-sizes", oq_value_sizes, "pmkv: value sizes of the value-size sweep (bytes, <= 8192)")
            ->capture_default_str(),
        [&] { oq_value_sizes = join(oq_quick.value_sizes); });
  oq->add_option("--sweep-put-ratio", oq_opts.sweep_put_percent, "pmkv: put percentage of the value-size sweep")
      ->capture_default_str();
  oq->add_option("--sweep-load", oq_opts.sweep_load,
                 "pmkv: the value-size sweep's latency points, as a fraction of RawRPC's peak at each size")
      ->capture_default_str();
  oq->add_option("--workers", oq_opts.workers, "server worker threads (each with its SRQ and data partition)")
      ->capture_default_str();
  oq->add_option("--sessions", oq_opts.sessions, "latency, pmkv: client sessions (client threads)")
      ->capture_default_str();
  oq->add_option("--inflight", oq_opts.max_inflight, "latency, pmkv: calls in flight per session for the peaks")
      ->capture_default_str();
  oq->add_option("--open-inflight", oq_opts.open_inflight,
                 "latency, pmkv: calls in flight per session under open-loop load, at most")
      ->capture_default_str();
  quick(oq->add_option("--keys", oq_opts.keys, "key space, prefilled before every point")->capture_default_str(),
        [&] { oq_opts.keys = oq_quick.keys; });
  quick(oq->add_option("--closed-seconds", oq_opts.closed_seconds, "length of a closed-loop point (peaks, threads)")
            ->capture_default_str(),
        [&] { oq_opts.closed_seconds = oq_quick.closed_seconds; });
  quick(oq->add_option("--min-seconds", oq_opts.min_seconds, "an open-loop point runs at least this long")
            ->capture_default_str(),
        [&] { oq_opts.min_seconds = oq_quick.min_seconds; });
  quick(oq->add_option("--max-seconds", oq_opts.max_seconds, "... and at most this long")->capture_default_str(),
        [&] { oq_opts.max_seconds = oq_quick.max_seconds; });
  quick(oq->add_option("--samples", oq_opts.target_samples,
                       "measured requests an open-loop point aims for (p99.9 needs 10,000)")
            ->capture_default_str(),
        [&] { oq_opts.target_samples = oq_quick.target_samples; });
  quick(oq->add_option("--warmup-seconds", oq_opts.warmup_seconds, "unmeasured run-in before every point")
            ->capture_default_str(),
        [&] { oq_opts.warmup_seconds = oq_quick.warmup_seconds; });
  oq->add_option("--qpc-entries", oq_opts.qp_context_entries,
                 "modeled QP-context cache entries of the server NIC (counters only)")
      ->capture_default_str();
  oq->add_option("--client-cpu", oq_opts.client_cpu, "CPU of the client thread, which also steps every NIC")
      ->capture_default_str();
  oq->add_option("--server-cpu", oq_opts.server_cpu, "CPU of the server's worker threads")->capture_default_str();
  oq->add_option("--pm-dir", oq_opts.pm_dir, "directory for the PM files (default /dev/shm)");
  quick(oq->add_option("--pm-region-mib", oq_region_mib, "PmKv region per worker")->capture_default_str(),
        [&] { oq_region_mib = oq_quick.pm_region_bytes >> 20; });
  oq->add_flag("--quick", oq_quick_flag,
               "a small configuration of every experiment and system (seconds, for tests); explicit options win");
  oq->add_flag("--json", oq_opts.json, "print one JSON object per point");

  CLI::App* store = bench->add_subcommand(
      "store",
      "HyperLoop §6.2: Fig. 12, the replicated transactional store (YCSB A, B, D, E, F) on HyperLoop, on the "
      "Naive-RDMA baselines and, as a real peer, on Redis (a primary and two replicas, SET + WAIT 2 0; E's scans "
      "by ZRANGEBYLEX on a sorted set of the keys, then MGET); "
      "Fig. 11, replicated RocksDB (its WAL replicated at every Sync) under YCSB-A; quiet and with the replica CPU "
      "loaded");
  ferry::bench::StoreBenchOptions store_opts;
  std::string store_media = "pm";
  bool store_quick = false, store_full = false;
  store->add_option("--experiments", store_opts.experiments,
                    "ycsb (Fig. 12: the transactional store, and Redis), rocksdb (Fig. 11: replicated RocksDB, "
                    "YCSB-A)")
      ->delimiter(',')
      ->capture_default_str();
  store->add_option("--systems", store_opts.systems,
                    "hyperloop, naive-event, naive-poll, redis-wait2 (ycsb only; skipped with a message when "
                    "redis-server is not installed)")
      ->delimiter(',')
      ->capture_default_str();
  store->add_option("--workloads", store_opts.workloads, "YCSB workloads A, B, D, E (scans), F")
      ->delimiter(',')
      ->capture_default_str();
  store->add_option("--loads", store_opts.loads, "quiet, load (busy processes on the replica CPU), or both")
      ->delimiter(',')
      ->capture_default_str();
  store->add_option("--records", store_opts.records, "records loaded before the points (the paper: 100 K)")
      ->capture_default_str();
  store->add_option("--ops", store_opts.ops, "operations per point")->capture_default_str();
  store->add_option("--max-seconds", store_opts.max_seconds, "cap on a point")->capture_default_str();
  store->add_option("--rocksdb-rate", store_opts.rocksdb_rate,
                    "rocksdb experiment: also run each system open loop, Poisson arrivals at this many ops/s with "
                    "latency from each op's scheduled arrival (0: closed loop only)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  store->add_option("--rocksdb-open-ops", store_opts.rocksdb_open_ops,
                    "operations per open-loop point (at most --ops)")
      ->capture_default_str();
  store->add_option("--key-bytes", store_opts.key_bytes, "key size")->capture_default_str();
  store->add_option("--value-bytes", store_opts.value_bytes, "value size")->capture_default_str();
  store->add_option("--load-processes", store_opts.load_processes, "stress-ng workers on the replica CPU")
      ->capture_default_str();
  store->add_option("--media", store_media, "the replicas' regions: pm or dram")
      ->check(CLI::IsMember({"pm", "dram"}))
      ->capture_default_str();
  store->add_option("--seed", store_opts.seed, "seed of keys and values")->capture_default_str();
  store->add_flag("--quick", store_quick, "a short run: 2,000 records, 2,000 ops per point");
  store->add_flag("--full", store_full, "the paper's larger table: 1 M records");
  store->add_flag("--json", store_opts.json, "one JSON object per point");

  CLI::App* tw = bench->add_subcommand(
      "tailwind",
      "Tailwind §5 (Figs. 7-10, 13) on LogKv: one-sided replication against RAMCloud's RPC replication on the same "
      "code -- throughput vs clients, PUT latency and server CPU vs load, throughput per active primary, recovery time");
  ferry::bench::TailwindBenchOptions tw_opts;
  const ferry::bench::TailwindBenchOptions tw_quick = ferry::bench::tailwind_quick_options();
  bool tw_quick_flag = false;
  std::vector<std::pair<CLI::Option*, std::function<void()>>> tw_quick_settings;
  auto tquick = [&](CLI::Option* opt, std::function<void()> apply) {
    tw_quick_settings.emplace_back(opt, std::move(apply));
    return opt;
  };
  tw->add_option("--experiments", tw_opts.experiments,
                 "clients (Fig. 7), latency (Figs. 8, 10), active (Fig. 9), recovery (Fig. 13)")
      ->delimiter(',')
      ->capture_default_str();
  tw->add_option("--systems", tw_opts.systems, "tailwind, rpc (the RPC-replication baseline)")
      ->delimiter(',')
      ->capture_default_str();
  tquick(tw->add_option("--workloads", tw_opts.workloads, "clients: ycsb-b, ycsb-a, ycsb-c, write-only")
             ->delimiter(',')
             ->capture_default_str(),
         [&] { tw_opts.workloads = tw_quick.workloads; });
  tquick(tw->add_option("--clients", tw_opts.clients, "clients: closed-loop clients (requests in flight), a list")
             ->delimiter(',')
             ->capture_default_str(),
         [&] { tw_opts.clients = tw_quick.clients; });
  tquick(tw->add_option("--loads", tw_opts.loads, "latency: offered loads as fractions of the RPC baseline's peak")
             ->delimiter(',')
             ->capture_default_str(),
         [&] { tw_opts.loads = tw_quick.loads; });
  tquick(tw->add_option("--active", tw_opts.active, "active: primaries receiving requests, a list")
             ->delimiter(',')
             ->capture_default_str(),
         [&] { tw_opts.active = tw_quick.active; });
  tw->add_option("--peak-clients", tw_opts.peak_clients, "closed-loop clients of the peaks and of the active experiment")
      ->capture_default_str();
  tw->add_option("--servers", tw_opts.servers, "storage servers (each a primary and a backup)")->capture_default_str();
  tw->add_option("--replicas", tw_opts.replicas, "backups of each segment (r)")->capture_default_str();
  tw->add_option("--workers", tw_opts.workers, "client-request workers per server (plus one backup worker)")
      ->capture_default_str();
  tquick(tw->add_option("--keys", tw_opts.keys, "key space, prefilled")->capture_default_str(),
         [&] { tw_opts.keys = tw_quick.keys; });
  tw->add_option("--key-bytes", tw_opts.key_bytes, "key size")->capture_default_str();
  tw->add_option("--value-bytes", tw_opts.value_bytes, "value size")->capture_default_str();
  tw->add_option("--segment-bytes", tw_opts.segment_bytes, "log segment (and backup buffer) size")
      ->capture_default_str();
  tquick(tw->add_option("--closed-seconds", tw_opts.closed_seconds, "length of a closed-loop point")
             ->capture_default_str(),
         [&] { tw_opts.closed_seconds = tw_quick.closed_seconds; });
  tquick(tw->add_option("--min-seconds", tw_opts.min_seconds, "an open-loop point runs at least this long")
             ->capture_default_str(),
         [&] { tw_opts.min_seconds = tw_quick.min_seconds; });
  tquick(tw->add_option("--max-seconds", tw_opts.max_seconds, "... and at most this long")->capture_default_str(),
         [&] { tw_opts.max_seconds = tw_quick.max_seconds; });
  tquick(tw->add_option("--samples", tw_opts.target_samples,
                        "measured requests an open-loop point aims for (p99.9 needs 10,000)")
             ->capture_default_str(),
         [&] { tw_opts.target_samples = tw_quick.target_samples; });
  tw->add_option("--warmup-seconds", tw_opts.warmup_seconds, "unmeasured run-in before every point")
      ->capture_default_str();
  tquick(tw->add_option("--recovery-objects", tw_opts.recovery_objects, "recovery: objects on the crashed server")
             ->capture_default_str(),
         [&] { tw_opts.recovery_objects = tw_quick.recovery_objects; });
  tw->add_flag("--full", tw_opts.full, "recovery: also 10 M objects (about 2 GB of log; minutes)");
  tw->add_option("--client-cpu", tw_opts.client_cpu, "CPU of the client thread, which also steps every NIC")
      ->capture_default_str();
  tw->add_option("--server-cpu", tw_opts.server_cpu, "CPU of every server's worker threads and the control thread")
      ->capture_default_str();
  tw->add_option("--dir", tw_opts.dir, "backups' storage directory (default /dev/shm; removed at the end)");
  tw->add_flag("--quick", tw_quick_flag,
               "a small configuration of every experiment (under a minute, for tests); explicit options win");
  tw->add_flag("--json", tw_opts.json, "print one JSON object per point");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0; every usage error (unknown or
    // missing option, a value out of range, two options that exclude each
    // other) exits 2, as a bad configuration does.
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (demo->parsed()) {
    int rc = 0;
    if (demo_part == "all" || demo_part == "nic") rc |= ferry::apps::run_demo(std::cout, demo_engine_cpu);
    if (demo_part == "all" || demo_part == "group") rc |= ferry::apps::run_group_demo(std::cout, demo_engine_cpu);
    if (demo_part == "all" || demo_part == "juneberry") rc |= ferry::apps::run_juneberry_demo(std::cout, demo_engine_cpu);
    if (demo_part == "all" || demo_part == "tailwind") rc |= ferry::apps::run_tailwind_demo(std::cout);
    if (demo_part == "all" || demo_part == "storage") rc |= ferry::apps::run_storage_demo(std::cout);
    return rc;
  }
  if (nicd_cmd->parsed()) {
    auto bind = ferry::nic::UdpEndpoint::parse(nicd_bind);
    if (!bind.ok()) {
      std::cerr << "ferry nicd: --bind: " << bind.status().message() << "\n";
      return 2;
    }
    nicd_opts.bind = bind.value();
    nicd_opts.spin_ns = nicd_spin_us * 1000;
    nicd_opts.arena_bytes = nicd_arena_mib << 20;
    nicd_opts.faults.delay_max_ns = nicd_fault_delay_max_us * 1000;
    if (nicd_opts.faults.delay > 0 && nicd_opts.faults.delay_max_ns == 0) {
      std::cerr << "ferry nicd: --fault-delay needs --fault-delay-max-us\n";
      return 2;
    }
    return ferry::apps::run_nicd(nicd_opts, std::cout, std::cerr);
  }
  if (hl_replica->parsed()) return ferry::apps::run_hyperloop_replica(hl_replica_opts, std::cout, std::cerr);
  if (hl_client->parsed()) return ferry::apps::run_hyperloop_client(hl_client_opts, std::cout, std::cerr);
  if (st_replica->parsed()) {
    st_replica_opts.has_index = st_index->count() > 0;
    return ferry::apps::run_store_replica(st_replica_opts, std::cout, std::cerr);
  }
  if (st_client->parsed()) return ferry::apps::run_store_client(st_client_opts, std::cout, std::cerr);
  if (lk_coord->parsed()) return ferry::apps::run_logkv_coordinator(lk_coord_opts, std::cout, std::cerr);
  if (lk_server->parsed()) return ferry::apps::run_logkv_server(lk_server_opts, std::cout, std::cerr);
  if (lk_client->parsed()) {
    const auto& o = lk_client_opts;
    if ((o.op == "put" && (o.key.empty() || o.value.empty())) ||
        ((o.op == "get" || o.op == "remove" || o.op == "create-table") && o.key.empty())) {
      std::cerr << "ferry logkv client: " << o.op << " needs "
                << (o.op == "put" ? "KEY VALUE" : o.op == "create-table" ? "NAME" : "KEY") << "\n";
      return 2;
    }
    return ferry::apps::run_logkv_client(lk_client_opts, std::cout, std::cerr);
  }
  if (nic->parsed()) {
    if (!parse_list_option("ferry bench nic", "--sizes", sizes, &nic_opts.sizes) ||
        !parse_list_option("ferry bench nic", "--outstanding", outstanding, &nic_opts.outstanding)) {
      return 2;
    }
    return exit_code("ferry bench nic", ferry::bench::run_nic_bench(nic_opts, std::cout, std::cerr));
  }
  if (udp_echo->parsed()) return ferry::bench::run_udp_echo(echo_opts, std::cout, std::cerr);
  if (pm->parsed()) {
    if (!parse_list_option("ferry bench pm", "--sizes", pm_sizes, &pm_opts.sizes)) return 2;
    pm_opts.region_bytes = region_mib << 20;
    return exit_code("ferry bench pm", ferry::bench::run_pm_bench(pm_opts, std::cout, std::cerr));
  }
  if (group->parsed()) {
    if (!parse_list_option("ferry bench group", "--sizes", group_sizes_spec, &group_opts.sizes) ||
        !parse_list_option("ferry bench group", "--group-sizes", group_groups_spec, &group_opts.group_sizes)) {
      return 2;
    }
    group_opts.region_bytes = group_region_mib << 20;
    group_opts.media = group_media == "dram" ? ferry::pm::Media::kDram : ferry::pm::Media::kPm;
    if (group_transport == "udp") {
      ferry::bench::GroupUdpBenchOptions u;
      u.json = group_opts.json;
      u.iters = group_opts.iters;
      if (group->count("--max-seconds") > 0) u.max_seconds = group_opts.max_seconds;
      if (group->count("--sizes") > 0) u.sizes = group_opts.sizes;
      if (group->count("--systems") > 0) u.systems = group_opts.systems;
      if (group->count("--group-sizes") > 0) u.replicas = group_opts.group_sizes.front();
      return exit_code("ferry bench group", ferry::bench::run_group_udp_bench(u, std::cout, std::cerr));
    }
    return exit_code("ferry bench group", ferry::bench::run_group_bench(group_opts, std::cout, std::cerr));
  }
  if (store->parsed()) {
    if (store_quick) {
      store_opts.records = std::min<uint64_t>(store_opts.records, 2000);
      store_opts.ops = std::min<uint64_t>(store_opts.ops, 2000);
      store_opts.max_seconds = std::min(store_opts.max_seconds, 5.0);
    }
    if (store_full) store_opts.records = 1'000'000;
    store_opts.media = store_media == "dram" ? ferry::pm::Media::kDram : ferry::pm::Media::kPm;
    return exit_code("ferry bench store", ferry::bench::run_store_bench(store_opts, std::cout, std::cerr));
  }
  if (tw->parsed()) {
    if (tw_quick_flag) {
      for (auto& [opt, apply] : tw_quick_settings) {
        if (opt->count() == 0) apply();
      }
    }
    return exit_code("ferry bench tailwind", ferry::bench::run_tailwind_bench(tw_opts, std::cout, std::cerr));
  }
  if (oq->parsed()) {
    if (oq_quick_flag) {
      for (auto& [opt, apply] : oq_quick_settings) {
        if (opt->count() == 0) apply();
      }
    }
    if (!parse_list_option("ferry bench oq", "--threads", oq_threads, &oq_opts.threads) ||
        !parse_list_option("ferry bench oq", "--thread-sizes", oq_thread_sizes, &oq_opts.thread_value_bytes) ||
        !parse_list_option("ferry bench oq", "--clusters", oq_clusters, &oq_opts.clusters) ||
        !parse_list_option("ferry bench oq", "--value-sizes", oq_value_sizes, &oq_opts.value_sizes)) {
      return 2;
    }
    oq_opts.pm_region_bytes = oq_region_mib << 20;
    return exit_code("ferry bench oq", ferry::bench::run_oq_bench(oq_opts, std::cout, std::cerr));
  }
  return 0;
}
