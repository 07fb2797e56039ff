#include "ferry/common/cpu.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

namespace ferry {

Status pin_current_thread(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return invalid_argument("cpu " + std::to_string(cpu) + " out of range");
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (rc != 0) return invalid_argument("cannot pin to cpu " + std::to_string(cpu) + ": " + std::strerror(rc));
  return ok_status();
}

Status set_current_thread_fifo(int priority) {
  sched_param param{};
  param.sched_priority = priority;
  int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param);
  if (rc == EPERM) return permission_denied("SCHED_FIFO needs root or CAP_SYS_NICE");
  if (rc != 0) return invalid_argument(std::string("SCHED_FIFO: ") + std::strerror(rc));
  return ok_status();
}

static uint64_t clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t thread_cpu_time_ns() { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }
uint64_t process_cpu_time_ns() { return clock_ns(CLOCK_PROCESS_CPUTIME_ID); }
uint64_t thread_cpu_time_ns(pthread_t thread) {
  clockid_t id;
  if (pthread_getcpuclockid(thread, &id) != 0) return 0;
  return clock_ns(id);
}

static int process_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return CPU_COUNT(&set);
}

// Taken at startup, before any thread pins itself (a pinned thread's own
// affinity would report one CPU).
static const int kProcessCpus = process_cpus();

int available_cpus() { return kProcessCpus; }

std::string machine_description() {
  // Computed once: later calls may come from a thread pinned to one CPU.
  static const std::string description = [] {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::string model = "unknown CPU";
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) model = line.substr(pos + 2);
      break;
    }
  }
  return model + ", " + std::to_string(available_cpus()) + " CPUs available";
  }();
  return description;
}

}  // namespace ferry
