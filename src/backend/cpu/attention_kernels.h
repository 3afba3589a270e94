// The AVX512-BF16 pieces of the cpu backend's per-head attention (internal; see the design note
// at the top of cpu_attention.cpp). Only called when cpu::native_bf16() and the avx512 tier hold.
//
// Operands are bf16 pairs held as uint32_t (the low half the even element, as VDPBF16PS takes
// them): a GEMM's K runs over pairs, and its B operand is "pair-packed", B[kp][n] holding the
// elements (2kp, n) and (2kp + 1, n).
#pragma once
#include <cstdint>

#include "backend/cpu/bf16_pack.h"

namespace mixp::cpu::attn {

// C[m][n] = sum over kp < k2 of A(m, kp) . B[kp][n], for m < M and n < N (N a multiple of 16),
// each output one fp32 accumulator over the pairs in order (VDPBF16PS). A(m, kp) is the pair
// a[m * am + kp * ak]: am = lda / 2, ak = 1 for a row-major bf16 [M, K] matrix; am = 1,
// ak = ld for the pair-packed form of its transpose. B is b[kp * ldb + n]. k2 == 0 gives zeros.
void gemm_bf16_avx512(float* c, int64_t ldc, const uint32_t* a, int64_t am, int64_t ak,
                      const uint32_t* b, int64_t ldb, int64_t M, int64_t N, int64_t k2);

// Rounds rows of fp32 (row stride lds) to bf16 rows (row stride ld), cols values each, with
// VCVTNEPS2BF16 (nearest even), as oneDNN's bf16 GEMM outputs are stored.
void store_bf16_rows_avx512(uint16_t* dst, int64_t ld, const float* src, int64_t lds, int64_t rows,
                            int64_t cols);

}  // namespace mixp::cpu::attn
