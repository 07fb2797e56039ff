// SharedMemory: memory files mapped shared, and this process's registry of
// them, where a daemon-attached NIC finds the file behind the memory it
// registers (device.h, find_shared_mapping).
#include "ferry/nic/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "device.h"

namespace ferry::nic {

namespace {

std::string errno_text() { return std::strerror(errno); }

// Every SharedMemory mapping of this process, by base address.
std::mutex registry_mu;
std::map<uintptr_t, detail::SharedMapping>& registry() {
  static std::map<uintptr_t, detail::SharedMapping> map;
  return map;
}
std::atomic<uint64_t> next_mapping_id{1};

// Maps `fd` and enters the mapping in the registry; nullptr on failure.
uint8_t* map_and_register(int fd, size_t bytes, uint64_t* id) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  *id = next_mapping_id.fetch_add(1);
  std::lock_guard<std::mutex> lock(registry_mu);
  registry()[reinterpret_cast<uintptr_t>(p)] = detail::SharedMapping{*id, static_cast<uint8_t*>(p), bytes, fd};
  return static_cast<uint8_t*>(p);
}

// Copies whole pages, bytes the program never allocated among them (heap
// redzones under ASan), so it is not instrumented; the volatile reads keep
// the compiler from turning the loop into a memcpy call, which would be.
__attribute__((no_sanitize("address"))) void copy_pages(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<uint64_t*>(dst);
  const auto* s = static_cast<const volatile uint64_t*>(src);
  for (size_t i = 0; i < bytes / sizeof(uint64_t); ++i) d[i] = s[i];
}

}  // namespace

namespace detail {

bool shared_mapping_alive(uint64_t id) {
  std::lock_guard<std::mutex> lock(registry_mu);
  for (const auto& [base, m] : registry()) {
    if (m.id == id) return true;
  }
  return false;
}

std::optional<SharedMapping> find_shared_mapping(uint64_t addr, uint64_t length) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto& map = registry();
  auto it = map.upper_bound(static_cast<uintptr_t>(addr));
  if (it == map.begin()) return std::nullopt;
  --it;
  const SharedMapping& m = it->second;
  const uint64_t base = reinterpret_cast<uint64_t>(m.base);
  if (addr < base || length > m.size || addr - base > m.size - length) return std::nullopt;
  return m;
}

}  // namespace detail

Result<SharedMemory> SharedMemory::create(size_t bytes, std::string_view name) {
  if (bytes == 0) return invalid_argument("SharedMemory: zero bytes");
  const int fd = memfd_create(std::string(name).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return unavailable("SharedMemory: memfd_create: " + errno_text());
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return resource_exhausted("SharedMemory: ftruncate: " + errno_text());
  }
  // The daemon maps it too: it must not shrink under the daemon's DMA.
  (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  SharedMemory m;
  m.data_ = map_and_register(fd, bytes, &m.id_);
  if (m.data_ == nullptr) {
    const std::string why = errno_text();
    close(fd);
    return resource_exhausted("SharedMemory: mmap of " + std::to_string(bytes) + " bytes: " + why);
  }
  m.fd_ = fd;
  m.size_ = bytes;
  return m;
}

Result<SharedMemory> SharedMemory::map_file(const std::string& path, size_t bytes) {
  if (bytes == 0) return invalid_argument("SharedMemory: zero bytes");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return not_found("SharedMemory: cannot open " + path + ": " + errno_text());
  struct stat st {};
  if (fstat(fd, &st) != 0 ||
      (static_cast<size_t>(st.st_size) < bytes && ftruncate(fd, static_cast<off_t>(bytes)) != 0)) {
    close(fd);
    return resource_exhausted("SharedMemory: cannot size " + path + ": " + errno_text());
  }
  SharedMemory m;
  m.data_ = map_and_register(fd, bytes, &m.id_);
  if (m.data_ == nullptr) {
    const std::string why = errno_text();
    close(fd);
    return resource_exhausted("SharedMemory: mmap of " + path + ": " + why);
  }
  m.fd_ = fd;
  m.size_ = bytes;
  return m;
}

Result<SharedMemory> SharedMemory::adopt(void* addr, size_t bytes, int prot) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (bytes == 0 || reinterpret_cast<uintptr_t>(addr) % page != 0 || bytes % page != 0) {
    return invalid_argument("SharedMemory::adopt: the range must be whole pages");
  }
  const int fd = memfd_create("ferry-adopted", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return unavailable("SharedMemory::adopt: memfd_create: " + errno_text());
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return resource_exhausted("SharedMemory::adopt: ftruncate: " + errno_text());
  }
  (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  // The contents go into the file through a mapping of its own, then the
  // file replaces the pages at their address in one mmap.
  void* staging = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (staging == MAP_FAILED) {
    const std::string why = errno_text();
    close(fd);
    return resource_exhausted("SharedMemory::adopt: mmap: " + why);
  }
  copy_pages(staging, addr, bytes);
  munmap(staging, bytes);
  void* p = mmap(addr, bytes, prot, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    // MAP_FIXED fails before it unmaps anything (bad arguments, limits):
    // the program's pages are still there.
    const std::string why = errno_text();
    close(fd);
    return resource_exhausted("SharedMemory::adopt: mmap over the range: " + why);
  }
  SharedMemory m;
  m.id_ = next_mapping_id.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    registry()[reinterpret_cast<uintptr_t>(p)] = detail::SharedMapping{m.id_, static_cast<uint8_t*>(p), bytes, fd};
  }
  m.data_ = static_cast<uint8_t*>(p);
  m.size_ = bytes;
  m.fd_ = fd;
  m.adopted_ = true;
  return m;
}

SharedMemory::SharedMemory(SharedMemory&& o) noexcept
    : data_(o.data_), size_(o.size_), fd_(o.fd_), id_(o.id_), adopted_(o.adopted_) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.fd_ = -1;
  o.id_ = 0;
}

SharedMemory& SharedMemory::operator=(SharedMemory&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    size_ = o.size_;
    fd_ = o.fd_;
    id_ = o.id_;
    adopted_ = o.adopted_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.fd_ = -1;
    o.id_ = 0;
  }
  return *this;
}

SharedMemory::~SharedMemory() { reset(); }

void SharedMemory::reset() {
  if (data_ != nullptr) {
    {
      std::lock_guard<std::mutex> lock(registry_mu);
      registry().erase(reinterpret_cast<uintptr_t>(data_));
    }
    if (!adopted_) munmap(data_, size_);
  }
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  fd_ = -1;
  size_ = 0;
  adopted_ = false;
}

}  // namespace ferry::nic
