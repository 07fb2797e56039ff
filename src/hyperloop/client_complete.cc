// Completion: the tail's WRITE_WITH_IMM into the client's acknowledgement
// slot completes the chain's oldest operation (imm = its index on the
// chain; a gCAS's result map arrives in the slot); a gflush completes when
// its last flush-only operation does. Any failure fails the whole group.
#include <iterator>
#include <string>
#include <string_view>

#include "client_impl.h"

namespace ferry::hyperloop {

using detail::Chain;
using nic::RecvWr;

void HyperLoopClient::Impl::fail(Group& g, const Status& status) {
  if (!g.failed.ok()) return;
  g.failed = status;
  for (ClientChain& ch : g.chains) {
    for (uint64_t k = ch.acked; k < ch.next; ++k) {
      Pending& p = ch.pending[k % g.options.ring_ops];
      if (p.join >= 0) {
        FlushJoin& j = g.joins[p.join];
        if (j.used) {
          OpResult r;
          r.status = status;
          r.primitive = Primitive::kFlush;
          r.seq = j.group_seq;
          ready.emplace_back(std::move(j.done), r);
          j = FlushJoin{};
        }
      } else {
        OpResult r;
        r.status = status;
        r.primitive = p.primitive;
        r.seq = p.group_seq;
        ready.emplace_back(std::move(p.done), r);
      }
      p = Pending{};
    }
    ch.acked = ch.next;
  }
}

void HyperLoopClient::Impl::complete(Group& g, ClientChain& ch, const nic::WorkCompletion& wc) {
  const uint64_t k = ch.acked;
  const uint32_t s = static_cast<uint32_t>(k % g.options.ring_ops);
  if (!wc.has_imm || wc.imm_data != static_cast<uint32_t>(k)) {
    fail(g, internal_error("hyperloop " + std::string(detail::chain_name(ch.chain)) + " chain: acknowledgement " +
                           std::to_string(wc.imm_data) + " arrived where operation " + std::to_string(k) +
                           " was expected"));
    return;
  }
  Pending& p = ch.pending[s];
  OpResult r;
  r.primitive = p.primitive;
  r.seq = p.group_seq;
  if (ch.chain == Chain::kCas && p.join < 0) {
    const uint8_t* map = ch.acks + static_cast<size_t>(s) * ch.ack_stride;
    r.cas.executed = p.execute_map;
    for (uint32_t i = 0; i < g.n; ++i) {
      if (!((p.execute_map >> i) & 1)) continue;
      uint64_t original;
      std::memcpy(&original, map + 8 * i, 8);
      r.cas.original[i] = original;
      if (original == p.old_value) r.cas.succeeded |= static_cast<uint8_t>(1u << i);
    }
  }
  ++ch.acked;
  ++stats.ops_completed;
  Status st = ch.ack->post_recv(RecvWr{s, {}});
  if (p.join >= 0) {
    FlushJoin& j = g.joins[p.join];
    if (--j.remaining == 0) {
      OpResult fr;
      fr.primitive = Primitive::kFlush;
      fr.seq = j.group_seq;
      ready.emplace_back(std::move(j.done), fr);
      j = FlushJoin{};
    }
  } else {
    ready.emplace_back(std::move(p.done), r);
  }
  p = Pending{};
  if (!st.ok()) fail(g, st);
}

namespace {

// Takes every completion `cq` holds, handing each to `on`; a failed poll
// fails the group. Returns how many it took.
template <typename OnCompletion>
size_t drain_cq(HyperLoopClient::Impl& impl, Group& g, nic::CompletionQueue& cq, OnCompletion&& on) {
  nic::WorkCompletion wcs[16];
  size_t seen = 0;
  for (;;) {
    auto got = cq.poll(wcs);
    if (!got.ok()) {
      impl.fail(g, got.status());
      return seen;
    }
    for (uint32_t j = 0; j < got.value(); ++j) on(wcs[j]);
    seen += got.value();
    if (got.value() < std::size(wcs)) return seen;
  }
}

}  // namespace

size_t HyperLoopClient::Impl::poll_group(Group& g) {
  // Messages are built only on failure: this runs on every poll.
  auto failure = [&](std::string_view what, const nic::WorkCompletion& wc) {
    fail(g, unavailable(std::string(what) + ": " + std::string(nic::wc_status_name(wc.status))));
  };
  auto chain_failure = [&](const ClientChain& ch, std::string_view what, const nic::WorkCompletion& wc) {
    failure("hyperloop " + std::string(detail::chain_name(ch.chain)) + " chain: " + std::string(what), wc);
  };
  size_t seen = 0;
  for (ClientChain& ch : g.chains) {
    if (ch.head_cq == nullptr || ch.ack_cq == nullptr) continue;  // a reconnection that failed half-way
    seen += drain_cq(*this, g, *ch.head_cq, [&](const nic::WorkCompletion& wc) {
      if (wc.status != nic::WcStatus::kSuccess) chain_failure(ch, "sending to replica 0 failed", wc);
    });
    seen += drain_cq(*this, g, *ch.ack_cq, [&](const nic::WorkCompletion& wc) {
      if (wc.status != nic::WcStatus::kSuccess) {
        chain_failure(ch, "acknowledgement failed", wc);
      } else if (g.failed.ok()) {
        complete(g, ch, wc);
      }
    });
  }
  return seen;
}

}  // namespace ferry::hyperloop
