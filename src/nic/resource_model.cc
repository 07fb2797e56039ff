// The modeled QP-context cache (NicResourceModel): an LRU over QP indices,
// O(1) per lookup, so that counting it costs the engine little. Counters
// only: a miss does not slow anything down.
#include "nic_core.h"

namespace ferry::nic::detail {

QpContextCache::QpContextCache(uint32_t entries, uint32_t qp_slots)
    : capacity_(entries), slot_of_(entries ? qp_slots : 0, -1), qp_of_(entries), prev_(entries, -1),
      next_(entries, -1) {}

bool QpContextCache::touch(uint32_t qp_index) {
  int32_t slot = slot_of_[qp_index];
  if (slot >= 0) {
    unlink(slot);
    push_front(slot);
    return true;
  }
  if (used_ < capacity_) {
    slot = static_cast<int32_t>(used_++);
  } else {
    slot = tail_;  // evict the least recently used context
    unlink(slot);
    if (qp_of_[slot] != kNoQp) slot_of_[qp_of_[slot]] = -1;
  }
  qp_of_[slot] = qp_index;
  slot_of_[qp_index] = slot;
  push_front(slot);
  return false;
}

void QpContextCache::forget(uint32_t qp_index) {
  if (capacity_ == 0) return;
  const int32_t slot = slot_of_[qp_index];
  if (slot < 0) return;
  // The slot stays in the list as the coldest, holding no QP.
  slot_of_[qp_index] = -1;
  qp_of_[slot] = kNoQp;
  unlink(slot);
  if (tail_ >= 0) {
    next_[tail_] = slot;
    prev_[slot] = tail_;
  } else {
    head_ = slot;
  }
  tail_ = slot;
}

void QpContextCache::unlink(int32_t slot) {
  if (prev_[slot] >= 0) next_[prev_[slot]] = next_[slot]; else if (head_ == slot) head_ = next_[slot];
  if (next_[slot] >= 0) prev_[next_[slot]] = prev_[slot]; else if (tail_ == slot) tail_ = prev_[slot];
  prev_[slot] = next_[slot] = -1;
}

void QpContextCache::push_front(int32_t slot) {
  prev_[slot] = -1;
  next_[slot] = head_;
  if (head_ >= 0) prev_[head_] = slot;
  head_ = slot;
  if (tail_ < 0) tail_ = slot;
}

void NicCore::model_qp_context(const QpCore* qp) {
  if (!qpc_cache_.enabled()) return;
  counters_.modeled_qpc_lookups.inc();
  if (!qpc_cache_.touch(qp->qpn & ((1u << qp_index_bits_) - 1))) counters_.modeled_qpc_misses.inc();
}

}  // namespace ferry::nic::detail
