#include "ferry/common/tsc.h"

#include "ferry/common/clock.h"

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace ferry {

double Tsc::ns_per_tick() {
  static const double value = [] {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t c0 = now();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto t1 = std::chrono::steady_clock::now();
    const uint64_t c1 = now();
    const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    return c1 > c0 ? ns / static_cast<double>(c1 - c0) : 1.0;
  }();
  return value;
}

bool Tsc::invariant() {
  static const bool value = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) == 0) {
        return line.find("constant_tsc") != std::string::npos && line.find("nonstop_tsc") != std::string::npos;
      }
    }
    return false;
  }();
  return value;
}

TscClock::TscClock()
    : base_ticks_(Tsc::now()), base_ns_(SteadyClock::instance().now_ns()), ns_per_tick_(Tsc::ns_per_tick()) {}

uint64_t TscClock::now_ns() const {
  return base_ns_ + static_cast<uint64_t>(static_cast<double>(Tsc::now() - base_ticks_) * ns_per_tick_);
}

TscClock& TscClock::instance() {
  static TscClock clock;
  return clock;
}

}  // namespace ferry
