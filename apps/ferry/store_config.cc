#include "store_config.h"

#include <toml++/toml.h>

#include <algorithm>

#include "ferry/hyperloop/txn_kv_wire.h"
#include "ferry/rpc/format.h"
#include "toml_fields.h"

namespace ferry::apps {

namespace {

constexpr uint64_t kStorePage = 4096;
constexpr uint32_t kStoreScanReplyBytes = 16 << 10;

uint64_t round_to_page(uint64_t bytes) { return (bytes + kStorePage - 1) / kStorePage * kStorePage; }
uint32_t round_to_64(uint64_t bytes) { return static_cast<uint32_t>((bytes + 63) / 64 * 64); }

}  // namespace

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
  FERRY_RETURN_IF_ERROR(check_keys(root, source, "the file", {"store", "client", "replica"}));
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

  FERRY_RETURN_IF_ERROR(parse_chain_members(root, source, replicas, "store.replicas", &c.client, &c.replicas));
  for (size_t i = 0; i < c.replicas.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (c.replicas[i].listen == c.replicas[j].listen) {
        return invalid_argument(where(source, "replica[" + std::to_string(i) + "].listen") + " '" +
                                c.replicas[i].listen + "' is replica[" + std::to_string(j) + "]'s too");
      }
    }
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
