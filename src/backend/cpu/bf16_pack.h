// Pair packings of bf16 matrices for VDPBF16PS (internal): the instruction takes a K pair of bf16
// values as one 32-bit lane, the low half the even element, so a GEMM operand whose K runs
// along its columns is read in place and one whose K runs along its rows is "pair-packed" first.
// Used by the per-head attention (attention_kernels.h) and the bf16 GEMM (gemm_bf16.h). Defined
// in bf16_pack_avx512.cpp; call only where AVX-512 runs.
#pragma once
#include <cstdint>

namespace mixp::cpu {

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

}  // namespace mixp::cpu
