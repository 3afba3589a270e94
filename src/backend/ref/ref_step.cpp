// The training-step kernels of the ref backend. They are the host loops the optimizers, the
// gradient norm and GradScaler ran before they moved behind the backend (issue 12), shared with
// the cpu backend (backend/cpu/step_kernels.h): training under MIXP_BACKEND=ref keeps the results
// it had. Their fp32 Adam and sum-of-squares tiers are checked against the scalar loops in
// tests/optim/test_adam_kernel_tiers.cpp; an independent scalar oracle for them is still to write.
#include "backend/cpu/step_kernels.h"
#include "backend/ref/ref_backend.h"

namespace mixp {

void RefBackend::unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale) {
  step_kernels::unscale_check(grad, found_inf, inv_scale);
}
void RefBackend::sum_squares(Tensor& dst, const Tensor& src) {
  step_kernels::sum_squares(dst, src);
}
void RefBackend::optimizer_update(const ParamUpdate& u, const UpdateRule& rule) {
  step_kernels::optimizer_update(u, rule);
}

}  // namespace mixp
