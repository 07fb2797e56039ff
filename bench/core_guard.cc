#include "core_guard.h"

#include <array>

#include "ferry/common/clock.h"
#include "report.h"

namespace ferry::bench {

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
