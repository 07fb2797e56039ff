// How the processes of a HyperLoop group find each other (docs/hyperloop.md,
// "Across processes"): the connection-manager services each side serves, the
// private data of their handshakes, and a connect that waits for a peer that
// is not up or not ready yet. Shared by Replica (replica.h) and the client's
// connect_group, so that the two sides cannot disagree.
//
//   client                 replica 0              ...  replica n-1 (tail)
//   serves <chain>.ack     serves <chain>.up           serves <chain>.up
//   head --REQ(hello)----> up                          down --REQ(hello)--> client's ack
//        <--REP(regions)--                                  <--REP(ack slots)--
//
// A replica accepts its upstream only once its own downstream is connected
// and its chains are posted, so when the client's head connection succeeds
// the whole chain is armed.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/cm/cm.h"
#include "ferry/common/status.h"
#include "ferry/hyperloop/group.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/replica.h"
#include "ferry/nic/shared_memory.h"
#include "ferry/nic/verbs.h"
#include "layout.h"

namespace ferry::hyperloop::detail {

constexpr uint32_t kWiringMagic = 0x314C5748;  // "HWL1"
constexpr uint32_t kClientSender = 0xFFFFFFFF;

// REQ private data, from the upstream side of a link (the client, or
// replica i-1) and from the tail to the client's acknowledgement service:
// who is asking, and the group options both sides must agree on.
struct ChainHello {
  uint32_t magic = kWiringMagic;
  uint32_t sender = 0;  // replica index, or kClientSender
  uint32_t replicas = 0;
  uint32_t ring_ops = 0;
  uint32_t window = 0;
  uint32_t flush_verb = 0;
  uint64_t region_bytes = 0;
};

// REP private data of replica i's up service: the regions of replicas
// i..n-1 (their base iovas; offsets are the same on every replica) and
// replica i's rkey (the only one its upstream writes into).
struct UpReply {
  uint32_t magic = kWiringMagic;
  uint32_t count = 0;  // n - i
  uint32_t rkey = 0;
  uint32_t reserved = 0;
  std::array<uint64_t, kMaxReplicas> region_iova{};
};

// REP private data of the client's ack service of one chain: where the tail
// writes its acknowledgements (ring_ops slots of `stride` bytes).
struct AckReply {
  uint32_t magic = kWiringMagic;
  uint32_t rkey = 0;
  uint32_t stride = 0;
  uint32_t reserved = 0;
  uint64_t slots = 0;
};

// Remote access on every link between two hosts (docs/hyperloop.md,
// "Safety"): WRITEs, 0-byte READs and FLUSHes, never atomics.
constexpr uint32_t kLinkAccess = nic::kAccessRemoteWrite | nic::kAccessRemoteRead | nic::kAccessFlushGlobal |
                                 nic::kAccessFlushPersistent;

// "hyperloop.<group>.<chain>.up" / ".ack".
std::string up_service(std::string_view group, Chain c);
std::string ack_service(std::string_view group, Chain c);
// The Naive-RDMA baseline's one chain: "naive.<group>.up" / ".ack" (the same
// private data; a HyperLoop member cannot be wired to a Naive one).
std::string naive_up_service(std::string_view group);
std::string naive_ack_service(std::string_view group);
// kInvalidArgument unless the group name makes valid service names.
Status check_group_name(std::string_view group);

// The argument checks of connect_group (both systems): a NIC-created
// client, a listener, a head address, valid options and group name, and no
// group of that name yet (`taken`).
Status check_connect_args(bool has_nic, const RemoteGroupOptions& options, bool taken);
// The argument checks of Replica::create / NaiveReplica::create.
Status check_replica_args(const ReplicaSpec& spec, size_t region_bytes);

ChainHello hello_of(const GroupOptions& options, uint32_t sender);
// kInvalidArgument naming the first option the two sides disagree on, or an
// unexpected sender ("replica 2 asked replica 0 ...").
Status check_hello(const ChainHello& hello, const GroupOptions& own, uint32_t expected_sender, std::string_view who);

// The reply a downstream member sent, checked: an UpReply naming `expected`
// replicas after the connecting one, or an AckReply (of `stride` bytes per
// slot when stride is not 0). kInvalidArgument naming `who` otherwise.
Result<UpReply> parse_up_reply(std::span<const uint8_t> bytes, uint32_t expected, std::string_view who);
Result<AckReply> parse_ack_reply(std::span<const uint8_t> bytes, uint32_t stride, std::string_view who);

// The passive side of a member's links -- a replica's up QPs, a client's
// acknowledgement QPs: one CM service per link, each accepting one
// connection from the expected sender (its ChainHello checked against the
// member's options) to a QP already in INIT with its receives posted.
// Requests are refused with kUnavailable ("not ready") until open().
// Callbacks run on the listener's thread; the owner calls unserve() (or
// destroys the LinkSet) before its QPs go.
class LinkSet {
 public:
  LinkSet(std::string who, const GroupOptions& options, uint32_t expected_sender);
  ~LinkSet();
  LinkSet(const LinkSet&) = delete;
  LinkSet& operator=(const LinkSet&) = delete;

  // One more link: `service` on `listener` (the same listener for every link).
  Status serve(cm::Listener& listener, const std::string& service, nic::Nic& nic, nic::QueuePair& qp);
  // Each link's REP private data (in serve order); requests are accepted from now on.
  void open(std::vector<std::vector<uint8_t>> replies);
  void unserve();
  uint32_t connected() const;
  std::string last_error() const;
  // Waits until every link completed its handshake: kUnavailable when one
  // failed, kTimedOut after timeout_ms.
  Status wait_connected(uint32_t timeout_ms) const;

 private:
  struct Link {
    std::string service;
    nic::QueuePair* qp = nullptr;
    std::vector<uint8_t> reply;
    int state = 0;  // 0 free, 1 handshaking, 2 connected, 3 failed
  };
  Result<cm::Accepted> accept(size_t link, const cm::Request& request);
  void done(size_t link, const Status& status);

  const std::string who_;
  const GroupOptions options_;
  const uint32_t expected_sender_;
  cm::Listener* listener_ = nullptr;
  mutable std::mutex mu_;
  bool open_ = false;
  std::vector<Link> links_;
  std::string last_error_;
};

// cm::connect, retried every few milliseconds while the peer is not there
// yet (kUnavailable: refused, not ready; kNotFound: service not served yet)
// until `timeout_ms` has passed; the last error then, with how long it tried.
Result<cm::Connection> connect_retrying(std::string_view address, std::string_view service, nic::Nic& nic,
                                        nic::QueuePair& qp, std::span<const uint8_t> private_data,
                                        uint32_t timeout_ms);

// ---- connect_group, the same for HyperLoopClient and NaiveClient ----
// G is either client's group (client_impl.h, naive.cc): both name their
// fields alike (id, options, remote_name, cnic, cpd, client_mem, ...).

// Whether a group of `groups` other than `except` is connected to the
// replica processes of the group named `name`.
template <typename G>
bool group_name_taken(const std::vector<std::unique_ptr<G>>& groups, std::string_view name, const G* except = nullptr) {
  for (const auto& g : groups) {
    if (g != nullptr && g.get() != except && g->remote_name == name) return true;
  }
  return false;
}

// connect_group: the arguments checked (check_connect_args), a fresh G
// numbered after `groups` (GroupId = index), named and given the options,
// `connect(G&)` run, and the group appended only if that succeeded. Errors
// name the group.
template <typename G, typename Connect>
Result<GroupId> add_connected_group(std::vector<std::unique_ptr<G>>& groups, bool has_nic,
                                    const RemoteGroupOptions& options, Connect&& connect) {
  FERRY_RETURN_IF_ERROR(check_connect_args(has_nic, options, group_name_taken(groups, options.group)));
  auto g = std::make_unique<G>();
  g->id = static_cast<GroupId>(groups.size());
  g->options = options.options;
  g->remote_name = options.group;
  Status st = connect(*g);
  if (!st.ok()) return Status(st.code(), "connect_group " + options.group + ": " + st.message());
  groups.push_back(std::move(g));
  return groups.back()->id;
}

// The client's side that a group across processes owns itself: a PD on
// `client_nic` and the client memory (the gWRITE source), region_bytes of
// shared memory named `name` (the client's NIC daemon must reach it),
// registered for local access. Sets g's cnic, cpd, client_mem and client_mr.
template <typename G>
Status attach_client_memory(G& g, nic::Nic& client_nic, std::string_view name) {
  g.cnic = &client_nic;
  FERRY_ASSIGN_OR_RETURN(g.remote_pd, client_nic.alloc_pd());
  g.cpd = g.remote_pd.get();
  FERRY_ASSIGN_OR_RETURN(g.remote_client_mem, nic::SharedMemory::create(g.options.region_bytes, name));
  g.client_mem = std::span<uint8_t>(g.remote_client_mem.data(), g.options.region_bytes);
  FERRY_ASSIGN_OR_RETURN(g.remote_client_mr,
                         client_nic.reg_mr(*g.cpd, g.client_mem.data(), g.client_mem.size(), nic::kAccessLocalWrite));
  g.client_mr = g.remote_client_mr.get();
  return ok_status();
}

}  // namespace ferry::hyperloop::detail
