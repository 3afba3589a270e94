// 2x2 stride-2 max pooling with AVX-512 intrinsics: GCC does not vectorize the NaN-aware,
// tie-breaking selects of the portable version (vec_kernels.inc), which ran scalar with
// unpredictable branches. 16 outputs per step: the even/odd columns of two input rows are
// separated with vpermt2ps. Same semantics as the portable version: NaN propagates, ties and
// NaNs give the gradient to the first element of the window in row-major order.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/pool_kernels.h"

namespace mixp::pool {
namespace {

// Index vectors are built inside the AVX-512 code path, never as namespace-scope constants: those
// would be initialised at library load with AVX-512 stores and crash CPUs without AVX-512.
__m512i even_index() {
  return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
__m512i odd_index() {
  return _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}
// interleave lo/hi halves back: out0 = e0 o0 e1 o1 ... e7 o7, out1 = e8 o8 ... e15 o15
__m512i lo_interleave_index() {
  return _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
}
__m512i hi_interleave_index() {
  return _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}

// b replaces a when b > a, or b is NaN and a is not.
inline __m512 max_nan(__m512 a, __m512 b) {
  const __mmask16 gt = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ);
  const __mmask16 bnan = _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
  const __mmask16 aord = _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q);
  return _mm512_mask_blend_ps(gt | (bnan & aord), a, b);
}
inline __mmask16 is_max(__m512 v, __m512 m) {
  return _mm512_cmp_ps_mask(v, m, _CMP_EQ_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
}
// Loads 2*n (n <= 16) floats from p as even/odd columns.
inline void load_pairs(const float* p, int64_t n, __m512& even, __m512& odd) {
  const __mmask16 m0 = n >= 8 ? 0xFFFF : static_cast<__mmask16>((1u << (2 * n)) - 1);
  const __mmask16 m1 = n <= 8 ? 0 : static_cast<__mmask16>((1u << (2 * (n - 8))) - 1);
  const __m512 a0 = _mm512_maskz_loadu_ps(m0, p);
  const __m512 a1 = _mm512_maskz_loadu_ps(m1, p + 16);
  even = _mm512_permutex2var_ps(a0, even_index(), a1);
  odd = _mm512_permutex2var_ps(a0, odd_index(), a1);
}
inline void store_pairs(float* p, int64_t n, __m512 even, __m512 odd) {
  const __mmask16 m0 = n >= 8 ? 0xFFFF : static_cast<__mmask16>((1u << (2 * n)) - 1);
  const __mmask16 m1 = n <= 8 ? 0 : static_cast<__mmask16>((1u << (2 * (n - 8))) - 1);
  _mm512_mask_storeu_ps(p, m0, _mm512_permutex2var_ps(even, lo_interleave_index(), odd));
  _mm512_mask_storeu_ps(p + 16, m1, _mm512_permutex2var_ps(even, hi_interleave_index(), odd));
}

// The 2x2 windows of outputs ow..ow+n-1 (n <= 16) of rows r0, r1: their inputs in row-major
// order (a b / c d) and their NaN-aware max, as forward and backward both need them.
struct Windows {
  __m512 a, b, c, d, max;
};
inline Windows load_windows(const float* r0, const float* r1, int64_t ow, int64_t n) {
  Windows w;
  load_pairs(r0 + 2 * ow, n, w.a, w.b);
  load_pairs(r1 + 2 * ow, n, w.c, w.d);
  w.max = max_nan(max_nan(max_nan(w.a, w.b), w.c), w.d);
  return w;
}

}  // namespace

void maxpool2x2_avx512(float* y, const float* x, int64_t W, int64_t OH, int64_t OW) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* r0 = x + 2 * oh * W;
    const float* r1 = r0 + W;
    float* yr = y + oh * OW;
    for (int64_t ow = 0; ow < OW; ow += 16) {
      const int64_t n = OW - ow < 16 ? OW - ow : 16;
      _mm512_mask_storeu_ps(yr + ow, static_cast<__mmask16>((1u << n) - 1),
                            load_windows(r0, r1, ow, n).max);
    }
  }
}

void maxpool2x2_bwd_avx512(float* gi, const float* g, const float* x, int64_t W, int64_t OH,
                           int64_t OW) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* r0 = x + 2 * oh * W;
    const float* r1 = r0 + W;
    float* q0 = gi + 2 * oh * W;
    float* q1 = q0 + W;
    const float* gr = g + oh * OW;
    for (int64_t ow = 0; ow < OW; ow += 16) {
      const int64_t n = OW - ow < 16 ? OW - ow : 16;
      const Windows w = load_windows(r0, r1, ow, n);
      const __mmask16 ea = is_max(w.a, w.max), eb = is_max(w.b, w.max), ec = is_max(w.c, w.max);
      const __mmask16 ta = ea, tb = static_cast<__mmask16>(~ea & eb),
                      tc = static_cast<__mmask16>(~ea & ~eb & ec);
      const __mmask16 td = static_cast<__mmask16>(~ea & ~eb & ~ec);
      const __m512 gv = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), gr + ow);
      store_pairs(q0 + 2 * ow, n, _mm512_mask_blend_ps(ta, zero, gv),
                  _mm512_mask_blend_ps(tb, zero, gv));
      store_pairs(q1 + 2 * ow, n, _mm512_mask_blend_ps(tc, zero, gv),
                  _mm512_mask_blend_ps(td, zero, gv));
    }
  }
}

}  // namespace mixp::pool
