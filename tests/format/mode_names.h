// Short names for the rounding and overflow modes that the format tests pass on nearly every
// line (format/rounding.h).
#pragma once
#include "mixp/format/rounding.h"

namespace mixp::test::modes {

inline constexpr Round RNE = Round::nearest_even;
inline constexpr Round RTZ = Round::toward_zero;
inline constexpr Round RNA = Round::nearest_away;
inline constexpr Round SR = Round::stochastic;
inline constexpr Overflow IEEE = Overflow::ieee;
inline constexpr Overflow SAT = Overflow::saturate;

}  // namespace mixp::test::modes
