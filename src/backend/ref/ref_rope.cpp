// RefBackend's rotary embedding (backend.h): a plain row loop in double, the oracle of the cpu
// kernel (src/backend/cpu/cpu_rope.cpp). Inputs are contiguous (the op front end in
// src/ops/rms_norm_ops.cpp makes them so). RMSNorm is ref_norm.cpp.
#include <cmath>
#include <stdexcept>
#include <utility>

#include "backend/kernel_util.h"
#include "backend/ref/ref_backend.h"

namespace mixp {
using namespace kern;

void RefBackend::rope(Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin,
                      bool inverse) {
  count_ref_kernel(__func__);
  for (const Tensor* x : {&std::as_const(dst), &src, &cos, &sin})
    if (!x->is_contiguous()) throw std::logic_error("mixp: rope needs contiguous tensors");
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
