// libibverbs' remaining public calls: rate conversions, fork protection
// of ranges, the GID table, and what a device served by a NIC daemon does
// not have (shared kernel objects to import, dma-buf, re-registration,
// Ethernet L2 resolution, address handles for UD), which fail as a
// provider without them fails.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "verbs_internal.h"

namespace {

struct Rate {
  ibv_rate rate;
  int mult;  // of 2.5 Gb/s; -1 where the rate is no multiple libibverbs names
  int mbps;
};
// rdma-core's values (tests/verbs checks them against Debian's library).
constexpr Rate kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},         {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000},     {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},      {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, -1, 14062},    {IBV_RATE_56_GBPS, -1, 56250},      {IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750},  {IBV_RATE_25_GBPS, -1, 25781},      {IBV_RATE_100_GBPS, -1, 103125},
    {IBV_RATE_200_GBPS, -1, 206250},  {IBV_RATE_300_GBPS, -1, 309375},    {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},    {IBV_RATE_400_GBPS, 160, 425000},   {IBV_RATE_600_GBPS, 240, 637500},
    {IBV_RATE_800_GBPS, 320, 850000}, {IBV_RATE_1200_GBPS, 480, 1275000},
};

int page_range(void* base, size_t size, int advice) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(base) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(base) + size + page - 1) & ~(page - 1);
  return madvise(reinterpret_cast<void*>(start), end - start, advice) == 0 ? 0 : errno;
}

}  // namespace

using namespace ferry::verbs;

extern "C" {

int ibv_rate_to_mult(ibv_rate rate) {
  for (const Rate& r : kRates) {
    if (r.rate == rate) return r.mult;
  }
  return -1;
}

ibv_rate mult_to_ibv_rate(int mult) {
  for (const Rate& r : kRates) {
    if (r.mult == mult && mult > 0) return r.rate;
  }
  return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
  for (const Rate& r : kRates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const Rate& r : kRates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

// Registered pages are a memory file mapped shared (SharedMemory::adopt):
// a child forked without MADV_DONTFORK would share them with the parent.
int ibv_dontfork_range(void* base, size_t size) { return page_range(base, size, MADV_DONTFORK); }
int ibv_dofork_range(void* base, size_t size) { return page_range(base, size, MADV_DOFORK); }

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries, uint32_t flags,
                             size_t entry_size) {
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  if (max_entries < 1) return -EINVAL;
  fill_gid_entry(context, &entries[0]);
  return 1;
}

// Ordering of data within a message is not promised beyond what verbs
// promises (0: no guarantee), as for a device that does not say.
int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) { return 0; }

// The L2 (MAC, VLAN) of a RoCE peer is the kernel's neighbour table's for a
// netdev; a daemon's GID has no netdev of its own here.
int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*, uint16_t*) { return EOPNOTSUPP; }

// For UD address handles, which the NIC does not do.
int ibv_init_ah_from_wc(ibv_context*, uint8_t, ibv_wc*, ibv_grh*, ibv_ah_attr*) {
  errno = EOPNOTSUPP;
  return -1;
}

// Objects shared through a uverbs command fd: a daemon's clients share none.
ibv_context* ibv_import_device(int) { return fail<ibv_context>(EOPNOTSUPP); }
ibv_pd* ibv_import_pd(ibv_context*, uint32_t) { return fail<ibv_pd>(EOPNOTSUPP); }
void ibv_unimport_pd(ibv_pd*) {}
ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) { return fail<ibv_mr>(EOPNOTSUPP); }
void ibv_unimport_mr(ibv_mr*) {}
ibv_dm* ibv_import_dm(ibv_context*, uint32_t) { return fail<ibv_dm>(EOPNOTSUPP); }
void ibv_unimport_dm(ibv_dm*) {}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) { return fail<ibv_mr>(EOPNOTSUPP); }

// The MR is left as it was (IBV_REREG_MR_ERR_INPUT: "old MR is valid").
int ibv_rereg_mr(ibv_mr*, int, ibv_pd*, void*, size_t, int) {
  errno = EOPNOTSUPP;
  return IBV_REREG_MR_ERR_INPUT;
}

}  // extern "C"
