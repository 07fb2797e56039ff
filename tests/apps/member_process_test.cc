// What every `ferry` member process shares (apps/ferry/member_process.h,
// command.h): the one serve loop, the config-plus-flags helper, --quick, and
// the command table. The processes themselves are tested by tests/cli/*.sh.
#include "member_process.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chain_config.h"
#include "command.h"
#include "ferry/store/logkv_deploy.h"

namespace ferry::apps {
namespace {

TEST(ServeUntilStopped, EndsWithTheMembersOwnExitCodeAfterPollingAndTicking) {
  sigset_t stop;
  block_stop_signals(&stop);
  std::vector<uint64_t> passes;
  ServeLoop loop;
  loop.idle_sleep_ns = 1'000'000;
  loop.poll = [&](uint64_t now) {
    passes.push_back(now);
    return false;
  };
  loop.finished = [&]() -> std::optional<int> {
    if (passes.size() < 5) return std::nullopt;
    return 3;
  };
  loop.stop = [](const char*) { return 99; };
  std::ostringstream err;
  EXPECT_EQ(serve_until_stopped(stop, loop, err), 3);
  ASSERT_EQ(passes.size(), 5u);
  for (size_t i = 1; i < passes.size(); ++i) EXPECT_GE(passes[i], passes[i - 1]);
  EXPECT_EQ(err.str(), "");
}

TEST(ServeUntilStopped, AStopSignalRunsTheMembersStopAndItsExitCode) {
  sigset_t stop;
  block_stop_signals(&stop);  // blocked: raise() leaves it pending for the loop's sigtimedwait
  int polls = 0;
  std::string stopped_by;
  ServeLoop loop;
  loop.idle_sleep_ns = 1'000'000;
  loop.poll = [&](uint64_t) {
    if (++polls == 3) raise(SIGTERM);
    return true;  // work done: the loop passes again at once (busy_poll_ns)
  };
  loop.busy_poll_ns = 1'000'000'000;
  loop.stop = [&](const char* signal) {
    stopped_by = signal;
    return 0;
  };
  std::ostringstream err;
  EXPECT_EQ(serve_until_stopped(stop, loop, err), 0);
  EXPECT_EQ(stopped_by, "SIGTERM");
  EXPECT_EQ(polls, 3);
}

TEST(MemberFlags, OverrideOnlyTheEntriesGivenAndOnlyTheFieldsTheEntryHas) {
  MemberFlags flags;
  flags.nicd = "/run/nicd.sock";
  flags.region = "/dev/shm/r0";
  flags.dir = "/tmp/backup";
  MemberConfig chain_member{"r0", "/old.sock", "127.0.0.1:7000", ""};
  override_member(chain_member, flags);
  EXPECT_EQ(chain_member.nicd, "/run/nicd.sock");
  EXPECT_EQ(chain_member.listen, "127.0.0.1:7000");  // not given: the file's
  EXPECT_EQ(chain_member.region, "/dev/shm/r0");
  store::logkv::MemberAddress server{"/old.sock", "127.0.0.1:7100", "/old/dir"};
  override_member(server, flags);
  EXPECT_EQ(server.nicd, "/run/nicd.sock");
  EXPECT_EQ(server.dir, "/tmp/backup");
}

TEST(MemberFlags, ABadConfigurationIsNamedWithTheCommand) {
  MemberFlags flags;
  flags.config = "/nonexistent/chain.toml";
  std::ostringstream err;
  EXPECT_FALSE(load_member_config(&load_chain_config, flags, "ferry hyperloop replica", err));
  EXPECT_EQ(err.str().rfind("ferry hyperloop replica: ", 0), 0u) << err.str();
}

TEST(QuickSettings, QuickValuesApplyOnlyToOptionsTheCommandLineLeftAlone) {
  for (const bool quick : {false, true}) {
    CLI::App app;
    int records = 100000, ops = 100000;
    QuickSettings settings;
    settings(app.add_option("--records", records), [&] { records = 2000; });
    settings(app.add_option("--ops", ops), [&] { ops = 2000; });
    settings.add_flag(&app, "a short run");
    std::vector<std::string> args = {"--ops", "500"};
    if (quick) args.push_back("--quick");
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
    settings.apply();
    EXPECT_EQ(records, quick ? 2000 : 100000);
    EXPECT_EQ(ops, 500);  // explicit wins
  }
}

TEST(Commands, RunTheParsedSubcommandOnly) {
  CLI::App app;
  Commands commands;
  commands.add(app.add_subcommand("a"), [] { return 5; });
  commands.add(app.add_subcommand("b"), [] { return 7; });
  EXPECT_EQ(commands.run_parsed(), 0);
  std::vector<std::string> args = {"b"};
  app.parse(args);
  EXPECT_EQ(commands.run_parsed(), 7);
}

}  // namespace
}  // namespace ferry::apps
