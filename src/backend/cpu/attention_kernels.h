// The AVX512-BF16 pieces of the cpu backend's per-head attention (internal; see the design note
// at the top of cpu_attention.cpp). Only called when cpu::native_bf16() and the avx512 tier hold.
//
// Operands are bf16 pairs held as uint32_t (the low half the even element, as VDPBF16PS takes
// them): a GEMM's K runs over pairs, and its B operand is "pair-packed", B[kp][n] holding the
// elements (2kp, n) and (2kp + 1, n).
#pragma once
#include <cstdint>

namespace mixp::cpu::attn {

// C[m][n] = sum over kp < k2 of A(m, kp) . B[kp][n], for m < M and n < N (N a multiple of 16),
// each output one fp32 accumulator over the pairs in order (VDPBF16PS). A(m, kp) is the pair
// a[m * am + kp * ak]: am = lda / 2, ak = 1 for a row-major bf16 [M, K] matrix; am = 1,
// ak = ld for the pair-packed form of its transpose. B is b[kp * ldb + n]. k2 == 0 gives zeros.
void gemm_bf16_avx512(float* c, int64_t ldc, const uint32_t* a, int64_t am, int64_t ak,
                      const uint32_t* b, int64_t ldb, int64_t M, int64_t N, int64_t k2);

// Pair-packs the transpose of a bf16 [rows, cols] matrix (row stride ld, cols even): dst[kp][r]
// = the pair (2kp, 2kp + 1) of row r, for kp < cols / 2 and r < n (rows <= n, n a multiple of
// 16; rows >= rows are zero). Row stride of dst: n.
void pack_transpose_avx512(uint32_t* dst, const uint16_t* src, int64_t ld, int64_t rows,
                           int64_t cols, int64_t n);

// Pair-packs a bf16 [rows, cols] matrix (row stride ld) along its rows: dst[rp][c] = (row 2rp,
// row 2rp + 1) at column c, for rp < (rows + 1) / 2 and c < n (cols <= n, n a multiple of 16;
// columns >= cols and the odd row past the end are zero). Row stride of dst: ldd (>= n).
void pack_rows_avx512(uint32_t* dst, int64_t ldd, const uint16_t* src, int64_t ld, int64_t rows,
                      int64_t cols, int64_t n);

// Rounds rows of fp32 (row stride lds) to bf16 rows (row stride ld), cols values each, with
// VCVTNEPS2BF16 (nearest even), as oneDNN's bf16 GEMM outputs are stored.
void store_bf16_rows_avx512(uint16_t* dst, int64_t ld, const float* src, int64_t lds, int64_t rows,
                            int64_t cols);

}  // namespace mixp::cpu::attn
