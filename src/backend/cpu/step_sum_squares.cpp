// The fp64 sum of squares of the gradient norm (step_kernels.h), moved from optim/clip_grad.cpp.
#include <omp.h>

#include <algorithm>
#include <stdexcept>

#include "backend/cpu/step_kernels.h"
#include "backend/cpu/sum_squares_kernel.h"
#include "mixp/format/cpu_features.h"

namespace mixp::step_kernels {

namespace {

// The same grain as the optimizer's loops (step_optimizer.cpp).
constexpr int64_t kParallelGrain = 1 << 15;

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
  static const Kernel k = by_tier<Kernel>(&sum_squares_f32_avx512, &sum_squares_serial<float>,
                                          &sum_squares_serial<float>);
  return k(g, n);
}

template <class T>
double sum_squares_of(const T* g, int64_t n) {
  if (n < kParallelGrain || omp_get_max_threads() == 1) return sum_squares_serial(g, n);
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

void sum_squares(Tensor& dst, const Tensor& src) {
  if (dst.dtype() != DType::fp64 || dst.numel() != 1 || !src.is_contiguous())
    throw std::logic_error("mixp: sum_squares needs an fp64 scalar dst and a contiguous src");
  double total = 0.0;
  if (src.dtype() == DType::fp32) {
    total = sum_squares_of(src.data<float>(), src.numel());
  } else if (src.dtype() == DType::fp64) {
    total = sum_squares_of(src.data<double>(), src.numel());
  } else {
    throw std::logic_error("mixp: sum_squares of fp32 or fp64 only");
  }
  *dst.data<double>() = total;
}

}  // namespace mixp::step_kernels
