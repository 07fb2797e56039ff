// Submission: each group operation becomes one message down its chain --
// a descriptor per replica (what its NIC will do: layout.h) in the
// operation's ring slot -- and, for a gWRITE, the data WRITE into replica
// 0's region and the flush before the message. The replicas' NICs carry it
// from there (docs/hyperloop.md, "Data path").
#include <algorithm>
#include <cstring>
#include <iterator>
#include <span>
#include <string>

#include "client_impl.h"
#include "ferry/common/assert.h"

namespace ferry::hyperloop {

using detail::Chain;
using detail::kDescBytes;
using nic::SendWr;
using nic::Sge;
using nic::WrOpcode;

namespace {

// Every descriptor the client sends holds only its slots' opcodes
// (layout.h, opcode_allowed): the replicas run whatever byte arrives.
void check_opcodes(const Group& g, Chain c, uint8_t op, uint8_t flush_op) {
  FERRY_ASSERT(detail::opcode_allowed(c, detail::OpcodeField::kData, g.options.flush_verb, op) &&
                   detail::opcode_allowed(c, detail::OpcodeField::kFlush, g.options.flush_verb, flush_op),
               "hyperloop: a descriptor with an opcode its slot may not hold");
}

// The next operation on chain `c` of g: its chain, its index on the chain
// (the tail acknowledges it with this immediate) and its message slot.
struct NextOperation {
  ClientChain& ch;
  uint64_t k;
  uint8_t* msg;
};
NextOperation next_operation(Group& g, Chain c) {
  ClientChain& ch = g.chains[static_cast<int>(c)];
  return {ch, ch.next, ch.meta + (ch.next % g.options.ring_ops) * ch.meta_stride};
}

}  // namespace

Status HyperLoopClient::Impl::send_message(Group& g, ClientChain& ch, uint8_t* msg, Primitive hooked,
                                           std::span<const SendWr> before, bool fence) {
  const Sge msg_sge{g.buf_iova(msg), detail::message_bytes(ch.chain, g.n, 0), g.buf_mr->lkey()};
  if (message_hook) message_hook(hooked, {msg, msg_sge.length});
  SendWr wrs[3];
  FERRY_ASSERT(before.size() < std::size(wrs), "hyperloop: at most two WRs go before a message");
  std::copy(before.begin(), before.end(), wrs);
  SendWr& send = wrs[before.size()];
  send.opcode = WrOpcode::kSend;
  send.wr_id = ch.next;
  send.flags = static_cast<uint8_t>(nic::kSendSignaled | (fence ? nic::kSendFence : 0));
  send.sg_list = std::span<const Sge>(&msg_sge, 1);
  return ch.head->post_send(std::span<const SendWr>(wrs, before.size() + 1));
}

Status HyperLoopClient::Impl::acquire(Group& g, ClientChain& ch) {
  if (!g.failed.ok()) return failed_precondition("group " + std::to_string(g.id) + " failed: " + g.failed.message());
  auto room = [&] { return !g.failed.ok() || ch.next - ch.acked < g.options.window; };
  if (!room()) {
    ++stats.window_waits;
    FERRY_RETURN_IF_ERROR(self->wait_until(room));
  }
  if (!g.failed.ok()) return failed_precondition("group " + std::to_string(g.id) + " failed: " + g.failed.message());
  return ok_status();
}

void HyperLoopClient::Impl::record(Group& g, ClientChain& ch, Primitive p, Callback done, uint8_t execute_map,
                                   uint64_t old_value, int32_t join, bool flushes) {
  Pending& slot = ch.pending[ch.next % g.options.ring_ops];
  slot.group_seq = g.next_seq++;
  slot.primitive = p;
  slot.done = std::move(done);
  slot.execute_map = execute_map;
  slot.old_value = old_value;
  slot.join = join;
  ++ch.next;
  // A flush on a chain drains everything before it on that chain.
  ch.dirty = !flushes;
}

Status HyperLoopClient::Impl::post_write(Group& g, uint64_t offset, uint32_t size, bool data, bool flush) {
  const auto [ch, k, msg] = next_operation(g, Chain::kWrite);
  const uint32_t n = g.n;
  for (uint32_t i = 0; i < n; ++i) {
    detail::CopyDesc desc{};
    desc.imm = static_cast<uint32_t>(k);
    if (i + 1 < n) {
      desc.op = static_cast<uint8_t>(data ? WrOpcode::kRdmaWrite : WrOpcode::kNop);
      desc.flush_op = static_cast<uint8_t>(flush ? g.flush_opcode() : WrOpcode::kNop);
      desc.remote_addr = g.replica_iova[i + 1] + offset;
      desc.local_addr = g.replica_iova[i] + offset;
      desc.length = size;
      check_opcodes(g, Chain::kWrite, desc.op, desc.flush_op);
    }  // the tail's op bytes go to its discard scratch
    std::memcpy(msg + i * kDescBytes, &desc, kDescBytes);
  }
  // The data into replica 0's region, and the flush the message is fenced
  // behind, on the head QP before the message.
  SendWr before[2];
  uint32_t count = 0;
  const Sge data_sge = g.client_mr->sge(offset, size);
  if (data) {
    before[count].opcode = WrOpcode::kRdmaWrite;
    before[count].sg_list = std::span<const Sge>(&data_sge, 1);
    before[count].remote_addr = g.replica_iova[0] + offset;
    before[count].rkey = g.head_rkey;
    ++count;
  }
  if (flush) {
    SendWr& f = before[count++];
    f.opcode = g.flush_opcode();
    f.remote_addr = g.replica_iova[0];
    f.rkey = g.head_rkey;
    f.flush_persistent = true;
    f.flush_whole_mr = true;
  }
  return send_message(g, ch, msg, data ? Primitive::kWrite : Primitive::kFlush, std::span<const SendWr>(before, count),
                      /*fence=*/flush);
}

Status HyperLoopClient::Impl::post_cas(Group& g, uint64_t offset, uint64_t old_value, uint64_t new_value, uint8_t map,
                                       bool flush) {
  const auto [ch, k, msg] = next_operation(g, Chain::kCas);
  const uint32_t n = g.n;
  for (uint32_t i = 0; i < n; ++i) {
    detail::CasDesc desc{};
    desc.op = static_cast<uint8_t>((map >> i) & 1 ? WrOpcode::kAtomicCmpAndSwp : WrOpcode::kNop);
    desc.flush_op = static_cast<uint8_t>(flush ? g.flush_opcode() : WrOpcode::kNop);
    desc.imm = static_cast<uint32_t>(k);
    desc.target = g.replica_iova[i] + offset;
    desc.compare = old_value;
    desc.swap = new_value;
    check_opcodes(g, Chain::kCas, desc.op, desc.flush_op);
    std::memcpy(msg + i * kDescBytes, &desc, kDescBytes);
  }
  std::memset(msg + n * kDescBytes, 0, 8 * n);  // the result map, filled in along the chain
  return send_message(g, ch, msg, map != 0 || !flush ? Primitive::kCas : Primitive::kFlush, {}, /*fence=*/false);
}

Status HyperLoopClient::Impl::post_memcpy(Group& g, uint64_t src, uint64_t dst, uint32_t size, bool copy, bool flush) {
  const auto [ch, k, msg] = next_operation(g, Chain::kMemcpy);
  const uint32_t n = g.n;
  for (uint32_t i = 0; i < n; ++i) {
    detail::CopyDesc desc{};
    desc.op = static_cast<uint8_t>(copy ? WrOpcode::kRdmaWrite : WrOpcode::kNop);
    desc.flush_op = static_cast<uint8_t>(flush ? g.flush_opcode() : WrOpcode::kNop);
    desc.imm = static_cast<uint32_t>(k);
    desc.remote_addr = g.replica_iova[i] + dst;
    desc.local_addr = g.replica_iova[i] + src;
    desc.length = size;
    check_opcodes(g, Chain::kMemcpy, desc.op, desc.flush_op);
    std::memcpy(msg + i * kDescBytes, &desc, kDescBytes);
  }
  return send_message(g, ch, msg, copy ? Primitive::kMemcpy : Primitive::kFlush, {}, /*fence=*/false);
}

Status HyperLoopClient::Impl::post_flush_only(Group& g, ClientChain& ch) {
  switch (ch.chain) {
    case Chain::kWrite:
      return post_write(g, 0, 0, /*data=*/false, /*flush=*/true);
    case Chain::kCas:
      return post_cas(g, 0, 0, 0, /*map=*/0, /*flush=*/true);
    case Chain::kMemcpy:
      return post_memcpy(g, 0, 0, 0, /*copy=*/false, /*flush=*/true);
  }
  return internal_error("unknown chain");
}

}  // namespace ferry::hyperloop
