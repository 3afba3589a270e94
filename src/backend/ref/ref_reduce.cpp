// Ref backend: reductions, softmax, batch norm, cross entropy (accumulating in double). LayerNorm
// and RMSNorm are ref_norm.cpp.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/kernel_util.h"
#include "backend/narrow.h"
#include "backend/ref/ref_backend.h"
#include "mixp/tensor/element.h"

namespace mixp {
using namespace kern;

namespace {
// dst's strides seen from src's index space: 0 along reduced dims.
Shape reduced_strides(const Tensor& dst, const Tensor& src) {
  Shape s = dst.strides();
  for (int d = 0; d < src.dim(); ++d) {
    if (dst.shape()[d] == 1 && src.shape()[d] != 1) s[d] = 0;
  }
  return s;
}

// Offsets of element j along `dim` for row r of a tensor viewed as [outer, n, inner] around dim.
struct RowView {
  int64_t outer = 1, n = 1, inner = 1;
  RowView(const Shape& shape, int dim) {
    for (int d = 0; d < dim; ++d) outer *= shape[d];
    n = shape[dim];
    for (int d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  }
  int64_t rows() const { return outer * inner; }
};
// The offset of element (row r, position j) in tensor t, row r = (o, i).
int64_t row_offset(const Tensor& t, const RowView& rv, int dim, int64_t r, int64_t j) {
  const int64_t o = r / rv.inner, i = r % rv.inner;
  const int64_t linear = (o * rv.n + j) * rv.inner + i;
  return t.is_contiguous() ? linear : offset_of(t, linear);
}
}  // namespace

void RefBackend::reduce(ReduceOp op, Tensor& dst, const Tensor& src) {
  count_ref_kernel(__func__);
  if (any_narrow({&dst, &src})) {  // 16-bit operands: widened exactly, reduced in fp32's kernel
    const Tensor s = widen(*this, src, DType::fp32);
    with_dst_as(*this, dst, DType::fp32, false, [&](Tensor& d) { reduce(op, d, s); });
    return;
  }
  dispatch_float(dst.dtype(), "reduce", [&](auto t) {
    using T = decltype(t);
    const int64_t n = dst.numel();
    std::vector<double> acc(static_cast<size_t>(n),
                            op == ReduceOp::max ? -std::numeric_limits<double>::infinity() : 0.0);
    const T* s = ptr<T>(src);
    // Index acc through a contiguous map of dst's shape (0 along reduced dims).
    Shape dstrides = contiguous_strides(dst.shape());
    for (int d = 0; d < src.dim(); ++d) {
      if (dst.shape()[d] == 1 && src.shape()[d] != 1) dstrides[d] = 0;
    }
    for_each2(src.shape(), src.strides(), dstrides, [&](int64_t os, int64_t od) {
      const double v = static_cast<double>(s[os]);
      double& a = acc[static_cast<size_t>(od)];
      if (op == ReduceOp::max) {
        if (v > a || std::isnan(v)) a = v;
      } else {
        a += v;
      }
    });
    const double count = n > 0 ? static_cast<double>(src.numel()) / static_cast<double>(n) : 1.0;
    T* d = ptr<T>(dst);
    for (int64_t i = 0; i < n; ++i) {
      const double v =
          op == ReduceOp::mean ? acc[static_cast<size_t>(i)] / count : acc[static_cast<size_t>(i)];
      d[dst.is_contiguous() ? i : offset_of(dst, i)] = static_cast<T>(v);
    }
  });
}

void RefBackend::reduce_max_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                     const Tensor& dst) {
  count_ref_kernel(__func__);
  dispatch_float(dsrc.dtype(), "max backward", [&](auto t) {
    using T = decltype(t);
    const Shape rs_dst = reduced_strides(dst, src);
    const T* s = ptr<T>(src);
    const T* m = ptr<T>(dst);
    const T* g = ptr<T>(ddst);
    std::vector<double> count(static_cast<size_t>(dst.numel()), 0.0);
    Shape cstr = contiguous_strides(dst.shape());
    for (int d = 0; d < src.dim(); ++d) {
      if (dst.shape()[d] == 1 && src.shape()[d] != 1) cstr[d] = 0;
    }
    for_each3(src.shape(), src.strides(), rs_dst, cstr, [&](int64_t os, int64_t om, int64_t oc) {
      if (s[os] == m[om]) count[static_cast<size_t>(oc)] += 1.0;
    });
    T* gi = ptr<T>(dsrc);
    int64_t i = 0;
    for_each3(src.shape(), src.strides(), rs_dst, cstr, [&](int64_t os, int64_t om, int64_t oc) {
      const int64_t og = offset_of(ddst, oc);  // ddst has dst's shape
      gi[dsrc.is_contiguous() ? i : offset_of(dsrc, i)] =
          s[os] == m[om]
              ? static_cast<T>(static_cast<double>(g[og]) / count[static_cast<size_t>(oc)])
              : T(0);
      ++i;
    });
  });
}

void RefBackend::argmax(Tensor& dst, const Tensor& src, int dim) {
  count_ref_kernel(__func__);
  if (dst.dtype() != DType::int64)
    throw std::invalid_argument("ref argmax: dst must be int64, got " +
                                std::string(mixp::name(dst.dtype())));
  // Every dtype through double (exact for floats and for integers below 2^53).
  const RowView rv(src.shape(), dim);
  const void* s = src.data_ptr();
  const DType sd = src.dtype();
  int64_t* d = ptr<int64_t>(dst);
  for (int64_t r = 0; r < rv.rows(); ++r) {
    int64_t best = 0;
    double bv = load_element(s, sd, row_offset(src, rv, dim, r, 0));
    for (int64_t j = 1; j < rv.n; ++j) {
      const double v = load_element(s, sd, row_offset(src, rv, dim, r, j));
      if (std::isnan(bv)) break;  // the first NaN is the maximum
      if (v > bv || std::isnan(v)) {
        bv = v;
        best = j;
      }
    }
    d[dst.is_contiguous() ? r : offset_of(dst, r)] = best;
  }
}

void RefBackend::softmax(Tensor& dst, const Tensor& src, int dim, bool log) {
  count_ref_kernel(__func__);
  dispatch_float(dst.dtype(), "softmax", [&](auto t) {
    using T = decltype(t);
    const RowView rv(src.shape(), dim);
    const T* s = ptr<T>(src);
    T* d = ptr<T>(dst);
    for (int64_t r = 0; r < rv.rows(); ++r) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < rv.n; ++j)
        mx = std::max(mx, static_cast<double>(s[row_offset(src, rv, dim, r, j)]));
      double sum = 0;
      for (int64_t j = 0; j < rv.n; ++j)
        sum += std::exp(static_cast<double>(s[row_offset(src, rv, dim, r, j)]) - mx);
      const double lse = mx + std::log(sum);
      for (int64_t j = 0; j < rv.n; ++j) {
        const double x = static_cast<double>(s[row_offset(src, rv, dim, r, j)]);
        d[row_offset(dst, rv, dim, r, j)] = static_cast<T>(log ? x - lse : std::exp(x - lse));
      }
    }
  });
}

void RefBackend::softmax_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& dst, int dim,
                                  bool log) {
  count_ref_kernel(__func__);
  dispatch_float(dsrc.dtype(), "softmax backward", [&](auto t) {
    using T = decltype(t);
    const RowView rv(dst.shape(), dim);
    const T* y = ptr<T>(dst);
    const T* g = ptr<T>(ddst);
    T* gi = ptr<T>(dsrc);
    for (int64_t r = 0; r < rv.rows(); ++r) {
      double dot = 0;
      for (int64_t j = 0; j < rv.n; ++j) {
        const double gj = static_cast<double>(g[row_offset(ddst, rv, dim, r, j)]);
        dot += log ? gj : gj * static_cast<double>(y[row_offset(dst, rv, dim, r, j)]);
      }
      for (int64_t j = 0; j < rv.n; ++j) {
        const double gj = static_cast<double>(g[row_offset(ddst, rv, dim, r, j)]);
        const double yj = static_cast<double>(y[row_offset(dst, rv, dim, r, j)]);
        // softmax: y (g - sum g y);  log_softmax: g - exp(y) sum g
        gi[row_offset(dsrc, rv, dim, r, j)] =
            static_cast<T>(log ? gj - std::exp(yj) * dot : yj * (gj - dot));
      }
    }
  });
}

void RefBackend::batch_norm(Tensor& dst, Tensor& save_mean, Tensor& save_invstd,
                            Tensor& running_mean, Tensor& running_var, const Tensor& src,
                            const Tensor& weight, const Tensor& bias, bool training,
                            double momentum, double eps) {
  count_ref_kernel(__func__);
  dispatch_float(dst.dtype(), "batch_norm", [&](auto t) {
    using T = decltype(t);
    const int64_t N = src.shape()[0], C = src.shape()[1];
    const int64_t S = C ? src.numel() / (N * C) : 0;  // spatial size
    auto idx = [&](int64_t n, int64_t c, int64_t s) { return (n * C + c) * S + s; };
    auto at = [](const Tensor& x, int64_t i) {
      return static_cast<double>(ptr<T>(x)[x.is_contiguous() ? i : offset_of(x, i)]);
    };
    for (int64_t c = 0; c < C; ++c) {
      double m, invstd;
      if (training) {
        double sum = 0, sq = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t s = 0; s < S; ++s) sum += at(src, idx(n, c, s));
        const double cnt = static_cast<double>(N * S);
        m = sum / cnt;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t s = 0; s < S; ++s) {
            const double x = at(src, idx(n, c, s)) - m;
            sq += x * x;
          }
        const double var = sq / cnt;
        invstd = 1.0 / std::sqrt(var + eps);
        ptr<T>(save_mean)[c] = static_cast<T>(m);
        ptr<T>(save_invstd)[c] = static_cast<T>(invstd);
        if (running_mean.defined()) {
          T* rm = ptr<T>(running_mean);
          rm[c] = static_cast<T>((1 - momentum) * static_cast<double>(rm[c]) + momentum * m);
        }
        if (running_var.defined()) {
          T* rv = ptr<T>(running_var);
          const double unbiased = cnt > 1 ? sq / (cnt - 1) : var;
          rv[c] = static_cast<T>((1 - momentum) * static_cast<double>(rv[c]) + momentum * unbiased);
        }
      } else {
        m = at(running_mean, c);
        invstd = 1.0 / std::sqrt(at(running_var, c) + eps);
      }
      const double w = weight.defined() ? at(weight, c) : 1.0;
      const double b = bias.defined() ? at(bias, c) : 0.0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s)
          ptr<T>(dst)[idx(n, c, s)] = static_cast<T>((at(src, idx(n, c, s)) - m) * invstd * w + b);
    }
  });
}

void RefBackend::batch_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias,
                                     const Tensor& ddst, const Tensor& src, const Tensor& weight,
                                     const Tensor& save_mean, const Tensor& save_invstd) {
  count_ref_kernel(__func__);
  dispatch_float(dsrc.dtype(), "batch_norm backward", [&](auto t) {
    using T = decltype(t);
    const int64_t N = src.shape()[0], C = src.shape()[1];
    const int64_t S = C ? src.numel() / (N * C) : 0;
    auto idx = [&](int64_t n, int64_t c, int64_t s) { return (n * C + c) * S + s; };
    auto at = [](const Tensor& x, int64_t i) {
      return static_cast<double>(ptr<T>(x)[x.is_contiguous() ? i : offset_of(x, i)]);
    };
    const double cnt = static_cast<double>(N * S);
    for (int64_t c = 0; c < C; ++c) {
      const double m = at(save_mean, c), invstd = at(save_invstd, c);
      const double w = weight.defined() ? at(weight, c) : 1.0;
      double sum_g = 0, sum_g_xhat = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const double g = at(ddst, idx(n, c, s));
          sum_g += g;
          sum_g_xhat += g * (at(src, idx(n, c, s)) - m) * invstd;
        }
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const double xhat = (at(src, idx(n, c, s)) - m) * invstd;
          const double g = at(ddst, idx(n, c, s));
          ptr<T>(dsrc)[idx(n, c, s)] =
              static_cast<T>(w * invstd * (g - sum_g / cnt - xhat * sum_g_xhat / cnt));
        }
      if (dweight.defined()) ptr<T>(dweight)[c] = static_cast<T>(sum_g_xhat);
      if (dbias.defined()) ptr<T>(dbias)[c] = static_cast<T>(sum_g);
    }
  });
}

namespace {
int64_t target_at(const Tensor& targets, int64_t i) {
  return index_at(targets, i, "mixp backend: class indices");
}
// loss [] = mean_n (lse_n - x_n[t_n]) and lse [N] over the first `classes` columns of each row of
// logits [N, C >= classes] (any strides, loss's dtype), in double: cross_entropy (classes = C) and
// the fused classifier's forward share it.
void cross_entropy_rows(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& targets,
                        int64_t classes, const char* op) {
  dispatch_float(loss.dtype(), op, [&](auto t) {
    using T = decltype(t);
    const int64_t N = logits.shape()[0];
    auto at = [&](int64_t n, int64_t c) {
      return static_cast<double>(ptr<T>(logits)[n * logits.strides()[0] + c * logits.strides()[1]]);
    };
    double total = 0;
    for (int64_t n = 0; n < N; ++n) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, at(n, c));
      double s = 0;
      for (int64_t c = 0; c < classes; ++c) s += std::exp(at(n, c) - mx);
      const double l = mx + std::log(s);
      ptr<T>(lse)[n] = static_cast<T>(l);
      const int64_t tgt = target_at(targets, n);
      if (tgt < 0 || tgt >= classes)
        throw std::out_of_range("mixp::" + std::string(op) + ": target " + std::to_string(tgt) +
                                " out of [0, " + std::to_string(classes) + ")");
      total += l - at(n, tgt);
    }
    ptr<T>(loss)[0] = static_cast<T>(N ? total / static_cast<double>(N) : 0.0);
  });
}
}  // namespace

void RefBackend::cross_entropy(Tensor& loss, Tensor& lse, const Tensor& logits,
                               const Tensor& targets) {
  count_ref_kernel(__func__);
  cross_entropy_rows(loss, lse, logits, targets, logits.shape()[1], "cross_entropy");
}

void RefBackend::cross_entropy_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                                        const Tensor& targets, const Tensor& lse) {
  count_ref_kernel(__func__);
  dispatch_float(dlogits.dtype(), "cross_entropy backward", [&](auto t) {
    using T = decltype(t);
    const int64_t N = logits.shape()[0], C = logits.shape()[1];
    const double g = static_cast<double>(ptr<T>(dloss)[0]) / static_cast<double>(N);
    for (int64_t n = 0; n < N; ++n) {
      const double l = static_cast<double>(ptr<T>(lse)[n]);
      const int64_t tgt = target_at(targets, n);
      for (int64_t c = 0; c < C; ++c) {
        const double x =
            static_cast<double>(ptr<T>(logits)[n * logits.strides()[0] + c * logits.strides()[1]]);
        const double p = std::exp(x - l);
        ptr<T>(dlogits)[n * C + c] = static_cast<T>(g * (p - (c == tgt ? 1.0 : 0.0)));
      }
    }
  });
}

// The fused classifier: cross_entropy over the first `classes` columns of [N, Cp] logits, its
// backward written over the logits (backend.h). 16-bit logits are widened to fp32 first (exact).
void RefBackend::cross_entropy_in_place(Tensor& loss, Tensor& lse, const Tensor& logits,
                                        const Tensor& targets, int64_t classes) {
  count_ref_kernel(__func__);
  cross_entropy_rows(loss, lse, widen(*this, logits, DType::fp32), targets, classes,
                     "cross_entropy_in_place");
}

void RefBackend::cross_entropy_in_place_backward(Tensor& dlogits, const Tensor& dloss,
                                                 const Tensor& targets, const Tensor& lse,
                                                 int64_t classes) {
  count_ref_kernel(__func__);
  const DType c = is_narrow(dlogits.dtype()) ? DType::fp32 : dlogits.dtype();
  with_dst_as(*this, dlogits, c, /*read_dst=*/true, [&](Tensor& d) {
    dispatch_float(c, "cross_entropy_in_place backward", [&](auto t) {
      using T = decltype(t);
      const int64_t N = d.shape()[0], Cp = d.shape()[1];
      const double g = static_cast<double>(ptr<T>(dloss)[0]) / static_cast<double>(N);
      for (int64_t n = 0; n < N; ++n) {
        const double l = static_cast<double>(ptr<T>(lse)[n]);
        const int64_t tgt = target_at(targets, n);
        T* row = ptr<T>(d) + n * Cp;
        for (int64_t j = 0; j < Cp; ++j) {
          const double p = j < classes ? std::exp(static_cast<double>(row[j]) - l) : 0.0;
          row[j] = j < classes ? static_cast<T>(g * (p - (j == tgt ? 1.0 : 0.0))) : T(0);
        }
      }
    });
  });
}

}  // namespace mixp
