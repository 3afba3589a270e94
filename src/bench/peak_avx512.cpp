// AVX-512 tier of the peak loops (see peak_kernels.h). Compiled with the AVX-512 flags; only
// called after cpu_features() confirmed the instructions.
#include <immintrin.h>

#include <cstdint>

#include "bench/peak_kernels.h"

namespace mixp::bench::detail {
namespace {

#define MIXP_REP16(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

double fold_ps(const __m512* acc) {
  __m512 s = _mm512_setzero_ps();
  for (int i = 0; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  // Stored and summed in scalar: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized.
  alignas(64) float v[16];
  _mm512_store_ps(v, s);
  double r = 0;
  for (float f : v) r += f;
  return r;
}

double fold_epi32(const __m512i* acc) {
  __m512i s = _mm512_setzero_si512();
  for (int i = 0; i < 16; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) int32_t v[16];
  _mm512_store_si512(v, s);
  double r = 0;
  for (int32_t i : v) r += i;
  return r;
}

// acc = acc * 0.5 + 0.5 converges to 1: no overflow, no subnormals, whatever the count.
double run_fp32_fma(int64_t iters) {
  const __m512 x = _mm512_set1_ps(0.5f), y = _mm512_set1_ps(0.5f);
#define DECL(i) __m512 a##i = _mm512_set1_ps(static_cast<float>(i));
  MIXP_REP16(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, x, y);
    MIXP_REP16(STEP)
#undef STEP
  }
#define OUT(i) a##i,
  const __m512 acc[16] = {MIXP_REP16(OUT)};
#undef OUT
  return fold_ps(acc);
}

// acc += sum of 2 products of small bf16 values per lane: grows by 2^-19 per step, finite for
// any realistic count. Distinct starting values keep GCC from merging equal chains.
double run_bf16_dot(int64_t iters) {
  const __m512 small = _mm512_set1_ps(0x1.0p-10f);
  const __m512bh x = _mm512_cvtne2ps_pbh(small, small), y = _mm512_cvtne2ps_pbh(small, small);
#define DECL(i) __m512 a##i = _mm512_set1_ps(static_cast<float>(i));
  MIXP_REP16(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
    MIXP_REP16(STEP)
#undef STEP
  }
#define OUT(i) a##i,
  const __m512 acc[16] = {MIXP_REP16(OUT)};
#undef OUT
  return fold_ps(acc);
}

// Integer accumulators wrap, which is harmless here. Every accumulator starts at its own value:
// from equal starts GCC proves them equal and keeps only one chain.
double run_int8_dot(int64_t iters) {
  const __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(1);
#define DECL(i) __m512i a##i = _mm512_set1_epi32(i);
  MIXP_REP16(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) a##i = _mm512_dpbusd_epi32(a##i, x, y);
    MIXP_REP16(STEP)
#undef STEP
  }
#define OUT(i) a##i,
  const __m512i acc[16] = {MIXP_REP16(OUT)};
#undef OUT
  return fold_epi32(acc);
}

// What oneDNN runs for u8*s8 without VNNI: u8*s8 pairs -> s16 (vpmaddubsw), s16 pairs -> s32
// against ones (vpmaddwd), then an add: three instructions per 64 products, of which only the
// add depends on the accumulator (as in a GEMM, where the products come from loaded data). An
// empty asm tells the compiler the operands change every iteration, so it cannot hoist the
// products out of the loop; each of the 12 chains multiplies its own (x, y) pair, so it cannot
// merge chains either.
double run_int8_madd(int64_t iters) {
  __m512i x0 = _mm512_set1_epi8(1), x1 = _mm512_set1_epi8(2), x2 = _mm512_set1_epi8(3),
          x3 = _mm512_set1_epi8(4);
  __m512i y0 = _mm512_set1_epi8(1), y1 = _mm512_set1_epi8(2), y2 = _mm512_set1_epi8(3);
  const __m512i ones = _mm512_set1_epi16(1);
#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define DECL(i) __m512i a##i = _mm512_set1_epi32(i);
  REP12(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
    asm volatile("" : "+v"(x0), "+v"(x1), "+v"(x2), "+v"(x3), "+v"(y0), "+v"(y1), "+v"(y2));
#define STEP(i, x, y) \
  a##i = _mm512_add_epi32(a##i, _mm512_madd_epi16(_mm512_maddubs_epi16(x, y), ones));
    STEP(0, x0, y0)
    STEP(1, x1, y0) STEP(2, x2, y0) STEP(3, x3, y0) STEP(4, x0, y1) STEP(5, x1, y1) STEP(6, x2, y1)
        STEP(7, x3, y1) STEP(8, x0, y2) STEP(9, x1, y2) STEP(10, x2, y2) STEP(11, x3, y2)
#undef STEP
  }
#define OUT(i) a##i,
  const __m512i acc[16] = {REP12(OUT) _mm512_setzero_si512(), _mm512_setzero_si512(),
                           _mm512_setzero_si512(), _mm512_setzero_si512()};
#undef OUT
#undef REP12
  return fold_epi32(acc);
}

}  // namespace

PeakKernel fp32_fma_avx512() {
  return {"vfmadd231ps zmm", "avx512f", 16.0 * 16 * 2, run_fp32_fma};
}
PeakKernel bf16_dot_avx512() {
  return {"vdpbf16ps zmm", "avx512_bf16", 16.0 * 32 * 2, run_bf16_dot};
}
PeakKernel int8_dot_avx512() {
  return {"vpdpbusd zmm", "avx512_vnni", 16.0 * 64 * 2, run_int8_dot};
}
PeakKernel int8_madd_avx512() {
  return {"vpmaddubsw+vpmaddwd+vpaddd zmm", "avx512bw", 12.0 * 64 * 2, run_int8_madd};
}

}  // namespace mixp::bench::detail
