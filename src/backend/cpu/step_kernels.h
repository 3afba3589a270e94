// Internal: the training-step kernels of the Backend interface (backend.h, "training-step
// kernels") on host memory: GradScaler's unscale with the inf/NaN check
// (step_unscale.cpp), the fp64 sum of squares of the gradient norm (step_sum_squares.cpp) and
// the fused optimizer updates with master weights, stochastic rounding, Kahan compensation and
// weight-shadow rewrites (step_optimizer.cpp). The loops were moved here unchanged from optim
// and amp (issue 12), so results are bit-identical to before.
#pragma once
#include "mixp/backend/backend.h"

namespace mixp::step_kernels {

void unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale);
void sum_squares(Tensor& dst, const Tensor& src);
void optimizer_update(const ParamUpdate& u, const UpdateRule& rule);

}  // namespace mixp::step_kernels
