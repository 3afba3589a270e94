// What a block-scaled recipe's quantizer (format/block_scaled.h: nvfp4, mxfp4, fp8-block) does to
// a tensor, block by block (docs/inspect.md "Block-scaled formats"): `mixp inspect blocks`.
//
// The tensor is quantized with the public quantizer and dequantized; over the values:
//   underflow   x != 0 whose dequantized value is 0 (flushed: too small for its block's scale,
//               or its block's scale was flushed to zero)
//   saturated   x stored as the element's largest magnitude (E2M1 6, E4M3 448) with |x| above
//               |dequantized| by more than 2^-12 relative (fp32 rounding of the scales is far
//               below): the scaled value was clamped. nvfp4 does this when its E4M3 block scale
//               rounds down (by up to 2^-4); mxfp4's and fp8-block's scales never clamp.
// and per block (tile):
//   scale_saturated  the block's ideal decoding scale lies outside its scale format, so the scale
//               was clamped or flushed: nvfp4 a tile with nonzero values whose E4M3 scale
//               rounded to 0 (its values all dequantize to 0); mxfp4 vmax / 6 below 2^-127 (the
//               E8M0 floor) or above 2^127; fp8-block 448 / vmax above FLT_MAX (the scale is
//               clamped to FLT_MAX).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "mixp/format/block_scaled.h"

namespace mixp::inspect {

struct BlockScaledStats {
  BlockScaledOptions options;
  int tile_cols = 0;
  int64_t rows = 0, cols = 0, numel = 0, zeros = 0;
  int64_t blocks = 0;  // tiles: ceil(rows / tile_rows) x ceil(cols / tile_cols)
  int64_t underflow = 0, saturated = 0;
  int64_t blocks_with_underflow = 0, blocks_with_saturation = 0, scale_saturated = 0;
  double mse = 0;  // mean of (dequantized - x)^2
  // Per block, tiles row-major: counts of underflowed and saturated values, scale saturated.
  std::vector<int32_t> block_underflow, block_saturated;
  std::vector<uint8_t> block_scale_saturated;
  // stored_block_stats only: the statistics come from stored codes, without the original values,
  // so underflow and saturated are unknown (-1, and their per-block vectors empty); at_max counts
  // the values stored at the element's largest magnitude (where saturated values end up).
  bool from_codes = false;
  int64_t at_max = 0;
  double share_scale_saturated() const {
    return blocks > 0 ? double(scale_saturated) / double(blocks) : 0.0;
  }
};

// x: rows x cols row-major (cols the reduction dimension). Throws std::invalid_argument as
// block_scaled_quantize does, and for non-finite values (outside the quantizers' contract).
BlockScaledStats block_scaled_stats(std::span<const float> x, int64_t rows, int64_t cols,
                                    const BlockScaledOptions& opt);

// A tensor already in a block-scaled layout (a file `mixp convert --to nvfp4|fp8-block` wrote,
// io/block_scaled_safetensors.h): zeros (zero codes), at_max, and the blocks whose scale sits at
// its format's limit: nvfp4 a tile with nonzero codes and scale 0 (flushed: its values all
// decode to 0), fp8-block the decoding scale 1 / FLT_MAX (the clamped scale).
BlockScaledStats stored_block_stats(const BlockScaledTensor& q);

}  // namespace mixp::inspect
