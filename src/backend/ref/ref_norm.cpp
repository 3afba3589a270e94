// Ref backend: the normalization family (LayerNorm, its backward and its 16-bit save; RMSNorm and
// its backward), plain row loops accumulating in double over the family's scalar math
// (backend/math/norm_math.h, which the cuda kernels run in fp32: src/backend/cuda/cuda_norm.cu).
// The oracle of the cpu kernels (src/backend/cpu/cpu_norm.cpp). LayerNorm reads strided inputs;
// RMSNorm's inputs are contiguous (the op front ends in src/ops/rms_norm_ops.cpp make them so).
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/kernel_util.h"
#include "backend/math/norm_math.h"
#include "backend/ref/ref_backend.h"
#include "mixp/tensor/element.h"

namespace mixp {
using namespace kern;

namespace {
void require_contiguous(std::initializer_list<const Tensor*> ts, const char* op) {
  for (const Tensor* t : ts) {
    if (t->defined() && !t->is_contiguous())
      throw std::logic_error(std::string("mixp: ") + op + " needs contiguous tensors");
  }
}
// The ref's row walk: one thread, so a row's total is its own sum.
constexpr auto kOneThread = [](double v) { return v; };
SerialRow one_row(int64_t n) { return SerialRow{n}; }
}  // namespace

void RefBackend::layer_norm(Tensor& dst, Tensor& mean, Tensor& rstd, const Tensor& src,
                            const Tensor& weight, const Tensor& bias, double eps) {
  count_ref_kernel(__func__);
  dispatch_float(dst.dtype(), "layer_norm", [&](auto t) {
    using T = decltype(t);
    const int64_t rows = mean.numel();
    const int64_t n = rows ? src.numel() / rows : 0;
    const T* s = ptr<T>(src);
    T* d = ptr<T>(dst);
    const T* w = weight.defined() ? ptr<T>(weight) : nullptr;
    const T* b = bias.defined() ? ptr<T>(bias) : nullptr;
    const bool sc = src.is_contiguous();
    const bool wc = weight.defined() && weight.is_contiguous();
    const bool bc = bias.defined() && bias.is_contiguous();
    auto wj = [&](int64_t j) { return static_cast<double>(w[wc ? j : offset_of(weight, j)]); };
    auto bj = [&](int64_t j) { return static_cast<double>(b[bc ? j : offset_of(bias, j)]); };
    for (int64_t r = 0; r < rows; ++r) {
      auto x = [&](int64_t j) {
        return static_cast<double>(s[sc ? r * n + j : offset_of(src, r * n + j)]);
      };
      auto y = [&](int64_t j, double v) { d[r * n + j] = static_cast<T>(v); };
      double m = 0, rs = 0;
      layer_norm_row(one_row(n), eps, x, w != nullptr, wj, b != nullptr, bj, y, kOneThread, m,
                     rs);
      ptr<T>(mean)[r] = static_cast<T>(m);
      ptr<T>(rstd)[r] = static_cast<T>(rs);
    }
  });
}

void RefBackend::layer_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias,
                                     const Tensor& ddst, const Tensor& src, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd) {
  count_ref_kernel(__func__);
  dispatch_float(dsrc.dtype(), "layer_norm backward", [&](auto t) {
    using T = decltype(t);
    const int64_t rows = mean.numel();
    const int64_t n = rows ? src.numel() / rows : 0;
    auto at = [](const Tensor& x, int64_t i) {
      return static_cast<double>(ptr<T>(x)[x.is_contiguous() ? i : offset_of(x, i)]);
    };
    std::vector<double> dw(static_cast<size_t>(n), 0.0), db(static_cast<size_t>(n), 0.0);
    auto wj = [&](int64_t j) { return at(weight, j); };
    auto params = [&](int64_t j, double pw, double pb) {
      dw[static_cast<size_t>(j)] += pw;
      db[static_cast<size_t>(j)] += pb;
    };
    for (int64_t r = 0; r < rows; ++r) {
      auto x = [&](int64_t j) { return at(src, r * n + j); };
      auto g = [&](int64_t j) { return at(ddst, r * n + j); };
      auto dx = [&](int64_t j, double v) { ptr<T>(dsrc)[r * n + j] = static_cast<T>(v); };
      layer_norm_backward_row(one_row(n), at(mean, r), at(rstd, r), x, g, weight.defined(), wj,
                              params, dx, kOneThread);
    }
    if (dweight.defined())
      for (int64_t j = 0; j < n; ++j)
        ptr<T>(dweight)[j] = static_cast<T>(dw[static_cast<size_t>(j)]);
    if (dbias.defined())
      for (int64_t j = 0; j < n; ++j) ptr<T>(dbias)[j] = static_cast<T>(db[static_cast<size_t>(j)]);
  });
}

void RefBackend::layer_norm_xhat(Tensor& dst, const Tensor& src, const Tensor& mean,
                                 const Tensor& rstd) {
  if (!src.is_contiguous() || !dst.is_contiguous())
    throw std::logic_error("mixp: layer_norm_xhat needs contiguous src and dst");
  const int64_t rows = mean.numel(), n = rows ? src.numel() / rows : 0;
  const float* x = kern::ptr<const float>(src);
  const float* m = kern::ptr<const float>(mean);
  const float* r = kern::ptr<const float>(rstd);
  for (int64_t i = 0; i < rows * n; ++i) {
    // in fp32, then one rounding to dst's dtype
    const float v = kern::layer_norm_xhat(x[i], m[i / n], r[i / n]);
    store_element(dst.data_ptr(), dst.dtype(), i, v, Round::nearest_even, Overflow::ieee, 0);
  }
}

void RefBackend::rms_norm(Tensor& dst, Tensor& rstd, const Tensor& src, const Tensor& weight,
                          double eps) {
  count_ref_kernel(__func__);
  require_contiguous({&dst, &rstd, &src, &weight}, "rms_norm");
  dispatch_float(dst.dtype(), "rms_norm", [&](auto t) {
    using T = decltype(t);
    const int64_t rows = rstd.numel();
    const int64_t n = rows ? src.numel() / rows : 0;
    const T* s = ptr<T>(src);
    const T* w = weight.defined() ? ptr<T>(weight) : nullptr;
    T* d = ptr<T>(dst);
    auto wj = [&](int64_t j) { return double(w[j]); };
    for (int64_t r = 0; r < rows; ++r) {
      auto x = [&](int64_t j) { return double(s[r * n + j]); };
      auto y = [&](int64_t j, double v) { d[r * n + j] = static_cast<T>(v); };
      double rs = 0;
      rms_norm_row(one_row(n), eps, x, w != nullptr, wj, y, kOneThread, rs);
      ptr<T>(rstd)[r] = static_cast<T>(rs);
    }
  });
}

void RefBackend::rms_norm_backward(Tensor& dsrc, Tensor& dweight, const Tensor& ddst,
                                   const Tensor& src, const Tensor& weight, const Tensor& rstd) {
  count_ref_kernel(__func__);
  require_contiguous({&dsrc, &dweight, &ddst, &src, &weight, &rstd}, "rms_norm_backward");
  dispatch_float(dsrc.dtype(), "rms_norm backward", [&](auto t) {
    using T = decltype(t);
    const int64_t rows = rstd.numel();
    const int64_t n = rows ? src.numel() / rows : 0;
    const T* s = ptr<T>(src);
    const T* g = ptr<T>(ddst);
    const T* w = weight.defined() ? ptr<T>(weight) : nullptr;
    std::vector<double> dw(static_cast<size_t>(n), 0.0);
    auto wj = [&](int64_t j) { return double(w[j]); };
    auto params = [&](int64_t j, double pw) { dw[static_cast<size_t>(j)] += pw; };
    for (int64_t r = 0; r < rows; ++r) {
      auto x = [&](int64_t j) { return double(s[r * n + j]); };
      auto gj = [&](int64_t j) { return double(g[r * n + j]); };
      auto dx = [&](int64_t j, double v) { ptr<T>(dsrc)[r * n + j] = static_cast<T>(v); };
      rms_norm_backward_row(one_row(n), double(ptr<T>(rstd)[r]), x, gj, w != nullptr, wj, params,
                            dx, kOneThread);
    }
    if (dweight.defined())
      for (int64_t j = 0; j < n; ++j) ptr<T>(dweight)[j] = static_cast<T>(dw[size_t(j)]);
  });
}

}  // namespace mixp
