// The scalar reference of the block-scaled quantizers (nvfp4, mxfp4, fp8_block): one tile and one
// element at a time through the generic float encoder. The definitions (and the Transformer Engine
// references they equal) are in include/mixp/format/block_scaled.h; every step below is one fp32
// operation of those references, in their order, so results match bit for bit. The fast path
// (block_scaled.cpp) is tested against this one (tests/block/test_block_scaled_fast.cpp).
#include "mixp/format/block_scaled.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>

#include "format/block_scaled_kernels.h"
#include "mixp/format/float_codec.h"

namespace mixp {

namespace {

constexpr float kE2M1Max = 6.0f;
constexpr float kE4M3Max = 448.0f;

// TE cast_to_fp4x2: round to nearest even with its exact thresholds; v already in [-6, 6].
inline uint8_t e2m1_rne(float v) {
  const float a = std::fabs(v);
  uint8_t m;
  if (a <= 0.25f) m = 0;
  else if (a < 0.75f) m = 1;
  else if (a <= 1.25f) m = 2;
  else if (a < 1.75f) m = 3;
  else if (a <= 2.5f) m = 4;
  else if (a < 3.5f) m = 5;
  else if (a <= 5.0f) m = 6;
  else m = 7;
  return v < 0.0f ? static_cast<uint8_t>(m | 8) : m;  // -0.0 is not < 0: code 0, as TE
}

inline uint8_t e2m1_encode(float v, Round round, uint32_t bits) {
  if (std::isnan(v)) return 0;  // TE: no threshold matches NaN, the code stays 0
  if (round == Round::stochastic)
    return static_cast<uint8_t>(
        encode_float(kFp4E2M1, v, round, Overflow::saturate, bits, nullptr));
  return e2m1_rne(v);
}

inline float clampf(float v, float lo, float hi) { return std::min(std::max(v, lo), hi); }

// Exact ceil(log2(v)) for finite v > 0 (frexp is exact: v = m * 2^e, m in [0.5, 1)); +inf gives
// 128, which the caller clamps to 127 as TE's ceil(log2(inf)) is (frexp's exponent of inf is
// unspecified; glibc's 0 made an mxfp4 block holding inf scale by 1). block_quant_math.h
// ceil_log2 is the same.
inline int ceil_log2(float v) {
  if (std::isinf(v)) return 128;
  int e = 0;
  const float m = std::frexp(v, &e);
  return m == 0.5f ? e - 1 : e;
}

// max |x| over tile (tr, tc); partial tiles read only the elements that exist (zero padding).
float tile_amax(std::span<const float> x, int64_t rows, int64_t cols, int64_t r0, int64_t c0,
                int th, int tw) {
  float m = 0.0f;
  const int64_t r1 = std::min(rows, r0 + th), c1 = std::min(cols, c0 + tw);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c)
      m = std::max(m, std::fabs(x[static_cast<size_t>(r * cols + c)]));
  return m;
}

}  // namespace

BlockScaledTensor block_scaled_quantize_reference(std::span<const float> x, int64_t rows,
                                                  int64_t cols, const BlockScaledOptions& opt) {
  detail::block_scaled_check(x, rows, cols, opt);
  BlockScaledTensor q;
  q.scheme = opt.scheme;
  q.rows = rows;
  q.cols = cols;
  q.tile_rows = opt.tile_rows;
  q.tile_cols = block_scaled_tile_cols(opt.scheme);
  q.codes.assign(x.size(), 0);
  const int64_t gr = q.tile_grid_rows(), gc = q.tile_grid_cols();
  q.scales.assign(static_cast<size_t>(gr * gc), 0.0f);
  if (opt.scheme != BlockScheme::fp8_block) q.scale_codes.assign(q.scales.size(), 0);

  // nvfp4's per-tensor scales (reference_nvfp4.py: global_encode_scale, its reciprocal and the
  // multiplier with torch.reciprocal(6) folded in).
  float gdec = 1.0f, gmult = 1.0f;
  if (opt.scheme == BlockScheme::nvfp4) {
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    q.global_amax = amax;
    float genc = std::min((kE4M3Max * kE2M1Max) / amax, FLT_MAX);
    if (genc == 0.0f) genc = 1.0f;
    gdec = 1.0f / genc;
    gmult = genc * (1.0f / kE2M1Max);
  }

  for (int64_t tr = 0; tr < gr; ++tr) {
    for (int64_t tc = 0; tc < gc; ++tc) {
      const int64_t r0 = tr * q.tile_rows, c0 = tc * q.tile_cols;
      const float vmax = tile_amax(x, rows, cols, r0, c0, q.tile_rows, q.tile_cols);
      const size_t t = static_cast<size_t>(tr * gc + tc);
      float enc = 1.0f;
      switch (opt.scheme) {
        case BlockScheme::nvfp4: {
          const float ds = clampf(std::min(vmax * gmult, FLT_MAX), -kE4M3Max, kE4M3Max);
          const uint32_t sc =
              encode_float(kFp8E4M3, ds, Round::nearest_even, Overflow::saturate, 0, nullptr);
          const float s = static_cast<float>(decode_float(kFp8E4M3, sc));
          q.scale_codes[t] = static_cast<uint8_t>(sc);
          q.scales[t] = s;
          enc = std::min(1.0f / (s * gdec), FLT_MAX);
          break;
        }
        case BlockScheme::mxfp4: {
          const float ds = vmax / kE2M1Max;
          const int e = ds == 0.0f ? -127 : std::clamp(ceil_log2(ds), -127, 127);
          const float s = std::ldexp(1.0f, e);
          q.scale_codes[t] = static_cast<uint8_t>(e + 127);
          q.scales[t] = s;
          enc = 1.0f / s;
          break;
        }
        case BlockScheme::fp8_block: {
          float scale = kE4M3Max / vmax;
          if (std::isinf(scale)) scale = FLT_MAX;
          if (opt.pow2_scales) {
            int e = 0;
            (void)std::frexp(scale, &e);
            scale = std::ldexp(1.0f, e - 1);
            if (std::isinf(vmax)) scale = 0.0f;
          }
          if (vmax == 0.0f) scale = 1.0f;
          q.scales[t] = 1.0f / scale;
          enc = scale;
          break;
        }
      }
      const int64_t r1 = std::min(rows, r0 + q.tile_rows), c1 = std::min(cols, c0 + q.tile_cols);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          const float v = x[i] * enc;
          if (opt.scheme == BlockScheme::fp8_block) {
            q.codes[i] = static_cast<uint8_t>(encode_float(kFp8E4M3, clampf(v, -kE4M3Max, kE4M3Max),
                                                           Round::nearest_even, Overflow::saturate,
                                                           0, nullptr));
          } else {
            const uint32_t bits = opt.round == Round::stochastic ? sr_bits(opt.seed, i) : 0;
            q.codes[i] =
                e2m1_encode(std::isnan(v) ? v : clampf(v, -kE2M1Max, kE2M1Max), opt.round, bits);
          }
        }
      }
    }
  }
  return q;
}

void block_scaled_dequantize_reference(const BlockScaledTensor& q, std::span<float> out) {
  if (static_cast<int64_t>(out.size()) != q.rows * q.cols)
    throw std::invalid_argument("block_scaled_dequantize: output holds " +
                                std::to_string(out.size()) + " values, the tensor " +
                                std::to_string(q.rows * q.cols));
  const int64_t gc = q.tile_grid_cols();
  const float gdec = q.global_amax / (kE4M3Max * kE2M1Max);
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const size_t i = static_cast<size_t>(r * q.cols + c);
      const float s = q.scales[static_cast<size_t>((r / q.tile_rows) * gc + c / q.tile_cols)];
      switch (q.scheme) {
        case BlockScheme::nvfp4: out[i] = (e2m1_value(q.codes[i]) * s) * gdec; break;
        case BlockScheme::mxfp4: out[i] = e2m1_value(q.codes[i]) * s; break;
        case BlockScheme::fp8_block:
          out[i] = static_cast<float>(decode_float(kFp8E4M3, q.codes[i])) * s;
          break;
      }
    }
  }
}

}  // namespace mixp
