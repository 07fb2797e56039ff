// HyperLoop across processes' boundaries (docs/hyperloop.md, "Across
// processes"): Replicas and a client on separate NICs, wired only by the
// connection manager over TCP, with the same semantics as an in-process
// group -- first on NICs of `ferry nicd` daemons (UDP between them), then on
// in-process NICs of one threaded Engine.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ferry/cm/cm.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/naive.h"
#include "ferry/hyperloop/replica.h"
#include "ferry/nic/engine.h"
#include "ferry/nicd/nicd.h"

namespace ferry::hyperloop {
namespace {

GroupOptions small_group(uint32_t replicas) {
  GroupOptions o;
  o.replicas = replicas;
  o.region_bytes = 1 << 16;
  o.ring_ops = 32;
  o.window = 8;
  return o;
}

// HyperLoop's replica, or the Naive baseline's (its CPU serves the chain).
enum class System { kHyperLoop, kNaiveEvent, kNaivePoll };

struct ReplicaProc {
  nicd::SharedMemory region;
  std::unique_ptr<cm::Listener> listener;
  std::unique_ptr<Replica> replica;
  std::unique_ptr<NaiveReplica> naive;

  Status connect_downstream(const std::string& address) {
    return replica ? replica->connect_downstream(address) : naive->connect_downstream(address);
  }
  ReplicaStatus status() const { return replica ? replica->status() : naive->status(); }
};

// Starts replica i of `o` on `nic` (its own listener), returning it before
// its downstream is connected; the caller connects it (it blocks).
std::unique_ptr<ReplicaProc> start_replica(nic::Nic& nic, const GroupOptions& o, uint32_t i, const std::string& group,
                                           uint32_t connect_timeout_ms = 20000, System system = System::kHyperLoop) {
  auto p = std::make_unique<ReplicaProc>();
  p->region = nicd::SharedMemory::create(o.region_bytes, "hl-remote-test").value();
  auto l = cm::Listener::start("127.0.0.1:0");
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  p->listener = std::move(l).value();
  ReplicaSpec spec;
  spec.group = group;
  spec.index = i;
  spec.options = o;
  spec.connect_timeout_ms = connect_timeout_ms;
  const std::span<uint8_t> region(p->region.data(), p->region.size());
  if (system == System::kHyperLoop) {
    auto r = Replica::create(nic, region, spec);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    p->replica = std::move(r).value();
    EXPECT_TRUE(p->replica->serve(*p->listener).ok());
  } else {
    auto r = NaiveReplica::create(nic, region, spec, /*poll_mode=*/system == System::kNaivePoll);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    p->naive = std::move(r).value();
    EXPECT_TRUE(p->naive->serve(*p->listener).ok());
  }
  return p;
}

// Builds a chain of `nics.size() - 1` replicas on nics[1..] and a client on
// nics[0]; replicas connect downstream on their own threads (in any order).
struct Chain {
  std::vector<std::unique_ptr<ReplicaProc>> replicas;
  std::unique_ptr<cm::Listener> client_listener;
  std::unique_ptr<GroupClient> client;
  GroupId gid = 0;
  GroupOptions options;

  void build(const std::vector<nic::Nic*>& nics, const std::string& group = "g0", System system = System::kHyperLoop) {
    const uint32_t n = static_cast<uint32_t>(nics.size() - 1);
    options = small_group(n);
    for (uint32_t i = 0; i < n; ++i) {
      replicas.push_back(start_replica(*nics[1 + i], options, i, group, 20000, system));
    }
    client_listener = cm::Listener::start("127.0.0.1:0").value();
    std::vector<std::thread> threads;
    std::vector<Status> results(n);
    // Start from the head: a replica whose downstream is not there yet waits.
    for (uint32_t i = 0; i < n; ++i) {
      const std::string next = i + 1 < n ? replicas[i + 1]->listener->address() : client_listener->address();
      threads.emplace_back([&, i, next] { results[i] = replicas[i]->connect_downstream(next); });
    }
    ClientOptions co;
    co.op_timeout_ns = 20'000'000'000ULL;
    RemoteGroupOptions ro;
    ro.group = group;
    ro.options = options;
    ro.head = replicas[0]->listener->address();
    ro.listener = client_listener.get();
    ro.timeout_ms = 20000;
    Result<GroupId> g = invalid_argument("unset");
    if (system == System::kHyperLoop) {
      auto c = HyperLoopClient::create(*nics[0], co).value();
      g = c->connect_group(ro);
      client = std::move(c);
    } else {
      NaiveOptions no;
      no.client = co;
      auto c = NaiveClient::create(*nics[0], no).value();
      g = c->connect_group(ro);
      client = std::move(c);
    }
    for (auto& t : threads) t.join();
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    for (uint32_t i = 0; i < n; ++i) EXPECT_TRUE(results[i].ok()) << "replica " << i << ": " << results[i].to_string();
    if (::testing::Test::HasFailure()) return;
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gid = g.value();
    // The client's last RTU may still be on its way to replica 0's listener.
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t links = system == System::kHyperLoop ? 3 : 1;  // one per chain
      ReplicaStatus s = replicas[i]->status();
      for (int tries = 0; tries < 2000 && s.upstream_links < links; ++tries) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        s = replicas[i]->status();
      }
      EXPECT_TRUE(s.ready);
      EXPECT_EQ(s.upstream_links, links) << s.last_error;
    }
  }
  ~Chain() {
    client.reset();
    client_listener.reset();
    replicas.clear();
  }
  std::span<uint8_t> region(uint32_t i) const { return {replicas[i]->region.data(), options.region_bytes}; }
};

// gWRITE, gCAS (a partial execute map), gMEMCPY and gFLUSH, each checked on
// every replica's memory.
void exercise(Chain& c) {
  GroupClient& client = *c.client;
  const uint32_t n = c.options.replicas;
  auto mem = client.client_memory(c.gid).value();
  for (uint32_t k = 0; k < 300; ++k) {
    const uint64_t off = (k * 96) % (c.options.region_bytes - 256);
    for (uint32_t b = 0; b < 80; ++b) mem[off + b] = static_cast<uint8_t>(k * 7 + b);
    ASSERT_TRUE(client.gwrite(c.gid, off, 80, /*flush=*/k % 5 == 0).ok()) << k;
    for (uint32_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(c.region(i).data() + off, mem.data() + off, 80), 0) << "op " << k << " replica " << i;
    }
  }
  // gCAS on every replica but replica 1 (a partial execute map), then on all.
  const uint8_t all = static_cast<uint8_t>((1u << n) - 1);
  const uint8_t map = n >= 2 ? static_cast<uint8_t>(all & ~0b10u) : all;
  const uint64_t word = 60000;  // beyond the gwrites above
  auto cas = client.gcas(c.gid, word, 0, 0xABCDEF, map);
  ASSERT_TRUE(cas.ok()) << cas.status().to_string();
  EXPECT_EQ(cas.value().executed, map);
  EXPECT_EQ(cas.value().succeeded, map);
  uint64_t v;
  for (uint32_t i = 0; i < n; ++i) {
    std::memcpy(&v, c.region(i).data() + word, 8);
    EXPECT_EQ(v, (map >> i) & 1 ? 0xABCDEFu : 0u) << "replica " << i;
  }
  auto again = client.gcas(c.gid, word, 0, 1, all);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value().succeeded, all & ~map);
  EXPECT_EQ(again.value().original[0], 0xABCDEFu);
  // gMEMCPY: each replica copies its own bytes.
  ASSERT_TRUE(client.gmemcpy(c.gid, 0, 8192, 64).ok());
  for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(std::memcmp(c.region(i).data(), c.region(i).data() + 8192, 64), 0);
  ASSERT_TRUE(client.gflush(c.gid).ok());
  // Many in flight: the window, the ring laps.
  uint32_t done = 0;
  for (uint32_t k = 0; k < 500; ++k) {
    const uint64_t off = 16384 + (k % 64) * 8;
    std::memcpy(mem.data() + off, &k, 4);
    ASSERT_TRUE(client.gwrite_async(c.gid, off, 4, false, [&](const OpResult& r) {
                   EXPECT_TRUE(r.status.ok()) << r.status.to_string();
                   ++done;
                 }).ok());
  }
  ASSERT_TRUE(client.drain(c.gid).ok());
  EXPECT_EQ(done, 500u);
  for (uint32_t i = 0; i < n; ++i) {
    EXPECT_EQ(std::memcmp(c.region(i).data() + 16384, mem.data() + 16384, 512), 0) << "replica " << i;
  }
  EXPECT_EQ(client.replica(c.gid, 0).status().code(), Code::kFailedPrecondition);
}

// An engine on its own thread, as the in-process tests below use.
nic::EngineOptions threaded_engine() {
  nic::EngineOptions eo;
  eo.threaded = true;
  return eo;
}

// n NICs of `engine`, unnamed.
std::vector<nic::Nic*> add_nics(nic::Engine& engine, int n) {
  std::vector<nic::Nic*> nics;
  for (int i = 0; i < n; ++i) nics.push_back(engine.add_nic({}).value());
  return nics;
}

std::string socket_path(const char* tag) {
  return "/tmp/ferry-hl-remote-" + std::to_string(getpid()) + "-" + tag + ".sock";
}

TEST(HyperLoopRemote, ChainAcrossTwoDaemonsServesEveryPrimitive) {
  // Two NIC daemons (hosts) on loopback UDP; client and replica 1 on one,
  // replicas 0 and 2 on the other, so every hop of the chain crosses UDP.
  std::vector<std::unique_ptr<nicd::Daemon>> daemons;
  std::vector<std::unique_ptr<nicd::Device>> devices;
  for (const char* tag : {"a", "b"}) {
    nicd::DaemonOptions o;
    o.socket_path = socket_path(tag);
    o.bind = nic::UdpEndpoint{0x7F000001, 0};
    o.arena_bytes = 16u << 20;
    auto d = nicd::Daemon::start(o);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    daemons.push_back(std::move(d).value());
  }
  // One attachment per "process": client, r0, r1, r2.
  for (const char* tag : {"a", "b", "a", "b"}) {
    nicd::OpenOptions oo;
    oo.socket_path = socket_path(tag);
    auto dev = nicd::Device::open(oo);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    devices.push_back(std::move(dev).value());
  }
  {
    Chain c;
    c.build({&devices[0]->nic(), &devices[1]->nic(), &devices[2]->nic(), &devices[3]->nic()});
    if (HasFatalFailure()) return;
    exercise(c);
  }
  devices.clear();
}

// Two daemons, four attachments: client, r0, r1, r2 alternating between them.
struct TwoDaemons {
  std::vector<std::unique_ptr<nicd::Daemon>> daemons;
  std::vector<std::unique_ptr<nicd::Device>> devices;
  void start(const char* prefix) {
    for (const char* tag : {"a", "b"}) {
      nicd::DaemonOptions o;
      o.socket_path = socket_path((std::string(prefix) + tag).c_str());
      o.bind = nic::UdpEndpoint{0x7F000001, 0};
      o.arena_bytes = 16u << 20;
      auto d = nicd::Daemon::start(o);
      ASSERT_TRUE(d.ok()) << d.status().to_string();
      daemons.push_back(std::move(d).value());
    }
    for (int i = 0; i < 4; ++i) {
      nicd::OpenOptions oo;
      oo.socket_path = daemons[i % 2]->socket_path();
      auto dev = nicd::Device::open(oo);
      ASSERT_TRUE(dev.ok()) << dev.status().to_string();
      devices.push_back(std::move(dev).value());
    }
  }
  std::vector<nic::Nic*> nics() const {
    std::vector<nic::Nic*> v;
    for (const auto& d : devices) v.push_back(&d->nic());
    return v;
  }
};

TEST(HyperLoopRemote, NaiveEventChainAcrossTwoDaemons) {
#if defined(__SANITIZE_THREAD__)
  // The replicas' CPUs write their regions through this process's mapping
  // and the acknowledgement reaches the test through the daemon's mapping of
  // the same memory files: TSan tracks addresses, so it cannot see that
  // ordering and would report the test's checks as races. The same replica
  // code runs under TSan in NaivePollChainOnInProcessNics (one mapping).
  GTEST_SKIP() << "TSan cannot follow synchronization through two mappings of one memory file";
#endif
  TwoDaemons hosts;
  hosts.start("ne");
  if (HasFatalFailure()) return;
  {
    Chain c;
    c.build(hosts.nics(), "naive", System::kNaiveEvent);
    if (HasFatalFailure()) return;
    exercise(c);
    for (const auto& r : c.replicas) EXPECT_GT(r->naive->ops(), 800u);  // its CPU handled every operation
  }
  hosts.devices.clear();
}

TEST(HyperLoopRemote, NaivePollChainOnInProcessNics) {
  nic::Engine engine(threaded_engine());
  // One replica: each NaiveReplica busy-polls a core of its own, and this
  // machine may have two.
  Chain c;
  c.build(add_nics(engine, 2), "naive-poll", System::kNaivePoll);
  if (HasFatalFailure()) return;
  exercise(c);
}

TEST(HyperLoopRemote, ChainOnInProcessNicsOfOneEngine) {
  nic::Engine engine(threaded_engine());
  std::vector<nic::Nic*> nics;
  for (int i = 0; i < 4; ++i) {
    nic::NicOptions no;
    no.name = "n" + std::to_string(i);
    nics.push_back(engine.add_nic(no).value());
  }
  Chain c;
  c.build(nics, "in-process");
  if (HasFatalFailure()) return;
  exercise(c);
}

TEST(HyperLoopRemote, ReplicaConfiguredDifferentlyIsRefusedByName) {
  nic::Engine engine(threaded_engine());
  nic::Nic* a = engine.add_nic({}).value();
  nic::Nic* b = engine.add_nic({}).value();
  GroupOptions o = small_group(1);
  // The replica gives up soon: the client it waits for is gone after the refusal.
  auto r = start_replica(*b, o, 0, "g0", /*connect_timeout_ms=*/1000);
  auto client_listener = cm::Listener::start("127.0.0.1:0").value();
  std::thread t([&] { (void)r->replica->connect_downstream(client_listener->address()); });
  auto client = HyperLoopClient::create(*a).value();
  RemoteGroupOptions ro;
  ro.options = o;
  ro.options.ring_ops = 64;  // the replica has 32
  ro.head = r->listener->address();
  ro.listener = client_listener.get();
  ro.timeout_ms = 5000;
  auto g = client->connect_group(ro);
  ASSERT_FALSE(g.ok());
  // The tail (the replica) is refused first, by the client's ack service.
  EXPECT_NE(g.status().message().find("ring_ops"), std::string::npos) << g.status().to_string();
  t.join();
  EXPECT_FALSE(r->replica->status().ready);
}

TEST(HyperLoopRemote, MissingHeadTimesOutWithTheAddress) {
  nic::Engine engine(threaded_engine());
  nic::Nic* a = engine.add_nic({}).value();
  auto client_listener = cm::Listener::start("127.0.0.1:0").value();
  // A port nothing listens on: bind one, then close it.
  auto probe = cm::Listener::start("127.0.0.1:0").value();
  const std::string dead = probe->address();
  probe.reset();
  auto client = HyperLoopClient::create(*a).value();
  RemoteGroupOptions ro;
  ro.options = small_group(2);
  ro.head = dead;
  ro.listener = client_listener.get();
  ro.timeout_ms = 300;
  auto g = client->connect_group(ro);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kUnavailable) << g.status().to_string();
  EXPECT_NE(g.status().message().find(dead), std::string::npos) << g.status().to_string();
  EXPECT_NE(g.status().message().find("gave up"), std::string::npos) << g.status().to_string();
}

// A member of a chain across processes dies; the survivors build a new chain
// under another group name and the client moves its group there with
// reconnect_group: the operation stuck on the old chain fails kUnavailable,
// the GroupId and the client memory stay, and the new chain serves writes.
TEST(HyperLoopRemote, ReconnectGroupMovesToTheRebuiltChain) {
  nic::Engine engine(threaded_engine());
  const std::vector<nic::Nic*> nics = add_nics(engine, 4);
  Chain c;
  c.build(nics, "old");
  if (HasFatalFailure()) return;
  auto* client = dynamic_cast<HyperLoopClient*>(c.client.get());
  ASSERT_NE(client, nullptr);
  auto mem = client->client_memory(c.gid).value();
  std::memset(mem.data(), 0x5A, 256);
  ASSERT_TRUE(client->gwrite(c.gid, 0, 256, true).ok());
  // Replica 1's process dies: nothing it forwarded is acknowledged.
  c.replicas[1]->replica.reset();
  Status stuck = internal_error("not completed");
  ASSERT_TRUE(client->gwrite_async(c.gid, 256, 64, false, [&](const OpResult& r) { stuck = r.status; }).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  (void)client->poll();
  EXPECT_EQ(stuck.code(), Code::kInternal) << "the broken chain acknowledged an operation";
  EXPECT_EQ(client->outstanding(c.gid).value(), 1u);

  // The survivors, replicas 0 and 2, become a chain of two named "old.v2".
  GroupOptions o2 = c.options;
  o2.replicas = 2;
  RemoteGroupOptions ro;
  ro.group = "old.v2";
  ro.options = o2;
  ro.head = c.replicas[0]->listener->address();
  ro.listener = c.client_listener.get();
  ro.timeout_ms = 20000;
  RemoteGroupOptions wrong = ro;
  wrong.options.region_bytes *= 2;
  EXPECT_EQ(client->reconnect_group(c.gid, wrong).code(), Code::kInvalidArgument);
  const uint32_t survivors[] = {0, 2};
  for (uint32_t k = 0; k < 2; ++k) {
    ReplicaProc& p = *c.replicas[survivors[k]];
    p.replica.reset();
    ReplicaSpec spec;
    spec.group = "old.v2";
    spec.index = k;
    spec.options = o2;
    spec.connect_timeout_ms = 20000;
    auto r = Replica::create(*nics[1 + survivors[k]], {p.region.data(), p.region.size()}, spec);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    p.replica = std::move(r).value();
    ASSERT_TRUE(p.replica->serve(*p.listener).ok());
  }
  Status down0, down1;
  std::thread t0([&] { down0 = c.replicas[0]->replica->connect_downstream(c.replicas[2]->listener->address()); });
  std::thread t1([&] { down1 = c.replicas[2]->replica->connect_downstream(c.client_listener->address()); });
  const Status moved = client->reconnect_group(c.gid, ro);
  t0.join();
  t1.join();
  ASSERT_TRUE(moved.ok()) << moved.to_string();
  ASSERT_TRUE(down0.ok() && down1.ok()) << down0.to_string() << " / " << down1.to_string();
  (void)client->poll();
  EXPECT_EQ(stuck.code(), Code::kUnavailable) << stuck.to_string();
  EXPECT_EQ(client->outstanding(c.gid).value(), 0u);
  EXPECT_EQ(client->group_options(c.gid).value().replicas, 2u);
  // The client memory stayed; the new chain writes it to both survivors.
  EXPECT_EQ(client->client_memory(c.gid).value().data(), mem.data());
  std::memset(mem.data() + 512, 0xA5, 128);
  ASSERT_TRUE(client->gwrite(c.gid, 512, 128, true).ok());
  for (uint32_t i : survivors) {
    EXPECT_EQ(std::memcmp(c.region(i).data() + 512, mem.data() + 512, 128), 0) << "replica " << i;
    EXPECT_EQ(std::memcmp(c.region(i).data(), mem.data(), 256), 0) << "replica " << i;
  }
  auto cas = client->gcas(c.gid, 4096, 0, 7, 0b11);
  ASSERT_TRUE(cas.ok()) << cas.status().to_string();
  EXPECT_EQ(cas.value().succeeded, 0b11);
}

}  // namespace
}  // namespace ferry::hyperloop
