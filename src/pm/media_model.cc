// The PM controller's write-combining buffer and media accounting.
#include <algorithm>
#include <bit>

#include "state.h"

namespace ferry::pm::detail {

MediaModel::MediaModel(size_t xplines) {
  const size_t n = std::max<size_t>(xplines, 1);
  ids_.assign(n, UINT64_MAX);
  masks_.assign(n, 0);
  prev_.assign(n, kNone);
  next_.assign(n, kNone);
  free_.reserve(n);
  for (size_t i = n; i > 0; --i) free_.push_back(static_cast<uint32_t>(i - 1));
  size_t cap = 4;
  while (cap < 4 * n) cap *= 2;
  keys_.assign(cap, UINT64_MAX);
  vals_.assign(cap, kNone);
  shift_ = 64 - std::countr_zero(cap);
}

uint32_t MediaModel::find(uint64_t xpline) const {
  const size_t mask = keys_.size() - 1;
  for (size_t i = home(xpline);; i = (i + 1) & mask) {
    if (keys_[i] == xpline) return vals_[i];
    if (keys_[i] == UINT64_MAX) return kNone;
  }
}

void MediaModel::index_insert(uint64_t xpline, uint32_t slot) {
  const size_t mask = keys_.size() - 1;
  size_t i = home(xpline);
  while (keys_[i] != UINT64_MAX) i = (i + 1) & mask;
  keys_[i] = xpline;
  vals_[i] = slot;
}

void MediaModel::index_erase(uint64_t xpline) {
  const size_t mask = keys_.size() - 1;
  size_t i = home(xpline);
  while (keys_[i] != xpline) i = (i + 1) & mask;
  // Backward-shift: pull later entries of the probe run into the hole.
  for (size_t j = (i + 1) & mask; keys_[j] != UINT64_MAX; j = (j + 1) & mask) {
    const size_t h = home(keys_[j]);
    // Entry j may move to i if its home is not in the (cyclic) range (i, j].
    const bool stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
    if (stays) continue;
    keys_[i] = keys_[j];
    vals_[i] = vals_[j];
    i = j;
  }
  keys_[i] = UINT64_MAX;
  vals_[i] = kNone;
}

void MediaModel::lru_unlink(uint32_t slot) {
  if (prev_[slot] != kNone) next_[prev_[slot]] = next_[slot]; else head_ = next_[slot];
  if (next_[slot] != kNone) prev_[next_[slot]] = prev_[slot]; else tail_ = prev_[slot];
  prev_[slot] = next_[slot] = kNone;
}

void MediaModel::lru_push_front(uint32_t slot) {
  prev_[slot] = kNone;
  next_[slot] = head_;
  if (head_ != kNone) prev_[head_] = slot;
  head_ = slot;
  if (tail_ == kNone) tail_ = slot;
}

uint32_t MediaModel::slot_for(uint64_t xpline) {
  if (last_ != kNone && ids_[last_] == xpline) return last_;  // sequential writes hit the same XPLine
  uint32_t slot = find(xpline);
  if (slot == kNone) {
    // Miss: take a free slot, or evict the least recently used one.
    if (free_.empty()) evict(tail_);
    slot = free_.back();
    free_.pop_back();
    ids_[slot] = xpline;
    masks_[slot] = 0;
    index_insert(xpline, slot);
    lru_push_front(slot);
  }
  return last_ = slot;
}

void MediaModel::evict(uint32_t slot) {
  if (masks_[slot] != 0xF) {
    // Partly written: the media must read the XPLine to merge it.
    ++counters.xpline_rmw;
    counters.media_bytes_read += kXpLine;
  }
  counters.media_bytes_written += kXpLine;
  index_erase(ids_[slot]);
  lru_unlink(slot);
  ids_[slot] = UINT64_MAX;
  masks_[slot] = 0;
  free_.push_back(slot);
  if (last_ == slot) last_ = kNone;
}

void MediaModel::write_line(uint64_t line) {
  ++counters.write_requests;
  const uint32_t slot = slot_for(line / 4);
  masks_[slot] |= static_cast<uint8_t>(1u << (line % 4));
  if (head_ != slot) {  // most recently used
    lru_unlink(slot);
    lru_push_front(slot);
  }
}

void MediaModel::read_line(uint64_t line) {
  ++counters.read_requests;
  // A read of a line the buffer holds is served there; otherwise from media.
  if (find(line / 4) == kNone) counters.media_bytes_read += kXpLine;
}

void MediaModel::settle() {
  for (uint32_t i = 0; i < ids_.size(); ++i) {
    if (ids_[i] != UINT64_MAX) evict(i);
  }
}

}  // namespace ferry::pm::detail
