// Block-scaled training quantizers (issue 32; docs/fp4.md, docs/fp8.md "fp8-block"):
//
//   scheme     element  block (tile)                 block scale         per-tensor scale
//   nvfp4      E2M1     1x16 or 16x16                E4M3 (RNE, <= 448)  fp32, from the global amax
//   mxfp4      E2M1     1x32                         E8M0 (power of two) -
//   fp8_block  E4M3     1x128 or 128x128             fp32 (or 2^k)       -
//
// A 2-D tensor of `rows` x `cols` is cut into tiles of tile_rows x tile_cols, `cols` being the
// reduction (GEMM K) dimension. Tiles at the right and bottom edges may be partial: they are
// quantized as if padded with zeros (Transformer Engine pads with zeros, which changes no amax).
//
// The arithmetic equals Transformer Engine's pure-PyTorch references bit for bit (all fp32):
//   nvfp4 (NVFP4QuantizerRef._quantize_blockwise_reference, custom_recipes/reference_nvfp4.py):
//     genc = min(2688 / amax, FLT_MAX); genc = 1 if genc == 0;  gdec = 1 / genc
//     s    = e4m3_rne(clamp(min(vmax * (genc * rcp(6)), FLT_MAX), 448))   vmax = tile amax
//     enc  = min(1 / (float(s) * gdec), FLT_MAX);   code = e2m1(clamp(x * enc, -6, 6))
//     dequant: (e2m1 * float(s)) * (amax / 2688)   (TE tests/pytorch/nvfp4 dequantize_fp4)
//   mxfp4 (the same reference with pow_2_scales, tile 1x32):
//     s = 2^clamp(ceil(log2(vmax / 6)), -127, 127) (E8M0 code = exponent + 127); enc = 1 / s;
//     code = e2m1(clamp(x * enc, -6, 6)); dequant e2m1 * s. ceil(log2) is computed exactly from the
//     fp32 bits (TE's fp32 log2 can round to an integer just above a power of two; we do not).
//     This scale never saturates an element, unlike OCP MX's floor(log2 amax) - 2 (block_mx.h).
//   fp8_block (tests/pytorch/references/blockwise_quantizer_reference.py, quantize_scale_calc.py):
//     scale = 448 / amax; inf -> FLT_MAX; pow2: 2^(frexp exponent - 1) (rounded down); amax == inf
//     -> 0; amax == 0 -> 1. code = e4m3_rne(clamp(x * scale, -448, 448)); scale_inv = 1 / scale;
//     dequant code * scale_inv.
// E2M1 rounding is round-to-nearest-even (TE's cast_to_fp4x2 thresholds), with one quirk kept:
// an exact +-0.0 encodes as code 0 (+0) while a negative value that rounds to zero is code 8 (-0).
// Round::stochastic (nvfp4, mxfp4) rounds the scaled value stochastically between its two E2M1
// neighbours with 32 random bits sr_bits(seed, r * cols + c) (rounding.h; unbiased below 6).
// NaN/inf inputs are outside the contract (the references propagate them into every scale).
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "mixp/format/rounding.h"

namespace mixp {

enum class BlockScheme : uint8_t { nvfp4, mxfp4, fp8_block };

std::string_view to_string(BlockScheme s);

struct BlockScaledOptions {
  BlockScheme scheme = BlockScheme::nvfp4;
  int tile_rows = 1;         // nvfp4: 1 or 16; mxfp4: 1; fp8_block: 1 or 128
  bool pow2_scales = false;  // fp8_block only: power-of-two scales (DeepSeek-V3 / TE option)
  Round round = Round::nearest_even;  // nearest_even, or stochastic for nvfp4/mxfp4
  uint64_t seed = 0;                  // stochastic rounding only
};

// Block length along the reduction dimension: 16 (nvfp4), 32 (mxfp4), 128 (fp8_block).
int block_scaled_tile_cols(BlockScheme s);

struct BlockScaledTensor {
  BlockScheme scheme = BlockScheme::nvfp4;
  int64_t rows = 0, cols = 0;
  int tile_rows = 1, tile_cols = 16;
  // One code per element, row-major (E2M1 in the low nibble, or the E4M3 byte).
  std::vector<uint8_t> codes;
  // One entry per tile, tiles row-major (ceil(rows/tile_rows) x ceil(cols/tile_cols)):
  // scale_codes: the E4M3 (nvfp4) or E8M0 (mxfp4) byte; empty for fp8_block.
  // scales: the decoding scale as fp32 (E4M3 / E8M0 value; fp8_block's scale_inv).
  std::vector<uint8_t> scale_codes;
  std::vector<float> scales;
  float global_amax = 0.0f;  // nvfp4 only: max |x| over the tensor

  int64_t tile_grid_rows() const { return (rows + tile_rows - 1) / tile_rows; }
  int64_t tile_grid_cols() const { return (cols + tile_cols - 1) / tile_cols; }
};

// Throws std::invalid_argument for a tile shape the scheme does not have or x.size() != rows*cols.
BlockScaledTensor block_scaled_quantize(std::span<const float> x, int64_t rows, int64_t cols,
                                        const BlockScaledOptions& opt);
// out.size() == rows * cols.
void block_scaled_dequantize(const BlockScaledTensor& q, std::span<float> out);
// Quantize + dequantize in place (training's fake quantization), fused: no codes are stored.
void block_scaled_fake_quantize(std::span<float> x, int64_t rows, int64_t cols,
                                const BlockScaledOptions& opt);

// Fake quantization in the factors a GEMM consumes (src/amp/block_linear.cpp): out gets the
// values before the per-tensor or per-tile factor, which is returned, so that the dequantized
// tensor is
//   nvfp4, mxfp4:  out[i] * tensor_scale, out[i] = e2m1_value(code) * block scale, and
//                  tensor_scale = amax / 2688 (nvfp4) or 1 (mxfp4);
//   fp8_block:     out[i] * tile_scales[tile of i], out[i] = the E4M3 value (tiles row-major).
// Every out[i] is exactly representable in bf16 (E2M1 has 2 significant bits, E4M3 and E8M0
// scales 4 and 1, so a product has at most 6; E4M3 values have 4; bf16 keeps 8 and fp32's
// exponent range), so a bf16 GEMM on them forms the exact products. nvfp4's
// (e2m1 * s) * tensor_scale equals block_scaled_dequantize bit for bit.
struct BlockScaledFactors {
  float tensor_scale = 1.0f;
  std::vector<float> tile_scales;  // fp8_block only
};
BlockScaledFactors block_scaled_fake_quantize_factors(std::span<const float> x, int64_t rows,
                                                      int64_t cols, const BlockScaledOptions& opt,
                                                      std::span<float> out);
// The same values written as bf16 bits (exact: the top halves of the fp32 values above).
BlockScaledFactors block_scaled_fake_quantize_factors(std::span<const float> x, int64_t rows,
                                                      int64_t cols, const BlockScaledOptions& opt,
                                                      std::span<uint16_t> out_bf16);

// fp8_block's column-wise operand without a transpose (the weight gradient's, src/amp/
// block_linear.cpp): x (rows x cols) quantized in tiles of 128 rows x 1 column, i.e. x^T with
// opt's 1x128 tiles, written in x's layout: out_bf16[r * cols + c] and tile_scales[(r / 128) *
// cols + c] are the value and scale that block_scaled_fake_quantize_factors of x^T gives for
// element (c, r), the same bits. opt: fp8_block, tile_rows 1, nearest-even.
BlockScaledFactors fp8_block_columns_factors(std::span<const float> x, int64_t rows, int64_t cols,
                                             const BlockScaledOptions& opt,
                                             std::span<uint16_t> out_bf16);

// fp8_block's GEMM per 128-wide chunk of K (src/amp/block_linear.cpp): adds one chunk's fp32
// partial product into the result, y[r][c] += partial[r][c] * (row_scale[r] * col_scale[c]) (the
// chunk's scales of row r of A and row c of B), or y = 0 + that for the first chunk. Row-parallel,
// SIMD; the same fp32 operations element by element.
void block_scaled_accumulate(std::span<float> y, std::span<const float> partial, int64_t rows,
                             int64_t cols, std::span<const float> row_scale,
                             std::span<const float> col_scale, bool first);

// The column-wise operand of a tensor (the wgrad GEMM's, src/amp/block_linear.cpp): out [cols, rp]
// = x^T, rp = rows, or rows rounded up to a multiple of 16 with zero columns and then rht16_rows
// applied when rht. out.size() == cols * rp.
void block_scaled_columns(std::span<const float> x, int64_t rows, int64_t cols, bool rht,
                          std::span<float> out);

// The scalar reference of block_scaled_quantize / _dequantize (src/format/block_scaled_ref.cpp):
// one element at a time through the generic float encoder. The functions above are the fast
// path (SIMD loops per tier, OpenMP over tile rows) and equal it bit for bit
// (tests/block/test_block_scaled_fast.cpp); it is kept as the reference they are tested against.
BlockScaledTensor block_scaled_quantize_reference(std::span<const float> x, int64_t rows,
                                                  int64_t cols, const BlockScaledOptions& opt);
void block_scaled_dequantize_reference(const BlockScaledTensor& q, std::span<float> out);

// Value of an E2M1 code (sign bit 3): 0, 0.5, 1, 1.5, 2, 3, 4, 6.
float e2m1_value(uint8_t code);

// The 16-point random Hadamard transform of NVFP4 (TE reference_nvfp4.py _apply_rht): each group
// of 16 consecutive values v along a row becomes v @ T, T = diag(sign) * H16 / 4 with H16 the
// Sylvester Hadamard matrix (H[i][j] = (-1)^popcount(i & j)) and `sign` TE's fixed wgrad sign
// vector. Output j is summed in fp32 in index order i = 0..15 (each product exact). T is
// orthogonal, so applying it to both operands along the reduction dimension leaves a GEMM
// unchanged. Requires cols % 16 == 0 (pad with zeros first).
void rht16_rows(std::span<float> x, int64_t rows, int64_t cols);
// TE's get_wgrad_sign_vector(): +1 or -1 for i in [0, 16).
float rht16_sign(int i);

}  // namespace mixp
