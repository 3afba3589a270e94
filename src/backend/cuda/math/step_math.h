// The element rules of the training-step kernels (cuda_step.cu), the same IEEE operations in the
// same order as the cpu backend's (src/backend/cpu/adam_kernel.cpp, step_optimizer.cpp,
// step_unscale.cpp), so that with FMA contraction off (cmake/MixpCuda.cmake passes --fmad=false)
// a GPU step equals a CPU step bit for bit. tests/cuda/test_cuda_math.cpp checks them against the
// cpu backend's optimizer_update and unscale_check on the CPU.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/math/host_device.h"

namespace mixp::cuda_math {

// UpdateRule::s of Adam/AdamW rounded to fp32 (AdamScalars in src/backend/cpu/adam_kernel.h).
struct AdamF32 {
  float b1, b2, one_m_b1, one_m_b2, eps, l2_wd, decay, neg_step_size, bc2_sqrt;
};

// One Adam/AdamW element: updates w, m, v (adam_f32_generic).
MIXP_HD void adam_element(float& w, float g, float& m, float& v, const AdamF32& s) {
  const float w0 = w;
  const float gi = g + s.l2_wd * w0;
  const float wi = w0 * s.decay;
  const float mi = m * s.b1 + s.one_m_b1 * gi;
  const float vi = v * s.b2 + s.one_m_b2 * (gi * gi);
  m = mi;
  v = vi;
  const float denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
  w = wi + (s.neg_step_size * mi) / denom;
}

struct SgdF32 {
  float lr, wd, mom, damp1;
  bool first, nesterov, has_wd, has_momentum;
};

// One SGD element (step_optimizer.cpp, sgd<float>): buf is ignored without momentum.
MIXP_HD void sgd_element(float& w, float g, float& buf, const SgdF32& s) {
  const float d = s.has_wd ? g + s.wd * w : g;
  if (!s.has_momentum) {
    w = w - s.lr * d;
    return;
  }
  const float b = s.first ? d : buf * s.mom + s.damp1 * d;
  buf = b;
  const float dir = s.nesterov ? d + s.mom * b : b;
  w = w - s.lr * dir;
}

// Kahan-compensated write-back, first half: y = (w_new - p_old) + comp; the value to round is
// p_old + y. Second half after rounding: comp' = y - (p_new - p_old), 0 when not finite.
MIXP_HD float kahan_y(float w_new, float p_old, float comp) {
  return (w_new - p_old) + comp;
}
MIXP_HD float kahan_rem(float y, float p_new, float p_old) {
  const float rem = y - (p_new - p_old);
  return std::isfinite(rem) ? rem : 0.0f;
}

// unscale_check's element: whether g is inf/NaN (checked before the multiply), and g * inv.
MIXP_HD bool non_finite(float g) {
  return !std::isfinite(g);
}

}  // namespace mixp::cuda_math
