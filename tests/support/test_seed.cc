// Seeds and numbers from the environment: base 0, printed, junk refused.
#include "test_seed.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace ferry::testing {

std::optional<uint64_t> env_number(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 0);
  // strtoull accepts a sign (and wraps a negative number): refuse it.
  const bool signed_text = text[0] == '-' || text[0] == '+';
  if (errno != 0 || end == text || *end != '\0' || signed_text) {
    std::fprintf(stderr, "%s=%s is not a whole number (decimal, or hex with 0x)\n", name, text);
    std::exit(2);
  }
  return static_cast<uint64_t>(value);
}

uint64_t env_u64(const char* name, uint64_t fallback) { return env_number(name).value_or(fallback); }

std::optional<uint64_t> seed_from_env() { return env_number(kSeedVariable); }

void print_seed(uint64_t seed, std::string_view note) {
  std::string line = "[ seed     ] " + rerun_with(seed);
  if (!note.empty()) line += " " + std::string(note);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

uint64_t test_seed(uint64_t fallback) {
  const uint64_t seed = seed_from_env().value_or(fallback);
  print_seed(seed);
  return seed;
}

std::vector<uint64_t> test_seeds(std::initializer_list<uint64_t> defaults) {
  if (const std::optional<uint64_t> seed = seed_from_env()) return {*seed};
  return std::vector<uint64_t>(defaults);
}

std::vector<uint64_t> test_seeds(uint64_t count) {
  if (const std::optional<uint64_t> seed = seed_from_env()) return {*seed};
  std::vector<uint64_t> seeds;
  for (uint64_t s = 1; s <= count; ++s) seeds.push_back(s);
  return seeds;
}

SeedRange seed_range(const char* count_variable, uint64_t default_first, uint64_t default_count) {
  SeedRange range;
  range.first = seed_from_env().value_or(default_first);
  range.count = env_u64(count_variable, default_count);
  if (range.count == 0) {
    std::printf("[ seed     ] no seeds (%s=0)\n", count_variable);
  } else {
    std::printf("[ seed     ] %s=%llu..%llu (%s=%llu; rerun one with %s)\n", kSeedVariable,
                static_cast<unsigned long long>(range.first), static_cast<unsigned long long>(range.last()),
                count_variable, static_cast<unsigned long long>(range.count),
                rerun_with(range.first, count_variable).c_str());
  }
  std::fflush(stdout);
  return range;
}

std::string rerun_with(uint64_t seed, const char* count_variable) {
  std::string s = std::string(kSeedVariable) + "=" + std::to_string(seed);
  if (count_variable != nullptr) s += std::string(" ") + count_variable + "=1";
  return s;
}

}  // namespace ferry::testing
