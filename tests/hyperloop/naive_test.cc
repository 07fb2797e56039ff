// The Naive-RDMA baseline (HyperLoop §6): replica application threads
// receive, apply and forward every operation. These tests run real threads
// on a threaded engine (and on a manual engine the client steps), in both
// modes (event-driven and polling), with DRAM and PM replicas; they also run
// under TSan and ASan. Randomized tests print their seed (FERRY_SEED=<n>
// reruns one).
//
// Also here: the operation header's parser (naive_wire.h), untrusted input.
#include "ferry/hyperloop/naive.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ferry/common/rng.h"
#include "ferry/nic/engine.h"
#include "group_test_util.h"
#include "naive_wire.h"
#include "test_seed.h"

namespace ferry::hyperloop {
namespace {

using detail::kNaiveHeaderBytes;
using detail::NaiveHeader;
using testing::set_word;
using testing::word;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define FERRY_NAIVE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define FERRY_NAIVE_SANITIZED 1
#endif
#endif
#ifdef FERRY_NAIVE_SANITIZED
constexpr int kRandomOps = 150;
constexpr int kImageSeeds = 16;
#else
constexpr int kRandomOps = 400;
constexpr int kImageSeeds = 64;
#endif

std::string mode_name(NaiveMode m) { return m == NaiveMode::kEvent ? "Event" : "Poll"; }

// A threaded engine (or a manual one on the real clock) and a client on it.
struct Fixture {
  explicit Fixture(NaiveMode mode, bool threaded = true, uint64_t op_timeout_ns = 20'000'000'000ULL) {
    nic::EngineOptions eo;
    eo.threaded = threaded;
    engine = std::make_unique<nic::Engine>(eo);
    NaiveOptions no;
    no.mode = mode;
    no.client.op_timeout_ns = op_timeout_ns;
    auto c = NaiveClient::create(*engine, no);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (c.ok()) client = std::move(c).value();
  }
  ~Fixture() {
    // Only manual engines get taps (set from the stepping thread); clear it
    // while nothing steps.
    if (engine && !engine->threaded()) engine->fabric().set_tap(nullptr);
    client.reset();  // stops replica threads, destroys QPs
  }

  GroupId group(uint32_t replicas, pm::Media media = pm::Media::kDram, size_t region_bytes = 64 << 10,
                uint32_t ring_ops = 64, uint32_t window = 8, bool flush_verb = false) {
    return testing::make_group(*client, replicas, media, region_bytes, ring_ops, window, flush_verb);
  }
  std::span<uint8_t> mem(GroupId g) { return client->client_memory(g).value(); }
  uint8_t* replica(GroupId g, uint32_t r) { return testing::replica_data(*client, g, r); }

  std::unique_ptr<nic::Engine> engine;
  std::unique_ptr<NaiveClient> client;
};

void expect_replicas_equal(Fixture& f, GroupId g, const std::vector<std::vector<uint8_t>>& model) {
  testing::expect_replicas_equal(*f.client, g, model);
}

// After power_fail(seed) for every seed tried, replica r of g would hold
// `expected` at [offset, offset + expected.size()).
void expect_durable(Fixture& f, GroupId g, uint32_t r, uint64_t offset, std::span<const uint8_t> expected,
                    const char* what) {
  for (int seed = 0; seed < kImageSeeds; ++seed) {
    if (!testing::survives_power_fail(*f.client, g, r, seed, offset, expected)) {
      ADD_FAILURE() << what << ": lost on replica " << r << " after power_fail(" << seed << ")";
      return;
    }
  }
}

// True if some power_fail seed loses part of [offset, +expected) on replica r.
bool some_failure_loses(Fixture& f, GroupId g, uint32_t r, uint64_t offset, std::span<const uint8_t> expected) {
  for (int seed = 0; seed < kImageSeeds; ++seed) {
    if (!testing::survives_power_fail(*f.client, g, r, seed, offset, expected)) return true;
  }
  return false;
}

class NaiveModes : public ::testing::TestWithParam<NaiveMode> {};
INSTANTIATE_TEST_SUITE_P(Naive, NaiveModes, ::testing::Values(NaiveMode::kEvent, NaiveMode::kPoll),
                         [](const auto& info) { return mode_name(info.param); });

// ---- the four primitives ------------------------------------------------------

TEST_P(NaiveModes, GwriteReplicatesTheClientsBytesToEveryReplica) {
  Fixture f(GetParam());
  const GroupId g = f.group(3);
  auto mem = f.mem(g);
  for (int i = 0; i < 100; ++i) mem[1000 + i] = static_cast<uint8_t>(i + 1);
  ASSERT_TRUE(f.client->gwrite(g, 1000, 100).ok());
  // Several MTU-sized packets, ending at the region's last byte.
  const uint32_t big = 3 * 4096 + 17;
  for (uint32_t i = 0; i < big; ++i) mem[mem.size() - big + i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_TRUE(f.client->gwrite(g, mem.size() - big, big).ok());
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(std::memcmp(f.replica(g, r) + 1000, mem.data() + 1000, 100), 0) << "replica " << r;
    EXPECT_EQ(f.replica(g, r)[999], 0) << "nothing before the range";
    EXPECT_EQ(f.replica(g, r)[1100], 0) << "nothing after the range";
    EXPECT_EQ(std::memcmp(f.replica(g, r) + mem.size() - big, mem.data() + mem.size() - big, big), 0);
  }
  EXPECT_EQ(f.client->system(), GetParam() == NaiveMode::kEvent ? "naive-event" : "naive-poll");
}

TEST_P(NaiveModes, WireBytesAreCountedByTheNicsAndSplitByWhatTheyCarry) {
  Fixture f(GetParam());
  const GroupId g = f.group(3);
  const WireBytes before = f.client->wire_bytes(g).value();
  constexpr int kOps = 20;
  for (int i = 0; i < kOps; ++i) ASSERT_TRUE(f.client->gwrite(g, static_cast<uint64_t>(i) * 1024, 1000).ok());
  const WireBytes w = f.client->wire_bytes(g).value() - before;
  EXPECT_EQ(w.payload, 3u * 1000 * kOps) << "client -> R0 -> R1 -> R2, each hop once";
  EXPECT_EQ(w.metadata, 3u * kNaiveHeaderBytes * kOps) << "one header per hop; the tail's gWRITE ack is empty";
  EXPECT_EQ(w.rearm, 0u);
  EXPECT_EQ(w.loopback_packets, 0u);
  EXPECT_GT(w.headers, 0u);
}

TEST_P(NaiveModes, GcasFollowsTheExecuteMapReturnsTheResultMapAndIsUndone) {
  Fixture f(GetParam());
  const GroupId g = f.group(3);
  constexpr uint64_t kA = 0x1111, kB = 0x2222, kX = 0x9999;
  set_word(f.mem(g).data() + 64, kA);
  ASSERT_TRUE(f.client->gwrite(g, 64, 8).ok());
  // Only replica 1 executes: it diverges (someone else holds the lock there).
  auto only1 = f.client->gcas(g, 64, kA, kX, 0b010);
  ASSERT_TRUE(only1.ok()) << only1.status().to_string();
  EXPECT_EQ(only1->executed, 0b010);
  EXPECT_EQ(only1->succeeded, 0b010);
  EXPECT_EQ(only1->original[0], 0u) << "no result for a replica that did not execute";
  EXPECT_EQ(only1->original[1], kA);
  EXPECT_EQ(word(f.replica(g, 0) + 64), kA);
  EXPECT_EQ(word(f.replica(g, 1) + 64), kX);
  // Everyone executes; replica 1 sees X and fails.
  auto all = f.client->gcas(g, 64, kA, kB, 0b111);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->executed, 0b111);
  EXPECT_EQ(all->succeeded, 0b101);
  EXPECT_EQ(all->original[0], kA);
  EXPECT_EQ(all->original[1], kX);
  EXPECT_EQ(all->original[2], kA);
  EXPECT_EQ(word(f.replica(g, 0) + 64), kB);
  EXPECT_EQ(word(f.replica(g, 1) + 64), kX);
  EXPECT_EQ(word(f.replica(g, 2) + 64), kB);
  // Undo (§4.2): swap old and new on exactly the replicas that succeeded.
  auto undo = f.client->gcas(g, 64, kB, kA, all->succeeded);
  ASSERT_TRUE(undo.ok());
  EXPECT_EQ(undo->executed, 0b101);
  EXPECT_EQ(undo->succeeded, 0b101);
  EXPECT_EQ(undo->original[0], kB);
  EXPECT_EQ(undo->original[1], 0u);
  EXPECT_EQ(undo->original[2], kB);
  EXPECT_EQ(word(f.replica(g, 0) + 64), kA);
  EXPECT_EQ(word(f.replica(g, 1) + 64), kX) << "a replica outside the execute map is untouched";
  EXPECT_EQ(word(f.replica(g, 2) + 64), kA);
  // An empty execute map changes nothing and reports nothing.
  auto none = f.client->gcas(g, 64, kA, kB, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->executed, 0);
  EXPECT_EQ(none->succeeded, 0);
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(none->original[r], 0u);
  EXPECT_EQ(word(f.replica(g, 0) + 64), kA);
}

TEST_P(NaiveModes, GmemcpyCopiesEachReplicasOwnBytes) {
  Fixture f(GetParam());
  const GroupId g = f.group(3);
  auto mem = f.mem(g);
  for (int i = 0; i < 4096; ++i) mem[i] = static_cast<uint8_t>(i * 13 + 1);
  ASSERT_TRUE(f.client->gwrite(g, 0, 4096).ok());
  // Replica 2 diverges at word 8, so a copy shows whose bytes were copied.
  ASSERT_TRUE(f.client->gcas(g, 8, word(mem.data() + 8), 0xABCDEF, 0b100).ok());
  ASSERT_TRUE(f.client->gmemcpy(g, 0, 10000, 4096).ok());
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(std::memcmp(f.replica(g, r) + 10000, f.replica(g, r), 4096), 0) << "replica " << r;
  }
  EXPECT_EQ(word(f.replica(g, 2) + 10008), 0xABCDEFu);
  EXPECT_EQ(word(f.replica(g, 0) + 10008), word(mem.data() + 8));
  // Adjacent (touching, not overlapping) ranges are fine.
  ASSERT_TRUE(f.client->gmemcpy(g, 10000, 14096, 100, /*flush=*/true).ok());
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(std::memcmp(f.replica(g, r) + 14096, f.replica(g, r), 100), 0);
}

// ---- ordering, windows, callbacks ---------------------------------------------------

TEST_P(NaiveModes, AsyncOperationsCompleteInOrderWithCallbacks) {
  Fixture f(GetParam());
  const GroupId g = f.group(3, pm::Media::kDram, 64 << 10, /*ring_ops=*/64, /*window=*/8);
  auto mem = f.mem(g);
  constexpr int kWrites = 48;
  for (int i = 0; i < kWrites; ++i) std::memset(mem.data() + 1024 + i * 256, i + 1, 256);
  std::vector<uint64_t> completed;
  uint32_t most_outstanding = 0;
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(f.client
                    ->gwrite_async(g, 1024 + i * 256, 256, i % 5 == 0,
                                   [&](const OpResult& r) {
                                     EXPECT_TRUE(r.status.ok()) << r.status.to_string();
                                     EXPECT_EQ(r.primitive, Primitive::kWrite);
                                     completed.push_back(r.seq);
                                   })
                    .ok());
    most_outstanding = std::max(most_outstanding, f.client->outstanding(g).value());
  }
  EXPECT_LE(most_outstanding, 8u) << "never more than the window";
  EXPECT_GT(most_outstanding, 1u) << "several operations were in flight";
  ASSERT_TRUE(f.client->drain(g).ok());
  ASSERT_EQ(completed.size(), static_cast<size_t>(kWrites));
  for (int i = 0; i < kWrites; ++i) EXPECT_EQ(completed[i], static_cast<uint64_t>(i)) << "in submission order";
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(std::memcmp(f.replica(g, r) + 1024, mem.data() + 1024, kWrites * 256), 0);

  // A chain of gCAS, each building on the last: every replica applies them
  // in submission order, so every one succeeds.
  constexpr uint64_t kCasOps = 32;
  std::vector<CasResult> cas;
  for (uint64_t i = 0; i < kCasOps; ++i) {
    ASSERT_TRUE(f.client
                    ->gcas_async(g, 512, i, i + 1, 0b111, false,
                                 [&](const OpResult& r) {
                                   EXPECT_TRUE(r.status.ok());
                                   EXPECT_EQ(r.seq, kWrites + cas.size());
                                   cas.push_back(r.cas);
                                 })
                    .ok());
  }
  ASSERT_TRUE(f.client->drain(g).ok());
  ASSERT_EQ(cas.size(), kCasOps);
  for (uint64_t i = 0; i < kCasOps; ++i) {
    EXPECT_EQ(cas[i].succeeded, 0b111) << "gcas " << i;
    EXPECT_EQ(cas[i].original[0], i);
  }
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(word(f.replica(g, r) + 512), kCasOps);
}

TEST_P(NaiveModes, CallbacksMaySubmitAndWaitForMoreOperations) {
  Fixture f(GetParam());
  const GroupId g = f.group(3);
  auto mem = f.mem(g);
  std::memset(mem.data(), 0x5a, 128);
  int nested = 0;
  bool outer_done = false;
  ASSERT_TRUE(f.client
                  ->gwrite_async(g, 0, 64, false,
                                 [&](const OpResult& r) {
                                   EXPECT_TRUE(r.status.ok());
                                   // A synchronous call inside a callback polls re-entrantly.
                                   EXPECT_TRUE(f.client->gwrite(g, 64, 64).ok());
                                   ++nested;
                                   outer_done = true;
                                 })
                  .ok());
  ASSERT_TRUE(f.client->drain(g).ok());
  EXPECT_TRUE(outer_done);
  EXPECT_EQ(nested, 1);
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(std::memcmp(f.replica(g, r), mem.data(), 128), 0);
}

TEST_P(NaiveModes, ReplicaThreadsUseCpuAndSeveralGroupsAreIndependent) {
  Fixture f(GetParam());
  EXPECT_EQ(f.client->replica_cpu_ns(), 0u) << "no replica thread before the first group";
  const GroupId a = f.group(3);
  const GroupId b = f.group(2);
  std::memset(f.mem(a).data(), 0xaa, 64);
  std::memset(f.mem(b).data(), 0xbb, 64);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(f.client->gwrite(a, 0, 64).ok());
    ASSERT_TRUE(f.client->gwrite(b, 0, 64).ok());
  }
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(f.replica(a, r)[10], 0xaa);
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(f.replica(b, r)[10], 0xbb);
  EXPECT_GT(f.client->replica_cpu_ns(), 0u);
}

// ---- group sizes ----------------------------------------------------------------------

struct SizeCase {
  NaiveMode mode;
  uint32_t replicas;
};
class NaiveGroupSizes : public ::testing::TestWithParam<SizeCase> {};
INSTANTIATE_TEST_SUITE_P(Naive, NaiveGroupSizes,
                         ::testing::Values(SizeCase{NaiveMode::kEvent, 1}, SizeCase{NaiveMode::kEvent, 3},
                                           SizeCase{NaiveMode::kEvent, 7}, SizeCase{NaiveMode::kPoll, 1},
                                           SizeCase{NaiveMode::kPoll, 3}, SizeCase{NaiveMode::kPoll, 7}),
                         [](const auto& info) {
                           return mode_name(info.param.mode) + std::to_string(info.param.replicas) + "Replicas";
                         });

TEST_P(NaiveGroupSizes, EveryPrimitiveReachesEveryReplica) {
  const uint32_t n = GetParam().replicas;
  Fixture f(GetParam().mode);
  const GroupId g = f.group(n, pm::Media::kPm);
  auto mem = f.mem(g);
  for (int i = 0; i < 2000; ++i) mem[100 + i] = static_cast<uint8_t>(i * 3 + 7);
  ASSERT_TRUE(f.client->gwrite(g, 100, 2000).ok());
  const uint8_t all = static_cast<uint8_t>((1u << n) - 1);
  auto cas = f.client->gcas(g, 4096, 0, 77, all);
  ASSERT_TRUE(cas.ok()) << cas.status().to_string();
  EXPECT_EQ(cas->executed, all);
  EXPECT_EQ(cas->succeeded, all);
  // The last replica's result travelled the whole chain.
  auto again = f.client->gcas(g, 4096, 77, 78, static_cast<uint8_t>(1u << (n - 1)));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->original[n - 1], 77u);
  ASSERT_TRUE(f.client->gmemcpy(g, 100, 8192, 2000).ok());
  ASSERT_TRUE(f.client->gflush(g).ok());
  for (uint32_t r = 0; r < n; ++r) {
    EXPECT_EQ(std::memcmp(f.replica(g, r) + 100, mem.data() + 100, 2000), 0) << "replica " << r;
    EXPECT_EQ(std::memcmp(f.replica(g, r) + 8192, mem.data() + 100, 2000), 0) << "replica " << r;
    EXPECT_EQ(word(f.replica(g, r) + 4096), r + 1 == n ? 78u : 77u) << "replica " << r;
    expect_durable(f, g, r, 8192, std::span<const uint8_t>(mem.data() + 100, 2000), "gmemcpy after gflush");
  }
}

// ---- random mix against a model -----------------------------------------------------

struct MixCase {
  NaiveMode mode;
  pm::Media media;
};
class NaiveRandomMix : public ::testing::TestWithParam<MixCase> {};
INSTANTIATE_TEST_SUITE_P(
    Naive, NaiveRandomMix,
    ::testing::Values(MixCase{NaiveMode::kEvent, pm::Media::kDram}, MixCase{NaiveMode::kEvent, pm::Media::kPm},
                      MixCase{NaiveMode::kPoll, pm::Media::kDram}, MixCase{NaiveMode::kPoll, pm::Media::kPm}),
    [](const auto& info) { return mode_name(info.param.mode) + (info.param.media == pm::Media::kPm ? "Pm" : "Dram"); });

// Operations are submitted asynchronously with several outstanding. The
// test honours the ordering contract (group.h): it drains before switching
// primitive, and before rewriting client bytes an outstanding gwrite still
// reads. Each replica has its own model (partial execute maps diverge them).
TEST_P(NaiveRandomMix, ReplicasEndByteIdenticalToTheModel) {
  const uint64_t seed = ferry::testing::test_seed(0x5eed0000 + static_cast<uint64_t>(GetParam().mode) * 2 +
                                                  static_cast<uint64_t>(GetParam().media));
  SCOPED_TRACE(ferry::testing::rerun_with(seed));
  Rng rng(seed);
  constexpr uint32_t kReplicas = 3;
  constexpr size_t kRegion = 64 << 10;
  Fixture f(GetParam().mode);
  const GroupId g = f.group(kReplicas, GetParam().media, kRegion, /*ring_ops=*/64, /*window=*/8);
  auto mem = f.mem(g);
  std::vector<std::vector<uint8_t>> model(kReplicas, std::vector<uint8_t>(kRegion, 0));
  expect_replicas_equal(f, g, model);

  struct Range {
    uint64_t offset, size;
  };
  std::vector<Range> writing;  // client bytes outstanding gwrites still read
  std::map<uint64_t, CasResult> expected_cas;
  uint64_t submitted = 0, next_completion = 0;
  Primitive current = Primitive::kFlush;
  auto done = [&](const OpResult& r) {
    EXPECT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.seq, next_completion) << "completions in submission order";
    ++next_completion;
    if (r.primitive == Primitive::kCas) {
      const CasResult& want = expected_cas[r.seq];
      EXPECT_EQ(r.cas.executed, want.executed) << "gcas " << r.seq;
      EXPECT_EQ(r.cas.succeeded, want.succeeded) << "gcas " << r.seq;
      EXPECT_EQ(r.cas.original, want.original) << "gcas " << r.seq;
    }
  };
  auto drain = [&] {
    ASSERT_TRUE(f.client->drain(g).ok());
    writing.clear();
  };
  for (int op = 0; op < kRandomOps; ++op) {
    const uint64_t pick = rng.below(100);
    const Primitive p = pick < 40   ? Primitive::kWrite
                        : pick < 65 ? Primitive::kCas
                        : pick < 90 ? Primitive::kMemcpy
                                    : Primitive::kFlush;
    if (p != current) {
      drain();
      current = p;
    }
    const bool flush = rng.chance(0.2);
    switch (p) {
      case Primitive::kWrite: {
        const uint32_t size = static_cast<uint32_t>(rng.between(1, 3000));
        const uint64_t offset = rng.below(kRegion - size + 1);
        for (const Range& w : writing) {
          if (offset < w.offset + w.size && w.offset < offset + size) {
            drain();
            break;
          }
        }
        for (uint32_t i = 0; i < size; ++i) mem[offset + i] = static_cast<uint8_t>(rng.next());
        for (auto& m : model) std::memcpy(m.data() + offset, mem.data() + offset, size);
        writing.push_back({offset, size});
        ASSERT_TRUE(f.client->gwrite_async(g, offset, size, flush, done).ok());
        break;
      }
      case Primitive::kCas: {
        // A few hot words, which gwrite and gmemcpy also land on.
        const uint64_t offset = 8 * rng.below(32);
        const uint8_t map = static_cast<uint8_t>(rng.below(1u << kReplicas));
        const uint32_t who = static_cast<uint32_t>(rng.below(kReplicas));
        const uint64_t old_value = rng.chance(0.6) ? word(model[who].data() + offset) : rng.below(4);
        const uint64_t new_value = rng.next();
        CasResult want;
        want.executed = map;
        for (uint32_t r = 0; r < kReplicas; ++r) {
          if ((map & (1u << r)) == 0) continue;
          want.original[r] = word(model[r].data() + offset);
          if (want.original[r] == old_value) {
            want.succeeded = static_cast<uint8_t>(want.succeeded | (1u << r));
            set_word(model[r].data() + offset, new_value);
          }
        }
        expected_cas[submitted] = want;
        ASSERT_TRUE(f.client->gcas_async(g, offset, old_value, new_value, map, flush, done).ok());
        break;
      }
      case Primitive::kMemcpy: {
        const uint32_t size = static_cast<uint32_t>(rng.between(1, 3000));
        uint64_t src, dst;
        do {
          src = rng.below(kRegion - size + 1);
          dst = rng.chance(0.3) ? rng.below(256) : rng.below(kRegion - size + 1);
        } while (src < dst + size && dst < src + size);
        for (auto& m : model) std::memcpy(m.data() + dst, m.data() + src, size);
        ASSERT_TRUE(f.client->gmemcpy_async(g, src, dst, size, flush, done).ok());
        break;
      }
      case Primitive::kFlush:
        ASSERT_TRUE(f.client->gflush_async(g, done).ok());
        break;
    }
    ++submitted;
  }
  drain();
  EXPECT_EQ(next_completion, submitted);
  expect_replicas_equal(f, g, model);
  if (GetParam().media == pm::Media::kPm) {
    ASSERT_TRUE(f.client->gflush(g).ok());
    for (uint32_t r = 0; r < kReplicas; ++r) expect_durable(f, g, r, 0, model[r], "the whole region after gflush");
  }
}

// ---- durability ---------------------------------------------------------------------------

struct FlushCase {
  NaiveMode mode;
  bool flush_verb;
};
class NaiveDurability : public ::testing::TestWithParam<FlushCase> {};
INSTANTIATE_TEST_SUITE_P(Naive, NaiveDurability,
                         ::testing::Values(FlushCase{NaiveMode::kEvent, false}, FlushCase{NaiveMode::kEvent, true},
                                           FlushCase{NaiveMode::kPoll, false}, FlushCase{NaiveMode::kPoll, true}),
                         [](const auto& info) {
                           return mode_name(info.param.mode) + (info.param.flush_verb ? "FlushVerb" : "ZeroByteRead");
                         });

TEST_P(NaiveDurability, FlushedOperationsSurviveEveryPowerFailureOnEveryReplica) {
  constexpr uint32_t kReplicas = 3;
  Fixture f(GetParam().mode);
  const GroupId g = f.group(kReplicas, pm::Media::kPm, 64 << 10, 64, 8, GetParam().flush_verb);
  auto mem = f.mem(g);
  auto fill = [&](uint64_t offset, uint32_t size, uint8_t salt) {
    for (uint32_t i = 0; i < size; ++i) mem[offset + i] = static_cast<uint8_t>(i * 31 + salt);
    return std::vector<uint8_t>(mem.begin() + offset, mem.begin() + offset + size);
  };

  // gwrite with flush: durable everywhere at completion.
  const auto flushed = fill(1000, 3000, 1);
  ASSERT_TRUE(f.client->gwrite(g, 1000, 3000, /*flush=*/true).ok());
  for (uint32_t r = 0; r < kReplicas; ++r) expect_durable(f, g, r, 1000, flushed, "gwrite with flush");

  // Without flush the model may lose it (so the checks above can fail)...
  const auto unflushed = fill(8192, 4096, 2);
  ASSERT_TRUE(f.client->gwrite(g, 8192, 4096).ok());
  for (uint32_t r = 0; r < kReplicas; ++r) {
    EXPECT_TRUE(some_failure_loses(f, g, r, 8192, unflushed)) << "replica " << r << ": an unflushed gwrite is at risk";
  }

  // ...gcas and gmemcpy with flush are durable at completion; the gmemcpy
  // copies bytes that themselves were never flushed.
  ASSERT_TRUE(f.client->gcas(g, 16384, 0, 0xFEEDFACE, 0b111, /*flush=*/true).ok());
  const uint64_t cas_value = 0xFEEDFACE;
  for (uint32_t r = 0; r < kReplicas; ++r) {
    expect_durable(f, g, r, 16384, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&cas_value), 8),
                   "gcas with flush");
  }
  ASSERT_TRUE(f.client->gmemcpy(g, 8192, 20000, 4096, /*flush=*/true).ok());
  for (uint32_t r = 0; r < kReplicas; ++r) expect_durable(f, g, r, 20000, unflushed, "gmemcpy with flush");

  // A gcas with flush on a word an unflushed gwrite just wrote.
  set_word(mem.data() + 30000, 5);
  ASSERT_TRUE(f.client->gwrite(g, 30000, 8).ok());
  ASSERT_TRUE(f.client->gcas(g, 30000, 5, 6, 0b111, /*flush=*/true).ok());
  const uint64_t six = 6;
  for (uint32_t r = 0; r < kReplicas; ++r) {
    expect_durable(f, g, r, 30000, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&six), 8),
                   "gcas with flush over an unflushed gwrite");
  }

  // Unflushed gwrite, gcas and gmemcpy, then one gflush: the whole region is
  // durable as it is visible, on every replica.
  fill(40000, 2000, 3);
  ASSERT_TRUE(f.client->gwrite(g, 40000, 2000).ok());
  ASSERT_TRUE(f.client->gcas(g, 48000, 0, 42, 0b101).ok());
  ASSERT_TRUE(f.client->gmemcpy(g, 40000, 50000, 2000).ok());
  ASSERT_TRUE(f.client->gflush(g).ok());
  for (uint32_t r = 0; r < kReplicas; ++r) {
    const uint8_t* visible = f.replica(g, r);
    const std::vector<uint8_t> all(visible, visible + (64 << 10));
    expect_durable(f, g, r, 0, all, "everything after gflush");
    EXPECT_EQ(word(visible + 48000), r == 1 ? 0u : 42u);
  }
}

TEST_P(NaiveModes, GflushPersistsEvenWhenTheDirtyRangeListOverflows) {
  Fixture f(GetParam());
  const GroupId g = f.group(2, pm::Media::kPm);
  // More separate CPU-changed words than the replica tracks one by one.
  for (uint64_t i = 0; i < 100; ++i) ASSERT_TRUE(f.client->gcas(g, 256 * i, 0, i + 1, 0b11).ok());
  ASSERT_TRUE(f.client->gflush(g).ok());
  for (uint32_t r = 0; r < 2; ++r) {
    const uint8_t* visible = f.replica(g, r);
    expect_durable(f, g, r, 0, std::vector<uint8_t>(visible, visible + (64 << 10)), "100 gcas after gflush");
  }
}

// ---- errors ----------------------------------------------------------------------------------

TEST(Naive, BadArgumentsAreRejectedWithTheRightCodesAndNothingIsSent) {
  Fixture f(NaiveMode::kEvent);
  const GroupId g = f.group(3);
  auto never = [](const OpResult&) { FAIL() << "no callback for a rejected operation"; };
  auto unknown = f.client->gwrite(7, 0, 8);
  EXPECT_EQ(unknown.code(), Code::kNotFound);
  EXPECT_NE(unknown.message().find("unknown group 7"), std::string::npos) << unknown.message();
  EXPECT_EQ(f.client->gcas(7, 0, 0, 1, 1).status().code(), Code::kNotFound);
  EXPECT_EQ(f.client->gmemcpy(7, 0, 64, 8).code(), Code::kNotFound);
  EXPECT_EQ(f.client->gflush(7).code(), Code::kNotFound);
  EXPECT_EQ(f.client->client_memory(7).status().code(), Code::kNotFound);
  EXPECT_EQ(f.client->replica(7, 0).status().code(), Code::kNotFound);
  EXPECT_EQ(f.client->group_options(7).status().code(), Code::kNotFound);
  EXPECT_EQ(f.client->outstanding(7).status().code(), Code::kNotFound);
  EXPECT_EQ(f.client->drain(7).code(), Code::kNotFound);

  EXPECT_EQ(f.client->gwrite(g, 65536 - 4, 8).code(), Code::kOutOfRange);
  EXPECT_EQ(f.client->gwrite(g, ~uint64_t{0} - 2, 8).code(), Code::kOutOfRange);
  EXPECT_EQ(f.client->gwrite(g, 0, 0).code(), Code::kInvalidArgument) << "size 0";
  auto misaligned = f.client->gcas(g, 12, 0, 1, 0b111).status();
  EXPECT_EQ(misaligned.code(), Code::kInvalidArgument);
  EXPECT_NE(misaligned.message().find("aligned"), std::string::npos) << misaligned.message();
  EXPECT_EQ(f.client->gcas(g, 65536, 0, 1, 0b111).status().code(), Code::kOutOfRange);
  EXPECT_EQ(f.client->gcas(g, 0, 0, 1, 0b1000).status().code(), Code::kInvalidArgument) << "replica 3 of 3";
  EXPECT_EQ(f.client->gcas(g, 0, 0, 1, 0x80).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(f.client->gmemcpy(g, 0, 100, 0).code(), Code::kInvalidArgument) << "size 0";
  EXPECT_EQ(f.client->gmemcpy(g, 0, 100, 200).code(), Code::kInvalidArgument) << "overlap";
  EXPECT_EQ(f.client->gmemcpy(g, 0, 65000, 1000).code(), Code::kOutOfRange) << "destination";
  EXPECT_EQ(f.client->gmemcpy(g, 65000, 0, 1000).code(), Code::kOutOfRange) << "source";
  EXPECT_EQ(f.client->gwrite_async(g, 65536, 1, false, never).code(), Code::kOutOfRange);
  EXPECT_EQ(f.client->gcas_async(g, 4, 0, 1, 1, false, never).code(), Code::kInvalidArgument);
  EXPECT_EQ(f.client->outstanding(g).value(), 0u);
  EXPECT_EQ(f.client->replica(g, 3).status().code(), Code::kOutOfRange);
  // The group still works, and nothing rejected reached a replica.
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(word(f.replica(g, r)), 0u);
  EXPECT_TRUE(f.client->gwrite(g, 0, 8).ok());
}

TEST(Naive, BadOptionsAreRejected) {
  Fixture f(NaiveMode::kPoll);
  GroupOptions o;
  o.region_bytes = 64 << 10;
  o.replicas = 0;
  EXPECT_EQ(f.client->create_group(o).status().code(), Code::kInvalidArgument);
  o.replicas = 8;
  EXPECT_EQ(f.client->create_group(o).status().code(), Code::kInvalidArgument);
  o.replicas = 3;
  o.ring_ops = 16;
  o.window = 5;
  EXPECT_EQ(f.client->create_group(o).status().code(), Code::kInvalidArgument);
  o.window = 4;
  o.media = pm::Media::kPm;
  o.pm_dir = "/nonexistent/ferry";
  auto bad = f.client->create_group(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/nonexistent/ferry"), std::string::npos) << bad.status().message();
  EXPECT_EQ(f.client->replica_cpu_ns(), 0u) << "no thread started for a group that failed to build";

  // Replica threads run in real time: a simulated clock is refused.
  FakeClock clock;
  nic::EngineOptions eo;
  eo.threaded = false;
  eo.clock = &clock;
  nic::Engine simulated(eo);
  EXPECT_EQ(NaiveClient::create(simulated).status().code(), Code::kInvalidArgument);
  nic::Engine engine;
  NaiveOptions no;
  no.replica_cpu = 100000;
  EXPECT_EQ(NaiveClient::create(engine, no).status().code(), Code::kInvalidArgument);
}

// ---- a manual engine the client steps --------------------------------------------------

TEST_P(NaiveModes, WorksOnAManualEngineTheClientSteps) {
  Fixture f(GetParam(), /*threaded=*/false);
  const GroupId g = f.group(3, pm::Media::kPm);
  auto mem = f.mem(g);
  std::memset(mem.data(), 0x3c, 1000);
  ASSERT_TRUE(f.client->gwrite(g, 0, 1000, /*flush=*/true).ok());
  auto cas = f.client->gcas(g, 2048, 0, 9, 0b111);
  ASSERT_TRUE(cas.ok()) << cas.status().to_string();
  EXPECT_EQ(cas->succeeded, 0b111);
  ASSERT_TRUE(f.client->gmemcpy(g, 0, 4096, 1000).ok());
  ASSERT_TRUE(f.client->gflush(g).ok());
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(std::memcmp(f.replica(g, r) + 4096, mem.data(), 1000), 0);
    EXPECT_EQ(word(f.replica(g, r) + 2048), 9u);
    expect_durable(f, g, r, 4096, std::span<const uint8_t>(mem.data(), 1000), "gmemcpy after gflush");
  }
}

// A replica gets a header with an execute-map bit beyond the chain (as from
// a buggy or hostile upstream): it drops it without touching its memory or
// forwarding it, and keeps serving. The client's operation never completes;
// the next acknowledgment arrives out of order and fails the group.
TEST_P(NaiveModes, AMalformedHeaderIsDroppedAndTheReplicaKeepsServing) {
  // The lost gcas waits out this timeout; it must still leave the replica
  // threads (real time, slower under sanitizers) ample room for the rest.
  Fixture f(GetParam(), /*threaded=*/false, /*op_timeout_ns=*/1'000'000'000);
  const GroupId g = f.group(2);
  auto mem = f.mem(g);
  set_word(mem.data() + 64, 5);
  ASSERT_TRUE(f.client->gwrite(g, 64, 8).ok());

  // The tap runs on the stepping thread (this one); the injected copy's
  // payload must outlive its delivery.
  static uint8_t corrupt[kNaiveHeaderBytes];
  bool corrupted = false;
  nic::Fabric& fabric = f.engine->fabric();
  fabric.set_tap([&](const nic::Packet& p) {
    if (corrupted || p.payload_len != kNaiveHeaderBytes) return false;
    std::memcpy(corrupt, p.payload, kNaiveHeaderBytes);
    corrupt[36] = 0x80;  // execute map: replica 7 of 2
    nic::Packet copy = p;
    copy.payload = corrupt;
    fabric.inject(copy);
    corrupted = true;
    return true;
  });
  auto lost = f.client->gcas(g, 64, 5, 6, 0b11);
  EXPECT_EQ(lost.status().code(), Code::kTimedOut) << lost.status().to_string();
  EXPECT_TRUE(corrupted);
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(word(f.replica(g, r) + 64), 5u) << "replica " << r << " untouched";

  // Replica 0 still serves: the next gwrite reaches both replicas...
  std::memset(mem.data() + 1000, 0x77, 100);
  const Status next = f.client->gwrite(g, 1000, 100);
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(f.replica(g, r)[1050], 0x77) << "replica " << r;
  // ...but its acknowledgment is not for the operation the client waits
  // for, so the group is failed and says so.
  EXPECT_EQ(next.code(), Code::kDataLoss) << next.to_string();
  EXPECT_EQ(f.client->outstanding(g).value(), 0u) << "every pending operation got its callback";
  EXPECT_EQ(f.client->gwrite(g, 0, 8).code(), Code::kFailedPrecondition);
}

// The network to the chain goes dark: the client's send exhausts its
// retries, every pending operation fails with that reason, and the group
// refuses further work.
TEST(Naive, ATransportFailureFailsThePendingOperationsAndTheGroup) {
  Fixture f(NaiveMode::kEvent, /*threaded=*/false, /*op_timeout_ns=*/10'000'000'000ULL);
  const GroupId g = f.group(2);
  ASSERT_TRUE(f.client->gwrite(g, 0, 8).ok());
  f.engine->fabric().set_tap([](const nic::Packet&) { return true; });  // everything is lost
  std::vector<Status> results;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        f.client->gwrite_async(g, 64 * i, 64, false, [&](const OpResult& r) { results.push_back(r.status); }).ok());
  }
  ASSERT_TRUE(f.client->drain(g).ok());
  ASSERT_EQ(results.size(), 3u);
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), Code::kUnavailable) << s.to_string();
    EXPECT_NE(s.message().find("RETRY"), std::string::npos) << s.to_string();
  }
  const Status after = f.client->gwrite(g, 0, 8);
  EXPECT_EQ(after.code(), Code::kFailedPrecondition);
  EXPECT_NE(after.message().find("failed earlier"), std::string::npos) << after.message();
}

// ---- the operation header ------------------------------------------------------------------

NaiveHeader valid(Primitive p) {
  NaiveHeader h;
  h.primitive = p;
  h.replicas = 3;
  h.seq = 0x0123456789ABCDEFULL;
  switch (p) {
    case Primitive::kWrite:
      h.offset = 100;
      h.size = 3000;
      break;
    case Primitive::kCas:
      h.offset = 4096;
      h.size = 8;
      h.execute_map = 0b101;
      h.old_value = 0xAAAAAAAAAAAAAAAAULL;
      h.new_value = 0x5555555555555555ULL;
      h.results[0] = 0xAAAAAAAAAAAAAAAAULL;
      h.results[2] = 7;
      break;
    case Primitive::kMemcpy:
      h.src_offset = 0;
      h.offset = 8192;
      h.size = 4096;
      h.flush = true;
      break;
    case Primitive::kFlush:
      h.flush = true;
      break;
  }
  return h;
}

std::vector<uint8_t> encoded(const NaiveHeader& h) {
  std::vector<uint8_t> b(kNaiveHeaderBytes);
  detail::encode_naive_header(h, b);
  return b;
}

constexpr size_t kRegion = 64 << 10;

TEST(NaiveHeader, EveryPrimitiveRoundTrips) {
  for (Primitive p : {Primitive::kWrite, Primitive::kCas, Primitive::kMemcpy, Primitive::kFlush}) {
    SCOPED_TRACE(std::string(primitive_name(p)));
    const NaiveHeader h = valid(p);
    const auto bytes = encoded(h);
    auto parsed = detail::parse_naive_header(bytes, kRegion);
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    EXPECT_TRUE(parsed.value() == h);
    EXPECT_EQ(encoded(parsed.value()), bytes);
  }
  // Little-endian on the wire, whatever the host.
  const auto b = encoded(valid(Primitive::kCas));
  EXPECT_EQ(b[0], 0x46);  // magic "FRNV"
  EXPECT_EQ(b[8], 0xEF);  // seq, low byte first
  EXPECT_EQ(b[5], 1);     // gcas
  const auto results =
      detail::decode_naive_results(std::span<const uint8_t>(b).subspan(detail::kNaiveResultsOffset), 3);
  EXPECT_EQ(results[0], 0xAAAAAAAAAAAAAAAAULL);
  EXPECT_EQ(results[2], 7u);
}

TEST(NaiveHeader, BoundaryValuesAreAccepted) {
  NaiveHeader h = valid(Primitive::kWrite);
  h.offset = kRegion - 1;
  h.size = 1;
  h.replicas = 7;
  EXPECT_TRUE(detail::parse_naive_header(encoded(h), kRegion).ok());
  h = valid(Primitive::kCas);
  h.offset = kRegion - 8;
  h.replicas = 7;
  h.execute_map = 0x7F;
  h.results = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_TRUE(detail::parse_naive_header(encoded(h), kRegion).ok());
  h.execute_map = 0;
  h.results = {};
  EXPECT_TRUE(detail::parse_naive_header(encoded(h), kRegion).ok()) << "an empty execute map is a no-op, not an error";
}

TEST(NaiveHeader, EachInvalidFieldIsRejected) {
  struct Case {
    const char* what;
    Primitive base;
    std::function<void(std::vector<uint8_t>&)> corrupt;
  };
  auto set64 = [](std::vector<uint8_t>& b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  auto set32 = [](std::vector<uint8_t>& b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  const std::vector<Case> cases = {
      {"magic", Primitive::kWrite, [](auto& b) { b[0] ^= 1; }},
      {"version", Primitive::kWrite, [](auto& b) { b[4] = 2; }},
      {"primitive", Primitive::kWrite, [](auto& b) { b[5] = 4; }},
      {"flag bits", Primitive::kWrite, [](auto& b) { b[6] = 2; }},
      {"replicas 0", Primitive::kWrite, [](auto& b) { b[7] = 0; }},
      {"replicas 8", Primitive::kWrite, [](auto& b) { b[7] = 8; }},
      {"reserved", Primitive::kWrite, [](auto& b) { b[38] = 1; }},
      {"gwrite size 0", Primitive::kWrite, [&](auto& b) { set32(b, 32, 0); }},
      {"gwrite past the end", Primitive::kWrite, [&](auto& b) { set64(b, 16, kRegion - 100); }},
      {"gwrite offset wraps", Primitive::kWrite, [&](auto& b) { set64(b, 16, ~uint64_t{0} - 10); }},
      {"gwrite with a source", Primitive::kWrite, [&](auto& b) { set64(b, 24, 8); }},
      {"gwrite with an execute map", Primitive::kWrite, [](auto& b) { b[36] = 1; }},
      {"gwrite with compare values", Primitive::kWrite, [&](auto& b) { set64(b, 40, 1); }},
      {"gwrite with a result", Primitive::kWrite, [&](auto& b) { set64(b, 56, 1); }},
      {"gcas misaligned", Primitive::kCas, [&](auto& b) { set64(b, 16, 4100); }},
      {"gcas past the end", Primitive::kCas, [&](auto& b) { set64(b, 16, kRegion); }},
      {"gcas size", Primitive::kCas, [&](auto& b) { set32(b, 32, 16); }},
      {"gcas execute map beyond replicas", Primitive::kCas, [](auto& b) { b[36] = 0b1001; }},
      {"gcas result of a non-executing replica", Primitive::kCas, [&](auto& b) { set64(b, 64, 1); }},
      {"gcas result beyond replicas", Primitive::kCas, [&](auto& b) { set64(b, 56 + 8 * 6, 1); }},
      {"gmemcpy source past the end", Primitive::kMemcpy, [&](auto& b) { set64(b, 24, kRegion - 10); }},
      {"gmemcpy destination past the end", Primitive::kMemcpy, [&](auto& b) { set64(b, 16, kRegion - 10); }},
      {"gmemcpy overlap", Primitive::kMemcpy, [&](auto& b) { set64(b, 24, 8192 + 4095); }},
      {"gmemcpy size 0", Primitive::kMemcpy, [&](auto& b) { set32(b, 32, 0); }},
      {"gflush without the flush flag", Primitive::kFlush, [](auto& b) { b[6] = 0; }},
      {"gflush with an offset", Primitive::kFlush, [&](auto& b) { set64(b, 16, 64); }},
      {"gflush with a size", Primitive::kFlush, [&](auto& b) { set32(b, 32, 1); }},
  };
  for (const Case& c : cases) {
    auto bytes = encoded(valid(c.base));
    ASSERT_TRUE(detail::parse_naive_header(bytes, kRegion).ok()) << c.what << ": the base header is valid";
    c.corrupt(bytes);
    auto parsed = detail::parse_naive_header(bytes, kRegion);
    EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument) << c.what;
  }
  // Length: exactly one header.
  const auto good = encoded(valid(Primitive::kWrite));
  EXPECT_FALSE(detail::parse_naive_header(std::span<const uint8_t>(good).first(kNaiveHeaderBytes - 1), kRegion).ok());
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_FALSE(detail::parse_naive_header(longer, kRegion).ok());
  EXPECT_FALSE(detail::parse_naive_header({}, kRegion).ok());
  // The same header against a smaller region.
  EXPECT_FALSE(detail::parse_naive_header(good, 3000).ok());
}

}  // namespace
}  // namespace ferry::hyperloop
