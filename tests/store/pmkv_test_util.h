// Helpers shared by the PmKv suites: PM files in a per-process directory,
// seed control from the environment, a dump of the store for comparing with
// a model.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ferry/common/rng.h"
#include "ferry/pm/domain.h"
#include "ferry/store/pmkv.h"
#include "test_seed.h"

namespace ferry::store::testing {

inline std::filesystem::path pmkv_temp_dir() {
  return std::filesystem::temp_directory_path() / ("ferry-pmkv-test-" + std::to_string(getpid()));
}

class PmKvTempDirCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;  // nothing to remove if no test made a file
    std::filesystem::remove_all(pmkv_temp_dir(), ignored);
  }
};
inline ::testing::Environment* const kPmKvTempDirCleanup = ::testing::AddGlobalTestEnvironment(new PmKvTempDirCleanup);

// A fresh (zeroed) PM file of `bytes` bytes, mapped in its own domain.
struct PmFile {
  std::string path;
  std::unique_ptr<pm::PersistenceDomain> domain;
  pm::Region* region = nullptr;
};

inline PmFile map_fresh(const std::string& name, size_t bytes, const pm::PlatformConfig& config = {}) {
  std::filesystem::create_directories(pmkv_temp_dir());
  PmFile f;
  f.path = (pmkv_temp_dir() / name).string();
  std::filesystem::remove(f.path);
  f.domain = std::make_unique<pm::PersistenceDomain>(config);
  auto region = f.domain->map_pm(f.path, bytes, /*create=*/true);
  EXPECT_TRUE(region.ok()) << region.status().to_string();
  f.region = region.ok() ? region.value() : nullptr;
  return f;
}

// The seeds a randomized test runs, printed: FERRY_SEED=s runs only s;
// otherwise 0..count-1 with count = FERRY_PMKV_SEEDS or `default_count`.
using ferry::testing::SeedRange;
inline SeedRange seeds(uint64_t default_count) {
  if (const std::optional<uint64_t> one = ferry::testing::seed_from_env()) {
    ferry::testing::print_seed(*one);
    return {*one, 1};
  }
  return ferry::testing::seed_range("FERRY_PMKV_SEEDS", 0, default_count);
}

inline std::string random_bytes(Rng& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng.next() & 0xFF);
  return s;
}

// The store's content; a key seen twice is reported in `duplicate`.
struct Dump {
  std::map<std::string, std::string> entries;
  std::string duplicate;
  Status status;
};
inline Dump dump(const PmKv& kv) {
  Dump d;
  d.status = kv.for_each([&](std::string_view key, std::string_view value) {
    if (!d.entries.emplace(std::string(key), std::string(value)).second) d.duplicate = std::string(key);
  });
  return d;
}

// Printable form of a binary key for failure messages.
inline std::string hex(std::string_view s, size_t max = 16) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    out += kDigits[static_cast<uint8_t>(s[i]) >> 4];
    out += kDigits[static_cast<uint8_t>(s[i]) & 15];
  }
  if (s.size() > max) out += "...(" + std::to_string(s.size()) + " B)";
  return out;
}

}  // namespace ferry::store::testing
