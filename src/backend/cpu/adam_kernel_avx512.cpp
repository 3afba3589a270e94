// The avx512 tier of the fp32 Adam update (see adam_kernel.h): 16 lanes, the same operations in
// the same order as adam_f32_generic (explicit mul/add, never FMA), the tail by the generic loop.
// No FMA contraction: every tier must round each multiply and add separately, like the others.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
// GCC 12's avx512fintrin.h _mm512_sqrt_ps trips a false -Wmaybe-uninitialized on its mask form.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "adam_kernel.h"

namespace mixp::step_kernels {

void adam_f32_avx512(float* w, const float* g, float* m, float* v, int64_t n,
                     const AdamScalars& s) {
  const __m512 b1 = _mm512_set1_ps(s.b1), b2 = _mm512_set1_ps(s.b2),
               c1 = _mm512_set1_ps(s.one_m_b1), c2 = _mm512_set1_ps(s.one_m_b2);
  const __m512 eps = _mm512_set1_ps(s.eps), l2 = _mm512_set1_ps(s.l2_wd),
               decay = _mm512_set1_ps(s.decay);
  const __m512 step = _mm512_set1_ps(s.neg_step_size), bc2 = _mm512_set1_ps(s.bc2_sqrt);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 w0 = _mm512_loadu_ps(w + i);
    const __m512 gi = _mm512_add_ps(_mm512_loadu_ps(g + i), _mm512_mul_ps(l2, w0));
    const __m512 wi = _mm512_mul_ps(w0, decay);
    const __m512 mi =
        _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(m + i), b1), _mm512_mul_ps(c1, gi));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + i), b2),
                                    _mm512_mul_ps(c2, _mm512_mul_ps(gi, gi)));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
    _mm512_storeu_ps(w + i, _mm512_add_ps(wi, _mm512_div_ps(_mm512_mul_ps(step, mi), denom)));
  }
  if (i < n) adam_f32_generic(w + i, g + i, m + i, v + i, n - i, s);
}

}  // namespace mixp::step_kernels
