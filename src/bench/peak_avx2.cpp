// AVX2 tier of the peak loops (see peak_kernels.h): 16 ymm registers, so 12 fp32 chains and
// 6 int8 chains.
#include <immintrin.h>

#include "bench/peak_kernels.h"

namespace mixp::bench::detail {
namespace {

#define MIXP_REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

// acc = acc * 0.5 + 0.5 converges to 1 (see peak_avx512.cpp).
double run_fp32_fma(int64_t iters) {
  const __m256 x = _mm256_set1_ps(0.5f), y = _mm256_set1_ps(0.5f);
#define DECL(i) __m256 a##i = _mm256_set1_ps(static_cast<float>(i));
  MIXP_REP12(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, x, y);
    MIXP_REP12(STEP)
#undef STEP
  }
  __m256 s = _mm256_setzero_ps();
#define SUM(i) s = _mm256_add_ps(s, a##i);
  MIXP_REP12(SUM)
#undef SUM
  alignas(32) float v[8];
  _mm256_store_ps(v, s);
  double r = 0;
  for (float f : v) r += f;
  return r;
}

// As in peak_avx512.cpp: only the add depends on the accumulator, an empty asm keeps the
// products in the loop, and each of the 6 chains multiplies its own (x, y) pair. 6 accumulators,
// 5 operands and the ones leave 4 of the 16 ymm registers for the products in flight.
double run_int8_madd(int64_t iters) {
  __m256i x0 = _mm256_set1_epi8(1), x1 = _mm256_set1_epi8(2), x2 = _mm256_set1_epi8(3);
  __m256i y0 = _mm256_set1_epi8(1), y1 = _mm256_set1_epi8(2);
  const __m256i ones = _mm256_set1_epi16(1);
#define REP6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define DECL(i) __m256i a##i = _mm256_set1_epi32(i);
  REP6(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
    asm volatile("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(y0), "+x"(y1));
#define STEP(i, x, y) \
  a##i = _mm256_add_epi32(a##i, _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), ones));
    STEP(0, x0, y0) STEP(1, x1, y0) STEP(2, x2, y0) STEP(3, x0, y1) STEP(4, x1, y1) STEP(5, x2, y1)
#undef STEP
  }
  __m256i s = _mm256_setzero_si256();
#define SUM(i) s = _mm256_add_epi32(s, a##i);
  REP6(SUM)
#undef SUM
#undef REP6
  alignas(32) int32_t v[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), s);
  double r = 0;
  for (int32_t i : v) r += i;
  return r;
}

}  // namespace

PeakKernel fp32_fma_avx2() {
  return {"vfmadd231ps ymm", "avx2+fma", 12.0 * 8 * 2, run_fp32_fma};
}
PeakKernel int8_madd_avx2() {
  return {"vpmaddubsw+vpmaddwd+vpaddd ymm", "avx2", 6.0 * 32 * 2, run_int8_madd};
}

}  // namespace mixp::bench::detail
