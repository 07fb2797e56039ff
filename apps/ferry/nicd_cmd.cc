// `ferry nicd`: the NIC daemon in the foreground, logging one key=value
// line per event (start, stop) to stdout and errors to stderr.
#include "nicd_cmd.h"

#include <fmt/format.h>
#include <signal.h>

#include <ostream>

namespace ferry::apps {

int run_nicd(const nicd::DaemonOptions& options, std::ostream& out, std::ostream& err) {
  // Block the stop signals before any thread starts, so that every thread
  // inherits the mask and sigwait below is the one place they arrive.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
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
    out << fmt::format("event=faults drop={} duplicate={} delay={} delay_max_us={} seed={} (injected on sent "
                       "datagrams, for testing)\n",
                       options.faults.drop, options.faults.duplicate, options.faults.delay,
                       options.faults.delay_max_ns / 1000, options.faults.seed)
        << std::flush;
  }
  int sig = 0;
  sigwait(&stop, &sig);
  const auto udp = nic.udp_counters();
  out << fmt::format("event=stop signal={} clients={} clients_released={} rx_datagrams={} tx_datagrams={} "
                     "rx_bad_icrc={} rx_unknown_qp={}\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM", daemon.value()->clients(),
                     daemon.value()->clients_released(), udp.rx_datagrams, udp.tx_datagrams, udp.rx_bad_icrc,
                     udp.rx_unknown_qp)
      << std::flush;
  return 0;
}

}  // namespace ferry::apps
