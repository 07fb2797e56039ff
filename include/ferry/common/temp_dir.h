// New directories and files of this process's own, for state that must start empty.
//
// Never name such a directory by the pid alone: a process that dies without
// removing its files leaves them behind, pids are reused, and a later process
// would open the dead one's files and start from their bytes.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "ferry/common/status.h"

namespace ferry {

// Creates `base`/`stem`-XXXXXX (mkdtemp: a name no existing entry has) and
// returns its path. kNotFound if `base` does not exist, kPermissionDenied if
// it cannot be written, kUnavailable otherwise; the message names the path.
Result<std::string> make_temp_dir(const std::filesystem::path& base, std::string_view stem);

// Creates an empty file `dir`/`stem`-XXXXXX`suffix` (mkstemps, O_EXCL: never
// one that exists) and returns its path; errors as make_temp_dir's.
Result<std::string> make_temp_file(const std::filesystem::path& dir, std::string_view stem, std::string_view suffix);

// make_temp_dir under $TMPDIR (or /tmp).
inline Result<std::string> make_temp_dir(std::string_view stem) {
  return make_temp_dir(std::filesystem::temp_directory_path(), stem);
}

}  // namespace ferry
