// The block-scaled recipes (nvfp4, mxfp4, fp8-block; docs/fp4.md, docs/fp8.md) on the CUDA
// backend (docs/cuda.md "Block-scaled recipes"): the quantizers as device kernels and the GEMMs,
// natively on cuBLASLt's block-scaling modes where the GPU has them, else on the device's bf16
// GEMM of the dequantized operands (the CPU emulation's method). Untested on hardware, as the
// whole backend. Without the backend built or a device the cuda_* functions throw "no CUDA
// device: ..."; block_gemm_path is pure and exists in every build.
#pragma once
#include <cstdint>
#include <string_view>

#include "mixp/format/block_scaled.h"
#include "mixp/tensor/tensor.h"

namespace mixp {

// How a block-scaled GEMM runs on a GPU of compute capability cc_major.cc_minor:
//   cublaslt   cuBLASLt's block-scaled kernels: fp8_block on sm_90 (E4M3 with
//              CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F for 1x128 tiles, BLK128x128_32F for
//              128x128 weight tiles; cuBLASLt has these on Hopper only, Transformer Engine
//              converts the recipe to MXFP8 on Blackwell); nvfp4 (CUDA_R_4F_E2M1 with
//              VEC16_UE4M3) and mxfp4 (VEC32_UE8M0) on sm_100 and newer (Blackwell).
//   dequantize the codes dequantized on the device into bf16 (exact: block_scaled.h,
//              BlockScaledFactors) and the bf16 GEMM with fp32 accumulation, the per-tensor
//              (nvfp4) or per-128-chunk (fp8_block) factors applied in fp32: the CPU
//              emulation's operands and operations (the sums' order aside).
enum class BlockGemmPath : uint8_t { cublaslt, dequantize };
std::string_view to_string(BlockGemmPath p);
BlockGemmPath block_gemm_path(BlockScheme s, int cc_major, int cc_minor);

// x (fp32 [rows, cols], on one cuda device) quantized on that device: the fields of
// BlockScaledTensor as device tensors, the same bits as block_scaled_quantize on the CPU.
struct CudaBlockTensor {
  BlockScheme scheme = BlockScheme::nvfp4;
  int64_t rows = 0, cols = 0;
  int tile_rows = 1, tile_cols = 16;
  Tensor codes;        // uint8 [rows, cols]
  Tensor scales;       // fp32 [grid rows, grid cols]
  Tensor scale_codes;  // uint8 [grid rows, grid cols] (nvfp4, mxfp4; undefined for fp8_block)
  Tensor amax;         // fp32 [1]: nvfp4's global amax (undefined otherwise)
  BlockScaledTensor to_host() const;  // copies to the host's BlockScaledTensor
};
CudaBlockTensor cuda_block_quantize(const Tensor& x, const BlockScaledOptions& opt);
// Fake quantization on the device (block_scaled_fake_quantize): fp32 [rows, cols] dequantized.
Tensor cuda_block_fake_quantize(const Tensor& x, const BlockScaledOptions& opt);

// y fp32 [M, N] = Q(a) @ Q(b)^T: a fp32 [M, K] and b fp32 [N, K] on one cuda device, each
// quantized along K with its options (the roles of src/amp/block_linear.cpp: a the rows of x or
// g, b the weight or a column-wise operand; both of one scheme). Runs as block_gemm_path says for
// the device, or on `force` when given (tests); a GEMM cuBLASLt cannot take (K not a multiple of
// 32 for fp4 or 16 for fp8, 128x128 tiles on both sides, no algorithm offered) runs on the
// dequantize path (a one-time warning names it when cuBLASLt had no algorithm). *used, when not
// null, gets the path that ran.
Tensor cuda_block_gemm_nt(const Tensor& a, const Tensor& b, const BlockScaledOptions& opt_a,
                          const BlockScaledOptions& opt_b, BlockGemmPath* used = nullptr,
                          const BlockGemmPath* force = nullptr);

// block_scaled_columns on the device: x fp32 [rows, cols] (cuda) -> [cols, rp] = x^T, rp = rows,
// or rows rounded up to a multiple of 16 with zero columns and the RHT applied when rht.
Tensor cuda_block_columns(const Tensor& x, bool rht);

// rht16_rows on the device: x fp32 contiguous [rows, cols], cols % 16 == 0, in place.
void cuda_rht16_rows(Tensor& x);

}  // namespace mixp
