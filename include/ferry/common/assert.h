// Assertions are contracts. FERRY_ASSERT stays on in every build (tests,
// simulation and benchmarks): a broken invariant aborts with a message rather
// than corrupting memory. FERRY_DASSERT is for checks too costly for a hot path
// in optimized builds; it is on when FERRY_DEBUG_CHECKS is defined (debug and
// sanitizer builds).
#pragma once

#include <sstream>
#include <string>

namespace ferry::detail {

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

template <typename... Args>
std::string assert_message(const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    return {};
  } else {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
  }
}

}  // namespace ferry::detail

#define FERRY_ASSERT(cond, ...)                                                        \
  do {                                                                                 \
    if (__builtin_expect(!(cond), 0)) {                                                \
      ::ferry::detail::assert_fail(#cond, __FILE__, __LINE__,                           \
                                   ::ferry::detail::assert_message(__VA_ARGS__));       \
    }                                                                                  \
  } while (0)

#ifdef FERRY_DEBUG_CHECKS
#define FERRY_DASSERT(cond, ...) FERRY_ASSERT(cond, __VA_ARGS__)
#else
#define FERRY_DASSERT(cond, ...) \
  do {                           \
  } while (0)
#endif
