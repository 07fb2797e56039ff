// PmKv on damaged regions: bytes flipped in the superblock, the index and
// record headers, links redirected into the heap, an index of random words.
// open() must fail with a clear error or recover a valid subset -- every key
// it returns holds a value that key once had, whole -- and never crash (run
// under ASan/UBSan too). A repairing open() must succeed whenever the
// superblock is intact, persist its cuts, and leave a store that verifies,
// works, and opens strictly afterwards.
//
// The test reads the layout as docs/pmkv.md specifies it, which also checks
// that the document is right. FERRY_PMKV_SEEDS / FERRY_SEED as elsewhere.
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "store/pmkv_test_util.h"

namespace ferry::store::testing {
namespace {

constexpr size_t kRegionBytes = 64 << 10;

uint64_t read_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// docs/pmkv.md: superblock fields and link words.
struct DocLayout {
  uint64_t bucket_offset, bucket_count, heap_offset, heap_bytes;
  explicit DocLayout(const uint8_t* base)
      : bucket_offset(read_u64(base + 24)),
        bucket_count(read_u64(base + 32)),
        heap_offset(read_u64(base + 40)),
        heap_bytes(read_u64(base + 48)) {}
  // Offsets of every record reachable from the index.
  std::vector<uint64_t> records(const uint8_t* base) const {
    std::vector<uint64_t> out;
    for (uint64_t b = 0; b < bucket_count; ++b) {
      uint64_t link = read_u64(base + bucket_offset + 8 * b);
      while (link != 0) {
        const uint64_t at = (link & ((uint64_t{1} << 48) - 1)) * 64;
        out.push_back(at);
        link = read_u64(base + at);
      }
    }
    return out;
  }
};

using History = std::map<std::string, std::set<std::string>>;

// Empty if every entry of the store is a whole value its key once had.
std::string check_subset(const PmKv& kv, const History& history) {
  const Dump d = dump(kv);
  if (!d.status.ok()) return "for_each: " + d.status.to_string();
  if (!d.duplicate.empty()) return "key " + hex(d.duplicate) + " twice";
  for (const auto& [k, v] : d.entries) {
    auto it = history.find(k);
    if (it == history.end()) return "key " + hex(k) + " was never written";
    if (it->second.count(v) == 0) return "key " + hex(k) + " holds " + hex(v) + ", a value it never had";
  }
  if (kv.size() != d.entries.size()) return "size() disagrees with for_each";
  if (Status v = kv.verify(); !v.ok()) return "verify: " + v.to_string();
  return {};
}

class PmKvCorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = map_fresh(::testing::UnitTest::GetInstance()->current_test_info()->name(), kRegionBytes);
    auto kv = PmKv::create(*file_.domain, *file_.region, {.bucket_count = 8});
    ASSERT_TRUE(kv.ok());
    Rng rng(1234);
    for (int i = 0; i < 120; ++i) {
      const std::string key = "key" + std::to_string(rng.below(40));
      if (rng.chance(0.15)) {
        (void)kv.value()->remove(key);
        continue;
      }
      const std::string value = random_bytes(rng, rng.below(400));
      ASSERT_TRUE(kv.value()->put(key, value).ok());
      history_[key].insert(value);
    }
    live_ = kv.value()->size();
    ASSERT_GT(live_, 20u);
    image_.assign(file_.region->data(), file_.region->data() + kRegionBytes);
  }
  void restore() {
    std::memcpy(file_.region->data(), image_.data(), kRegionBytes);
    file_.region->persist(file_.region->data(), kRegionBytes);
  }

  // Opens strictly and repairing; empty if both behaved, else what did not.
  std::string check_open(bool superblock_damaged) {
    bool strict_data_loss = false;
    {
      auto strict = PmKv::open(*file_.domain, *file_.region);
      if (strict.ok()) {
        if (std::string e = check_subset(*strict.value(), history_); !e.empty()) return "strict open: " + e;
      } else {
        const Code c = strict.status().code();
        if (c != Code::kNotFound && c != Code::kDataLoss && c != Code::kUnimplemented) {
          return "strict open: unexpected " + strict.status().to_string();
        }
        if (!superblock_damaged && c != Code::kDataLoss) return "strict open: " + strict.status().to_string();
        strict_data_loss = c == Code::kDataLoss;
      }
    }
    Dump before;
    {
      auto repaired = PmKv::open(*file_.domain, *file_.region, {.repair = true});
      if (!repaired.ok()) {
        if (!superblock_damaged) return "repairing open with an intact superblock: " + repaired.status().to_string();
        return {};
      }
      PmKv& kv = *repaired.value();
      if (std::string e = check_subset(kv, history_); !e.empty()) return "repairing open: " + e;
      if (strict_data_loss && !superblock_damaged && kv.recovery().links_cut == 0) {
        return "strict open found damage the repair did not cut";
      }
      // The repaired store works...
      for (int i = 0; i < 10; ++i) {
        const Status s = kv.put("new" + std::to_string(i % 4), std::string(i * 37 % 300, static_cast<char>('a' + i)));
        if (!s.ok() && s.code() != Code::kResourceExhausted) return "put after repair: " + s.to_string();
      }
      if (Status s = kv.remove("new0"); !s.ok() && s.code() != Code::kNotFound) {
        return "remove after repair: " + s.to_string();
      }
      if (Status v = kv.verify(); !v.ok()) return "verify after repair and puts: " + v.to_string();
      before = dump(kv);
    }
    // ...and its repairs are as durable as everything it acknowledged.
    file_.domain->power_fail(7);
    auto again = PmKv::open(*file_.domain, *file_.region);
    if (!again.ok()) return "strict open after repair and a power failure: " + again.status().to_string();
    if (dump(*again.value()).entries != before.entries) return "the repaired store changed across a power failure";
    return {};
  }

  PmFile file_;
  History history_;
  size_t live_ = 0;
  std::vector<uint8_t> image_;
};

TEST_F(PmKvCorruptionTest, UndamagedImageOpensWhole) {
  restore();
  auto kv = PmKv::open(*file_.domain, *file_.region);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  EXPECT_EQ(kv.value()->size(), live_);
  EXPECT_EQ(check_subset(*kv.value(), history_), "");
}

TEST_F(PmKvCorruptionTest, FlippedMetadataBytesAreRejectedOrRepairedNeverFatal) {
  const SeedRange range = seeds(3000);
  int failures = 0;
  int strict_ok = 0, strict_failed = 0;
  for (uint64_t s = range.first; s < range.first + range.count && failures < 10; ++s) {
    restore();
    Rng rng(mix64(s) + 17);
    const DocLayout layout(file_.region->data());
    const std::vector<uint64_t> records = layout.records(file_.region->data());
    uint8_t* base = file_.region->data();
    bool superblock_damaged = false;
    const int flips = 1 + static_cast<int>(rng.below(4));
    for (int i = 0; i < flips; ++i) {
      const uint64_t dice = rng.below(100);
      if (dice < 15) {  // a link redirected somewhere plausible in the heap (a stale record, a record's middle)
        const uint64_t target = layout.heap_offset + rng.below(layout.heap_bytes / 64) * 64;
        const uint64_t tag = rng.chance(0.5) ? rng.next() & ~((uint64_t{1} << 48) - 1) : 0;
        const uint64_t link = tag | (target / 64);
        const uint64_t at = rng.chance(0.5) ? layout.bucket_offset + 8 * rng.below(layout.bucket_count)
                                            : records[rng.below(records.size())];
        std::memcpy(base + at, &link, 8);
        continue;
      }
      uint64_t at;
      if (dice < 30) {
        at = rng.below(64);  // superblock
        superblock_damaged = true;
      } else if (dice < 60) {
        at = layout.bucket_offset + rng.below(layout.bucket_count * 8);  // index
      } else if (dice < 95) {
        at = records[rng.below(records.size())] + rng.below(24);  // a record header
      } else {
        at = rng.below(kRegionBytes);  // anywhere: values, free space, padding
        superblock_damaged |= at < 64;
      }
      base[at] ^= static_cast<uint8_t>(1 + rng.below(255));
    }
    file_.region->persist(base, kRegionBytes);
    {
      auto probe = PmKv::open(*file_.domain, *file_.region);
      (probe.ok() ? strict_ok : strict_failed)++;
    }
    if (const std::string e = check_open(superblock_damaged); !e.empty()) {
      ADD_FAILURE() << "seed " << s << " (rerun: FERRY_SEED=" << s << "): " << e;
      ++failures;
    }
  }
  std::printf("%llu damaged images: strict open succeeded %d, failed %d\n",
              static_cast<unsigned long long>(range.count), strict_ok, strict_failed);
}

TEST_F(PmKvCorruptionTest, RandomIndexUnderAValidSuperblockIsRejectedOrRepairedToAWorkingStore) {
  const SeedRange range = seeds(200);
  for (uint64_t s = range.first; s < range.first + range.count; ++s) {
    restore();
    Rng rng(s);
    const DocLayout layout(file_.region->data());
    uint8_t* base = file_.region->data();
    // Random words in the index; half of them shaped like links into the heap.
    for (uint64_t b = 0; b < layout.bucket_count; ++b) {
      uint64_t word = rng.next();
      if (rng.chance(0.5))
        word = (word & ~((uint64_t{1} << 48) - 1)) | ((layout.heap_offset / 64) + rng.below(layout.heap_bytes / 64));
      std::memcpy(base + layout.bucket_offset + 8 * b, &word, 8);
    }
    file_.region->persist(base, kRegionBytes);
    const std::string e = check_open(/*superblock_damaged=*/false);
    ASSERT_EQ(e, "") << "seed " << s << " (rerun: FERRY_SEED=" << s << ")";
  }
}

TEST_F(PmKvCorruptionTest, RepairInterruptedByPowerFailureCanBeRepeated) {
  const SeedRange range = seeds(200);
  for (uint64_t s = range.first; s < range.first + range.count; ++s) {
    restore();
    Rng rng(s + 99);
    const DocLayout layout(file_.region->data());
    uint8_t* base = file_.region->data();
    for (int i = 0; i < 4; ++i) base[layout.bucket_offset + rng.below(layout.bucket_count * 8)] ^= 0x10;
    file_.region->persist(base, kRegionBytes);
    // Each cut passes two points; fail at one of the first few.
    const int target = 1 + static_cast<int>(rng.below(6));
    int points = 0;
    PmKvOptions options;
    options.repair = true;
    options.crash_hook = [&](CrashPoint) {
      if (++points != target) return true;
      file_.domain->power_fail(s);
      return false;
    };
    auto interrupted = PmKv::open(*file_.domain, *file_.region, options);
    if (interrupted.ok()) continue;  // fewer cuts than the target
    ASSERT_EQ(interrupted.status().code(), Code::kUnavailable) << "seed " << s;
    ASSERT_EQ(check_open(false), "") << "seed " << s << " (rerun: FERRY_SEED=" << s << ")";
  }
}

TEST_F(PmKvCorruptionTest, DamagedValueIsCaughtByItsChecksum) {
  restore();
  const DocLayout layout(file_.region->data());
  // The last value byte of a record with a value (header: value_bytes at 16, key_bytes at 22).
  uint64_t byte = 0;
  for (uint64_t at : layout.records(file_.region->data())) {
    uint32_t value_bytes;
    std::memcpy(&value_bytes, file_.region->data() + at + 16, 4);
    const uint8_t key_bytes = file_.region->data()[at + 22];
    if (value_bytes > 0) {
      byte = at + 24 + key_bytes + value_bytes - 1;
      break;
    }
  }
  ASSERT_NE(byte, 0u);
  file_.region->data()[byte] ^= 0x40;
  file_.region->persist(file_.region->data() + byte, 1);
  auto strict = PmKv::open(*file_.domain, *file_.region);
  ASSERT_EQ(strict.status().code(), Code::kDataLoss);
  EXPECT_NE(strict.status().message().find("checksum"), std::string::npos) << strict.status().message();
  auto unchecked = PmKv::open(*file_.domain, *file_.region, {.verify_checksums = false});
  ASSERT_TRUE(unchecked.ok()) << "headers alone look fine";
  const Dump d = dump(*unchecked.value());
  EXPECT_EQ(d.status.code(), Code::kDataLoss) << "but reading the record checks its checksum";
  EXPECT_EQ(check_open(false), "");
}

}  // namespace
}  // namespace ferry::store::testing
