#include "core_guard.h"

#include <array>

#include "ferry/common/clock.h"
#include "report.h"

namespace ferry::bench {

void CoreGuard::add_to(nlohmann::json& point) const {
  point["client_core"] = {{"work_item_samples", during.count()},
                          {"quiet_p50_ns", base.percentile(0.5)},
                          {"quiet_p99_ns", base.percentile(0.99)},
                          {"point_p50_ns", during.percentile(0.5)},
                          {"point_p99_ns", during.percentile(0.99)}};
  point["client_core_p99_ratio"] = p99_ratio();
  point["client_core_disturbed"] = disturbed();
}

Histogram time_work_item(int samples) {
  static std::array<uint64_t, 256> buf{};
  const Clock& clock = timing_clock();
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  Histogram h;
  for (int s = 0; s < samples; ++s) {
    const uint64_t t0 = clock.now_ns();
    for (int pass = 0; pass < 4; ++pass) {
      for (uint64_t& v : buf) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v += x;
      }
    }
    h.record(clock.now_ns() - t0);
  }
  volatile uint64_t sink = buf[x % buf.size()];
  (void)sink;
  return h;
}

}  // namespace ferry::bench
