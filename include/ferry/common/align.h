// Rounding a size up to a multiple, for ring slots, records and pages.
#pragma once

#include <concepts>
#include <type_traits>

namespace ferry {

// The smallest multiple of `to` at or above v. Precondition: to > 0 and the
// result fits in T.
template <std::unsigned_integral T>
constexpr T round_up(T v, std::type_identity_t<T> to) {
  return (v + to - 1) / to * to;
}

}  // namespace ferry
