// Helpers shared by the HyperLoop and Naive-RDMA tests: both implement
// GroupClient, so groups, replica bytes and power-failure images are reached
// the same way.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <vector>

#include "ferry/hyperloop/group.h"

namespace ferry::hyperloop::testing {

inline uint64_t word(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void set_word(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// The lossy fabric the chain tests run on: 2 % of packets dropped, 1 %
// duplicated, 2 % held back up to 50 us (reordered), from `seed`.
inline nic::FaultModel lossy_faults(uint64_t seed) {
  nic::FaultModel faults;
  faults.seed = seed;
  faults.drop = 0.02;
  faults.duplicate = 0.01;
  faults.delay = 0.02;
  faults.delay_max_ns = 50'000;
  return faults;
}

// Creates a group; a failure fails the test (and returns group 0).
inline GroupId make_group(GroupClient& c, uint32_t replicas, pm::Media media, size_t region_bytes, uint32_t ring_ops,
                          uint32_t window, bool flush_verb) {
  GroupOptions o;
  o.replicas = replicas;
  o.region_bytes = region_bytes;
  o.media = media;
  o.ring_ops = ring_ops;
  o.window = window;
  o.flush_verb = flush_verb;
  auto gid = c.create_group(o);
  EXPECT_TRUE(gid.ok()) << gid.status().to_string();
  return gid.ok() ? gid.value() : 0;
}

inline uint8_t* replica_data(GroupClient& c, GroupId g, uint32_t r) { return c.replica(g, r).value().region->data(); }

// Every replica's region equals its model; reports the first differing byte.
inline void expect_replicas_equal(GroupClient& c, GroupId g, const std::vector<std::vector<uint8_t>>& model) {
  for (uint32_t r = 0; r < model.size(); ++r) {
    const uint8_t* got = replica_data(c, g, r);
    for (size_t i = 0; i < model[r].size(); ++i) {
      if (got[i] != model[r][i]) {
        ADD_FAILURE() << "replica " << r << " differs from the model first at byte " << i << ": "
                      << static_cast<int>(got[i]) << " != " << static_cast<int>(model[r][i]);
        break;
      }
    }
  }
}

// Whether replica r would still hold `want` at `offset` after power_fail(seed).
inline bool survives_power_fail(GroupClient& c, GroupId g, uint32_t r, uint64_t seed, uint64_t offset,
                                std::span<const uint8_t> want) {
  const ReplicaView v = c.replica(g, r).value();
  const auto image = v.domain->image_after_power_fail(*v.region, seed);
  return std::memcmp(image.data() + offset, want.data(), want.size()) == 0;
}

}  // namespace ferry::hyperloop::testing
