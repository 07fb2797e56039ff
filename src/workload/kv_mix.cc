#include "ferry/workload/kv_mix.h"

#include <array>
#include <bit>
#include <cmath>
#include <string>

#include "ferry/common/assert.h"
#include "ferry/workload/keys.h"

namespace ferry::workload {
namespace {

constexpr std::array<TwitterCluster, 4> kTwitterClusters = {{
    {12, 0.80, 44, 1030, 0.3048},
    {19, 0.25, 42, 101, 0.735},
    {27, 0.15, 66, 8, 1.065},
    {31, 0.94, 41, 15, 0.0},
}};

constexpr std::array<double, 4> kPmemKvPutFractions = {1.0, 0.5, 0.05, 0.0};

// ZipfSampler's limit: ranks are computed in double precision.
constexpr uint64_t kMaxZipfKeys = uint64_t{1} << 53;

// Feistel round keys: arbitrary fixed constants, so a key space always
// scatters the same way.
constexpr std::array<uint64_t, 4> kRoundKeys = {0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL,
                                                0xa4093822299f31d0ULL, 0x082efa98ec4e6c89ULL};

}  // namespace

Status validate(const KvMix& mix) {
  if (!(mix.set_fraction >= 0 && mix.set_fraction <= 1)) {
    return invalid_argument("set_fraction " + std::to_string(mix.set_fraction) +
                            " is not in [0, 1]");
  }
  if (mix.key_space == 0) return invalid_argument("key_space is 0");
  if (mix.key_bytes == 0) return invalid_argument("key_bytes is 0");
  if (mix.key_space > fixed_size_key_capacity(mix.key_bytes)) {
    return invalid_argument(std::to_string(mix.key_bytes) + "-byte keys name at most " +
                            std::to_string(fixed_size_key_capacity(mix.key_bytes)) + " keys, not " +
                            std::to_string(mix.key_space));
  }
  switch (mix.distribution) {
    case KeyDistribution::kUniform:
    case KeyDistribution::kScrambledZipfian:
      return ok_status();
    case KeyDistribution::kZipf:
      if (!(std::isfinite(mix.zipf_alpha) && mix.zipf_alpha >= 0)) {
        return invalid_argument("zipf_alpha " + std::to_string(mix.zipf_alpha) +
                                " is not a finite number >= 0");
      }
      if (mix.key_space > kMaxZipfKeys) {
        return invalid_argument("a Zipf key space is at most 2^53 keys, not " +
                                std::to_string(mix.key_space));
      }
      return ok_status();
  }
  return invalid_argument("unknown key distribution");
}

KeyScatter::KeyScatter(uint64_t items) : items_(items), half_bits_(1), half_mask_(1) {
  FERRY_ASSERT(items >= 1, "a key space needs at least one key");
  // The domain is 2^(2 * half_bits) < 4 * items (at least 4), so a cycle
  // walk needs fewer than 4 steps on average.
  const uint32_t bits = items <= 1 ? 1 : static_cast<uint32_t>(std::bit_width(items - 1));
  half_bits_ = (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t KeyScatter::permute_once(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (const uint64_t round_key : kRoundKeys) {
    const uint64_t next_right = left ^ (mix64(right ^ round_key) & half_mask_);
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

uint64_t KeyScatter::operator()(uint64_t rank) const {
  FERRY_ASSERT(rank < items_, "rank ", rank, " outside a key space of ", items_);
  // Walking the permutation's cycle from an in-range point until it re-enters
  // the range restricts a bijection on the domain to a bijection on [0, items).
  uint64_t x = permute_once(rank);
  while (x >= items_) x = permute_once(x);
  return x;
}

KvRequestGenerator::KvRequestGenerator(const KvMix& mix)
    : mix_(mix), keys_(Uniform{}), scatter_(mix.key_space == 0 ? 1 : mix.key_space) {
  const Status status = validate(mix);
  FERRY_ASSERT(status.ok(), "invalid KvMix: ", status.to_string());
  switch (mix_.distribution) {
    case KeyDistribution::kUniform:
      break;
    case KeyDistribution::kZipf:
      keys_.emplace<ZipfSampler>(mix_.key_space, mix_.zipf_alpha);
      break;
    case KeyDistribution::kScrambledZipfian:
      keys_.emplace<ScrambledZipfianGenerator>(mix_.key_space);
      break;
  }
}

uint64_t KvRequestGenerator::next_key(Rng& rng) const {
  if (const auto* zipf = std::get_if<ZipfSampler>(&keys_)) {
    const uint64_t rank = zipf->next(rng);
    return mix_.scatter_hot_keys ? scatter_(rank) : rank;
  }
  if (const auto* scrambled = std::get_if<ScrambledZipfianGenerator>(&keys_)) {
    return scrambled->next(rng);
  }
  return rng.below(mix_.key_space);
}

KvRequest KvRequestGenerator::next(Rng& rng) const {
  KvRequest request;
  request.op = rng.chance(mix_.set_fraction) ? OpType::kSet : OpType::kGet;
  request.key_number = next_key(rng);
  request.key_bytes = mix_.key_bytes;
  request.value_bytes = mix_.value_bytes;
  return request;
}

void KvRequestGenerator::write_key(uint64_t key_number, std::span<char> out) const {
  FERRY_ASSERT(key_number < mix_.key_space, "key ", key_number, " outside a key space of ",
               mix_.key_space);
  FERRY_ASSERT(out.size() == mix_.key_bytes, "key buffer of ", out.size(), " bytes for ",
               mix_.key_bytes, "-byte keys");
  write_fixed_size_key(key_number, out);
}

std::string KvRequestGenerator::key(uint64_t key_number) const {
  std::string key(mix_.key_bytes, '\0');
  write_key(key_number, key);
  return key;
}

std::span<const TwitterCluster> twitter_clusters() { return kTwitterClusters; }

Result<TwitterCluster> twitter_cluster(int id) {
  for (const TwitterCluster& cluster : kTwitterClusters) {
    if (cluster.id == id) return cluster;
  }
  return not_found("no Twitter cluster " + std::to_string(id) + " (known: 12, 19, 27, 31)");
}

KvMix twitter_mix(const TwitterCluster& cluster, uint64_t key_space) {
  KvMix mix;
  mix.set_fraction = cluster.set_ratio;
  mix.key_space = key_space;
  mix.key_bytes = cluster.key_bytes;
  mix.value_bytes = cluster.value_bytes;
  mix.distribution = KeyDistribution::kZipf;
  mix.zipf_alpha = cluster.zipf_alpha;
  mix.scatter_hot_keys = true;
  return mix;
}

std::span<const double> pmemkv_put_fractions() { return kPmemKvPutFractions; }

KvMix pmemkv_mix(double put_fraction, uint64_t key_space) {
  KvMix mix;
  mix.set_fraction = put_fraction;
  mix.key_space = key_space;
  mix.key_bytes = kPmemKvKeyBytes;
  mix.value_bytes = kPmemKvValueBytes;
  mix.distribution = KeyDistribution::kZipf;
  mix.zipf_alpha = kPmemKvZipfAlpha;
  mix.scatter_hot_keys = true;
  return mix;
}

Result<KvMix> ycsb_mix(char workload, uint64_t records, uint32_t key_bytes, uint32_t value_bytes) {
  KvMix mix;
  switch (workload) {
    case 'A':
    case 'a':
      mix.set_fraction = 0.5;
      break;
    case 'B':
    case 'b':
      mix.set_fraction = 0.05;
      break;
    case 'C':
    case 'c':
      mix.set_fraction = 0.0;
      break;
    default:
      return invalid_argument(std::string("YCSB workload '") + workload +
                              "' is not a get/set mix (A, B and C are)");
  }
  mix.key_space = records;
  mix.key_bytes = key_bytes;
  mix.value_bytes = value_bytes;
  mix.distribution = KeyDistribution::kScrambledZipfian;
  return mix;
}

std::vector<KvMix> value_size_sweep(const KvMix& base, std::span<const uint32_t> value_sizes) {
  std::vector<KvMix> mixes;
  mixes.reserve(value_sizes.size());
  for (const uint32_t value_bytes : value_sizes) {
    KvMix mix = base;
    mix.value_bytes = value_bytes;
    mixes.push_back(mix);
  }
  return mixes;
}

std::vector<uint32_t> power_of_two_sizes(uint32_t min_bytes, uint32_t max_bytes) {
  FERRY_ASSERT(std::has_single_bit(min_bytes), "min_bytes ", min_bytes, " is not a power of two");
  FERRY_ASSERT(min_bytes <= max_bytes, "min_bytes ", min_bytes, " > max_bytes ", max_bytes);
  std::vector<uint32_t> sizes;
  for (uint64_t size = min_bytes; size <= max_bytes; size *= 2) {
    sizes.push_back(static_cast<uint32_t>(size));
  }
  return sizes;
}

}  // namespace ferry::workload
