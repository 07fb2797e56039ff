#include "toml_fields.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ferry/nic/types.h"

namespace ferry::apps {

Result<toml::table> parse_toml(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return invalid_argument(std::string(source) + ":" + std::to_string(e.source().begin.line) + ": " +
                            std::string(e.description()));
  }
}

Result<std::string> read_config_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return not_found("cannot read the configuration " + path + ": " + std::strerror(errno));
  std::stringstream buf;
  buf << f.rdbuf();
  return buf.str();
}

std::string where(std::string_view source, std::string_view key) {
  return std::string(source) + ": " + std::string(key);
}

// An integer key in [lo, hi], or `fallback` when absent.
Result<uint64_t> integer(const toml::table& t, std::string_view key, std::string_view source, std::string_view path,
                         uint64_t fallback, uint64_t lo, uint64_t hi) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return fallback;
  const auto v = n->value<int64_t>();
  if (!n->is_integer() || !v) return invalid_argument(where(source, path) + " must be an integer");
  if (*v < 0 || static_cast<uint64_t>(*v) < lo || static_cast<uint64_t>(*v) > hi) {
    return invalid_argument(where(source, path) + " = " + std::to_string(*v) + " is outside " + std::to_string(lo) +
                            ".." + std::to_string(hi));
  }
  return static_cast<uint64_t>(*v);
}

Result<std::string> string(const toml::table& t, std::string_view key, std::string_view source, std::string_view path,
                           bool required) {
  const toml::node* n = t.get(key);
  if (n == nullptr) {
    if (required) return invalid_argument(where(source, path) + " is missing");
    return std::string();
  }
  if (!n->is_string()) return invalid_argument(where(source, path) + " must be a string");
  return std::string(*n->value<std::string_view>());
}

Status check_keys(const toml::table& t, std::string_view source, std::string_view table,
                  std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : t) {
    bool ok = false;
    for (std::string_view name : known) ok = ok || k.str() == name;
    if (!ok) return invalid_argument(std::string(source) + ": unknown key '" + std::string(k.str()) + "' in " + std::string(table));
  }
  return ok_status();
}

Status check_listen(const std::string& listen, std::string_view source, std::string_view path) {
  if (auto ep = nic::UdpEndpoint::parse(listen); !ep.ok() || ep.value().port == 0) {
    return invalid_argument(where(source, path) + " '" + listen +
                            "' must be an IPv4 address and a non-zero port, like 10.0.0.2:7400");
  }
  return ok_status();
}

}  // namespace ferry::apps
