// One emulated machine of a replication group: its persistence domain, its
// NIC on the shared Engine, a protection domain, and the group's memory
// region registered for local and remote access. Shared by the HyperLoop and
// Naive-RDMA implementations.
#pragma once

#include <memory>
#include <string>

#include "ferry/common/status.h"
#include "ferry/hyperloop/group.h"
#include "ferry/nic/verbs.h"
#include "ferry/pm/domain.h"

namespace ferry::hyperloop::detail {

struct Host {
  std::string name;
  std::unique_ptr<pm::PersistenceDomain> domain;
  nic::Nic* nic = nullptr;  // owned by the Engine
  std::unique_ptr<nic::ProtectionDomain> pd;
  pm::Region* region = nullptr;  // the group's data region
  std::unique_ptr<nic::MemoryRegion> mr;
  std::string pm_path;  // backing file, removed with the host

  Host() = default;
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;
  ~Host();

  uint8_t* base() const { return region->data(); }
  uint64_t iova(uint64_t offset) const { return mr->iova() + offset; }
};

// What a replica's data region is registered for: everything its chains do
// to it -- remote WRITE, atomics (the loopback CAS), FLUSH -- and no remote
// READ: gFLUSH's READ has 0 bytes, which needs no rkey (IBTA), and nothing
// else on the data path reads a region. So a data slot that a hostile or
// buggy client's message turns into a READ (copying the next replica's
// bytes into this one's region) fails with a remote access error. The
// replacement copy registers a read-only MR of its own for its duration.
constexpr uint32_t kRegionAccess = nic::kAccessAll & ~nic::kAccessRemoteRead;

// Makes a host with a region of options.region_bytes: PM (a fresh file under
// options.pm_dir) when `pm` is set, else DRAM, registered for kRegionAccess.
Result<std::unique_ptr<Host>> make_host(nic::Engine& engine, const std::string& name, const GroupOptions& options,
                                        bool pm);

// (Re-)registers host.region (its MR died with a killed process).
Status register_region(Host& host);

// options.pm_dir, or /dev/shm, or $TMPDIR, or /tmp.
std::string pm_directory(const GroupOptions& options);

}  // namespace ferry::hyperloop::detail
