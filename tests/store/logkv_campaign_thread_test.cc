// The Tailwind/LogKv campaign (issue 26): "Tailwind with crashes
// mid-WRITE, backups down and back, partitions of an old primary, cleaning
// on", on LogKv in one process (threaded engine), with every client
// history checked for linearizability.
//
// Each seed builds a cluster of five servers (r = 2, 64 KB segments, PM
// backups, the background cleaner every 5 ms) in the replication mode the
// seed picks, and runs four client threads on ten hot keys: PUTs,
// conditional PUTs (at the version the client last saw), DELETEs (some
// conditional) and GETs. Meanwhile a control thread injects three to five
// faults chosen by the seed, one at a time, at random moments:
//
//   crash      a server stops at once, its appends in flight half done
//              (Cluster::crash_server), then its tablets are recovered;
//   partition  the coordinator loses a server (Cluster::partition_server)
//              and recovers its tablets elsewhere while it runs on and
//              keeps serving clients with an old map; then it is stopped;
//   backup     a server's backup is declared failed (every other log
//              replaces its replicas there) and, a while later, back;
//   both       a backup down, a primary crashed meanwhile (the copies it
//              left on the backup are never freed), the backup back, then
//              the recovery, which meets those copies.
//
// At most two servers are lost for good, so every log keeps r + 1 live
// servers. After the faults the clients stop, a fresh client reads every
// key, and the whole history -- operations whose outcome a client never
// learnt recorded as pending (tests/support/linearizability.h) -- must be
// linearizable: no acknowledged write lost, no deleted or overwritten value
// back, no stale read. Clients never resend a write whose outcome is
// unknown (ClientOptions::retry_unknown_writes = false).
//
// Size: FERRY_TAILWIND_SEEDS seeds (default 4: about 10 s in the release
// build; scripts/run-tests.sh runs 1 under ASan; the full campaign is 200),
// from FERRY_SEED (default 1; base 0, so hex works). A failure names its
// seed: rerun with FERRY_SEED=<seed> FERRY_TAILWIND_SEEDS=1.
#include <gtest/gtest.h>

#include <cstdio>

#include "store/logkv_campaign.h"
#include "test_seed.h"

namespace ferry::store::logkv {
namespace logkv_campaign {

TEST(TailwindCampaign, CrashesPartitionsBackupsDownAndCleaningKeepEveryHistoryLinearizable) {
  const ferry::testing::SeedRange range = ferry::testing::seed_range("FERRY_TAILWIND_SEEDS", 1, 4);
  const uint64_t first = range.first;
  const uint64_t seeds = range.count;
  Figures total;
  uint64_t ran = 0;
  for (uint64_t s = first; s < first + seeds && !HasFailure(); ++s, ++ran) run_seed(s, &total);
  std::printf("campaign: %llu seeds, %llu operations checked (%llu pending), %llu crashes, %llu partitions, "
              "%llu backups down and back, %llu recoveries (%llu torn replicas met), %llu segments cleaned, "
              "%llu checker states; violations: %s\n",
              static_cast<unsigned long long>(ran), static_cast<unsigned long long>(total.ops),
              static_cast<unsigned long long>(total.pending), static_cast<unsigned long long>(total.crashes),
              static_cast<unsigned long long>(total.partitions), static_cast<unsigned long long>(total.backups_down),
              static_cast<unsigned long long>(total.recoveries), static_cast<unsigned long long>(total.torn_replicas),
              static_cast<unsigned long long>(total.segments_cleaned), static_cast<unsigned long long>(total.states),
              HasFailure() ? "see above" : "none");
}

}  // namespace logkv_campaign
}  // namespace ferry::store::logkv
