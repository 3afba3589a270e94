// The cpu backend's training-step kernels: the tiered loops of step_kernels.h (step_*.cpp).
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/step_kernels.h"

namespace mixp {

void CpuBackend::unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale) {
  step_kernels::unscale_check(grad, found_inf, inv_scale);
}
void CpuBackend::sum_squares(Tensor& dst, const Tensor& src) {
  step_kernels::sum_squares(dst, src);
}
void CpuBackend::optimizer_update(const ParamUpdate& u, const UpdateRule& rule) {
  step_kernels::optimizer_update(u, rule);
}

}  // namespace mixp
