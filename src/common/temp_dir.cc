#include "ferry/common/temp_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ferry {

namespace {

Status creation_failed(const std::string& path, int err) {
  std::string what = "cannot create " + path + ": " + std::strerror(err);
  if (err == ENOENT || err == ENOTDIR) return not_found(std::move(what));
  if (err == EACCES || err == EPERM || err == EROFS) return permission_denied(std::move(what));
  return unavailable(std::move(what));
}

}  // namespace

Result<std::string> make_temp_dir(const std::filesystem::path& base, std::string_view stem) {
  std::string pattern = (base / (std::string(stem) + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) return creation_failed(pattern, errno);
  return pattern;
}

Result<std::string> make_temp_file(const std::filesystem::path& dir, std::string_view stem, std::string_view suffix) {
  std::string pattern = (dir / (std::string(stem) + "-XXXXXX" + std::string(suffix))).string();
  const int fd = ::mkstemps(pattern.data(), static_cast<int>(suffix.size()));
  if (fd < 0) return creation_failed(pattern, errno);
  ::close(fd);
  return pattern;
}

}  // namespace ferry
