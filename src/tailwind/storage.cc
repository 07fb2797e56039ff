// Tailwind backup storage: one file per closed segment, written to a
// temporary, synced, renamed into place.
#include "ferry/tailwind/storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "ferry/common/align.h"
#include "ferry/common/assert.h"
#include "ferry/common/checksum.h"

namespace ferry::tailwind {
namespace {

// storage.h, "File format".
constexpr size_t kHeaderBytes = 64;
constexpr size_t kHeaderCrcOffset = 56;
constexpr std::array<uint8_t, 8> kMagic = {'F', 'R', 'Y', 'T', 'W', 'S', 'G', '1'};
constexpr uint32_t kFormatVersion = 1;
constexpr std::string_view kFileSuffix = ".tws";
constexpr std::string_view kTempSuffix = ".tmp";
constexpr std::string_view kProbeName = ".o_direct-probe.tmp";
// O_DIRECT: file offsets, lengths and buffer addresses are multiples of
// this, which every logical block size up to 4 KiB divides.
constexpr size_t kDirectAlignmentBytes = 4096;
// kDirect copies header, data and padding through a staging buffer this big.
constexpr size_t kDirectChunkBytes = size_t{1} << 20;
static_assert(kHeaderCrcOffset + 8 == kHeaderBytes, "header CRC, then 4 zero bytes, end the header");
static_assert(kHeaderBytes <= kDirectAlignmentBytes);
static_assert(kDirectChunkBytes % kDirectAlignmentBytes == 0);

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

Status io_error(const std::string& what, int err) {
  std::string message = what + ": " + std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return resource_exhausted(std::move(message));
    case EACCES:
    case EPERM:
    case EROFS:
      return permission_denied(std::move(message));
    default:
      return unavailable(std::move(message));
  }
}

void store_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, sizeof v); }
void store_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, sizeof v); }
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string file_name(uint64_t log_id, uint64_t segment_id) {
  return "log-" + std::to_string(log_id) + "-seg-" + std::to_string(segment_id) + std::string(kFileSuffix);
}

bool parse_decimal(std::string_view text, uint64_t* value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return !text.empty() && ec == std::errc() && ptr == end;
}

// True for exactly the names file_name() makes (so no leading zeros, signs
// or temporaries).
bool parse_file_name(std::string_view name, uint64_t* log_id, uint64_t* segment_id) {
  constexpr std::string_view kPrefix = "log-", kMiddle = "-seg-";
  if (!name.starts_with(kPrefix) || !name.ends_with(kFileSuffix)) return false;
  if (name.size() < kPrefix.size() + kFileSuffix.size()) return false;
  const std::string_view ids = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kFileSuffix.size());
  const size_t middle = ids.find(kMiddle);
  if (middle == std::string_view::npos) return false;
  if (!parse_decimal(ids.substr(0, middle), log_id)) return false;
  if (!parse_decimal(ids.substr(middle + kMiddle.size()), segment_id)) return false;
  return file_name(*log_id, *segment_id) == name;
}

using Header = std::array<uint8_t, kHeaderBytes>;

Header encode_header(const StoredSegment& meta, uint32_t data_crc) {
  Header h{};
  std::memcpy(h.data(), kMagic.data(), kMagic.size());
  store_u32(h.data() + 8, kFormatVersion);
  store_u32(h.data() + 12, 0);  // flags
  store_u64(h.data() + 16, meta.log_id);
  store_u64(h.data() + 24, meta.segment_id);
  store_u64(h.data() + 32, meta.replica_version);
  store_u64(h.data() + 40, meta.bytes);
  store_u32(h.data() + 48, meta.checksum);
  store_u32(h.data() + 52, data_crc);
  store_u32(h.data() + kHeaderCrcOffset, crc32c(0, h.data(), kHeaderCrcOffset));
  return h;
}

struct DecodedHeader {
  StoredSegment meta;
  uint32_t data_crc = 0;
};

// Every byte of the header is checked: the CRC covers [0, 56), the rest
// must be zero.
Result<DecodedHeader> decode_header(const Header& h) {
  if (std::memcmp(h.data(), kMagic.data(), kMagic.size()) != 0) return data_loss("bad magic");
  const uint32_t want_crc = load_u32(h.data() + kHeaderCrcOffset);
  const uint32_t crc = crc32c(0, h.data(), kHeaderCrcOffset);
  if (crc != want_crc) {
    return data_loss("header CRC mismatch (stored " + std::to_string(want_crc) + ", computed " + std::to_string(crc) +
                     ")");
  }
  if (load_u32(h.data() + kHeaderCrcOffset + 4) != 0) return data_loss("nonzero header padding");
  const uint32_t version = load_u32(h.data() + 8);
  if (version != kFormatVersion) return data_loss("unsupported format version " + std::to_string(version));
  const uint32_t flags = load_u32(h.data() + 12);
  if (flags != 0) return data_loss("unknown flags " + std::to_string(flags));
  DecodedHeader d;
  d.meta.log_id = load_u64(h.data() + 16);
  d.meta.segment_id = load_u64(h.data() + 24);
  d.meta.replica_version = load_u64(h.data() + 32);
  d.meta.bytes = load_u64(h.data() + 40);
  d.meta.checksum = load_u32(h.data() + 48);
  d.data_crc = load_u32(h.data() + 52);
  return d;
}

// Reads exactly `len` bytes at `offset`; kDataLoss if the file ends first
// (it was truncated under us).
Status read_all(int fd, uint8_t* buf, size_t len, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd, buf + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot read " + path, errno);
    }
    if (n == 0) return data_loss(path + ": file ends at " + std::to_string(offset + done));
    done += static_cast<size_t>(n);
  }
  return ok_status();
}

// `chunk`: at most this many bytes per pwrite, yielding the CPU between
// them (0: as many as the kernel takes).
Status write_all(int fd, const uint8_t* buf, size_t len, uint64_t offset, const std::string& path, size_t chunk = 0) {
  size_t done = 0;
  while (done < len) {
    const size_t want = chunk == 0 ? len - done : std::min(chunk, len - done);
    const ssize_t n = ::pwrite(fd, buf + done, want, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot write " + path, errno);
    }
    done += static_cast<size_t>(n);
    if (chunk != 0 && done < len) std::this_thread::yield();  // sim-seam: paces a shared core
  }
  return ok_status();
}

// Copies into `dst` (file bytes [offset, offset + len)) the part of `src`,
// which sits at file offset src_offset, that falls in that range.
void copy_overlap(uint8_t* dst, uint64_t offset, size_t len, std::span<const uint8_t> src, uint64_t src_offset) {
  const uint64_t lo = std::max(offset, src_offset);
  const uint64_t hi = std::min(offset + len, src_offset + src.size());
  if (lo < hi) std::memcpy(dst + (lo - offset), src.data() + (lo - src_offset), hi - lo);
}

// Opens a segment file for reading and checks its header, its ids against
// the name and its length. The data CRC is the caller's to check.
Result<DecodedHeader> open_checked(int dir_fd, const std::string& name, const std::string& path, uint64_t log_id,
                                   uint64_t segment_id, Fd* fd_out) {
  // O_NONBLOCK: a FIFO planted under a segment's name must not hang us.
  Fd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) {
    if (errno == ENOENT) return not_found("no segment " + path);
    return io_error("cannot open " + path, errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return io_error("cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return data_loss(path + ": not a regular file");
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < kHeaderBytes) {
    return data_loss(path + ": short file (" + std::to_string(file_bytes) + " bytes, the header is " +
                     std::to_string(kHeaderBytes) + ")");
  }
  Header h;
  FERRY_RETURN_IF_ERROR(read_all(fd.get(), h.data(), h.size(), 0, path));
  Result<DecodedHeader> decoded = decode_header(h);
  if (!decoded.ok()) return data_loss(path + ": " + decoded.status().message());
  const StoredSegment& meta = decoded->meta;
  if (meta.log_id != log_id || meta.segment_id != segment_id) {
    return data_loss(path + ": header is for log " + std::to_string(meta.log_id) + " segment " +
                     std::to_string(meta.segment_id));
  }
  if (meta.bytes > file_bytes - kHeaderBytes) {
    return data_loss(path + ": short file (" + std::to_string(file_bytes) + " bytes, the header says " +
                     std::to_string(meta.bytes) + " data bytes)");
  }
  if (file_bytes > round_up(kHeaderBytes + meta.bytes, kDirectAlignmentBytes)) {
    return data_loss(path + ": " + std::to_string(file_bytes) + " bytes is longer than " + std::to_string(meta.bytes) +
                     " data bytes, even padded for O_DIRECT");
  }
  fd_out->reset(fd.release());
  return decoded;
}

Status fsync_directory(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return io_error("cannot open directory " + dir, errno);
  if (::fsync(fd.get()) != 0) return io_error("cannot fsync directory " + dir, errno);
  return ok_status();
}

// mkdir -p, making each directory it creates durable in its parent.
Status make_directories(const std::string& dir) {
  for (size_t end = 1; end <= dir.size(); ++end) {
    if (end != dir.size() && dir[end] != '/') continue;
    if (dir[end - 1] == '/') continue;  // "//" or a trailing '/'
    const std::string prefix = dir.substr(0, end);
    if (::mkdir(prefix.c_str(), 0755) != 0) {
      if (errno == EEXIST) continue;
      return io_error("cannot create directory " + prefix, errno);
    }
    const size_t slash = prefix.find_last_of('/');
    const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : prefix.substr(0, slash);
    FERRY_RETURN_IF_ERROR(fsync_directory(parent));
  }
  return ok_status();
}

// kDirect only makes sense where O_DIRECT reaches a device.
Status probe_direct(const std::string& dir, int dir_fd, uint8_t* aligned_block) {
  const std::string advice = "; use storage mode fdatasync there";
  struct statfs fs;
  if (::fstatfs(dir_fd, &fs) != 0) return io_error("cannot statfs " + dir, errno);
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
    return invalid_argument("storage directory " + dir +
                            " is in memory (tmpfs/ramfs), where O_DIRECT bypasses no cache and persists nothing" +
                            advice);
  }
  const std::string name(kProbeName);
  Fd fd(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    if (errno == EINVAL) return invalid_argument("storage directory " + dir + " does not accept O_DIRECT" + advice);
    return io_error("cannot create " + dir + "/" + name, errno);
  }
  std::memset(aligned_block, 0, kDirectAlignmentBytes);
  const ssize_t n = ::pwrite(fd.get(), aligned_block, kDirectAlignmentBytes, 0);
  const int err = errno;
  ::unlinkat(dir_fd, name.c_str(), 0);
  if (n == static_cast<ssize_t>(kDirectAlignmentBytes)) return ok_status();
  if (n >= 0 || err == EINVAL) {
    return invalid_argument("storage directory " + dir + " does not accept O_DIRECT writes of " +
                            std::to_string(kDirectAlignmentBytes) + " aligned bytes" + advice);
  }
  return io_error("cannot write " + dir + "/" + name, err);
}

}  // namespace

std::string_view storage_mode_name(StorageMode mode) {
  switch (mode) {
    case StorageMode::kFdatasync:
      return "fdatasync";
    case StorageMode::kDirect:
      return "o_direct";
  }
  return "unknown";
}

Result<StorageMode> parse_storage_mode(std::string_view name) {
  if (name == "fdatasync") return StorageMode::kFdatasync;
  if (name == "o_direct" || name == "direct") return StorageMode::kDirect;
  return invalid_argument("unknown storage mode '" + std::string(name) + "' (fdatasync or o_direct)");
}

void SegmentStore::AlignedDeleter::operator()(uint8_t* p) const { std::free(p); }

SegmentStore::SegmentStore(std::string dir, StorageMode mode, int dir_fd, AlignedBuffer chunk)
    : dir_(std::move(dir)), mode_(mode), dir_fd_(dir_fd), chunk_(std::move(chunk)) {}

SegmentStore::~SegmentStore() { ::close(dir_fd_); }

Result<std::unique_ptr<SegmentStore>> SegmentStore::open(const std::string& dir, StorageMode mode) {
  if (dir.empty()) return invalid_argument("storage directory: empty path");
  if (mode != StorageMode::kFdatasync && mode != StorageMode::kDirect) {
    return invalid_argument("unknown storage mode " + std::to_string(static_cast<int>(mode)));
  }
  FERRY_RETURN_IF_ERROR(make_directories(dir));
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid()) {
    if (errno == ENOTDIR) return invalid_argument("storage directory " + dir + " is not a directory");
    return io_error("cannot open storage directory " + dir, errno);
  }
  AlignedBuffer chunk;
  if (mode == StorageMode::kDirect) {
    chunk.reset(static_cast<uint8_t*>(std::aligned_alloc(kDirectAlignmentBytes, kDirectChunkBytes)));
    if (chunk == nullptr) return resource_exhausted("storage: no memory for the O_DIRECT staging buffer");
    FERRY_RETURN_IF_ERROR(probe_direct(dir, dir_fd.get(), chunk.get()));
  }
  return std::unique_ptr<SegmentStore>(new SegmentStore(dir, mode, dir_fd.release(), std::move(chunk)));
}

std::string SegmentStore::path_of(const std::string& name) const { return dir_ + "/" + name; }

Status SegmentStore::write(const StoredSegment& meta, std::span<const uint8_t> bytes) {
  if (bytes.size() != meta.bytes) {
    return invalid_argument("storage write: " + std::to_string(bytes.size()) + " bytes given, meta.bytes is " +
                            std::to_string(meta.bytes));
  }
  const auto start = std::chrono::steady_clock::now();  // sim-seam: a counter (write_ns), not behaviour
  const Header header = encode_header(meta, crc32c(0, bytes));
  FERRY_DASSERT(decode_header(header).ok(), "a header we encode must decode");
  const std::string name = file_name(meta.log_id, meta.segment_id);
  const std::string temp = name + std::string(kTempSuffix);
  const std::string temp_path = path_of(temp);

  std::lock_guard lock(mutex_);
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (mode_ == StorageMode::kDirect ? O_DIRECT : 0);
  Fd fd(::openat(dir_fd_, temp.c_str(), flags, 0644));
  if (!fd.valid()) return io_error("cannot create " + temp_path, errno);

  // Any failure before the rename leaves the old copy in place; the
  // temporary goes, and after a failed fdatasync its pages cannot be
  // trusted, so a retry writes everything again.
  Status status;
  uint64_t file_bytes = 0;
  if (mode_ == StorageMode::kFdatasync) {
    status = write_all(fd.get(), header.data(), header.size(), 0, temp_path);
    if (status.ok()) {
      status = write_all(fd.get(), bytes.data(), bytes.size(), kHeaderBytes, temp_path, paced_chunk_bytes_);
    }
    file_bytes = kHeaderBytes + bytes.size();
  } else {
    // Header, data and zero padding to the alignment, staged through chunk_.
    const uint64_t data_end = kHeaderBytes + bytes.size();
    file_bytes = round_up(data_end, kDirectAlignmentBytes);
    for (uint64_t offset = 0; status.ok() && offset < file_bytes; offset += kDirectChunkBytes) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(kDirectChunkBytes, file_bytes - offset));
      uint8_t* chunk = chunk_.get();
      copy_overlap(chunk, offset, len, header, 0);
      copy_overlap(chunk, offset, len, bytes, kHeaderBytes);
      if (data_end < offset + len) {
        const size_t pad_from = static_cast<size_t>(std::max(data_end, offset) - offset);
        std::memset(chunk + pad_from, 0, len - pad_from);
      }
      status = write_all(fd.get(), chunk, len, offset, temp_path);
      if (paced_chunk_bytes_ != 0) std::this_thread::yield();  // sim-seam: paces a shared core
    }
  }
  if (status.ok()) {
    // Also for O_DIRECT: the file's size and block allocation are metadata.
    ++counters_.syncs;
    if (::fdatasync(fd.get()) != 0) status = io_error("cannot fdatasync " + temp_path, errno);
  }
  if (status.ok() && ::close(fd.release()) != 0) status = io_error("cannot close " + temp_path, errno);
  if (status.ok() && ::renameat(dir_fd_, temp.c_str(), dir_fd_, name.c_str()) != 0) {
    status = io_error("cannot rename " + temp_path + " to " + name, errno);
  }
  if (!status.ok()) {
    ::unlinkat(dir_fd_, temp.c_str(), 0);
    return status;
  }
  // Until the directory is synced the rename may not survive a crash, so
  // neither may the segment; a caller seeing an error here must not count
  // it as stored.
  ++counters_.syncs;
  if (::fsync(dir_fd_) != 0) return io_error("cannot fsync directory " + dir_, errno);

  counters_.segments_written += 1;
  counters_.bytes_written += file_bytes;
  const auto end = std::chrono::steady_clock::now();  // sim-seam: a counter
  counters_.write_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
  return ok_status();
}

Result<SegmentStore::Loaded> SegmentStore::read(uint64_t log_id, uint64_t segment_id) const {
  const std::string name = file_name(log_id, segment_id);
  const std::string path = path_of(name);
  Fd fd(-1);
  FERRY_ASSIGN_OR_RETURN(DecodedHeader header, open_checked(dir_fd_, name, path, log_id, segment_id, &fd));
  Loaded loaded;
  loaded.meta = header.meta;
  // open_checked() bounded meta.bytes by the file's size.
  loaded.bytes.resize(static_cast<size_t>(header.meta.bytes));
  FERRY_RETURN_IF_ERROR(read_all(fd.get(), loaded.bytes.data(), loaded.bytes.size(), kHeaderBytes, path));
  const uint32_t crc = crc32c(0, loaded.bytes);
  if (crc != header.data_crc) {
    return data_loss(path + ": data CRC mismatch (stored " + std::to_string(header.data_crc) + ", computed " +
                     std::to_string(crc) + ")");
  }
  {
    std::lock_guard lock(mutex_);
    counters_.segments_read += 1;
  }
  return loaded;
}

std::vector<StoredSegment> SegmentStore::list(uint64_t log_id, uint64_t* damaged) const {
  std::vector<StoredSegment> out;
  uint64_t damaged_files = 0;
  // A descriptor of its own: readdir() moves the offset of the open file
  // description, which dir_fd_ shares with no one.
  Fd fd(::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DIR* dir = fd.valid() ? ::fdopendir(fd.get()) : nullptr;
  if (dir != nullptr) {
    fd.release();  // closedir() closes it
    while (const dirent* entry = ::readdir(dir)) {
      uint64_t file_log_id = 0, segment_id = 0;
      if (!parse_file_name(entry->d_name, &file_log_id, &segment_id) || file_log_id != log_id) continue;
      const std::string name(entry->d_name);
      Fd file(-1);
      Result<DecodedHeader> header = open_checked(dir_fd_, name, path_of(name), log_id, segment_id, &file);
      if (header.ok()) {
        out.push_back(header->meta);
      } else if (header.status().code() != Code::kNotFound) {  // not removed since readdir()
        ++damaged_files;
      }
    }
    ::closedir(dir);
  }
  std::sort(out.begin(), out.end(),
            [](const StoredSegment& a, const StoredSegment& b) { return a.segment_id < b.segment_id; });
  if (damaged != nullptr) *damaged = damaged_files;
  return out;
}

Status SegmentStore::remove(uint64_t log_id, uint64_t segment_id) {
  const std::string name = file_name(log_id, segment_id);
  std::lock_guard lock(mutex_);
  if (::unlinkat(dir_fd_, name.c_str(), 0) != 0) {
    if (errno == ENOENT) return not_found("no segment " + path_of(name));
    return io_error("cannot remove " + path_of(name), errno);
  }
  ++counters_.syncs;
  if (::fsync(dir_fd_) != 0) return io_error("cannot fsync directory " + dir_, errno);
  return ok_status();
}

StorageCounters SegmentStore::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace ferry::tailwind
