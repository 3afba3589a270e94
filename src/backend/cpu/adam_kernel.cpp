// No FMA contraction: every tier must round each multiply and add separately, like the others.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "adam_kernel.h"

#include <cmath>

#include "mixp/format/cpu_features.h"

namespace mixp::step_kernels {

void adam_f32_generic(float* w, const float* g, float* m, float* v, int64_t n,
                      const AdamScalars& s) {
  for (int64_t i = 0; i < n; ++i) {
    const float w0 = w[i];
    const float gi = g[i] + s.l2_wd * w0;
    const float wi = w0 * s.decay;
    const float mi = m[i] * s.b1 + s.one_m_b1 * gi;
    const float vi = v[i] * s.b2 + s.one_m_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
    // addcdiv_(m, denom, value=-step_size) evaluates value * m / denom, left to right.
    w[i] = wi + (s.neg_step_size * mi) / denom;
  }
}

AdamKernelF32 adam_f32_kernel() {
  static const AdamKernelF32 k = by_tier(&adam_f32_avx512, &adam_f32_avx2, &adam_f32_generic);
  return k;
}

}  // namespace mixp::step_kernels
