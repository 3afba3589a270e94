// RefBackend's RMSNorm and rotary embedding (backend.h): plain row loops accumulating in double,
// the oracle of the cpu kernels (src/backend/cpu/cpu_rms_norm.cpp). Inputs are contiguous (the
// op front ends in src/ops/rms_norm_ops.cpp make them so).
#include <cmath>
#include <stdexcept>
#include <vector>

#include "backend/kernel_util.h"
#include "backend/ref/ref_backend.h"

namespace mixp {
using namespace kern;

namespace {
void require_contiguous(std::initializer_list<const Tensor*> ts, const char* op) {
  for (const Tensor* t : ts) {
    if (t->defined() && !t->is_contiguous())
      throw std::logic_error(std::string("mixp: ") + op + " needs contiguous tensors");
  }
}
}  // namespace

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
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += double(s[r * n + j]) * double(s[r * n + j]);
      const double rs = 1.0 / std::sqrt(ss / double(n) + eps);
      for (int64_t j = 0; j < n; ++j) {
        double y = double(s[r * n + j]) * rs;
        if (w) y *= double(w[j]);
        d[r * n + j] = static_cast<T>(y);
      }
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
    for (int64_t r = 0; r < rows; ++r) {
      const double rs = double(ptr<T>(rstd)[r]);
      // y = x rs w;  dx = rs (dxhat - xhat mean(dxhat xhat)) with xhat = x rs, dxhat = g w.
      double dot = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double xhat = double(s[r * n + j]) * rs;
        const double gj = double(g[r * n + j]);
        dot += (w ? gj * double(w[j]) : gj) * xhat;
        dw[static_cast<size_t>(j)] += gj * xhat;
      }
      dot /= double(n);
      for (int64_t j = 0; j < n; ++j) {
        const double xhat = double(s[r * n + j]) * rs;
        const double gj = double(g[r * n + j]);
        const double dxhat = w ? gj * double(w[j]) : gj;
        ptr<T>(dsrc)[r * n + j] = static_cast<T>(rs * (dxhat - xhat * dot));
      }
    }
    if (dweight.defined())
      for (int64_t j = 0; j < n; ++j) ptr<T>(dweight)[j] = static_cast<T>(dw[size_t(j)]);
  });
}

void RefBackend::rope(Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin,
                      bool inverse) {
  count_ref_kernel(__func__);
  require_contiguous({&dst, &src, &cos, &sin}, "rope");
  dispatch_float(dst.dtype(), "rope", [&](auto t) {
    using T = decltype(t);
    const int64_t T_ = src.size(1), H = src.size(2), D = src.size(3), h = D / 2;
    const int64_t rows = src.numel() / D;
    const T* s = ptr<T>(src);
    T* d = ptr<T>(dst);
    const double sgn = inverse ? -1.0 : 1.0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pos = (r / H) % T_;
      const T* c = ptr<T>(cos) + pos * h;
      const T* sn = ptr<T>(sin) + pos * h;
      for (int64_t j = 0; j < h; ++j) {
        const double x1 = double(s[r * D + j]), x2 = double(s[r * D + j + h]);
        const double cj = double(c[j]), sj = sgn * double(sn[j]);
        d[r * D + j] = static_cast<T>(x1 * cj - x2 * sj);
        d[r * D + j + h] = static_cast<T>(x2 * cj + x1 * sj);
      }
    }
  });
}

}  // namespace mixp
