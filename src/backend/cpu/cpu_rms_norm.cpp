// CpuBackend's RMSNorm and rotary embedding (backend.h): fp32 contiguous row loops split over
// OpenMP threads, written so the compiler vectorizes the inner loops; fp64 and other layouts fall
// through to the ref kernels (src/backend/ref/ref_rms_norm.cpp). The per-row sum of squares is
// accumulated in fp32 in 8 lanes (as the vector kernels of vec_kernels.h do for LayerNorm).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_parallel.h"

namespace mixp {
using cpu::f32c;
using cpu::fp;
using cpu::parallel_for;

namespace {
float row_sum_squares(const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += x[j + l] * x[j + l];
  float s = 0;
  for (; j < n; ++j) s += x[j] * x[j];
  for (int l = 0; l < 8; ++l) s += acc[l];
  return s;
}
float row_dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[j + l] * b[j + l];
  float s = 0;
  for (; j < n; ++j) s += a[j] * b[j];
  for (int l = 0; l < 8; ++l) s += acc[l];
  return s;
}
}  // namespace

void CpuBackend::rms_norm(Tensor& dst, Tensor& rstd, const Tensor& src, const Tensor& weight,
                          double eps) {
  if (!(f32c(dst) && f32c(rstd) && f32c(src) && f32c(weight))) {
    return RefBackend::rms_norm(dst, rstd, src, weight, eps);
  }
  const int64_t rows = rstd.numel(), n = rows ? src.numel() / rows : 0;
  const float* s = fp(src);
  const float* w = fp(weight);
  float* d = fp(dst);
  float* rp = fp(rstd);
  const float e = static_cast<float>(eps);
  parallel_for(rows, src.numel() * 3, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* x = s + r * n;
      float* y = d + r * n;
      const float rs = 1.0f / std::sqrt(row_sum_squares(x, n) / static_cast<float>(n) + e);
      rp[r] = rs;
      if (w) {
        for (int64_t j = 0; j < n; ++j) y[j] = x[j] * rs * w[j];
      } else {
        for (int64_t j = 0; j < n; ++j) y[j] = x[j] * rs;
      }
    }
  });
}

void CpuBackend::rms_norm_backward(Tensor& dsrc, Tensor& dweight, const Tensor& ddst,
                                   const Tensor& src, const Tensor& weight, const Tensor& rstd) {
  if (!(f32c(dsrc) && f32c(dweight) && f32c(ddst) && f32c(src) && f32c(weight) && f32c(rstd))) {
    return RefBackend::rms_norm_backward(dsrc, dweight, ddst, src, weight, rstd);
  }
  const int64_t rows = rstd.numel(), n = rows ? src.numel() / rows : 0;
  const int nt = cpu::parallel_worth(src.numel() * 4) ? omp_get_max_threads() : 1;
  // Per-thread partial dweight, summed in thread order (deterministic for a thread count).
  const bool want_w = dweight.defined();
  std::vector<float> part(want_w ? static_cast<size_t>(nt * n) : 0, 0.0f);
  const float* s = fp(src);
  const float* g = fp(ddst);
  const float* w = fp(weight);
  const float* rp = fp(rstd);
  float* dx = fp(dsrc);
  parallel_for(rows, src.numel() * 4, [&](int64_t lo, int64_t hi) {
    float* pw = want_w ? part.data() + static_cast<size_t>(omp_get_thread_num()) * n : nullptr;
    std::vector<float> dxhat(static_cast<size_t>(n));
    for (int64_t r = lo; r < hi; ++r) {
      const float* x = s + r * n;
      const float* gr = g + r * n;
      const float rs = rp[r];
      for (int64_t j = 0; j < n; ++j) dxhat[j] = w ? gr[j] * w[j] : gr[j];
      // mean(dxhat * xhat) = rs * dot(dxhat, x) / n
      const float m = rs * row_dot(dxhat.data(), x, n) / static_cast<float>(n);
      const float k = rs * rs * m;
      float* o = dx + r * n;
      for (int64_t j = 0; j < n; ++j) o[j] = rs * dxhat[j] - k * x[j];
      if (pw)
        for (int64_t j = 0; j < n; ++j) pw[j] += gr[j] * x[j] * rs;
    }
  });
  if (want_w) {
    float* o = fp(dweight);
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0;
      for (int t = 0; t < nt; ++t) acc += part[static_cast<size_t>(t * n + j)];
      o[j] = acc;
    }
  }
}

void CpuBackend::rope(Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin,
                      bool inverse) {
  if (!(f32c(dst) && f32c(src) && f32c(cos) && f32c(sin))) {
    return RefBackend::rope(dst, src, cos, sin, inverse);
  }
  const int64_t T = src.size(1), H = src.size(2), D = src.size(3), h = D / 2;
  const int64_t rows = src.numel() / D;
  const float* s = fp(src);
  const float* cp = fp(cos);
  const float* sp = fp(sin);
  float* d = fp(dst);
  const float sg = inverse ? -1.0f : 1.0f;
  parallel_for(rows, src.numel() * 2, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t pos = (r / H) % T;
      const float* c = cp + pos * h;
      const float* sn = sp + pos * h;
      const float* x = s + r * D;
      float* y = d + r * D;
      for (int64_t j = 0; j < h; ++j) {
        const float x1 = x[j], x2 = x[j + h], cj = c[j], sj = sg * sn[j];
        y[j] = x1 * cj - x2 * sj;
        y[j + h] = x2 * cj + x1 * sj;
      }
    }
  });
}

}  // namespace mixp
