// The rounding of the low-bit quantizers (lowbit_codes.cpp): nearbyint, bit for bit, as the
// packed model's fused input codes round them (backend/lowbit_gemm.h, act_codes_u8).
#pragma once
#include <cmath>

namespace mixp::quant {

// nearbyint (ties to even) without the libm call baseline x86-64 needs: adding and subtracting
// 2^23 rounds |v| < 2^22 to an integer in the current (nearest-even) mode, as nearbyint does, and
// copysign keeps the sign of zero (-0.3 -> -0.0); larger values, infinities and NaN take
// nearbyint itself.
inline float round_even(float v) {
  constexpr float kMagic = 0x1p23f;
  const float a = std::fabs(v);
  return a < 0x1p22f ? std::copysign((a + kMagic) - kMagic, v) : std::nearbyint(v);
}

}  // namespace mixp::quant
