#include "engine_cost.h"

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "ferry/common/tsc.h"
#include "ferry/nic/engine.h"

namespace ferry::bench {

EngineWork engine_work_delta(const EngineWork& a, const EngineWork& b) {
  return EngineWork{b.cpu_ns - a.cpu_ns, b.tx_packets - a.tx_packets, b.rx_packets - a.rx_packets};
}

namespace {

// The kernel ids of process pid's threads now (empty if it is gone).
std::vector<int> thread_ids(pid_t pid) {
  std::vector<int> ids;
  if (pid <= 0) return ids;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') ids.push_back(std::atoi(e->d_name));
  }
  closedir(d);
  return ids;
}

}  // namespace

int find_engine_thread(pid_t pid) {
  int found = 0, matches = 0;
  for (int tid : thread_ids(pid)) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm");
    std::string comm;
    if (std::getline(in, comm) && comm == nic::kEngineThreadName) {
      found = tid;
      ++matches;
    }
  }
  return matches == 1 ? found : 0;
}

SchedStat read_schedstat_except(pid_t pid, int except_tid) {
  SchedStat sum;
  for (int tid : thread_ids(pid)) {
    if (tid != except_tid) sum += read_schedstat(pid, tid);
  }
  return sum;
}

SchedStat read_schedstat(pid_t pid, int tid) {
  SchedStat s;
  if (pid <= 0 || tid <= 0) return s;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/schedstat");
  if (!(in >> s.run_ns >> s.wait_ns)) return SchedStat{};
  return s;
}

double tsc_ghz() {
  if (!Tsc::invariant()) return 0;
  const double ns_per_tick = Tsc::ns_per_tick();
  return ns_per_tick > 0 ? 1.0 / ns_per_tick : 0;
}

PacketCost packet_cost(uint64_t cpu_ns, uint64_t packets) {
  PacketCost c;
  c.cpu_ns = cpu_ns;
  c.packets = packets;
  if (packets == 0) return c;
  c.ns_per_packet = static_cast<double>(cpu_ns) / static_cast<double>(packets);
  c.cycles_per_packet = c.ns_per_packet * tsc_ghz();
  return c;
}

nlohmann::json packet_cost_json(const PacketCost& c, const std::string& measured) {
  nlohmann::json j;
  j["cpu_ns"] = c.cpu_ns;
  j["packets"] = c.packets;
  j["ns_per_packet"] = c.ns_per_packet;
  j["cycles_per_packet"] = c.cycles_per_packet > 0 ? nlohmann::json(c.cycles_per_packet) : nlohmann::json();
  j["tsc_ghz"] = tsc_ghz();
  j["measured"] = measured;
  return j;
}

}  // namespace ferry::bench
