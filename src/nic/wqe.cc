// Encoding and decoding of WQEs (docs/wqe-format.md).
#include "ferry/nic/wqe.h"

#include <algorithm>

#include "ferry/common/assert.h"

namespace ferry::nic {

uint32_t send_wqe_stride(uint32_t max_send_sge, uint32_t max_inline_data) {
  const size_t body = std::max<size_t>(static_cast<size_t>(std::max<uint32_t>(max_send_sge, 1)) * sizeof(WqeDataSeg),
                                       max_inline_data);
  uint32_t stride = kSendWqeBasicBlock;
  while (stride < kWqeDataOffset + body) stride <<= 1;
  return stride;
}

uint32_t recv_wqe_stride(uint32_t max_recv_sge) {
  const size_t need = kRecvWqeDataOffset + static_cast<size_t>(std::max<uint32_t>(max_recv_sge, 1)) * sizeof(WqeDataSeg);
  uint32_t stride = 32;
  while (stride < need) stride <<= 1;
  return stride;
}

WqeError decode_send_wqe(std::span<const uint8_t> slot, uint32_t max_sge, uint32_t max_inline,
                         DecodedSendWqe* out) {
  FERRY_DASSERT(slot.size() >= kSendWqeBasicBlock);
  WqeCtrlSeg ctrl;
  std::memcpy(&ctrl, slot.data() + kWqeCtrlOffset, sizeof(ctrl));
  std::memcpy(&out->remote, slot.data() + kWqeRemoteOffset, sizeof(out->remote));
  std::memcpy(&out->atomic, slot.data() + kWqeAtomicOffset, sizeof(out->atomic));
  out->wr_id = ctrl.wr_id;
  out->imm_data = ctrl.imm_data;
  out->flags = ctrl.flags;
  out->num_ds = ctrl.num_ds;
  out->data = slot.data() + kWqeDataOffset;
  out->opcode = static_cast<WrOpcode>(ctrl.opcode);
  if (ctrl.opcode == kWrOpcodeEmpty) return WqeError::kEmpty;
  if (!valid_wr_opcode(ctrl.opcode)) return WqeError::kBadOpcode;
  if (ctrl.flags & ~(kSendSignaled | kSendFence | kSendSolicited | kSendInline)) return WqeError::kBadFlags;
  const size_t room = slot.size() - kWqeDataOffset;
  if (ctrl.flags & kSendInline) {
    if (ctrl.num_ds > max_inline || ctrl.num_ds > room) return WqeError::kInlineTooLong;
  } else {
    if (ctrl.num_ds > max_sge || static_cast<size_t>(ctrl.num_ds) * sizeof(WqeDataSeg) > room) {
      return WqeError::kTooManySge;
    }
  }
  return WqeError::kNone;
}

void encode_send_wqe(const SendWr& wr, uint32_t wait_cq_number, uint32_t enable_qp_number,
                     std::span<uint8_t> slot) {
  WqeCtrlSeg ctrl{};
  ctrl.opcode = static_cast<uint8_t>(wr.opcode);
  ctrl.flags = wr.flags;
  ctrl.imm_data = wr.imm_data;
  ctrl.wr_id = wr.wr_id;
  WqeRemoteSeg remote{};
  WqeAtomicSeg atomic{};
  switch (wr.opcode) {
    case WrOpcode::kWait:
      remote.remote_addr = wr.index;
      remote.rkey = wait_cq_number;
      break;
    case WrOpcode::kSendEnable:
    case WrOpcode::kRecvEnable:
      remote.remote_addr = wr.index;
      remote.rkey = enable_qp_number;
      break;
    case WrOpcode::kFlush:
      remote.remote_addr = wr.remote_addr;
      remote.rkey = wr.rkey;
      remote.aux = (wr.flush_persistent ? 1u : 0u) | (wr.flush_whole_mr ? 2u : 0u);
      atomic.compare_add = wr.flush_length;
      break;
    default:
      remote.remote_addr = wr.remote_addr;
      remote.rkey = wr.rkey;
      atomic.compare_add = wr.compare_add;
      atomic.swap = wr.swap;
      break;
  }
  uint8_t* data = slot.data() + kWqeDataOffset;
  if (wr.flags & kSendInline) {
    size_t off = 0;
    for (const Sge& sge : wr.sg_list) {
      std::memcpy(data + off, reinterpret_cast<const void*>(sge.addr), sge.length);
      off += sge.length;
    }
    ctrl.num_ds = static_cast<uint16_t>(off);
  } else {
    ctrl.num_ds = static_cast<uint16_t>(wr.sg_list.size());
    for (size_t i = 0; i < wr.sg_list.size(); ++i) {
      const WqeDataSeg seg{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
      std::memcpy(data + i * sizeof(WqeDataSeg), &seg, sizeof(seg));
    }
  }
  std::memcpy(slot.data() + kWqeRemoteOffset, &remote, sizeof(remote));
  std::memcpy(slot.data() + kWqeAtomicOffset, &atomic, sizeof(atomic));
  std::memcpy(slot.data() + kWqeCtrlOffset, &ctrl, sizeof(ctrl));
}

WqeError decode_recv_wqe(std::span<const uint8_t> slot, uint32_t max_sge, DecodedRecvWqe* out) {
  if (slot.size() < sizeof(RecvWqeHeader)) return WqeError::kTooManySge;
  RecvWqeHeader hdr;
  std::memcpy(&hdr, slot.data(), sizeof(hdr));
  out->wr_id = hdr.wr_id;
  out->num_sge = hdr.num_sge;
  out->sges = slot.data() + kRecvWqeDataOffset;
  if (!(hdr.flags & kRecvWqePosted)) return WqeError::kEmpty;
  if (hdr.num_sge > max_sge ||
      kRecvWqeDataOffset + static_cast<size_t>(hdr.num_sge) * sizeof(WqeDataSeg) > slot.size()) {
    return WqeError::kTooManySge;
  }
  return WqeError::kNone;
}

void encode_recv_wqe(const RecvWr& wr, std::span<uint8_t> slot) {
  RecvWqeHeader hdr{};
  hdr.wr_id = wr.wr_id;
  hdr.num_sge = static_cast<uint16_t>(wr.sg_list.size());
  hdr.flags = kRecvWqePosted;
  std::memcpy(slot.data(), &hdr, sizeof(hdr));
  for (size_t i = 0; i < wr.sg_list.size(); ++i) {
    const WqeDataSeg seg{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
    std::memcpy(slot.data() + kRecvWqeDataOffset + i * sizeof(WqeDataSeg), &seg, sizeof(seg));
  }
}

}  // namespace ferry::nic
