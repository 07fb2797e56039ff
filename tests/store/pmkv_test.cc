// PmKv functional behaviour: put/get/remove/overwrite, binary data, limits,
// a full region, reopening, space reuse, and what each operation costs in
// fences and modeled PM traffic. Crash consistency: pmkv_crash_test.cc;
// corrupted regions: pmkv_corruption_test.cc.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/pm/hints.h"
#include "store/pmkv_test_util.h"

namespace ferry::store::testing {
namespace {

constexpr size_t kRegionBytes = 1 << 20;

class PmKvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = map_fresh(::testing::UnitTest::GetInstance()->current_test_info()->name(), kRegionBytes);
  }
  std::unique_ptr<PmKv> create(PmKvOptions options = {}) {
    auto kv = PmKv::create(*file_.domain, *file_.region, std::move(options));
    EXPECT_TRUE(kv.ok()) << kv.status().to_string();
    return kv.ok() ? std::move(kv).value() : nullptr;
  }
  std::unique_ptr<PmKv> reopen(PmKvOptions options = {}) {
    auto kv = PmKv::open(*file_.domain, *file_.region, std::move(options));
    EXPECT_TRUE(kv.ok()) << kv.status().to_string();
    return kv.ok() ? std::move(kv).value() : nullptr;
  }
  PmFile file_;
};

TEST_F(PmKvTest, PutGetOverwriteRemove) {
  auto kv = create();
  EXPECT_EQ(kv->get("alpha").status().code(), Code::kNotFound) << "empty store";
  ASSERT_TRUE(kv->put("alpha", "one").ok());
  ASSERT_TRUE(kv->put("beta", "two").ok());
  EXPECT_EQ(kv->get("alpha").value(), "one");
  EXPECT_EQ(kv->get("beta").value(), "two");
  EXPECT_EQ(kv->size(), 2u);
  ASSERT_TRUE(kv->put("alpha", "a much longer value than before, to change the block size").ok());
  EXPECT_EQ(kv->get("alpha").value(), "a much longer value than before, to change the block size");
  EXPECT_EQ(kv->size(), 2u) << "an overwrite is not a second record";
  ASSERT_TRUE(kv->remove("alpha").ok());
  EXPECT_EQ(kv->get("alpha").status().code(), Code::kNotFound);
  EXPECT_EQ(kv->remove("alpha").code(), Code::kNotFound) << "removing an absent key";
  EXPECT_EQ(kv->get("beta").value(), "two");
  EXPECT_EQ(kv->size(), 1u);
  EXPECT_TRUE(kv->verify().ok()) << kv->verify().to_string();
}

TEST_F(PmKvTest, KeysAndValuesAreBinary) {
  auto kv = create();
  const std::string zeros_key(8, '\0');
  const std::string zeros_key_longer(9, '\0');
  const std::string nul_inside("a\0b", 3);
  const std::string all_bytes = [] {
    std::string s;
    for (int i = 0; i < 256; ++i) s += static_cast<char>(i);
    return s;
  }();
  ASSERT_TRUE(kv->put(zeros_key, all_bytes).ok());
  ASSERT_TRUE(kv->put(zeros_key_longer, "nine zeros").ok());
  ASSERT_TRUE(kv->put(nul_inside, std::string("\0\0\xff", 3)).ok());
  ASSERT_TRUE(kv->put("", "empty key").ok());
  ASSERT_TRUE(kv->put("empty value", "").ok());
  EXPECT_EQ(kv->get(zeros_key).value(), all_bytes);
  EXPECT_EQ(kv->get(zeros_key_longer).value(), "nine zeros") << "keys differing only in length";
  EXPECT_EQ(kv->get(nul_inside).value(), std::string("\0\0\xff", 3));
  EXPECT_EQ(kv->get(std::string("a", 1)).status().code(), Code::kNotFound) << "a prefix up to the NUL is another key";
  EXPECT_EQ(kv->get("").value(), "empty key");
  EXPECT_EQ(kv->get("empty value").value(), "");
  EXPECT_EQ(kv->size(), 5u);
  ASSERT_TRUE(kv->put(std::string_view(), std::string_view()).ok()) << "(nullptr, 0) views are empty strings";
  EXPECT_EQ(kv->get("").value(), "");
  EXPECT_EQ(kv->get_into("", std::span<uint8_t>()).value(), 0u);
  EXPECT_EQ(kv->size(), 5u);
}

TEST_F(PmKvTest, SizesAtTheLimitsWorkAndBeyondAreInvalidArguments) {
  auto kv = create();
  const std::string max_key(kPmKvMaxKeyBytes, 'k');
  const std::string max_value(kPmKvMaxValueBytes, 'v');
  ASSERT_TRUE(kv->put(max_key, max_value).ok());
  EXPECT_EQ(kv->get(max_key).value(), max_value);
  EXPECT_EQ(kv->put(std::string(kPmKvMaxKeyBytes + 1, 'k'), "x").code(), Code::kInvalidArgument);
  EXPECT_EQ(kv->put("k", std::string(kPmKvMaxValueBytes + 1, 'v')).code(), Code::kInvalidArgument);
  EXPECT_EQ(kv->get(std::string(kPmKvMaxKeyBytes + 1, 'k')).status().code(), Code::kNotFound);
  EXPECT_EQ(kv->size(), 1u) << "rejected puts change nothing";
  kv.reset();
  kv = reopen();
  EXPECT_EQ(kv->get(max_key).value(), max_value);
}

TEST_F(PmKvTest, GetIntoCopiesOrSaysHowLargeTheValueIs) {
  auto kv = create();
  ASSERT_TRUE(kv->put("key", "0123456789").ok());
  std::vector<uint8_t> small(4, 0xAA);
  auto r = kv->get_into("key", small);
  EXPECT_EQ(r.status().code(), Code::kOutOfRange);
  EXPECT_NE(r.status().message().find("10 bytes"), std::string::npos) << r.status().message();
  EXPECT_EQ(small[0], 0xAA) << "nothing copied";
  std::vector<uint8_t> big(64);
  auto n = kv->get_into("key", big);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value(), 10u);
  EXPECT_EQ(std::memcmp(big.data(), "0123456789", 10), 0);
  EXPECT_EQ(kv->get_into("nope", big).status().code(), Code::kNotFound);
}

TEST_F(PmKvTest, ReopenAfterCleanShutdownFindsEverything) {
  std::map<std::string, std::string> model;
  Rng rng(7);
  {
    auto kv = create();
    for (int i = 0; i < 3000; ++i) {
      const std::string key = "key-" + std::to_string(rng.below(1500));
      if (rng.chance(0.2)) {
        const Status s = kv->remove(key);
        ASSERT_EQ(s.ok(), model.erase(key) == 1) << s.to_string();
      } else {
        const std::string value = random_bytes(rng, rng.below(300));
        ASSERT_TRUE(kv->put(key, value).ok());
        model[key] = value;
      }
    }
  }
  auto kv = reopen();
  EXPECT_EQ(kv->size(), model.size());
  EXPECT_EQ(kv->recovery().records, model.size());
  const Dump d = dump(*kv);
  ASSERT_TRUE(d.status.ok()) << d.status.to_string();
  EXPECT_TRUE(d.duplicate.empty()) << hex(d.duplicate);
  EXPECT_TRUE(d.entries == model);
  EXPECT_TRUE(kv->verify().ok()) << kv->verify().to_string();
}

TEST_F(PmKvTest, ReopenInANewProcessReadsTheFile) {
  {
    auto kv = create();
    ASSERT_TRUE(kv->put("persist", "me").ok());
  }
  const std::string path = file_.path;
  file_.domain.reset();  // unmaps: the file holds the durable image
  pm::PersistenceDomain domain;
  pm::Region* region = domain.map_pm(path, 0, /*create=*/false).value();
  auto kv = PmKv::open(domain, *region);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  EXPECT_EQ(kv.value()->get("persist").value(), "me");
}

TEST_F(PmKvTest, ProcessCrashLosesNothingAcknowledged) {
  auto kv = create();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(kv->put("k" + std::to_string(i), std::string(i, 'x')).ok());
  kv.reset();
  file_.domain->process_crash();
  kv = reopen();
  ASSERT_EQ(kv->size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(kv->get("k" + std::to_string(i)).value(), std::string(i, 'x'));
}

TEST_F(PmKvTest, FullRegionIsResourceExhaustedAndCorruptsNothing) {
  auto kv = create();
  std::map<std::string, std::string> model;
  Rng rng(11);
  int exhausted = 0;
  for (int i = 0; exhausted < 20; ++i) {
    const std::string key = "fill-" + std::to_string(i);
    const std::string value = random_bytes(rng, 500 + rng.below(3000));
    const Status s = kv->put(key, value);
    if (s.code() == Code::kResourceExhausted) {
      ++exhausted;
      EXPECT_NE(s.message().find("largest extent"), std::string::npos) << s.message();
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.to_string();
    model[key] = value;
  }
  EXPECT_LT(kv->stats().largest_free_bytes, 3500u + 256);
  // An overwrite needs room for the new copy before the old one is freed.
  const std::string first = model.begin()->first;
  const Status big = kv->put(first, std::string(kPmKvMaxValueBytes, 'B'));
  EXPECT_EQ(big.code(), Code::kResourceExhausted);
  EXPECT_EQ(kv->get(first).value(), model[first]) << "a failed overwrite keeps the old value";
  const Dump d = dump(*kv);
  EXPECT_TRUE(d.entries == model);
  ASSERT_TRUE(kv->verify().ok()) << kv->verify().to_string();
  // Removing makes room again.
  for (int i = 0; i < 40 && !model.empty(); ++i) {
    ASSERT_TRUE(kv->remove(model.begin()->first).ok());
    model.erase(model.begin());
  }
  ASSERT_TRUE(kv->put("after", std::string(3000, 'a')).ok());
  model["after"] = std::string(3000, 'a');
  kv.reset();
  kv = reopen();
  EXPECT_TRUE(dump(*kv).entries == model);
  EXPECT_TRUE(kv->verify().ok()) << kv->verify().to_string();
}

TEST_F(PmKvTest, OverwritesAndRemovesGiveTheirSpaceBack) {
  auto kv = create();
  const uint64_t heap = kv->stats().heap_bytes;
  EXPECT_EQ(kv->stats().bytes_free, heap);
  Rng rng(5);
  for (int i = 0; i < 20000; ++i) {
    // 20,000 x ~2 KiB written into a 1 MiB region: only reuse makes it fit.
    ASSERT_TRUE(kv->put("key-" + std::to_string(i % 50), random_bytes(rng, 1 + rng.below(4000))).ok()) << "put " << i;
  }
  EXPECT_EQ(kv->size(), 50u);
  EXPECT_TRUE(kv->verify().ok()) << kv->verify().to_string();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(kv->remove("key-" + std::to_string(i)).ok());
  const PmKvStats s = kv->stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_free, heap);
  EXPECT_EQ(s.free_extents, 1u) << "freed neighbours coalesce back into one extent";
  EXPECT_EQ(s.largest_free_bytes, heap);
}

TEST_F(PmKvTest, OneBucketChainsEveryKeyAndEditsItsMiddle) {
  // Every key in one chain: replacing or removing the head, a middle record
  // and the tail rewrites a predecessor's link, not a bucket head.
  auto kv = create({.bucket_count = 1});
  std::map<std::string, std::string> model;
  for (int i = 0; i < 20; ++i) {
    const std::string k = "k" + std::to_string(i);
    ASSERT_TRUE(kv->put(k, "v" + std::to_string(i)).ok());
    model[k] = "v" + std::to_string(i);
  }
  EXPECT_EQ(kv->stats().bucket_count, 1u);
  for (const char* k : {"k0", "k10", "k19", "k5"}) {
    ASSERT_TRUE(kv->put(k, std::string("new ") + k).ok());
    model[k] = std::string("new ") + k;
  }
  for (const char* k : {"k1", "k19", "k11", "k0"}) {
    ASSERT_TRUE(kv->remove(k).ok());
    model.erase(k);
  }
  EXPECT_TRUE(dump(*kv).entries == model);
  ASSERT_TRUE(kv->verify().ok()) << kv->verify().to_string();
  kv.reset();
  kv = reopen();
  EXPECT_EQ(kv->recovery().longest_chain, model.size());
  EXPECT_TRUE(dump(*kv).entries == model);
}

TEST_F(PmKvTest, CreateReplacesAnExistingStore) {
  auto kv = create();
  ASSERT_TRUE(kv->put("old", "store").ok());
  kv.reset();
  kv = create({.bucket_count = 7});
  EXPECT_EQ(kv->size(), 0u);
  EXPECT_EQ(kv->get("old").status().code(), Code::kNotFound);
  kv.reset();
  kv = reopen();
  EXPECT_EQ(kv->size(), 0u);
  EXPECT_EQ(kv->stats().bucket_count, 7u);
}

TEST_F(PmKvTest, OpenOfAnUnformattedOrForeignRegionIsNotFound) {
  EXPECT_EQ(PmKv::open(*file_.domain, *file_.region).status().code(), Code::kNotFound) << "all zeros";
  Rng rng(3);
  for (size_t i = 0; i < 4096; ++i) file_.region->data()[i] = static_cast<uint8_t>(rng.next());
  EXPECT_EQ(PmKv::open(*file_.domain, *file_.region).status().code(), Code::kNotFound) << "random bytes";
}

TEST_F(PmKvTest, UnusableRegionsAreInvalidArguments) {
  pm::Region* dram = file_.domain->alloc_dram(1 << 16).value();
  EXPECT_EQ(PmKv::create(*file_.domain, *dram).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PmKv::open(*file_.domain, *dram).status().code(), Code::kInvalidArgument);
  PmFile page = map_fresh("page", 4096);  // the smallest mapping: 16 buckets and a 3.5 KiB heap...
  ASSERT_NE(page.region, nullptr);
  EXPECT_TRUE(PmKv::create(*page.domain, *page.region).ok());
  EXPECT_EQ(PmKv::create(*page.domain, *page.region, {.bucket_count = 300}).status().code(), Code::kInvalidArgument)
      << "...but 300 buckets leave no heap";
  EXPECT_EQ(PmKv::create(*file_.domain, *file_.region, {.bucket_count = kRegionBytes}).status().code(),
            Code::kInvalidArgument)
      << "buckets filling the region";
}

// CRC32C as docs/pmkv.md specifies it (bitwise, reflected Castagnoli).
uint32_t doc_crc32c(const uint8_t* p, size_t n) {
  uint32_t crc = ~0U;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78U : crc >> 1;
  }
  return ~crc;
}

TEST_F(PmKvTest, CorruptSuperblockIsDataLossAndOtherVersionsUnimplemented) {
  create();
  uint8_t* sb = file_.region->data();
  std::vector<uint8_t> saved(sb, sb + 64);
  sb[20] ^= 0x01;  // region_bytes
  EXPECT_EQ(PmKv::open(*file_.domain, *file_.region).status().code(), Code::kDataLoss);
  std::memcpy(sb, saved.data(), 64);
  ASSERT_TRUE(PmKv::open(*file_.domain, *file_.region).ok());

  ASSERT_EQ(doc_crc32c(reinterpret_cast<const uint8_t*>("123456789"), 9), 0xE3069283U) << "the documented check value";
  uint32_t checksum;
  std::memcpy(&checksum, sb + 60, 4);
  ASSERT_EQ(checksum, doc_crc32c(sb + 8, 52)) << "superblock checksum as documented";
  const uint32_t version = 3;
  std::memcpy(sb + 8, &version, 4);
  checksum = doc_crc32c(sb + 8, 52);
  std::memcpy(sb + 60, &checksum, 4);
  EXPECT_EQ(PmKv::open(*file_.domain, *file_.region).status().code(), Code::kUnimplemented) << "a future format";
}

TEST_F(PmKvTest, EachOperationCostsItsFences) {
  auto kv = create();
  uint64_t fences = kv->stats().fences;
  auto fences_of = [&](const Status& s) {
    EXPECT_TRUE(s.ok()) << s.to_string();
    const uint64_t now = kv->stats().fences;
    const uint64_t n = now - fences;
    fences = now;
    return n;
  };
  EXPECT_EQ(fences_of(kv->put("k", "v1")), 2u) << "insert: record, then link";
  EXPECT_EQ(fences_of(kv->put("k", "v2")), 2u) << "replace: record, then link";
  EXPECT_EQ(fences_of(kv->put("k", "v2")), 0u) << "identical value: nothing to write";
  EXPECT_EQ(fences_of(kv->remove("k")), 1u) << "remove: link only";
}

TEST(PmKvCost, ModeledMediaCostOfA91BytePut) {
  // The paper's ZippyDB-average object: 8-byte key, 91-byte value, in a
  // 16 MiB region whose 512 KiB index is far larger than the 16 KiB
  // write-combining buffer. An insert writes a 128 B record (two whole lines,
  // non-temporal) and one bucket-head line; a replace the same (its block
  // usually a scattered hole); a remove one link line.
  PmFile file = map_fresh("media-cost", 16 << 20);
  auto kv = PmKv::create(*file.domain, *file.region).value();
  Rng rng(91);
  std::vector<std::string> keys;
  for (int i = 0; i < 2000; ++i) {  // warm: the heap's start is in use, the buffer full
    keys.push_back(random_bytes(rng, 8));
    ASSERT_TRUE(kv->put(keys.back(), random_bytes(rng, 91)).ok());
  }
  static constexpr int kOps = 5000;
  auto measure = [&](const char* what, uint64_t requests_per_op, auto&& op) {
    file.region->settle_media_model();
    file.region->reset_counters();
    const uint64_t fences_before = kv->stats().fences;
    for (int i = 0; i < kOps; ++i) op();
    file.region->settle_media_model();
    const pm::MediaCounters c = file.region->counters();
    auto per_op = [](uint64_t n) { return static_cast<double>(n) / kOps; };
    std::printf("91 B %s: %.2f fences, %.2f write requests (64 B), %.1f media bytes written, %.1f read\n", what,
                per_op(kv->stats().fences - fences_before), per_op(c.write_requests), per_op(c.media_bytes_written),
                per_op(c.media_bytes_read));
    EXPECT_EQ(c.write_requests, requests_per_op * kOps) << what;
    EXPECT_EQ(c.cpu_rfo, 0u) << what << ": H4, no cached stores";
    EXPECT_EQ(c.nt_partial, 0u) << what << ": H7, whole lines only";
    EXPECT_LE(c.media_bytes_written, requests_per_op * 256 * kOps) << what;
  };
  std::vector<std::string> inserted;
  measure("insert", 3, [&] {
    inserted.push_back(random_bytes(rng, 8));
    ASSERT_TRUE(kv->put(inserted.back(), random_bytes(rng, 91)).ok());
  });
  measure("replace", 3, [&] { ASSERT_TRUE(kv->put(keys[rng.below(keys.size())], random_bytes(rng, 91)).ok()); });
  size_t next = 0;
  measure("remove", 1, [&] { ASSERT_TRUE(kv->remove(inserted[next++]).ok()); });
}

TEST_F(PmKvTest, AStoppedOperationLeavesTheInstanceUnusable) {
  bool stop = false;
  PmKvOptions options;
  options.crash_hook = [&](CrashPoint) { return !stop; };
  auto kv = create(std::move(options));
  ASSERT_TRUE(kv->put("a", "1").ok());
  stop = true;
  EXPECT_EQ(kv->put("b", "2").code(), Code::kUnavailable);
  EXPECT_EQ(kv->get("a").status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(kv->put("c", "3").code(), Code::kFailedPrecondition);
  kv.reset();
  kv = reopen();
  EXPECT_EQ(kv->get("a").value(), "1");
  EXPECT_EQ(kv->get("b").status().code(), Code::kNotFound) << "stopped before it wrote anything";
}

}  // namespace
}  // namespace ferry::store::testing
