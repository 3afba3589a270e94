// The VDPBF16PS register block the cpu backend's two bf16 GEMMs share, and the row-pair step of
// their packings (internal; AVX-512 objects only): the per-head attention's
// (attention_kernels_avx512.cpp), the bf16 GEMM's (gemm_bf16_avx512.cpp) and the packings
// (bf16_pack_avx512.cpp). Pairs of K are 32-bit lanes, the low half the even element
// (bf16_pack.h).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace mixp::cpu {
// Internal linkage: an AVX-512 object may not hand weak copies of its functions to the linker
// (tests/arch_objects), which inline functions of a named namespace would be.
namespace {

inline __m512bh as_bh(__m512i x) {
  return reinterpret_cast<__m512bh&>(x);
}

// The pairs of 16 columns of two bf16 rows (`lo` the even row, `hi` the odd one or nullptr for
// zeros; columns outside `m` zero), one per 32-bit lane, the low half from `lo`: VDPBF16PS's
// operand layout when K runs down the rows (the zero-masked forms: see transpose_f32.h).
inline __m512i pair_rows_x16(const uint16_t* lo, const uint16_t* hi, __mmask16 m) {
  const __m512i l = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(m, lo));
  if (!hi) return l;
  const __m512i h = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(m, hi));
  return _mm512_or_si512(l, _mm512_maskz_slli_epi32(0xFFFF, h, 16));
}

// acc[r][v] = the sum over kp < k2, in order, of pair(r, kp) . b[kp * ldb + 16 v ..+15]: one
// VDPBF16PS per pair of A and vector of B, each output one fp32 accumulator over the pairs of K
// in order (the two products of a pair exact). Every loop is fully unrolled, so that the
// MR x NV accumulators stay in registers (otherwise GCC keeps them on the stack, zeroed and
// stored on every call).
template <int MR, int NV, class PairOfA>
inline void vdpbf16_block(__m512 (&acc)[MR][NV], PairOfA pair, const uint32_t* b, int64_t ldb,
                          int64_t k2) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t kp = 0; kp < k2; ++kp) {
    __m512i bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b + kp * ldb + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(pair(r, kp)));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], as_bh(av), as_bh(bv[v]));
    }
  }
}

}  // namespace
}  // namespace mixp::cpu
