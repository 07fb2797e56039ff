// PmKv crash consistency against a model (the LevelDB fault-injection idea):
// a random workload of puts, overwrites and removes; a power failure injected
// at a random ordering point -- between operations or inside one, through
// the crash hook -- with the model's adversarial loss of everything not yet
// durable; then open() and compare with the model:
//  - every operation acknowledged before the failure is there exactly;
//  - the one in flight is all or nothing, and which one the protocol says:
//    not applied if the failure came before its commit word was stored,
//    applied once that word was fenced, either in between;
//  - nothing else differs, no key appears twice, every value is whole
//    (for_each checks every record's checksum);
//  - the recovered allocator is exact (verify()) and the store keeps working.
//
// FERRY_PMKV_SEEDS=n runs n seeds; FERRY_SEED=s reruns seed s alone.
#include <array>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "store/pmkv_test_util.h"

namespace ferry::store::testing {
namespace {

using Model = std::map<std::string, std::string>;

struct Workload {
  size_t region_bytes = 64 << 10;
  size_t keys = 16;
  size_t max_ops = 40;
  size_t post_ops = 12;                                 // after recovery, before a clean reopen
  size_t max_value_bytes = 12000;                       // occasional large values fill the region
  std::vector<uint64_t> bucket_counts = {1, 3, 16, 0};  // 0: the default
  pm::PlatformConfig platform;
};

// The first difference between two models, for humans.
std::string diff(const Model& got, const Model& want) {
  for (const auto& [k, v] : want) {
    auto it = got.find(k);
    if (it == got.end()) return "key " + hex(k) + " missing";
    if (it->second != v) return "key " + hex(k) + " holds " + hex(it->second) + ", expected " + hex(v);
  }
  for (const auto& [k, v] : got) {
    if (want.count(k) == 0) return "key " + hex(k) + " should not be there";
  }
  return "equal";
}

struct Op {
  bool put = true;
  std::string key;
  std::string value;
};

Model with_op(Model m, const Op& op) {
  if (op.put) {
    m[op.key] = op.value;
  } else {
    m.erase(op.key);
  }
  return m;
}

class Runner {
 public:
  explicit Runner(const Workload& w, const std::string& name) : w_(w) {
    file_ = map_fresh(name, w.region_bytes, w.platform);
  }

  // Runs one seed; empty if it passed, else what went wrong.
  std::string run(uint64_t seed) {
    Rng rng(mix64(seed) ^ 0x9e37'79b9'7f4a'7c15ULL);
    std::vector<std::string> keys;
    std::set<std::string> distinct;
    while (keys.size() < w_.keys) {
      const size_t len = rng.chance(0.5) ? 8 : rng.below(20);  // the paper's 8-byte keys, and others
      std::string k = random_bytes(rng, len);
      if (distinct.insert(k).second) keys.push_back(k);
    }
    auto random_op = [&](const Model& m) {
      Op op;
      op.key = keys[rng.below(keys.size())];
      op.put = !(rng.chance(0.3) && (m.count(op.key) || rng.chance(0.2)));
      if (op.put) {
        const uint64_t dice = rng.below(100);
        const size_t len = dice < 65   ? rng.below(129)
                           : dice < 95 ? 129 + rng.below(900)
                                       : 1029 + rng.below(w_.max_value_bytes - 1028);
        op.value = random_bytes(rng, len);
      }
      return op;
    };

    // The hook: armed after create(); at the target point it fails the power.
    int64_t points = 0;
    int64_t target = -1;
    std::optional<CrashPoint> fired;
    const uint64_t fail_seed = seed;
    PmKvOptions options;
    options.bucket_count = w_.bucket_counts[rng.below(w_.bucket_counts.size())];
    options.crash_hook = [&](CrashPoint point) {
      if (target < 0 || ++points != target) return true;
      fired = point;
      file_.domain->power_fail(fail_seed);
      return false;
    };
    auto created = PmKv::create(*file_.domain, *file_.region, options);
    if (!created.ok()) return "create: " + created.status().to_string();
    std::unique_ptr<PmKv> kv = std::move(created).value();

    const size_t nops = 1 + rng.below(w_.max_ops);
    target = static_cast<int64_t>(1 + rng.below(nops * 5 + 1));  // past the last point: fail after the workload
    Model model;
    std::optional<Op> in_flight;
    Model before;
    for (size_t i = 0; i < nops && !fired; ++i) {
      const Op op = random_op(model);
      const Status s = op.put ? kv->put(op.key, op.value) : kv->remove(op.key);
      if (fired) {
        if (s.code() != Code::kUnavailable) return "op " + std::to_string(i) + " stopped but said " + s.to_string();
        in_flight = op;
        before = model;
        break;
      }
      if (s.ok()) {
        if (!op.put && model.count(op.key) == 0) return "op " + std::to_string(i) + ": removed an absent key";
        model = with_op(model, op);
      } else if (!(s.code() == Code::kResourceExhausted && op.put) &&
                 !(s.code() == Code::kNotFound && !op.put && model.count(op.key) == 0)) {
        return "op " + std::to_string(i) + (op.put ? " put: " : " remove: ") + s.to_string();
      }
      if (rng.chance(0.2)) {  // reads agree with the model while running
        const std::string& k = keys[rng.below(keys.size())];
        auto got = kv->get(k);
        auto it = model.find(k);
        if (it == model.end() ? got.ok() : (!got.ok() || got.value() != it->second)) {
          return "get after op " + std::to_string(i) + " disagrees with the model for key " + hex(k);
        }
      }
    }
    if (!fired) file_.domain->power_fail(fail_seed);  // after the last acknowledged operation
    kv.reset();
    const std::string where = fired ? " (in-flight " + std::string(in_flight->put ? "put" : "remove") + " stopped at " +
                                          std::string(crash_point_name(*fired)) + ")"
                                    : " (failure after the workload)";

    auto opened = PmKv::open(*file_.domain, *file_.region);
    if (!opened.ok()) return "open after the failure" + where + ": " + opened.status().to_string();
    kv = std::move(opened).value();
    const Dump d = dump(*kv);
    if (!d.status.ok()) return "for_each" + where + ": " + d.status.to_string();
    if (!d.duplicate.empty()) return "key " + hex(d.duplicate) + " twice" + where;

    if (!fired) {
      if (d.entries != model) return "recovered state" + where + ": " + diff(d.entries, model);
    } else {
      const Model after = with_op(before, *in_flight);
      const bool is_before = d.entries == before;
      const bool is_after = d.entries == after;
      bool allowed = false;
      switch (*fired) {
        case CrashPoint::kBeforeWrite:
        case CrashPoint::kDataWritten:
        case CrashPoint::kDataDurable:
          allowed = is_before;
          break;  // its commit word was never stored
        case CrashPoint::kCommitWritten:
          allowed = is_before || is_after;
          break;
        case CrashPoint::kCommitDurable:
          allowed = is_after;
          break;
        default:
          break;
      }
      if (!allowed) {
        return "recovered state" + where + " is not allowed: vs before: " + diff(d.entries, before) +
               "; vs after: " + diff(d.entries, after);
      }
      ++stopped_at_[static_cast<size_t>(*fired)];
      applied_ += is_after && !is_before;
      model = d.entries;
    }
    if (kv->size() != model.size()) return "size() " + std::to_string(kv->size()) + " after recovery" + where;
    if (Status v = kv->verify(); !v.ok()) return "verify after recovery" + where + ": " + v.to_string();

    // The recovered store keeps working: more operations, a clean reopen.
    for (size_t i = 0; i < w_.post_ops; ++i) {
      const Op op = random_op(model);
      const Status s = op.put ? kv->put(op.key, op.value) : kv->remove(op.key);
      if (s.ok()) {
        model = with_op(model, op);
      } else if (!(s.code() == Code::kResourceExhausted && op.put) && !(s.code() == Code::kNotFound && !op.put)) {
        return "after recovery" + where + ", op " + std::to_string(i) + ": " + s.to_string();
      }
    }
    kv.reset();
    auto reopened = PmKv::open(*file_.domain, *file_.region);
    if (!reopened.ok()) return "clean reopen" + where + ": " + reopened.status().to_string();
    const Dump again = dump(*reopened.value());
    if (again.entries != model || !again.duplicate.empty()) {
      return "after recovery and more operations" + where + ": " + diff(again.entries, model);
    }
    if (Status v = reopened.value()->verify(); !v.ok()) return "verify after reopen" + where + ": " + v.to_string();
    return {};
  }

  // Runs the seed range; fails the test with each failing seed (up to 10).
  void run_all(uint64_t default_seeds) {
    const SeedRange range = seeds(default_seeds);
    int failures = 0;
    for (uint64_t s = range.first; s < range.first + range.count; ++s) {
      const std::string error = run(s);
      if (error.empty()) continue;
      ADD_FAILURE() << "seed " << s << " (rerun: FERRY_SEED=" << s << "): " << error;
      if (++failures == 10) {
        ADD_FAILURE() << "stopping after 10 failing seeds";
        break;
      }
    }
    std::printf("%llu seeds from %llu; stopped inside an operation at:", static_cast<unsigned long long>(range.count),
                static_cast<unsigned long long>(range.first));
    for (size_t p = 0; p < stopped_at_.size(); ++p) {
      if (stopped_at_[p] != 0) {
        std::printf(" %s %llu", std::string(crash_point_name(static_cast<CrashPoint>(p))).c_str(),
                    static_cast<unsigned long long>(stopped_at_[p]));
      }
    }
    std::printf("; in-flight operation recovered as applied %llu times\n", static_cast<unsigned long long>(applied_));
    if (range.count >= 500) {
      for (CrashPoint p : {CrashPoint::kBeforeWrite, CrashPoint::kDataWritten, CrashPoint::kDataDurable,
                           CrashPoint::kCommitWritten, CrashPoint::kCommitDurable}) {
        EXPECT_GT(stopped_at_[static_cast<size_t>(p)], 0u) << "no seed stopped at " << crash_point_name(p);
      }
    }
  }

 private:
  Workload w_;
  PmFile file_;
  std::array<uint64_t, 8> stopped_at_{};
  uint64_t applied_ = 0;
};

TEST(PmKvCrash, RandomWorkloadSurvivesPowerFailureAtAnyPoint) {
  Runner runner(Workload{}, "crash-default");
  runner.run_all(10000);
}

TEST(PmKvCrash, RandomWorkloadSurvivesPowerFailureUnderEadr) {
  Workload w;
  w.platform.eadr = true;  // commit words are cached stores: durable at once
  Runner runner(w, "crash-eadr");
  runner.run_all(1000);
}

TEST(PmKvCrash, LargeValuesSurvivePowerFailureWhole) {
  Workload w;
  w.region_bytes = 512 << 10;
  w.keys = 6;
  w.max_ops = 16;
  w.post_ops = 4;
  w.max_value_bytes = kPmKvMaxValueBytes;
  w.bucket_counts = {1, 0};
  Runner runner(w, "crash-large");
  runner.run_all(500);
}

// create() over an existing store, failing at each of its points: open()
// then finds the old store whole, no store, or the new empty one -- never a
// mixture.
TEST(PmKvCrash, PowerFailureDuringCreateLeavesOldStoreNoStoreOrNewStore) {
  PmFile f = map_fresh("crash-create", 64 << 10);
  const SeedRange range = seeds(300);
  std::array<int, 3> outcomes{};  // old, none, new
  for (uint64_t s = range.first; s < range.first + range.count; ++s) {
    {
      auto old = PmKv::create(*f.domain, *f.region, {.bucket_count = 5});
      ASSERT_TRUE(old.ok());
      for (int i = 0; i < 20; ++i) ASSERT_TRUE(old.value()->put("old" + std::to_string(i), "value").ok());
    }
    const int target = 1 + static_cast<int>(s % 7);
    int points = 0;
    std::optional<CrashPoint> fired;
    PmKvOptions options;
    options.bucket_count = 9;
    options.crash_hook = [&](CrashPoint p) {
      if (++points != target) return true;
      fired = p;
      f.domain->power_fail(s);
      return false;
    };
    auto created = PmKv::create(*f.domain, *f.region, options);
    ASSERT_TRUE(fired) << "seed " << s << ": create passes 7 points";
    ASSERT_EQ(created.status().code(), Code::kUnavailable);
    auto opened = PmKv::open(*f.domain, *f.region);
    const std::string at =
        "seed " + std::to_string(s) + " (FERRY_SEED), stopped at " + std::string(crash_point_name(*fired));
    if (!opened.ok()) {
      ASSERT_EQ(opened.status().code(), Code::kNotFound) << at << ": " << opened.status().to_string();
      ASSERT_TRUE(*fired != CrashPoint::kBeforeWrite && *fired != CrashPoint::kCommitDurable) << at;
      ++outcomes[1];
      continue;
    }
    const PmKv& kv = *opened.value();
    if (kv.stats().bucket_count == 5) {
      ASSERT_EQ(kv.size(), 20u) << at << ": the old store, whole";
      ASSERT_TRUE(*fired == CrashPoint::kBeforeWrite || *fired == CrashPoint::kRetireWritten) << at;
      ++outcomes[0];
    } else {
      ASSERT_EQ(kv.stats().bucket_count, 9u) << at;
      ASSERT_EQ(kv.size(), 0u) << at << ": the new store, empty";
      ASSERT_TRUE(*fired == CrashPoint::kCommitWritten || *fired == CrashPoint::kCommitDurable) << at;
      ++outcomes[2];
    }
    ASSERT_TRUE(kv.verify().ok()) << at;
  }
  std::printf("old store %d, no store %d, new store %d\n", outcomes[0], outcomes[1], outcomes[2]);
}

}  // namespace
}  // namespace ferry::store::testing
