#include "layout.h"

#include <bit>

#include "ferry/common/assert.h"

namespace ferry::hyperloop::detail {

using nic::WrOpcode;

const char* chain_name(Chain c) {
  switch (c) {
    case Chain::kWrite: return "write";
    case Chain::kCas: return "cas";
    case Chain::kMemcpy: return "memcpy";
  }
  return "?";
}

bool opcode_allowed(Chain c, OpcodeField field, bool flush_verb, uint8_t opcode) {
  const auto op = static_cast<WrOpcode>(opcode);
  if (op == WrOpcode::kNop) return true;
  if (field == OpcodeField::kFlush) return op == (flush_verb ? WrOpcode::kFlush : WrOpcode::kRdmaRead);
  return op == (c == Chain::kCas ? WrOpcode::kAtomicCmpAndSwp : WrOpcode::kRdmaWrite);
}

ChainShape chain_shape(Chain c, bool tail) {
  switch (c) {
    case Chain::kWrite:
      // Non-tail: [WRITE|NOP] [READ|FLUSH|NOP] [SEND, fenced] [NOP pad to a
      // power of two, so every ring slot always holds the same kind of WQE].
      // Tail: [WRITE_WITH_IMM to the client]. Control: WAIT, SEND_ENABLE and
      // their two re-arms.
      return tail ? ChainShape{1, 0, 2, 4} : ChainShape{4, 0, 2, 4};
    case Chain::kCas:
    case Chain::kMemcpy:
      // Loopback: [CAS|WRITE|NOP] [READ|FLUSH|NOP, signaled]; down: [SEND] or
      // the tail's [WRITE_WITH_IMM]. Control: WAIT, SEND_ENABLE, WAIT,
      // SEND_ENABLE and their four re-arms.
      return ChainShape{1, 2, 4, 8};
  }
  return {};
}

uint32_t message_bytes(Chain c, uint32_t n, uint32_t i) {
  FERRY_ASSERT(i < n, "replica index beyond the chain");
  const uint32_t descs = (n - i) * kDescBytes;
  return c == Chain::kCas ? descs + 8 * n : descs;
}

uint32_t result_offset_in_forward(uint32_t n, uint32_t i) { return (n - i - 1) * kDescBytes + 8 * i; }

uint32_t forward_stride(Chain c, uint32_t n) {
  const uint32_t max = message_bytes(c, n, 0);
  return (max + 63) / 64 * 64;
}

uint32_t ctl_depth(Chain c, uint32_t ring_ops) { return chain_shape(c, false).ctl_per_op * ring_ops; }

namespace {

// The WAITs and ENABLEs of operation k's block, in order.
uint32_t waits_and_enables(Chain c, bool tail, uint64_t k, CtlWqe* out) {
  const ChainShape shape = chain_shape(c, tail);
  uint32_t n = 0;
  out[n++] = {WrOpcode::kWait, CtlTarget::kRecvCq, k + 1};
  if (shape.loop_per_op != 0) {
    out[n++] = {WrOpcode::kSendEnable, CtlTarget::kLoop, shape.loop_per_op * (k + 1)};
    out[n++] = {WrOpcode::kWait, CtlTarget::kLoopCq, k + 1};
  }
  out[n++] = {WrOpcode::kSendEnable, CtlTarget::kDown, shape.down_per_op * (k + 1)};
  FERRY_ASSERT(n == shape.ctl_waits_enables, "control block size mismatch");
  return n;
}

}  // namespace

std::array<CtlWqe, kMaxCtlPerOp> ctl_block(Chain c, bool tail, uint32_t ring_ops, uint64_t k) {
  const ChainShape shape = chain_shape(c, tail);
  FERRY_ASSERT(2 * shape.ctl_waits_enables <= shape.ctl_per_op && shape.ctl_per_op <= kMaxCtlPerOp,
               "control block does not fit its slots");
  std::array<CtlWqe, kMaxCtlPerOp> b{};
  std::array<CtlWqe, kMaxCtlPerOp> next_lap{};
  const uint32_t n = waits_and_enables(c, tail, k, b.data());
  waits_and_enables(c, tail, k + ring_ops, next_lap.data());
  for (uint32_t j = 0; j < n; ++j) {
    // The same slot holds operation k + ring_ops's WQE next lap: the index
    // grows by a constant, whatever k is.
    b[n + j] = {WrOpcode::kAtomicFetchAndAdd, CtlTarget::kCtlRing, next_lap[j].index - b[j].index, j};
  }
  for (uint32_t j = 2 * n; j < shape.ctl_per_op; ++j) b[j] = {WrOpcode::kNop, CtlTarget::kNone, 0, 0};
  return b;
}

ScatterPlan scatter_plan(Chain c, uint32_t n, uint32_t i, uint32_t slot, const ScatterTargets& t) {
  const bool tail = i + 1 == n;
  const ChainShape shape = chain_shape(c, tail);
  ScatterPlan p;
  auto add = [&p](uint64_t addr, uint32_t len) {
    FERRY_ASSERT(p.count < p.sges.size(), "scatter plan too long");
    p.sges[p.count++] = nic::Sge{addr, len, 0};
    p.total += len;
  };
  // The WQEs of this slot's operation. The down ring has down_per_op WQEs
  // per slot, the loopback ring loop_per_op.
  const uint64_t down0 = t.down_ring + static_cast<uint64_t>(slot) * shape.down_per_op * kWqeBytes;
  const uint64_t loop0 = t.loop_ring + static_cast<uint64_t>(slot) * shape.loop_per_op * kWqeBytes;
  const uint64_t loop1 = loop0 + kWqeBytes;
  const uint32_t rest = message_bytes(c, n, i) - kDescBytes;  // what goes on down the chain

  if (c == Chain::kWrite) {
    if (!tail) {
      const uint64_t w0 = down0;               // WRITE | NOP
      const uint64_t w1 = down0 + kWqeBytes;   // READ | FLUSH | NOP
      add(w0 + kOpcodeField, 1);               // op
      add(w1 + kOpcodeField, 1);               // flush_op
      add(t.discard, 6);                       // reserved0, imm
      add(w0 + kRemoteAddrField, 8);           // remote_addr
      add(w0 + kSgeAddrLenField, 12);          // local_addr, length
      add(t.discard, 4);                       // reserved1
      if (rest != 0) add(t.forward, rest);
    } else {
      add(t.discard, 4);                       // op, flush_op, reserved0
      add(down0 + kImmField, 4);               // imm -> WRITE_WITH_IMM
      add(t.discard, 24);
    }
  } else if (c == Chain::kMemcpy) {
    add(loop0 + kOpcodeField, 1);
    add(loop1 + kOpcodeField, 1);
    if (tail) {
      add(t.discard, 2);
      add(down0 + kImmField, 4);
    } else {
      add(t.discard, 6);
    }
    add(loop0 + kRemoteAddrField, 8);          // destination
    add(loop0 + kSgeAddrLenField, 12);         // source, length
    add(t.discard, 4);
    if (rest != 0) add(t.forward, rest);
  } else {
    add(loop0 + kOpcodeField, 1);              // CAS | NOP
    add(loop1 + kOpcodeField, 1);
    if (tail) {
      add(t.discard, 2);
      add(down0 + kImmField, 4);
    } else {
      add(t.discard, 6);
    }
    add(loop0 + kRemoteAddrField, 8);          // target
    add(loop0 + kCompareSwapField, 16);        // compare, swap
    add(t.forward, rest);                      // later descriptors + result map
  }
  FERRY_ASSERT(p.total == message_bytes(c, n, i), "scatter plan does not cover the message");
  return p;
}

}  // namespace ferry::hyperloop::detail
