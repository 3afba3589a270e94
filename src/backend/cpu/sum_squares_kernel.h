// Internal: sum of squares of fp32 gradients in fp64 (the gradient norm of clip_grad.cpp), in a
// generic tier (clip_grad.cpp, baseline x86-64) and an AVX-512 tier (sum_squares_avx512.cpp),
// chosen from simd_tier(). Every product of two fp32 values is exact in fp64, so the tiers differ
// only in the order of the fp64 additions (last-bit differences of the norm, not more).
#pragma once
#include <cstdint>

namespace mixp::step_kernels {

double sum_squares_f32_avx512(const float* g, int64_t n);

}  // namespace mixp::step_kernels
