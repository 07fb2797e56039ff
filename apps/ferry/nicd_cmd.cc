// `ferry nicd`: the NIC daemon in the foreground, logging one key=value
// line per event (start, stop) to stdout and errors to stderr.
#include "nicd_cmd.h"

#include <fmt/format.h>
#include <signal.h>

#include <iostream>
#include <memory>
#include <ostream>

#include "command.h"
#include "member_process.h"

namespace ferry::apps {

void add_nicd_command(CLI::App& app, Commands& commands) {
  CLI::App* nicd_cmd = app.add_subcommand(
      "nicd",
      "Run this host's NIC daemon in the foreground: a software RNIC on RoCEv2/UDP that applications attach to "
      "through a Unix socket and shared memory (docs/nicd.md). Stops on SIGINT/SIGTERM");
  struct Options {
    nicd::DaemonOptions daemon;
    std::string bind = "127.0.0.1:4791";
    uint64_t spin_us = daemon.spin_ns / 1000;
    std::string spin_policy = "shared";
    size_t arena_mib = daemon.arena_bytes >> 20;
    uint64_t fault_delay_max_us = 0;
  };
  auto o = std::make_shared<Options>();
  nicd::DaemonOptions& d = o->daemon;
  nicd_cmd->add_option("--socket", d.socket_path, "Unix socket applications open")->capture_default_str();
  nicd_cmd
      ->add_option("--bind", o->bind, "IPv4 address of a local interface and UDP port for RoCEv2 (port 0: ephemeral)")
      ->capture_default_str();
  nicd_cmd->add_option("--name", d.name, "device name in logs and reports")->capture_default_str();
  nicd_cmd->add_option("--engine-cpu", d.engine_cpu, "pin the engine thread to this CPU (-1: no pinning)")
      ->capture_default_str();
  nicd_cmd->add_option("--spin-us", o->spin_us, "engine keeps polling this long after its last work")
      ->capture_default_str();
  nicd_cmd
      ->add_option("--spin-policy", o->spin_policy,
                   "how the engine polls during --spin-us: shared (sched_yield between passes: daemons that share "
                   "cores with each other or with applications) or busy (a pause instruction: a core of its own)")
      ->check(CLI::IsMember({"shared", "busy"}))
      ->capture_default_str();
  nicd_cmd->add_option("--arena-mib", o->arena_mib, "per-client shared memory for rings and records (sparse)")
      ->check(CLI::Range(size_t{1}, size_t{65536}))
      ->capture_default_str();
  nicd_cmd->add_option("--max-clients", d.max_clients, "attached applications at once")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  nicd_cmd->add_option("--max-qps", d.nic.max_qps, "QPs of the NIC (all clients)")->capture_default_str();
  nicd_cmd
      ->add_option("--fault-drop", d.faults.drop,
                   "testing: probability that a sent datagram is lost (seeded; for hosts without tc netem)")
      ->check(CLI::Range(0.0, 1.0));
  nicd_cmd->add_option("--fault-duplicate", d.faults.duplicate, "testing: probability it is sent twice")
      ->check(CLI::Range(0.0, 1.0));
  nicd_cmd
      ->add_option("--fault-delay", d.faults.delay,
                   "testing: probability it is held back (reordering it behind later ones)")
      ->check(CLI::Range(0.0, 1.0));
  nicd_cmd->add_option("--fault-delay-max-us", o->fault_delay_max_us, "testing: a held datagram waits up to this")
      ->capture_default_str();
  nicd_cmd->add_option("--fault-seed", d.faults.seed, "testing: seed of the fault model")->capture_default_str();
  commands.add(nicd_cmd, [o] {
    auto bind = nic::UdpEndpoint::parse(o->bind);
    if (!bind.ok()) {
      std::cerr << "ferry nicd: --bind: " << bind.status().message() << "\n";
      return 2;
    }
    nicd::DaemonOptions d = o->daemon;
    d.bind = bind.value();
    d.spin_ns = o->spin_us * 1000;
    d.spin_policy =
        o->spin_policy == "busy" ? nic::EngineOptions::SpinPolicy::kBusy : nic::EngineOptions::SpinPolicy::kShared;
    d.arena_bytes = o->arena_mib << 20;
    d.faults.delay_max_ns = o->fault_delay_max_us * 1000;
    if (d.faults.delay > 0 && d.faults.delay_max_ns == 0) {
      std::cerr << "ferry nicd: --fault-delay needs --fault-delay-max-us\n";
      return 2;
    }
    return run_nicd(d, std::cout, std::cerr);
  });
}

int run_nicd(const nicd::DaemonOptions& options, std::ostream& out, std::ostream& err) {
  // Block the stop signals before any thread starts, so that every thread
  // inherits the mask and sigwait below is the one place they arrive.
  sigset_t stop;
  block_stop_signals(&stop);
  auto daemon = nicd::Daemon::start(options);
  if (!daemon.ok()) {
    err << "ferry nicd: " << daemon.status().message() << "\n";
    return 1;
  }
  nic::Nic& nic = daemon.value()->nic();
  const auto ep = nic.udp_endpoint();
  out << fmt::format("event=ready name={} socket={} udp={} gid={} path_mtu={} engine_cpu={}\n", nic.name(),
                     options.socket_path, ep ? ep->to_string() : "-", nic.gid().to_string(), nic.max_path_mtu(),
                     options.engine_cpu)
      << std::flush;
  if (options.faults.enabled()) {
    out << fmt::format(
               "event=faults drop={} duplicate={} delay={} delay_max_us={} seed={} (injected on sent "
               "datagrams, for testing)\n",
               options.faults.drop, options.faults.duplicate, options.faults.delay, options.faults.delay_max_ns / 1000,
               options.faults.seed)
        << std::flush;
  }
  int sig = 0;
  sigwait(&stop, &sig);
  const auto udp = nic.udp_counters();
  out << fmt::format(
             "event=stop signal={} clients={} clients_released={} rx_datagrams={} tx_datagrams={} "
             "rx_bad_icrc={} rx_unknown_qp={}\n",
             sig == SIGINT ? "SIGINT" : "SIGTERM", daemon.value()->clients(), daemon.value()->clients_released(),
             udp.rx_datagrams, udp.tx_datagrams, udp.rx_bad_icrc, udp.rx_unknown_qp)
      << std::flush;
  return 0;
}

}  // namespace ferry::apps
