// ferry: the command-line tool. `ferry --help` lists the subcommands; each
// is registered from its own file (command.h).
#include <CLI/CLI.hpp>

#include "command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "ferry: replicated, durable storage with the server CPU off the critical path.\n"
      "Runs on a software RDMA NIC (no RNIC needed); see README.md."};
  app.set_version_flag("--version", "0.1.0");
  app.require_subcommand(1);
  ferry::apps::Commands commands;
  ferry::apps::add_demo_command(app, commands);
  ferry::apps::add_nicd_command(app, commands);
  ferry::apps::add_hyperloop_commands(app, commands);
  ferry::apps::add_store_commands(app, commands);
  ferry::apps::add_logkv_commands(app, commands);
  ferry::apps::add_bench_commands(app, commands);
  ferry::apps::add_sim_commands(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0; every usage error (unknown or
    // missing option, a value out of range, two options that exclude each
    // other) exits 2, as a bad configuration does.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return commands.run_parsed();
}
