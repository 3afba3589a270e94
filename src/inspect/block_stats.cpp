// See include/mixp/inspect/block_stats.h. Only the public quantizer is used, so these counts are
// what training with the recipe does to the tensor, bit for bit.
#include "mixp/inspect/block_stats.h"

#include <cfloat>
#include <cmath>
#include <stdexcept>

namespace mixp::inspect {
namespace {
// The decoding scale and the reciprocal the quantizer encodes with differ by fp32 rounding (a few
// 2^-24), so the tensor's amax can come back an ulp below itself; a clamp through the scale's own
// rounding (E4M3: up to 2^-4) is far above this.
constexpr double kClampSlack = 1.0 / 4096;
}  // namespace

BlockScaledStats block_scaled_stats(std::span<const float> x, int64_t rows, int64_t cols,
                                    const BlockScaledOptions& opt) {
  for (float v : x) {
    if (!std::isfinite(v))
      throw std::invalid_argument("block statistics need finite values (the quantizers' contract)");
  }
  const BlockScaledTensor q = block_scaled_quantize(x, rows, cols, opt);
  std::vector<float> deq(x.size());
  block_scaled_dequantize(q, deq);
  BlockScaledStats s;
  s.options = opt;
  s.tile_cols = q.tile_cols;
  s.rows = rows;
  s.cols = cols;
  s.numel = rows * cols;
  const int64_t gc = q.tile_grid_cols();
  s.blocks = q.tile_grid_rows() * gc;
  s.block_underflow.assign(static_cast<size_t>(s.blocks), 0);
  s.block_saturated.assign(static_cast<size_t>(s.blocks), 0);
  s.block_scale_saturated.assign(static_cast<size_t>(s.blocks), 0);
  std::vector<float> vmax(static_cast<size_t>(s.blocks), 0.0f);
  const bool fp8 = opt.scheme == BlockScheme::fp8_block;
  const uint8_t top = fp8 ? 0x7E : 0x7;  // the element's largest magnitude (448, 6)
  double se = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const size_t b = static_cast<size_t>((r / q.tile_rows) * gc + c / q.tile_cols);
      const float v = x[i], d = deq[i];
      vmax[b] = std::max(vmax[b], std::fabs(v));
      se += (double(d) - double(v)) * (double(d) - double(v));
      if (v == 0.0f) {
        ++s.zeros;
        continue;
      }
      if (d == 0.0f) ++s.block_underflow[b];
      const uint8_t mag = fp8 ? (q.codes[i] & 0x7F) : (q.codes[i] & 0x7);
      // Clamped: beyond the top value by more than fp32 rounding of the scales (kClampSlack).
      if (mag == top && d != 0.0f && std::fabs(v) > std::fabs(d) * (1.0 + kClampSlack))
        ++s.block_saturated[b];
    }
  }
  s.mse = s.numel > 0 ? se / double(s.numel) : 0.0;
  for (size_t b = 0; b < static_cast<size_t>(s.blocks); ++b) {
    s.underflow += s.block_underflow[b];
    s.saturated += s.block_saturated[b];
    s.blocks_with_underflow += s.block_underflow[b] > 0;
    s.blocks_with_saturation += s.block_saturated[b] > 0;
    bool clamped = false;
    if (vmax[b] > 0.0f) {
      switch (opt.scheme) {
        case BlockScheme::nvfp4:
          clamped = q.scales[b] == 0.0f;
          break;
        case BlockScheme::mxfp4:
          clamped = double(vmax[b]) / 6.0 < std::ldexp(1.0, -127) ||
                    double(vmax[b]) / 6.0 > std::ldexp(1.0, 127);
          break;
        case BlockScheme::fp8_block:
          clamped = 448.0 / double(vmax[b]) > double(FLT_MAX);
          break;
      }
    }
    s.block_scale_saturated[b] = clamped ? 1 : 0;
    s.scale_saturated += clamped;
  }
  return s;
}

BlockScaledStats stored_block_stats(const BlockScaledTensor& q) {
  BlockScaledStats s;
  s.options.scheme = q.scheme;
  s.options.tile_rows = q.tile_rows;
  s.tile_cols = q.tile_cols;
  s.rows = q.rows;
  s.cols = q.cols;
  s.numel = q.rows * q.cols;
  s.from_codes = true;
  s.underflow = s.saturated = s.blocks_with_underflow = s.blocks_with_saturation = -1;
  const int64_t gc = q.tile_grid_cols();
  s.blocks = q.tile_grid_rows() * gc;
  std::vector<uint8_t> nonzero(static_cast<size_t>(s.blocks), 0);
  const bool fp8 = q.scheme == BlockScheme::fp8_block;
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const uint8_t mag = fp8 ? (q.codes[static_cast<size_t>(r * q.cols + c)] & 0x7F)
                              : (q.codes[static_cast<size_t>(r * q.cols + c)] & 0x7);
      if (mag == 0) {
        ++s.zeros;
        continue;
      }
      nonzero[static_cast<size_t>((r / q.tile_rows) * gc + c / q.tile_cols)] = 1;
      if (mag == (fp8 ? 0x7E : 0x7)) ++s.at_max;
    }
  }
  s.block_scale_saturated.assign(static_cast<size_t>(s.blocks), 0);
  const float clamped_inv = 1.0f / FLT_MAX;  // fp8-block's scale_inv when scale hit FLT_MAX
  for (size_t b = 0; b < static_cast<size_t>(s.blocks); ++b) {
    bool sat = false;  // mxfp4 is stored in the MX layout, not measured here
    if (q.scheme == BlockScheme::nvfp4) sat = nonzero[b] && q.scales[b] == 0.0f;
    if (fp8) sat = q.scales[b] == clamped_inv;
    s.block_scale_saturated[b] = sat ? 1 : 0;
    s.scale_saturated += sat;
  }
  return s;
}

}  // namespace mixp::inspect
