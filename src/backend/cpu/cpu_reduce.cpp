// CpuBackend reductions and softmax: sum/mean/max over a contiguous block of dims (scattered dims
// are brought together first, cpu_layout.h), the 16-bit sums of bias gradients, max backward,
// and softmax / log-softmax over any dim (moved last in a contiguous copy when it is not).
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

namespace {
// Runs run(o, lo, hi) over the outputs [outer, inner] of a reduction touching `work` elements:
// whole rows per thread when there are enough of them (or too little work to split), else each
// row split across the threads.
template <class F>
void parallel_rows(int64_t outer, int64_t inner, int64_t work, F&& run) {
  if (outer >= omp_get_max_threads() || !cpu::parallel_worth(work)) {
    parallel_for(outer, work, [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) run(o, 0, inner);
    });
  } else {
    for (int64_t o = 0; o < outer; ++o) {
      parallel_for(inner, work / outer, [&](int64_t lo, int64_t hi) { run(o, lo, hi); });
    }
  }
}
}  // namespace

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
  parallel_rows(outer, inner, src.numel(), run);
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
  parallel_rows(outer, inner, src.numel(), run);
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

}  // namespace mixp
