// DmaMemory: anonymous pages in process, a memfd for a daemon's NIC.
#include "ferry/nic/dma_memory.h"

#include <sys/mman.h>

#include <string>
#include <utility>

namespace ferry::nic {

Result<DmaMemory> DmaMemory::allocate(const Nic& nic, size_t bytes, std::string_view name) {
  if (bytes == 0) return invalid_argument("DmaMemory: zero bytes");
  DmaMemory m;
  if (nic.engine() == nullptr) {
    FERRY_ASSIGN_OR_RETURN(m.shared_, SharedMemory::create(bytes, name));
    m.data_ = m.shared_.data();
  } else {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return resource_exhausted("DmaMemory: no memory for " + std::to_string(bytes) + " bytes");
    m.data_ = static_cast<uint8_t*>(p);
  }
  m.size_ = bytes;
  return m;
}

DmaMemory::DmaMemory(DmaMemory&& o) noexcept
    : shared_(std::move(o.shared_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

DmaMemory& DmaMemory::operator=(DmaMemory&& o) noexcept {
  if (this != &o) {
    reset();
    shared_ = std::move(o.shared_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

DmaMemory::~DmaMemory() { reset(); }

void DmaMemory::reset() {
  if (data_ != nullptr && shared_.data() == nullptr) ::munmap(data_, size_);
  shared_ = SharedMemory();
  data_ = nullptr;
  size_ = 0;
}

}  // namespace ferry::nic
