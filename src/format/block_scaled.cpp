// Block-scaled training quantizers: nvfp4, mxfp4, fp8_block, and the 16-point RHT; the fast path.
// The definitions (and the Transformer Engine references they equal) are in
// include/mixp/format/block_scaled.h. Same bits as the scalar reference (block_scaled_ref.cpp):
// the per-tile scale is the reference's scalar arithmetic, the per-element loops are
// block_scaled_kernels.inc (one table per SIMD tier), and the work is split over tile rows with
// OpenMP (each tile is computed by one thread, from the same inputs, so the split changes no bit).
#include "mixp/format/block_scaled.h"

#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/block_quant_math.h"
#include "format/block_scaled_kernels.h"
#include "mixp/format/float_codec.h"

namespace mixp {

namespace {

constexpr float kE2M1Max = 6.0f;
constexpr float kE4M3Max = 448.0f;
// Below this many elements one thread does it (a parallel region costs microseconds).
constexpr int64_t kParallelWork = int64_t{1} << 15;

// One tile's scale: block_quant_math.h, the arithmetic the CUDA kernels run too.
using block_math::TileScale;
inline TileScale tile_scale_of(const BlockScaledOptions& opt, float vmax, float gdec, float gmult) {
  return block_math::tile_scale(static_cast<int>(opt.scheme), opt.pow2_scales, vmax, gdec, gmult);
}
static_assert(static_cast<int>(BlockScheme::nvfp4) == block_math::kNvfp4 &&
              static_cast<int>(BlockScheme::mxfp4) == block_math::kMxfp4 &&
              static_cast<int>(BlockScheme::fp8_block) == block_math::kFp8Block);

// max |x| over the tensor (NaN skipped), in parallel chunks (max is order-free).
float tensor_amax(const detail::BlockKernels& k, const float* x, int64_t n) {
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t nc = (n + kChunk - 1) / kChunk;
  float m = 0.0f;
#pragma omp parallel for schedule(static) reduction(max : m) if (n >= kParallelWork)
  for (int64_t c = 0; c < nc; ++c)
    m = std::max(m, k.amax(x + c * kChunk, std::min(kChunk, n - c * kChunk)));
  return m;
}

// Where quantize_core writes: codes (may be null), deq (may be null or x itself), and whether deq
// leaves out the per-tensor / per-tile factor (block_scaled_fake_quantize_factors).
struct Sink {
  uint8_t* codes = nullptr;
  float* deq = nullptr;
  uint16_t* deq16 = nullptr;  // the top halves of deq's values (bf16 bits), may be null
  bool unscaled = false;
  uint8_t* scale_codes = nullptr;  // per tile, may be null
  float* scales = nullptr;         // per tile, may be null
};

// Quantizes x (rows x cols) tile row by tile row; returns nvfp4's global amax (else 0).
// columns: tiles of (the scheme's tile width) rows x 1 column instead (blocks along the rows:
// the quantization of x^T along its rows, in x's layout; fp8_block_columns_factors).
float quantize_core(const detail::BlockKernels& k, const float* x, int64_t rows, int64_t cols,
                    const BlockScaledOptions& opt, const Sink& out, bool columns = false) {
  const int th = columns ? block_scaled_tile_cols(opt.scheme) : opt.tile_rows;
  const int tw = columns ? 1 : block_scaled_tile_cols(opt.scheme);
  const int64_t gr = (rows + th - 1) / th, gc = (cols + tw - 1) / tw;
  float amax = 0.0f, gdec = 1.0f, gmult = 1.0f, g = 1.0f;
  if (opt.scheme == BlockScheme::nvfp4) {
    // reference_nvfp4.py's per-tensor scales (see block_scaled_ref.cpp).
    amax = tensor_amax(k, x, rows * cols);
    const block_math::TensorScales ts = block_math::nvfp4_tensor_scales(amax);
    gdec = ts.gdec;
    gmult = ts.gmult;
    if (!out.unscaled) g = ts.g;  // the dequantization's factor
  }
  const bool sr = opt.round == Round::stochastic;
  const bool fp8 = opt.scheme == BlockScheme::fp8_block;
#pragma omp parallel if (rows * cols >= kParallelWork)
  {
    std::vector<float> am(static_cast<size_t>(gc)), enc(am.size()), sc(am.size());
#pragma omp for schedule(static)
    for (int64_t tr = 0; tr < gr; ++tr) {
      const int64_t r0 = tr * th, r1 = std::min(rows, r0 + th);
      std::fill(am.begin(), am.end(), 0.0f);
      for (int64_t r = r0; r < r1; ++r) k.row_amax(x + r * cols, cols, tw, am.data());
      for (int64_t tc = 0; tc < gc; ++tc) {
        const size_t j = static_cast<size_t>(tc);
        const TileScale ts = tile_scale_of(opt, am[j], gdec, gmult);
        enc[j] = ts.enc;
        sc[j] = fp8 && out.unscaled ? 1.0f : ts.s;  // fp8_block's factors: the E4M3 values
        const size_t t = static_cast<size_t>(tr * gc) + j;
        if (out.scales) out.scales[t] = ts.s;
        if (out.scale_codes) out.scale_codes[t] = ts.code;
      }
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t i = r * cols;
        uint8_t* codes = out.codes ? out.codes + i : nullptr;
        float* deq = out.deq ? out.deq + i : nullptr;
        uint16_t* deq16 = out.deq16 ? out.deq16 + i : nullptr;
        if (fp8) {
          k.e4m3(x + i, cols, tw, enc.data(), sc.data(), codes, deq, deq16);
        } else {
          k.e2m1(x + i, cols, tw, enc.data(), sc.data(), g, sr, opt.seed, static_cast<uint64_t>(i),
                 codes, deq, deq16);
        }
      }
    }
  }
  return amax;
}

}  // namespace

namespace detail {

void block_scaled_check(std::span<const float> x, int64_t rows, int64_t cols,
                        const BlockScaledOptions& o) {
  if (rows < 0 || cols < 0 || static_cast<int64_t>(x.size()) != rows * cols)
    throw std::invalid_argument("block_scaled_quantize: " + std::to_string(x.size()) +
                                " values for a " + std::to_string(rows) + "x" +
                                std::to_string(cols) + " tensor");
  const bool ok = (o.scheme == BlockScheme::nvfp4 && (o.tile_rows == 1 || o.tile_rows == 16)) ||
                  (o.scheme == BlockScheme::mxfp4 && o.tile_rows == 1) ||
                  (o.scheme == BlockScheme::fp8_block && (o.tile_rows == 1 || o.tile_rows == 128));
  if (!ok)
    throw std::invalid_argument("block_scaled_quantize: " + std::string(to_string(o.scheme)) +
                                " has no " + std::to_string(o.tile_rows) + "x" +
                                std::to_string(block_scaled_tile_cols(o.scheme)) + " tile");
  if (o.round != Round::nearest_even &&
      !(o.round == Round::stochastic && o.scheme != BlockScheme::fp8_block))
    throw std::invalid_argument("block_scaled_quantize: " + std::string(to_string(o.scheme)) +
                                " rounds nearest-even" +
                                (o.scheme == BlockScheme::fp8_block ? "" : " or stochastic"));
  if (o.pow2_scales && o.scheme != BlockScheme::fp8_block)
    throw std::invalid_argument("block_scaled_quantize: pow2 scales are an fp8_block option");
}

}  // namespace detail

std::string_view to_string(BlockScheme s) {
  switch (s) {
    case BlockScheme::nvfp4: return "nvfp4";
    case BlockScheme::mxfp4: return "mxfp4";
    case BlockScheme::fp8_block: return "fp8-block";
  }
  return "?";
}

int block_scaled_tile_cols(BlockScheme s) {
  switch (s) {
    case BlockScheme::nvfp4: return 16;
    case BlockScheme::mxfp4: return 32;
    case BlockScheme::fp8_block: return 128;
  }
  return 16;
}

float e2m1_value(uint8_t code) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMag[code & 7];
  return (code & 8) ? -m : m;
}

BlockScaledTensor block_scaled_quantize(std::span<const float> x, int64_t rows, int64_t cols,
                                        const BlockScaledOptions& opt) {
  return detail::block_scaled_quantize_with(detail::block_kernels(), x, rows, cols, opt);
}

namespace detail {

BlockScaledTensor block_scaled_quantize_with(const BlockKernels& k, std::span<const float> x,
                                             int64_t rows, int64_t cols,
                                             const BlockScaledOptions& opt) {
  block_scaled_check(x, rows, cols, opt);
  BlockScaledTensor q;
  q.scheme = opt.scheme;
  q.rows = rows;
  q.cols = cols;
  q.tile_rows = opt.tile_rows;
  q.tile_cols = block_scaled_tile_cols(opt.scheme);
  q.codes.resize(x.size());
  q.scales.resize(static_cast<size_t>(q.tile_grid_rows() * q.tile_grid_cols()));
  if (opt.scheme != BlockScheme::fp8_block) q.scale_codes.resize(q.scales.size());
  const float amax =
      quantize_core(k, x.data(), rows, cols, opt,
                    {.codes = q.codes.data(),
                     .scale_codes = q.scale_codes.empty() ? nullptr : q.scale_codes.data(),
                     .scales = q.scales.data()});
  if (opt.scheme == BlockScheme::nvfp4) q.global_amax = amax;
  return q;
}

void block_scaled_fake_quantize_with(const BlockKernels& k, std::span<float> x, int64_t rows,
                                     int64_t cols, const BlockScaledOptions& opt) {
  block_scaled_check(x, rows, cols, opt);
  // Fused: the dequantized value is written in place of each element; no codes are kept.
  (void)quantize_core(k, x.data(), rows, cols, opt, {.deq = x.data()});
}

}  // namespace detail

void block_scaled_dequantize(const BlockScaledTensor& q, std::span<float> out) {
  if (static_cast<int64_t>(out.size()) != q.rows * q.cols)
    throw std::invalid_argument("block_scaled_dequantize: output holds " +
                                std::to_string(out.size()) + " values, the tensor " +
                                std::to_string(q.rows * q.cols));
  // The element values by code (exact), then the reference's products in its order.
  float lut[256];
  for (int c = 0; c < 256; ++c)
    lut[c] = q.scheme == BlockScheme::fp8_block
                 ? static_cast<float>(decode_float(kFp8E4M3, static_cast<uint32_t>(c)))
                 : e2m1_value(static_cast<uint8_t>(c));
  const int64_t gc = q.tile_grid_cols(), cols = q.cols;
  const float gdec = q.global_amax / (kE4M3Max * kE2M1Max);
  const bool nv = q.scheme == BlockScheme::nvfp4;
#pragma omp parallel for schedule(static) if (q.rows * q.cols >= kParallelWork)
  for (int64_t r = 0; r < q.rows; ++r) {
    const float* srow = q.scales.data() + (r / q.tile_rows) * gc;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const float v = lut[q.codes[i]] * srow[c / q.tile_cols];
      out[i] = nv ? v * gdec : v;
    }
  }
}

void block_scaled_fake_quantize(std::span<float> x, int64_t rows, int64_t cols,
                                const BlockScaledOptions& opt) {
  detail::block_scaled_fake_quantize_with(detail::block_kernels(), x, rows, cols, opt);
}

namespace {

BlockScaledFactors factors(std::span<const float> x, int64_t rows, int64_t cols,
                           const BlockScaledOptions& opt, size_t out_size, float* out,
                           uint16_t* out16) {
  detail::block_scaled_check(x, rows, cols, opt);
  if (out_size != x.size())
    throw std::invalid_argument("block_scaled_fake_quantize_factors: output holds " +
                                std::to_string(out_size) + " values, the input " +
                                std::to_string(x.size()));
  BlockScaledFactors f;
  const bool fp8 = opt.scheme == BlockScheme::fp8_block;
  if (fp8) {
    const int th = opt.tile_rows, tw = block_scaled_tile_cols(opt.scheme);
    f.tile_scales.resize(static_cast<size_t>(((rows + th - 1) / th) * ((cols + tw - 1) / tw)));
  }
  const float amax = quantize_core(detail::block_kernels(), x.data(), rows, cols, opt,
                                   {.deq = out, .deq16 = out16, .unscaled = true,
                                    .scales = fp8 ? f.tile_scales.data() : nullptr});
  if (opt.scheme == BlockScheme::nvfp4) f.tensor_scale = block_math::nvfp4_tensor_scales(amax).g;
  return f;
}

}  // namespace

BlockScaledFactors block_scaled_fake_quantize_factors(std::span<const float> x, int64_t rows,
                                                      int64_t cols, const BlockScaledOptions& opt,
                                                      std::span<float> out) {
  return factors(x, rows, cols, opt, out.size(), out.data(), nullptr);
}

BlockScaledFactors block_scaled_fake_quantize_factors(std::span<const float> x, int64_t rows,
                                                      int64_t cols, const BlockScaledOptions& opt,
                                                      std::span<uint16_t> out_bf16) {
  return factors(x, rows, cols, opt, out_bf16.size(), nullptr, out_bf16.data());
}

BlockScaledFactors fp8_block_columns_factors(std::span<const float> x, int64_t rows, int64_t cols,
                                             const BlockScaledOptions& opt,
                                             std::span<uint16_t> out_bf16) {
  if (opt.scheme != BlockScheme::fp8_block || opt.tile_rows != 1)
    throw std::invalid_argument("fp8_block_columns_factors: fp8_block with 1x128 tiles only");
  detail::block_scaled_check(x, rows, cols, opt);
  if (out_bf16.size() != x.size())
    throw std::invalid_argument("fp8_block_columns_factors: output holds " +
                                std::to_string(out_bf16.size()) + " values, the input " +
                                std::to_string(x.size()));
  BlockScaledFactors f;
  f.tile_scales.resize(static_cast<size_t>(((rows + 127) / 128) * cols));
  (void)quantize_core(detail::block_kernels(), x.data(), rows, cols, opt,
                      {.deq16 = out_bf16.data(), .unscaled = true, .scales = f.tile_scales.data()},
                      true);
  return f;
}

void block_scaled_accumulate(std::span<float> y, std::span<const float> partial, int64_t rows,
                             int64_t cols, std::span<const float> row_scale,
                             std::span<const float> col_scale, bool first) {
  if (static_cast<int64_t>(y.size()) != rows * cols || partial.size() != y.size() ||
      static_cast<int64_t>(row_scale.size()) != rows ||
      static_cast<int64_t>(col_scale.size()) != cols)
    throw std::invalid_argument("block_scaled_accumulate: sizes do not match a " +
                                std::to_string(rows) + "x" + std::to_string(cols) + " result");
  const detail::BlockKernels& k = detail::block_kernels();
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t r = 0; r < rows; ++r)
    k.scaled_add(y.data() + r * cols, partial.data() + r * cols, cols,
                 row_scale[static_cast<size_t>(r)], col_scale.data(), first);
}

void block_scaled_columns(std::span<const float> x, int64_t rows, int64_t cols, bool rht,
                          std::span<float> out) {
  const int64_t rp = rht ? (rows + 15) / 16 * 16 : rows;
  if (rows < 0 || cols < 0 || static_cast<int64_t>(x.size()) != rows * cols ||
      static_cast<int64_t>(out.size()) != cols * rp)
    throw std::invalid_argument("block_scaled_columns: " + std::to_string(x.size()) +
                                " values in, " + std::to_string(out.size()) + " out, for a " +
                                std::to_string(rows) + "x" + std::to_string(cols) + " tensor");
  const detail::BlockKernels& k = detail::block_kernels();
  const float* s = x.data();
  float* d = out.data();
  constexpr int64_t kT = 16;  // full 16 x 16 tiles by the kernel, the edges element by element
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t c0 = 0; c0 < cols; c0 += kT) {
    const int64_t c1 = std::min(cols, c0 + kT);
    for (int64_t r0 = 0; r0 < rows; r0 += kT) {
      const int64_t r1 = std::min(rows, r0 + kT);
      if (c1 - c0 == kT && r1 - r0 == kT) {
        k.transpose16(s + r0 * cols + c0, cols, d + c0 * rp + r0, rp);
      } else {
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = r0; r < r1; ++r) d[c * rp + r] = s[r * cols + c];
      }
    }
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t r = rows; r < rp; ++r) d[c * rp + r] = 0.0f;
  }
  if (rht && cols * rp > 0) rht16_rows(out, cols, rp);
}

float rht16_sign(int i) { return block_math::rht16_sign(i); }  // TE's get_wgrad_sign_vector()

void rht16_rows(std::span<float> x, int64_t rows, int64_t cols) {
  if (cols % 16 != 0 || static_cast<int64_t>(x.size()) != rows * cols)
    throw std::invalid_argument("rht16_rows: rows of " + std::to_string(cols) +
                                " values; the 16-point transform needs a multiple of 16");
  float t[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      t[i][j] = block_math::rht16_entry(i, j);
  const detail::BlockKernels& k = detail::block_kernels();
  const int64_t ng = static_cast<int64_t>(x.size()) / 16;
  constexpr int64_t kChunk = 1024;  // groups per task
  const int64_t nc = (ng + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelWork)
  for (int64_t c = 0; c < nc; ++c)
    k.rht16(x.data() + c * kChunk * 16, std::min(kChunk, ng - c * kChunk), t);
}

}  // namespace mixp
