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
    const __mmask8 live = words - w >= 8 ? __mmask8(0xFF) : __mmask8((1u << (words - w)) - 1);
    const __m512i x = _mm512_xor_si512(_mm512_maskz_loadu_epi64(live, a + w),
                                       _mm512_maskz_loadu_epi64(live, b + w));
    acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(x));
  }
  return k - 2 * static_cast<int32_t>(lane_sum(acc));
}

// R rows of A against 16 columns of B packed word-interleaved (pb[w * 16 + l] = word w of column
// l): A's word is broadcast and each lane counts one column, so the 2R accumulators hold finished
// column sums and no horizontal reduction is needed.
// The epilogue: the sums as s32 (dst, ldd), or as sign bits (SignOut: bit l of the 16-bit mask
// at bits[i * ldb] = (sum < thr[i][l]) XOR flip bit l, thr[i] already offset to the block).
struct SignOut {
  uint16_t* bits;
  int64_t ldb;
  const int32_t* const* thr;
  uint16_t flip;
};

template <int R, bool kSign>
__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) inline void block16(
    int32_t* dst, int64_t ldd, const uint64_t* a, int64_t words, const uint64_t* pb, int32_t k,
    const SignOut& so) {
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
    __m256i v[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i n = _mm512_maskz_cvtepi64_epi32(0xFF, c[i][h]);  // counts <= k < 2^31
      v[h] = _mm256_sub_epi32(kk, _mm256_slli_epi32(n, 1));
      if constexpr (!kSign) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i * ldd + h * 8), v[h]);
      }
    }
    if constexpr (kSign) {
      const auto* t = reinterpret_cast<const __m256i*>(so.thr[i]);
      const unsigned lo = _mm256_cmplt_epi32_mask(v[0], _mm256_loadu_si256(t));
      const unsigned hi = _mm256_cmplt_epi32_mask(v[1], _mm256_loadu_si256(t + 1));
      so.bits[i * so.ldb] = static_cast<uint16_t>((lo | (hi << 8)) ^ so.flip);
    }
  }
}

using Block16 = void (*)(int32_t*, int64_t, const uint64_t*, int64_t, const uint64_t*, int32_t,
                         const SignOut&);

// B's columns in blocks of 16, each word-interleaved (block16's layout); packed once per call,
// a small cost next to the M x O x words products.
std::vector<uint64_t> repack16(const uint64_t* b, int64_t O16, int64_t words) {
  std::vector<uint64_t> pb(size_t(O16 * words));
  for (int64_t o = 0; o < O16; o += 16) {
    uint64_t* p = pb.data() + o * words;
    for (int64_t w = 0; w < words; ++w) {
      for (int l = 0; l < 16; ++l) p[w * 16 + l] = b[(o + l) * words + w];
    }
  }
  return pb;
}

}  // namespace

__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) void xnor_gemm_avx512(
    int32_t* dst, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O, int64_t words,
    int32_t k) {
  constexpr Block16 kBlocks[7] = {nullptr,           block16<1, false>, block16<2, false>,
                                  block16<3, false>, block16<4, false>, block16<5, false>,
                                  block16<6, false>};
  const int64_t O16 = O / 16 * 16;
  const std::vector<uint64_t> pb = repack16(b, O16, words);
  const SignOut none{nullptr, 0, nullptr, 0};
  for (int64_t m = 0; m < M; m += 6) {
    const int rows = int(std::min<int64_t>(6, M - m));
    for (int64_t o = 0; o < O16; o += 16) {
      kBlocks[rows](dst + m * O + o, O, a + m * words, words, pb.data() + o * words, k, none);
    }
    for (int64_t o = O16; o < O; ++o) {
      for (int i = 0; i < rows; ++i) {
        dst[(m + i) * O + o] = one(a + (m + i) * words, b + o * words, words, k);
      }
    }
  }
}

__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) void xnor_sign_bits_avx512(
    uint64_t* out, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O, int64_t words,
    int32_t k, const int32_t* const* thr, const uint64_t* flip) {
  constexpr Block16 kBlocks[7] = {nullptr,          block16<1, true>, block16<2, true>,
                                  block16<3, true>, block16<4, true>, block16<5, true>,
                                  block16<6, true>};
  const std::vector<uint64_t> pb = repack16(b, O, words);
  auto* bits = reinterpret_cast<uint16_t*>(out);  // little-endian: 4 masks of 16 per word
  const int64_t ldb = (O + 63) / 64 * 4;
  for (int64_t m = 0; m < M; m += 6) {
    const int rows = int(std::min<int64_t>(6, M - m));
    for (int64_t o = 0; o < O; o += 16) {
      const int32_t* t[6];
      for (int i = 0; i < rows; ++i) t[i] = thr[m + i] + o;
      const uint16_t f = static_cast<uint16_t>(flip[o / 64] >> (o % 64));
      kBlocks[rows](nullptr, 0, a + m * words, words, pb.data() + o * words, k,
                    SignOut{bits + m * ldb + o / 16, ldb, t, f});
    }
    if (O % 64 != 0) {
      for (int i = 0; i < rows; ++i) {
        for (int64_t q = O / 16; q < ldb; ++q) bits[(m + i) * ldb + q] = 0;  // past O
      }
    }
  }
}

}  // namespace mixp::cpu::xnor
