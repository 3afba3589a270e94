// Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_, norm_type 2):
//   total = sqrt(sum over parameters p with a gradient of sum(p.grad^2))
//   if total > max_norm: every gradient *= max_norm / (total + 1e-6)
// Returns `total` before clipping. A non-finite total (inf/NaN) is returned as is and nothing is
// scaled, so the caller (a loss scaler or the NaN guard) decides what to do with the step.
// Squares are summed in double, so the norm does not overflow for fp32 gradients.
// Parameters without a gradient are skipped.
#pragma once
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mixp/tensor/tensor.h"

namespace mixp::optim {

// The global L2 norm of the parameters' gradients (no clipping).
double grad_norm(std::span<const Tensor> params);
double grad_norm(std::span<const std::pair<std::string, Tensor>> named_params);

// max_norm must be > 0 (std::invalid_argument otherwise).
double clip_grad_norm(std::span<const Tensor> params, double max_norm);
double clip_grad_norm(std::span<const std::pair<std::string, Tensor>> named_params,
                      double max_norm);

// Sharded gradients (ZeRO, train/data_parallel.h): each rank holds the gradients of the
// parameters it owns. grad_sum_squares is one parameter's term of the norm (0 without a
// gradient); grad_norm is sqrt of these terms summed in parameter order from 0, so a caller that
// collects every rank's terms (zeros for the parameters it does not own: x + 0 is exact) and sums
// them in that order gets the unsharded norm bit for bit. clip_grads_by_norm then scales this
// rank's gradients as clip_grad_norm would for that total (nothing when it is not finite).
double grad_sum_squares(const Tensor& param);
void clip_grads_by_norm(std::span<const Tensor> params, double total, double max_norm);

}  // namespace mixp::optim
