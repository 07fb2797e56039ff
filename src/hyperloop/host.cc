#include "host.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "ferry/common/temp_dir.h"

namespace ferry::hyperloop::detail {

Host::~Host() {
  mr.reset();
  pd.reset();
  if (domain != nullptr && region != nullptr) domain->release(region);
  domain.reset();
  if (!pm_path.empty()) ::unlink(pm_path.c_str());
}

std::string pm_directory(const GroupOptions& options) {
  if (!options.pm_dir.empty()) return options.pm_dir;
  struct stat st {};
  if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') return tmp;
  return "/tmp";
}

Result<std::unique_ptr<Host>> make_host(nic::Engine& engine, const std::string& name, const GroupOptions& options,
                                        bool pm) {
  auto host = std::make_unique<Host>();
  host->name = name;
  host->domain = std::make_unique<pm::PersistenceDomain>(options.platform);
  nic::NicOptions nic_options;
  nic_options.name = name;
  nic_options.memory = host->domain.get();
  auto nic = engine.add_nic(nic_options);
  if (!nic.ok()) return nic.status();
  host->nic = nic.value();
  auto pd = host->nic->alloc_pd();
  if (!pd.ok()) return pd.status();
  host->pd = std::move(pd).value();
  if (pm) {
    // A new group's region starts zeroed, so its file must be new: created
    // exclusively under a name no earlier file has. A name made of the pid
    // and a counter was reused when a process that died without unlinking
    // its files (killed, crashed) had the same pid, and the new group
    // started with the dead one's bytes.
    auto path = make_temp_file(pm_directory(options), "ferry-" + std::to_string(::getpid()) + "-" + name, ".pm");
    if (!path.ok()) {
      return Status(path.status().code(), "group host " + name + ": PM (set pm_dir): " + path.status().message());
    }
    host->pm_path = std::move(path).value();
    auto region = host->domain->map_pm(host->pm_path, options.region_bytes, /*create=*/true);
    if (!region.ok()) {
      ::unlink(host->pm_path.c_str());
      host->pm_path.clear();
      return Status(region.status().code(),
                    "group host " + name + ": cannot map PM under " + pm_directory(options) + " (set pm_dir): " +
                        region.status().message());
    }
    host->region = region.value();
  } else {
    auto region = host->domain->alloc_dram(options.region_bytes);
    if (!region.ok()) return region.status();
    host->region = region.value();
  }
  FERRY_RETURN_IF_ERROR(register_region(*host));
  return host;
}

Status register_region(Host& host) {
  FERRY_ASSIGN_OR_RETURN(host.mr, host.nic->reg_mr(*host.pd, host.region->data(), host.region->size(), kRegionAccess));
  return ok_status();
}

}  // namespace ferry::hyperloop::detail
