// The persistence model loses exactly what the platform could lose
// (issue 3, item 5; docs/persistence.md). Randomized checks print their
// seeds' range; each power failure is reproducible from its seed.
#include "pm_test_util.h"

namespace ferry::pm::testing {
namespace {

using namespace ferry::nic;

TEST_F(PmTest, AcknowledgedWriteWithoutReadOrFlushIsLostUnderSomeSeed) {
  build({});
  remote_write(4096, 256, 7);
  const int kept = count_survivals(4096, 256, 7, 200);
  EXPECT_LT(kept, 200) << "an ACK only means the NIC has the data; it can still be lost";
  EXPECT_GT(kept, 0) << "...or not: the adversary keeps a random subset";
  EXPECT_EQ(domain_->nic_buffer_bytes(), 256u);
}

TEST_F(PmTest, WriteFollowedByCompletedReadIsNeverLostDdioOff) {
  build({});
  remote_write(4096, 256, 11);
  remote_read0();
  EXPECT_EQ(count_survivals(4096, 256, 11, kManySeeds), kManySeeds) << "seeds 0.." << kManySeeds - 1;
}

TEST_F(PmTest, WriteFollowedByCompletedFlushIsNeverLostDdioOff) {
  build({});
  remote_write(8192, 512, 12);
  remote_flush(8192, 512, /*persistent=*/true);
  EXPECT_EQ(count_survivals(8192, 512, 12, kManySeeds), kManySeeds) << "seeds 0.." << kManySeeds - 1;
}

TEST_F(PmTest, WriteFollowedByCompletedReadIsNeverLostWithDdioUnderEadr) {
  build({.ddio = true, .eadr = true});
  remote_write(4096, 256, 13);
  remote_read0();
  EXPECT_EQ(count_survivals(4096, 256, 13, kManySeeds), kManySeeds) << "seeds 0.." << kManySeeds - 1;
}

TEST_F(PmTest, DdioWithoutEadrCanLoseAReadFlushedWriteUntilTheCpuPersistsIt) {
  build({.ddio = true, .eadr = false});
  remote_write(4096, 256, 14);
  remote_read0();  // drained from the NIC -- into the CPU cache
  EXPECT_LT(count_survivals(4096, 256, 14, 200), 200) << "the READ only moved it into the volatile cache";
  pm_->persist(pm_->data() + 4096, 256);
  EXPECT_EQ(count_survivals(4096, 256, 14, kManySeeds), kManySeeds) << "after a CPU persist of the range";
}

TEST_F(PmTest, PersistenceFlushIsDurableEvenWithDdioWithoutEadr) {
  build({.ddio = true, .eadr = false});
  remote_write(4096, 256, 15);
  remote_flush(4096, 256, /*persistent=*/false);
  EXPECT_LT(count_survivals(4096, 256, 15, 200), 200) << "global-visibility FLUSH: only in the cache";
  remote_flush(4096, 256, /*persistent=*/true);
  EXPECT_EQ(count_survivals(4096, 256, 15, kManySeeds), kManySeeds) << "persistence FLUSH";
}

TEST_F(PmTest, CpuStoreWithoutPersistCanBeLostAndWithPersistNever) {
  build({});
  for (int i = 0; i < 128; ++i) pm_->data()[100 + i] = static_cast<uint8_t>(21 + i * 3);  // plain stores
  EXPECT_LT(count_survivals(100, 128, 21, 200), 200);
  pm_->persist(pm_->data() + 100, 128);
  EXPECT_EQ(count_survivals(100, 128, 21, kManySeeds), kManySeeds);
}

TEST_F(PmTest, StorePersistIsDurableOnReturnAndCountsAsACachedStore) {
  build({});
  uint8_t bytes[128];
  for (int i = 0; i < 128; ++i) bytes[i] = static_cast<uint8_t>(21 + i * 3);
  const uint64_t rfo = pm_->counters().cpu_rfo;
  pm_->store_persist(pm_->data() + 100, bytes, sizeof(bytes));
  EXPECT_EQ(count_survivals(100, 128, 21, kManySeeds), kManySeeds);
  EXPECT_EQ(pm_->counters().cpu_rfo - rfo, 3u) << "bytes 100..227 span three lines, each read for ownership";
  // Over an acknowledged NIC write still in the NIC's buffer: the NIC's bytes
  // around the CPU's survive too (the CPU could only build on them once in memory).
  remote_write(4096, 256, 7);
  const uint8_t ee[16] = {0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE,
                          0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE};
  pm_->store_persist(pm_->data() + 4096 + 64, ee, sizeof(ee));
  for (int s = 0; s < 500; ++s) {
    const auto image = domain_->image_after_power_fail(*pm_, s);
    for (int i = 0; i < 256; ++i) {
      const uint8_t want = (i >= 64 && i < 80) ? 0xEE : static_cast<uint8_t>(7 + i * 3);
      ASSERT_EQ(image[4096 + i], want) << "seed " << s << " byte " << i;
    }
  }
}

TEST_F(PmTest, CpuPersistOverAnUnflushedNicWriteKeepsTheCpusBytesAndTheNics) {
  // A replica CPU updates bytes a remote WRITE delivered (e.g. a lock word)
  // and persists them. The CPU could only see those bytes once the NIC had
  // delivered them, so the NIC's write is in memory too, and must not land
  // later on top of the CPU's newer value.
  for (const bool ddio : {false, true}) {
    SCOPED_TRACE(ddio ? "DDIO on" : "DDIO off");
    build({.ddio = ddio});
    remote_write(4096, 256, 7);  // acknowledged, still in the NIC buffer
    for (int i = 0; i < 16; ++i) pm_->data()[4096 + 64 + i] = 0xEE;
    pm_->persist(pm_->data() + 4096, 256);
    remote_read0();  // drains whatever is left; must not undo the CPU's bytes
    for (int s = 0; s < 500; ++s) {
      const auto image = domain_->image_after_power_fail(*pm_, s);
      for (int i = 0; i < 256; ++i) {
        const uint8_t want = (i >= 64 && i < 80) ? 0xEE : static_cast<uint8_t>(7 + i * 3);
        ASSERT_EQ(image[4096 + i], want) << "seed " << s << " byte " << i;
      }
    }
    TearDown();
  }
}

TEST_F(PmTest, FenceDoesNotRollBackANicWriteNewerThanTheClwb) {
  // clwb takes the line's bytes when it runs; a NIC write that lands on the
  // line afterwards and is made durable is newer, so neither the fence nor a
  // power failure before it may bring the older bytes back.
  for (const bool ddio : {false, true}) {
    SCOPED_TRACE(ddio ? "DDIO on, persistence FLUSH" : "DDIO off, READ");
    build({.ddio = ddio});
    pm_->flush(pm_->data() + 4096, 64);  // write-back of the old bytes, waiting for the fence
    remote_write(4096, 64, 17);
    if (ddio) {
      remote_flush(4096, 64, /*persistent=*/true);
    } else {
      remote_read0();
    }
    EXPECT_EQ(count_survivals(4096, 64, 17, kManySeeds), kManySeeds) << "before the fence; seeds 0.." << kManySeeds - 1;
    pm_->drain();
    EXPECT_EQ(count_survivals(4096, 64, 17, kManySeeds), kManySeeds) << "after the fence; seeds 0.." << kManySeeds - 1;
    TearDown();
  }
}

TEST_F(PmTest, PendingClwbDoesNotTearABufferedNicWriteAtPowerFail) {
  // The NIC write is still in the buffer when the power fails: whatever part
  // of it arrived is newer than the pending write-back of its lines, so it
  // survives as a prefix of whole 64 B chunks, never mixed per word.
  build({});
  pm_->flush(pm_->data() + 4096, 256);  // write-back of the old bytes (zeros), not fenced
  remote_write(4096, 256, 19);
  int cut = 0;
  for (int s = 0; s < 2000; ++s) {
    const auto image = domain_->image_after_power_fail(*pm_, s);
    bool earlier_new = true;
    int chunks_new = 0;
    for (int c = 0; c < 4; ++c) {
      bool is_new = true, is_old = true;
      for (int i = c * 64; i < c * 64 + 64; ++i) {
        is_new &= image[4096 + i] == static_cast<uint8_t>(19 + i * 3);
        is_old &= image[4096 + i] == 0;
      }
      ASSERT_TRUE(is_new || is_old) << "seed " << s << ": chunk " << c << " mixes old and new bytes";
      ASSERT_TRUE(!is_new || earlier_new) << "seed " << s << ": chunk " << c << " arrived after a lost one";
      earlier_new = is_new;
      chunks_new += is_new;
    }
    cut += chunks_new > 0 && chunks_new < 4;
  }
  EXPECT_GT(cut, 0) << "some of seeds 0..1999 cut the write";
}

TEST_F(PmTest, UnpersistedCpuStoresAreLostPerEightByteWord) {
  build({});
  for (int i = 0; i < 64; ++i) pm_->data()[i] = 0xAA;
  bool mixed = false;
  for (int s = 0; s < 200; ++s) {
    const auto image = domain_->image_after_power_fail(*pm_, s);
    for (int w = 0; w < 64; w += 8) {
      const bool all_new = std::all_of(image.begin() + w, image.begin() + w + 8, [](uint8_t b) { return b == 0xAA; });
      const bool all_old = std::all_of(image.begin() + w, image.begin() + w + 8, [](uint8_t b) { return b == 0; });
      ASSERT_TRUE(all_new || all_old) << "seed " << s << " tore an 8-byte word";
    }
    mixed |= image[0] != image[8];
  }
  EXPECT_TRUE(mixed) << "words of one line are decided independently";
}

TEST_F(PmTest, UnderEadrCpuStoresSurviveWithoutPersist) {
  build({.eadr = true});
  for (int i = 0; i < 128; ++i) pm_->data()[i] = static_cast<uint8_t>(31 + i * 3);
  EXPECT_EQ(count_survivals(0, 128, 31, 1000), 1000);
}

TEST_F(PmTest, TornDmaWriteLosesOnlyASuffixOfSixtyFourByteChunks) {
  build({});
  const size_t off = 8192 + 8;  // unaligned: its first chunk is short
  remote_write(off, 4000, 41);  // one packet
  int torn = 0;
  for (int s = 0; s < 2000; ++s) {
    const auto image = domain_->image_after_power_fail(*pm_, s);
    size_t prefix = 0;
    while (prefix < 4000 && image[off + prefix] == static_cast<uint8_t>(41 + prefix * 3)) ++prefix;
    for (size_t i = prefix; i < 4000; ++i) {
      ASSERT_EQ(image[off + i], 0) << "seed " << s << ": byte " << i << " after a lost one survived";
    }
    if (prefix != 0 && prefix != 4000) {
      ++torn;
      ASSERT_EQ((off + prefix) % 64, 0u) << "seed " << s << ": the write was cut inside a 64 B chunk";
    }
  }
  EXPECT_GT(torn, 0) << "some seeds tear the write";
}

TEST_F(PmTest, MultiPacketWriteSurvivesAsAPrefixInAddressOrder) {
  build({});
  remote_write(0, 60000, 51);  // 15 packets of 4 KiB in the NIC buffer
  int torn = 0;
  for (int s = 0; s < 2000; ++s) {
    const auto image = domain_->image_after_power_fail(*pm_, s);
    size_t prefix = 0;
    while (prefix < 60000 && image[prefix] == static_cast<uint8_t>(51 + prefix * 3)) ++prefix;
    for (size_t i = prefix; i < 60000; ++i) ASSERT_EQ(image[i], 0) << "seed " << s;
    ASSERT_TRUE(prefix == 60000 || prefix % 64 == 0) << "seed " << s;
    torn += prefix != 0 && prefix != 60000;
  }
  EXPECT_GT(torn, 0) << "some of seeds 0..1999 cut the write";
}

TEST_F(PmTest, UnalignedMultiPacketWriteCanTearInsideALineAtAPacketBoundary) {
  // Each packet is its own DMA: a message that starts off a 64 B line and
  // spans packets has packet boundaries inside lines, and a power failure
  // between two packets' DMAs leaves such a line half new, half old. Durable
  // formats must not assume a 64 B line of one message is all-or-nothing.
  build({}, /*path_mtu=*/256);
  const size_t off = 4096 + 32;
  const size_t len = 8 * 256;
  remote_write(off, len, 81);
  int inside_line = 0;
  for (int s = 0; s < 2000; ++s) {
    const auto image = domain_->image_after_power_fail(*pm_, s);
    size_t prefix = 0;
    while (prefix < len && image[off + prefix] == static_cast<uint8_t>(81 + prefix * 3)) ++prefix;
    for (size_t i = prefix; i < len; ++i) ASSERT_EQ(image[off + i], 0) << "seed " << s;
    if (prefix == 0 || prefix == len) continue;
    const bool line_cut = (off + prefix) % 64 == 0;
    const bool packet_cut = prefix % 256 == 0;
    ASSERT_TRUE(line_cut || packet_cut) << "seed " << s << ": cut at byte " << prefix;
    inside_line += !line_cut;  // a packet boundary 32 B into a line
  }
  EXPECT_GT(inside_line, 0) << "some of seeds 0..1999 cut a line at a packet boundary";
}

TEST_F(PmTest, ReadMakesDurableOnlyTheEarlierWritesOfItsOwnQp) {
  // IBTA orders a READ behind its own QP's writes, not another QP's: a READ on
  // QP0 promises nothing for QP1's write queued before it (the model keeps
  // that one in the NIC buffer, adversarially).
  build({});
  remote_write(0, 256, 61, /*q=*/1);     // QP1, earlier
  remote_write(4096, 256, 62, /*q=*/0);  // QP0
  remote_write(8192, 256, 63, /*q=*/1);  // QP1, later
  remote_read0(/*q=*/0);
  EXPECT_EQ(count_survivals(4096, 256, 62, 2000), 2000) << "QP0's write is durable";
  EXPECT_LT(count_survivals(0, 256, 61, 200), 200) << "QP1's earlier write may still be lost";
  EXPECT_LT(count_survivals(8192, 256, 63, 200), 200) << "QP1's later write may still be lost";
  remote_read0(/*q=*/1);
  EXPECT_EQ(count_survivals(0, 256, 61, 2000), 2000);
  EXPECT_EQ(count_survivals(8192, 256, 63, 2000), 2000);
}

TEST_F(PmTest, AnOlderWriteOfAnotherQpToTheSameBytesNeverLandsAfterTheDrainedOne) {
  // Per address, writes reach memory in issue order: draining QP0's write
  // drains QP1's older write under it first, so the older bytes cannot come
  // back after a power failure.
  build({});
  remote_write(0, 256, 64, /*q=*/1);  // older, QP1
  remote_write(0, 256, 65, /*q=*/0);  // newer, same bytes, QP0
  remote_read0(/*q=*/0);
  EXPECT_EQ(count_survivals(0, 256, 65, 2000), 2000);
}

TEST_F(PmTest, FullNicBufferDrainsOldestWritesFirst) {
  build({.nic_write_buffer_bytes = 8192});
  remote_write(0, 256, 71);
  remote_write(16384, 4096, 72);
  remote_write(32768, 4096, 73);  // pushes the first write out of the buffer
  EXPECT_EQ(count_survivals(0, 256, 71, 2000), 2000);
  EXPECT_LT(count_survivals(32768, 4096, 73, 200), 200);
}

TEST_F(PmTest, AtomicOnPmIsPendingUntilARead) {
  build({});
  uint64_t* word = reinterpret_cast<uint64_t*>(pm_->data() + 512);
  EXPECT_EQ(remote_atomic(WrOpcode::kAtomicFetchAndAdd, 512, 5), 0u);
  EXPECT_EQ(*word, 5u);
  auto value_after = [&](int s) {
    uint64_t v;
    std::memcpy(&v, domain_->image_after_power_fail(*pm_, s).data() + 512, 8);
    return v;
  };
  bool lost = false;
  for (int s = 0; s < 200 && !lost; ++s) lost = value_after(s) == 0;
  EXPECT_TRUE(lost);
  remote_read0();
  for (int s = 0; s < 2000; ++s) ASSERT_EQ(value_after(s), 5u) << "seed " << s;
  EXPECT_EQ(pm_->counters().atomics, 1u);
}

TEST_F(PmTest, PowerFailLeavesWhatImageAfterPowerFailPredicted) {
  build({});
  remote_write(0, 4096, 81);
  for (int i = 0; i < 64; ++i) pm_->data()[20000 + i] = 0x77;
  const auto predicted = domain_->image_after_power_fail(*pm_, 1234);
  const PowerFailReport report = domain_->power_fail(1234);
  EXPECT_EQ(std::memcmp(pm_->data(), predicted.data(), kRegionBytes), 0);
  EXPECT_EQ(report.nic_writes_pending, 1u);
  EXPECT_EQ(domain_->nic_buffer_bytes(), 0u);
  // Afterwards everything is durable: another failure changes nothing.
  const auto again = domain_->image_after_power_fail(*pm_, 99);
  EXPECT_EQ(std::memcmp(pm_->data(), again.data(), kRegionBytes), 0);
}

TEST_F(PmTest, PowerFailLosesDramAndProcessCrashKeepsPm) {
  build({});
  Region* dram = domain_->alloc_dram(4096).value();
  std::memset(dram->data(), 0x55, 4096);
  remote_write(0, 256, 91);  // pending in the NIC
  for (int i = 0; i < 64; ++i) pm_->data()[30000 + i] = 0x66;  // unpersisted
  domain_->process_crash();
  EXPECT_TRUE(survives(std::vector<uint8_t>(pm_->data(), pm_->data() + kRegionBytes), 0, 256, 91))
      << "a process crash loses no PM data: the NIC and caches live on";
  EXPECT_EQ(pm_->data()[30000], 0x66);
  EXPECT_EQ(dram->data()[0], 0) << "DRAM is gone";
  std::memset(dram->data(), 0x55, 4096);
  const PowerFailReport r = domain_->power_fail(7);
  EXPECT_EQ(dram->data()[100], 0);
  EXPECT_EQ(r.dram_bytes_lost, 4096u);
  EXPECT_EQ(pm_->data()[30000], 0x66) << "made durable by the crash";
}

TEST(PmModel, PowerFailReportCountsTheBoundaryWriteAsKeptTornOrLostNeverUncounted) {
  // The write at the boundary of the surviving prefix keeps a proper prefix
  // of its chunks; one that arrived whole is part of the prefix.
  const std::string path = temp_path("boundary-report.pm");
  std::filesystem::remove(path);
  PersistenceDomain domain;
  Region* pm = domain.map_pm(path, 8192, /*create=*/true).value();
  uint8_t data[256];
  for (int s = 0; s < 250; ++s) {
    std::memset(data, s % 255 + 1, sizeof(data));  // unlike any byte an earlier round left
    domain.dma_write(/*qpn=*/1, pm->data() + 1024, data, sizeof(data));  // 4 chunks, in the NIC buffer
    const PowerFailReport report = domain.power_fail(s);
    int chunks = 0;
    while (chunks < 4 && pm->data()[1024 + chunks * 64] == data[0]) ++chunks;
    ASSERT_EQ(report.nic_writes_pending, 1u);
    ASSERT_EQ(report.nic_writes_kept, chunks == 4 ? 1u : 0u) << "seed " << s << ": " << chunks << " chunks arrived";
    ASSERT_EQ(report.nic_write_torn, chunks > 0 && chunks < 4 ? 1u : 0u)
        << "seed " << s << ": " << chunks << " chunks arrived";
  }
}

TEST(PmModel, LineStaysNicPendingAfter65536OneByteWritesToIt) {
  // The 256 KiB buffer holds 262,144 one-byte writes. If the line's count of
  // pending writes wrapped to 0, writing the line back (eviction) would make
  // bytes the NIC never delivered durable.
  constexpr uint64_t kWrites = 65536;
  auto value = [&](uint64_t i) { return i == kWrites - 1 ? uint8_t{0xFF} : static_cast<uint8_t>(i % 200 + 1); };
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const std::string path = temp_path("pending-count.pm");
    std::filesystem::remove(path);
    PersistenceDomain domain({.ddio = true, .cache_lines = 1});
    Region* pm = domain.map_pm(path, 8192, /*create=*/true).value();
    for (uint64_t i = 0; i < kWrites; ++i) {
      const uint8_t v = value(i);
      domain.dma_write(/*qpn=*/1, pm->data(), &v, 1);
    }
    const uint8_t cpu = 0x42;
    pm->store(pm->data() + 40, &cpu, 1);  // the line enters the cache...
    for (int line = 1; line <= 32; ++line) pm->store(pm->data() + line * 64, &cpu, 1);  // ...and is evicted
    const PowerFailReport report = domain.power_fail(seed);
    ASSERT_EQ(report.nic_writes_pending, kWrites);
    const uint64_t kept = report.nic_writes_kept;
    const uint8_t last_arrived = kept == 0 ? 0 : value(kept - 1);
    EXPECT_TRUE(pm->data()[0] == 0 || pm->data()[0] == last_arrived)
        << "seed " << seed << ": " << kept << " of " << kWrites << " writes arrived, the byte holds "
        << int{pm->data()[0]};
  }
}

TEST(PmRegion, OrdinaryFileMapsAndSaysItIsNotRealPm) {
  PersistenceDomain domain;
  const std::string path = temp_path("plain.pm");
  std::filesystem::remove(path);
  auto region = domain.map_pm(path, 1 << 20, /*create=*/true);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  EXPECT_EQ(region.value()->media(), Media::kPm);
  EXPECT_EQ(region.value()->size(), 1u << 20);
  // /tmp is not DAX on PM here; where it is, this reports real PM instead.
  if (!region.value()->real_pm()) {
    EXPECT_NE(std::string(region.value()->granularity()).find("not PM"), std::string::npos);
  }
}

TEST(PmRegion, MissingFileWithoutCreateIsNotFound) {
  PersistenceDomain domain;
  auto region = domain.map_pm(temp_path("does-not-exist.pm"), 4096, /*create=*/false);
  EXPECT_EQ(region.status().code(), Code::kNotFound);
}

TEST(PmRegion, ContentSurvivesUnmapAndRemapAfterAPowerFailure) {
  const std::string path = temp_path("remap.pm");
  std::filesystem::remove(path);
  {
    PersistenceDomain domain;
    Region* r = domain.map_pm(path, 8192, true).value();
    std::memset(r->data(), 0x11, 64);
    r->persist(r->data(), 64);
    std::memset(r->data() + 64, 0x22, 64);  // never persisted
    domain.power_fail(3);
    EXPECT_EQ(r->data()[0], 0x11);
  }
  PersistenceDomain after;
  Region* r = after.map_pm(path, 0, false).value();
  EXPECT_EQ(r->size(), 8192u);
  EXPECT_EQ(r->data()[0], 0x11) << "the file holds what survived";
}

// Crash points (PersistenceDomain::arm_cut): the power goes at the start of
// the n-th fence from now. What was persisted before it survives; the fence
// it interrupts may or may not complete; nothing stored after it survives,
// although the code went on running (and persisted it).
TEST_F(PmTest, ACutAtAFenceKeepsWhatWasPersistedBeforeAndNothingStoredAfter) {
  build({});
  int interrupted_kept = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const uint8_t a = 1, b = 2, c = 3, zero = 0;
    pm_->store_persist(pm_->data() + 0, &zero, 1);
    pm_->store_persist(pm_->data() + 4096, &zero, 1);
    pm_->store_persist(pm_->data() + 8192, &zero, 1);
    domain_->arm_cut(2);
    pm_->store_persist(pm_->data() + 0, &a, 1);  // fence 1: before the cut
    EXPECT_FALSE(domain_->cut_taken());
    pm_->store_persist(pm_->data() + 4096, &b, 1);  // fence 2: the cut comes at its start
    EXPECT_TRUE(domain_->cut_taken());
    pm_->store_persist(pm_->data() + 8192, &c, 1);  // after the cut: never happened
    (void)domain_->power_fail(seed);
    EXPECT_EQ(pm_->data()[0], a) << "seed " << seed;
    EXPECT_EQ(pm_->data()[8192], zero) << "seed " << seed;
    EXPECT_FALSE(domain_->cut_taken());
    interrupted_kept += pm_->data()[4096] == b;
  }
  EXPECT_GT(interrupted_kept, 0);  // the interrupted fence: either way
  EXPECT_LT(interrupted_kept, 200);
}

TEST_F(PmTest, AProcessCrashAtACutKeepsWhatWasStoredBeforeItAndNothingAfter) {
  build({});
  const uint8_t a = 7, b = 8, zero = 0;
  pm_->store_persist(pm_->data() + 0, &zero, 1);
  pm_->store_persist(pm_->data() + 64, &zero, 1);
  domain_->arm_cut(1);
  pm_->data()[0] = a;                            // a plain store before the cut: the machine lives, PM keeps it
  pm_->store_persist(pm_->data() + 64, &b, 1);   // the cut at this fence's start: b was stored before it
  pm_->store_persist(pm_->data() + 128, &b, 1);  // after the cut
  domain_->process_crash();
  EXPECT_EQ(pm_->data()[0], a);
  EXPECT_EQ(pm_->data()[64], b);
  EXPECT_EQ(pm_->data()[128], zero);
  // Disarmed: the next crash keeps everything.
  pm_->data()[128] = b;
  domain_->process_crash();
  EXPECT_EQ(pm_->data()[128], b);
}

}  // namespace
}  // namespace ferry::pm::testing
