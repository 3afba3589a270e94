#include "mixp/optim/clip_grad.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/optim/step_reductions.h"
#include "mixp/tensor/factories.h"

namespace mixp::optim {

// The sum of the squares of p's gradient in fp64, by the gradient's backend (sum_squares).
double grad_sum_squares(const Tensor& p) {
  const Tensor g0 = p.grad();
  if (!g0.defined()) return 0.0;
  NoGradGuard ng;
  // Other dtypes/layouts: widen once (rare; gradients are fp32/fp64 leaves).
  const bool direct =
      g0.is_contiguous() && (g0.dtype() == DType::fp32 || g0.dtype() == DType::fp64);
  const Tensor g = direct ? g0 : g0.to(DType::fp64).contiguous();
  Tensor sq = empty({}, {.dtype = DType::fp64, .device = g.device()});
  backend_for(sq, g).sum_squares(sq, g);
  return sq.item();
}

namespace {

// The sum over every gradient, reduced as a named step value (step_reductions.h).
template <class Get>
double global_sum_squares(size_t count, Get get) {
  double sq = 0.0;
  for (size_t i = 0; i < count; ++i) sq += grad_sum_squares(get(i));
  reduce_step_values(StepValue::grad_sum_squares, std::span<double>(&sq, 1));
  return sq;
}

void check_max_norm(double max_norm) {
  if (!(max_norm > 0.0))
    throw std::invalid_argument(
        fmt::format("mixp::optim::clip_grad_norm: max_norm must be > 0, got {}", max_norm));
}

// Scales every gradient by max_norm / (total + eps) when that is below 1 (PyTorch's rule).
template <class Get>
void scale_to_norm(size_t count, Get get, double total, double max_norm) {
  if (!std::isfinite(total)) return;
  const double coef = max_norm / (total + 1e-6);  // PyTorch's epsilon
  if (coef < 1.0) {
    NoGradGuard ng;
    for (size_t i = 0; i < count; ++i) {
      Tensor g = get(i).grad();
      if (g.defined()) g.mul_(coef);
    }
  }
}

template <class Get>
double clip_impl(size_t count, Get get, double max_norm) {
  check_max_norm(max_norm);
  const double total = std::sqrt(global_sum_squares(count, get));
  scale_to_norm(count, get, total, max_norm);
  return total;
}

}  // namespace

double grad_norm(std::span<const Tensor> params) {
  return std::sqrt(
      global_sum_squares(params.size(), [&](size_t i) -> const Tensor& { return params[i]; }));
}

double grad_norm(std::span<const std::pair<std::string, Tensor>> named_params) {
  return std::sqrt(global_sum_squares(
      named_params.size(), [&](size_t i) -> const Tensor& { return named_params[i].second; }));
}

double clip_grad_norm(std::span<const Tensor> params, double max_norm) {
  return clip_impl(
      params.size(), [&](size_t i) -> const Tensor& { return params[i]; }, max_norm);
}

double clip_grad_norm(std::span<const std::pair<std::string, Tensor>> named_params,
                      double max_norm) {
  return clip_impl(
      named_params.size(), [&](size_t i) -> const Tensor& { return named_params[i].second; },
      max_norm);
}

void clip_grads_by_norm(std::span<const Tensor> params, double total, double max_norm) {
  check_max_norm(max_norm);
  scale_to_norm(
      params.size(), [&](size_t i) -> const Tensor& { return params[i]; }, total, max_norm);
}

}  // namespace mixp::optim
