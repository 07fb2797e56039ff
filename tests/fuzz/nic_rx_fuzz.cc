// libFuzzer target: the NIC's receive path (parse, QP lookup, responder and
// requester state machines, DMA placement) fed with arbitrary packets.
//
// A manual Engine on a FakeClock holds two NICs: A (address 0) with QP qa and
// B (address 1) with QP qb, connected. Each input is a list of packets that
// claim to come from qa and are injected into B's inbound queue, so they reach
// qb as requests (qb is a responder with RECVs posted and an MR with all
// access) or as responses (qb may be a requester: the input can make it post
// WRITE/READ/ATOMIC/SEND requests to qa first). The engine then runs to idle.
//
// Every input starts from the same state: both QPs are moved to RESET and
// reconnected, the RECVs reposted and the memory refilled, so an error state
// left by one input cannot make later inputs useless, and a crash reproduces
// from its input alone. The registered memory sits between guard zones that
// are checked after every input: the NIC must never write outside an MR.
//
// Input: [mode] then records [ctl][len lo][len hi][len bytes]...
//   mode bit 0..4: qb posts WRITE / READ / CMP_AND_SWP / FETCH_AND_ADD / SEND
//   mode bit 5..6: path MTU 256 / 1024 / 4096 / 4096
//   ctl bit 0: BTH DestQP := qb          bit 1: wrong source QP (dropped)
//   ctl bit 2: BTH P_Key := default      bit 3: PSN := qb's first expected PSN + int8 offset
//   ctl bit 4: pad count := the payload's  bit 5: RETH/AtomicETH VA := inside B's MR, rkey := B's MR
//   ctl bit 6: run to idle before this packet
//   ctl bit 7: split header/payload at min(len, kMaxHeaderBytes) instead of at the opcode's header length
//
// Run: ./nic_rx_fuzz -max_total_time=60 ../tests/fuzz/corpus/nic_rx_fuzz
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/common/clock.h"
#include "ferry/nic/connect.h"
#include "ferry/nic/engine.h"
#include "ferry/nic/verbs.h"
#include "ferry/nic/wire.h"
#include "fuzz_bytes.h"

namespace {

using namespace ferry;
using namespace ferry::nic;
using namespace ferry::fuzz;

#define FUZZ_CHECK(cond)            \
  do {                              \
    if (!(cond)) __builtin_trap();  \
  } while (0)

constexpr size_t kMemBytes = 64 * 1024;  // registered region per host
constexpr size_t kGuardBytes = 4096;     // unregistered bytes either side
constexpr uint8_t kGuardFill = 0xA5;
constexpr uint8_t kMemFill = 0x3C;
constexpr uint32_t kRecvCount = 8;
constexpr uint32_t kRecvBytes = 1024;
constexpr size_t kMaxPackets = 64;
constexpr size_t kMaxPacketBytes = wire::kMaxHeaderBytes + wire::kMaxPayloadBytes + 64;
constexpr uint32_t kAPsn = 0x10;  // first PSN qa sends = first PSN qb expects
constexpr uint32_t kBPsn = 0x20;
constexpr uint64_t kRunLimitNs = 2'000'000'000ULL;  // simulated time per run_until_idle

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// Registered memory with guard zones.
struct GuardedMemory {
  std::unique_ptr<uint8_t, FreeDeleter> block;
  uint8_t* mem = nullptr;  // kMemBytes, registered

  GuardedMemory() {
    block.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, kMemBytes + 2 * kGuardBytes)));
    FUZZ_CHECK(block != nullptr);
    mem = block.get() + kGuardBytes;
    std::memset(block.get(), kGuardFill, kGuardBytes);
    std::memset(mem + kMemBytes, kGuardFill, kGuardBytes);
  }
  void refill() { std::memset(mem, kMemFill, kMemBytes); }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (block.get()[i] != kGuardFill || mem[kMemBytes + i] != kGuardFill) return false;
    }
    return true;
  }
  uint64_t va(size_t offset) const { return reinterpret_cast<uint64_t>(mem) + offset; }
};

struct Host {
  Nic* nic = nullptr;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  GuardedMemory memory;
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<QueuePair> qp;
};

struct World {
  FakeClock clock;
  std::unique_ptr<Engine> engine;
  Host a, b;
  bool broken = false;  // a CQ overran: rebuild everything

  World() {
    EngineOptions options;
    options.threaded = false;
    options.clock = &clock;
    engine = std::make_unique<Engine>(options);
    for (Host* h : {&a, &b}) {
      h->nic = engine->add_nic().value();
      h->pd = h->nic->alloc_pd().value();
      CqInitAttr cq_attr;
      cq_attr.cqe = 1024;
      h->cq = h->nic->create_cq(cq_attr).value();
      h->mr = h->nic->reg_mr(*h->pd, h->memory.mem, kMemBytes, kAccessAll).value();
      QpInitAttr qp_attr;
      qp_attr.send_cq = h->cq.get();
      qp_attr.recv_cq = h->cq.get();
      qp_attr.cap.max_send_sge = 2;
      qp_attr.cap.max_recv_sge = 2;
      qp_attr.cap.max_send_wr = 16;
      qp_attr.cap.max_recv_wr = 16;
      h->qp = h->nic->create_qp(*h->pd, qp_attr).value();
    }
  }

  ~World() {
    // Verbs order: QPs, then MRs and CQs, then PDs; the Engine last.
    for (Host* h : {&a, &b}) h->qp.reset();
    for (Host* h : {&a, &b}) {
      h->mr.reset();
      h->cq.reset();
      h->pd.reset();
    }
    engine.reset();
  }

  void drain() {
    (void)engine->run_until_idle(kRunLimitNs);
    WorkCompletion wc[64];
    for (Host* h : {&a, &b}) {
      for (;;) {
        auto n = h->cq->poll(wc);
        if (!n.ok()) {
          broken = true;
          break;
        }
        if (n.value() == 0) break;
      }
      while (h->nic->poll_async_event().has_value()) {
      }
    }
  }

  // Back to a known state: both QPs reset and reconnected, RECVs posted on
  // both sides, memory refilled.
  bool reset_and_connect(uint32_t path_mtu) {
    drain();
    QpAttr reset;
    reset.state = QpState::kReset;
    if (!a.qp->modify(reset, kQpState).ok() || !b.qp->modify(reset, kQpState).ok()) return false;
    a.memory.refill();
    b.memory.refill();
    ConnectOptions o;
    o.path_mtu = path_mtu;
    o.a_psn = kAPsn;
    o.b_psn = kBPsn;
    o.timeout = 8;       // ~1 ms: retries stay cheap in simulated time
    o.retry_cnt = 2;
    o.rnr_retry = 2;     // finite, so a SEND without a RECV ends
    o.max_rd_atomic = 4;
    if (!connect_qps(*a.qp, *a.nic, *b.qp, *b.nic, o).ok()) return false;
    for (Host* h : {&a, &b}) {
      for (uint32_t i = 0; i < kRecvCount; ++i) {
        // The last RECV scatters over two SGEs.
        const Sge sges[2] = {h->mr->sge(i * kRecvBytes, i + 1 == kRecvCount ? 100 : kRecvBytes),
                             h->mr->sge(kRecvCount * kRecvBytes, 2000)};
        const RecvWr wr{1000 + i, std::span<const Sge>(sges, i + 1 == kRecvCount ? 2 : 1)};
        if (!h->qp->post_recv(wr).ok()) return false;
      }
    }
    return true;
  }

  // Requests qb sends to qa before the injected packets arrive.
  void post_requests(uint8_t mode) {
    const size_t base = 32 * 1024;  // away from the RECV buffers
    std::vector<SendWr> wrs;
    const Sge write_sge = b.mr->sge(base, 3000);
    const Sge read_sge = b.mr->sge(base + 4096, 5000);
    const Sge atomic_sge = b.mr->sge(base + 16384, 8);
    const Sge atomic_sge2 = b.mr->sge(base + 16392, 8);
    const Sge send_sge = b.mr->sge(base + 20000, 700);
    if (mode & 1) {
      SendWr wr;
      wr.wr_id = 1;
      wr.opcode = WrOpcode::kRdmaWrite;
      wr.flags = kSendSignaled;
      wr.sg_list = std::span<const Sge>(&write_sge, 1);
      wr.remote_addr = a.memory.va(base);
      wr.rkey = a.mr->rkey();
      wrs.push_back(wr);
    }
    if (mode & 2) {
      SendWr wr;
      wr.wr_id = 2;
      wr.opcode = WrOpcode::kRdmaRead;
      wr.flags = kSendSignaled;
      wr.sg_list = std::span<const Sge>(&read_sge, 1);
      wr.remote_addr = a.memory.va(base + 8192);
      wr.rkey = a.mr->rkey();
      wrs.push_back(wr);
    }
    if (mode & 4) {
      SendWr wr;
      wr.wr_id = 3;
      wr.opcode = WrOpcode::kAtomicCmpAndSwp;
      wr.flags = kSendSignaled;
      wr.sg_list = std::span<const Sge>(&atomic_sge, 1);
      wr.remote_addr = a.memory.va(base + 24576);
      wr.rkey = a.mr->rkey();
      wr.compare_add = 0x3C3C3C3C3C3C3C3CULL;
      wr.swap = 7;
      wrs.push_back(wr);
    }
    if (mode & 8) {
      SendWr wr;
      wr.wr_id = 4;
      wr.opcode = WrOpcode::kAtomicFetchAndAdd;
      wr.flags = kSendSignaled;
      wr.sg_list = std::span<const Sge>(&atomic_sge2, 1);
      wr.remote_addr = a.memory.va(base + 24584);
      wr.rkey = a.mr->rkey();
      wr.compare_add = 1;
      wrs.push_back(wr);
    }
    if (mode & 16) {
      SendWr wr;
      wr.wr_id = 5;
      wr.opcode = WrOpcode::kSendWithImm;
      wr.flags = kSendSignaled | kSendSolicited;
      wr.sg_list = std::span<const Sge>(&send_sge, 1);
      wr.imm_data = 0x1234;
      wrs.push_back(wr);
    }
    if (!wrs.empty()) (void)b.qp->post_send(wrs);
  }
};

World* world() {
  static std::unique_ptr<World> w;
  if (w == nullptr || w->broken) {
    w.reset();
    w = std::make_unique<World>();
  }
  return w.get();
}

// NIC_RX_FUZZ_VERBOSE=1 prints B's (cumulative) counters after each input:
// a quick way to see which paths the seeds reach.
bool verbose() {
  static const bool on = std::getenv("NIC_RX_FUZZ_VERBOSE") != nullptr;
  return on;
}

// Applies the record's ctl bits to the packet bytes (in place).
void steer(World& w, uint8_t ctl, uint8_t* bytes, size_t len) {
  if (len < wire::kBthBytes) return;
  if (ctl & 0x01) put24(bytes + 5, w.b.qp->qp_num());
  if (ctl & 0x04) {
    bytes[2] = 0xFF;
    bytes[3] = 0xFF;
  }
  if (ctl & 0x08) put24(bytes + 9, wire::psn_add(kAPsn, static_cast<uint32_t>(static_cast<int8_t>(bytes[11]))));
  const uint8_t headers = wire::opcode_info(bytes[0]).headers;
  const size_t hlen = wire::header_length(bytes[0]);
  if ((ctl & 0x10) && hlen != 0 && hlen <= len) {
    bytes[1] = static_cast<uint8_t>((bytes[1] & ~0x30) | (wire::pad_for(len - hlen) << 4));
  }
  if (ctl & 0x20) {
    // RETH (after FETH for FLUSH) or AtomicETH: VA into B's MR, B's rkey.
    size_t at = 0;
    if (headers & wire::kHasReth) at = wire::kBthBytes + ((headers & wire::kHasFeth) ? wire::kFethBytes : 0);
    if (headers & wire::kHasAtomicEth) at = wire::kBthBytes;
    if (at != 0 && at + 12 <= len) {
      const uint64_t offset = get64(bytes + at) % kMemBytes;
      put64(bytes + at, w.b.memory.va(offset));
      put32(bytes + at + 8, w.b.mr->rkey());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  World& w = *world();
  const uint8_t mode = data[0];
  static constexpr uint32_t kMtus[4] = {256, 1024, 4096, 4096};
  if (!w.reset_and_connect(kMtus[(mode >> 5) & 3])) {
    w.broken = true;
    return 0;
  }
  w.post_requests(mode);

  // Packet bytes must outlive their delivery: every packet is delivered by the
  // run_until_idle below, before this buffer goes away.
  std::vector<uint8_t> store;
  store.reserve(size + kMaxPackets * 4);
  size_t pos = 1;
  size_t packets = 0;
  while (pos + 3 <= size && packets < kMaxPackets) {
    const uint8_t ctl = data[pos];
    size_t len = static_cast<size_t>(data[pos + 1]) | static_cast<size_t>(data[pos + 2]) << 8;
    pos += 3;
    len = std::min({len, size - pos, kMaxPacketBytes});
    const size_t start = store.size();
    store.insert(store.end(), data + pos, data + pos + len);
    pos += len;
    uint8_t* bytes = store.data() + start;
    steer(w, ctl, bytes, len);

    Packet p;
    p.src_nic = w.a.nic->address();
    p.dst_nic = w.b.nic->address();
    p.src_qpn = (ctl & 0x02) ? (w.a.qp->qp_num() ^ 0x1) : w.a.qp->qp_num();
    size_t header_len = std::min(len, wire::kMaxHeaderBytes);
    if (!(ctl & 0x80) && len >= 1) {
      const size_t opcode_len = wire::header_length(bytes[0]);
      if (opcode_len != 0 && opcode_len <= len) header_len = opcode_len;
    }
    p.header_len = static_cast<uint16_t>(header_len);
    std::memcpy(p.header, bytes, header_len);
    p.payload_len = static_cast<uint32_t>(len - header_len);
    p.payload = p.payload_len ? bytes + header_len : nullptr;
    if (ctl & 0x40) (void)w.engine->run_until_idle(kRunLimitNs);
    w.engine->fabric().inject(p);
    ++packets;
  }
  w.drain();
  if (verbose()) {
    const NicCounters c = w.b.nic->counters();
    std::fprintf(stderr,
                 "nic_rx_fuzz: %zu packets; B rx %lu malformed %lu unknown_qp %lu dup %lu out_of_seq %lu "
                 "acks %lu seq_naks %lu rnr_naks %lu error_naks %lu atomic_replays %lu read_replays %lu "
                 "cqes %lu; qa %s qb %s\n",
                 packets, c.rx_packets, c.rx_malformed, c.rx_unknown_qp, c.rx_duplicates, c.rx_out_of_sequence,
                 c.acks_sent, c.seq_naks_sent, c.rnr_naks_sent, c.error_naks_sent, c.atomic_replays,
                 c.read_replays, c.cqes_written, std::string(qp_state_name(w.a.qp->state())).c_str(),
                 std::string(qp_state_name(w.b.qp->state())).c_str());
  }
  FUZZ_CHECK(!w.engine->fabric().has_queued() && w.engine->fabric().next_due_ns() == UINT64_MAX);
  FUZZ_CHECK(w.a.memory.guards_intact());
  FUZZ_CHECK(w.b.memory.guards_intact());
  return 0;
}
