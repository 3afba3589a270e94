// Dtype-generic GEMM kernel of the cpu backend: the building block the AMP (bf16) and INT8
// (u8s8/s8s8) paths reuse, and what `mixp bench gemm` times (docs/architecture.md 3.5, backends:
// oneDNN matmul in f32/bf16/s8). These are kernels: nothing is recorded for autograd and inputs are
// not converted; the op front ends (matmul, linear) and the quant module decide the dtypes.
//
//   a          b          dst      how
//   fp32    x  fp32    -> fp32     CpuBackend::matmul (oneDNN f32 primitive)
//   bf16    x  bf16    -> fp32     CpuBackend::matmul with MatmulConfig::compute = bf16: products
//                                  exact in fp32, fp32 accumulation. Without AVX-512 (no oneDNN
//                                  bf16 kernel, or ONEDNN_MAX_CPU_ISA below AVX512_CORE) the
//                                  inputs are widened to fp32 (exact) first.
//   fp8     x  fp8     -> fp32     E4M3 x E4M3, E4M3 x E5M2 or E5M2 x E4M3 (the FP8 recipes' codes,
//                                  amp/fp8_quantize.h): the backend's FP8 GEMM where
//                                  Backend::fp8_matmul() says it has one (cuda on sm_89+:
//                                  cuBLASLt, MatmulConfig::compute = a's dtype); elsewhere (the
//                                  cpu) widened to bf16, exact, and run as bf16 x bf16 -> fp32.
//                                  Products exact, fp32 accumulation either way.
//   uint8   x  int8    -> int32    oneDNN u8s8s32 primitive (cached here); exact integer sums
//   int8    x  int8    -> int32    oneDNN s8s8s32 primitive (cached here); exact integer sums
//
// Exactness of int8: with AVX512_VNNI (vpdpbusd) every product is accumulated in int32 without
// saturation. Without VNNI oneDNN uses vpmaddubsw, whose int16 pair sums saturate when
// |a0*b0 + a1*b1| > 32767; keep weights within 7 bits there (what oneDNN itself advises).
//
// a is [M, K] and b is [K, N], each row-major or column-major (a transposed view costs no
// copy); any other layout is copied to contiguous first. dst is [M, N], contiguous, of
// gemm_result_dtype(a, b).
#pragma once
#include <cstdint>
#include <string>

#include "mixp/tensor/tensor.h"

namespace mixp {

void gemm(Tensor& dst, const Tensor& a, const Tensor& b);
Tensor gemm(const Tensor& a, const Tensor& b);  // allocates dst

// fp8-block's K-chunked GEMM in one pass (amp/block_linear.cpp; docs/fp4.md "Speed"): bf16 a
// [M, K] and b [K, N] (K a multiple of 128), fp32 dst [M, N] contiguous:
//   dst(i, j) = sum over the 128-wide K chunks c, in order, of P_c(i, j) * (row_scale[i * K/128 + c]
//               * col_scale[c * N + j]),
// P_c the chunk's fp32 sum of products, the first term added to +0, no FMA: exactly what gemm()
// on each chunk followed by block_scaled_accumulate gives. Runs where gemm() would run each
// chunk on mixp's own bf16 kernel (AVX512_BF16 without AMX, large enough shapes: gemm_bf16.h)
// and returns true; elsewhere returns false, dst untouched, and the caller runs the chunks.
bool gemm_chunk_scaled(Tensor& dst, const Tensor& a, const Tensor& b, const float* row_scale,
                       const float* col_scale);
// Whether gemm_chunk_scaled(dst, a, b, ...) runs (true) or declines (false), without running it
// or writing dst: the same checks, so a caller builds the scale arrays only when they are read.
bool gemm_chunk_scaled_runs(Tensor& dst, const Tensor& a, const Tensor& b);
// Whether gemm_chunk_scaled runs for a row-major a [m, k] (and then for any layout of a and b the
// kernel reads: row- or column-major, a 4-byte aligned row-major a). Describes, runs nothing.
bool gemm_chunk_scaled_runs(int64_t m, int64_t n, int64_t k);

// The dtype of dst for inputs (a, b); throws std::invalid_argument naming the supported pairs.
DType gemm_result_dtype(DType a, DType b);

// What gemm() runs for (a, b) at M x N x K on this machine: oneDNN's implementation name
// ("brg:avx512_core_bf16", "brg:avx512_core_vnni", ...), prefixed by "fp32 (bf16 widened) " when
// bf16 is emulated. Creates a primitive descriptor to ask oneDNN (tens of microseconds).
std::string gemm_implementation(DType a, DType b, int64_t m, int64_t n, int64_t k);

}  // namespace mixp
