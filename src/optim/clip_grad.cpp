#include "mixp/optim/clip_grad.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/cpu_features.h"
#include "parallel_loop.h"
#include "sum_squares_kernel.h"

namespace mixp::optim {

namespace {

// Sum of squares in fp64 over [0, n) with kLanes independent partial sums: a single (vector)
// accumulator makes the loop wait on the add latency at every step (this file is compiled for
// baseline x86-64, two doubles per SSE2 register); sixteen lanes give the vectorizer eight
// independent chains. Deterministic for a given n (the lanes are summed in a fixed order).
template <class T>
double sum_squares_serial(const T* g, int64_t n) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double v = static_cast<double>(g[i + j]);
      acc[j] += v * v;
    }
  }
  double total = 0.0;
  for (; i < n; ++i) total += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  for (int j = 0; j < kLanes; ++j) total += acc[j];
  return total;
}

double sum_squares_serial(const float* g, int64_t n) {
  using Kernel = double (*)(const float*, int64_t);
  static const Kernel k = by_tier<Kernel>(&detail::sum_squares_f32_avx512,
                                          &sum_squares_serial<float>, &sum_squares_serial<float>);
  return k(g, n);
}

template <class T>
double sum_squares(const T* g, int64_t n) {
  if (n < kOptimParallelGrain || omp_get_max_threads() == 1) return sum_squares_serial(g, n);
  double total = 0.0;
#pragma omp parallel reduction(+ : total)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t lo = std::min<int64_t>(n, t * chunk), hi = std::min<int64_t>(n, lo + chunk);
    if (lo < hi) total += sum_squares_serial(g + lo, hi - lo);
  }
  return total;
}

}  // namespace

double grad_sum_squares(const Tensor& p) {
  const Tensor g0 = p.grad();
  if (!g0.defined()) return 0.0;
  if (g0.is_contiguous() && g0.dtype() == DType::fp32)
    return sum_squares(g0.data<float>(), g0.numel());
  if (g0.is_contiguous() && g0.dtype() == DType::fp64)
    return sum_squares(g0.data<double>(), g0.numel());
  NoGradGuard ng;  // other dtypes/layouts: widen once (rare; gradients are fp32/fp64 leaves)
  const Tensor g = g0.to(DType::fp64).contiguous();
  return sum_squares(g.data<double>(), g.numel());
}

namespace {

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
  double sq = 0.0;
  for (size_t i = 0; i < count; ++i) sq += grad_sum_squares(get(i));
  const double total = std::sqrt(sq);
  scale_to_norm(count, get, total, max_norm);
  return total;
}

}  // namespace

double grad_norm(std::span<const Tensor> params) {
  double sq = 0.0;
  for (const Tensor& p : params) sq += grad_sum_squares(p);
  return std::sqrt(sq);
}

double grad_norm(std::span<const std::pair<std::string, Tensor>> named_params) {
  double sq = 0.0;
  for (const auto& [name, p] : named_params) sq += grad_sum_squares(p);
  return std::sqrt(sq);
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
