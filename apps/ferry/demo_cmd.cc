// `ferry demo`: the walkthrough's parts (demo.h), one or all.
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "demo.h"

namespace ferry::apps {

void add_demo_command(CLI::App& app, Commands& commands) {
  CLI::App* demo = app.add_subcommand(
      "demo",
      "Walk through the software RNIC (each verb, WAIT/ENABLE, a remote WQE rewrite), then a 3-replica HyperLoop "
      "group doing each primitive, verified on every replica, then JUNE BERRY: a set committed by the NIC's ACK, "
      "a get that sees it, durable puts across a power failure; then Tailwind: PUTs replicated by RDMA WRITE with the "
      "backups idle, a primary crash while a client writes, recovery, the data served again");
  struct Options {
    int engine_cpu = 1;
    std::string part = "all";
  };
  auto o = std::make_shared<Options>();
  demo->add_option("--engine-cpu", o->engine_cpu, "CPU for the NIC engine thread (-1: no pinning)")
      ->capture_default_str();
  demo->add_option("--part", o->part,
                   "nic (the software RNIC), group (HyperLoop primitives), juneberry (the Ordered Queue), "
                   "tailwind (LogKv with Tailwind replication, a crash and its recovery), storage (HyperLoop's "
                   "transactional store, a replica replaced under writes) or all")
      ->check(CLI::IsMember({"nic", "group", "juneberry", "tailwind", "storage", "all"}))
      ->capture_default_str();
  commands.add(demo, [o] {
    const auto part = [&](const char* name) { return o->part == "all" || o->part == name; };
    int rc = 0;
    if (part("nic")) rc |= run_demo(std::cout, o->engine_cpu);
    if (part("group")) rc |= run_group_demo(std::cout, o->engine_cpu);
    if (part("juneberry")) rc |= run_juneberry_demo(std::cout, o->engine_cpu);
    if (part("tailwind")) rc |= run_tailwind_demo(std::cout);
    if (part("storage")) rc |= run_storage_demo(std::cout);
    return rc;
  });
}

}  // namespace ferry::apps
