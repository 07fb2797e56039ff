// ferry: the command-line tool. `ferry --help` lists the subcommands.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>

#include "demo.h"
#include "group_bench.h"
#include "nic_bench.h"
#include "pm_bench.h"

namespace {

constexpr const char* kVersion = "0.1.0";

std::vector<uint32_t> parse_sizes(const std::string& spec) {
  // "8,64,4096" or "8-65536" (powers of two in the range).
  std::vector<uint32_t> sizes;
  const auto dash = spec.find('-');
  if (dash != std::string::npos && spec.find(',') == std::string::npos) {
    const unsigned long lo = std::stoul(spec.substr(0, dash));
    const unsigned long hi = std::stoul(spec.substr(dash + 1));
    for (unsigned long s = lo; s <= hi && s != 0; s *= 2) sizes.push_back(static_cast<uint32_t>(s));
    return sizes;
  }
  size_t start = 0;
  while (start < spec.size()) {
    const size_t comma = spec.find(',', start);
    sizes.push_back(static_cast<uint32_t>(std::stoul(spec.substr(start, comma - start))));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
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
      "group doing each primitive, verified on every replica");
  int demo_engine_cpu = 1;
  std::string demo_part = "all";
  demo->add_option("--engine-cpu", demo_engine_cpu, "CPU for the NIC engine thread (-1: no pinning)")
      ->capture_default_str();
  demo->add_option("--part", demo_part, "nic (the software RNIC), group (HyperLoop primitives) or all")
      ->check(CLI::IsMember({"nic", "group", "all"}))
      ->capture_default_str();

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
  nic->add_option("--iters", nic_opts.iters, "measured operations per point (0: sized by --seconds)")
      ->capture_default_str();
  nic->add_option("--seconds", nic_opts.seconds_per_point, "target duration per point when --iters is 0")
      ->capture_default_str();
  nic->add_option("--client-cpu", nic_opts.client_cpu, "CPU for the measuring thread (-1: no pinning)")
      ->capture_default_str();
  nic->add_option("--engine-cpu", nic_opts.engine_cpu, "CPU for the NIC engine thread (-1: no pinning)")
      ->capture_default_str();
  nic->add_option("--engine-fifo", nic_opts.engine_fifo, "SCHED_FIFO priority for the engine (0: normal)")
      ->capture_default_str();
  nic->add_option("--mtu", nic_opts.mtu, "path MTU (256..4096)")->capture_default_str();
  nic->add_flag("--json", nic_opts.json, "print one JSON object per (op, size, outstanding)");
  nic->add_flag("--inline", nic_opts.inline_engine,
                "run the engine on the measuring thread: the NIC's processing cost per op, no cross-core traffic");

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
  pm->add_option("--iters", pm_opts.iters, "measured operations per point (0: sized by --seconds)")
      ->capture_default_str();
  pm->add_option("--seconds", pm_opts.seconds_per_point, "target duration per point when --iters is 0")
      ->capture_default_str();
  pm->add_option("--outstanding", pm_opts.outstanding, "operations in flight for throughput experiments")
      ->capture_default_str();
  pm->add_option("--region-mib", region_mib, "size of the PM (or DRAM) target region")->capture_default_str();
  pm->add_option("--pm-dir", pm_opts.pm_dir, "directory for the PM file (default $TMPDIR or /tmp; a DAX mount "
                                             "for real PM)");
  pm->add_option("--client-cpu", pm_opts.client_cpu, "CPU for the measuring thread (-1: no pinning)")
      ->capture_default_str();
  pm->add_option("--engine-cpu", pm_opts.engine_cpu, "CPU for the NIC engine thread (-1: no pinning)")
      ->capture_default_str();
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
  group->add_option("--max-seconds", group_opts.max_seconds, "cap on the time of any one point")->capture_default_str();
  group->add_option("--throughput-bytes", group_opts.throughput_bytes, "bytes written per throughput point (1 GiB)")
      ->capture_default_str();
  group->add_option("--window", group_opts.window, "operations outstanding in the throughput experiment (1..32)")
      ->capture_default_str();
  group->add_option("--load-processes", group_opts.load_processes, "busy processes pinned to the replica CPU")
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

  CLI11_PARSE(app, argc, argv);

  if (demo->parsed()) {
    int rc = 0;
    if (demo_part != "group") rc |= ferry::apps::run_demo(std::cout, demo_engine_cpu);
    if (demo_part != "nic") rc |= ferry::apps::run_group_demo(std::cout, demo_engine_cpu);
    return rc;
  }
  if (nic->parsed()) {
    try {
      nic_opts.sizes = parse_sizes(sizes);
      nic_opts.outstanding = parse_sizes(outstanding);
    } catch (const std::exception&) {
      std::cerr << "ferry bench nic: cannot parse --sizes/--outstanding '" << sizes << "' / '" << outstanding << "'\n";
      return 2;
    }
    const ferry::Status s = ferry::bench::run_nic_bench(nic_opts, std::cout, std::cerr);
    if (!s.ok()) {
      std::cerr << "ferry bench nic: " << s.to_string() << "\n";
      return 2;
    }
    return 0;
  }
  if (pm->parsed()) {
    try {
      pm_opts.sizes = parse_sizes(pm_sizes);
    } catch (const std::exception&) {
      std::cerr << "ferry bench pm: cannot parse --sizes '" << pm_sizes << "'\n";
      return 2;
    }
    pm_opts.region_bytes = region_mib << 20;
    const ferry::Status s = ferry::bench::run_pm_bench(pm_opts, std::cout, std::cerr);
    if (!s.ok()) {
      std::cerr << "ferry bench pm: " << s.to_string() << "\n";
      return 2;
    }
    return 0;
  }
  if (group->parsed()) {
    try {
      group_opts.sizes = parse_sizes(group_sizes_spec);
      group_opts.group_sizes = parse_sizes(group_groups_spec);
    } catch (const std::exception&) {
      std::cerr << "ferry bench group: cannot parse --sizes/--group-sizes '" << group_sizes_spec << "' / '"
                << group_groups_spec << "'\n";
      return 2;
    }
    group_opts.region_bytes = group_region_mib << 20;
    group_opts.media = group_media == "dram" ? ferry::pm::Media::kDram : ferry::pm::Media::kPm;
    const ferry::Status s = ferry::bench::run_group_bench(group_opts, std::cout, std::cerr);
    if (!s.ok()) {
      std::cerr << "ferry bench group: " << s.to_string() << "\n";
      return 2;
    }
    return 0;
  }
  return 0;
}
