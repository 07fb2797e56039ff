#include "store_config.h"

#include <toml++/toml.h>

#include <algorithm>

#include "ferry/hyperloop/chain_manager.h"
#include "ferry/hyperloop/txn_kv_wire.h"
#include "ferry/membership/view.h"
#include "ferry/rpc/format.h"
#include "toml_fields.h"

namespace ferry::apps {

namespace {

constexpr uint64_t kStorePage = 4096;
constexpr uint32_t kStoreScanReplyBytes = 16 << 10;

uint64_t round_to_page(uint64_t bytes) { return (bytes + kStorePage - 1) / kStorePage * kStorePage; }
uint32_t round_to_64(uint64_t bytes) { return static_cast<uint32_t>((bytes + 63) / 64 * 64); }

}  // namespace

std::string StoreConfig::data_group(uint64_t version) const {
  return version <= 1 ? name + ".data" : name + ".data.v" + std::to_string(version);
}

std::string StoreConfig::lock_group(uint64_t version) const {
  return version <= 1 ? name + ".locks" : name + ".locks.v" + std::to_string(version);
}

hyperloop::StoreChainKeys StoreConfig::chain_keys() const {
  return hyperloop::StoreChainKeys::of(membership.cluster, name);
}

const MemberConfig* StoreConfig::member(std::string_view id) const {
  for (const auto* list : {&replicas, &spares}) {
    for (const MemberConfig& m : *list) {
      if (m.id == id) return &m;
    }
  }
  return nullptr;
}

hyperloop::GroupOptions StoreConfig::data_options() const {
  hyperloop::GroupOptions o;
  o.replicas = static_cast<uint32_t>(replicas.size());
  o.region_bytes = round_to_page(hyperloop::kTxnControlBytes + txn.log_bytes + txn.db_bytes);
  return o;
}

hyperloop::GroupOptions StoreConfig::lock_options() const {
  hyperloop::GroupOptions o;
  o.replicas = static_cast<uint32_t>(replicas.size());
  o.region_bytes = round_to_page(uint64_t{8} * hyperloop::txn_kv_lock_words(kv));
  return o;
}

rpc::ServerOptions StoreConfig::read_server_options() const {
  rpc::ServerOptions o;
  o.mode = rpc::Mode::kRawRpc;
  o.workers = 1;
  o.threaded = false;  // the replica's main thread polls it, and sleeps when idle
  o.multi_packet = false;
  o.buffers = 16;
  o.max_request_bytes = std::max<uint32_t>(
      256, round_to_64(rpc::kRequestHeaderBytes + hyperloop::kTxnKvReadRequestHeaderBytes + kv.key_max));
  o.max_response_bytes = std::max<uint32_t>(
      kStoreScanReplyBytes, round_to_64(rpc::kResponseHeaderBytes + hyperloop::txn_kv_reply_bytes(kv.key_max, kv.value_max)));
  o.max_connections = 64;
  return o;
}

rpc::ServerInfo StoreConfig::read_server_info() const {
  const rpc::ServerOptions o = read_server_options();
  rpc::ServerInfo i;
  i.mode = o.mode;
  i.durable = false;
  i.workers = o.workers;
  i.max_request_bytes = o.max_request_bytes;
  i.max_response_bytes = o.max_response_bytes;
  return i;
}

Result<StoreConfig> parse_store_config(std::string_view text, std::string_view source) {
  FERRY_ASSIGN_OR_RETURN(toml::table root, parse_toml(text, source));
  FERRY_RETURN_IF_ERROR(check_keys(root, source, "the file", {"store", "client", "replica", "spare", "membership"}));
  StoreConfig c;
  const toml::table* store = root["store"].as_table();
  if (store == nullptr) return invalid_argument(std::string(source) + ": the [store] table is missing");
  FERRY_RETURN_IF_ERROR(check_keys(*store, source, "[store]",
                                   {"name", "replicas", "log_bytes", "db_bytes", "slots", "key_max", "value_max",
                                    "locks", "connect_timeout_ms"}));
  FERRY_ASSIGN_OR_RETURN(c.name, string(*store, "name", source, "store.name", false));
  if (c.name.empty()) c.name = "s0";
  if (c.name.size() > 64 || std::any_of(c.name.begin(), c.name.end(), [](char ch) { return ch <= ' ' || ch > '~'; })) {
    return invalid_argument(where(source, "store.name") + " '" + c.name +
                            "' must be 1..64 printable characters without spaces");
  }
  FERRY_ASSIGN_OR_RETURN(const uint64_t replicas,
                         integer(*store, "replicas", source, "store.replicas", 0, 1, hyperloop::kMaxReplicas));
  if (replicas == 0) return invalid_argument(where(source, "store.replicas") + " is missing");
  auto u32 = [&](std::string_view key, uint32_t* out, uint64_t lo, uint64_t hi) -> Status {
    FERRY_ASSIGN_OR_RETURN(const uint64_t v, integer(*store, key, source, "store." + std::string(key), *out, lo, hi));
    *out = static_cast<uint32_t>(v);
    return ok_status();
  };
  FERRY_RETURN_IF_ERROR(u32("slots", &c.kv.slots, 1, uint64_t{1} << 24));
  FERRY_RETURN_IF_ERROR(u32("key_max", &c.kv.key_max, 1, 1024));
  c.kv.value_max = 256;
  FERRY_RETURN_IF_ERROR(u32("value_max", &c.kv.value_max, 1, 65536));
  FERRY_RETURN_IF_ERROR(u32("locks", &c.kv.locks, 1, 65536));
  FERRY_RETURN_IF_ERROR(u32("connect_timeout_ms", &c.connect_timeout_ms, 1, 3'600'000));
  FERRY_ASSIGN_OR_RETURN(c.txn.log_bytes, integer(*store, "log_bytes", source, "store.log_bytes", c.txn.log_bytes,
                                                  4096, uint64_t{1} << 32));
  if (c.txn.log_bytes % hyperloop::kTxnRecordAlign != 0) {
    return invalid_argument(where(source, "store.log_bytes") + " = " + std::to_string(c.txn.log_bytes) +
                            " must be a multiple of 64");
  }
  const uint64_t table_bytes = hyperloop::txn_kv_db_bytes(c.kv);
  FERRY_ASSIGN_OR_RETURN(c.txn.db_bytes,
                         integer(*store, "db_bytes", source, "store.db_bytes", 0, 0, uint64_t{1} << 40));
  if (c.txn.db_bytes == 0) c.txn.db_bytes = table_bytes;
  if (c.txn.db_bytes < table_bytes) {
    return invalid_argument(where(source, "store.db_bytes") + " = " + std::to_string(c.txn.db_bytes) +
                            " is smaller than the table needs (" + std::to_string(table_bytes) +
                            " bytes for these slots, key_max, value_max; 0 derives it)");
  }
  // A put's record (its slot and the index nodes it changes) must fit the
  // ring several times over, or the ring is full after every put.
  const uint64_t slot_bytes = (32 + uint64_t{c.kv.key_max} + c.kv.value_max + 63) / 64 * 64;
  const uint64_t record_max = 64 + slot_bytes + 13 * 64 + 16 * 14;
  if (c.txn.log_bytes < 4 * record_max) {
    return invalid_argument(where(source, "store.log_bytes") + " = " + std::to_string(c.txn.log_bytes) +
                            " is too small for records of key_max and value_max (at least " +
                            std::to_string(4 * record_max) + ")");
  }

  FERRY_RETURN_IF_ERROR(
      parse_chain_members(root, source, replicas, "store.replicas", &c.client, &c.replicas, /*with_ids=*/true));
  if (const toml::node* spares = root.get("spare")) {
    const toml::array* list = spares->as_array();
    if (list == nullptr) return invalid_argument(where(source, "spare") + " must be an array of tables ([[spare]])");
    for (size_t i = 0; i < list->size(); ++i) {
      const toml::table* t = (*list)[i].as_table();
      const std::string path = "spare[" + std::to_string(i) + "]";
      if (t == nullptr) return invalid_argument(where(source, path) + " must be a table ([[spare]])");
      FERRY_ASSIGN_OR_RETURN(MemberConfig m, parse_member_config(*t, source, path, true, /*with_id=*/true));
      c.spares.push_back(std::move(m));
    }
  }
  // Ids (defaults r<i>, spare<i>) and listen addresses are unique over
  // replicas and spares: a spare takes a replica's place in the chain.
  std::vector<std::pair<std::string, MemberConfig*>> all;
  for (size_t i = 0; i < c.replicas.size(); ++i) all.emplace_back("replica[" + std::to_string(i) + "]", &c.replicas[i]);
  for (size_t i = 0; i < c.spares.size(); ++i) all.emplace_back("spare[" + std::to_string(i) + "]", &c.spares[i]);
  for (size_t i = 0; i < all.size(); ++i) {
    MemberConfig& m = *all[i].second;
    const bool spare = i >= c.replicas.size();
    if (m.id.empty()) m.id = (spare ? "spare" : "r") + std::to_string(spare ? i - c.replicas.size() : i);
    if (Status s = membership::validate_name("id", m.id); !s.ok()) {
      return invalid_argument(where(source, all[i].first + ".id") + ": " + s.message());
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (all[i].second->listen == all[j].second->listen) {
        return invalid_argument(where(source, all[i].first + ".listen") + " '" + all[i].second->listen + "' is " +
                                all[j].first + "'s too");
      }
      if (all[i].second->id == all[j].second->id) {
        return invalid_argument(where(source, all[i].first + ".id") + " '" + all[i].second->id + "' is " +
                                all[j].first + "'s too");
      }
    }
  }
  if (const toml::node* node = root.get("membership")) {
    const toml::table* m = node->as_table();
    if (m == nullptr) return invalid_argument(where(source, "membership") + " must be a table");
    FERRY_RETURN_IF_ERROR(check_keys(*m, source, "[membership]", {"etcd", "cluster", "heartbeat_ms", "missed_beats"}));
    StoreMembershipConfig& mc = c.membership;
    FERRY_ASSIGN_OR_RETURN(mc.etcd, string(*m, "etcd", source, "membership.etcd", true));
    if (mc.etcd.rfind("http://", 0) != 0 || mc.etcd.size() <= 7 || mc.etcd.back() == '/') {
      return invalid_argument(where(source, "membership.etcd") + " '" + mc.etcd +
                              "' must be an etcd endpoint http://HOST:PORT");
    }
    FERRY_ASSIGN_OR_RETURN(mc.cluster, string(*m, "cluster", source, "membership.cluster", false));
    if (mc.cluster.empty()) mc.cluster = "ferry";
    if (Status s = membership::validate_name("cluster", mc.cluster); !s.ok()) {
      return invalid_argument(where(source, "membership.cluster") + ": " + s.message());
    }
    if (Status s = membership::validate_name("chain name", c.name); !s.ok()) {
      return invalid_argument(where(source, "store.name") + " names the chain in etcd: " + s.message());
    }
    FERRY_ASSIGN_OR_RETURN(const uint64_t beat, integer(*m, "heartbeat_ms", source, "membership.heartbeat_ms",
                                                        mc.heartbeat_ms, 1, 60'000));
    mc.heartbeat_ms = static_cast<uint32_t>(beat);
    FERRY_ASSIGN_OR_RETURN(const uint64_t missed, integer(*m, "missed_beats", source, "membership.missed_beats",
                                                          mc.missed_beats, 1, 1000));
    mc.missed_beats = static_cast<uint32_t>(missed);
    // A joining member copies from a survivor: a chain of one has none, and
    // replacing its only member would leave the data in a removed member's file.
    if (c.replicas.size() < 2) {
      return invalid_argument(where(source, "membership") + " needs store.replicas >= 2: recovery copies a failed "
                              "member's data from a surviving one");
    }
    c.recovery = true;
  } else if (!c.spares.empty()) {
    return invalid_argument(std::string(source) + ": [[spare]] tables need a [membership] table (recovery is off "
                            "without one)");
  }
  if (Status s = hyperloop::validate_group_options(c.data_options()); !s.ok()) {
    return invalid_argument(std::string(source) + ": [store]: " + s.message());
  }
  return c;
}

Result<StoreConfig> load_store_config(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(const std::string text, read_config_file(path));
  return parse_store_config(text, path);
}

}  // namespace ferry::apps
