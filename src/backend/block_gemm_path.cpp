// block_gemm_path (mixp/backend/cuda_block.h): which GEMM the block-scaled recipes get on a GPU,
// by compute capability. A pure function compiled in every build (with or without the CUDA
// backend), so that `mixp doctor` (platform.cpp gpu_recipe_support) and the CPU tests use the
// rule the CUDA backend selects with (src/backend/cuda/cuda_block_gemm.cpp).
#include "mixp/backend/cuda_block.h"

namespace mixp {

std::string_view to_string(BlockGemmPath p) {
  return p == BlockGemmPath::cublaslt ? "cublaslt" : "dequantize";
}

BlockGemmPath block_gemm_path(BlockScheme s, int cc_major, int cc_minor) {
  (void)cc_minor;
  // cuBLASLt's fp32 block scales per 128 / 128x128 (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
  // BLK128x128_32F) exist for sm_90 only; Blackwell's block-scaled kernels take E8M0 per 32
  // (Transformer Engine converts fp8-block to MXFP8 there), so fp8-block is dequantized on
  // sm_100+. E2M1 with VEC16_UE4M3 / VEC32_UE8M0 scales: Blackwell (sm_100 and newer).
  if (s == BlockScheme::fp8_block) return cc_major == 9 ? BlockGemmPath::cublaslt : BlockGemmPath::dequantize;
  return cc_major >= 10 ? BlockGemmPath::cublaslt : BlockGemmPath::dequantize;
}

}  // namespace mixp
