// Internal: the fp32 Adam/AdamW element update in three tiers (docs/architecture.md 6.6): a scalar
// generic loop, AVX2 and AVX-512 (adam_kernel_avx2.cpp / _avx512.cpp, compiled with those flags),
// chosen once from simd_tier(). Why tiers: with errno-setting sqrt (the build does not pass
// -fno-math-errno) GCC refuses to vectorize the loop, and the scalar sqrt + div make Adam compute
// bound (~8 ns/element). All tiers do the same IEEE operations in the same order, without FMA
// contraction, so they agree bit for bit (checked by tests/optim).
//
// Per element, with the scalars of one step (see adam.h for the formula):
//   g' = g + l2_wd * w          (Adam's L2 term; l2_wd = 0 for AdamW)
//   w' = w * decay              (AdamW's decoupled decay; decay = 1 for Adam)
//   m  = m * b1 + one_m_b1 * g'
//   v  = v * b2 + one_m_b2 * (g' * g')
//   w  = w' + (neg_step_size * m) / (sqrt(v) / bc2_sqrt + eps)
#pragma once
#include <cstdint>

namespace mixp::step_kernels {

struct AdamScalars {
  float b1, b2, one_m_b1, one_m_b2, eps, l2_wd, decay, neg_step_size, bc2_sqrt;
};

using AdamKernelF32 = void (*)(float* w, const float* g, float* m, float* v, int64_t n,
                               const AdamScalars& s);

void adam_f32_generic(float* w, const float* g, float* m, float* v, int64_t n,
                      const AdamScalars& s);
void adam_f32_avx2(float* w, const float* g, float* m, float* v, int64_t n, const AdamScalars& s);
void adam_f32_avx512(float* w, const float* g, float* m, float* v, int64_t n, const AdamScalars& s);

// The tier for this CPU (MIXP_CPU_TIER caps it, as for the backend's kernels).
AdamKernelF32 adam_f32_kernel();

}  // namespace mixp::step_kernels
