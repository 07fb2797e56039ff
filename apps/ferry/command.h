// How `ferry`'s commands are put together. Each command's file registers its
// subcommands on the command line and what runs when one of them is the one
// given (add_*_commands below); main() only parses and runs it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "member_process.h"

namespace ferry::apps {

// The runnable subcommands and what each runs.
class Commands {
 public:
  // `run` runs when `command` is the subcommand the command line named; it
  // returns the process's exit code. It may own the options CLI11 writes.
  void add(CLI::App* command, std::function<int()> run) { entries_.emplace_back(command, std::move(run)); }
  // The parsed subcommand's exit code (0 if none was parsed).
  int run_parsed() const;

 private:
  std::vector<std::pair<CLI::App*, std::function<int()>>> entries_;
};

// One file each.
void add_demo_command(CLI::App& app, Commands& commands);        // demo_cmd.cc
void add_nicd_command(CLI::App& app, Commands& commands);        // nicd_cmd.cc
void add_hyperloop_commands(CLI::App& app, Commands& commands);  // hyperloop_cmd.cc
void add_store_commands(CLI::App& app, Commands& commands);      // store_cmd.cc
void add_logkv_commands(CLI::App& app, Commands& commands);      // logkv_cmd.cc
void add_bench_commands(CLI::App& app, Commands& commands);      // bench_cmd.cc
void add_sim_commands(CLI::App& app, Commands& commands);        // sim_cmd.cc

// The help of a deployed member's flags (MemberFlags); a flag with no help
// is not added.
struct MemberFlagHelp {
  const char* config = nullptr;
  const char* nicd = "the NIC daemon's socket (overrides the file)";
  const char* listen = nullptr;
  const char* region = nullptr;
  const char* dir = nullptr;
};
// Adds --config (required, an existing file) and the override flags.
void add_member_flags(CLI::App* command, MemberFlags& flags, const MemberFlagHelp& help);

// A deployed member's subcommand and the options its flags write (shared:
// the function registered with Commands::add keeps them alive).
template <class Options>
struct MemberCommand {
  CLI::App* app = nullptr;
  std::shared_ptr<Options> options;
};
// Adds subcommand `name` under `parent` with the member flags bound to a
// fresh Options' `member` (a MemberFlags).
template <class Options>
MemberCommand<Options> add_member_command(CLI::App* parent, std::string name, std::string description,
                                          const MemberFlagHelp& help) {
  MemberCommand<Options> c{parent->add_subcommand(std::move(name), std::move(description)),
                           std::make_shared<Options>()};
  add_member_flags(c.app, c.options->member, help);
  return c;
}

// A benchmark's --quick: a small configuration of the options it names,
// each taken only when the command line leaves that option alone (explicit
// options win). Must not move once add_flag bound it (hold it by pointer).
class QuickSettings {
 public:
  // Adds the --quick flag to `command`.
  void add_flag(CLI::App* command, const std::string& description);
  // Under --quick, `option` (unless given) takes its quick value: apply().
  CLI::Option* operator()(CLI::Option* option, std::function<void()> apply);
  // After parsing: under --quick, every option left alone takes its quick value.
  void apply() const;

 private:
  bool quick_ = false;
  std::vector<std::pair<CLI::Option*, std::function<void()>>> settings_;
};

}  // namespace ferry::apps
