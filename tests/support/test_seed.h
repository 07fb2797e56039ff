// The seeds of randomized tests, and numbers from the environment (test
// support).
//
// Every randomized test takes its seed from FERRY_SEED when set and prints
// the seed it used, "[ seed     ] FERRY_SEED=<n>", so that any run -- a
// failure in CI included -- can be repeated: rerun the test with that
// FERRY_SEED. Numbers are read in base 0 (strtoull's): decimal, 0x-prefixed
// hex (so a seed copied from a hex log line works), or 0-prefixed octal. A
// value that is not a whole number stops the test binary (exit 2) with a
// message naming the variable, rather than running with a seed nobody asked
// for.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::testing {

inline constexpr const char* kSeedVariable = "FERRY_SEED";

// The environment variable `name` as a whole number (base 0), or nullopt
// when it is unset or empty.
std::optional<uint64_t> env_number(const char* name);

// env_number(name), or `fallback` when it is unset or empty.
uint64_t env_u64(const char* name, uint64_t fallback);

// FERRY_SEED, or nullopt when it is unset or empty. Prints nothing.
std::optional<uint64_t> seed_from_env();

// Prints "[ seed     ] FERRY_SEED=<seed>" and `note` (if any) on stdout.
void print_seed(uint64_t seed, std::string_view note = {});

// The seed of a randomized test: FERRY_SEED, else `fallback`. Printed
// (print_seed), so that the run can be repeated.
uint64_t test_seed(uint64_t fallback);

// The seeds a test parameterized by seed runs: FERRY_SEED alone when set,
// else `defaults`. Prints nothing: each instance prints its own
// (print_seed), or the caller prints the list.
std::vector<uint64_t> test_seeds(std::initializer_list<uint64_t> defaults);
// The same with the defaults 1..count.
std::vector<uint64_t> test_seeds(uint64_t count);

// The seeds of a campaign: from FERRY_SEED (else `default_first`), as many
// as the environment variable `count_variable` says (else `default_count`).
// Printed as "[ seed     ] FERRY_SEED=<first>..<last> (<count_variable>=<n>)".
struct SeedRange {
  uint64_t first = 0;
  uint64_t count = 0;
  uint64_t last() const { return first + count - 1; }
};
SeedRange seed_range(const char* count_variable, uint64_t default_first, uint64_t default_count);

// How to rerun one seed: "FERRY_SEED=<seed>", with " <count_variable>=1"
// when the seed belongs to a campaign sized by that variable.
std::string rerun_with(uint64_t seed, const char* count_variable = nullptr);

}  // namespace ferry::testing
