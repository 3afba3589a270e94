// CpuBackend normalisations: LayerNorm over the last dims and BatchNorm over [N, C, S], fp32
// contiguous fast paths on the tiered row kernels (vec_kernels.h); other layouts fall through to
// the ref kernels.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/cpu_layout.h"
#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/vec_kernels.h"
#include "backend/kernel_util.h"
#include "backend/narrow.h"
#include "mixp/format/convert.h"
#include "mixp/format/cpu_features.h"
#include "mixp/tensor/factories.h"

namespace mixp {
using cpu::f32c;
using cpu::fp;
using cpu::parallel_for;
using cpu::view_of;

// ---- layer norm
void CpuBackend::layer_norm(Tensor& dst, Tensor& mean, Tensor& rstd, const Tensor& src,
                            const Tensor& weight, const Tensor& bias, double eps) {
  if (!(f32c(dst) && f32c(src) && f32c(weight) && f32c(bias) && f32c(mean) && f32c(rstd))) {
    return RefBackend::layer_norm(dst, mean, rstd, src, weight, bias, eps);
  }
  const int64_t rows = mean.numel(), n = rows ? src.numel() / rows : 0;
  const auto& k = vec::kernels();
  parallel_for(rows, src.numel() * 4, [&](int64_t lo, int64_t hi) {
    k.layer_norm_rows(fp(dst) + lo * n, fp(mean) + lo, fp(rstd) + lo, fp(src) + lo * n, fp(weight),
                      fp(bias), hi - lo, n, static_cast<float>(eps));
  });
}

void CpuBackend::layer_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias,
                                     const Tensor& ddst, const Tensor& src, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd) {
  if (!(f32c(dsrc) && f32c(dweight) && f32c(dbias) && f32c(ddst) && f32c(src) && f32c(weight) &&
        f32c(mean) && f32c(rstd))) {
    return RefBackend::layer_norm_backward(dsrc, dweight, dbias, ddst, src, weight, mean, rstd);
  }
  const int64_t rows = mean.numel(), n = rows ? src.numel() / rows : 0;
  const auto& k = vec::kernels();
  const int nt = cpu::parallel_worth(src.numel() * 4) ? omp_get_max_threads() : 1;
  // Per-thread partial dw/db, summed at the end (deterministic for a fixed thread count).
  std::vector<float> part(static_cast<size_t>(nt) * 2 * static_cast<size_t>(n), 0.0f);
  const bool want_w = dweight.defined(), want_b = dbias.defined();
  parallel_for(rows, src.numel() * 4, [&](int64_t lo, int64_t hi) {
    const int t = omp_get_thread_num();
    float* pw = want_w ? part.data() + static_cast<size_t>(t) * 2 * n : nullptr;
    float* pb = want_b ? part.data() + (static_cast<size_t>(t) * 2 + 1) * n : nullptr;
    k.layer_norm_bwd_rows(fp(dsrc) + lo * n, pw, pb, fp(ddst) + lo * n, fp(src) + lo * n,
                          fp(weight), fp(mean) + lo, fp(rstd) + lo, hi - lo, n);
  });
  for (int which = 0; which < 2; ++which) {
    Tensor& out = which == 0 ? dweight : dbias;
    if (!out.defined()) continue;
    float* o = fp(out);
    for (int64_t i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int t = 0; t < nt; ++t) s += part[(static_cast<size_t>(t) * 2 + which) * n + i];
      o[i] = s;
    }
  }
}

// ---- batch norm over [N, C, S]
void CpuBackend::batch_norm(Tensor& dst, Tensor& save_mean, Tensor& save_invstd,
                            Tensor& running_mean, Tensor& running_var, const Tensor& src,
                            const Tensor& weight, const Tensor& bias, bool training,
                            double momentum, double eps) {
  if (!(f32c(dst) && f32c(src) && f32c(weight) && f32c(bias) && f32c(save_mean) &&
        f32c(save_invstd) && f32c(running_mean) && f32c(running_var))) {
    return RefBackend::batch_norm(dst, save_mean, save_invstd, running_mean, running_var, src,
                                  weight, bias, training, momentum, eps);
  }
  const int64_t N = src.shape()[0], C = src.shape()[1], S = C ? src.numel() / (N * C) : 0;
  const float* x = fp(src);
  float* y = fp(dst);
  const auto& k = vec::kernels();
  parallel_for(C, src.numel() * 3, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      float m, invstd;
      if (training) {
        // Two passes (mean, then centered squares) in fp32 with per-plane partial sums in double.
        double sum = 0;
        for (int64_t n = 0; n < N; ++n) sum += k.sum(x + (n * C + c) * S, S);
        const double cnt = static_cast<double>(N * S);
        const double mean = sum / cnt;
        const float mf = static_cast<float>(mean);
        double sq = 0;
        for (int64_t n = 0; n < N; ++n) sq += k.sum_sq_dev(x + (n * C + c) * S, S, mf);
        const double var = sq / cnt;
        m = mf;
        invstd = static_cast<float>(1.0 / std::sqrt(var + eps));
        fp(save_mean)[c] = m;
        fp(save_invstd)[c] = invstd;
        if (running_mean.defined())
          fp(running_mean)[c] =
              static_cast<float>((1 - momentum) * fp(running_mean)[c] + momentum * mean);
        if (running_var.defined()) {
          const double unbiased = cnt > 1 ? sq / (cnt - 1) : var;
          fp(running_var)[c] =
              static_cast<float>((1 - momentum) * fp(running_var)[c] + momentum * unbiased);
        }
      } else {
        m = fp(running_mean)[c];
        invstd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fp(running_var)[c]) + eps));
      }
      const float a = invstd * (weight.defined() ? fp(weight)[c] : 1.0f);
      const float b = (bias.defined() ? fp(bias)[c] : 0.0f) - m * a;
      for (int64_t n = 0; n < N; ++n) k.affine(y + (n * C + c) * S, x + (n * C + c) * S, S, a, b);
    }
  });
}

void CpuBackend::batch_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias,
                                     const Tensor& ddst, const Tensor& src, const Tensor& weight,
                                     const Tensor& save_mean, const Tensor& save_invstd) {
  if (!(f32c(dsrc) && f32c(dweight) && f32c(dbias) && f32c(ddst) && f32c(src) && f32c(weight) &&
        f32c(save_mean) && f32c(save_invstd))) {
    return RefBackend::batch_norm_backward(dsrc, dweight, dbias, ddst, src, weight, save_mean,
                                           save_invstd);
  }
  const int64_t N = src.shape()[0], C = src.shape()[1], S = C ? src.numel() / (N * C) : 0;
  const float* x = fp(src);
  const float* g = fp(ddst);
  float* gx = fp(dsrc);
  const float cnt = static_cast<float>(N * S);
  const auto& k = vec::kernels();
  parallel_for(C, src.numel() * 4, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const float m = fp(save_mean)[c], is = fp(save_invstd)[c];
      const float w = weight.defined() ? fp(weight)[c] : 1.0f;
      double sg = 0, sgx = 0;
      for (int64_t n = 0; n < N; ++n) {
        float a, b;
        k.sum_g_gx(g + (n * C + c) * S, x + (n * C + c) * S, S, m, &a, &b);
        sg += a;
        sgx += b;
      }
      const float sum_g = static_cast<float>(sg), sum_gxhat = static_cast<float>(sgx) * is;
      const float k1 = w * is, k2 = sum_g / cnt, k3 = sum_gxhat / cnt;
      for (int64_t n = 0; n < N; ++n)
        k.bn_bwd_apply(gx + (n * C + c) * S, g + (n * C + c) * S, x + (n * C + c) * S, S, m, k1, k2,
                       is * k3);
      if (dweight.defined()) fp(dweight)[c] = sum_gxhat;
      if (dbias.defined()) fp(dbias)[c] = sum_g;
    }
  });
}

}  // namespace mixp
