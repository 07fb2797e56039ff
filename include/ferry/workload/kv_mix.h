// Key-value request mixes for the benchmarks: which operation, which key, how
// large, drawn deterministically from an Rng.
//
// A KvMix describes a workload (write fraction, key space, sizes, key
// popularity); KvRequestGenerator turns it into a request stream. Presets
// build the mixes the benchmarks reproduce: the Twitter cache clusters, the
// PMemKV put ratios, YCSB A/B/C. Requests name keys by number
// (0..key_space-1); write_key() renders a number as a fixed-size printable key
// (see keys.h), and ycsb_key() as YCSB's key name.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "ferry/common/rng.h"
#include "ferry/common/status.h"
#include "ferry/workload/zipf.h"

namespace ferry::workload {

enum class OpType : uint8_t { kGet, kSet };

enum class KeyDistribution : uint8_t {
  kUniform,           // every key equally likely
  kZipf,              // exact Zipf law with exponent zipf_alpha (ZipfSampler)
  kScrambledZipfian,  // YCSB's "zipfian" (ScrambledZipfianGenerator, theta 0.99)
};

struct KvMix {
  double set_fraction = 0;   // probability that a request is a set, in [0, 1]
  uint64_t key_space = 1;    // keys are numbered 0..key_space-1
  uint32_t key_bytes = 8;    // exact key length; must name key_space keys
  uint32_t value_bytes = 0;  // bytes a set writes and a get reads back
  KeyDistribution distribution = KeyDistribution::kUniform;
  double zipf_alpha = 0;  // kZipf only: >= 0 (0 is uniform)
  // kZipf only: map popularity rank r to key number scatter(r), a fixed
  // bijection on the key space, so hot keys are spread like in real traces
  // rather than packed at 0, 1, 2, ... false: key number == rank.
  bool scatter_hot_keys = true;
};

// Ok, or kInvalidArgument naming the field that is out of range. For mixes
// built from user input, before constructing a generator.
[[nodiscard]] Status validate(const KvMix& mix);

struct KvRequest {
  OpType op;
  uint64_t key_number;   // in [0, key_space)
  uint32_t key_bytes;    // == mix.key_bytes
  uint32_t value_bytes;  // == mix.value_bytes
};

// A fixed pseudo-random permutation of [0, items): a 4-round Feistel network
// over the smallest even number of bits covering items, cycle-walked into
// range (under 4 permutation steps per call on average). Same output for the same
// items on every platform. O(1) setup, immutable, thread-safe.
class KeyScatter {
 public:
  explicit KeyScatter(uint64_t items);       // items >= 1 (asserted)
  uint64_t operator()(uint64_t rank) const;  // rank < items (asserted)

 private:
  uint64_t permute_once(uint64_t x) const;

  uint64_t items_;
  uint32_t half_bits_;
  uint64_t half_mask_;
};

// Draws requests for one KvMix. Copies the mix; holds no references.
// Construction is O(1) for every distribution.
//
// Thread rules: next() does not modify the generator, and all randomness
// comes from the Rng passed in, so the request stream is a function of
// (mix, Rng state). Give each thread its own Rng (the simplest rule: one
// generator and one Rng per thread).
class KvRequestGenerator {
 public:
  // Precondition (asserted): validate(mix).ok().
  explicit KvRequestGenerator(const KvMix& mix);

  // Consumes one rng draw for the operation (none when set_fraction is 0),
  // then the key distribution's draws.
  KvRequest next(Rng& rng) const;

  // The fixed-size key of `key_number`: out.size() must equal mix().key_bytes
  // and key_number must be < mix().key_space (asserted).
  void write_key(uint64_t key_number, std::span<char> out) const;
  std::string key(uint64_t key_number) const;

  const KvMix& mix() const { return mix_; }

 private:
  struct Uniform {};
  uint64_t next_key(Rng& rng) const;

  KvMix mix_;
  std::variant<Uniform, ZipfSampler, ScrambledZipfianGenerator> keys_;
  KeyScatter scatter_;
};

// ---- Twitter cache clusters (twitter/cache-trace 2020, JUNE BERRY Table 1) ----

struct TwitterCluster {
  int id;
  double set_ratio;  // fraction of requests that are sets
  uint32_t key_bytes;
  uint32_t value_bytes;
  double zipf_alpha;  // 0: uniform popularity
};

// Clusters 12, 19, 27 and 31, in that order. Static storage.
std::span<const TwitterCluster> twitter_clusters();
// The cluster with `id`, or kNotFound.
Result<TwitterCluster> twitter_cluster(int id);
// The cluster's mix over `key_space` keys (kZipf with the cluster's alpha,
// hot keys scattered). key_space must fit the cluster's key size.
KvMix twitter_mix(const TwitterCluster& cluster, uint64_t key_space);

// ---- PMemKV (JUNE BERRY): 91 B objects, Zipf 0.99, Poisson arrivals ----

inline constexpr uint32_t kPmemKvKeyBytes = 8;
// The 91 B object (Meta ZippyDB's average) is taken as the value stored under
// each 8-byte key.
inline constexpr uint32_t kPmemKvValueBytes = 91;
inline constexpr double kPmemKvZipfAlpha = 0.99;

// The put fractions the benchmarks sweep: 1.0, 0.5, 0.05, 0.0.
std::span<const double> pmemkv_put_fractions();
// kZipf 0.99 (exact, hot keys scattered) over `key_space` keys (<= 2^48, the
// capacity of 8-byte keys).
KvMix pmemkv_mix(double put_fraction, uint64_t key_space);

// ---- YCSB ----

// YCSB core workloads A (50% updates), B (5%) and C (0%) as get/set mixes
// with YCSB's scrambled Zipfian over `records` keys. Workloads D, E and F
// (inserts, scans, read-modify-write) do not fit a get/set mix:
// kInvalidArgument, as for any other letter.
Result<KvMix> ycsb_mix(char workload, uint64_t records, uint32_t key_bytes, uint32_t value_bytes);

// ---- sweeps ----

// One copy of `base` per entry of `value_sizes`, in order, differing only in
// value_bytes.
std::vector<KvMix> value_size_sweep(const KvMix& base, std::span<const uint32_t> value_sizes);
// min_bytes, 2*min_bytes, ... up to max_bytes inclusive. Precondition
// (asserted): min_bytes >= 1 is a power of two and min_bytes <= max_bytes.
std::vector<uint32_t> power_of_two_sizes(uint32_t min_bytes, uint32_t max_bytes);

}  // namespace ferry::workload
