// The avx512 tier of the fp32 sum of squares (see sum_squares_kernel.h): 8 fp64 lanes per
// register, four independent accumulators (the baseline loop manages two lanes per instruction,
// which made the per-step gradient norm of the Trainer cost as much as a third of AdamW).
#include <immintrin.h>

#include "sum_squares_kernel.h"

namespace mixp::optim::detail {

double sum_squares_f32_avx512(const float* g, int64_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd(), a2 = _mm512_setzero_pd(),
          a3 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512d x0 = _mm512_cvtps_pd(_mm256_loadu_ps(g + i));
    const __m512d x1 = _mm512_cvtps_pd(_mm256_loadu_ps(g + i + 8));
    const __m512d x2 = _mm512_cvtps_pd(_mm256_loadu_ps(g + i + 16));
    const __m512d x3 = _mm512_cvtps_pd(_mm256_loadu_ps(g + i + 24));
    a0 = _mm512_fmadd_pd(x0, x0, a0);  // the fp64 product of two fp32 values is exact
    a1 = _mm512_fmadd_pd(x1, x1, a1);
    a2 = _mm512_fmadd_pd(x2, x2, a2);
    a3 = _mm512_fmadd_pd(x3, x3, a3);
  }
  double total = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
  for (; i < n; ++i) total += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  return total;
}

}  // namespace mixp::optim::detail
