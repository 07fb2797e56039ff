// Seeded pseudo-random numbers for fault injection and workloads.
// xoshiro256** seeded through splitmix64: fast, and identical sequences for a
// seed on every platform (unlike std distributions), so a printed seed
// reproduces a run.
#pragma once

#include <cstdint>

namespace ferry {

// splitmix64's output function: a bijective 64-bit mix of x (plus the golden
// ratio increment). Rng seeds through it; it also serves as an integer hash.
inline uint64_t mix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) { reseed(seed); }

  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : s_) s = splitmix64(x);
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, bound) (bound > 0); Lemire's multiply-shift, bias < 2^-64*bound.
  uint64_t below(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64);
  }
  // Uniform in [lo, hi] inclusive.
  uint64_t between(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }
  // Uniform double in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // True with probability p.
  bool chance(double p) { return p > 0 && uniform() < p; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) {
    const uint64_t z = mix64(x);
    x += 0x9e3779b97f4a7c15ULL;
    return z;
  }
  uint64_t s_[4];
};

}  // namespace ferry
