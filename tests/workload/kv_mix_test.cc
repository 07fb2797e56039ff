// Request mixes: operation ratios, exact sizes, key distributions, presets.
// Seeds print; rerun with FERRY_SEED=<n>.
#include "ferry/workload/kv_mix.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <vector>

#include "ferry/workload/keys.h"
#include "test_seed.h"
#include "tolerance.h"

namespace ferry::workload {
namespace {

using ferry::testing::test_seed;
using workload_test::count_tolerance;

// The rows of the Twitter cluster table, verbatim.
TEST(TwitterClusters, TableRowsAreExact) {
  const auto clusters = twitter_clusters();
  ASSERT_EQ(clusters.size(), 4u);
  const TwitterCluster expected[] = {
      {12, 0.80, 44, 1030, 0.3048},
      {19, 0.25, 42, 101, 0.735},
      {27, 0.15, 66, 8, 1.065},
      {31, 0.94, 41, 15, 0.0},
  };
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(expected[i].id);
    EXPECT_EQ(clusters[i].id, expected[i].id);
    EXPECT_EQ(clusters[i].set_ratio, expected[i].set_ratio);
    EXPECT_EQ(clusters[i].key_bytes, expected[i].key_bytes);
    EXPECT_EQ(clusters[i].value_bytes, expected[i].value_bytes);
    EXPECT_EQ(clusters[i].zipf_alpha, expected[i].zipf_alpha);
  }
}

TEST(TwitterClusters, LookupById) {
  const Result<TwitterCluster> c27 = twitter_cluster(27);
  ASSERT_TRUE(c27.ok());
  EXPECT_EQ(c27.value().key_bytes, 66u);
  const Result<TwitterCluster> missing = twitter_cluster(13);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

// 100,000 requests per cluster; the set count is held to 5 binomial sigma
// (at most 0.8 percentage points here).
TEST(KvRequestGenerator, TwitterMixesHaveTheirSetRatioAndExactSizes) {
  const uint64_t seed = test_seed(0x7317);
  constexpr uint64_t kRequests = 100'000;
  constexpr uint64_t kKeySpace = 1'000'000;
  for (const TwitterCluster& cluster : twitter_clusters()) {
    SCOPED_TRACE(cluster.id);
    const KvMix mix = twitter_mix(cluster, kKeySpace);
    ASSERT_TRUE(validate(mix).ok());
    const KvRequestGenerator generator(mix);
    Rng rng(seed + static_cast<uint64_t>(cluster.id));
    uint64_t sets = 0;
    std::string key(cluster.key_bytes, '\0');
    for (uint64_t i = 0; i < kRequests; ++i) {
      const KvRequest request = generator.next(rng);
      sets += request.op == OpType::kSet;
      ASSERT_LT(request.key_number, kKeySpace);
      ASSERT_EQ(request.key_bytes, cluster.key_bytes);
      ASSERT_EQ(request.value_bytes, cluster.value_bytes);
      if (i % 1000 == 0) {
        generator.write_key(request.key_number, key);
        ASSERT_EQ(key, generator.key(request.key_number));
        ASSERT_EQ(key.size(), cluster.key_bytes);
        ASSERT_TRUE(std::all_of(key.begin(), key.end(), [](char c) {
          return std::isgraph(static_cast<unsigned char>(c));
        }));
      }
    }
    EXPECT_NEAR(static_cast<double>(sets), cluster.set_ratio * kRequests,
                count_tolerance(cluster.set_ratio, kRequests));
  }
}

TEST(KvRequestGenerator, PmemKvMixes) {
  const uint64_t seed = test_seed(0x9e3);
  const auto fractions = pmemkv_put_fractions();
  ASSERT_EQ(fractions.size(), 4u);
  EXPECT_EQ(fractions[0], 1.0);
  EXPECT_EQ(fractions[1], 0.5);
  EXPECT_EQ(fractions[2], 0.05);
  EXPECT_EQ(fractions[3], 0.0);
  constexpr uint64_t kRequests = 100'000;
  for (const double put_fraction : fractions) {
    SCOPED_TRACE(put_fraction);
    const KvMix mix = pmemkv_mix(put_fraction, 10'000'000);
    EXPECT_EQ(mix.key_bytes, 8u);
    EXPECT_EQ(mix.value_bytes, 91u);
    EXPECT_EQ(mix.distribution, KeyDistribution::kZipf);
    EXPECT_EQ(mix.zipf_alpha, 0.99);
    const KvRequestGenerator generator(mix);
    Rng rng(seed);
    uint64_t puts = 0;
    for (uint64_t i = 0; i < kRequests; ++i) {
      const KvRequest request = generator.next(rng);
      puts += request.op == OpType::kSet;
      ASSERT_EQ(request.value_bytes, 91u);
      ASSERT_EQ(request.key_bytes, 8u);
    }
    if (put_fraction == 0 || put_fraction == 1) {
      EXPECT_EQ(static_cast<double>(puts), put_fraction * kRequests);
    } else {
      EXPECT_NEAR(static_cast<double>(puts), put_fraction * kRequests,
                  count_tolerance(put_fraction, kRequests));
    }
  }
}

// Scattering moves keys but keeps the law: the hottest key number holds the
// probability of Zipf rank 0 (alpha 1.065 over 1000 keys: 1 / sum k^-1.065,
// about 0.153), 5 sigma over 200,000 requests.
TEST(KvRequestGenerator, ZipfKeysFollowTheLawWithOrWithoutScatter) {
  const uint64_t seed = test_seed(0x2f);
  constexpr uint64_t kKeySpace = 1000;
  constexpr uint64_t kRequests = 200'000;
  double norm = 0;
  for (uint64_t k = 1; k <= kKeySpace; ++k) norm += std::pow(static_cast<double>(k), -1.065);
  const double p0 = 1 / norm;
  for (const bool scatter : {false, true}) {
    SCOPED_TRACE(scatter);
    KvMix mix;
    mix.key_space = kKeySpace;
    mix.key_bytes = 16;
    mix.distribution = KeyDistribution::kZipf;
    mix.zipf_alpha = 1.065;
    mix.scatter_hot_keys = scatter;
    const KvRequestGenerator generator(mix);
    Rng rng(seed);
    std::vector<uint64_t> counts(kKeySpace);
    for (uint64_t i = 0; i < kRequests; ++i) ++counts[generator.next(rng).key_number];
    const uint64_t hottest =
        static_cast<uint64_t>(std::max_element(counts.begin(), counts.end()) - counts.begin());
    EXPECT_EQ(hottest, scatter ? KeyScatter(kKeySpace)(0) : 0u);
    EXPECT_NEAR(static_cast<double>(counts[hottest]), p0 * kRequests,
                count_tolerance(p0, kRequests));
  }
}

TEST(KvRequestGenerator, UniformAndScrambledKeysCoverTheSpace) {
  const uint64_t seed = test_seed(0x44);
  constexpr uint64_t kKeySpace = 100;
  for (const KeyDistribution distribution :
       {KeyDistribution::kUniform, KeyDistribution::kScrambledZipfian}) {
    KvMix mix;
    mix.key_space = kKeySpace;
    mix.key_bytes = 30;
    mix.value_bytes = 100;
    mix.distribution = distribution;
    const KvRequestGenerator generator(mix);
    Rng rng(seed);
    std::set<uint64_t> seen;
    for (int i = 0; i < 50'000; ++i) {
      const uint64_t key = generator.next(rng).key_number;
      ASSERT_LT(key, kKeySpace);
      seen.insert(key);
    }
    EXPECT_EQ(seen.size(), kKeySpace) << static_cast<int>(distribution);
  }
}

TEST(KvRequestGenerator, SameSeedSameRequests) {
  const uint64_t seed = test_seed(0x51);
  const KvRequestGenerator generator(twitter_mix(twitter_cluster(19).value(), 50'000));
  Rng a(seed);
  Rng b(seed);
  for (int i = 0; i < 10'000; ++i) {
    const KvRequest x = generator.next(a);
    const KvRequest y = generator.next(b);
    ASSERT_EQ(x.op, y.op);
    ASSERT_EQ(x.key_number, y.key_number);
  }
}

TEST(KeyScatter, IsABijectionOnTheKeySpace) {
  for (const uint64_t items :
       {1ULL, 2ULL, 3ULL, 4ULL, 5ULL, 7ULL, 8ULL, 9ULL, 63ULL, 64ULL, 65ULL, 1000ULL, 4097ULL}) {
    const KeyScatter scatter(items);
    std::set<uint64_t> images;
    for (uint64_t rank = 0; rank < items; ++rank) {
      const uint64_t key = scatter(rank);
      ASSERT_LT(key, items);
      images.insert(key);
    }
    EXPECT_EQ(images.size(), items);
  }
}

TEST(KeyScatter, SpreadsTheHottestRanks) {
  constexpr uint64_t kItems = 1'000'000;
  const KeyScatter scatter(kItems);
  uint64_t in_top_half = 0;
  for (uint64_t rank = 0; rank < 100; ++rank) in_top_half += scatter(rank) >= kItems / 2;
  // A random permutation puts ~50 of 100 in each half; identity puts 0.
  EXPECT_GT(in_top_half, 25u);
  EXPECT_LT(in_top_half, 75u);
  EXPECT_EQ(scatter(12345), KeyScatter(kItems)(12345));
}

TEST(KvMix, ValidateRejectsOutOfRangeFields) {
  KvMix good;
  good.key_space = 1000;
  good.key_bytes = 8;
  EXPECT_TRUE(validate(good).ok());

  KvMix bad = good;
  bad.set_fraction = 1.5;
  EXPECT_EQ(validate(bad).code(), Code::kInvalidArgument);
  bad.set_fraction = std::nan("");
  EXPECT_EQ(validate(bad).code(), Code::kInvalidArgument);
  bad = good;
  bad.key_space = 0;
  EXPECT_EQ(validate(bad).code(), Code::kInvalidArgument);
  bad = good;
  bad.key_bytes = 0;
  EXPECT_EQ(validate(bad).code(), Code::kInvalidArgument);
  bad = good;
  bad.key_bytes = 1;
  bad.key_space = 65;  // one byte names 64 keys
  EXPECT_EQ(validate(bad).code(), Code::kInvalidArgument);
  bad.key_space = 64;
  EXPECT_TRUE(validate(bad).ok());
  bad = good;
  bad.distribution = KeyDistribution::kZipf;
  bad.zipf_alpha = -0.5;
  EXPECT_EQ(validate(bad).code(), Code::kInvalidArgument);
  bad.zipf_alpha = 0.99;
  bad.key_bytes = 20;
  bad.key_space = (uint64_t{1} << 53) + 1;
  EXPECT_EQ(validate(bad).code(), Code::kInvalidArgument);
}

TEST(KvMix, YcsbCoreWorkloads) {
  const Result<KvMix> a = ycsb_mix('A', 100'000, 32, 1024);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value().set_fraction, 0.5);
  EXPECT_EQ(a.value().distribution, KeyDistribution::kScrambledZipfian);
  EXPECT_EQ(a.value().key_space, 100'000u);
  EXPECT_EQ(a.value().key_bytes, 32u);
  EXPECT_EQ(a.value().value_bytes, 1024u);
  EXPECT_EQ(ycsb_mix('b', 10, 30, 100).value().set_fraction, 0.05);
  EXPECT_EQ(ycsb_mix('C', 10, 30, 100).value().set_fraction, 0.0);
  for (const char workload : {'D', 'E', 'F', 'G'}) {
    EXPECT_EQ(ycsb_mix(workload, 10, 30, 100).status().code(), Code::kInvalidArgument) << workload;
  }
}

TEST(KvMix, ValueSizeSweep) {
  const std::vector<uint32_t> sizes = power_of_two_sizes(64, 4096);
  EXPECT_EQ(sizes, (std::vector<uint32_t>{64, 128, 256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(power_of_two_sizes(8, 100), (std::vector<uint32_t>{8, 16, 32, 64}));
  EXPECT_EQ(power_of_two_sizes(1u << 31, UINT32_MAX), (std::vector<uint32_t>{1u << 31}));

  const KvMix base = pmemkv_mix(0.5, 1000);
  const std::vector<KvMix> sweep = value_size_sweep(base, sizes);
  ASSERT_EQ(sweep.size(), sizes.size());
  for (size_t i = 0; i < sweep.size(); ++i) {
    EXPECT_EQ(sweep[i].value_bytes, sizes[i]);
    EXPECT_EQ(sweep[i].set_fraction, base.set_fraction);
    EXPECT_EQ(sweep[i].key_space, base.key_space);
    EXPECT_EQ(sweep[i].key_bytes, base.key_bytes);
    EXPECT_EQ(sweep[i].distribution, base.distribution);
    EXPECT_EQ(sweep[i].zipf_alpha, base.zipf_alpha);
  }
}

}  // namespace
}  // namespace ferry::workload
