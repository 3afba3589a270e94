// The scalar math of the normalization family (Backend::layer_norm, layer_norm_backward,
// layer_norm_xhat, rms_norm, rms_norm_backward), written once for the ref backend
// (src/backend/ref/ref_norm.cpp: A = double) and the cuda kernels (src/backend/cuda/cuda_norm.cu:
// A = float; MIXP_HD). The cpu backend's vectorised row loops (src/backend/cpu/vec_kernels.inc,
// cpu_norm.cpp) are the family's second and only other form, and take norm_rstd from here.
//
// A row is walked as its caller runs it: the ref's one thread visits j = 0, 1, .., n - 1
// (SerialRow); a cuda block's threads visit j = threadIdx.x, + blockDim.x, .. (RowLoop) and `total`
// sums the threads' partial sums (block_reduce) where the ref's total is the identity. Loads,
// stores and the optional weight and bias are callables, so each backend keeps its own memory
// layout.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/math/host_device.h"

namespace mixp::kern {

// A cuda block's walk (first = threadIdx.x, step = blockDim.x).
struct RowLoop {
  int64_t n, first, step;
};
// The ref's walk: one thread, j = 0, 1, ..; the step known at compile time, so the loops compile
// as plain counted loops.
struct SerialRow {
  int64_t n;
  static constexpr int64_t first = 0, step = 1;
};

struct StdSqrt {
  template <class A>
  MIXP_HD A operator()(A v) const {
    return std::sqrt(v);
  }
};
// 1 / sqrt(mean_square + eps): LayerNorm's rstd (mean_square = the biased variance, as PyTorch's
// layer_norm) and RMSNorm's (the mean of x^2, as Hugging Face's LlamaRMSNorm). The cpu's SIMD
// tiers pass their own sqrt (a lambda, so that each tier instantiates its own copy and no code
// compiled for one tier is linked into another: vec_kernels.inc).
template <class A, class Sqrt = StdSqrt>
MIXP_HD A norm_rstd(A mean_square, A eps, Sqrt sqrt = {}) {
  return A(1) / sqrt(mean_square + eps);
}

// LayerNorm's normalized value, (x - mean) * rstd: the forward's, the backward's and the 16-bit
// save's (layer_norm_xhat).
template <class A>
MIXP_HD A layer_norm_xhat(A x, A mean, A rstd) {
  return (x - mean) * rstd;
}

// y = xhat [* w] [+ b] for row (n = L.n) of a LayerNorm; x(j), w(j), b(j) load (as A), y(j, v)
// stores; mean and rstd get the row's statistics.
template <class Loop, class A, class X, class W, class B, class Y, class Total>
MIXP_HD void layer_norm_row(Loop L, A eps, X x, bool has_w, W w, bool has_b, B b, Y y,
                            Total total, A& mean, A& rstd) {
  A s = 0;
  for (int64_t j = L.first; j < L.n; j += L.step) s += x(j);
  const A m = total(s) / static_cast<A>(L.n);
  A q = 0;
  for (int64_t j = L.first; j < L.n; j += L.step) {
    const A d = x(j) - m;
    q += d * d;
  }
  const A rs = norm_rstd(total(q) / static_cast<A>(L.n), eps);
  for (int64_t j = L.first; j < L.n; j += L.step) {
    A v = layer_norm_xhat(x(j), m, rs);
    if (has_w) v *= w(j);
    if (has_b) v += b(j);
    y(j, v);
  }
  mean = m;
  rstd = rs;
}

// LayerNorm's backward for one row, with dxhat = g [* w]:
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
// and each element's contribution to dweight (g * xhat) and dbias (g) handed to params(j, dw, db)
// (the ref sums them over rows in order; cuda's column kernel sums g * xhat itself).
template <class Loop, class A, class X, class G, class W, class P, class Y, class Total>
MIXP_HD void layer_norm_backward_row(Loop L, A mean, A rstd, X x, G g, bool has_w, W w,
                                     P params, Y dx, Total total) {
  A sum_d = 0, sum_dx = 0;
  for (int64_t j = L.first; j < L.n; j += L.step) {
    const A xhat = layer_norm_xhat(x(j), mean, rstd);
    const A gj = g(j);
    const A d = has_w ? gj * w(j) : gj;
    sum_d += d;
    sum_dx += d * xhat;
    params(j, gj * xhat, gj);
  }
  sum_d = total(sum_d);
  sum_dx = total(sum_dx);
  const A n = static_cast<A>(L.n);
  for (int64_t j = L.first; j < L.n; j += L.step) {
    const A xhat = layer_norm_xhat(x(j), mean, rstd);
    const A gj = g(j);
    const A d = has_w ? gj * w(j) : gj;
    dx(j, rstd * (d - sum_d / n - xhat * sum_dx / n));
  }
}

// RMSNorm (Hugging Face's LlamaRMSNorm): y = x * rstd [* w], rstd = norm_rstd(mean(x^2), eps).
template <class Loop, class A, class X, class W, class Y, class Total>
MIXP_HD void rms_norm_row(Loop L, A eps, X x, bool has_w, W w, Y y, Total total, A& rstd) {
  A ss = 0;
  for (int64_t j = L.first; j < L.n; j += L.step) ss += x(j) * x(j);
  const A rs = norm_rstd(total(ss) / static_cast<A>(L.n), eps);
  for (int64_t j = L.first; j < L.n; j += L.step) {
    A v = x(j) * rs;
    if (has_w) v *= w(j);
    y(j, v);
  }
  rstd = rs;
}

// RMSNorm's backward for one row, with xhat = x * rstd and dxhat = g [* w]:
//   dx = rstd * (dxhat - xhat * mean(dxhat * xhat)); params(j, g * xhat) gets dweight's part.
template <class Loop, class A, class X, class G, class W, class P, class Y, class Total>
MIXP_HD void rms_norm_backward_row(Loop L, A rstd, X x, G g, bool has_w, W w, P params, Y dx,
                                   Total total) {
  A dot = 0;
  for (int64_t j = L.first; j < L.n; j += L.step) {
    const A xhat = x(j) * rstd;
    const A gj = g(j);
    dot += (has_w ? gj * w(j) : gj) * xhat;
    params(j, gj * xhat);
  }
  dot = total(dot) / static_cast<A>(L.n);
  for (int64_t j = L.first; j < L.n; j += L.step) {
    const A xhat = x(j) * rstd;
    const A gj = g(j);
    const A d = has_w ? gj * w(j) : gj;
    dx(j, rstd * (d - xhat * dot));
  }
}

}  // namespace mixp::kern
