// rescale_s32's tile with AVX-512; see lowbit_rescale.h. 16 positions x 16 channels at a time:
// the sums of one position are a row of 16 channels (one load), converted, multiplied and added
// per lane (VCVTDQ2PS, VMULPS, VADDPS: the scalar roundings, never an FMA), then the 16 x 16 block
// is transposed in registers so that each channel's 16 positions are one store.
#include <immintrin.h>

// GCC 12 reports the undefined pass-through operand of its own AVX-512 intrinsics
// (_mm512_undefined_*) as maybe-uninitialized; the intrinsics are correct.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/lowbit_rescale.h"

namespace mixp::cpu::rescale {

namespace {

__attribute__((target("avx512f"))) inline __m512 lo_pd(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
__attribute__((target("avx512f"))) inline __m512 hi_pd(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

// r[i] = row i -> r[j] = column j.
__attribute__((target("avx512f"))) inline void transpose16(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = lo_pd(t[i], t[i + 2]);
    r[i + 1] = hi_pd(t[i], t[i + 2]);
    r[i + 2] = lo_pd(t[i + 1], t[i + 3]);
    r[i + 3] = hi_pd(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

}  // namespace

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
    transpose16(r);
    for (int64_t j = 0; j < on; ++j) {
      _mm512_mask_storeu_ps(dst + (n * O + o0 + j) * P + p0, pmask, r[j]);
    }
  }
}

}  // namespace mixp::cpu::rescale
