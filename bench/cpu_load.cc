#include "cpu_load.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ferry::bench {

Result<std::unique_ptr<CpuLoad>> CpuLoad::start(int cpu, int processes) {
  std::unique_ptr<CpuLoad> load(new CpuLoad());
  load->cpu_ = cpu;
  const pid_t parent = getpid();
  for (int i = 0; i < processes; ++i) {
    const pid_t pid = fork();
    if (pid < 0) return internal_error(std::string("cpu load: fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      // Child: only async-signal-safe calls from here on (the parent may have
      // had other threads when it forked).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(0);
      if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof(set), &set);
      }
      volatile uint64_t spin = 0;
      for (;;) spin = spin + 1;
    }
    load->pids_.push_back(pid);
  }
  return load;
}

CpuLoad::~CpuLoad() {
  for (pid_t pid : pids_) kill(pid, SIGKILL);
  for (pid_t pid : pids_) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace ferry::bench
