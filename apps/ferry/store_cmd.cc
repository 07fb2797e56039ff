// `ferry store replica|client`: their command line (store_cmd.h; the
// replica in store_replica_cmd.cc, the client in store_client_cmd.cc).
#include "store_cmd.h"

#include <iostream>
#include <memory>

#include "command.h"

namespace ferry::apps {

void add_store_commands(CLI::App& app, Commands& commands) {
  CLI::App* st_cmd = app.add_subcommand(
      "store",
      "HyperLoop's replicated transactional store (TxnKv) as processes: replicas whose NICs apply every write, "
      "reads served by any replica's CPU, and a client front end, each attached to its host's NIC daemon "
      "(docs/deployment.md, The transactional store as processes)");
  st_cmd->require_subcommand(1);
  const auto replica_cmd = add_member_command<StoreReplicaOptions>(
      st_cmd, "replica",
      "Serve as replica --index (or spare --spare) of the store described by --config: the data group over its "
      "region and the lock group over DRAM (their chains need no CPU once connected), and GET/SCAN from its own "
      "image under its read locks. With a [membership] table it beats in etcd and follows the chain's view: "
      "event=view/rebuilt when the chain is rebuilt around a failed member, event=copied when a spare joins "
      "(it copies its regions from its upstream neighbour first), event=removed and exit 3 when this member was "
      "removed from the chain (also at start: a removed id never serves again). Stops on SIGINT/SIGTERM (exit 0), "
      "exits 1 when its NIC daemon dies or it cannot start, 2 for a bad configuration",
      {.config = "the store's TOML file (docs/deployment.md)",
       .listen = "this replica's CM address (overrides the file)",
       .region = "file holding the data region, e.g. on /dev/shm or a DAX mount (overrides the file)"});
  CLI::App* replica = replica_cmd.app;
  const auto r = replica_cmd.options;
  CLI::Option* index =
      replica->add_option("--index", r->index, "which [[replica]] of the file this process is (0: head)");
  replica
      ->add_option("--spare", r->spare,
                   "or: which [[spare]] of the file this process is (needs [membership]); it waits, beating, until "
                   "the client makes it a member in place of a failed replica")
      ->check(CLI::Range(0, 1000))
      ->excludes(index);
  commands.add(replica, [r, index] {
    r->has_index = index->count() > 0;
    return run_store_replica(*r, std::cout, std::cerr);
  });

  const auto client_cmd = add_member_command<StoreClientOptions>(
      st_cmd, "client",
      "The store's front end: connect both groups, format a fresh store (clearing every replica's data region), "
      "put --puts keys (key000000..) and with --verify read each back from every replica and scan every replica's "
      "table, printing the put and read latency distributions. With a [membership] table it runs the chain "
      "manager on etcd: a put that fails makes it wait for the member that stopped beating (event=failed), "
      "replace it by a live [[spare]] in the next view (event=view version=N members=...), reconnect, reconcile "
      "the log through the members' read services (event=recovered, with timings) and retry the put; with no "
      "failed member or no spare left it exits 1. Exit 0 only if every put succeeded and every read matched",
      {.config = "the store's TOML file", .listen = "the client's CM address (overrides the file)"});
  CLI::App* client = client_cmd.app;
  const auto o = client_cmd.options;
  client->add_option("--puts", o->puts, "keys to put (at most the table's slots)")->capture_default_str();
  client->add_option("--value-bytes", o->value_bytes, "bytes per value (at most value_max)")->capture_default_str();
  client->add_option("--seed", o->seed, "seed of the values")->capture_default_str();
  client->add_flag("--format", o->format,
                   "format a new store even over an existing one (wipes every replica's data); without it a "
                   "client refuses to start over a store");
  client->add_flag("--verify", o->verify,
                   "read every key back through every replica's read service, and scan each replica's table");
  client->add_option("--scan-page", o->scan_page, "entries per SCAN request of --verify")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  client->add_option("--op-timeout-ms", o->op_timeout_ms, "fail when a group operation does not complete for this long")
      ->check(CLI::Range(1u, 3'600'000u))
      ->capture_default_str();
  client->add_flag("--json", o->json, "print the summary as one JSON object");
  client->add_option("--pause-after-puts", o->pause_after_puts,
                     "after this many puts print event=progress and wait for SIGUSR1 (tests kill a replica there)");
  client
      ->add_option("--progress-every", o->progress_every, "print event=progress puts=N every this many puts (0: never)")
      ->capture_default_str();
  client->add_flag("--pause-for-sigusr1", o->pause_for_sigusr1,
                   "wait for SIGUSR1 after setup and again after the puts (tests stop the replicas in between)");
  commands.add(client, [o] { return run_store_client(*o, std::cout, std::cerr); });
}

}  // namespace ferry::apps
