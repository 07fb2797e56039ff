#include "ferry/nic/types.h"

#include <array>

namespace ferry::nic {

std::string_view qp_state_name(QpState s) {
  switch (s) {
    case QpState::kReset: return "RESET";
    case QpState::kInit: return "INIT";
    case QpState::kRtr: return "RTR";
    case QpState::kRts: return "RTS";
    case QpState::kError: return "ERROR";
  }
  return "?";
}

std::string_view wr_opcode_name(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaWrite: return "RDMA_WRITE";
    case WrOpcode::kRdmaWriteWithImm: return "RDMA_WRITE_WITH_IMM";
    case WrOpcode::kSend: return "SEND";
    case WrOpcode::kSendWithImm: return "SEND_WITH_IMM";
    case WrOpcode::kRdmaRead: return "RDMA_READ";
    case WrOpcode::kAtomicCmpAndSwp: return "ATOMIC_CMP_AND_SWP";
    case WrOpcode::kAtomicFetchAndAdd: return "ATOMIC_FETCH_AND_ADD";
    case WrOpcode::kNop: return "NOP";
    case WrOpcode::kWait: return "WAIT";
    case WrOpcode::kSendEnable: return "SEND_ENABLE";
    case WrOpcode::kRecvEnable: return "RECV_ENABLE";
    case WrOpcode::kFlush: return "FLUSH";
  }
  return "?";
}

std::string_view wc_opcode_name(WcOpcode op) {
  switch (op) {
    case WcOpcode::kSend: return "SEND";
    case WcOpcode::kRdmaWrite: return "RDMA_WRITE";
    case WcOpcode::kRdmaRead: return "RDMA_READ";
    case WcOpcode::kCompSwap: return "COMP_SWAP";
    case WcOpcode::kFetchAdd: return "FETCH_ADD";
    case WcOpcode::kNop: return "NOP";
    case WcOpcode::kWait: return "WAIT";
    case WcOpcode::kSendEnable: return "SEND_ENABLE";
    case WcOpcode::kRecvEnable: return "RECV_ENABLE";
    case WcOpcode::kFlush: return "FLUSH";
    case WcOpcode::kRecv: return "RECV";
    case WcOpcode::kRecvRdmaWithImm: return "RECV_RDMA_WITH_IMM";
  }
  return "?";
}

WcOpcode wc_opcode_for(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm: return WcOpcode::kRdmaWrite;
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm: return WcOpcode::kSend;
    case WrOpcode::kRdmaRead: return WcOpcode::kRdmaRead;
    case WrOpcode::kAtomicCmpAndSwp: return WcOpcode::kCompSwap;
    case WrOpcode::kAtomicFetchAndAdd: return WcOpcode::kFetchAdd;
    case WrOpcode::kNop: return WcOpcode::kNop;
    case WrOpcode::kWait: return WcOpcode::kWait;
    case WrOpcode::kSendEnable: return WcOpcode::kSendEnable;
    case WrOpcode::kRecvEnable: return WcOpcode::kRecvEnable;
    case WrOpcode::kFlush: return WcOpcode::kFlush;
  }
  return WcOpcode::kSend;
}

std::string_view wc_status_name(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess: return "SUCCESS";
    case WcStatus::kLocLenErr: return "LOC_LEN_ERR";
    case WcStatus::kLocQpOpErr: return "LOC_QP_OP_ERR";
    case WcStatus::kLocProtErr: return "LOC_PROT_ERR";
    case WcStatus::kWrFlushErr: return "WR_FLUSH_ERR";
    case WcStatus::kRemInvReqErr: return "REM_INV_REQ_ERR";
    case WcStatus::kRemAccessErr: return "REM_ACCESS_ERR";
    case WcStatus::kRemOpErr: return "REM_OP_ERR";
    case WcStatus::kRetryExcErr: return "RETRY_EXC_ERR";
    case WcStatus::kRnrRetryExcErr: return "RNR_RETRY_EXC_ERR";
    case WcStatus::kGeneralErr: return "GENERAL_ERR";
  }
  return "?";
}

std::string_view async_event_name(AsyncEventType t) {
  switch (t) {
    case AsyncEventType::kCqError: return "CQ_ERR";
    case AsyncEventType::kQpFatal: return "QP_FATAL";
    case AsyncEventType::kSrqLimitReached: return "SRQ_LIMIT_REACHED";
    case AsyncEventType::kQpLastWqeReached: return "QP_LAST_WQE_REACHED";
    case AsyncEventType::kDeviceFatal: return "DEVICE_FATAL";
  }
  return "?";
}

uint64_t ack_timeout_ns(uint8_t code) {
  if (code == 0) return 0;
  if (code > 31) code = 31;
  return 4096ULL << code;  // 4.096 us * 2^code
}

uint64_t rnr_timer_ns(uint8_t code) {
  // IBTA Vol. 1 Table 45, in units of 10 us (code 0 = 655.36 ms).
  static constexpr std::array<uint32_t, 32> kTens = {
      65536, 1,    2,    3,    4,    6,    8,    12,   16,    24,    32,    48,    64,    96,    128,   192,
      256,   384,  512,  768,  1024, 1536, 2048, 3072, 4096,  6144,  8192,  12288, 16384, 24576, 32768, 49152};
  return static_cast<uint64_t>(kTens[code & 31]) * 10'000ULL;
}

uint64_t QpTraffic::total_packets() const {
  uint64_t n = 0;
  for (uint64_t v : packets) n += v;
  return n;
}

uint64_t QpTraffic::total_bytes() const {
  uint64_t n = 0;
  for (int k = 0; k < kPacketKinds; ++k) n += header_bytes[k] + payload_bytes[k];
  return n;
}

}  // namespace ferry::nic
