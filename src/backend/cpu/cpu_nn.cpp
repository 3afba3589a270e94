// CpuBackend kernels for reductions, softmax, norms, losses, dropout and attention (pooling is in
// cpu_pool.cpp): fp32 contiguous fast paths on the tiered row kernels (vec_kernels.h) and OpenMP;
// everything else falls through to the ref kernels.
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
#include "mixp/backend/cpu_features.h"
#include "mixp/format/convert.h"
#include "mixp/tensor/factories.h"

namespace mixp {
using cpu::parallel_for;
using cpu::view_of;

using cpu::f32c;
using cpu::fp;

// Sum / mean of a contiguous bf16/fp16 src into an fp32 dst (a bias gradient of a 16-bit GEMM):
// rows are widened to fp32 in L1-sized pieces and accumulated in fp32, without a widened copy.
void CpuBackend::reduce_narrow_sum(ReduceOp op, Tensor& dst, const Tensor& src) {
  int first = -1, last = -1;
  for (int d = 0; d < src.dim(); ++d) {
    if (dst.shape()[d] != src.shape()[d]) {
      if (first < 0) first = d;
      last = d;
    }
  }
  bool one_block = first >= 0;
  for (int d = first; one_block && d <= last; ++d) one_block = dst.shape()[d] == 1;
  if (!one_block) {
    Tensor s32 = kern::widen(*this, src, DType::fp32);
    return reduce(op, dst, s32);
  }
  int64_t outer = 1, mid = 1, inner = 1;
  for (int d = 0; d < first; ++d) outer *= src.shape()[d];
  for (int d = first; d <= last; ++d) mid *= src.shape()[d];
  for (int d = last + 1; d < src.dim(); ++d) inner *= src.shape()[d];
  const DType sd = src.dtype();
  const uint16_t* x = static_cast<const uint16_t*>(src.data_ptr());
  float* y = fp(dst);
  const float scale = op == ReduceOp::mean ? 1.0f / static_cast<float>(mid) : 1.0f;
  constexpr int64_t kPiece = 1024;
  if (inner == 1) {
    parallel_for(outer, src.numel(), [&](int64_t lo, int64_t hi) {
      alignas(64) float buf[kPiece];
      for (int64_t o = lo; o < hi; ++o) {
        float s = 0.0f;
        for (int64_t m0 = 0; m0 < mid; m0 += kPiece) {
          const int64_t n = std::min(kPiece, mid - m0);
          convert_to_f32(sd, x + o * mid + m0, std::span<float>(buf, static_cast<size_t>(n)));
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < n; ++i) s += buf[i];
        }
        y[o] = s * scale;
      }
    });
    return;
  }
  auto run = [&](int64_t o, int64_t ilo, int64_t ihi) {
    alignas(64) float buf[kPiece];
    float* yo = y + o * inner;
    for (int64_t i0 = ilo; i0 < ihi; i0 += kPiece) {
      const int64_t n = std::min(kPiece, ihi - i0);
      for (int64_t i = 0; i < n; ++i) yo[i0 + i] = 0.0f;
      for (int64_t m = 0; m < mid; ++m) {
        const uint16_t* xr = x + (o * mid + m) * inner + i0;
        if (sd == DType::bf16) {
          // bf16 widens by a shift: inline, instead of a converter call and a second pass per
          // row (the column sums are the bias gradients of every bf16 linear). Same sums.
          float* yr = yo + i0;
#pragma omp simd
          for (int64_t i = 0; i < n; ++i)
            yr[i] += std::bit_cast<float>(static_cast<uint32_t>(xr[i]) << 16);
          continue;
        }
        convert_to_f32(sd, xr, std::span<float>(buf, static_cast<size_t>(n)));
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yo[i0 + i] += buf[i];
      }
      if (scale != 1.0f)
        for (int64_t i = 0; i < n; ++i) yo[i0 + i] *= scale;
    }
  };
  if (outer >= omp_get_max_threads() || !cpu::parallel_worth(src.numel())) {
    parallel_for(outer, src.numel(), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) run(o, 0, inner);
    });
  } else {
    for (int64_t o = 0; o < outer; ++o) {
      parallel_for(inner, src.numel() / outer, [&](int64_t lo, int64_t hi) { run(o, lo, hi); });
    }
  }
}

// ---- reductions: src contiguous, the reduced dims one contiguous block -> [outer, mid, inner].
void CpuBackend::reduce(ReduceOp op, Tensor& dst, const Tensor& src) {
  if (op != ReduceOp::max && f32c(dst) && src.is_contiguous() && kern::is_narrow(src.dtype()) &&
      src.numel() > 0) {
    return reduce_narrow_sum(op, dst, src);
  }
  if (src.dtype() == DType::fp32 && f32c(dst) && src.numel() > 0 && !src.is_contiguous())
    return reduce(op, dst, cpu::dense(*this, src));
  if (!(f32c(dst) && f32c(src)) || src.numel() == 0) return RefBackend::reduce(op, dst, src);
  int first = -1, last = -1;
  for (int d = 0; d < src.dim(); ++d) {
    if (dst.shape()[d] != src.shape()[d]) {
      if (first < 0) first = d;
      last = d;
    }
  }
  if (first < 0) {  // nothing reduced (all reduced dims have size 1)
    if (op == ReduceOp::max || op == ReduceOp::sum || op == ReduceOp::mean) {
      std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
      return;
    }
  }
  for (int d = first; d <= last; ++d) {
    if (dst.shape()[d] != 1) {
      // The reduced dims are not one block (e.g. a bias gradient summed over dims 0 and 2): the
      // kept dims first, the reduced ones last (cpu_layout.h), as one contiguous copy; dst's
      // layout is the same in that order, since the dims that move have size 1 there.
      const Shape perm = cpu::kept_dims_first(src.shape(), dst.shape());
      const Tensor xs = cpu::dense(*this, cpu::permuted_view(src, perm));
      const Shape ds = cpu::permuted_shape(dst.shape(), perm);
      Tensor ys = cpu::view_of(dst, ds, contiguous_strides(ds), dst.storage_offset());
      return reduce(op, ys, xs);
    }
  }
  int64_t outer = 1, mid = 1, inner = 1;
  for (int d = 0; d < first; ++d) outer *= src.shape()[d];
  for (int d = first; d <= last; ++d) mid *= src.shape()[d];
  for (int d = last + 1; d < src.dim(); ++d) inner *= src.shape()[d];
  const float* x = fp(src);
  float* y = fp(dst);
  const float scale = op == ReduceOp::mean ? 1.0f / static_cast<float>(mid) : 1.0f;
  const bool is_max = op == ReduceOp::max;
  if (inner == 1) {
    parallel_for(outer, src.numel(), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const float* r = x + o * mid;
        if (is_max) {
          float m = -std::numeric_limits<float>::infinity();
          bool nan = false;
          for (int64_t i = 0; i < mid; ++i) {
            m = r[i] > m ? r[i] : m;
            nan = nan || std::isnan(r[i]);
          }
          y[o] = nan ? std::numeric_limits<float>::quiet_NaN() : m;
        } else {
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < mid; ++i) s += r[i];
          y[o] = s * scale;
        }
      }
    });
    return;
  }
  // inner > 1: accumulate rows of length `inner`; parallel over outer, or over inner chunks.
  auto run = [&](int64_t o, int64_t ilo, int64_t ihi) {
    float* yo = y + o * inner;
    const float* xo = x + o * mid * inner;
    for (int64_t i = ilo; i < ihi; ++i)
      yo[i] = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
    for (int64_t m = 0; m < mid; ++m) {
      const float* r = xo + m * inner;
      if (is_max) {
        for (int64_t i = ilo; i < ihi; ++i)
          yo[i] = (r[i] > yo[i] || std::isnan(r[i])) ? r[i] : yo[i];
      } else {
#pragma omp simd
        for (int64_t i = ilo; i < ihi; ++i) yo[i] += r[i];
      }
    }
    if (scale != 1.0f)
      for (int64_t i = ilo; i < ihi; ++i) yo[i] *= scale;
  };
  if (outer >= omp_get_max_threads() || !cpu::parallel_worth(src.numel())) {
    parallel_for(outer, src.numel(), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) run(o, 0, inner);
    });
  } else {
    for (int64_t o = 0; o < outer; ++o) {
      parallel_for(inner, src.numel() / outer, [&](int64_t lo, int64_t hi) { run(o, lo, hi); });
    }
  }
}

// ---- max backward: the gradient of each maximum, split evenly between the elements that tie for
// it (PyTorch's amax backward; the ref kernel's rule). The reduced dims are brought last in one
// contiguous copy (cpu_layout.h), so each output is one row of `mid` candidates.
void CpuBackend::reduce_max_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                     const Tensor& dst) {
  if (!(dsrc.dtype() == DType::fp32 && ddst.dtype() == DType::fp32 &&
        src.dtype() == DType::fp32 && f32c(dst)) ||
      src.numel() == 0)
    return RefBackend::reduce_max_backward(dsrc, ddst, src, dst);
  const Shape perm = cpu::kept_dims_first(src.shape(), dst.shape());
  const Tensor x = cpu::dense(*this, cpu::permuted_view(src, perm));
  const Tensor g = cpu::dense(*this, ddst);
  Tensor gv = cpu::permuted_view(dsrc, perm);
  Tensor gi = cpu::dense_out(gv);
  const int64_t outer = dst.numel(), mid = src.numel() / outer;
  const float* xs = fp(x);
  const float* m = fp(dst);
  const float* gs = fp(g);
  float* out = fp(gi);
  parallel_for(outer, src.numel() * 2, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      const float* r = xs + o * mid;
      float* w = out + o * mid;
      int64_t ties = 0;
      for (int64_t i = 0; i < mid; ++i) ties += r[i] == m[o];
      const float share = ties ? gs[o] / static_cast<float>(ties) : 0.0f;
      for (int64_t i = 0; i < mid; ++i) w[i] = r[i] == m[o] ? share : 0.0f;
    }
  });
  cpu::write_back(*this, gv, gi);
}

// ---- embedding: row gathers (memcpy) and a row scatter-add, for contiguous weights/gradients
// (the ref loops index every element through the tensor accessors: ~40x slower on the gpt).
namespace {
bool index_ok(const Tensor& idx) {
  return idx.is_contiguous() && (idx.dtype() == DType::int64 || idx.dtype() == DType::int32);
}
int64_t row_index(const Tensor& idx, int64_t i) {
  return idx.dtype() == DType::int64 ? static_cast<const int64_t*>(idx.data_ptr())[i]
                                     : static_cast<const int32_t*>(idx.data_ptr())[i];
}
}  // namespace

void CpuBackend::embedding(Tensor& dst, const Tensor& weight, const Tensor& indices) {
  if (!(dst.is_contiguous() && weight.is_contiguous() && index_ok(indices) &&
        dst.dtype() == weight.dtype())) {
    return RefBackend::embedding(dst, weight, indices);
  }
  const int64_t V = weight.shape()[0], E = weight.shape()[1], n = indices.numel();
  const size_t row_bytes = static_cast<size_t>(E) * weight.element_size();
  const char* w = static_cast<const char*>(weight.data_ptr());
  char* d = static_cast<char*>(dst.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = row_index(indices, i);
    if (row < 0 || row >= V) {
      throw std::out_of_range("mixp::embedding: index " + std::to_string(row) + " out of [0, " +
                              std::to_string(V) + ")");
    }
    std::memcpy(d + static_cast<size_t>(i) * row_bytes, w + static_cast<size_t>(row) * row_bytes,
                row_bytes);
  }
}

void CpuBackend::embedding_backward(Tensor& dweight, const Tensor& ddst, const Tensor& indices) {
  if (!(f32c(dweight) && f32c(ddst) && index_ok(indices)))
    return RefBackend::embedding_backward(dweight, ddst, indices);
  const int64_t E = dweight.shape()[1], n = indices.numel();
  float* dw = fp(dweight);
  const float* g = fp(ddst);
  // Parallel over column blocks: every thread sees every index, so repeated rows never race.
  parallel_for(E, n * E, [&](int64_t lo, int64_t hi) {
    for (int64_t i = 0; i < n; ++i) {
      float* r = dw + row_index(indices, i) * E;
      const float* s = g + i * E;
#pragma omp simd
      for (int64_t e = lo; e < hi; ++e) r[e] += s[e];
    }
  });
}

// ---- softmax over the last dim
void CpuBackend::softmax(Tensor& dst, const Tensor& src, int dim, bool log) {
  if (dst.dtype() == DType::fp32 && src.dtype() == DType::fp32 && src.numel() > 0 &&
      (dim != src.dim() - 1 || !dst.is_contiguous() || !src.is_contiguous())) {
    // Another dim, or strided operands: that dim moved last in contiguous copies (cpu_layout.h).
    const Shape perm = cpu::dim_last(src.dim(), dim);
    Tensor dv = cpu::permuted_view(dst, perm);
    Tensor y = cpu::dense_out(dv);
    softmax(y, cpu::dense(*this, cpu::permuted_view(src, perm)), src.dim() - 1, log);
    return cpu::write_back(*this, dv, y);
  }
  if (!(f32c(dst) && f32c(src)) || dim != src.dim() - 1)
    return RefBackend::softmax(dst, src, dim, log);
  const int64_t n = src.shape()[dim], rows = n ? src.numel() / n : 0;
  const auto& k = vec::kernels();
  parallel_for(rows, src.numel() * 8, [&](int64_t lo, int64_t hi) {
    k.softmax_rows(fp(dst) + lo * n, fp(src) + lo * n, hi - lo, n, log);
  });
}

void CpuBackend::softmax_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& dst, int dim,
                                  bool log) {
  if (dsrc.dtype() == DType::fp32 && ddst.dtype() == DType::fp32 && dst.dtype() == DType::fp32 &&
      dst.numel() > 0 &&
      (dim != dst.dim() - 1 || !dsrc.is_contiguous() || !ddst.is_contiguous() ||
       !dst.is_contiguous())) {
    const Shape perm = cpu::dim_last(dst.dim(), dim);
    Tensor gv = cpu::permuted_view(dsrc, perm);
    Tensor gi = cpu::dense_out(gv);
    softmax_backward(gi, cpu::dense(*this, cpu::permuted_view(ddst, perm)),
                     cpu::dense(*this, cpu::permuted_view(dst, perm)), dst.dim() - 1, log);
    return cpu::write_back(*this, gv, gi);
  }
  if (!(f32c(dsrc) && f32c(ddst) && f32c(dst)) || dim != dst.dim() - 1)
    return RefBackend::softmax_backward(dsrc, ddst, dst, dim, log);
  const int64_t n = dst.shape()[dim], rows = n ? dst.numel() / n : 0;
  const auto& k = vec::kernels();
  parallel_for(rows, dst.numel() * 4, [&](int64_t lo, int64_t hi) {
    k.softmax_bwd_rows(fp(dsrc) + lo * n, fp(ddst) + lo * n, fp(dst) + lo * n, hi - lo, n, log);
  });
}

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

// ---- dropout
void CpuBackend::dropout(Tensor& dst, const Tensor& src, double p, uint64_t seed) {
  if (!(f32c(dst) && f32c(src))) return RefBackend::dropout(dst, src, p, seed);
  const uint32_t thr = kern::dropout_threshold(p);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const float* x = fp(src);
  float* y = fp(dst);
  parallel_for(src.numel(), src.numel() * 4, [&](int64_t lo, int64_t hi) {
    const uint32_t key = sr_key(seed, static_cast<uint64_t>(lo));
    for (int64_t i = lo; i < hi; ++i) {
      // sr_bits(seed, i) with the key of the chunk's high word (chunks never cross 2^32).
      const uint32_t bits = (static_cast<uint64_t>(i) >> 32) == (static_cast<uint64_t>(lo) >> 32)
                                ? sr_bits_with_key(key, static_cast<uint32_t>(i))
                                : sr_bits(seed, static_cast<uint64_t>(i));
      y[i] = bits >= thr ? x[i] * scale : 0.0f;
    }
  });
}

// ---- cross entropy
namespace {
int64_t class_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::int64 ? static_cast<const int64_t*>(t.data_ptr())[i]
                                   : static_cast<const int32_t*>(t.data_ptr())[i];
}
}  // namespace

void CpuBackend::cross_entropy(Tensor& loss, Tensor& lse, const Tensor& logits,
                               const Tensor& targets) {
  if (!(f32c(loss) && f32c(lse) && f32c(logits)) || !targets.is_contiguous()) {
    return RefBackend::cross_entropy(loss, lse, logits, targets);
  }
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = class_at(targets, n);
    if (t < 0 || t >= C)
      throw std::out_of_range("mixp::cross_entropy: target " + std::to_string(t) + " out of [0, " +
                              std::to_string(C) + ")");
  }
  const auto& k = vec::kernels();
  const float* x = fp(logits);
  // Per-row losses, then one ordered sum: the result does not depend on the thread count.
  std::vector<double> row_loss(static_cast<size_t>(N));
  parallel_for(N, N * C * 8, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float l = k.logsumexp(x + n * C, C);
      fp(lse)[n] = l;
      row_loss[static_cast<size_t>(n)] =
          static_cast<double>(l) - static_cast<double>(x[n * C + class_at(targets, n)]);
    }
  });
  double total = 0;
  for (double v : row_loss) total += v;
  fp(loss)[0] = N ? static_cast<float>(total / static_cast<double>(N)) : 0.0f;
}

void CpuBackend::cross_entropy_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                                        const Tensor& targets, const Tensor& lse) {
  if (!(f32c(dlogits) && f32c(dloss) && f32c(logits) && f32c(lse)) || !targets.is_contiguous()) {
    return RefBackend::cross_entropy_backward(dlogits, dloss, logits, targets, lse);
  }
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  const float g = fp(dloss)[0] / static_cast<float>(N);
  const auto& k = vec::kernels();
  parallel_for(N, N * C * 8, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      float* d = fp(dlogits) + n * C;
      k.exp_shift(d, fp(logits) + n * C, fp(lse)[n], C);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) d[c] *= g;
      d[class_at(targets, n)] -= g;
    }
  });
}

// ---- attention: S = q k^T and P V as batched oneDNN matmuls over [B*H]; softmax rows between.
//
// bf16 q, k, v run natively: the GEMMs take bf16 operands with fp32 accumulation; S, the softmax
// and dS are fp32, and P (and dS) are rounded to bf16 (nearest even) where they become a GEMM
// operand, as in PyTorch's bf16 math attention. fp16 (no native fp16 GEMM here) is widened
// exactly and runs the fp32 path.
namespace {
bool attn_native_bf16(std::initializer_list<const Tensor*> ins,
                      std::initializer_list<const Tensor*> outs) {
  if (!cpu::native_bf16()) return false;
  for (const Tensor* t : ins) {
    if (t->dtype() != DType::bf16 || !t->is_contiguous()) return false;
  }
  for (const Tensor* t : outs) {
    if ((t->dtype() != DType::bf16 && t->dtype() != DType::fp32) || !t->is_contiguous())
      return false;
  }
  return true;
}
// Batch-heads per chunk of the attention kernels: enough that one chunk's [chunk, Tq, Tk] fp32
// score buffer is about 1 MB (2^18 floats; 16 heads at T = 128), at least one.
int64_t attention_chunk(int64_t BH, int64_t Tq, int64_t Tk) {
  const int64_t per_head = std::max<int64_t>(1, Tq * Tk);
  return std::clamp<int64_t>((int64_t{1} << 18) / per_head, 1, std::max<int64_t>(BH, 1));
}
// Rounds n fp32 values (nearest even) into elements [off, off + n) of the bf16 tensor t, with
// the bulk (AVX-512) converter. Callers pass groups of rows (kRowGroup): one call per row of a
// head (128 values) cost more in call overhead than the conversion.
void store_bf16_row(const Tensor& t, int64_t off, const float* src, int64_t n) {
  convert_f32_to(DType::bf16, std::span<const float>(src, static_cast<size_t>(n)),
                 static_cast<uint16_t*>(t.data_ptr()) + off,
                 ConvertOptions{Round::nearest_even, Overflow::ieee});
}
constexpr int64_t kRowGroup = 16;
// One row of n elements of t (fp32 or bf16, contiguous) starting at element off, as fp32.
const float* row_f32(const Tensor& t, int64_t off, int64_t n, float* buf) {
  if (t.dtype() == DType::fp32) return fp(t) + off;
  // bf16 -> fp32 is a shift; inline (rows are one head wide, 64 values: a converter call per
  // row cost more than the conversion).
  const uint16_t* src = static_cast<const uint16_t*>(t.data_ptr()) + off;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    buf[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
  return buf;
}
}  // namespace

void CpuBackend::attention(Tensor& dst, Tensor& lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, bool causal, double scale) {
  const bool bf16 = attn_native_bf16({&q, &k, &v}, {&dst}) && f32c(lse);
  if (!bf16 && kern::any_narrow({&dst, &q, &k, &v})) {  // fp16: widened exactly, computed in fp32
    auto w = [&](const Tensor& t) { return kern::widen(*this, t, DType::fp32); };
    const Tensor q32 = w(q), k32 = w(k), v32 = w(v);
    kern::with_dst_as(*this, dst, DType::fp32, false,
                      [&](Tensor& d) { attention(d, lse, q32, k32, v32, causal, scale); });
    return;
  }
  if (!bf16 && !(f32c(dst) && f32c(lse) && f32c(q) && f32c(k) && f32c(v)))
    return RefBackend::attention(dst, lse, q, k, v, causal, scale);
  const DType gd = bf16 ? DType::bf16 : DType::fp32;
  MatmulConfig cfg;
  cfg.compute = gd;
  const int64_t BH = q.shape()[0] * q.shape()[1], Tq = q.shape()[2], Tk = k.shape()[2],
                D = q.shape()[3];
  const auto& kern = vec::kernels();
  const float sc = static_cast<float>(scale);
  // Batch-heads in chunks, so that the fp32 scores S (and bf16 P) exist for one chunk at a time
  // (about 1 MB) rather than for all B*H heads: the full [B*H, Tq, Tk] buffer was the largest
  // temporary of a transformer step.
  const int64_t chunk = attention_chunk(BH, Tq, Tk);
  Tensor s = empty(Shape{std::min(chunk, BH), Tq, Tk});
  Tensor p16 = bf16 ? Tensor::empty(s.shape(), {.dtype = DType::bf16}) : Tensor();
  for (int64_t h0 = 0; h0 < BH; h0 += chunk) {
    const int64_t nb = std::min(chunk, BH - h0);
    const Tensor sb = nb == s.shape()[0] ? s : view_of(s, Shape{nb, Tq, Tk}, s.strides(), 0);
    const Tensor pb =
        !bf16 || nb == p16.shape()[0] ? p16 : view_of(p16, Shape{nb, Tq, Tk}, p16.strides(), 0);
    const Tensor q3 =
        view_of(q, Shape{nb, Tq, D}, Shape{Tq * D, D, 1}, q.storage_offset() + h0 * Tq * D);
    const Tensor kT =
        view_of(k, Shape{nb, D, Tk}, Shape{Tk * D, 1, D}, k.storage_offset() + h0 * Tk * D);
    const Tensor v3 =
        view_of(v, Shape{nb, Tk, D}, Shape{Tk * D, D, 1}, v.storage_offset() + h0 * Tk * D);
    Tensor sm = sb;
    matmul(sm, q3, kT, Tensor(), cfg);
    parallel_for(nb * Tq, sb.numel() * 8, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t i = r % Tq;
        float* row = fp(sb) + r * Tk;
        const int64_t valid = causal ? std::min(Tk, i + 1 + (Tk - Tq)) : Tk;
#pragma omp simd
        for (int64_t j = 0; j < valid; ++j) row[j] *= sc;
        fp(lse)[h0 * Tq + r] = kern.softmax_inplace_masked(row, valid, Tk);
        // bf16: P rounded by groups of rows while they are in cache (not in a second pass).
        if (bf16 && ((r + 1 - lo) % kRowGroup == 0 || r + 1 == hi)) {
          const int64_t g0 = r + 1 - ((r - lo) % kRowGroup + 1);
          store_bf16_row(pb, g0 * Tk, fp(sb) + g0 * Tk, (r + 1 - g0) * Tk);
        }
      }
    });
    Tensor o3 =
        view_of(dst, Shape{nb, Tq, D}, Shape{Tq * D, D, 1}, dst.storage_offset() + h0 * Tq * D);
    matmul(o3, bf16 ? pb : sb, v3, Tensor(), cfg);
  }
}

void CpuBackend::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& ddst,
                                    const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& dst, const Tensor& lse, bool causal,
                                    double scale) {
  const bool bf16 = attn_native_bf16({&ddst, &q, &k, &v, &dst}, {&dq, &dk, &dv}) && f32c(lse);
  if (!bf16 && kern::any_narrow({&dq, &dk, &dv, &ddst, &q, &k, &v, &dst})) {
    auto w = [&](const Tensor& t) { return kern::widen(*this, t, DType::fp32); };
    const Tensor g = w(ddst), q32 = w(q), k32 = w(k), v32 = w(v), y32 = w(dst);
    kern::with_dst_as(*this, dq, DType::fp32, false, [&](Tensor& a) {
      kern::with_dst_as(*this, dk, DType::fp32, false, [&](Tensor& b) {
        kern::with_dst_as(*this, dv, DType::fp32, false, [&](Tensor& c) {
          attention_backward(a, b, c, g, q32, k32, v32, y32, lse, causal, scale);
        });
      });
    });
    return;
  }
  if (!bf16 && !(f32c(dq) && f32c(dk) && f32c(dv) && f32c(ddst) && f32c(q) && f32c(k) && f32c(v) &&
                 f32c(dst) && f32c(lse))) {
    return RefBackend::attention_backward(dq, dk, dv, ddst, q, k, v, dst, lse, causal, scale);
  }
  const DType gd = bf16 ? DType::bf16 : DType::fp32;
  MatmulConfig cfg;
  cfg.compute = gd;
  const int64_t BH = q.shape()[0] * q.shape()[1], Tq = q.shape()[2], Tk = k.shape()[2],
                D = q.shape()[3];
  const auto& kern = vec::kernels();
  const float sc = static_cast<float>(scale);
  // Batch-heads in chunks, as in the forward: P, dP (fp32) and their bf16 copies exist for one
  // chunk at a time.
  const int64_t chunk = attention_chunk(BH, Tq, Tk);
  const Shape ps{std::min(chunk, BH), Tq, Tk};
  Tensor p = empty(ps), dp = empty(ps);
  Tensor p16 = bf16 ? Tensor::empty(ps, {.dtype = DType::bf16}) : Tensor();
  Tensor ds16 = bf16 ? Tensor::empty(ps, {.dtype = DType::bf16}) : Tensor();
  for (int64_t h0 = 0; h0 < BH; h0 += chunk) {
    const int64_t nb = std::min(chunk, BH - h0);
    auto part = [&](const Tensor& t) {
      return !t.defined() || nb == t.shape()[0]
                 ? t
                 : view_of(t, Shape{nb, Tq, Tk}, t.strides(), t.storage_offset());
    };
    auto v3 = [&](const Tensor& t, int64_t T) {
      return view_of(t, Shape{nb, T, D}, Shape{T * D, D, 1}, t.storage_offset() + h0 * T * D);
    };
    auto v3T = [&](const Tensor& t, int64_t T) {
      return view_of(t, Shape{nb, D, T}, Shape{T * D, 1, D}, t.storage_offset() + h0 * T * D);
    };
    Tensor pb = part(p), dpb = part(dp);
    const Tensor p16b = part(p16), ds16b = part(ds16);
    // Recompute P from the saved log-sum-exp.
    matmul(pb, v3(q, Tq), v3T(k, Tk), Tensor(), cfg);
    // dP = dO V^T
    matmul(dpb, v3(ddst, Tq), v3T(v, Tk), Tensor(), cfg);
    parallel_for(nb * Tq, pb.numel() * 8, [&](int64_t lo, int64_t hi) {
      std::vector<float> bg(static_cast<size_t>(D)), bo(static_cast<size_t>(D));
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t i = r % Tq, rg = h0 * Tq + r;  // row within the chunk, row overall
        float* prow = fp(pb) + r * Tk;
        float* dprow = fp(dpb) + r * Tk;
        const int64_t valid = causal ? std::min(Tk, i + 1 + (Tk - Tq)) : Tk;
#pragma omp simd
        for (int64_t j = 0; j < valid; ++j) prow[j] *= sc;
        kern.exp_shift(prow, prow, fp(lse)[rg], valid);
        for (int64_t j = valid; j < Tk; ++j) prow[j] = 0.0f;
        // delta = sum_d dO O
        const float* go = row_f32(ddst, rg * D, D, bg.data());
        const float* o = row_f32(dst, rg * D, D, bo.data());
        float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
        for (int64_t d = 0; d < D; ++d) delta += go[d] * o[d];
          // dS = P (dP - delta) * scale (into dp)
#pragma omp simd
        for (int64_t j = 0; j < Tk; ++j) dprow[j] = prow[j] * (dprow[j] - delta) * sc;
        if (bf16 && ((r + 1 - lo) % kRowGroup == 0 || r + 1 == hi)) {
          const int64_t g0 = r + 1 - ((r - lo) % kRowGroup + 1);
          store_bf16_row(p16b, g0 * Tk, fp(pb) + g0 * Tk, (r + 1 - g0) * Tk);
          store_bf16_row(ds16b, g0 * Tk, fp(dpb) + g0 * Tk, (r + 1 - g0) * Tk);
        }
      }
    });
    const Tensor pg = bf16 ? p16b : pb, dsg = bf16 ? ds16b : dpb;
    const Tensor pT = view_of(pg, Shape{nb, Tk, Tq}, Shape{Tq * Tk, 1, Tk}, pg.storage_offset());
    const Tensor dsT = view_of(dsg, Shape{nb, Tk, Tq}, Shape{Tq * Tk, 1, Tk}, dsg.storage_offset());
    Tensor dv3 = v3(dv, Tk), dq3 = v3(dq, Tq), dk3 = v3(dk, Tk);
    matmul(dv3, pT, v3(ddst, Tq), Tensor(), cfg);  // dV = P^T dO
    matmul(dq3, dsg, v3(k, Tk), Tensor(), cfg);    // dQ = dS K
    matmul(dk3, dsT, v3(q, Tq), Tensor(), cfg);    // dK = dS^T Q
  }
}

}  // namespace mixp
