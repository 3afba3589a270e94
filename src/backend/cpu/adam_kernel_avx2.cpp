// The avx2 tier of the fp32 Adam update (see adam_kernel.h): 8 lanes, the same operations in
// the same order as adam_f32_generic (explicit mul/add, never FMA), the tail by the generic loop.
// No FMA contraction: every tier must round each multiply and add separately, like the others.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <immintrin.h>

#include "adam_kernel.h"

namespace mixp::step_kernels {

void adam_f32_avx2(float* w, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  const __m256 b1 = _mm256_set1_ps(s.b1), b2 = _mm256_set1_ps(s.b2),
               c1 = _mm256_set1_ps(s.one_m_b1), c2 = _mm256_set1_ps(s.one_m_b2);
  const __m256 eps = _mm256_set1_ps(s.eps), l2 = _mm256_set1_ps(s.l2_wd),
               decay = _mm256_set1_ps(s.decay);
  const __m256 step = _mm256_set1_ps(s.neg_step_size), bc2 = _mm256_set1_ps(s.bc2_sqrt);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 w0 = _mm256_loadu_ps(w + i);
    const __m256 gi = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_mul_ps(l2, w0));
    const __m256 wi = _mm256_mul_ps(w0, decay);
    const __m256 mi =
        _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(c1, gi));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2),
                                    _mm256_mul_ps(c2, _mm256_mul_ps(gi, gi)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
    _mm256_storeu_ps(w + i, _mm256_add_ps(wi, _mm256_div_ps(_mm256_mul_ps(step, mi), denom)));
  }
  if (i < n) adam_f32_generic(w + i, g + i, m + i, v + i, n - i, s);
}

}  // namespace mixp::step_kernels
