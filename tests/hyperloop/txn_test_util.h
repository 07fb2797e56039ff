// A TxnClient over three HyperLoop replicas on a deterministic manual engine:
// a data group (PM by default) and a DRAM lock group, as the transaction
// tests (txn_test, txn_kv_test) and the replicated-RocksDB tests build it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>

#include "ferry/common/clock.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/txn.h"
#include "group_test_util.h"

namespace ferry::hyperloop::testing {

struct TxnChainOptions {
  size_t region_bytes = 64 << 10;  // the data group's
  pm::Media media = pm::Media::kPm;
  uint64_t log_bytes = 8 << 10;
  uint64_t db_bytes = 16 << 10;
  uint64_t lock_timeout_ns = 20'000'000;
  nic::FaultModel faults;  // on the chains' packets
  bool interleaved_flush = true;  // TxnOptions::interleaved_flush
};

inline TxnChainOptions txn_chain_options(size_t region_bytes, uint64_t log_bytes, uint64_t db_bytes,
                                         const nic::FaultModel& faults = {}) {
  TxnChainOptions o;
  o.region_bytes = region_bytes;
  o.log_bytes = log_bytes;
  o.db_bytes = db_bytes;
  o.faults = faults;
  return o;
}

struct TxnChain {
  static constexpr size_t kLockRegionBytes = 4096;

  explicit TxnChain(const TxnChainOptions& o = {}) : options(o) {
    nic::EngineOptions eo;
    eo.threaded = false;
    eo.clock = &clock;
    eo.faults = o.faults;
    engine = std::make_unique<nic::Engine>(eo);
    client = HyperLoopClient::create(*engine).value();
    data = make_group(*client, 3, o.media, o.region_bytes, 16, 4, false);
    locks = make_group(*client, 3, pm::Media::kDram, kLockRegionBytes, 16, 4, false);
    TxnOptions to;
    to.log_bytes = o.log_bytes;
    to.db_bytes = o.db_bytes;
    to.lock_timeout_ns = o.lock_timeout_ns;
    to.interleaved_flush = o.interleaved_flush;
    auto t = TxnClient::initialize(*client, data, locks, to);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (t.ok()) txn = std::move(t).value();
  }
  ~TxnChain() {
    txn.reset();
    client.reset();
  }
  ReplicaView replica(uint32_t r) { return client->replica(data, r).value(); }
  // Replica r's whole data region.
  std::span<uint8_t> region(uint32_t r) {
    ReplicaView v = replica(r);
    return {v.region->data(), v.region->size()};
  }
  // Replica r's lock words (its read locks).
  ReplicaLocks reader(uint32_t r) {
    ReplicaView v = client->replica(locks, r).value();
    return ReplicaLocks(v.region->data(), kLockRegionBytes);
  }

  TxnChainOptions options;
  FakeClock clock;
  std::unique_ptr<nic::Engine> engine;
  std::unique_ptr<HyperLoopClient> client;
  GroupId data = 0, locks = 0;
  std::unique_ptr<TxnClient> txn;
};

}  // namespace ferry::hyperloop::testing
