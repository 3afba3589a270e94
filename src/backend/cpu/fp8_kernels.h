// Internal: the FP8/MX quantize kernels of the amp module, in three tiers
// (docs/architecture.md 6.6): the same source (fp8_kernels.inc) compiled for baseline x86-64, AVX2
// and AVX-512 and picked at run time from simd_tier(). Each kernel is serial over its span;
// fp8_quantize.cpp splits work over threads.
//
// Element rounding (round_fp8 in the .inc), for v = x * scale in fp32: the nearest E4M3/E5M2
// value, ties to even, saturating (|v| above max finite and +-inf give +-max finite; NaN stays
// NaN) -- exactly encode_float(..., Round::nearest_even, Overflow::saturate) followed by
// decode_float, which tests/fp8 checks bit for bit. The result is an fp32 whose low 20 (E4M3) or
// 21 (E5M2) mantissa bits are zero, so its top 16 bits are the same value in bf16: fp8 values are
// exact in bf16 (docs/architecture.md 3.5), which is how the fp8 GEMMs run on the bf16 path.
#pragma once
#include <cstdint>

namespace mixp::cpu::fp8k {

inline constexpr int kMaxColumnBlock = 256;  // mx_cast_bf16_columns' largest block

struct Kernels {
  const char* tier;
  // max |x[i]| over n values; NaN is ignored (as TE's fmaxf-based amax), inf counts.
  float (*amax)(const float* x, int64_t n);
  // out[i] = bf16 bits of round_fp8(x[i] * scale); returns amax of x (as amax()).
  float (*scale_cast_bf16)(const float* x, int64_t n, float scale, bool e5m2, uint16_t* out);
  // MX blocks: `rows` rows of `row_len` values (row stride row_len), blocks of `block` along
  // each row (the last one partial). out = bf16 (nearest even) of the block-dequantized values
  // P_i * 2^shared, the same as mx_fake_quantize (block_mx.h) followed by an fp32 -> bf16
  // conversion.
  void (*mx_cast_bf16)(const float* x, int64_t rows, int64_t row_len, int block, bool e5m2,
                       uint16_t* out);
  // MX blocks down the columns: x [rows, cols] (row stride ld), blocks of `block` (at most
  // kMaxColumnBlock) consecutive rows of each column (the last one partial); out [rows, cols] (row
  // stride ld) = what mx_cast_bf16 gives for the rows of x's transpose, in x's layout.
  void (*mx_cast_bf16_columns)(const float* x, int64_t rows, int64_t cols, int64_t ld, int block,
                               bool e5m2, uint16_t* out);
  // y[i] = act(acc[i] * alpha + bias[i % n]) over rows x n (bias may be null; relu when `relu`).
  void (*epilogue)(float* y, const float* acc, int64_t rows, int64_t n, float alpha,
                   const float* bias, bool relu);
  // out[i] = y[i] > 0 ? g[i] : 0 (relu backward from the saved output).
  void (*relu_mask)(float* out, const float* g, const float* y, int64_t n);
  // x[i] *= alpha.
  void (*scale_inplace)(float* x, int64_t n, float alpha);
};

const Kernels& kernels();
const Kernels& kernels_generic();
const Kernels& kernels_avx2();
const Kernels& kernels_avx512();

}  // namespace mixp::cpu::fp8k
