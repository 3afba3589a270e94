// rescale_s32's tile with AVX-512; see lowbit_rescale.h. 16 positions x 16 channels at a time:
// the sums of one position are a row of 16 channels (one load), converted, multiplied and added
// per lane (VCVTDQ2PS, VMULPS, VADDPS: the scalar roundings, never an FMA), then the 16 x 16 block
// is transposed in registers so that each channel's 16 positions are one store.
#include <immintrin.h>

// GCC 12 reports the undefined pass-through operand of its own AVX-512 intrinsics
// (_mm512_undefined_*) as maybe-uninitialized; the intrinsics are correct.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/lowbit_rescale.h"
#include "backend/cpu/transpose_f32.h"

namespace mixp::cpu::rescale {

__attribute__((target("avx512f"))) void tile_avx512(float* dst, const int32_t* acc, int64_t n,
                                                    int64_t p0, int64_t pn, int64_t P, int64_t O,
                                                    const int32_t* off, const float* mult,
                                                    const float* bias) {
  const int32_t* src = acc + (n * P + p0) * O;
  const __mmask16 pmask = pn >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << pn) - 1);
  for (int64_t o0 = 0; o0 < O; o0 += 16) {
    const int64_t on = O - o0 >= 16 ? 16 : O - o0;
    const __mmask16 omask = on >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << on) - 1);
    const __m512i sub = off ? _mm512_maskz_loadu_epi32(omask, off + o0) : _mm512_setzero_si512();
    const __m512 m = _mm512_maskz_loadu_ps(omask, mult + o0);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(omask, bias + o0) : _mm512_setzero_ps();
    __m512 r[16];
    for (int64_t p = 0; p < 16; ++p) {
      if (p >= pn) {
        r[p] = _mm512_setzero_ps();
        continue;
      }
      const __m512i s = _mm512_maskz_loadu_epi32(omask, src + p * O + o0);
      // The _round_ forms are builtins, not vector expressions, so GCC (FMA enabled in this
      // file) cannot contract the multiply and the add into one rounding.
      constexpr int kNear = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
      const __m512 y = _mm512_mul_round_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s, sub)), m, kNear);
      r[p] = bias ? _mm512_add_round_ps(y, b, kNear) : y;
    }
    transpose16_ps(r);
    for (int64_t j = 0; j < on; ++j) {
      _mm512_mask_storeu_ps(dst + (n * O + o0 + j) * P + p0, pmask, r[j]);
    }
  }
}

}  // namespace mixp::cpu::rescale
