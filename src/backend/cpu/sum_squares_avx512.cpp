// The avx512 tier of the fp32 sum of squares (see sum_squares_kernel.h): 8 fp64 lanes per
// register, four independent accumulators (the baseline loop manages two lanes per instruction,
// which made the per-step gradient norm of the Trainer cost as much as a third of AdamW).
#include <immintrin.h>

#include "sum_squares_kernel.h"

namespace mixp::step_kernels {
namespace {
// GCC 12's _mm512_cvtps_pd and _mm512_reduce_add_pd pass _mm512_undefined_pd() as the merge
// source of a fully-masked instruction, which -Wall reports as a use of an uninitialized value
// (a false positive, one page of warnings per call). The masked forms below take an explicit
// zero source instead and compile to the same instructions.
inline __m512d widen(const float* p) {
  return _mm512_mask_cvtps_pd(_mm512_setzero_pd(), 0xFF, _mm256_loadu_ps(p));
}
// The same summation order as _mm512_reduce_add_pd: high half + low half, then 128-bit halves.
inline double reduce_add(__m512d v) {
  const __m256d hi = _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, v, 1);
  const __m256d lo = _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, v, 0);
  const __m256d s = _mm256_add_pd(hi, lo);
  const __m128d t = _mm_add_pd(_mm256_extractf128_pd(s, 1), _mm256_castpd256_pd128(s));
  return _mm_cvtsd_f64(t) + _mm_cvtsd_f64(_mm_unpackhi_pd(t, t));
}
}  // namespace

double sum_squares_f32_avx512(const float* g, int64_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd(), a2 = _mm512_setzero_pd(),
          a3 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512d x0 = widen(g + i);
    const __m512d x1 = widen(g + i + 8);
    const __m512d x2 = widen(g + i + 16);
    const __m512d x3 = widen(g + i + 24);
    a0 = _mm512_fmadd_pd(x0, x0, a0);  // the fp64 product of two fp32 values is exact
    a1 = _mm512_fmadd_pd(x1, x1, a1);
    a2 = _mm512_fmadd_pd(x2, x2, a2);
    a3 = _mm512_fmadd_pd(x3, x3, a3);
  }
  double total = reduce_add(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
  for (; i < n; ++i) total += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  return total;
}

}  // namespace mixp::step_kernels
