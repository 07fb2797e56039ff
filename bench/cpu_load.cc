#include "cpu_load.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace ferry::bench {

namespace {

// Children of `parent` that are running or runnable now (state R).
int running_children(pid_t parent) {
  int n = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 4 >= line.size()) continue;
    const char state = line[close + 2];
    const long ppid = std::strtol(line.c_str() + close + 4, nullptr, 10);
    if (ppid == parent && state == 'R') ++n;
  }
  closedir(proc);
  return n;
}

bool exited(pid_t pid) {
  int status;
  const pid_t r = waitpid(pid, &status, WNOHANG);
  return r == pid || (r < 0 && errno == ECHILD);
}

}  // namespace

Result<std::unique_ptr<CpuLoad>> CpuLoad::start(int cpu, int processes, double max_seconds) {
  if (processes < 1) return invalid_argument("cpu load: need at least one process");
  std::unique_ptr<CpuLoad> load(new CpuLoad());
  load->processes_ = processes;
  load->cpu_ = cpu;
  std::vector<std::string> args = {"stress-ng", "--cpu", std::to_string(processes), "--cpu-method", "loop"};
  if (cpu >= 0) {
    args.push_back("--taskset");
    args.push_back(std::to_string(cpu));
  }
  args.push_back("--timeout");
  args.push_back(std::to_string(static_cast<long>(std::ceil(max_seconds))) + "s");
  args.push_back("--quiet");
  for (size_t i = 0; i < args.size() && i < 7; ++i) load->description_ += (i ? " " : "") + args[i];

  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, so that stopping it reaches every worker.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  // Its only messages are about being stopped early, which is how it ends here.
  posix_spawn_file_actions_addopen(&files, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, "stress-ng", &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc == ENOENT) {
    return not_found("cpu load: stress-ng is not installed (scripts/install-deps.sh installs it)");
  }
  if (rc != 0) return internal_error(std::string("cpu load: cannot start stress-ng: ") + std::strerror(rc));
  load->pid_ = pid;

  // Wait until its workers run (stress-ng forks them after start-up).
  for (int i = 0; i < 500; ++i) {
    if (exited(pid)) {
      load->pid_ = -1;
      return internal_error("cpu load: stress-ng exited before its workers started (" + load->description_ + ")");
    }
    if (running_children(pid) >= processes) return load;
    usleep(10'000);
  }
  return internal_error("cpu load: stress-ng's " + std::to_string(processes) + " workers did not start within 5 s");
}

CpuLoad::~CpuLoad() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGTERM);
  for (int i = 0; i < 200 && !exited(pid_); ++i) usleep(10'000);
  kill(-pid_, SIGKILL);  // whatever of the group is left
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace ferry::bench
