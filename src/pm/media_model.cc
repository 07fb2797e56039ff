// The PM controller's write-combining buffer and media accounting.
#include <algorithm>

#include "state.h"

namespace ferry::pm::detail {

MediaModel::MediaModel(size_t xplines)
    : ids_(std::max<size_t>(xplines, 1), UINT64_MAX), masks_(ids_.size(), 0), stamps_(ids_.size(), 0) {}

size_t MediaModel::slot_for(uint64_t xpline) {
  if (ids_[last_] == xpline) return last_;  // sequential writes hit the same XPLine
  const auto it = std::find(ids_.begin(), ids_.end(), xpline);
  if (it != ids_.end()) return last_ = static_cast<size_t>(it - ids_.begin());
  // Miss: take a free slot, or evict the least recently used one.
  size_t victim = 0;
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (ids_[i] == UINT64_MAX) {
      victim = i;
      break;
    }
    if (stamps_[i] < stamps_[victim]) victim = i;
  }
  if (ids_[victim] != UINT64_MAX) evict(victim);
  ids_[victim] = xpline;
  masks_[victim] = 0;
  return last_ = victim;
}

void MediaModel::evict(size_t slot) {
  if (masks_[slot] != 0xF) {
    // Partly written: the media must read the XPLine to merge it.
    ++counters.xpline_rmw;
    counters.media_bytes_read += kXpLine;
  }
  counters.media_bytes_written += kXpLine;
  ids_[slot] = UINT64_MAX;
  masks_[slot] = 0;
}

void MediaModel::write_line(uint64_t line) {
  ++counters.write_requests;
  const size_t slot = slot_for(line / 4);
  masks_[slot] |= static_cast<uint8_t>(1u << (line % 4));
  stamps_[slot] = ++clock_;
}

void MediaModel::read_line(uint64_t line) {
  ++counters.read_requests;
  // A read of a line the buffer holds is served there; otherwise from media.
  if (std::find(ids_.begin(), ids_.end(), line / 4) == ids_.end()) counters.media_bytes_read += kXpLine;
}

void MediaModel::settle() {
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (ids_[i] != UINT64_MAX) evict(i);
  }
}

}  // namespace ferry::pm::detail
