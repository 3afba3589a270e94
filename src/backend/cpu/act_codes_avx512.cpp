// act_codes_u8 and act_codes_f32 with AVX-512, 16 values per step; see act_codes.h and
// backend/lowbit_gemm.h. VRNDSCALEPS in nearest-even mode is nearbyint lane by lane (the sign of
// zero kept); the clamp takes the bound as the first operand of VMAXPS/VMINPS, which return the
// second when either is NaN, so a NaN reaches the conversion as in the scalar clamp; VCVTTPS2DQ
// then gives 0x80000000 as the scalar cast does on x86, and VPMOVDB keeps the low byte as the cast
// to uint8_t does.
#include <immintrin.h>

// GCC 12 reports the undefined pass-through operand of its own AVX-512 intrinsics
// (_mm512_undefined_*) as maybe-uninitialized; the intrinsics are correct.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/act_codes.h"

namespace mixp::cpu::codes {

__attribute__((target("avx512f"))) void act_codes_u8_avx512(uint8_t* dst, const float* src,
                                                            int64_t n, float inv, float qmin,
                                                            float qmax, int32_t offset) {
  const __m512 vi = _mm512_set1_ps(inv), lo = _mm512_set1_ps(qmin), hi = _mm512_set1_ps(qmax);
  const __m512i off = _mm512_set1_epi32(offset);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(live, src + i);
    const __m512 q =
        _mm512_roundscale_ps(_mm512_mul_ps(x, vi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 c = _mm512_min_ps(hi, _mm512_max_ps(lo, q));
    const __m512i v = _mm512_add_epi32(_mm512_cvttps_epi32(c), off);
    _mm512_mask_cvtepi32_storeu_epi8(dst + i, live, v);
  }
}

__attribute__((target("avx512f"))) void act_codes_f32_avx512(float* dst, const float* src,
                                                             int64_t n, float inv, float qmin,
                                                             float qmax) {
  const __m512 vi = _mm512_set1_ps(inv), lo = _mm512_set1_ps(qmin), hi = _mm512_set1_ps(qmax);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(live, src + i);
    const __m512 q =
        _mm512_roundscale_ps(_mm512_mul_ps(x, vi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // Equal zeros return the second operand too, so -0 stays -0 as in std::clamp.
    _mm512_mask_storeu_ps(dst + i, live, _mm512_min_ps(hi, _mm512_max_ps(lo, q)));
  }
}

}  // namespace mixp::cpu::codes
