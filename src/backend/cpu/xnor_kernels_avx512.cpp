// XNOR-popcount GEMM with AVX-512 VPOPCNTQ; see xnor_kernels.h. Blocks of 4 rows x 4 columns
// keep 16 accumulators of 64-bit counts in registers, so each 512-bit load of a row feeds four
// XOR + VPOPCNTQ + add.
#include <immintrin.h>

// GCC 12 reports the undefined pass-through operand of its own AVX-512 unpack/extract intrinsics
// (_mm512_undefined_epi32) as maybe-uninitialized; the intrinsics are correct.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/xnor_kernels.h"

namespace mixp::cpu::xnor {

namespace {

// The lanes' sum (_mm512_reduce_add_epi64 trips GCC 12's -Wmaybe-uninitialized).
__attribute__((target("avx512f"))) inline int64_t lane_sum(__m512i v) {
  alignas(64) int64_t l[8];
  _mm512_store_si512(l, v);
  return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}

// The lane sums of four accumulators at once (a transposing add tree: 12 instructions for four
// sums instead of four separate reductions), into t[0..3].
__attribute__((target("avx512f"))) inline void sum4(const __m512i c[4], int64_t t[4]) {
  // s01 lanes (128-bit): [a0 b0 | a1 b1 | a2 b2 | a3 b3], each the sum of a pair of 64-bit lanes.
  const __m512i s01 = _mm512_add_epi64(_mm512_unpacklo_epi64(c[0], c[1]),
                                       _mm512_unpackhi_epi64(c[0], c[1]));
  const __m512i s23 = _mm512_add_epi64(_mm512_unpacklo_epi64(c[2], c[3]),
                                       _mm512_unpackhi_epi64(c[2], c[3]));
  const __m512i x = _mm512_shuffle_i64x2(s01, s23, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i y = _mm512_shuffle_i64x2(s01, s23, _MM_SHUFFLE(3, 1, 3, 1));
  const __m512i z = _mm512_add_epi64(x, y);  // [a01 b01 | a23 b23 | c01 d01 | c23 d23]
  const __m512i w = _mm512_add_epi64(z, _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(2, 3, 0, 1)));
  alignas(64) int64_t l[8];
  _mm512_store_si512(l, w);  // the totals in elements 0, 1 (a, b) and 4, 5 (c, d)
  t[0] = l[0];
  t[1] = l[1];
  t[2] = l[4];
  t[3] = l[5];
}

__attribute__((target("avx512f,avx512vpopcntdq"))) inline int32_t one(const uint64_t* a,
                                                                      const uint64_t* b,
                                                                      int64_t words, int32_t k) {
  __m512i acc = _mm512_setzero_si512();
  for (int64_t w = 0; w < words; w += 8) {
    const __m512i x = _mm512_xor_si512(_mm512_loadu_si512(a + w), _mm512_loadu_si512(b + w));
    acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(x));
  }
  return k - 2 * static_cast<int32_t>(lane_sum(acc));
}

}  // namespace

__attribute__((target("avx512f,avx512vpopcntdq"))) void xnor_gemm_avx512(
    int32_t* dst, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O, int64_t words,
    int32_t k) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) {
    const uint64_t* a0 = a + m * words;
    const uint64_t* a1 = a0 + words;
    const uint64_t* a2 = a1 + words;
    const uint64_t* a3 = a2 + words;
    int64_t o = 0;
    for (; o + 4 <= O; o += 4) {
      __m512i c[4][4];
      for (auto& r : c)
        for (auto& v : r) v = _mm512_setzero_si512();
      const uint64_t* bs[4] = {b + o * words, b + (o + 1) * words, b + (o + 2) * words,
                               b + (o + 3) * words};
      for (int64_t w = 0; w < words; w += 8) {
        const __m512i x[4] = {_mm512_loadu_si512(a0 + w), _mm512_loadu_si512(a1 + w),
                              _mm512_loadu_si512(a2 + w), _mm512_loadu_si512(a3 + w)};
        for (int j = 0; j < 4; ++j) {
          const __m512i y = _mm512_loadu_si512(bs[j] + w);
          for (int i = 0; i < 4; ++i) {
            c[i][j] = _mm512_add_epi64(c[i][j], _mm512_popcnt_epi64(_mm512_xor_si512(x[i], y)));
          }
        }
      }
      for (int i = 0; i < 4; ++i) {
        int64_t t[4];
        sum4(c[i], t);
        for (int j = 0; j < 4; ++j) dst[(m + i) * O + o + j] = k - 2 * static_cast<int32_t>(t[j]);
      }
    }
    for (; o < O; ++o) {
      for (int i = 0; i < 4; ++i) dst[(m + i) * O + o] = one(a0 + i * words, b + o * words, words, k);
    }
  }
  for (; m < M; ++m) {
    for (int64_t o = 0; o < O; ++o) dst[m * O + o] = one(a + m * words, b + o * words, words, k);
  }
}

}  // namespace mixp::cpu::xnor
