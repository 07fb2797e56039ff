#include "reference.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "ferry/common/cpu.h"
#include "ferry/common/tsc.h"
#include "report.h"

namespace ferry::bench {

Histogram pingpong_rtt(int cpu_a, int cpu_b, uint64_t round_trips) {
  struct alignas(64) Line {
    std::atomic<uint64_t> v{0};
  };
  auto ping = std::make_unique<Line>();
  auto pong = std::make_unique<Line>();
  std::thread echo([&] {
    if (cpu_b >= 0) (void)pin_current_thread(cpu_b);
    for (uint64_t i = 1; i <= round_trips; ++i) {
      while (ping->v.load(std::memory_order_acquire) != i) cpu_relax();
      pong->v.store(i, std::memory_order_release);
    }
  });
  if (cpu_a >= 0) (void)pin_current_thread(cpu_a);
  Histogram h;
  const double ns_per_tick = Tsc::ns_per_tick();
  for (uint64_t i = 1; i <= round_trips; ++i) {
    const uint64_t t0 = Tsc::now();
    ping->v.store(i, std::memory_order_release);
    while (pong->v.load(std::memory_order_acquire) != i) cpu_relax();
    const uint64_t t1 = Tsc::now();
    h.record(static_cast<uint64_t>(static_cast<double>(t1 - t0) * ns_per_tick));
  }
  echo.join();
  return h;
}

double memcpy_bytes_per_second(size_t size, size_t blocks, double min_seconds) {
  const size_t bytes = size * blocks;
  std::vector<uint8_t> src(bytes, 0x5A), dst(bytes, 0);
  // Warm up: touch everything once.
  for (size_t b = 0; b < blocks; ++b) std::memcpy(dst.data() + b * size, src.data() + b * size, size);
  uint64_t copied = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  uint64_t iters = 1024;
  while (elapsed < min_seconds) {
    for (uint64_t i = 0; i < iters; ++i) {
      const size_t b = i % blocks;
      std::memcpy(dst.data() + b * size, src.data() + b * size, size);
      // Keep the compiler from eliding copies into an unobserved buffer.
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
    copied += iters * size;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    iters *= 2;
  }
  return static_cast<double>(copied) / elapsed;
}

CpuStalls cpu_stalls(double seconds, uint64_t threshold_ns) {
  const Clock& clock = timing_clock();
  CpuStalls s;
  const uint64_t start = clock.now_ns();
  const uint64_t end = start + static_cast<uint64_t>(seconds * 1e9);
  uint64_t prev = start;
  uint64_t stolen = 0;
  for (uint64_t now = clock.now_ns(); now < end; now = clock.now_ns()) {
    const uint64_t gap = now - prev;
    if (gap > threshold_ns) {
      s.gaps.record(gap);
      stolen += gap;
    }
    prev = now;
  }
  const double elapsed = static_cast<double>(prev - start) / 1e9;
  s.per_second = elapsed > 0 ? static_cast<double>(s.gaps.count()) / elapsed : 0;
  s.stolen_fraction = elapsed > 0 ? static_cast<double>(stolen) / 1e9 / elapsed : 0;
  return s;
}

}  // namespace ferry::bench
