// The per-row loops of the block-scaled quantizers (include/mixp/format/block_scaled.h), one
// table per SIMD tier: block_scaled_kernels.inc compiled plainly (block_scaled_kernels_generic.cpp,
// any x86-64) and with the AVX-512 flags (block_scaled_kernels_avx512.cpp), as the convert and FP8
// kernels are. Plain loops the compiler vectorises: every operation is the same IEEE fp32 or
// integer operation as the scalar reference (block_scaled_ref.cpp), so both tiers give the same
// bits (tests/block/test_block_scaled_fast.cpp compares them on every tier).
#pragma once
#include <cstdint>
#include <span>

#include "mixp/format/block_scaled.h"
#include "mixp/format/cpu_features.h"

namespace mixp::detail {

struct BlockKernels {
  // amax[j] = max(amax[j], max |x[j*tw + i]|) over the n values of one row (blocks of tw, the
  // last one partial). NaN is skipped (std::max(m, NaN) keeps m), as in the reference.
  void (*row_amax)(const float* x, int64_t n, int tw, float* amax);
  // max |x| over n values, NaN skipped.
  float (*amax)(const float* x, int64_t n);
  // One row of n values in blocks of tw (a power of two; the last block may be partial), block
  // j scaled by enc[j] with decoding scale s[j]:
  // E2M1 codes of clamp(x[i] * enc, -6, 6), round to nearest even, or stochastic with the bits
  // sr_bits(seed, idx0 + i) when sr. codes may be null; deq (may alias x) gets
  // (e2m1_value(code) * s) * g when not null, deq16 its top 16 bits (the bf16, when exact).
  void (*e2m1)(const float* x, int64_t n, int tw, const float* enc, const float* s, float g,
               bool sr, uint64_t seed, uint64_t idx0, uint8_t* codes, float* deq,
               uint16_t* deq16);
  // E4M3 codes of clamp(x[i] * enc, -448, 448), round to nearest even; deq gets value * s.
  void (*e4m3)(const float* x, int64_t n, int tw, const float* enc, const float* s,
               uint8_t* codes, float* deq, uint16_t* deq16);
  // y[i] = (first ? 0 : y[i]) + p[i] * (sa * sb[i]): one row of fp8_block's per-chunk GEMM
  // epilogue (block_scaled_accumulate).
  void (*scaled_add)(float* y, const float* p, int64_t n, float sa, const float* sb, bool first);
  // d[j * ld + i] = s[i * ls + j] for i, j < 16: one 16 x 16 tile transposed.
  void (*transpose16)(const float* s, int64_t ls, float* d, int64_t ld);
  // The 16-point RHT of groups of 16 values (rht16_rows), ng groups.
  void (*rht16)(float* x, int64_t ng, const float (*t)[16]);
};

const BlockKernels& block_kernels_generic();
const BlockKernels& block_kernels_avx512();
// The table of simd_tier() (scalar and avx2 hosts: the generic table).
const BlockKernels& block_kernels(SimdTier tier);
inline const BlockKernels& block_kernels() { return block_kernels(simd_tier()); }

// Throws std::invalid_argument for a tile shape the scheme does not have, a rounding it does not
// take or x.size() != rows * cols (block_scaled_quantize's contract).
void block_scaled_check(std::span<const float> x, int64_t rows, int64_t cols,
                        const BlockScaledOptions& o);

// block_scaled_quantize / block_scaled_fake_quantize on the given tier's table (the public
// functions use block_kernels(); tests run every tier against the scalar reference).
BlockScaledTensor block_scaled_quantize_with(const BlockKernels& k, std::span<const float> x,
                                             int64_t rows, int64_t cols,
                                             const BlockScaledOptions& opt);
void block_scaled_fake_quantize_with(const BlockKernels& k, std::span<float> x, int64_t rows,
                                     int64_t cols, const BlockScaledOptions& opt);

}  // namespace mixp::detail
