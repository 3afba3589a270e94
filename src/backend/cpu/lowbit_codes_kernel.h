// The low-bit QAT code loops (backend.h LowBitCodesSpec): the cpu backend's lowbit_codes, the ref
// backend's (the same plain scalar loops, see ref_quantize.cpp) and quant's
// lowbit_weight_codes_raw (the packer's reference, src/quant/lowbit_codes.cpp) share them, so the
// trained codes and the packed model's codes agree bit for bit.
#pragma once
#include <cmath>
#include <cstdint>

#include "mixp/backend/backend.h"

namespace mixp::cpu {

// nearbyint (ties to even) without the libm call baseline x86-64 needs: adding and subtracting
// 2^23 rounds |v| < 2^22 to an integer in the current (nearest-even) mode, as nearbyint does, and
// copysign keeps the sign of zero (-0.3 -> -0.0); larger values, infinities and NaN take
// nearbyint itself. The packed model's fused input codes round the same way
// (backend/lowbit_gemm.h, act_codes_u8).
inline float round_even(float v) {
  constexpr float kMagic = 0x1p23f;
  const float a = std::fabs(v);
  return a < 0x1p22f ? std::copysign((a + kMagic) - kMagic, v) : std::nearbyint(v);
}

// codes, scales (weight kinds: [O]) and mask (or nullptr) of src seen as [O, K] (activation kinds:
// O * K elements, O unused otherwise), as LowBitCodesSpec says.
void lowbit_codes_loop(const LowBitCodesSpec& spec, const float* src, int64_t O, int64_t K,
                       float* codes, float* scales, uint8_t* mask);

// dsrc[i] = mask[i] ? ddst[i] * inv[(i / inner) % channels] : +0 over n elements.
void lowbit_codes_backward_loop(float* dsrc, const float* ddst, const uint8_t* mask,
                                const float* inv, int64_t channels, int64_t inner, int64_t n);

}  // namespace mixp::cpu
