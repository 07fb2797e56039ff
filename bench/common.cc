#include "common.h"

#include <algorithm>
#include <cstdio>

#include "ferry/common/cpu.h"
#include "ferry/common/tsc.h"

namespace ferry::bench {

const Clock& timing_clock() {
  if (Tsc::invariant()) return TscClock::instance();
  return SteadyClock::instance();
}

const char* timing_clock_name() { return Tsc::invariant() ? "tsc" : "clock_monotonic"; }

int usable_cpu(int wanted) { return (wanted >= 0 && wanted < available_cpus()) ? wanted : -1; }

double load_average() { return load_averages()[0]; }

std::vector<double> load_averages() {
  double l[3] = {-1, -1, -1};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3) l[0] = l[1] = l[2] = -1;
    std::fclose(f);
  }
  return {l[0], l[1], l[2]};
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

}  // namespace ferry::bench
