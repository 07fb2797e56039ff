#include "logkv_config.h"

#include <toml++/toml.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "toml_fields.h"

namespace ferry::apps {

namespace {

constexpr std::string_view kLogKvDefaultNicd = "/run/ferry/nicd.sock";

Result<store::logkv::MemberAddress> logkv_member(const toml::table& t, std::string_view source, const std::string& path,
                                           bool server) {
  if (server) {
    FERRY_RETURN_IF_ERROR(check_keys(t, source, path, {"nicd", "listen", "dir"}));
  } else {
    FERRY_RETURN_IF_ERROR(check_keys(t, source, path, {"nicd", "listen"}));
  }
  store::logkv::MemberAddress m;
  FERRY_ASSIGN_OR_RETURN(m.nicd, string(t, "nicd", source, path + ".nicd", false));
  if (m.nicd.empty()) m.nicd = std::string(kLogKvDefaultNicd);
  FERRY_ASSIGN_OR_RETURN(m.listen, string(t, "listen", source, path + ".listen", true));
  FERRY_RETURN_IF_ERROR(check_listen(m.listen, source, path + ".listen"));
  if (server) {
    FERRY_ASSIGN_OR_RETURN(m.dir, string(t, "dir", source, path + ".dir", true));
  }
  return m;
}

}  // namespace

Result<LogKvConfig> parse_logkv_config(std::string_view text, std::string_view source) {
  FERRY_ASSIGN_OR_RETURN(toml::table root, parse_toml(text, source));
  FERRY_RETURN_IF_ERROR(check_keys(root, source, "the file", {"cluster", "coordinator", "server", "client"}));
  LogKvConfig c;
  store::logkv::Deployment& d = c.deployment;
  store::logkv::ServerOptions& so = d.server;
  // Deployed backups hold DRAM buffers (battery-backed): see check_deployment.
  so.media = tailwind::BufferMedia::kDram;
  so.flush = false;
  so.replicas = 2;
  so.workers = 1;
  so.segment_bytes = 1 << 20;
  so.backup_buffers = 16;
  d.tables = {"usertable"};
  const toml::table* cluster = root["cluster"].as_table();
  if (cluster == nullptr) return invalid_argument(std::string(source) + ": the [cluster] table is missing");
  FERRY_RETURN_IF_ERROR(check_keys(*cluster, source, "[cluster]",
                                   {"replication", "replicas", "workers", "segment_bytes", "backup_buffers", "storage",
                                    "max_request_bytes", "clean_below", "clean_interval_ms", "tablets_per_table",
                                    "tables", "heartbeat_ms", "missed_beats", "connect_timeout_ms", "worker_cpus"}));
  FERRY_ASSIGN_OR_RETURN(const std::string replication,
                         string(*cluster, "replication", source, "cluster.replication", false));
  if (!replication.empty()) {
    auto r = tailwind::parse_replication(replication);
    if (!r.ok()) return invalid_argument(where(source, "cluster.replication") + ": " + r.status().message());
    so.replication = r.value();
  }
  FERRY_ASSIGN_OR_RETURN(const std::string storage, string(*cluster, "storage", source, "cluster.storage", false));
  if (!storage.empty()) {
    auto m = tailwind::parse_storage_mode(storage);
    if (!m.ok()) return invalid_argument(where(source, "cluster.storage") + ": " + m.status().message());
    so.storage_mode = m.value();
  }
  auto u32 = [&](std::string_view key, uint32_t* out, uint64_t lo, uint64_t hi) -> Status {
    FERRY_ASSIGN_OR_RETURN(const uint64_t v, integer(*cluster, key, source, "cluster." + std::string(key), *out, lo, hi));
    *out = static_cast<uint32_t>(v);
    return ok_status();
  };
  FERRY_RETURN_IF_ERROR(u32("replicas", &so.replicas, 1, 16));
  FERRY_RETURN_IF_ERROR(u32("workers", &so.workers, 1, 63));
  FERRY_RETURN_IF_ERROR(u32("backup_buffers", &so.backup_buffers, 1, 4096));
  FERRY_RETURN_IF_ERROR(u32("max_request_bytes", &so.max_request_bytes, 256, 1 << 20));
  FERRY_RETURN_IF_ERROR(u32("clean_interval_ms", &d.clean_interval_ms, 0, 3'600'000));
  FERRY_RETURN_IF_ERROR(u32("tablets_per_table", &d.tablets_per_table, 0, 16384));
  FERRY_RETURN_IF_ERROR(u32("heartbeat_ms", &d.heartbeat_ms, 1, 60'000));
  FERRY_RETURN_IF_ERROR(u32("missed_beats", &d.missed_beats, 1, 1000));
  FERRY_RETURN_IF_ERROR(u32("connect_timeout_ms", &d.connect_timeout_ms, 1, 3'600'000));
  FERRY_ASSIGN_OR_RETURN(const uint64_t segment_bytes,
                         integer(*cluster, "segment_bytes", source, "cluster.segment_bytes", so.segment_bytes, 4096,
                                 uint64_t{1} << 30));
  so.segment_bytes = segment_bytes;
  if (const toml::node* n = cluster->get("clean_below")) {
    const auto v = n->value<double>();
    if (!v || !(*v > 0.0 && *v <= 1.0)) {
      return invalid_argument(where(source, "cluster.clean_below") + " must be a number in (0, 1]");
    }
    so.clean_below = *v;
  }
  if (const toml::node* n = cluster->get("tables")) {
    const toml::array* a = n->as_array();
    if (a == nullptr) return invalid_argument(where(source, "cluster.tables") + " must be an array of names");
    d.tables.clear();
    for (const auto& e : *a) {
      const auto name = e.value<std::string_view>();
      if (!e.is_string() || !name) return invalid_argument(where(source, "cluster.tables") + " must hold strings");
      d.tables.emplace_back(*name);
    }
  }
  if (const toml::node* n = cluster->get("worker_cpus")) {
    const toml::array* a = n->as_array();
    if (a == nullptr) return invalid_argument(where(source, "cluster.worker_cpus") + " must be an array of CPUs");
    for (const auto& e : *a) {
      const auto cpu = e.value<int64_t>();
      if (!e.is_integer() || !cpu || *cpu < 0 || *cpu > 4095) {
        return invalid_argument(where(source, "cluster.worker_cpus") + " must hold CPU numbers");
      }
      so.worker_cpus.push_back(static_cast<int>(*cpu));
    }
  }

  const toml::table* coordinator = root["coordinator"].as_table();
  if (coordinator == nullptr) return invalid_argument(std::string(source) + ": the [coordinator] table is missing");
  FERRY_ASSIGN_OR_RETURN(d.coordinator, logkv_member(*coordinator, source, "coordinator", false));
  const toml::array* list = root["server"].as_array();
  if (list == nullptr) return invalid_argument(std::string(source) + ": no [[server]] tables");
  for (size_t i = 0; i < list->size(); ++i) {
    const toml::table* t = (*list)[i].as_table();
    const std::string path = "server[" + std::to_string(i) + "]";
    if (t == nullptr) return invalid_argument(where(source, path) + " must be a table ([[server]])");
    FERRY_ASSIGN_OR_RETURN(auto m, logkv_member(*t, source, path, true));
    d.servers.push_back(std::move(m));
  }
  if (const toml::table* client = root["client"].as_table()) {
    FERRY_RETURN_IF_ERROR(check_keys(*client, source, "[client]", {"nicd"}));
    FERRY_ASSIGN_OR_RETURN(c.client_nicd, string(*client, "nicd", source, "client.nicd", false));
  }
  if (c.client_nicd.empty()) c.client_nicd = std::string(kLogKvDefaultNicd);
  if (Status s = store::logkv::check_deployment(d); !s.ok()) {
    return invalid_argument(std::string(source) + ": " + s.message());
  }
  return c;
}

Result<LogKvConfig> load_logkv_config(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(const std::string text, read_config_file(path));
  return parse_logkv_config(text, path);
}

}  // namespace ferry::apps
