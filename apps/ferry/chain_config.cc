#include "chain_config.h"

#include "toml_fields.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

#include "ferry/nic/types.h"

namespace ferry::apps {

Result<MemberConfig> parse_member_config(const toml::table& t, std::string_view source, const std::string& path,
                                         bool replica, bool with_id) {
  if (replica && with_id) {
    FERRY_RETURN_IF_ERROR(check_keys(t, source, path, {"id", "nicd", "listen", "region"}));
  } else if (replica) {
    FERRY_RETURN_IF_ERROR(check_keys(t, source, path, {"nicd", "listen", "region"}));
  } else {
    FERRY_RETURN_IF_ERROR(check_keys(t, source, path, {"nicd", "listen"}));
  }
  MemberConfig m;
  if (with_id) {
    FERRY_ASSIGN_OR_RETURN(m.id, string(t, "id", source, path + ".id", false));
  }
  FERRY_ASSIGN_OR_RETURN(m.nicd, string(t, "nicd", source, path + ".nicd", false));
  if (m.nicd.empty()) m.nicd = "/run/ferry/nicd.sock";
  FERRY_ASSIGN_OR_RETURN(m.listen, string(t, "listen", source, path + ".listen", true));
  FERRY_RETURN_IF_ERROR(check_listen(m.listen, source, path + ".listen"));
  if (replica) {
    FERRY_ASSIGN_OR_RETURN(m.region, string(t, "region", source, path + ".region", false));
  }
  return m;
}

Status parse_chain_members(const toml::table& root, std::string_view source, uint32_t replicas,
                           std::string_view count_key, MemberConfig* client, std::vector<MemberConfig>* members,
                           bool with_ids) {
  const toml::table* c = root["client"].as_table();
  if (c == nullptr) return invalid_argument(std::string(source) + ": the [client] table is missing");
  FERRY_ASSIGN_OR_RETURN(*client, parse_member_config(*c, source, "client", false));
  const toml::array* list = root["replica"].as_array();
  if (list == nullptr) return invalid_argument(std::string(source) + ": no [[replica]] tables");
  members->clear();
  for (size_t i = 0; i < list->size(); ++i) {
    const toml::table* t = (*list)[i].as_table();
    const std::string path = "replica[" + std::to_string(i) + "]";
    if (t == nullptr) return invalid_argument(where(source, path) + " must be a table ([[replica]])");
    FERRY_ASSIGN_OR_RETURN(MemberConfig m, parse_member_config(*t, source, path, true, with_ids));
    members->push_back(std::move(m));
  }
  if (members->size() != replicas) {
    return invalid_argument(std::string(source) + ": " + std::string(count_key) + " = " + std::to_string(replicas) +
                            " but " + std::to_string(members->size()) + " [[replica]] tables");
  }
  return ok_status();
}

Result<ChainConfig> parse_chain_config(std::string_view text, std::string_view source) {
  FERRY_ASSIGN_OR_RETURN(toml::table root, parse_toml(text, source));
  FERRY_RETURN_IF_ERROR(check_keys(root, source, "the file", {"group", "client", "replica"}));
  ChainConfig c;
  const toml::table* group = root["group"].as_table();
  if (group == nullptr) return invalid_argument(std::string(source) + ": the [group] table is missing");
  FERRY_RETURN_IF_ERROR(check_keys(*group, source, "[group]",
                                   {"system", "name", "replicas", "region_bytes", "ring_ops", "window",
                                    "flush_verb", "connect_timeout_ms"}));
  FERRY_ASSIGN_OR_RETURN(c.system, string(*group, "system", source, "group.system", false));
  if (c.system.empty()) c.system = "hyperloop";
  if (c.system != "hyperloop" && c.system != "naive-event" && c.system != "naive-poll") {
    return invalid_argument(std::string(source) + ": group.system '" + c.system +
                            "' must be hyperloop, naive-event or naive-poll");
  }
  FERRY_ASSIGN_OR_RETURN(c.group, string(*group, "name", source, "group.name", false));
  if (c.group.empty()) c.group = "g0";
  for (char ch : c.group) {
    if (ch <= ' ' || ch > '~' || c.group.size() > 64) {
      return invalid_argument(std::string(source) + ": group name '" + c.group +
                              "' must be 1..64 printable characters without spaces");
    }
  }
  hyperloop::GroupOptions& o = c.options;
  FERRY_ASSIGN_OR_RETURN(const uint64_t replicas,
                         integer(*group, "replicas", source, "group.replicas", 0, 1, hyperloop::kMaxReplicas));
  if (replicas == 0) return invalid_argument(std::string(source) + ": group.replicas is missing");
  o.replicas = static_cast<uint32_t>(replicas);
  FERRY_ASSIGN_OR_RETURN(o.region_bytes, integer(*group, "region_bytes", source, "group.region_bytes", o.region_bytes,
                                                 4096, uint64_t{1} << 40));
  FERRY_ASSIGN_OR_RETURN(const uint64_t ring_ops, integer(*group, "ring_ops", source, "group.ring_ops", o.ring_ops, 8, 1024));
  o.ring_ops = static_cast<uint32_t>(ring_ops);
  FERRY_ASSIGN_OR_RETURN(const uint64_t window, integer(*group, "window", source, "group.window", o.window, 1, 256));
  o.window = static_cast<uint32_t>(window);
  FERRY_ASSIGN_OR_RETURN(const uint64_t timeout, integer(*group, "connect_timeout_ms", source,
                                                         "group.connect_timeout_ms", c.connect_timeout_ms, 1, 3'600'000));
  c.connect_timeout_ms = static_cast<uint32_t>(timeout);
  if (const toml::node* f = group->get("flush_verb")) {
    if (!f->is_boolean()) return invalid_argument(std::string(source) + ": group.flush_verb must be true or false");
    o.flush_verb = *f->value<bool>();
  }
  if (Status s = hyperloop::validate_group_options(o); !s.ok()) {
    return invalid_argument(std::string(source) + ": [group]: " + s.message());
  }

  FERRY_RETURN_IF_ERROR(parse_chain_members(root, source, o.replicas, "group.replicas", &c.client, &c.replicas));
  return c;
}

Result<ChainConfig> load_chain_config(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(const std::string text, read_config_file(path));
  return parse_chain_config(text, path);
}

}  // namespace ferry::apps
