// The 8-bit GEMMs of the CUDA backend (docs/cuda.md) called directly, with the scales as device
// tensors: the GEMM benchmark (`mixp bench gemm --device cuda`, bench/cuda_gemm.cpp) and
// tests/cuda call them. The FP8 training recipes reach the same FP8 GEMM through Backend::matmul
// (MatmulConfig::compute fp8_e4m3/e5m2, via mixp::gemm), without scale pointers. Operands 2-d on one cuda device. Untested on
// hardware, as the whole backend. Without the backend built or a device they throw "no CUDA
// device: ..." with the reason.
#pragma once
#include "mixp/tensor/tensor.h"

namespace mixp {

// dst [M, N] (bf16 or fp32) = scale_a[0] * scale_b[0] * (a [M, K] @ b [K, N]), a and b fp8
// (E4M3 x E4M3, E4M3 x E5M2 or E5M2 x E4M3), the scales fp32 [1] on the device (per-tensor, as
// the FP8 recipes' scale_inv). On sm_89/sm_90 with K a multiple of 16: cuBLASLt's FP8 kernels
// with CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER (fast_accum: CUBLASLT_MATMUL_DESC_FAST_ACCUM, as
// Transformer Engine's forward GEMMs); returns true. Elsewhere emulated as on the CPU (the fp8
// values in bf16, a bf16 GEMM with fp32 accumulation, then the scales); returns false. cuBLASLt
// takes the "TN" layout: b with unit row stride (a linear weight [N, K] seen transposed) is read
// in place, other layouts are copied into it.
bool cuda_fp8_matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& scale_a,
                     const Tensor& scale_b, bool fast_accum = false);
// dst int32 [M, N] = a int8 [M, K] @ b int8 [K, N] (CUBLAS_COMPUTE_32I; K a multiple of 4).
void cuda_int8_matmul(Tensor& dst, const Tensor& a, const Tensor& b);
// Whether cuda:index runs FP8 GEMMs natively (compute capability >= 8.9).
bool cuda_fp8_gemm_native(int index);

}  // namespace mixp
