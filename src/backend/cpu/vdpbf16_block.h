// The VDPBF16PS register block the cpu backend's two bf16 GEMMs share (internal; AVX-512 objects
// only): the per-head attention's (attention_kernels_avx512.cpp) and the bf16 GEMM's
// (gemm_bf16_avx512.cpp). Pairs of K are 32-bit lanes, the low half the even element
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
