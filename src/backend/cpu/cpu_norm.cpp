// CpuBackend normalisations: LayerNorm over the last dims (and its 16-bit saved xhat), RMSNorm and
// BatchNorm over [N, C, S], fp32 contiguous fast paths on the tiered row kernels (vec_kernels.h)
// and row loops; other layouts fall through to the ref kernels (src/backend/ref/ref_norm.cpp,
// ref_reduce.cpp). The scalar math is backend/math/norm_math.h.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/cpu_layout.h"
#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/vec_kernels.h"
#include "backend/kernel_util.h"
#include "backend/math/norm_math.h"
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

// LayerNorm's backward from the 16-bit xhat in one parallel region: each thread widens its rows
// of a block, runs layer_norm_bwd_rows on them (mean 0, rstd 1) and scales them by rstd, exactly
// as the default's blocks of layer_norm_backward (backend.cpp) split them between threads; the
// per-block, per-thread dw/db partials are then summed in the default's order (per block over
// threads from 0, then the blocks in order), so the bits are the same for the same thread count.
// The default's 4 kernel calls (and parallel regions) per block of 85 rows at GPT-2's width
// become one region for all rows.
void CpuBackend::layer_norm_backward_xhat(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                          const Tensor& xhat, const Tensor& w,
                                          const Tensor& rstd) {
  if (!(f32c(dx) && f32c(dw) && f32c(db) && f32c(dy) && f32c(w) && f32c(rstd)) ||
      !xhat.is_contiguous() || (xhat.dtype() != DType::bf16 && xhat.dtype() != DType::fp16)) {
    return RefBackend::layer_norm_backward_xhat(dx, dw, db, dy, xhat, w, rstd);
  }
  const int64_t rows = rstd.numel(), n = rows ? xhat.numel() / rows : 0;
  if (rows == 0) return Backend::layer_norm_backward_xhat(dx, dw, db, dy, xhat, w, rstd);
  const int64_t block = layer_norm_xhat_block(rows, n), nblocks = (rows + block - 1) / block;
  const int max_t = omp_get_max_threads();
  const bool want_w = dw.defined(), want_b = db.defined();
  // part[(blk * max_t + t) * 2 + which][n]: thread t's dw (0) / db (1) over its rows of block blk.
  std::vector<float> part(static_cast<size_t>(nblocks * max_t * 2 * n), 0.0f);
  // Threads of each block, as parallel_for decides for the default's block.
  auto block_threads = [&](int64_t nr) {
    return nr > 1 && cpu::parallel_worth(nr * n * 4) ? max_t : 1;
  };
  bool any_parallel = false;
  for (int64_t blk = 0; blk < nblocks; ++blk)
    any_parallel = any_parallel || block_threads(std::min(block, rows - blk * block)) > 1;
  const auto& k = vec::kernels();
  const float* dyp = fp(dy);
  const float* wp = fp(w);
  const float* rp = fp(rstd);
  float* dxp = fp(dx);
  const bool bf = xhat.dtype() == DType::bf16;
  const auto* xb = static_cast<const uint16_t*>(xhat.data_ptr());
  const std::vector<float> zero(static_cast<size_t>(block), 0.0f),
      one(static_cast<size_t>(block), 1.0f);
#pragma omp parallel if (any_parallel)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    std::vector<float> xh;
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t r0 = blk * block, nr = std::min(block, rows - r0);
      int64_t lo = 0, hi = 0;
      if (block_threads(nr) > 1 && nt > 1) {
        const int64_t chunk = (nr + nt - 1) / nt;
        lo = std::min<int64_t>(nr, t * chunk);
        hi = std::min<int64_t>(nr, lo + chunk);
      } else if (t == 0) {
        hi = nr;
      }
      if (lo >= hi) continue;
      const int64_t m = hi - lo, a = r0 + lo;
      xh.resize(static_cast<size_t>(m * n));
      // Widening: exact (bf16 is the top half of an fp32; fp16 through the bulk converter).
      if (bf) {
        const uint16_t* src = xb + a * n;
#pragma omp simd
        for (int64_t i = 0; i < m * n; ++i)
          xh[static_cast<size_t>(i)] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
      } else {
        convert_to_f32(DType::fp16, xb + a * n, std::span<float>(xh.data(), xh.size()));
      }
      const size_t slot = static_cast<size_t>((blk * max_t + t) * 2);
      float* pw = want_w ? part.data() + slot * n : nullptr;
      float* pb = want_b ? part.data() + (slot + 1) * n : nullptr;
      k.layer_norm_bwd_rows(dxp + a * n, pw, pb, dyp + a * n, xh.data(), wp, zero.data(),
                            one.data(), m, n);
      for (int64_t r = 0; r < m; ++r) {
        float* row = dxp + (a + r) * n;
        const float rs = rp[a + r];
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) row[i] = rs * row[i];
      }
    }
  }
  for (int which = 0; which < 2; ++which) {
    Tensor& out = which == 0 ? dw : db;
    if (!out.defined()) continue;
    float* o = fp(out);
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int used = block_threads(std::min(block, rows - blk * block));
      for (int64_t i = 0; i < n; ++i) {
        float s = 0.0f;
        for (int t = 0; t < used; ++t)
          s += part[(static_cast<size_t>(blk * max_t + t) * 2 + which) * n + i];
        o[i] = blk == 0 ? s : o[i] + s;
      }
    }
  }
}

// ---- LayerNorm's 16-bit saved xhat (ops/layer_norm_saved.h): a row loop whose rounding is the
// bulk converter's; the ref backend's element loop (ref_norm.cpp) is its oracle in tests/backend.
namespace {
constexpr int64_t kParallelRows = 64;  // below this a row loop is cheaper than waking threads
}  // namespace

void CpuBackend::layer_norm_xhat(Tensor& out, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd) {
  if (!x.is_contiguous() || !out.is_contiguous())
    throw std::logic_error("mixp: layer_norm_xhat needs contiguous src and dst");
  const DType low = out.dtype();
  const int64_t rows = mean.numel(), n = rows ? x.numel() / rows : 0;
  const float* xp = x.data<float>();
  const float* mp = mean.data<float>();
  const float* rp = rstd.data<float>();
  auto* ob = static_cast<unsigned char*>(out.data_ptr());
  const size_t es = out.element_size();
  const ConvertOptions rne{.round = Round::nearest_even, .overflow = Overflow::ieee};
#pragma omp parallel if (rows >= kParallelRows)
  {
    std::vector<float> row(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = xp + r * n;
      const float m = mp[r], rs = rp[r];
      for (int64_t i = 0; i < n; ++i)
        row[static_cast<size_t>(i)] = kern::layer_norm_xhat(xr[i], m, rs);
      convert_f32_to(low, row, ob + static_cast<size_t>(r * n) * es, rne);
    }
  }
}


// ---- RMSNorm: fp32 contiguous row loops split over OpenMP threads, written so the compiler
// vectorizes the inner loops. The per-row sum of squares (row_dot(x, x)) is accumulated in fp32 in
// 8 lanes (as the vector kernels of vec_kernels.h do for LayerNorm).
namespace {
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
      const float rs = kern::norm_rstd(row_dot(x, x, n) / static_cast<float>(n), e);
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
