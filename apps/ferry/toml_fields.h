// Reading checked fields of the `ferry` tools' TOML files: every error names
// the file and the key, and says what was expected.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "ferry/common/status.h"

namespace ferry::apps {

// Parses TOML text; a syntax error is kInvalidArgument "source:line: what".
Result<toml::table> parse_toml(std::string_view text, std::string_view source);
// A file's whole text; kNotFound (with the reason) if it cannot be read.
Result<std::string> read_config_file(const std::string& path);

// "file: key"
std::string where(std::string_view source, std::string_view key);
// An integer key in [lo, hi], or `fallback` when absent.
Result<uint64_t> integer(const toml::table& t, std::string_view key, std::string_view source, std::string_view path,
                         uint64_t fallback, uint64_t lo, uint64_t hi);
// A string key; "" when absent and not `required`.
Result<std::string> string(const toml::table& t, std::string_view key, std::string_view source, std::string_view path,
                           bool required);
// kInvalidArgument naming the first key of `t` not in `known`.
Status check_keys(const toml::table& t, std::string_view source, std::string_view table,
                  std::initializer_list<std::string_view> known);
// "a.b.c.d:port" with a non-zero port, else kInvalidArgument naming the key.
Status check_listen(const std::string& listen, std::string_view source, std::string_view path);

}  // namespace ferry::apps
