// int4/int2 codes x u8 activations with AVX-512 VNNI, the codes expanded in registers; see
// backend/lowbit_gemm.h (LowBitB, lowbit_gemm_s32).
//
// One 64-byte load of the kernel layout holds, for 16 columns, 2 (int4) or 4 (int2) groups of
// four consecutive k: lane l, byte b, field i = the code of column l at k = chunk + 4 i + b, plus
// the offset 8 (int4) or 2 (int2) so that every field is a non-negative byte after a shift and a
// mask. VPDPBUSD multiplies the u8 activations by those s8 bytes; the offset's share,
// offset * (the row's sum of activations), is subtracted at the end. Blocks of 4 rows x 32
// columns keep 8 accumulators in registers.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/lowbit_codes_gemm.h"

namespace mixp::cpu::lowbit {

namespace {

template <int S>  // fields per byte: 2 (int4) or 4 (int2)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline __m512i field(__m512i v,
                                                                                     int i) {
  constexpr int kBits = 8 / S;
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1 << kBits) - 1));
  return _mm512_and_si512(_mm512_srli_epi16(v, kBits * i), mask);
}

template <int R, int NB, int S>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void block(
    int32_t* dst, int64_t O, const uint8_t* const* rows, int64_t chunks, int64_t full,
    const uint8_t (*tail)[16], const uint8_t* bdata, int64_t ob, const int32_t* rowsum,
    int32_t offset) {
  constexpr int64_t kChunk = 4 * S;
  __m512i acc[R][NB];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_setzero_si512();
  }
  for (int64_t kc = 0; kc < chunks; ++kc) {
    __m512i e[NB][S];
    for (int j = 0; j < NB; ++j) {
      const __m512i v = _mm512_loadu_si512(bdata + ((ob + j) * chunks + kc) * 64);
      for (int i = 0; i < S; ++i) e[j][i] = field<S>(v, i);
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* ap = kc < full ? rows[r] + kc * kChunk : tail[r];
      for (int i = 0; i < S; ++i) {
        int32_t a;
        std::memcpy(&a, ap + 4 * i, 4);
        const __m512i av = _mm512_set1_epi32(a);
        for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], av, e[j][i]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512i corr = _mm512_set1_epi32(offset * rowsum[r]);
    for (int j = 0; j < NB; ++j) {
      const int64_t o = (ob + j) * 16;
      const __mmask16 live = O - o >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (O - o)) - 1);
      _mm512_mask_storeu_epi32(dst + r * O + o, live, _mm512_sub_epi32(acc[r][j], corr));
    }
  }
}

template <int S>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void run(
    int32_t* dst, const uint8_t* a, int64_t lda, const LowBitB& b, int64_t M) {
  constexpr int64_t kChunk = 4 * S;
  const int64_t K = b.K, chunks = (K + kChunk - 1) / kChunk, full = K / kChunk;
  const int64_t OB = (b.O + 15) / 16;
  const int32_t offset = S == 2 ? 8 : 2;
  using Fn = void (*)(int32_t*, int64_t, const uint8_t* const*, int64_t, int64_t,
                      const uint8_t (*)[16], const uint8_t*, int64_t, const int32_t*, int32_t);
  constexpr Fn k2[5] = {nullptr, block<1, 2, S>, block<2, 2, S>, block<3, 2, S>, block<4, 2, S>};
  constexpr Fn k1[5] = {nullptr, block<1, 1, S>, block<2, 1, S>, block<3, 1, S>, block<4, 1, S>};
  for (int64_t m = 0; m < M; m += 4) {
    const int R = static_cast<int>(std::min<int64_t>(4, M - m));
    const uint8_t* rows[4];
    uint8_t tail[4][16] = {};
    int32_t rowsum[4] = {};
    for (int r = 0; r < R; ++r) {
      rows[r] = a + (m + r) * lda;
      int32_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += rows[r][k];
      rowsum[r] = s;
      for (int64_t k = full * kChunk; k < K; ++k) tail[r][k - full * kChunk] = rows[r][k];
    }
    int64_t ob = 0;
    for (; ob + 2 <= OB; ob += 2) {
      k2[R](dst + m * b.O, b.O, rows, chunks, full, tail, b.data.data(), ob, rowsum, offset);
    }
    if (ob < OB) {
      k1[R](dst + m * b.O, b.O, rows, chunks, full, tail, b.data.data(), ob, rowsum, offset);
    }
  }
}

}  // namespace

void gemm_avx512(int32_t* dst, const uint8_t* a, int64_t lda, const LowBitB& b, int64_t M) {
  if (b.bits == 4) {
    run<2>(dst, a, lda, b, M);
  } else {
    run<4>(dst, a, lda, b, M);
  }
}

}  // namespace mixp::cpu::lowbit
