// Internal: the launchers of the block-scaled quantizer kernels (cuda_block_quant.cu) for the
// nvfp4, mxfp4 and fp8-block recipes, over raw device pointers. Element and tile rules:
// src/format/block_quant_math.h, the header the CPU path (src/format/block_scaled*.cpp)
// runs, so the CPU exactness tests cover this arithmetic (docs/cuda.md "Block-scaled recipes").
// Every launcher enqueues on `stream`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mixp::cuda {

// One quantization of x [rows, cols] (fp32, contiguous) in tiles of th x tw (th rows, tw columns;
// tiles row-major, partial at the edges as if zero-padded): the scheme's tile scale from the
// tile's amax (block_math::tile_scale), then each element's code. Outputs may be null:
//   codes        [rows * cols]: E2M1 code (low nibble) or the E4M3 byte
//   scales       per tile: the decoding scale (fp8_block's scale_inv)
//   scale_codes  per tile: the E4M3 (nvfp4) / E8M0 (mxfp4) byte
//   deq          [rows * cols] fp32: the dequantized value (nvfp4: times amax / 2688)
//   factors      [rows * cols] bf16 bits: the value before the per-tensor (nvfp4) or per-tile
//                (fp8_block) factor, exact in bf16 (block_scaled.h, BlockScaledFactors)
// nvfp4 reads the global amax from *amax (device; launch_amax) for its per-tensor scales.
// Stochastic rounding (fp4 only) uses sr_bits(seed, r * cols + c), as the CPU.
struct BlockQuantArgs {
  int kind = 0;  // block_math::Kind
  int th = 1, tw = 16;
  bool pow2 = false, sr = false;
  uint64_t seed = 0;
  const float* x = nullptr;
  int64_t rows = 0, cols = 0;
  const float* amax = nullptr;  // nvfp4
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  uint8_t* scale_codes = nullptr;
  float* deq = nullptr;
  uint16_t* factors = nullptr;
};
void launch_block_quantize(const BlockQuantArgs& a, cudaStream_t stream);

// The 16-point RHT in place over ng consecutive groups of 16 values (block_math::rht16_output).
void launch_rht16(float* x, int64_t ng, cudaStream_t stream);

// fp8_block's per-chunk epilogue (block_scaled_accumulate): y[r][c] = (first ? 0 : y[r][c]) +
// p[r][c] * (sa[r] * sb[c]).
void launch_block_accumulate(float* y, const float* p, int64_t rows, int64_t cols, const float* sa,
                             const float* sb, bool first, cudaStream_t stream);

// dst [gc, rows]: dst[c * rows + r] = scales[(r / th) * gc + c] (fp8_block's per-chunk scale of
// every row, for launch_block_accumulate).
void launch_expand_tile_scales(float* dst, const float* scales, int64_t rows, int64_t gc, int th,
                               cudaStream_t stream);

// block_scaled_columns on the device: dst [cols, rp] = x^T, rows rp > r zero (rp >= rows).
void launch_columns(float* dst, const float* x, int64_t rows, int64_t cols, int64_t rp,
                    cudaStream_t stream);

// y[i] *= f over n values (nvfp4's per-tensor factors after the GEMM); f on the device.
void launch_scale_by_product(float* y, int64_t n, const float* amax_a, const float* amax_b,
                             cudaStream_t stream);

// cuBLASLt's scale layouts (block_math: vec_scale_offset, vec128_scale_offset,
// blk128_scale_offset), from the per-tile arrays above (tiles row-major, gr x gc):
//   vec (VEC16_UE4M3 / VEC32_UE8M0): the scale bytes of rows x gc blocks, a tile of th rows
//     giving each of its rows the tile's byte (nvfp4's 16x16 weight tiles); dst zeroed first.
//   vec128 (VEC128_32F): th == 1 scales, dst [gc, roundup(rows, 4)]; padding 0.
//   blk128 (BLK128x128_32F): th == 128 scales, dst [gr, roundup(gc, 4)]; padding 0.
void launch_pack_vec_scales(uint8_t* dst, const uint8_t* scale_codes, int64_t rows, int64_t gc,
                            int th, cudaStream_t stream);
void launch_pack_vec128_scales(float* dst, const float* scales, int64_t rows, int64_t gc,
                               cudaStream_t stream);
void launch_pack_blk128_scales(float* dst, const float* scales, int64_t gr, int64_t gc,
                               cudaStream_t stream);
// Two E2M1 codes per byte, element 2i in the low nibble (CUDA_R_4F_E2M1's packing); n even.
void launch_pack_fp4(uint8_t* dst, const uint8_t* codes, int64_t n, cudaStream_t stream);

}  // namespace mixp::cuda
