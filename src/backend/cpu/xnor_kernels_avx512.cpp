// XNOR-popcount GEMM with AVX-512 VPOPCNTQ; see xnor_kernels.h. Blocks of up to 6 rows x 16
// columns keep 12 accumulators of 64-bit counts in registers: B is repacked so that a 512-bit
// load holds one word of 8 columns, A's word is broadcast, and each lane ends with the count of
// one output, so no horizontal sums are needed (they cost a third of the time of the previous
// 4 x 4 register block at K = 2048, where a row is only four 512-bit loads long).
#include <immintrin.h>

#include <algorithm>
#include <vector>

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

// R rows of A against 16 columns of B packed word-interleaved (pb[w * 16 + l] = word w of column
// l): A's word is broadcast and each lane counts one column, so the 2R accumulators hold finished
// column sums and no horizontal reduction is needed.
template <int R>
__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) inline void block16(
    int32_t* dst, int64_t ldd, const uint64_t* a, int64_t words, const uint64_t* pb, int32_t k) {
  __m512i c[R][2];
  for (auto& r : c) r[0] = r[1] = _mm512_setzero_si512();
  for (int64_t w = 0; w < words; ++w) {
    const __m512i y0 = _mm512_loadu_si512(pb + w * 16);
    const __m512i y1 = _mm512_loadu_si512(pb + w * 16 + 8);
    for (int i = 0; i < R; ++i) {
      const __m512i x = _mm512_set1_epi64(static_cast<long long>(a[i * words + w]));
      c[i][0] = _mm512_add_epi64(c[i][0], _mm512_popcnt_epi64(_mm512_xor_si512(x, y0)));
      c[i][1] = _mm512_add_epi64(c[i][1], _mm512_popcnt_epi64(_mm512_xor_si512(x, y1)));
    }
  }
  const __m256i kk = _mm256_set1_epi32(k);
  for (int i = 0; i < R; ++i) {
    for (int h = 0; h < 2; ++h) {
      const __m256i n = _mm512_maskz_cvtepi64_epi32(0xFF, c[i][h]);  // counts <= k < 2^31
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i * ldd + h * 8),
                          _mm256_sub_epi32(kk, _mm256_slli_epi32(n, 1)));
    }
  }
}

using Block16 = void (*)(int32_t*, int64_t, const uint64_t*, int64_t, const uint64_t*, int32_t);

}  // namespace

__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) void xnor_gemm_avx512(
    int32_t* dst, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O, int64_t words,
    int32_t k) {
  constexpr Block16 kBlocks[7] = {nullptr,     block16<1>, block16<2>, block16<3>,
                                  block16<4>,  block16<5>, block16<6>};
  const int64_t O16 = O / 16 * 16;
  // B's columns in blocks of 16, each word-interleaved (block16's layout); packed once per call,
  // a small cost next to the M x O x words products.
  std::vector<uint64_t> pb(size_t(O16 * words));
  for (int64_t o = 0; o < O16; o += 16) {
    uint64_t* p = pb.data() + o * words;
    for (int64_t w = 0; w < words; ++w) {
      for (int l = 0; l < 16; ++l) p[w * 16 + l] = b[(o + l) * words + w];
    }
  }
  for (int64_t m = 0; m < M; m += 6) {
    const int rows = int(std::min<int64_t>(6, M - m));
    for (int64_t o = 0; o < O16; o += 16) {
      kBlocks[rows](dst + m * O + o, O, a + m * words, words, pb.data() + o * words, k);
    }
    for (int64_t o = O16; o < O; ++o) {
      for (int i = 0; i < rows; ++i) {
        dst[(m + i) * O + o] = one(a + (m + i) * words, b + o * words, words, k);
      }
    }
  }
}

}  // namespace mixp::cpu::xnor
